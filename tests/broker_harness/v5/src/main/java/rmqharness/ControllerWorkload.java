package rmqharness;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.EpochEntry;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.remoting.protocol.body.EpochEntryCache;
import org.apache.rocketmq.remoting.protocol.header.controller.GetMetaDataResponseHeader;
import org.apache.rocketmq.store.ha.autoswitch.BrokerMetadata;
import org.apache.rocketmq.store.ha.autoswitch.EpochFileCache;
import org.apache.rocketmq.store.ha.autoswitch.TempBrokerMetadata;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The {@code v5-controller} scenario: one 5.5.0 broker in controller mode (automatic master/slave switch,
 * {@code enableControllerMode=true}) under a name server that runs the embedded DLedger controller
 * ({@code enableControllerInNamesrv=true}, a single-node controller group {@code n0}), both child JVMs on
 * 127.0.0.1. The controller assigns the broker its replica id (1) and elects it master (epoch 1); the broker
 * writes {@code epochFileCheckpoint} and {@code brokerIdentity} at its store root.
 *
 * <p>Flow: run 1 (seeded messages with keys, client batches, a push group G_ALL consuming everything, a pull
 * group G_HALF online), clean stop (SIGTERM), wait until the controller lists no master (its failed re-elections
 * raise the epoch), a cold copy {@code snapshots/run1/store}, restart on the same store (re-elected with a new
 * epoch: a second entry in the epoch file, the first one copied to {@code .bak}), run 2 (more messages, G_ALL
 * again, G_HALF commits the first half of every queue), clean stop. Before each stop the admin API's
 * {@code getBrokerEpochCache}, {@code getInSyncStateData} and {@code getControllerMetaData} are recorded.
 * Then the real {@code EpochFileCache}/{@code BrokerMetadata} classes of 5.5.0 read a set of damaged copies of
 * the files the broker wrote (in this JVM, no broker): which file they fall back to, or that they throw; and the
 * broker itself starts twice on a scratch copy of the final store: with an empty epoch file (it exits) and with a
 * CRC-broken one (it loads the .bak, is re-elected and rewrites the file from that).
 *
 * <p>Own {@code main} (stores.py starts it for this variant, see {@code MAIN_CLASSES}), so {@link Harness}
 * stays untouched; a {@link Harness} in its "-clean" mode is used for the helpers (ports, child JVMs,
 * logback files, timings, deadline). 5.x only: the controller does not exist in 4.9.
 *
 * <p>Truth ({@code truth/}): {@code messages.jsonl} (ModeWorkload's shape plus {@code brokerRun},
 * {@code masterEpoch}, {@code commitLogOffset}), {@code consumed.jsonl}, {@code consumer_groups.jsonl},
 * {@code topic_stats.jsonl}, {@code controller.json}, {@code epoch_reader_cases.jsonl},
 * {@code identity_reader_cases.jsonl}, {@code run.json}.
 */
final class ControllerWorkload extends StandaloneScenario {
    static final String VARIANT = "v5-controller";
    static final long SEED = 20240617L;
    /** DLedger controller group: one peer, n0, inside the name server JVM. */
    static final String CONTROLLER_GROUP = "HarnessController";
    static final String CONTROLLER_SELF_ID = "n0";
    static final String T_MAIN = "TopicCtl";
    static final String T_BULK = "TopicCtlBulk";
    static final String G_ALL = Workload.G_ALL;
    static final String G_HALF = Workload.G_HALF;
    static final List<String> GROUPS = List.of(G_ALL, G_HALF);
    static final int BATCH_SIZE = 10;
    /** Messages per broker run: main (tags, keys, user properties, all body kinds), bulk (2-8 KiB), batches. */
    static final int[][] PLAN = {{160, 80, 2}, {100, 40, 1}};
    static final int COMPRESS_OVER = Workload.COMPRESS_OVER;

    final Random rnd = new Random(SEED);
    final Map<String, Object> notes = new LinkedHashMap<>();
    final Map<String, Object> controllerTruth = new LinkedHashMap<>();
    final List<Map<String, Object>> views = new ArrayList<>();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    final List<Map<String, Object>> epochCases = new ArrayList<>();
    final List<Map<String, Object>> identityCases = new ArrayList<>();
    Workload wl;
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    DefaultMQPushConsumer cAll;
    DefaultMQPullConsumer cHalf;
    Process namesrv;
    Process broker;
    String nsAddr;
    String ctlAddr;
    String brokerAddr;
    Path brokerConfFile;
    int brokerRun;
    int masterEpoch;
    int mainSent;
    int bulkSent;
    int batchesSent;

    ControllerWorkload(Harness h) {
        super(h);
    }

