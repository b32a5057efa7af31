package rmqharness;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.HARuntimeInfo;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The v5-cluster scenario (5.x only, loaded by {@link Harness} by name): a real 5.5.0 cluster, one JVM
 * per process: a name server, broker-a master (ASYNC_MASTER), its slave broker-a-s1 (brokerId 1, SLAVE,
 * replicating through HA from the master address the name server hands it) and broker-b master.
 *
 * <ol>
 *   <li>TopicCluster (4 queues per master) and TopicClusterB (2 per master) created on both masters;
 *       groups G_CAUGHT (push, always succeeds), G_LAG (pull, commits more each snapshot but falls
 *       behind), G_STOPPED (pull, commits once before s1, never again).</li>
 *   <li>before_s1: 600 sends through the name server (seeded plan, queue chosen round robin per topic).
 *       The slave catches up, then it is frozen with SIGSTOP and a burst of 120 ~2.5 KiB messages goes
 *       to broker-a: at s1 the slave lags ~300 KiB behind its master.</li>
 *   <li>s1: consumers quiescent, commits persisted in the masters' consumerOffset.json, admin truth,
 *       hot copies of all three store roots ({@code s1/<broker>/store}); then SIGCONT.</li>
 *   <li>after_s1: 400 more sends; G_LAG commits again; the slave catches up (HA diff 0, commitlog and
 *       consume queues equal to the master's); the slave's next SlaveSynchronize round (every 60 s on
 *       5.5.0; its consumer-offset part fails there, apache/rocketmq#10284) is waited for; admin truth for
 *       s2; clients stop; every broker gets SIGTERM.
 *       {@code s2/<broker>/store} are the live store roots after that clean shutdown.</li>
 * </ol>
 */
final class ClusterWorkload implements Harness.ClusterScenario {
    static final String CLUSTER = "RmqCluster";
    static final String A = "broker-a";
    static final String A_SLAVE = "broker-a-s1";
    static final String B = "broker-b";
    static final String T_CLUSTER = "TopicCluster";
    static final String T_CLUSTER_B = "TopicClusterB";
    static final String G_CAUGHT = "G_CAUGHT";
    static final String G_LAG = "G_LAG";
    static final String G_STOPPED = "G_STOPPED";
    static final List<String> GROUPS = List.of(G_CAUGHT, G_LAG, G_STOPPED);
    static final List<String> SNAPSHOTS = List.of("s1", "s2");
    static final long SEED = 20240613L;
    static final int N_BEFORE_S1 = 600;
    static final int N_BURST = 120;
    static final int N_AFTER_S1 = 400;
    /** The burst must leave the frozen slave at least this far behind. */
    static final long MIN_LAG_BYTES = 200 * 1024;
    /**
     * haHousekeepingInterval of every broker of this variant (default 20 000): a master closes an HA
     * connection whose slave has not reported for this long. The slave stays frozen for ~10 s (burst,
     * consumers, the 5 s offset flush, copies), more on a loaded machine; 60 s keeps the connection.
     */
    static final int HA_HOUSEKEEPING_MS = 60_000;
    /** 5.5.0 SlaveSynchronize.syncAll runs when 60 s passed since the last one (first: 60 s after start). */
    static final long SLAVE_SYNC_WAIT_MS = 150_000;
    static final String[] TAGS = {"TagA", "TagB", "TagC", null};
    static final int MAGIC_V1 = 0xdaa320a7;
    static final int MAGIC_V2 = 0xdaa320ab;
    static final int BLANK_MAGIC = 0xcbd43194;
    static final int COMMITLOG_FILE_SIZE = 1024 * 1024;
    static final int QUERY_NOT_FOUND = 22;

    /** Queues per master. */
    static Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(T_CLUSTER, 4);
        t.put(T_CLUSTER_B, 2);
        return t;
    }

    static Map<String, List<String>> subscriptions() {
        Map<String, List<String>> m = new LinkedHashMap<>();
        m.put(G_CAUGHT, List.of(T_CLUSTER, T_CLUSTER_B));
        m.put(G_LAG, List.of(T_CLUSTER, T_CLUSTER_B));
        m.put(G_STOPPED, List.of(T_CLUSTER));
        return m;
    }

    /** One broker JVM. */
    static final class Node {
        final String name;
        final String brokerName;
        final int brokerId;
        final String master;
        int port;
        String addr;
        Path root;
        Map<String, String> conf;
        Process proc;

        Node(String name, String brokerName, int brokerId, String master) {
            this.name = name;
            this.brokerName = brokerName;
            this.brokerId = brokerId;
            this.master = master;
        }

        boolean slave() {
            return master != null;
        }
    }

    final Harness h;
    final Random rnd = new Random(SEED);
    final Map<String, Node> nodes = new LinkedHashMap<>();
    final List<Map<String, Object>> sent = Collections.synchronizedList(new ArrayList<>());
    final Set<String> caughtSeen = ConcurrentHashMap.newKeySet();
    final Map<String, Integer> roundRobin = new HashMap<>();
    /** G_LAG: "topic/brokerName/queueId" -> {committed offset, queue max offset at that commit}. */
    final Map<String, long[]> lagOffsets = new HashMap<>();
    final Map<String, Long> stoppedOffsets = new HashMap<>();
    final List<Map<String, Object>> commits = new ArrayList<>();
    final Map<String, Map<String, Object>> snapshots = new LinkedHashMap<>();
    final Map<String, Object> clusterInfo = new LinkedHashMap<>();
    final Map<String, List<Map<String, Object>>> consumeStats = new LinkedHashMap<>();
    final Map<String, List<Map<String, Object>>> progress = new LinkedHashMap<>();
    final Map<String, List<Map<String, Object>>> brokerOffsets = new LinkedHashMap<>();
    final Map<String, List<Map<String, Object>>> consumerOffsets = new LinkedHashMap<>();
    final Map<String, Map<String, Object>> ha = new LinkedHashMap<>();
    final Map<String, Object> notes = new LinkedHashMap<>();
    final List<String> notPossible = new ArrayList<>();
    final Map<String, Object> effectiveConfig = new LinkedHashMap<>();
    final Map<String, Object> shutdown = new LinkedHashMap<>();
    final Map<String, Object> slaveSync = new LinkedHashMap<>();
    Map<String, Object> beforePause = new LinkedHashMap<>();
    Map<String, String> nsConf;
    String nsAddr;
    int nsPort;
    Process namesrv;
    Workload wl;
    DefaultMQAdminExt admin;
    MQClientAPIImpl api;
    DefaultMQProducer producer;
    DefaultMQPushConsumer cCaught;
    DefaultMQPullConsumer cLag;
    DefaultMQPullConsumer cStopped;
    int seq;
    Long slaveLagBytesAtS1;
    boolean slaveCaughtUpAtS2;

    ClusterWorkload(Harness h) {
        this.h = h;
        nodes.put(A, new Node(A, A, 0, null));
        nodes.put(A_SLAVE, new Node(A_SLAVE, A, 1, A));
        nodes.put(B, new Node(B, B, 0, null));
    }

    Node node(String name) {
        return nodes.get(name);
    }

    List<Node> masters() {
        List<Node> l = new ArrayList<>();
        for (Node n : nodes.values()) {
            if (!n.slave()) {
                l.add(n);
            }
        }
        return l;
    }

    // =================================================================== flow

    @Override
    public void run(Map<String, Object> run) throws Exception {
        startProcesses(run);
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(h.loopback);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        api = admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl();
        wl = new Workload(h, nsAddr, node(A).addr, rnd);
        wl.admin = admin;

        waitSlaveConnected();
        h.mark("slaveConnected");
        for (Node n : nodes.values()) {
            effectiveConfig.put(n.name, effectiveConfig(n));
        }
        createTopics();
        h.mark("topicsCreated");
        startClients();
        h.mark("clientsStarted");

        produce("before_s1", N_BEFORE_S1, false);
        h.mark("producedBeforeS1");
        waitCaughtUp("the pause");
        h.mark("caughtBeforePause");
        beforePause = waitSlaveCaughtUp("before the pause", 60_000);
        // the frozen slave answers nothing: its s1 queue offsets are the ones it had when it was frozen
        beforePause.put("brokerOffsets", brokerOffsetRows(node(A_SLAVE)));
        beforePause.put("runtime", runtime(node(A_SLAVE)));
        beforePause.put("masterHa", haInfo(node(A)));
        h.mark("slaveCaughtUpBeforePause");

        Map<String, Object> s1 = new LinkedHashMap<>();
        snapshots.put("s1", s1);
        s1.put("snapshot", "s1");
        s1.put("slavePaused", true);
        s1.put("pauseSignalMs", System.currentTimeMillis());
        signal(node(A_SLAVE), "STOP");
        s1.put("pausedSeenMs", waitProcessState(node(A_SLAVE), 'T', 10_000));
        h.mark("slavePaused");
        produce("burst", N_BURST, true);
        h.mark("burstProduced");
        prepareSnapshot("s1", s1);
        copyAll("s1", s1);
        s1.put("masterHaAfterCopy", haInfo(node(A)));
        signal(node(A_SLAVE), "CONT");
        s1.put("resumeSignalMs", System.currentTimeMillis());
        s1.put("pauseDurationMs", (Long) s1.get("resumeSignalMs") - (Long) s1.get("pauseSignalMs"));
        s1.put("haConnectionsAcceptedByMasterUntilResume", haAccepts());
        h.mark("slaveResumed");

        produce("after_s1", N_AFTER_S1, false);
        h.mark("producedAfterS1");
        Map<String, Object> s2 = new LinkedHashMap<>();
        snapshots.put("s2", s2);
        s2.put("snapshot", "s2");
        s2.put("slavePaused", false);
        prepareSnapshot("s2", s2);
        s2.put("haConnectionsAcceptedByMaster", haAccepts());
        stopAll(s2);
        describeStores("s2", s2);
    }

    // =================================================================== processes

    void startProcesses(Map<String, Object> run) throws Exception {
        String lb = h.loopback;
        Set<Integer> taken = new HashSet<>();
        nsPort = Harness.freePort(lb, 0, 0, taken);
        taken.add(nsPort);
        nsAddr = Harness.hostPort(lb, nsPort);
        for (Node n : nodes.values()) {
            n.port = Harness.freePort(lb, 2, 1, taken);
            for (int p = n.port - 2; p <= n.port + 1; p++) {
                taken.add(p);
            }
            n.addr = Harness.hostPort(lb, n.port);
            n.root = h.out.resolve("s2").resolve(n.name).resolve("store");
            Files.createDirectories(n.root);
        }

        nsConf = new LinkedHashMap<>();
        nsConf.put("listenPort", String.valueOf(nsPort));
        nsConf.put("bindAddress", lb);
        nsConf.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        nsConf.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        nsConf.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        nsConf.put("scanAvailableNameSrv", "false");
        Path nsFile = h.work.resolve("namesrv.conf");
        Harness.writeProperties(nsFile, nsConf);
        Files.copy(nsFile, h.logs.resolve("namesrv.conf"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_namesrv.xml"), h.logs.resolve("namesrv.log"));

        for (Node n : nodes.values()) {
            Map<String, String> c = h.brokerConfig(nsAddr, n.port);
            c.put("brokerClusterName", CLUSTER);
            c.put("brokerName", n.brokerName);
            c.put("brokerId", String.valueOf(n.brokerId));
            c.put("brokerRole", n.slave() ? "SLAVE" : "ASYNC_MASTER");
            c.put("storePathRootDir", n.root.toString());
            c.put("storePathCommitLog", n.root.resolve("commitlog").toString());
            c.put("haHousekeepingInterval", String.valueOf(HA_HOUSEKEEPING_MS));
            n.conf = c;
            Path f = h.work.resolve(n.name + ".conf");
            Harness.writeProperties(f, c);
            Files.copy(f, h.logs.resolve(n.name + ".conf"));
            Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_" + n.name + ".xml"),
                h.logs.resolve(n.name + ".log"));
        }

        namesrv = h.startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "128m",
            List.of("-c", nsFile.toString()));
        h.addChild(namesrv);
        h.waitForLine("namesrv", namesrv, h.logs.resolve("namesrv.out"), "boot success", 60);
        h.mark("namesrvStarted");
        // both masters at once; the slave only once broker-a has registered: the name server hands the
        // slave its master's HA address in the answer to the slave's own registration (a slave registering
        // first would learn it only at its next registration, 30 s later)
        for (String name : List.of(A, B)) {
            startBroker(node(name));
        }
        for (String name : List.of(A, B)) {
            Node n = node(name);
            h.waitForLine(n.name, n.proc, h.logs.resolve(n.name + ".out"), "boot success", 120);
        }
        h.mark("mastersStarted");
        Node s = node(A_SLAVE);
        startBroker(s);
        h.waitForLine(s.name, s.proc, h.logs.resolve(s.name + ".out"), "boot success", 120);
        h.mark("slaveStarted");

        run.put("variant", h.variant);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", "clean");
        run.put("scenario", "cluster");
        run.put("javaVersion", System.getProperty("java.version"));
        Map<String, Object> ports = new LinkedHashMap<>();
        ports.put("namesrv", nsPort);
        for (Node n : nodes.values()) {
            Map<String, Object> p = new LinkedHashMap<>();
            p.put("listen", n.port);
            p.put("fast", n.port - 2);
            p.put("ha", n.port + 1);
            ports.put(n.name, p);
        }
        run.put("ports", ports);
        run.put("namesrvAddr", nsAddr);
        Map<String, Object> addrs = new LinkedHashMap<>();
        Map<String, Object> pids = new LinkedHashMap<>();
        Map<String, Object> confs = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            addrs.put(n.name, n.addr);
            pids.put(n.name, n.proc.pid());
            confs.put(n.name, n.conf);
        }
        pids.put("namesrv", namesrv.pid());
        run.put("brokerAddrs", addrs);
        run.put("pids", pids);
        run.put("clusterName", CLUSTER);
        run.put("brokerConfigs", confs);
        run.put("namesrvConfig", nsConf);
        run.put("childJvmOptions", Harness.ADD_OPENS);
        Map<String, Object> roots = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            roots.put(n.name, n.root.toString());
        }
        run.put("storePathsAtGeneration", roots);
    }

    void startBroker(Node n) throws IOException {
        n.proc = h.startJvm(n.name, "org.apache.rocketmq.broker.BrokerStartup", "512m",
            List.of("-c", h.work.resolve(n.name + ".conf").toString()));
        h.addChild(n.proc);
    }

    /** kill -SIG pid (the JVM is our child; SIGSTOP/SIGCONT have no Java API). */
    void signal(Node n, String sig) throws Exception {
        long pid = n.proc.pid();
        Process k = new ProcessBuilder("/bin/sh", "-c", "kill -" + sig + " " + pid).redirectErrorStream(true).start();
        if (!k.waitFor(10, TimeUnit.SECONDS) || k.exitValue() != 0) {
            String out = new String(k.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            throw new Harness.HarnessError("kill -" + sig + " " + pid + " (" + n.name + ") failed: " + out);
        }
        Harness.log("sent SIG" + sig + " to " + n.name + " (pid " + pid + ")");
    }

    /** Waits until /proc/PID/stat shows the state (T = stopped); returns when it was seen. */
    long waitProcessState(Node n, char state, long timeoutMs) throws Exception {
        Path stat = Path.of("/proc", String.valueOf(n.proc.pid()), "stat");
        long end = System.currentTimeMillis() + timeoutMs;
        char seen = '?';
        while (System.currentTimeMillis() < end) {
            String s = Files.readString(stat, StandardCharsets.ISO_8859_1);
            seen = s.charAt(s.lastIndexOf(')') + 2);
            if (seen == state) {
                return System.currentTimeMillis();
            }
            Thread.sleep(20);
        }
        throw new Harness.HarnessError(n.name + " did not reach process state " + state + " (last " + seen + ")");
    }

    /** Lines of the master's log for accepted HA connections (a reconnect of the slave adds one). */
    int haAccepts() throws IOException {
        Path log = h.logs.resolve(A + ".log");
        if (!Files.exists(log)) {
            return -1;
        }
        int n = 0;
        for (String line : Files.readAllLines(log, StandardCharsets.ISO_8859_1)) {
            if (line.contains("HAService receive new connection")) {
                n++;
            }
        }
        return n;
    }

    // =================================================================== admin helpers

    Map<String, Object> runtime(Node n) {
        Map<String, Object> m = new TreeMap<>();
        try {
            m.putAll(Compat.runtimeStats(admin, n.addr));
            m.put("fetchedMs", System.currentTimeMillis());
        } catch (Exception e) {
            m.put("error", e.getClass().getName() + ": " + e.getMessage());
        }
        return m;
    }

    static Long runtimeLong(Map<String, Object> rt, String key) {
        Object v = rt.get(key);
        try {
            return v == null ? null : Long.parseLong(String.valueOf(v));
        } catch (NumberFormatException e) {
            return null;
        }
    }

    Map<String, Object> haInfo(Node n) throws Exception {
        HARuntimeInfo info = admin.getBrokerHAStatus(n.addr);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("broker", n.name);
        m.put("fetchedMs", System.currentTimeMillis());
        m.put("master", info.isMaster());
        m.put("masterCommitLogMaxOffset", info.getMasterCommitLogMaxOffset());
        m.put("inSyncSlaveNums", info.getInSyncSlaveNums());
        List<Map<String, Object>> conns = new ArrayList<>();
        if (info.getHaConnectionInfo() != null) {
            for (HARuntimeInfo.HAConnectionRuntimeInfo c : info.getHaConnectionInfo()) {
                Map<String, Object> cm = new LinkedHashMap<>();
                cm.put("slaveAddress", c.getAddr());
                cm.put("slaveAckOffset", c.getSlaveAckOffset());
                cm.put("diff", c.getDiff());
                cm.put("inSync", c.isInSync());
                cm.put("transferredByteInSecond", c.getTransferredByteInSecond());
                cm.put("transferFromWhere", c.getTransferFromWhere());
                conns.add(cm);
            }
        }
        m.put("connections", conns);
        HARuntimeInfo.HAClientRuntimeInfo cl = info.getHaClientRuntimeInfo();
        if (cl != null && !info.isMaster()) {
            Map<String, Object> cm = new LinkedHashMap<>();
            cm.put("masterAddr", cl.getMasterAddr());
            cm.put("maxOffset", cl.getMaxOffset());
            cm.put("lastReadTimestamp", cl.getLastReadTimestamp());
            cm.put("lastWriteTimestamp", cl.getLastWriteTimestamp());
            cm.put("transferredByteInSecond", cl.getTransferredByteInSecond());
            cm.put("masterFlushOffset", cl.getMasterFlushOffset());
            m.put("client", cm);
        }
        return m;
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> connections(Map<String, Object> ha) {
        return (List<Map<String, Object>>) ha.get("connections");
    }

    Map<String, Object> effectiveConfig(Node n) {
        Map<String, Object> m = new TreeMap<>();
        try {
            Properties p = admin.getBrokerConfig(n.addr);
            for (String k : List.of("brokerClusterName", "brokerName", "brokerId", "brokerRole", "haListenPort",
                "haMasterAddress", "haHousekeepingInterval", "haSendHeartbeatInterval", "haTransferBatchSize",
                "slaveReadEnable", "enableSlaveActingMaster", "enableControllerMode", "listenPort",
                "flushConsumerOffsetInterval", "mappedFileSizeCommitLog", "storePathRootDir")) {
                m.put(k, p.getProperty(k));
            }
        } catch (Exception e) {
            m.put("error", e.getClass().getName() + ": " + e.getMessage());
        }
        return m;
    }

    void waitSlaveConnected() throws Exception {
        // a slave that missed its master at the first registration retries every 30 s: allow two rounds
        long end = System.currentTimeMillis() + 75_000;
        while (true) {
            Map<String, Object> info = haInfo(node(A));
            if (!connections(info).isEmpty()) {
                notes.put("slaveConnectedAfterMs", System.currentTimeMillis() - h.t0);
                return;
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("slave " + A_SLAVE + " did not open an HA connection to " + A
                    + " within 75 s (see logs/" + A_SLAVE + ".log)");
            }
            h.checkDeadline("waiting for the slave's HA connection");
            Thread.sleep(200);
        }
    }

    void createTopics() throws Exception {
        for (Node m : masters()) {
            for (Map.Entry<String, Integer> e : topics().entrySet()) {
                TopicConfig tc = new TopicConfig(e.getKey());
                tc.setReadQueueNums(e.getValue());
                tc.setWriteQueueNums(e.getValue());
                tc.setPerm(6);
                admin.createAndUpdateTopicConfig(m.addr, tc);
            }
        }
        for (String t : topics().keySet()) {
            waitRoute(t, topics().get(t), true);
        }
    }

    /**
     * Waits until the name server routes {@code topic} to both masters (with {@code queues} queues each
     * unless null) and lists the slave among broker-a's addresses.
     */
    TopicRouteData waitRoute(String topic, Integer queues, boolean withSlave) throws Exception {
        long end = System.currentTimeMillis() + 60_000;
        String last = "";
        while (true) {
            try {
                TopicRouteData r = admin.examineTopicRouteInfo(topic);
                Map<String, BrokerData> bds = new HashMap<>();
                for (BrokerData bd : r.getBrokerDatas()) {
                    bds.put(bd.getBrokerName(), bd);
                }
                Map<String, Integer> qs = new HashMap<>();
                for (QueueData q : r.getQueueDatas()) {
                    qs.put(q.getBrokerName(), q.getWriteQueueNums());
                }
                boolean ok = bds.containsKey(A) && bds.containsKey(B)
                    && node(A).addr.equals(bds.get(A).getBrokerAddrs().get(0L))
                    && node(B).addr.equals(bds.get(B).getBrokerAddrs().get(0L));
                if (withSlave) {
                    ok &= node(A_SLAVE).addr.equals(bds.get(A) == null ? null : bds.get(A).getBrokerAddrs().get(1L));
                }
                if (queues != null) {
                    ok &= queues.equals(qs.get(A)) && queues.equals(qs.get(B));
                }
                if (ok) {
                    return r;
                }
                last = "brokers " + bds.keySet() + ", queues " + qs;
            } catch (Exception e) {
                last = e.toString();
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("no complete route for " + topic + " within 60 s: " + last);
            }
            Thread.sleep(200);
        }
    }

    // =================================================================== clients

    void startClients() throws Exception {
        cCaught = new DefaultMQPushConsumer(G_CAUGHT);
        wl.configureConsumer(cCaught, "c-caught");
        cCaught.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String t : subscriptions().get(G_CAUGHT)) {
            cCaught.subscribe(t, "*");
        }
        cCaught.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                caughtSeen.add(m.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cCaught.start();

        cLag = new DefaultMQPullConsumer(G_LAG);
        wl.configureConsumer(cLag, "c-lag");
        cLag.setRegisterTopics(new HashSet<>(subscriptions().get(G_LAG)));
        cLag.start();

        cStopped = new DefaultMQPullConsumer(G_STOPPED);
        wl.configureConsumer(cStopped, "c-stopped");
        cStopped.setRegisterTopics(new HashSet<>(subscriptions().get(G_STOPPED)));
        cStopped.start();

        // heartbeats create %RETRY%<group> on both masters; examineConsumeStats routes through it
        for (String g : GROUPS) {
            waitRoute(MixAll.getRetryTopic(g), null, false);
        }

        producer = new DefaultMQProducer("PG_CLUSTER");
        wl.configureProducer(producer, "harness-producer");
        producer.start();
    }

    // =================================================================== producing

    /** The topic's queues over both masters, sorted by (brokerName, queueId). */
    static List<MessageQueue> queuesOf(String topic, boolean brokerAOnly) {
        List<MessageQueue> l = new ArrayList<>();
        for (String bn : brokerAOnly ? List.of(A) : List.of(A, B)) {
            for (int q = 0; q < topics().get(topic); q++) {
                l.add(new MessageQueue(topic, bn, q));
            }
        }
        return l;
    }

    static final MessageQueueSelector PLANNED = (mqs, msg, arg) -> {
        for (MessageQueue mq : mqs) {
            if (mq.equals(arg)) {
                return mq;
            }
        }
        throw new IllegalStateException("planned queue " + arg + " not in the route's queues " + mqs);
    };

    /**
     * Seeded plan: 70 % TopicCluster, 30 % TopicClusterB, queue round robin per topic over both masters;
     * tags TagA/TagB/TagC/none, one or two keys, text bodies 200-2 600 bytes (never compressed). The burst:
     * TopicCluster on broker-a only, tag "burst", bodies 2 048-3 071 bytes.
     */
    void produce(String phase, int count, boolean burst) throws Exception {
        int failed = 0;
        for (int i = 0; i < count; i++) {
            String topic = burst || rnd.nextInt(10) < 7 ? T_CLUSTER : T_CLUSTER_B;
            List<MessageQueue> qs = queuesOf(topic, burst);
            String rrKey = topic + (burst ? "/burst" : "");
            int rr = roundRobin.merge(rrKey, 1, Integer::sum) - 1;
            MessageQueue planned = qs.get(rr % qs.size());
            String tags = burst ? "burst" : TAGS[rnd.nextInt(TAGS.length)];
            int n = seq;
            List<String> keys = new ArrayList<>();
            keys.add((burst ? "burst-" : "cl-") + n);
            if (!burst && rnd.nextInt(3) == 0) {
                keys.add("cust-" + rnd.nextInt(17));
            }
            byte[] body = Workload.textWith(rnd, burst ? 2048 + rnd.nextInt(1024) : 200 + rnd.nextInt(2401));
            Message msg = new Message(topic, body);
            if (tags != null) {
                msg.setTags(tags);
            }
            msg.setKeys(keys);
            msg.putUserProperty("seqNo", String.valueOf(n));
            msg.putUserProperty("phase", phase);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("seq", seq++);
            r.put("phase", phase);
            r.put("topic", topic);
            r.put("tags", tags);
            r.put("keys", keys);
            r.put("bodySha256", Workload.sha256(body));
            r.put("bodyLength", body.length);
            r.put("plannedBrokerName", planned.getBrokerName());
            r.put("plannedQueueId", planned.getQueueId());
            long start = System.currentTimeMillis();
            try {
                SendResult res = producer.send(msg, PLANNED, planned);
                wl.fillResult(r, msg, res, start, null, null);
                String om = res.getOffsetMsgId();
                r.put("commitLogOffset", om == null || om.length() < 16 ? null
                    : Long.parseUnsignedLong(om.substring(om.length() - 16), 16));
            } catch (Exception e) {
                wl.fillError(r, msg, e, start, null);
                r.put("commitLogOffset", null);
            }
            if (!Boolean.TRUE.equals(r.get("acked"))) {
                failed++;
            }
            r.put("inSnapshots", phase.equals("after_s1") ? List.of("s2") : List.of("s1", "s2"));
            sent.add(r);
        }
        Harness.log(phase + ": " + count + " sends, " + failed + " not acked");
        if (failed > 0) {
            notes.put("notAcked_" + phase, failed);
        }
        h.checkDeadline("producing " + phase);
    }

    Set<String> ackedIds() {
        Set<String> s = new HashSet<>();
        synchronized (sent) {
            for (Map<String, Object> r : sent) {
                if (Boolean.TRUE.equals(r.get("acked"))) {
                    s.add((String) r.get("msgId"));
                }
            }
        }
        return s;
    }

    // =================================================================== consumers before a snapshot

    /**
     * G_CAUGHT was handed every acked message and the masters hold its offsets at every queue's end,
     * including its %RETRY%G_CAUGHT offset 0 on both masters: the push consumer commits that one only after
     * its first pull of the empty retry queue came back (a long poll the broker holds ~15 s), i.e. ~20 s after
     * it started; waiting for it keeps the set of offsets the same from s1 to the end.
     */
    long waitCaughtUp(String what) throws Exception {
        Set<String> want = ackedIds();
        long end = System.currentTimeMillis() + 90_000;
        while (!caughtSeen.containsAll(want)) {
            if (System.currentTimeMillis() > end) {
                Set<String> missing = new HashSet<>(want);
                missing.removeAll(caughtSeen);
                throw new Harness.HarnessError("G_CAUGHT was not handed every message before " + what + ": "
                    + missing.size() + " of " + want.size() + " missing");
            }
            h.checkDeadline("waiting for G_CAUGHT");
            Thread.sleep(50);
        }
        String last = "";
        while (true) {
            ConsumeStats cs = admin.examineConsumeStats(G_CAUGHT);
            long behind = 0;
            Set<String> queues = new HashSet<>();
            Set<String> retry = new HashSet<>();
            for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
                behind += e.getValue().getBrokerOffset() - e.getValue().getConsumerOffset();
                if (e.getKey().getTopic().startsWith(MixAll.RETRY_GROUP_TOPIC_PREFIX)) {
                    retry.add(e.getKey().getBrokerName());
                } else {
                    queues.add(e.getKey().toString());
                }
            }
            if (behind == 0 && queues.size() == 2 * (4 + 2) && retry.size() == 2) {
                return System.currentTimeMillis();
            }
            last = behind + " behind over " + queues.size() + " queues, retry offsets on " + retry;
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("G_CAUGHT did not commit everything before " + what + ": " + last);
            }
            Thread.sleep(200);
        }
    }

    String qkey(MessageQueue mq) {
        return mq.getTopic() + "/" + mq.getBrokerName() + "/" + mq.getQueueId();
    }

    List<MessageQueue> subscribedQueues(DefaultMQPullConsumer c, String topic) throws Exception {
        List<MessageQueue> mqs = new ArrayList<>(c.fetchSubscribeMessageQueues(topic));
        mqs.sort(Comparator.comparing(MessageQueue::getBrokerName).thenComparingInt(MessageQueue::getQueueId));
        if (mqs.size() != 2 * topics().get(topic)) {
            throw new Harness.HarnessError(c.getConsumerGroup() + " sees " + mqs.size() + " queues of " + topic);
        }
        return mqs;
    }

    /** Pulls [from, target) of the queue (from the master) and commits target synchronously. */
    int pullAndCommit(DefaultMQPullConsumer c, MessageQueue mq, long from, long target) throws Exception {
        long offset = from;
        int pulled = 0;
        while (offset < target) {
            PullResult pr = c.pull(mq, "*", offset, (int) Math.min(32, target - offset));
            if (pr.getPullStatus() != PullStatus.FOUND) {
                throw new Harness.HarnessError(c.getConsumerGroup() + " pull " + mq + " at " + offset + ": "
                    + pr.getPullStatus());
            }
            for (MessageExt m : pr.getMsgFoundList()) {
                if (m.getQueueOffset() < target) {
                    pulled++;
                }
            }
            offset = Math.min(target, pr.getNextBeginOffset());
        }
        wl.commitOffset(c, mq, target);
        return pulled;
    }

    /**
     * G_LAG before s1: maxOffset/2 of every queue; before s2: its s1 offset + a quarter of what arrived
     * since (offsets move, lag grows). G_STOPPED before s1: maxOffset/3 of every TopicCluster queue, never
     * again. Both pull what they commit.
     */
    long commitPlanned(String snapshot) throws Exception {
        long last = 0;
        for (String t : subscriptions().get(G_LAG)) {
            for (MessageQueue mq : subscribedQueues(cLag, t)) {
                long max = cLag.maxOffset(mq);
                long[] prev = lagOffsets.get(qkey(mq));
                long target = prev == null ? max / 2 : prev[0] + (max - prev[1] + 3) / 4;
                if (prev != null && !(target > prev[0] && max - target > prev[1] - prev[0])) {
                    throw new Harness.HarnessError("G_LAG plan: " + mq + " would not move with a rising lag (s1 "
                        + prev[0] + "/" + prev[1] + ", s2 " + target + "/" + max + ")");
                }
                int pulled = pullAndCommit(cLag, mq, prev == null ? 0 : prev[0], target);
                lagOffsets.put(qkey(mq), new long[] {target, max});
                commits.add(commitRow(G_LAG, snapshot, mq, max, target, pulled));
                last = System.currentTimeMillis();
            }
        }
        if (snapshot.equals("s1")) {
            for (MessageQueue mq : subscribedQueues(cStopped, T_CLUSTER)) {
                long max = cStopped.maxOffset(mq);
                long target = max / 3;
                int pulled = pullAndCommit(cStopped, mq, 0, target);
                stoppedOffsets.put(qkey(mq), target);
                commits.add(commitRow(G_STOPPED, snapshot, mq, max, target, pulled));
                last = System.currentTimeMillis();
            }
        }
        return last;
    }

    Map<String, Object> commitRow(String group, String snapshot, MessageQueue mq, long max, long target, int pulled) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", group);
        r.put("forSnapshot", snapshot);
        r.put("topic", mq.getTopic());
        r.put("brokerName", mq.getBrokerName());
        r.put("queueId", mq.getQueueId());
        r.put("maxOffset", max);
        r.put("committedOffset", target);
        r.put("pulled", pulled);
        r.put("committedMs", System.currentTimeMillis());
        return r;
    }

    /** Waits until the broker rewrote config/consumerOffset.json after {@code afterMs} (every 5 s). */
    long waitOffsetsPersisted(Node n, long afterMs, long timeoutMs) throws Exception {
        Path p = n.root.resolve("config").resolve("consumerOffset.json");
        long end = System.currentTimeMillis() + timeoutMs;
        while (true) {
            if (Files.exists(p)) {
                long m = Files.getLastModifiedTime(p).toMillis();
                if (m > afterMs) {
                    return m;
                }
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError(n.name + " did not persist config/consumerOffset.json within "
                    + timeoutMs / 1000 + " s after " + afterMs);
            }
            Thread.sleep(100);
        }
    }

    // =================================================================== the slave

    /** Max offsets of TopicCluster/TopicClusterB queues of brokerName, asked at addr. */
    Map<String, Long> userQueueMax(String addr, String brokerName) throws Exception {
        Map<String, Long> m = new TreeMap<>();
        for (String t : topics().keySet()) {
            for (int q = 0; q < topics().get(t); q++) {
                m.put(t + "/" + q, api.getMaxOffset(addr, new MessageQueue(t, brokerName, q), 5000));
            }
        }
        return m;
    }

    /**
     * The slave holds everything the master has: the master's HA view shows the slave acknowledged the
     * master's max offset, the slave's own commitlog max offset is the master's, its dispatch is done and
     * its consume queues end where the master's do.
     */
    Map<String, Object> waitSlaveCaughtUp(String what, long timeoutMs) throws Exception {
        Node a = node(A);
        Node s = node(A_SLAVE);
        long end = System.currentTimeMillis() + timeoutMs;
        String last = "";
        while (true) {
            try {
                Map<String, Object> mha = haInfo(a);
                long masterMax = ((Number) mha.get("masterCommitLogMaxOffset")).longValue();
                List<Map<String, Object>> conns = connections(mha);
                Map<String, Object> srt = runtime(s);
                Map<String, Object> mrt = runtime(a);
                Long slaveMax = runtimeLong(srt, "commitLogMaxOffset");
                Long masterRtMax = runtimeLong(mrt, "commitLogMaxOffset");
                Long behind = runtimeLong(srt, "dispatchBehindBytes");
                boolean acked = conns.size() == 1
                    && ((Number) conns.get(0).get("slaveAckOffset")).longValue() == masterMax;
                if (acked && slaveMax != null && slaveMax == masterMax && masterRtMax != null
                    && masterRtMax == masterMax && behind != null && behind == 0) {
                    Map<String, Long> mq = userQueueMax(a.addr, A);
                    Map<String, Long> sq = userQueueMax(s.addr, A);
                    if (mq.equals(sq)) {
                        Map<String, Object> r = new LinkedHashMap<>();
                        r.put("caughtUpSeenMs", System.currentTimeMillis());
                        r.put("commitLogMaxOffset", masterMax);
                        r.put("masterHa", mha);
                        r.put("queueMaxOffsets", mq);
                        Harness.log("slave caught up " + what + " at commitlog offset " + masterMax);
                        return r;
                    }
                    last = "queues: master " + mq + ", slave " + sq;
                } else {
                    last = "master max " + masterMax + " (runtime " + masterRtMax + "), HA connections " + conns
                        + ", slave max " + slaveMax + ", slave dispatchBehindBytes " + behind;
                }
            } catch (Exception e) {
                last = e.toString();
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("slave did not catch up " + what + " within " + timeoutMs / 1000
                    + " s: " + last);
            }
            h.checkDeadline("waiting for the slave");
            Thread.sleep(200);
        }
    }

    /** The consumer offset at addr, or null when the broker has none (QUERY_NOT_FOUND). */
    Long queryOffset(String addr, String group, String topic, int queueId) throws Exception {
        QueryConsumerOffsetRequestHeader hd = new QueryConsumerOffsetRequestHeader();
        hd.setConsumerGroup(group);
        hd.setTopic(topic);
        hd.setQueueId(queueId);
        hd.setSetZeroIfNotFound(false);
        try {
            return api.queryConsumerOffset(addr, hd, 5000);
        } catch (MQBrokerException e) {
            if (e.getResponseCode() == QUERY_NOT_FOUND) {
                return null;
            }
            throw e;
        }
    }

    static final java.time.format.DateTimeFormatter LOG_TIME =
        java.time.format.DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS");

    /** Time of a broker log line (our logback pattern starts with the local time), or -1. */
    static long logLineMs(String line) {
        if (line.length() < 23) {
            return -1;
        }
        try {
            return java.time.LocalDateTime.parse(line.substring(0, 23), LOG_TIME)
                .atZone(java.time.ZoneId.systemDefault()).toInstant().toEpochMilli();
        } catch (java.time.format.DateTimeParseException e) {
            return -1;
        }
    }

    /**
     * The first complete SlaveSynchronize.syncAll of the slave that started after {@code afterMs}, from its
     * log: "Update slave topic config" (start), the consumer-offset line (success or exception, with the
     * exception's first line), "Update slave Message Request Mode" (end). Null while not complete.
     */
    Map<String, Object> slaveSyncRound(long afterMs) throws IOException {
        Path log = h.logs.resolve(A_SLAVE + ".log");
        if (!Files.exists(log)) {
            return null;
        }
        List<String> lines = Files.readAllLines(log, StandardCharsets.ISO_8859_1);
        Map<String, Object> r = null;
        for (int i = 0; i < lines.size(); i++) {
            String l = lines.get(i);
            long t = logLineMs(l);
            if (r == null) {
                if (t > afterMs && l.contains("Update slave topic config from master")) {
                    r = new LinkedHashMap<>();
                    r.put("startMs", t);
                    r.put("startLine", l);
                }
                continue;
            }
            if (l.contains("Update slave consumer offset from master")) {
                r.put("consumerOffsets", "synced");
                r.put("consumerOffsetLine", l);
            } else if (l.contains("SyncConsumerOffset Exception")) {
                r.put("consumerOffsets", "exception");
                r.put("consumerOffsetLine", l);
                String next = i + 1 < lines.size() ? lines.get(i + 1) : "";
                r.put("exception", next.length() > 300 ? next.substring(0, 300) + "..." : next);
            } else if (l.contains("Update slave Message Request Mode from master")) {
                r.put("endMs", t);
                r.put("endLine", l);
                return r.containsKey("consumerOffsets") ? r : null;
            }
        }
        return null;
    }

    /**
     * Waits for the slave's first SlaveSynchronize.syncAll after the s2 commits (5.5.0: every 60 s, the first
     * 60 s after the slave started), then asks the slave for the offsets broker-a holds. 5.5.0's slave fails
     * to decode the master's consumer offsets (fastjson2 "not support unquoted name": the master writes the
     * queue ids unquoted, apache/rocketmq#10284) and never holds any; a broker that syncs them is waited for
     * until its config/consumerOffset.json was persisted after the sync.
     */
    void waitSlaveSync(long afterMs, List<Map<String, Object>> masterRows) throws Exception {
        Node s = node(A_SLAVE);
        long start = System.currentTimeMillis();
        long end = start + SLAVE_SYNC_WAIT_MS;
        slaveSync.put("afterMs", afterMs);
        slaveSync.put("waitStartMs", start);
        slaveSync.put("rule", "5.5.0 BrokerController: SlaveSynchronize.syncAll (topics, consumer offsets, delay"
            + " offsets, subscription groups, message request modes) runs from a 3 s task once 60 s passed since"
            + " the last sync (the first 60 s after the slave's BrokerController was built)");
        Map<String, Object> round;
        while ((round = slaveSyncRound(afterMs)) == null) {
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("the slave ran no complete SlaveSynchronize round within "
                    + SLAVE_SYNC_WAIT_MS / 1000 + " s after the s2 commits (see logs/" + A_SLAVE + ".log)");
            }
            h.checkDeadline("waiting for SlaveSynchronize");
            Thread.sleep(500);
        }
        long seen = System.currentTimeMillis();
        slaveSync.put("round", round);
        slaveSync.put("roundSeenMs", seen);
        slaveSync.put("waitedMs", seen - start);
        slaveSync.put("slaveStartedAtRunMs", h.timings.get("slaveStarted"));
        slaveSync.put("roundStartAtRunMs", ((Number) round.get("startMs")).longValue() - h.t0);
        int equal = 0;
        int found = 0;
        int total = 0;
        for (Map<String, Object> r : masterRows) {
            if (!A.equals(r.get("broker"))) {
                continue;
            }
            total++;
            Long v = queryOffset(s.addr, (String) r.get("group"), (String) r.get("topic"), (Integer) r.get("queueId"));
            found += v == null ? 0 : 1;
            equal += v != null && v.equals(r.get("offset")) ? 1 : 0;
        }
        slaveSync.put("offsetsAsked", total);
        slaveSync.put("offsetsFound", found);
        slaveSync.put("offsetsEqualToMaster", equal);
        Harness.log("slave sync round at +" + slaveSync.get("roundStartAtRunMs") + " ms: consumer offsets "
            + round.get("consumerOffsets") + "; the slave answers " + found + "/" + total + " of broker-a's offsets");
        if (equal == total) {
            slaveSync.put("consumerOffsetJsonPersistedMs", waitOffsetsPersisted(s, seen, 75_000));
        } else {
            notPossible.add("slave consumer offsets: 5.5.0's SlaveSynchronize.syncConsumerOffset fails on the slave ("
                + round.get("exception") + "; apache/rocketmq#10284), so the slave holds none of its master's"
                + " consumer offsets (" + found + " of " + total + " found at the slave at s2); topics, delay offsets"
                + " and subscription groups are synced");
        }
    }

    // =================================================================== snapshot truth

    void prepareSnapshot(String name, Map<String, Object> snap) throws Exception {
        long caught = waitCaughtUp(name);
        snap.put("gCaughtCaughtUpMs", caught);
        long committed = commitPlanned(name);
        snap.put("plannedCommitsMs", committed);
        if (name.equals("s2")) {
            snap.put("slaveCaughtUp", waitSlaveCaughtUp("before s2", 90_000));
            slaveCaughtUpAtS2 = true;
        }
        // push consumers commit every 2 s; admin Diff 0 means the masters hold the offsets in memory now
        long after = Math.max(caught, committed);
        Map<String, Object> persisted = new LinkedHashMap<>();
        for (Node m : masters()) {
            persisted.put(m.name, waitOffsetsPersisted(m, after, 20_000));
        }
        snap.put("consumerOffsetJsonPersistedAfterMs", after);
        snap.put("consumerOffsetJsonPersistedMs", persisted);
        record(name, snap);
        if (name.equals("s2")) {
            waitSlaveSync(after, consumerOffsets.get(name));
            // whatever the slave answers (nothing on 5.5.0: QUERY_NOT_FOUND is skipped)
            consumerOffsets.get(name).addAll(slaveOffsetRows(consumerOffsets.get(name)));
            snap.put("slaveSync", slaveSync);
            // the slave's topic/subscription configs changed with the sync: its broker offsets again
            brokerOffsets.get(name).removeIf(r -> A_SLAVE.equals(r.get("broker")));
            brokerOffsets.get(name).addAll(brokerOffsetRows(node(A_SLAVE)));
        }
        snap.put("truthRecordedMs", System.currentTimeMillis());
    }

    void record(String name, Map<String, Object> snap) throws Exception {
        long at = System.currentTimeMillis();
        snap.put("adminTruthStartMs", at);
        clusterInfo.put(name, clusterInfo());
        List<Map<String, Object>> rows = new ArrayList<>();
        List<Map<String, Object>> prog = new ArrayList<>();
        for (String g : GROUPS) {
            ConsumeStats cs = admin.examineConsumeStats(g);
            List<Map<String, Object>> gr = new ArrayList<>();
            Map<String, Long> perTopic = new TreeMap<>();
            long diffTotal = 0;
            for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
                MessageQueue mq = e.getKey();
                OffsetWrapper w = e.getValue();
                long diff = w.getBrokerOffset() - w.getConsumerOffset();
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("group", g);
                r.put("topic", mq.getTopic());
                r.put("brokerName", mq.getBrokerName());
                r.put("queueId", mq.getQueueId());
                r.put("brokerOffset", w.getBrokerOffset());
                r.put("consumerOffset", w.getConsumerOffset());
                r.put("diff", diff);
                r.put("lastTimestamp", w.getLastTimestamp());
                r.put("pullOffset", w.getPullOffset());
                gr.add(r);
                diffTotal += diff;
                perTopic.merge(mq.getTopic(), diff, Long::sum);
            }
            gr.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
                .thenComparing(m -> (String) m.get("brokerName")).thenComparing(m -> (Integer) m.get("queueId")));
            if (gr.isEmpty()) {
                notes.put("consumeStatsWithoutRows_" + name + "_" + g, true);
            }
            rows.addAll(gr);
            Map<String, Object> p = new LinkedHashMap<>();
            p.put("group", g);
            p.put("diffTotal", diffTotal);
            p.put("computeTotalDiff", cs.computeTotalDiff());
            p.put("consumeTps", cs.getConsumeTps());
            p.put("topics", perTopic);
            prog.add(p);
        }
        consumeStats.put(name, rows);
        progress.put(name, prog);

        List<Map<String, Object>> offs = new ArrayList<>();
        for (Node n : nodes.values()) {
            if (n.slave() && name.equals("s1")) {
                // frozen: the rows it answered right before SIGSTOP (nothing reached it since)
                @SuppressWarnings("unchecked")
                List<Map<String, Object>> before = (List<Map<String, Object>>) beforePause.get("brokerOffsets");
                for (Map<String, Object> r : before) {
                    Map<String, Object> c = new LinkedHashMap<>(r);
                    c.put("source", "asked right before SIGSTOP (the slave was frozen at s1)");
                    offs.add(c);
                }
            } else {
                offs.addAll(brokerOffsetRows(n));
            }
        }
        brokerOffsets.put(name, offs);

        List<Map<String, Object>> co = new ArrayList<>();
        for (Node m : masters()) {
            co.addAll(masterOffsetRows(m, rows));
        }
        if (name.equals("s1")) {
            notes.put("consumerOffsetsOfTheSlaveAtS1", "not asked: the slave was SIGSTOPped (its copy has no"
                + " config/consumerOffset.json unless it had persisted one before)");
        }
        consumerOffsets.put(name, co);

        Map<String, Object> hm = new LinkedHashMap<>();
        hm.put("snapshot", name);
        hm.put("master", A);
        hm.put("masterHa", haInfo(node(A)));
        Map<String, Object> per = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            Map<String, Object> b = new LinkedHashMap<>();
            if (n.slave() && name.equals("s1")) {
                Map<String, Object> rt = castMap(beforePause.get("runtime"));
                b.put("commitLogMaxOffset", null);  // filled from the copied store after the copy
                b.put("commitLogMinOffset", runtimeLong(rt, "commitLogMinOffset"));
                b.put("runtimeBeforePauseCommitLogMaxOffset", runtimeLong(rt, "commitLogMaxOffset"));
                b.put("source", "slave SIGSTOPped: commitLogMaxOffset = end of the records in its copied commitlog;"
                    + " runtimeBeforePause* = fetchBrokerRuntimeStats right before SIGSTOP; compare the master's"
                    + " HA slaveAckOffset");
            } else {
                Map<String, Object> rt = runtime(n);
                b.put("commitLogMaxOffset", runtimeLong(rt, "commitLogMaxOffset"));
                b.put("commitLogMinOffset", runtimeLong(rt, "commitLogMinOffset"));
                b.put("dispatchBehindBytes", runtimeLong(rt, "dispatchBehindBytes"));
                b.put("source", "fetchBrokerRuntimeStats at " + n.addr);
                if (n.slave()) {
                    b.put("ownHa", haInfo(n));
                }
            }
            per.put(n.name, b);
        }
        hm.put("brokers", per);
        ha.put(name, hm);
        snap.put("adminTruthEndMs", System.currentTimeMillis());
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> castMap(Object o) {
        return (Map<String, Object>) o;
    }

    Map<String, Object> clusterInfo() throws Exception {
        ClusterInfo ci = admin.examineBrokerClusterInfo();
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<String, Set<String>> c : ci.getClusterAddrTable().entrySet()) {
            Map<String, Object> byName = new TreeMap<>();
            for (String bn : c.getValue()) {
                BrokerData bd = ci.getBrokerAddrTable().get(bn);
                Map<String, Object> ids = new TreeMap<>();
                if (bd != null) {
                    for (Map.Entry<Long, String> e : bd.getBrokerAddrs().entrySet()) {
                        ids.put(String.valueOf(e.getKey()), e.getValue());
                    }
                }
                byName.put(bn, ids);
            }
            out.put(c.getKey(), byName);
        }
        return out;
    }

    /** min/max offsets of the user topics and of our groups' %RETRY% topics, asked at the broker itself. */
    List<Map<String, Object>> brokerOffsetRows(Node n) throws Exception {
        Map<String, Integer> qs = new LinkedHashMap<>(topics());
        Map<String, TopicConfig> table = api.getAllTopicConfig(n.addr, 5000).getTopicConfigTable();
        List<String> retry = new ArrayList<>();
        for (String g : GROUPS) {
            String t = MixAll.getRetryTopic(g);
            if (table.containsKey(t)) {
                qs.put(t, table.get(t).getReadQueueNums());
                retry.add(t);
            }
        }
        List<Map<String, Object>> rows = new ArrayList<>();
        long at = System.currentTimeMillis();
        for (Map.Entry<String, Integer> e : qs.entrySet()) {
            for (int q = 0; q < e.getValue(); q++) {
                MessageQueue mq = new MessageQueue(e.getKey(), n.brokerName, q);
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("broker", n.name);
                r.put("brokerName", n.brokerName);
                r.put("topic", e.getKey());
                r.put("queueId", q);
                r.put("minOffset", api.getMinOffset(n.addr, mq, 5000));
                r.put("maxOffset", api.getMaxOffset(n.addr, mq, 5000));
                r.put("inTopicConfig", table.containsKey(e.getKey()));
                r.put("askedMs", at);
                rows.add(r);
            }
        }
        return rows;
    }

    /** Consumer offsets for every (group, topic, queue) the admin's consume stats list for this master. */
    List<Map<String, Object>> masterOffsetRows(Node m, List<Map<String, Object>> stats) throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Map<String, Object> s : stats) {
            if (!m.brokerName.equals(s.get("brokerName"))) {
                continue;
            }
            String g = (String) s.get("group");
            String t = (String) s.get("topic");
            int q = (Integer) s.get("queueId");
            Long v = queryOffset(m.addr, g, t, q);
            if (v == null || v.longValue() != ((Number) s.get("consumerOffset")).longValue()) {
                throw new Harness.HarnessError(m.name + " answered offset " + v + " for " + g + " " + t + "/" + q
                    + " but examineConsumeStats said " + s.get("consumerOffset"));
            }
            rows.add(offsetRow(m, g, t, q, v, "queryConsumerOffset at " + m.addr + " (= examineConsumeStats)"));
        }
        return rows;
    }

    List<Map<String, Object>> slaveOffsetRows(List<Map<String, Object>> masterRows) throws Exception {
        Node s = node(A_SLAVE);
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Map<String, Object> r : new ArrayList<>(masterRows)) {
            if (!A.equals(r.get("broker"))) {
                continue;
            }
            String g = (String) r.get("group");
            String t = (String) r.get("topic");
            int q = (Integer) r.get("queueId");
            Long v = queryOffset(s.addr, g, t, q);
            if (v != null) {
                rows.add(offsetRow(s, g, t, q, v, "queryConsumerOffset at the slave " + s.addr
                    + " (synced from broker-a by SlaveSynchronize)"));
            }
        }
        return rows;
    }

    static Map<String, Object> offsetRow(Node n, String g, String t, int q, long v, String source) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("broker", n.name);
        r.put("brokerName", n.brokerName);
        r.put("group", g);
        r.put("topic", t);
        r.put("queueId", q);
        r.put("offset", v);
        r.put("source", source);
        return r;
    }

    // =================================================================== copies, shutdown

    void copyAll(String name, Map<String, Object> snap) throws Exception {
        Map<String, Object> copies = new LinkedHashMap<>();
        snap.put("takenAtMs", System.currentTimeMillis());
        for (Node n : nodes.values()) {
            Path dest = h.out.resolve(name).resolve(n.name).resolve("store");
            Map<String, Object> c = new StoreCopier(n.root, dest).copy();
            c.put("path", name + "/" + n.name + "/store");
            copies.put(n.name, c);
        }
        snap.put("copies", copies);
        snap.put("kind", "hot copies (StoreCopier) of the running brokers; the slave SIGSTOPped");
        // the frozen slave's commitlog end, from the copy itself
        Node s = node(A_SLAVE);
        long slaveEnd = commitLogEnd(h.out.resolve(name).resolve(s.name).resolve("store").resolve("commitlog"));
        long masterEnd = commitLogEnd(h.out.resolve(name).resolve(A).resolve("store").resolve("commitlog"));
        Map<String, Object> hm = ha.get(name);
        Map<String, Object> per = castMap(hm.get("brokers"));
        castMap(per.get(s.name)).put("commitLogMaxOffset", slaveEnd);
        Map<String, Object> mha = castMap(hm.get("masterHa"));
        long masterMax = ((Number) mha.get("masterCommitLogMaxOffset")).longValue();
        List<Map<String, Object>> conns = connections(mha);
        Long ack = conns.size() == 1 ? ((Number) conns.get(0).get("slaveAckOffset")).longValue() : null;
        Long before = (Long) castMap(per.get(s.name)).get("runtimeBeforePauseCommitLogMaxOffset");
        Long masterRt = (Long) castMap(per.get(A)).get("commitLogMaxOffset");
        Map<String, Object> check = new LinkedHashMap<>();
        check.put("slaveCopyCommitLogEnd", slaveEnd);
        check.put("masterCopyCommitLogEnd", masterEnd);
        check.put("masterHaSlaveAckOffset", ack);
        check.put("slaveRuntimeBeforePause", before);
        check.put("masterHaMasterCommitLogMaxOffset", masterMax);
        check.put("masterRuntimeCommitLogMaxOffset", masterRt);
        hm.put("slaveAtS1", check);
        if (ack == null || ack != slaveEnd || before == null || before != slaveEnd || masterEnd != masterMax
            || masterRt == null || masterRt != masterMax) {
            throw new Harness.HarnessError("s1: the views of the frozen slave disagree: " + check);
        }
        slaveLagBytesAtS1 = masterMax - slaveEnd;
        hm.put("slaveLagBytes", slaveLagBytesAtS1);
        if (slaveLagBytesAtS1 < MIN_LAG_BYTES) {
            throw new Harness.HarnessError("s1: the slave lags only " + slaveLagBytesAtS1 + " bytes");
        }
        describeStores(name, snap);
        Harness.log("snapshot " + name + ": slave " + slaveEnd + ", master " + masterMax + " (lag "
            + slaveLagBytesAtS1 + " bytes)");
    }

    void describeStores(String name, Map<String, Object> snap) throws Exception {
        Map<String, Object> files = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            Path root = h.out.resolve(name).resolve(n.name).resolve("store");
            Map<String, Object> d = GrowingWorkload.describeStore(root);
            d.put("commitLogEnd", commitLogEnd(root.resolve("commitlog")));
            d.put("abortPresent", Files.exists(root.resolve("abort")));
            d.put("checkpointPresent", Files.exists(root.resolve("checkpoint")));
            files.put(n.name, d);
        }
        snap.put("stores", files);
    }

    /**
     * End of the last record of a commitlog directory: walks TOTALSIZE/MAGICCODE from offset 0, jumping to
     * the next file at a BLANK (end-of-file) record; stops at the first zero or unknown word.
     */
    static long commitLogEnd(Path dir) throws IOException {
        List<String> names = StoreCopier.sortedNames(dir);
        long pos = names.isEmpty() ? 0 : Long.parseLong(names.get(0));
        ByteBuffer head = ByteBuffer.allocate(8);
        while (true) {
            long fileStart = pos - pos % COMMITLOG_FILE_SIZE;
            Path f = dir.resolve(String.format("%020d", fileStart));
            if (!Files.exists(f)) {
                return pos;
            }
            try (FileChannel ch = FileChannel.open(f, StandardOpenOption.READ)) {
                while (true) {
                    long rel = pos - fileStart;
                    if (rel + 8 > ch.size()) {
                        return pos;
                    }
                    head.clear();
                    while (head.hasRemaining() && ch.read(head, rel + head.position()) > 0) {
                        // read the 8 bytes
                    }
                    int size = head.getInt(0);
                    int magic = head.getInt(4);
                    if (magic == BLANK_MAGIC) {
                        pos = fileStart + COMMITLOG_FILE_SIZE;
                        break;
                    }
                    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || size <= 0) {
                        return pos;
                    }
                    pos += size;
                }
            }
        }
    }

    void stopAll(Map<String, Object> s2) throws Exception {
        long t = System.currentTimeMillis();
        Workload.shutdownQuietly(cCaught);
        Workload.shutdownQuietly(cLag);
        Workload.shutdownQuietly(cStopped);
        Workload.shutdownQuietly(producer);
        Thread.sleep(1000);
        h.mark("clientsStopped");
        // the consumers' shutdown (push: persistAll, oneway) must not have changed what the truth says
        List<String> changed = new ArrayList<>();
        for (Map<String, Object> r : consumerOffsets.get("s2")) {
            Node n = node((String) r.get("broker"));
            Long v = queryOffset(n.addr, (String) r.get("group"), (String) r.get("topic"), (Integer) r.get("queueId"));
            if (v == null || v.longValue() != ((Number) r.get("offset")).longValue()) {
                changed.add(r.get("broker") + " " + r.get("group") + " " + r.get("topic") + "/" + r.get("queueId")
                    + ": " + r.get("offset") + " -> " + v);
            }
        }
        // nor added any (group, queue) the truth does not list
        Set<String> truthKeys = new HashSet<>();
        for (Map<String, Object> r : consumeStats.get("s2")) {
            truthKeys.add(r.get("group") + " " + r.get("topic") + " " + r.get("brokerName") + "/" + r.get("queueId")
                + " " + r.get("consumerOffset"));
        }
        Set<String> nowKeys = new HashSet<>();
        for (String g : GROUPS) {
            for (Map.Entry<MessageQueue, OffsetWrapper> e : admin.examineConsumeStats(g).getOffsetTable().entrySet()) {
                nowKeys.add(g + " " + e.getKey().getTopic() + " " + e.getKey().getBrokerName() + "/"
                    + e.getKey().getQueueId() + " " + e.getValue().getConsumerOffset());
            }
        }
        if (!nowKeys.equals(truthKeys)) {
            Set<String> added = new HashSet<>(nowKeys);
            added.removeAll(truthKeys);
            Set<String> gone = new HashSet<>(truthKeys);
            gone.removeAll(nowKeys);
            changed.add("examineConsumeStats now has " + added + ", no longer " + gone);
        }
        if (!changed.isEmpty()) {
            throw new Harness.HarnessError("consumer offsets changed after s2's truth: " + changed);
        }
        s2.put("offsetsRecheckedAfterClientShutdownMs", System.currentTimeMillis());
        Workload.shutdownInBackground(admin);
        // SIGTERM every broker at once (shutdown hooks persist config JSON and remove abort)
        Map<String, Long> sigAt = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            sigAt.put(n.name, System.currentTimeMillis());
            n.proc.destroy();
        }
        for (Node n : nodes.values()) {
            Map<String, Object> r = new LinkedHashMap<>();
            boolean exited = n.proc.waitFor(120, TimeUnit.SECONDS);
            r.put("signal", "SIGTERM");
            r.put("exited", exited);
            r.put("durationMs", System.currentTimeMillis() - sigAt.get(n.name));
            if (!exited) {
                n.proc.destroyForcibly();
                throw new Harness.HarnessError(n.name + " did not exit within 120 s after SIGTERM");
            }
            r.put("exitCode", n.proc.exitValue());
            r.put("abortFilePresent", Files.exists(n.root.resolve("abort")));
            shutdown.put(n.name, r);
        }
        h.mark("brokersStopped");
        // nothing of the name server is kept; its SIGTERM hook alone takes ~4 s
        namesrv.destroyForcibly();
        namesrv.waitFor(30, TimeUnit.SECONDS);
        shutdown.put("namesrv", Map.of("signal", "SIGKILL (nothing of it is kept)"));
        s2.put("kind", "the live store roots after every broker's clean shutdown (SIGTERM), not copies");
        s2.put("takenAtMs", System.currentTimeMillis());
        s2.put("shutdownStartedMs", t);
    }

    // =================================================================== truth

    @Override
    public void writeTruth(Map<String, Object> run) throws Exception {
        Path tr = h.truth;
        List<Map<String, Object>> brokers = new ArrayList<>();
        for (Node n : nodes.values()) {
            Map<String, Object> b = new LinkedHashMap<>();
            b.put("name", n.name);
            b.put("cluster", CLUSTER);
            b.put("brokerName", n.brokerName);
            b.put("brokerId", n.brokerId);
            b.put("role", n.slave() ? "slave" : "master");
            b.put("master", n.master);
            b.put("brokerRole", n.slave() ? "SLAVE" : "ASYNC_MASTER");
            b.put("listenPort", n.port);
            b.put("haListenPort", n.port + 1);
            b.put("address", n.addr);
            Map<String, Object> stores = new LinkedHashMap<>();
            for (String s : SNAPSHOTS) {
                stores.put(s, s + "/" + n.name + "/store");
            }
            b.put("stores", stores);
            brokers.add(b);
        }
        Harness.writeJson(tr.resolve("brokers.json"), brokers);

        List<Map<String, Object>> snaps = new ArrayList<>(snapshots.values());
        Harness.writeJson(tr.resolve("snapshots.json"), snaps);
        for (String s : SNAPSHOTS) {
            if (clusterInfo.containsKey(s)) {
                Harness.writeJson(tr.resolve("cluster_info_" + s + ".json"), clusterInfo.get(s));
            }
            if (consumeStats.containsKey(s)) {
                Harness.writeJsonLines(tr.resolve("consume_stats_" + s + ".jsonl"), consumeStats.get(s));
                Harness.writeJsonLines(tr.resolve("consumer_progress_" + s + ".jsonl"), progress.get(s));
            }
            if (brokerOffsets.containsKey(s)) {
                Harness.writeJsonLines(tr.resolve("broker_offsets_" + s + ".jsonl"), brokerOffsets.get(s));
            }
            if (consumerOffsets.containsKey(s)) {
                Harness.writeJsonLines(tr.resolve("consumer_offsets_" + s + ".jsonl"), consumerOffsets.get(s));
            }
            if (ha.containsKey(s)) {
                Harness.writeJson(tr.resolve("ha_" + s + ".json"), ha.get(s));
            }
        }
        List<Map<String, Object>> msgs;
        synchronized (sent) {
            msgs = new ArrayList<>(sent);
        }
        Harness.writeJsonLines(tr.resolve("messages.jsonl"), msgs);
        Harness.writeJsonLines(tr.resolve("commits.jsonl"), commits);

        Map<String, Object> expected = new LinkedHashMap<>();
        Map<String, Object> statuses = new LinkedHashMap<>();
        statuses.put(G_CAUGHT, "OK");
        statuses.put(G_LAG, "WARN");
        statuses.put(G_STOPPED, "STOP");
        expected.put("statuses", statuses);
        expected.put("slaveLagBytesAtS1", slaveLagBytesAtS1);
        expected.put("slaveCaughtUpAtS2", slaveCaughtUpAtS2);
        Harness.writeJson(tr.resolve("expected.json"), expected);

        run.put("topics", topics());
        run.put("subscriptions", subscriptions());
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_CAUGHT, "push, concurrently, both topics, always CONSUME_SUCCESS; Diff 0 at every snapshot");
        groups.put(G_LAG, "pull; before s1 pulls and commits maxOffset/2 of every queue, before s2 its s1 offset + a"
            + " quarter of what arrived since (offsets move, lag grows)");
        groups.put(G_STOPPED, "pull, TopicCluster; pulls and commits maxOffset/3 of every queue before s1, never"
            + " again");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        client.put("persistConsumerOffsetInterval", 2000);
        client.put("queueSelection", "MessageQueueSelector picking the planned (brokerName, queueId) from the"
            + " name-server route, round robin per topic over both masters (burst: broker-a's TopicCluster queues)");
        run.put("client", client);
        Map<String, Object> plan = new LinkedHashMap<>();
        plan.put("seed", SEED);
        plan.put("before_s1", N_BEFORE_S1);
        plan.put("burst", N_BURST);
        plan.put("after_s1", N_AFTER_S1);
        plan.put("bodies", "text 200-2600 bytes (burst 2048-3071), never compressed");
        run.put("plan", plan);
        Map<String, Object> counts = new LinkedHashMap<>();
        Map<String, Long> byPhase = new TreeMap<>();
        Map<String, Long> byBroker = new TreeMap<>();
        long acked = 0;
        for (Map<String, Object> m : msgs) {
            byPhase.merge((String) m.get("phase"), 1L, Long::sum);
            if (Boolean.TRUE.equals(m.get("acked"))) {
                acked++;
                byBroker.merge(m.get("brokerName") + "/" + m.get("topic"), 1L, Long::sum);
            }
        }
        counts.put("sent", msgs.size());
        counts.put("acked", acked);
        counts.put("byPhase", byPhase);
        counts.put("ackedByBrokerAndTopic", byBroker);
        run.put("counts", counts);
        run.put("brokerConfigEffective", effectiveConfig);
        run.put("beforePause", beforePause);
        run.put("shutdown", shutdown);
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("notPossible", notPossible);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(tr.resolve("run.json"), run);
    }
}