    /** Usage: {@code java -cp ... rmqharness.ControllerWorkload --variant v5-controller --out DIR [--timeout SEC]}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "ControllerWorkload", Set.of(VARIANT), (h, variant) -> new ControllerWorkload(h));
    }

    // =================================================================== flow

    @Override
    void runScenario(Map<String, Object> run) throws Exception {
        String lo = h.loopback;
        int nsPort = Harness.freePort(lo, 0, 0);
        Set<Integer> taken = new HashSet<>(List.of(nsPort));
        int ctlPort = Harness.freePort(lo, 0, 0, taken);
        taken.add(ctlPort);
        int brokerPort = Harness.freePort(lo, 2, 1, taken);
        nsAddr = Harness.hostPort(lo, nsPort);
        ctlAddr = Harness.hostPort(lo, ctlPort);
        brokerAddr = Harness.hostPort(lo, brokerPort);

        Map<String, String> nsConf = namesrvConfig(nsPort);
        Map<String, String> brokerConf = brokerConfig(brokerPort);
        Path nsConfFile = h.work.resolve("namesrv.conf");
        brokerConfFile = h.work.resolve("broker.conf");
        Harness.writeProperties(nsConfFile, nsConf);
        Harness.writeProperties(brokerConfFile, brokerConf);
        Files.copy(nsConfFile, h.logs.resolve("namesrv.conf"));
        Files.copy(brokerConfFile, h.logs.resolve("broker.conf"));
        for (String name : List.of("namesrv", "broker", "broker-run2")) {
            Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_" + name + ".xml"),
                h.logs.resolve(name + ".log"));
        }

        run.put("variant", VARIANT);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", "clean");
        run.put("scenario", "controller");
        run.put("seed", SEED);
        run.put("javaVersion", System.getProperty("java.version"));
        Map<String, Object> ports = new LinkedHashMap<>();
        ports.put("namesrv", nsPort);
        ports.put("controller", ctlPort);
        ports.put("broker", brokerPort);
        ports.put("brokerFast", brokerPort - 2);
        ports.put("brokerHa", brokerPort + 1);
        run.put("ports", ports);
        run.put("namesrvAddr", nsAddr);
        run.put("controllerAddr", ctlAddr);
        run.put("brokerAddr", brokerAddr);
        run.put("brokerName", Harness.BROKER_NAME);
        run.put("clusterName", Harness.CLUSTER);
        run.put("brokerConfig", brokerConf);
        run.put("namesrvConfig", nsConf);
        run.put("childJvmOptions", Harness.ADD_OPENS);
        run.put("storePathAtGeneration", h.store.toString());
        controllerTruth.put("namesrvConfig", nsConf);
        controllerTruth.put("brokerConfig", brokerConf);
        controllerTruth.put("controllerAddr", ctlAddr);
        controllerTruth.put("brokerAddr", brokerAddr);
        controllerTruth.put("clusterName", Harness.CLUSTER);
        controllerTruth.put("brokerName", Harness.BROKER_NAME);

        // ---- name server + embedded controller (one JVM: NamesrvStartup.main = main0 + controllerManagerMain)
        namesrv = h.startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "192m",
            List.of("-c", nsConfFile.toString()));
        h.addChild(namesrv);
        h.waitForLine("namesrv", namesrv, h.logs.resolve("namesrv.out"), "The Name Server boot success", 60);
        h.waitForLine("namesrv", namesrv, h.logs.resolve("namesrv.out"), "The ControllerManager boot success", 60);
        h.mark("namesrvStarted");
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(lo);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        controllerTruth.put("controllerMetaData", waitControllerLeader());
        h.mark("controllerLeader");

        // ---- run 1: first registration (controller id 1), elected master, epoch entry (E1, 0)
        startBroker(1);
        wl = new Workload(h, nsAddr, brokerAddr, rnd);
        wl.admin = admin;
        wl.createTopics(topics());
        Compat.createGroup(admin, brokerAddr, G_HALF);
        h.mark("topicsCreated");
        produceAndConsume(false);
        stopBroker();

        // a cold copy of the store between the runs: one epoch entry, no .bak yet
        Map<String, Object> copy = new StoreCopier(h.store, h.out.resolve("snapshots/run1/store")).copy();
        controllerTruth.put("run1Copy", Map.of("path", "snapshots/run1/store", "copy", copy,
            "layout", describeLayout(h.out.resolve("snapshots/run1/store"))));
        h.mark("run1Copied");

        // ---- run 2: same store, re-elected with a higher epoch: a second entry, the first copied to .bak
        startBroker(2);
        produceAndConsume(true);
        stopBroker();

        controllerTruth.put("finalLayout", describeLayout(h.store));
        controllerTruth.put("controllerStore", describeControllerStore(h.work.resolve("controller-store")));
        readerCases();
        h.mark("readerCases");

        // ---- the real broker on two damaged copies of the final store
        byte[] written = Files.readAllBytes(h.store.resolve("epochFileCheckpoint"));
        controllerTruth.put("damagedStarts", List.of(
            damagedStart("empty-epoch-file", new byte[0]),
            damagedStart("epoch-file-crc-broken", flipLastDigit(written))));
        h.mark("damagedStarts");
        admin.shutdown();
        namesrv.destroyForcibly(); // nothing of the name server or the controller's Raft log is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        h.mark("end");
    }

    Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(T_MAIN, 4);
        t.put(T_BULK, 2);
        return t;
    }

    Map<String, String> namesrvConfig(int nsPort) {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("listenPort", String.valueOf(nsPort));
        c.put("bindAddress", h.loopback);
        c.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        c.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        c.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        c.put("scanAvailableNameSrv", "false");
        // the same file configures the embedded controller (ControllerConfig via NamesrvStartup)
        c.put("enableControllerInNamesrv", "true");
        c.put("controllerType", "DLedger");
        c.put("controllerDLegerGroup", CONTROLLER_GROUP);
        c.put("controllerDLegerPeers", CONTROLLER_SELF_ID + "-" + ctlAddr);
        c.put("controllerDLegerSelfId", CONTROLLER_SELF_ID);
        c.put("controllerStorePath", h.work.resolve("controller-store").toString());
        c.put("mappedFileSize", String.valueOf(4 * 1024 * 1024)); // the controller's DLedger data files (1 GiB)
        c.put("scanNotActiveBrokerInterval", "2000");
        return c;
    }

    Map<String, String> brokerConfig(int brokerPort) {
        Map<String, String> c = h.brokerConfig(nsAddr, brokerPort);
        // the controller assigns the replica id and the role (ReplicasManager.changeToMaster: brokerId 0,
        // SYNC_MASTER); BrokerStartup ignores both in controller mode
        c.remove("brokerId");
        c.remove("brokerRole");
        c.put("enableControllerMode", "true");
        c.put("controllerAddr", ctlAddr);
        c.put("syncBrokerMetadataPeriod", "2000");
        c.put("checkSyncStateSetPeriod", "2000");
        c.put("syncControllerMetadataPeriod", "5000");
        return c;
    }

    void startBroker(int runNo) throws Exception {
        brokerRun = runNo;
        String name = runNo == 1 ? "broker" : "broker-run" + runNo;
        broker = h.startJvm(name, "org.apache.rocketmq.broker.BrokerStartup", "384m",
            List.of("-c", brokerConfFile.toString()));
        h.addChild(broker);
        h.waitForLine(name, broker, h.logs.resolve(name + ".out"), "boot success", 120);
        h.mark("run" + runNo + "BrokerStarted");
        Map<String, Object> elected = waitForMaster(runNo);
        h.mark("run" + runNo + "BrokerIsMaster");
        views.add(view("run" + runNo + "-master", elected));
    }

    void produceAndConsume(boolean last) throws Exception {
        String phase = "run" + brokerRun;
        startClients();
        int[] plan = PLAN[brokerRun - 1];
        List<Workload.Op> ops = plan(plan[0], plan[1], plan[2], phase);
        for (Workload.Op op : ops) {
            op.run();
        }
        h.mark(phase + "Produced");
        wl.waitForAllConsumed(phase, topics().keySet(), System.currentTimeMillis() + 90_000);
        h.mark(phase + "Delivered");
        if (last) {
            wl.consumeHalf(topics().keySet());
            h.mark("halfConsumed");
        }
        Workload.shutdownQuietly(cAll);
        Workload.shutdownQuietly(cHalf);
        Thread.sleep(1500);
        if (last) {
            wl.snapshotGroups(GROUPS, true);
            groupSnapshot.addAll(wl.groupSnapshot);
            wl.snapshotTopics();
            h.mark("groupsSnapshot");
        }
        producer.shutdown();
        views.add(view(phase + "-beforeStop", null));
    }

    void startClients() throws Exception {
        String run = "-run" + brokerRun;
        cAll = new DefaultMQPushConsumer(G_ALL);
        wl.configureConsumer(cAll, "c-all" + run);
        cAll.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String t : topics().keySet()) {
            cAll.subscribe(t, "*");
        }
        cAll.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                wl.recordConsumed(G_ALL, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cAll.start();
        // online from the start (heartbeats), pulls and commits half of every queue at the end of run 2
        cHalf = new DefaultMQPullConsumer(G_HALF);
        wl.configureConsumer(cHalf, "c-half" + run);
        cHalf.setRegisterTopics(new HashSet<>(topics().keySet()));
        cHalf.start();
        wl.cHalf = cHalf;
        producer = new DefaultMQProducer("PG_CTL");
        wl.configureProducer(producer, "harness-producer" + run);
        producer.start();
        wl.producer = producer;
    }

    /** SIGTERM, then wait until the controller no longer lists a master for broker-a (and its epoch settled). */
    void stopBroker() throws Exception {
        String tag = "run" + brokerRun;
        Map<String, Object> r = new LinkedHashMap<>();
        long s = System.currentTimeMillis();
        broker.destroy();
        boolean exited = broker.waitFor(90, TimeUnit.SECONDS);
        r.put("signal", "SIGTERM");
        r.put("exited", exited);
        r.put("durationMs", System.currentTimeMillis() - s);
        if (!exited) {
            broker.destroyForcibly();
            throw new Harness.HarnessError("broker did not exit within 90 s after SIGTERM");
        }
        r.put("exitCode", broker.exitValue());
        r.put("abortFilePresent", Files.exists(h.store.resolve("abort")));
        h.mark(tag + "BrokerStopped");
        r.put("controllerAfterStop", waitNoMaster());
        h.mark(tag + "NoMaster");
        r.put("epochFileAfterStop", fileText(h.store.resolve("epochFileCheckpoint")));
        r.put("epochFileBakAfterStop", fileText(h.store.resolve("epochFileCheckpoint.bak")));
        r.put("brokerIdentityAfterStop", fileText(h.store.resolve("brokerIdentity")));
        controllerTruth.put(tag + "Shutdown", r);
    }

    // =================================================================== controller / broker views

    Map<String, Object> waitControllerLeader() throws Exception {
        long start = System.currentTimeMillis();
        String last = "";
        while (System.currentTimeMillis() < start + 60_000) {
            try {
                GetMetaDataResponseHeader m = admin.getControllerMetaData(ctlAddr);
                if (m != null && m.isLeader()) {
                    Map<String, Object> r = metaData(m);
                    r.put("waitedMs", System.currentTimeMillis() - start);
                    return r;
                }
                last = String.valueOf(m);
            } catch (Exception e) {
                last = e.toString();
            }
            if (!namesrv.isAlive()) {
                throw new Harness.HarnessError("name server exited with code " + namesrv.exitValue());
            }
            Thread.sleep(300);
        }
        throw new Harness.HarnessError("the controller did not become leader within 60 s: " + last);
    }

    /**
     * Polls the broker's epoch cache until it is master (brokerId 0) with at least {@code entries} entries, then
     * until the name server routes broker-a to it (the broker registers with the name server only once master).
     */
    Map<String, Object> waitForMaster(int entries) throws Exception {
        long start = System.currentTimeMillis();
        String last = "";
        EpochEntryCache cache = null;
        while (System.currentTimeMillis() < start + 90_000) {
            try {
                EpochEntryCache c = admin.getBrokerEpochCache(brokerAddr);
                last = String.valueOf(c);
                Map<Long, String> addrs = Compat.brokerAddrs(admin, Harness.BROKER_NAME);
                if (c != null && c.getBrokerId() == 0 && c.getEpochList() != null
                    && c.getEpochList().size() >= entries && addrs != null && brokerAddr.equals(addrs.get(0L))) {
                    cache = c;
                    break;
                }
            } catch (Exception e) {
                last = e.toString();
            }
            if (!broker.isAlive()) {
                throw new Harness.HarnessError("broker exited with code " + broker.exitValue() + " before it became master");
            }
            Thread.sleep(300);
        }
        if (cache == null) {
            throw new Harness.HarnessError("broker did not become master with " + entries + " epoch entries within 90 s: "
                + last);
        }
        List<EpochEntry> list = cache.getEpochList();
        masterEpoch = list.get(list.size() - 1).getEpoch();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("waitedMs", System.currentTimeMillis() - start);
        r.put("masterEpoch", masterEpoch);
        r.put("electionLogLines", grep(h.logs.resolve((brokerRun == 1 ? "broker" : "broker-run" + brokerRun) + ".log"),
            List.of("register state", "Register state", "Change ha to master", "Failed to elect", "append failed",
                "TruncateOffset is", "truncate dirty files")));
        return r;
    }

    /** Polls the controller until broker-a has no master; then until masterEpoch stayed the same for 2 s. */
    Map<String, Object> waitNoMaster() throws Exception {
        long start = System.currentTimeMillis();
        Map<String, Object> lastSeen = null;
        Integer stableEpoch = null;
        long stableSince = 0;
        while (System.currentTimeMillis() < start + 60_000) {
            BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
            lastSeen = ri == null ? null : replicas(ri);
            boolean noMaster = ri != null && (ri.getMasterBrokerId() == null || ri.getMasterAddress() == null
                || ri.getMasterAddress().isEmpty());
            if (noMaster) {
                if (stableEpoch == null || stableEpoch != ri.getMasterEpoch()) {
                    stableEpoch = ri.getMasterEpoch();
                    stableSince = System.currentTimeMillis();
                } else if (System.currentTimeMillis() - stableSince >= 2000) {
                    Map<String, Object> r = new LinkedHashMap<>();
                    r.put("waitedMs", System.currentTimeMillis() - start);
                    r.put("inSyncStateData", lastSeen);
                    r.put("controllerMetaData", metaData(admin.getControllerMetaData(ctlAddr)));
                    return r;
                }
            }
            Thread.sleep(300);
        }
        throw new Harness.HarnessError("the controller still listed a master 60 s after the broker stopped: " + lastSeen);
    }

    BrokerReplicasInfo.ReplicasInfo replicasInfo() throws Exception {
        BrokerReplicasInfo info = admin.getInSyncStateData(ctlAddr, List.of(Harness.BROKER_NAME));
        return info == null ? null : info.getReplicasInfoTable().get(Harness.BROKER_NAME);
    }

    /** Everything the admin API says about the broker and its controller at one moment. */
    Map<String, Object> view(String tag, Map<String, Object> extra) {
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("tag", tag);
        v.put("brokerRun", brokerRun);
        v.put("atMs", System.currentTimeMillis());
        if (extra != null) {
            v.putAll(extra);
        }
        try {
            v.put("epochCache", epochCache(admin.getBrokerEpochCache(brokerAddr)));
        } catch (Exception e) {
            v.put("epochCacheError", e.toString());
        }
        try {
            BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
            v.put("inSyncStateData", ri == null ? null : replicas(ri));
        } catch (Exception e) {
            v.put("inSyncStateDataError", e.toString());
        }
        try {
            v.put("controllerMetaData", metaData(admin.getControllerMetaData(ctlAddr)));
        } catch (Exception e) {
            v.put("controllerMetaDataError", e.toString());
        }
        try {
            var ha = admin.getBrokerHAStatus(brokerAddr);
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("master", ha.isMaster());
            m.put("masterCommitLogMaxOffset", ha.getMasterCommitLogMaxOffset());
            m.put("inSyncSlaveNums", ha.getInSyncSlaveNums());
            v.put("haStatus", m);
        } catch (Exception e) {
            v.put("haStatusError", e.toString());
        }
        try {
            Map<String, String> stats = Compat.runtimeStats(admin, brokerAddr);
            v.put("commitLogMinOffset", parseLong(stats.get("commitLogMinOffset")));
            v.put("commitLogMaxOffset", parseLong(stats.get("commitLogMaxOffset")));
            Map<String, Object> picked = new TreeMap<>();
            for (Map.Entry<String, String> e : stats.entrySet()) {
                String k = e.getKey().toLowerCase();
                if (k.contains("commitlog") || k.contains("role") || k.contains("brokerid") || k.contains("epoch")
                    || k.contains("ha") && k.contains("offset")) {
                    picked.put(e.getKey(), e.getValue());
                }
            }
            v.put("runtimeStats", picked);
        } catch (Exception e) {
            v.put("runtimeStatsError", e.toString());
        }
        try {
            Properties p = admin.getBrokerConfig(brokerAddr);
            Map<String, Object> picked = new TreeMap<>();
            for (String k : p.stringPropertyNames()) {
                String lk = k.toLowerCase();
                if (lk.contains("controller") || lk.equals("brokerid") || lk.equals("brokerrole")
                    || lk.contains("epoch") || lk.contains("brokeridentity") || lk.contains("syncstateset")
                    || lk.contains("insyncreplicas") || lk.contains("allackinsyncstateset")
                    || lk.contains("electionpriority") || lk.contains("storepathrootdir")) {
                    picked.put(k, p.getProperty(k));
                }
            }
            v.put("brokerConfigEffective", picked);
        } catch (Exception e) {
            v.put("brokerConfigError", e.toString());
        }
        return v;
    }

    static Map<String, Object> epochCache(EpochEntryCache c) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("clusterName", c.getClusterName());
        m.put("brokerName", c.getBrokerName());
        m.put("brokerId", c.getBrokerId());
        List<Map<String, Object>> list = new ArrayList<>();
        for (EpochEntry e : c.getEpochList()) {
            list.add(entry(e));
        }
        m.put("epochList", list);
        m.put("maxOffset", c.getMaxOffset());
        return m;
    }

    static Map<String, Object> entry(EpochEntry e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("epoch", e.getEpoch());
        m.put("startOffset", e.getStartOffset());
        m.put("endOffset", e.getEndOffset());
        return m;
    }

    static Map<String, Object> replicas(BrokerReplicasInfo.ReplicasInfo ri) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("masterBrokerId", ri.getMasterBrokerId());
        m.put("masterAddress", ri.getMasterAddress());
        m.put("masterEpoch", ri.getMasterEpoch());
        m.put("syncStateSetEpoch", ri.getSyncStateSetEpoch());
        m.put("inSyncReplicas", identities(ri.getInSyncReplicas()));
        m.put("notInSyncReplicas", identities(ri.getNotInSyncReplicas()));
        return m;
    }

    static List<Map<String, Object>> identities(List<BrokerReplicasInfo.ReplicaIdentity> ids) {
        List<Map<String, Object>> out = new ArrayList<>();
        if (ids != null) {
            for (BrokerReplicasInfo.ReplicaIdentity id : ids) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("brokerName", id.getBrokerName());
                m.put("brokerId", id.getBrokerId());
                m.put("brokerAddress", id.getBrokerAddress());
                m.put("alive", id.getAlive());
                out.add(m);
            }
        }
        return out;
    }

    static Map<String, Object> metaData(GetMetaDataResponseHeader m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", m.getGroup());
        r.put("controllerLeaderId", m.getControllerLeaderId());
        r.put("controllerLeaderAddress", m.getControllerLeaderAddress());
        r.put("isLeader", m.isLeader());
        r.put("peers", m.getPeers());
        return r;
    }

    // =================================================================== producing and consuming

    /** The seeded, shuffled send operations of one broker run. */
    List<Workload.Op> plan(int nMain, int nBulk, int nBatches, String phase) {
        List<Workload.Op> ops = new ArrayList<>();
        for (int i = 0; i < nMain; i++) {
            final int n = mainSent++;
            ops.add(() -> sendMain(n, phase));
        }
        for (int i = 0; i < nBulk; i++) {
            final int n = bulkSent++;
            ops.add(() -> sendBulk(n, phase));
        }
        for (int i = 0; i < nBatches; i++) {
            final int b = batchesSent++;
            ops.add(() -> wl.sendBatch(T_MAIN, "ctlbatch", phase, b, 1000 + b * BATCH_SIZE, BATCH_SIZE));
        }
        Collections.shuffle(ops, rnd);
        return ops;
    }

    void sendMain(int n, String phase) {
        String kindOfBody = Workload.BODY_KINDS[n % Workload.BODY_KINDS.length];
        byte[] body = wl.body(kindOfBody);
        String tags = Workload.NORMAL_TAGS[n % Workload.NORMAL_TAGS.length];
        List<String> keys = wl.keysFor("ctl", n);
        Map<String, String> props = wl.userProps(n, n % 2 == 0);
        Message msg = wl.buildMessage(T_MAIN, tags, keys, props, body);
        Map<String, Object> r = wl.newRecord("normal", phase, T_MAIN, msg, body, kindOfBody, props, keys);
        wl.sendSimple(r, msg, null, null);
    }

    void sendBulk(int n, String phase) {
        // every third: random bytes of 4 097-8 192 (compressed by the client, but incompressible); the others
        // 2 048-4 095 bytes of text or random bytes (never compressed)
        boolean large = n % 3 == 0;
        boolean binary = large || n % 3 == 1;
        int len = large ? COMPRESS_OVER + 1 + rnd.nextInt(4096) : 2048 + rnd.nextInt(2048);
        byte[] body = binary ? wl.bytes(len) : wl.text(len);
        List<String> keys = List.of("ctlbulk-" + n);
        Map<String, String> props = new LinkedHashMap<>();
        props.put("seqNo", String.valueOf(n));
        Message msg = wl.buildMessage(T_BULK, "bulk", keys, props, body);
        Map<String, Object> r = wl.newRecord("bulk", phase, T_BULK, msg, body,
            large ? "binary-large" : binary ? "binary-medium" : "text-medium", props, keys);
        wl.sendSimple(r, msg, null, null);
    }

    // =================================================================== the real broker on damaged copies

    /**
     * Starts the broker on a copy of the final store whose {@code epochFileCheckpoint} is replaced by
     * {@code epochFile} (the .bak stays): a header that is no integer must stop it (NumberFormatException, no
     * fallback), a CRC mismatch must make it load the .bak and, once re-elected, rewrite the file from that.
     * Records the exit, or the epoch cache it reports as master and the files it then wrote; SIGKILL at the end
     * (the copy is thrown away).
     */
    Map<String, Object> damagedStart(String name, byte[] epochFile) throws Exception {
        Path copy = h.work.resolve("damaged-" + name);
        new StoreCopier(h.store, copy).copy();
        Files.deleteIfExists(copy.resolve("abort"));
        Files.write(copy.resolve("epochFileCheckpoint"), epochFile);
        Map<String, String> conf = new LinkedHashMap<>(readProperties(brokerConfFile));
        conf.put("storePathRootDir", copy.toString());
        conf.put("storePathCommitLog", copy.resolve("commitlog").toString());
        Path confFile = h.work.resolve("broker-" + name + ".conf");
        Harness.writeProperties(confFile, conf);
        String jvm = "broker-" + name;
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_" + jvm + ".xml"), h.logs.resolve(jvm + ".log"));
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("case", name);
        r.put("epochFileHex", HexFormat.of().formatHex(epochFile));
        r.put("bakHex", HexFormat.of().formatHex(Files.readAllBytes(copy.resolve("epochFileCheckpoint.bak"))));
        long start = System.currentTimeMillis();
        Process p = h.startJvm(jvm, "org.apache.rocketmq.broker.BrokerStartup", "384m",
            List.of("-c", confFile.toString()));
        h.addChild(p);
        broker = p;
        try {
            while (p.isAlive() && System.currentTimeMillis() < start + 90_000) {
                if (Files.readString(h.logs.resolve(jvm + ".out"), StandardCharsets.ISO_8859_1).contains("boot success")) {
                    break;
                }
                Thread.sleep(200);
            }
            p.waitFor(2, TimeUnit.SECONDS);
            if (!p.isAlive()) {
                r.put("started", false);
                r.put("exitCode", p.exitValue());
                r.put("outputLines", grep(h.logs.resolve(jvm + ".out"), List.of("Exception", "at org.apache.rocketmq")));
                return r;
            }
            r.put("started", true);
            brokerRun = 3;
            Map<String, Object> elected = waitForMaster(1);
            r.put("waitedMs", elected.get("waitedMs"));
            r.put("epochCache", epochCache(admin.getBrokerEpochCache(brokerAddr)));
            r.put("epochFileAfterElection", fileText(copy.resolve("epochFileCheckpoint")));
            r.put("bakAfterElection", fileText(copy.resolve("epochFileCheckpoint.bak")));
            r.put("logLines", grep(h.logs.resolve(jvm + ".log"), List.of("epoch", "Epoch")));
            return r;
        } finally {
            r.put("durationMs", System.currentTimeMillis() - start);
            p.destroyForcibly();
            p.waitFor(30, TimeUnit.SECONDS);
        }
    }

    static Map<String, String> readProperties(Path file) throws IOException {
        Properties p = new Properties();
        try (var in = Files.newBufferedReader(file, StandardCharsets.ISO_8859_1)) {
            p.load(in);
        }
        Map<String, String> m = new TreeMap<>();
        for (String k : p.stringPropertyNames()) {
            m.put(k, p.getProperty(k));
        }
        return m;
    }

    // =================================================================== the real readers on damaged copies

    /**
     * Runs the broker's own readers ({@code EpochFileCache.initCacheFromFile} → {@code CheckpointFile.read},
     * {@code BrokerMetadata}/{@code TempBrokerMetadata.readFromFile}) of 5.5.0 over copies of the files this run
     * wrote, each damaged in one deterministic way, and records what they did: the entries they loaded (from the
     * file or its .bak) or the exception they threw. The decoder's tests replay the same bytes.
     */
    void readerCases() throws Exception {
        byte[] main = Files.readAllBytes(h.store.resolve("epochFileCheckpoint"));
        byte[] bak = Files.readAllBytes(h.store.resolve("epochFileCheckpoint.bak"));
        Path dir = h.work.resolve("reader-cases");
        Files.createDirectories(dir);
        int[] n = {0};
        for (Object[] c : epochVariants(main, bak)) {
            epochCases.add(runEpochCase(dir.resolve("e" + n[0]++), (String) c[0], (byte[]) c[1], (byte[]) c[2]));
        }
        byte[] identity = Files.readAllBytes(h.store.resolve("brokerIdentity"));
        for (Object[] c : identityVariants(identity)) {
            identityCases.add(runIdentityCase(dir.resolve("i" + n[0]++), (String) c[0], (byte[]) c[1],
                (Boolean) c[2]));
        }
    }

    static List<Object[]> epochVariants(byte[] main, byte[] bak) {
        List<Object[]> v = new ArrayList<>();
        v.add(new Object[] {"as-written", main, bak});
        v.add(new Object[] {"no-bak", main, null});
        v.add(new Object[] {"main-missing", null, bak});
        v.add(new Object[] {"both-missing", null, null});
        v.add(new Object[] {"main-empty", new byte[0], bak});
        v.add(new Object[] {"main-empty-no-bak", new byte[0], null});
        v.add(new Object[] {"bak-as-main", bak, null});
        byte[] replacements = {'0', '7', '\n', '\r', '-', 'x', ' ', (byte) 0xff, 0};
        for (int i = 0; i < main.length; i++) {
            for (byte r : replacements) {
                if (main[i] != r) {
                    byte[] m = main.clone();
                    m[i] = r;
                    v.add(new Object[] {"byte " + i + "=" + (r & 0xff), m, bak});
                }
            }
            byte[] d = new byte[main.length - 1];
            System.arraycopy(main, 0, d, 0, i);
            System.arraycopy(main, i + 1, d, i, main.length - i - 1);
            v.add(new Object[] {"delete " + i, d, bak});
            byte[] t = java.util.Arrays.copyOf(main, i);
            v.add(new Object[] {"truncate " + i, t, bak});
            v.add(new Object[] {"truncate " + i + " no-bak", t, null});
            if (i < bak.length) {
                byte[] tb = java.util.Arrays.copyOf(bak, i);
                v.add(new Object[] {"crc-broken main, bak truncated " + i, flipLastDigit(main), tb});
            }
        }
        String body = new String(main, StandardCharsets.UTF_8);
        String[] lines = body.split("\n");
        List<String> entries = new ArrayList<>(List.of(lines).subList(2, lines.length));
        v.add(new Object[] {"crlf", utf8(body.replace("\n", "\r\n")), bak});
        v.add(new Object[] {"cr", utf8(body.replace("\n", "\r")), bak});
        v.add(new Object[] {"no-final-newline", utf8(body.substring(0, body.length() - 1)), bak});
        v.add(new Object[] {"blank-line-at-end", utf8(body + "\n"), bak});
        v.add(new Object[] {"garbage-line-at-end", utf8(body + "junk\n"), bak});
        v.add(new Object[] {"bom", concat(new byte[] {(byte) 0xef, (byte) 0xbb, (byte) 0xbf}, main), bak});
        v.add(new Object[] {"plus-count", utf8("+" + body), bak});
        v.add(new Object[] {"zero-padded-count", utf8("0" + body), bak});
        v.add(new Object[] {"space-before-count", utf8(" " + body), bak});
        v.add(new Object[] {"invalid-utf8-at-end", concat(main, new byte[] {(byte) 0xc3}), bak});
        v.add(new Object[] {"count-zero-crc-zero", utf8("0\n0\n"), bak});
        v.add(new Object[] {"count-zero-crc-zero-no-bak", utf8("0\n0\n"), null});
        v.add(new Object[] {"count-only", utf8(lines[0] + "\n"), bak});
        v.add(new Object[] {"headers-only", utf8(lines[0] + "\n" + lines[1] + "\n"), bak});
        v.add(new Object[] {"crc-unchecked", withCrc(entries, 0, entries.size()), bak});
        v.add(new Object[] {"crc-minus-zero", utf8(entries.size() + "\n-0\n" + String.join("\n", entries) + "\n"),
            bak});
        v.add(new Object[] {"count-too-high", withCrc(entries, -1, entries.size() + 1), bak});
        v.add(new Object[] {"reversed", withCrc(reversed(entries), -1, entries.size()), bak});
        List<String> dup = new ArrayList<>(entries);
        dup.add(entries.get(entries.size() - 1));
        v.add(new Object[] {"duplicate-last-entry", withCrc(dup, -1, dup.size()), bak});
        List<String> more = new ArrayList<>(entries);
        more.add("9-99999999");
        v.add(new Object[] {"extra-entry-valid-crc", withCrc(more, -1, more.size()), bak});
        v.add(new Object[] {"trailing-dash", withCrc(List.of(entries.get(0) + "-"), -1, 1), bak});
        v.add(new Object[] {"double-dash", withCrc(List.of("1--0"), -1, 1), bak});
        v.add(new Object[] {"leading-dash", withCrc(List.of("-1-0"), -1, 1), bak});
        v.add(new Object[] {"lone-dash", withCrc(List.of(entries.get(0), "-"), -1, 1), bak});
        v.add(new Object[] {"plus-signs", withCrc(List.of("+1-+0"), -1, 1), bak});
        v.add(new Object[] {"arabic-indic-digits", withCrc(List.of("\u0661-\u0660"), -1, 1), bak});
        v.add(new Object[] {"fullwidth-digits", withCrc(List.of("\uff11-\uff10"), -1, 1), bak});
        v.add(new Object[] {"math-bold-digit", withCrc(List.of("\ud835\udfcf-0"), -1, 1), bak});
        v.add(new Object[] {"epoch-int-max", withCrc(List.of("2147483647-0"), -1, 1), bak});
        v.add(new Object[] {"epoch-overflow", withCrc(List.of("2147483648-0"), -1, 1), bak});
        v.add(new Object[] {"offset-long-max", withCrc(List.of("1-9223372036854775807"), -1, 1), bak});
        v.add(new Object[] {"offset-overflow", withCrc(List.of("1-9223372036854775808"), -1, 1), bak});
        v.add(new Object[] {"space-in-entry", withCrc(List.of("1 -0"), -1, 1), bak});
        v.add(new Object[] {"bak-garbled-main-crc-broken", flipLastDigit(main), utf8("x\n")});
        v.add(new Object[] {"bak-crc-broken-main-crc-broken", flipLastDigit(main), flipLastDigit(bak)});
        return v;
    }

    /** count (or -1: the number of entries) and CRC (or -1: the real one) over "entry\n" lines. */
    static byte[] withCrc(List<String> entries, int crc, int count) {
        StringBuilder sb = new StringBuilder();
        for (String e : entries) {
            sb.append(e).append('\n');
        }
        int real = UtilAll.crc32(sb.toString().getBytes(StandardCharsets.UTF_8));
        return utf8(count + "\n" + (crc < 0 ? real : crc) + "\n" + sb);
    }

    static byte[] flipLastDigit(byte[] file) {
        // the CRC header's last digit: "N\nCRC\n..." -> CRC+1 (mod 10 on that digit)
        byte[] m = file.clone();
        int nl1 = indexOf(m, (byte) '\n', 0);
        int nl2 = indexOf(m, (byte) '\n', nl1 + 1);
        int at = nl2 - 1;
        m[at] = (byte) ('0' + (m[at] - '0' + 1) % 10);
        return m;
    }

    static int indexOf(byte[] a, byte b, int from) {
        for (int i = from; i < a.length; i++) {
            if (a[i] == b) {
                return i;
            }
        }
        return -1;
    }

    static List<String> reversed(List<String> l) {
        List<String> r = new ArrayList<>(l);
        Collections.reverse(r);
        return r;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] r = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }

    static Map<String, Object> runEpochCase(Path dir, String name, byte[] main, byte[] bak) throws IOException {
        Files.createDirectories(dir);
        Path file = dir.resolve("epochFileCheckpoint");
        if (main != null) {
            Files.write(file, main);
        }
        if (bak != null) {
            Files.write(dir.resolve("epochFileCheckpoint.bak"), bak);
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("case", name);
        r.put("main", main == null ? null : HexFormat.of().formatHex(main));
        r.put("bak", bak == null ? null : HexFormat.of().formatHex(bak));
        EpochFileCache cache = new EpochFileCache(file.toString());
        try {
            boolean ok = cache.initCacheFromFile();
            r.put("outcome", "returned");
            r.put("returned", ok);
            List<Map<String, Object>> entries = new ArrayList<>();
            for (EpochEntry e : cache.getAllEntries()) {
                entries.add(entry(e));
            }
            r.put("entries", entries);
        } catch (Throwable t) {
            r.put("outcome", "threw");
            r.put("exception", t.getClass().getName());
            r.put("message", String.valueOf(t.getMessage()));
        }
        return r;
    }

    static List<Object[]> identityVariants(byte[] identity) {
        String s = new String(identity, StandardCharsets.UTF_8);
        List<Object[]> v = new ArrayList<>();
        v.add(new Object[] {"as-written", identity, false});
        v.add(new Object[] {"trailing-newline", utf8(s + "\n"), false});
        v.add(new Object[] {"trailing-hash", utf8(s + "#"), false});
        v.add(new Object[] {"extra-field", utf8(s + "#extra"), false});
        v.add(new Object[] {"no-id", utf8(s.substring(0, s.lastIndexOf('#'))), false});
        v.add(new Object[] {"non-numeric-id", utf8(s.substring(0, s.lastIndexOf('#')) + "#x"), false});
        v.add(new Object[] {"plus-id", utf8(s.substring(0, s.lastIndexOf('#')) + "#+7"), false});
        v.add(new Object[] {"empty-cluster", utf8(s.substring(s.indexOf('#'))), false});
        v.add(new Object[] {"empty", new byte[0], false});
        v.add(new Object[] {"invalid-utf8-name", concat(new byte[] {(byte) 0xff}, identity), false});
        v.add(new Object[] {"temp", utf8(s + "#127.0.0.1:10911;1700000000000"), true});
        v.add(new Object[] {"temp-without-code", identity, true});
        v.add(new Object[] {"temp-empty-code", utf8(s + "#"), true});
        v.add(new Object[] {"temp-extra-field", utf8(s + "#127.0.0.1:10911;1700000000000#more"), true});
        return v;
    }

    static Map<String, Object> runIdentityCase(Path dir, String name, byte[] data, boolean temp) throws IOException {
        Files.createDirectories(dir);
        Path file = dir.resolve(temp ? "brokerIdentity-temp" : "brokerIdentity");
        Files.write(file, data);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("case", name);
        r.put("temp", temp);
        r.put("data", HexFormat.of().formatHex(data));
        BrokerMetadata md = temp ? new TempBrokerMetadata(file.toString()) : new BrokerMetadata(file.toString());
        try {
            md.readFromFile();
            r.put("outcome", "returned");
        } catch (Throwable t) {
            r.put("outcome", "threw");
            r.put("exception", t.getClass().getName());
        }
        r.put("isLoaded", md.isLoaded());
        r.put("clusterName", md.getClusterName());
        r.put("brokerName", md.getBrokerName());
        r.put("brokerId", md.getBrokerId());
        r.put("registerCheckCode", temp ? ((TempBrokerMetadata) md).getRegisterCheckCode() : null);
        return r;
    }

    // =================================================================== layout

    /** Every file under a store root (relative path, size) and the controller-mode files' bytes. */
    static Map<String, Object> describeLayout(Path root) throws IOException {
        Map<String, Object> d = new LinkedHashMap<>();
        List<Map<String, Object>> files = new ArrayList<>();
        for (Map.Entry<String, Long> e : StoreCopier.listFiles(root).entrySet()) {
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("path", e.getKey());
            f.put("size", e.getValue());
            files.add(f);
        }
        d.put("files", files);
        try (var s = Files.list(root)) {
            d.put("topLevel", s.map(p -> p.getFileName().toString()).sorted().toList());
        }
        for (String f : List.of("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity",
            "brokerIdentity-temp", "brokerIdentity.bak")) {
            d.put(f, fileText(root.resolve(f)));
        }
        return d;
    }

    static Map<String, Object> fileText(Path p) throws IOException {
        if (!Files.exists(p)) {
            return null;
        }
        byte[] b = Files.readAllBytes(p);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("text", new String(b, StandardCharsets.UTF_8));
        m.put("hex", HexFormat.of().formatHex(b));
        m.put("size", b.length);
        return m;
    }

    /** The embedded controller's DLedger store (kept only as this listing: the data file is a 4 MiB mapped file). */
    static Map<String, Object> describeControllerStore(Path root) throws IOException {
        Map<String, Object> d = new LinkedHashMap<>();
        if (!Files.isDirectory(root)) {
            d.put("missing", true);
            return d;
        }
        d.put("files", StoreCopier.listFiles(root));
        try (var walk = Files.walk(root)) {
            for (Path p : (Iterable<Path>) walk::iterator) {
                String n = p.getFileName().toString();
                if (Files.isRegularFile(p) && (n.equals("currterm") || n.startsWith("checkpoint"))) {
                    d.put(root.relativize(p).toString(), Files.readString(p, StandardCharsets.ISO_8859_1));
                }
            }
        }
        return d;
    }

    static List<String> grep(Path file, List<String> needles) throws IOException {
        List<String> out = new ArrayList<>();
        if (!Files.exists(file)) {
            return out;
        }
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            for (String n : needles) {
                if (line.contains(n)) {
                    out.add(line.length() > 400 ? line.substring(0, 400) : line);
                    break;
                }
            }
            if (out.size() >= 40) {
                break;
            }
        }
        return out;
    }

    // =================================================================== truth

    @Override
    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> msgs = wl == null ? new ArrayList<>() : new ArrayList<>(wl.sent);
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        Map<String, Integer> epochOfRun = new TreeMap<>();
        for (Map<String, Object> v : views) {
            if (v.get("masterEpoch") != null) {
                epochOfRun.put("run" + v.get("brokerRun"), (Integer) v.get("masterEpoch"));
            }
        }
        for (Map<String, Object> r : msgs) {
            Object id = r.get("offsetMsgId");
            r.put("commitLogOffset", id == null ? null : Long.parseUnsignedLong(
                ((String) id).substring(((String) id).length() - 16), 16));
            String phase = (String) r.get("phase");
            r.put("brokerRun", Integer.parseInt(phase.substring(3)));
            r.put("masterEpoch", epochOfRun.get(phase));
            boolean acked = Boolean.TRUE.equals(r.get("acked"));
            r.put("inSnapshots", acked && "run1".equals(phase) ? List.of("run1") : List.of());
            r.put("snapshot", !acked ? null : "run1".equals(phase) ? "run1" : "final");
        }
        Harness.writeJsonLines(h.truth.resolve("messages.jsonl"), msgs);
        if (wl != null) {
            List<Map<String, Object>> cons;
            synchronized (wl.consumed) {
                cons = new ArrayList<>(wl.consumed);
            }
            Harness.writeJsonLines(h.truth.resolve("consumed.jsonl"), cons);
            Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), wl.topicSnapshot);
            notes.putAll(wl.notes);
            run.put("counts", wl.counts(msgs, cons));
        }
        Harness.writeJsonLines(h.truth.resolve("consumer_groups.jsonl"), groupSnapshot);
        Harness.writeJsonLines(h.truth.resolve("epoch_reader_cases.jsonl"), epochCases);
        Harness.writeJsonLines(h.truth.resolve("identity_reader_cases.jsonl"), identityCases);
        controllerTruth.put("views", views);
        controllerTruth.put("masterEpochByRun", epochOfRun);
        Harness.writeJson(h.truth.resolve("controller.json"), controllerTruth);

        run.put("topics", topics());
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_ALL, "push, concurrently, both topics, always CONSUME_SUCCESS; Diff 0 before each stop");
        groups.put(G_HALF, "pull, online in both runs; at the end of run 2 the first half (maxOffset/2) of every "
            + "queue, committed synchronously");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", COMPRESS_OVER);
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        run.put("client", client);
        Map<String, Object> plan = new LinkedHashMap<>();
        for (int i = 0; i < PLAN.length; i++) {
            plan.put("run" + (i + 1), Map.of("main", PLAN[i][0], "bulk", PLAN[i][1], "batches",
                PLAN[i][2] + " x " + BATCH_SIZE));
        }
        run.put("plan", plan);
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }

    static Long parseLong(Object o) {
        try {
            return o == null ? null : Long.parseLong(String.valueOf(o).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }
}
