package rmqharness;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.PopAckConstants;
import org.apache.rocketmq.common.constant.ConsumeInitMode;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The {@code v5-pop} and {@code v5-pop-kv} scenario: one 5.5.0 broker (classic POP: {@code enablePopBufferMerge=false},
 * {@code popConsumerKVServiceEnable=false}, {@code timerWheelEnable=true}, as the broker's defaults; {@code v5-pop-kv}:
 * {@code popConsumerKVServiceInit} and {@code popConsumerKVServiceEnable}, KV pop) whose store holds
 * the state of POP consumers next to classic ones, all on {@code TopicPop} (2 queues, 100 messages each, keys, tags,
 * user properties; message n goes to queue n % 2 at queue offset n / 2).
 *
 * <ul>
 *   <li>{@code G_POP}: the low-level remoting calls of {@link MQClientAPIImpl} (pop, ack, batch ack,
 *   changeInvisibleTime), invisible time 600 s. q0: three pops of 20 (0-59); acks 0-14 and 30-34, one batch ack of
 *   15-29 (two checkpoints: 15-19 and 20-29), changeInvisibleTime to 900 s on 35 and 36 (left unacked), so 35-59 stay
 *   in flight (25). q1: two pops of 20 (0-39); acks 0-18; changeInvisibleTime to 900 s on 19, then an ack with the
 *   handle that call returned; 20-39 stay in flight (20).</li>
 *   <li>{@code G_PUSHPOP}: a {@link DefaultMQPushConsumer} in POP mode (admin {@code setMessageRequestMode} POP,
 *   {@code setClientRebalance(false)}, {@code popInvisibleTime} 300 s); its listener never returns for queue offsets
 *   5, 6 and 7 (both queues), so exactly those 6 stay in flight; every other message is acked (observed through an
 *   {@link RPCHook} on its client: the pop responses and every ack request and its response code). Shut down.</li>
 *   <li>{@code G_PUSH}: a classic push consumer, consumes and commits everything. Shut down.</li>
 *   <li>{@code G_PULL}: a classic {@link DefaultMQPullConsumer} that pulls offsets 0-79 of each queue and commits 60,
 *   so the admin API's in-flight (pullOffset - consumerOffset) is 20 per queue. Shut down.</li>
 * </ul>
 *
 * <p>A hot copy {@code snapshots/s1/store} (StoreCopier) is taken right after G_POP's five pops, before any ack (all
 * 100 popped messages in flight). At the end the admin view is recorded once it is stable and the broker has persisted
 * {@code config/consumerOffset.json} after it, then the broker gets SIGTERM (its shutdown hook persists the same
 * values again); the file is compared with the admin rows afterwards ({@code pop.json} -> {@code consumerOffsetFile}).
 * All invisible times are far beyond the run: nothing is revived, the in-flight sets are fixed by the workload.
 *
 * <p>Own {@code main} (stores.py starts it for this variant, see {@code MAIN_CLASSES}); a {@link Harness} in its
 * "-clean" mode is used for the helpers. 5.x only.
 *
 * <p>Truth ({@code truth/}): {@code messages.jsonl} (ModeWorkload's shape plus {@code commitLogOffset}),
 * {@code consumed.jsonl}, {@code consumer_groups.jsonl} (the admin rows plus {@code inflight}),
 * {@code topic_stats.jsonl}, {@code pop.json} (pops, acks, batch acks, changeInvisibleTime calls, the in-flight sets
 * at s1 and at the end, the revive topic, broker properties, the admin API views, the consumerOffset.json check),
 * {@code snapshots.json}, {@code run.json}.
 */
final class PopWorkload extends StandaloneScenario {
    /**
     * The variants this class runs: classic pop ({@code v5-pop}: checkpoints and acks in the commitlog) and KV pop
     * ({@code v5-pop-kv}: {@code popConsumerKVServiceEnable}, one {@code kvStore/} record per popped message).
     */
    static final Map<String, Boolean> KV = Map.of("v5-pop", false, "v5-pop-kv", true);
    final String variant;
    static final long SEED = 20240620L;
    static final String T_POP = "TopicPop";
    static final int QUEUES = 2;
    static final int PER_QUEUE = 100;
    static final String G_POP = "G_POP";
    static final String G_PUSHPOP = "G_PUSHPOP";
    static final String G_PUSH = "G_PUSH";
    static final String G_PULL = "G_PULL";
    static final List<String> GROUPS = List.of(G_POP, G_PUSHPOP, G_PUSH, G_PULL);
    static final String[] TAGS = {"TagA", "TagB", "TagC"};

    /** G_POP: invisible time of every pop, and the one changeInvisibleTime sets. */
    static final long POP_INVISIBLE_MS = 600_000L;
    static final long CHANGED_INVISIBLE_MS = 900_000L;
    /** G_POP: {queueId, maxMsgNums} per pop, in order. */
    static final int[][] POP_PLAN = {{0, 20}, {0, 20}, {0, 20}, {1, 20}, {1, 20}};
    /** G_PUSHPOP: popInvisibleTime (the client accepts 5-300 s) and the queue offsets its listener never returns for. */
    static final long PUSHPOP_INVISIBLE_MS = 300_000L;
    static final Set<Long> HUNG_OFFSETS = Set.of(5L, 6L, 7L);
    /** G_PULL: pulls [0, PULL_TO) of every queue, commits PULL_COMMIT. */
    static final long PULL_TO = 80;
    static final long PULL_COMMIT = 60;
    static final long API_TIMEOUT_MS = 10_000L;

    final Random rnd = new Random(SEED);
    final Map<String, Object> notes = new LinkedHashMap<>();
    final Map<String, Object> popTruth = new LinkedHashMap<>();
    final Map<String, Object> snapshot = new LinkedHashMap<>();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    final List<Map<String, Object>> pops = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> acks = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> batchAcks = new ArrayList<>();
    final List<Map<String, Object>> changes = new ArrayList<>();
    final List<Map<String, Object>> pushPopDeliveries = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> unexpectedRequests = Collections.synchronizedList(new ArrayList<>());
    /** The handle of every popped and not (yet) acked message: "group/queueId/offset" -> handle. */
    final Map<String, Map<String, Object>> inFlight = new ConcurrentHashMap<>();
    final Set<String> hung = ConcurrentHashMap.newKeySet();
    final Set<String> pushPopAcked = ConcurrentHashMap.newKeySet();
    Workload wl;
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    MQClientAPIImpl api;
    DefaultMQPushConsumer cPushPop;
    DefaultMQPushConsumer cPush;
    DefaultMQPullConsumer cPull;
    Process namesrv;
    Process broker;
    String nsAddr;
    String brokerAddr;
    long s1CopyStartMs = -1;

    PopWorkload(Harness h, String variant) {
        super(h);
        this.variant = variant;
    }

    /** Usage: {@code java -cp ... rmqharness.PopWorkload --variant v5-pop|v5-pop-kv --out DIR [--timeout SEC]}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "PopWorkload", KV.keySet(), PopWorkload::new);
    }

    // =================================================================== flow

    @Override
    void runScenario(Map<String, Object> run) throws Exception {
        String lo = h.loopback;
        int nsPort = Harness.freePort(lo, 0, 0);
        Set<Integer> taken = new HashSet<>(List.of(nsPort));
        int brokerPort = Harness.freePort(lo, 2, 1, taken);
        nsAddr = Harness.hostPort(lo, nsPort);
        brokerAddr = Harness.hostPort(lo, brokerPort);

        Map<String, String> nsConf = new LinkedHashMap<>();
        nsConf.put("listenPort", String.valueOf(nsPort));
        nsConf.put("bindAddress", lo);
        nsConf.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        nsConf.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        nsConf.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        nsConf.put("scanAvailableNameSrv", "false");

        Map<String, String> brokerConf = h.brokerConfig(nsAddr, brokerPort);
        // classic POP, the 5.5.0 defaults written out: checkpoints and acks go to the commitlog (through the timer
        // wheel), none is held in the merge buffer, no RocksDB kvStore; v5-pop-kv: a kvStore/ record per popped
        // message instead (PopConsumerService)
        brokerConf.put("timerWheelEnable", "true");
        brokerConf.put("enablePopBufferMerge", "false");
        brokerConf.put("popConsumerKVServiceInit", String.valueOf(KV.get(variant)));
        brokerConf.put("popConsumerKVServiceEnable", String.valueOf(KV.get(variant)));

        Path nsConfFile = h.work.resolve("namesrv.conf");
        Path brokerConfFile = h.work.resolve("broker.conf");
        Harness.writeProperties(nsConfFile, nsConf);
        Harness.writeProperties(brokerConfFile, brokerConf);
        Files.copy(nsConfFile, h.logs.resolve("namesrv.conf"));
        Files.copy(brokerConfFile, h.logs.resolve("broker.conf"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_namesrv.xml"), h.logs.resolve("namesrv.log"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_broker.xml"), h.logs.resolve("broker.log"));

        run.put("variant", variant);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", "clean");
        run.put("scenario", "pop");
        run.put("seed", SEED);
        run.put("javaVersion", System.getProperty("java.version"));
        Map<String, Object> ports = new LinkedHashMap<>();
        ports.put("namesrv", nsPort);
        ports.put("broker", brokerPort);
        ports.put("brokerFast", brokerPort - 2);
        ports.put("brokerHa", brokerPort + 1);
        run.put("ports", ports);
        run.put("namesrvAddr", nsAddr);
        run.put("brokerAddr", brokerAddr);
        run.put("brokerName", Harness.BROKER_NAME);
        run.put("clusterName", Harness.CLUSTER);
        run.put("brokerConfig", brokerConf);
        run.put("namesrvConfig", nsConf);
        run.put("childJvmOptions", Harness.ADD_OPENS);
        run.put("storePathAtGeneration", h.store.toString());
        popTruth.put("topic", T_POP);
        popTruth.put("queues", QUEUES);
        popTruth.put("clusterName", Harness.CLUSTER);
        popTruth.put("brokerName", Harness.BROKER_NAME);
        popTruth.put("reviveTopic", PopAckConstants.buildClusterReviveTopic(Harness.CLUSTER));
        popTruth.put("reviveGroup", PopAckConstants.REVIVE_GROUP);
        popTruth.put("timerTopic", Workload.TIMER_TOPIC);
        popTruth.put("brokerProperties", brokerConf);

        namesrv = h.startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "128m",
            List.of("-c", nsConfFile.toString()));
        h.addChild(namesrv);
        h.waitForLine("namesrv", namesrv, h.logs.resolve("namesrv.out"), "boot success", 60);
        h.mark("namesrvStarted");
        broker = h.startJvm("broker", "org.apache.rocketmq.broker.BrokerStartup", "384m",
            List.of("-c", brokerConfFile.toString()));
        h.addChild(broker);
        h.waitForLine("broker", broker, h.logs.resolve("broker.out"), "boot success", 120);
        h.mark("brokerStarted");

        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(lo);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        waitRegistered();
        h.mark("brokerRegistered");
        popTruth.put("brokerConfigEffective", popBrokerConfig());

        wl = new Workload(h, nsAddr, brokerAddr, rnd);
        wl.admin = admin;
        for (String g : GROUPS) {
            wl.positions.put(g, ConcurrentHashMap.newKeySet());
        }
        wl.createTopics(Map.of(T_POP, QUEUES));
        for (String g : GROUPS) {
            Compat.createGroup(admin, brokerAddr, g);
        }
        h.mark("topicsCreated");

        producer = new DefaultMQProducer("PG_POP");
        wl.configureProducer(producer, "harness-producer");
        producer.start();
        wl.producer = producer;
        api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        for (int n = 0; n < QUEUES * PER_QUEUE; n++) {
            send(n);
        }
        checkSends();
        h.mark("produced");

        // ---- G_POP: the pops, the hot copy (everything popped is in flight), then acks and changes
        popLowLevel();
        h.mark("gPopPopped");
        hotCopy();
        h.mark("s1Copied");
        ackLowLevel();
        h.mark("gPopAcked");

        // ---- G_PUSHPOP and G_PUSH consume concurrently, G_PULL pulls meanwhile
        startPushPop();
        startPush();
        h.mark("pushConsumersStarted");
        pullAndCommit();
        h.mark("gPullDone");
        waitPushPop();
        h.mark("gPushPopDone");
        waitPush();
        h.mark("gPushDone");
        Workload.shutdownQuietly(cPushPop);
        Workload.shutdownQuietly(cPush);
        Workload.shutdownQuietly(cPull);
        h.mark("consumersStopped");

        popTruth.put("inflight", inFlightRows(null));
        snapshotGroups();
        h.mark("groupsSnapshot");
        wl.snapshotTopics();
        popTruth.put("adminViews", adminViews());
        popTruth.put("brokerConfigBeforeStop", popBrokerConfig());
        h.mark("topicsSnapshot");
        producer.shutdown();
        admin.shutdown();
        Thread.sleep(300);
        Map<String, Object> shutdown = shutdownBroker();
        run.put("shutdown", shutdown);
        popTruth.put("brokerShutdown", shutdown);
        h.mark("brokerStopped");
        namesrv.destroyForcibly(); // nothing of the name server is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        popTruth.put("consumerOffsetFile", checkConsumerOffsetFile());
        h.mark("end");
    }

    /** Waits until the name server lists this broker as broker-a's master. */
    void waitRegistered() throws Exception {
        long end = System.currentTimeMillis() + 60_000;
        String last = "";
        while (System.currentTimeMillis() < end) {
            try {
                Map<Long, String> addrs = Compat.brokerAddrs(admin, Harness.BROKER_NAME);
                last = String.valueOf(addrs);
                if (addrs != null && brokerAddr.equals(addrs.get(0L))) {
                    return;
                }
            } catch (Exception e) {
                last = e.toString();
            }
            if (!broker.isAlive()) {
                throw new Harness.HarnessError("broker exited with code " + broker.exitValue());
            }
            Thread.sleep(200);
        }
        throw new Harness.HarnessError("broker did not register with the name server within 60 s: " + last);
    }

    /** The broker's effective POP, revive, timer and ack settings (what it really runs with). */
    Map<String, Object> popBrokerConfig() {
        Map<String, Object> picked = new TreeMap<>();
        try {
            Properties p = admin.getBrokerConfig(brokerAddr);
            for (String k : p.stringPropertyNames()) {
                String lk = k.toLowerCase();
                if (lk.contains("pop") || lk.contains("revive") || lk.startsWith("timer") || lk.contains("ackasync")
                    || lk.contains("ckasync") || lk.contains("inackqueue") || lk.contains("ackmessage")
                    || lk.equals("brokerclustername") || lk.equals("flushconsumeroffsetinterval")
                    || lk.contains("retrytopicv2") || lk.contains("messagerequestmode")) {
                    picked.put(k, p.getProperty(k));
                }
            }
        } catch (Exception e) {
            picked.put("error", e.toString());
        }
        return picked;
    }

    // =================================================================== producing

    /** Message n: queue n % 2 (selector), tag TagA/B/C, key pop-n (and a second key for every fifth). */
    void send(int n) {
        byte[] body = wl.body("text-small");
        String tags = TAGS[n % TAGS.length];
        List<String> keys = new ArrayList<>(List.of("pop-" + n));
        if (n % 5 == 0) {
            keys.add(n % 2 == 0 ? "键-" + n : "🔑" + n);
        }
        Map<String, String> props = wl.userProps(n, n % 2 == 0);
        Message msg = wl.buildMessage(T_POP, tags, keys, props, body);
        Map<String, Object> r = wl.newRecord("normal", "main", T_POP, msg, body, "text-small", props, keys);
        long start = System.currentTimeMillis();
        try {
            SendResult res = producer.send(msg, Workload.BY_ARG, n);
            wl.fillResult(r, msg, res, start, null, null);
        } catch (Exception e) {
            wl.fillError(r, msg, e, start, n % QUEUES);
        }
        wl.sent.add(r);
    }

    /** Every send acked, message n at queue n % 2, offset n / 2: the plans below rely on it. */
    void checkSends() {
        for (Map<String, Object> r : wl.sent) {
            int n = (Integer) r.get("seq");
            if (!Boolean.TRUE.equals(r.get("acked")) || ((Number) r.get("queueId")).intValue() != n % QUEUES
                || ((Number) r.get("queueOffset")).longValue() != n / QUEUES) {
                throw new Harness.HarnessError("send " + n + " did not land at queue " + n % QUEUES + " offset "
                    + n / QUEUES + ": " + r.get("sendStatus") + " " + r.get("queueId") + "/" + r.get("queueOffset")
                    + " " + r.get("error"));
            }
        }
    }

    // =================================================================== G_POP (low-level remoting calls)

    void popLowLevel() throws Exception {
        int seq = 0;
        for (int[] p : POP_PLAN) {
            PopMessageRequestHeader hdr = new PopMessageRequestHeader();
            hdr.setConsumerGroup(G_POP);
            hdr.setTopic(T_POP);
            hdr.setQueueId(p[0]);
            hdr.setMaxMsgNums(p[1]);
            hdr.setInvisibleTime(POP_INVISIBLE_MS);
            hdr.setPollTime(1000);
            hdr.setBornTime(System.currentTimeMillis());
            hdr.setInitMode(ConsumeInitMode.MIN);
            hdr.setExpType("TAG");
            hdr.setExp("*");
            hdr.setOrder(false);
            long start = System.currentTimeMillis();
            CompletableFuture<PopResult> f = new CompletableFuture<>();
            api.popMessageAsync(Harness.BROKER_NAME, brokerAddr, hdr, API_TIMEOUT_MS, new PopCallback() {
                @Override
                public void onSuccess(PopResult r) {
                    f.complete(r);
                }

                @Override
                public void onException(Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            PopResult r = f.get(API_TIMEOUT_MS + 5000, TimeUnit.MILLISECONDS);
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("group", G_POP);
            row.put("seq", seq++);
            row.put("api", "MQClientAPIImpl.popMessageAsync");
            row.put("requestQueueId", p[0]);
            row.put("maxMsgNums", p[1]);
            row.put("requestInvisibleTime", POP_INVISIBLE_MS);
            row.put("requestMs", start);
            row.put("responseMs", System.currentTimeMillis());
            row.put("status", String.valueOf(r.getPopStatus()));
            row.put("popTime", r.getPopTime());
            row.put("invisibleTime", r.getInvisibleTime());
            row.put("restNum", r.getRestNum());
            List<Long> offsets = new ArrayList<>();
            List<Map<String, Object>> msgs = new ArrayList<>();
            MessageQueue mq = new MessageQueue(T_POP, Harness.BROKER_NAME, p[0]);
            for (MessageExt m : r.getMsgFoundList() == null ? List.<MessageExt>of() : r.getMsgFoundList()) {
                offsets.add(m.getQueueOffset());
                String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
                Map<String, Object> handle = handle(G_POP, m.getQueueId(), m.getQueueOffset(), ck);
                handle.put("msgId", m.getMsgId());
                msgs.add(handle);
                inFlight.put(key(G_POP, m.getQueueId(), m.getQueueOffset()), handle);
                wl.recordConsumed(G_POP, mq, m, "POPPED");
            }
            row.put("queueId", p[0]);
            row.put("offsets", offsets);
            row.put("messages", msgs);
            pops.add(row);
            long first = offsetsBefore(p[0], seq - 1);
            List<Long> want = new ArrayList<>();
            for (long o = first; o < first + p[1]; o++) {
                want.add(o);
            }
            if (!want.equals(offsets)) {
                throw new Harness.HarnessError("G_POP pop " + (seq - 1) + " of queue " + p[0] + " returned " + offsets
                    + " (" + r.getPopStatus() + "), planned " + want);
            }
        }
    }

    /** The first offset pop {@code index} of queue q gets: the sum of the earlier pops of q. */
    static long offsetsBefore(int q, int index) {
        long n = 0;
        for (int i = 0; i < index; i++) {
            if (POP_PLAN[i][0] == q) {
                n += POP_PLAN[i][1];
            }
        }
        return n;
    }

    void ackLowLevel() throws Exception {
        // queue 0: acks 0-14, a batch ack of 15-29 (across the checkpoints of pops 1 and 2), acks 30-34,
        // changeInvisibleTime(900 s) on 35 and 36, which stay in flight with 37-59
        for (long o = 0; o < 15; o++) {
            ack(G_POP, 0, o, handleOf(G_POP, 0, o));
        }
        List<Map<String, Object>> batch = new ArrayList<>();
        for (long o = 15; o < 30; o++) {
            batch.add(handleOf(G_POP, 0, o));
        }
        batchAck(G_POP, batch);
        for (long o = 30; o < 35; o++) {
            ack(G_POP, 0, o, handleOf(G_POP, 0, o));
        }
        changeInvisible(G_POP, 0, 35, CHANGED_INVISIBLE_MS, "left in flight");
        changeInvisible(G_POP, 0, 36, CHANGED_INVISIBLE_MS, "left in flight");
        // queue 1: acks 0-18; 19: changeInvisibleTime(900 s), then an ack with the handle that call returned
        for (long o = 0; o < 19; o++) {
            ack(G_POP, 1, o, handleOf(G_POP, 1, o));
        }
        Map<String, Object> changed = changeInvisible(G_POP, 1, 19, CHANGED_INVISIBLE_MS,
            "acked afterwards with the new handle");
        ack(G_POP, 1, 19, changed);
        expectInFlight(G_POP, 0, range(35, 60));
        expectInFlight(G_POP, 1, range(20, 40));
    }

    Map<String, Object> handleOf(String group, int q, long offset) {
        Map<String, Object> hd = inFlight.get(key(group, q, offset));
        if (hd == null) {
            throw new Harness.HarnessError(group + " has no handle for queue " + q + " offset " + offset);
        }
        return hd;
    }

    void ack(String group, int q, long offset, Map<String, Object> hd) throws Exception {
        String ck = (String) hd.get("extraInfo");
        String[] x = ExtraInfoUtil.split(ck);
        AckMessageRequestHeader hdr = new AckMessageRequestHeader();
        hdr.setTopic(ExtraInfoUtil.getRealTopic(x, T_POP, group));
        hdr.setQueueId(ExtraInfoUtil.getQueueId(x));
        hdr.setOffset(ExtraInfoUtil.getQueueOffset(x));
        hdr.setConsumerGroup(group);
        hdr.setExtraInfo(ck);
        hdr.setBrokerName(Harness.BROKER_NAME);
        long start = System.currentTimeMillis();
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.ackMessageAsync(brokerAddr, API_TIMEOUT_MS, callback(f), hdr);
        AckResult r = f.get(API_TIMEOUT_MS + 5000, TimeUnit.MILLISECONDS);
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("group", group);
        row.put("api", "MQClientAPIImpl.ackMessageAsync");
        row.put("topic", T_POP);
        row.put("queueId", q);
        row.put("offset", offset);
        row.putAll(parsed(ck));
        row.put("requestMs", start);
        row.put("responseMs", System.currentTimeMillis());
        row.put("status", String.valueOf(r.getStatus()));
        acks.add(row);
        if (!"OK".equals(String.valueOf(r.getStatus()))) {
            throw new Harness.HarnessError(group + " ack of queue " + q + " offset " + offset + ": " + r.getStatus());
        }
        inFlight.remove(key(group, q, offset));
    }

    void batchAck(String group, List<Map<String, Object>> handles) throws Exception {
        List<String> infos = new ArrayList<>();
        List<Long> offsets = new ArrayList<>();
        Map<String, List<Long>> byCheckpoint = new TreeMap<>();
        for (Map<String, Object> hd : handles) {
            infos.add((String) hd.get("extraInfo"));
            offsets.add(((Number) hd.get("queueOffset")).longValue());
            byCheckpoint.computeIfAbsent(hd.get("ckQueueOffset") + "@" + hd.get("popTime"), k -> new ArrayList<>())
                .add(((Number) hd.get("queueOffset")).longValue());
        }
        int q = ((Number) handles.get(0).get("queueId")).intValue();
        long start = System.currentTimeMillis();
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.batchAckMessageAsync(brokerAddr, API_TIMEOUT_MS, callback(f), T_POP, group, infos);
        AckResult r = f.get(API_TIMEOUT_MS + 5000, TimeUnit.MILLISECONDS);
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("group", group);
        row.put("api", "MQClientAPIImpl.batchAckMessageAsync");
        row.put("topic", T_POP);
        row.put("queueId", q);
        row.put("offsets", offsets);
        List<Map<String, Object>> cks = new ArrayList<>();
        for (Map.Entry<String, List<Long>> e : byCheckpoint.entrySet()) {
            String[] k = e.getKey().split("@");
            Map<String, Object> ck = new LinkedHashMap<>();
            ck.put("ckQueueOffset", Long.parseLong(k[0]));
            ck.put("popTime", Long.parseLong(k[1]));
            ck.put("offsets", e.getValue());
            cks.add(ck);
        }
        row.put("checkpoints", cks);
        row.put("extraInfos", infos);
        row.put("requestMs", start);
        row.put("responseMs", System.currentTimeMillis());
        row.put("status", String.valueOf(r.getStatus()));
        batchAcks.add(row);
        if (!"OK".equals(String.valueOf(r.getStatus()))) {
            throw new Harness.HarnessError(group + " batch ack of " + offsets + ": " + r.getStatus());
        }
        for (long o : offsets) {
            inFlight.remove(key(group, q, o));
        }
    }

    /** changeInvisibleTime on one message; its handle is replaced by the one the broker answered with. */
    Map<String, Object> changeInvisible(String group, int q, long offset, long invisibleMs, String then)
        throws Exception {
        Map<String, Object> old = handleOf(group, q, offset);
        String ck = (String) old.get("extraInfo");
        String[] x = ExtraInfoUtil.split(ck);
        ChangeInvisibleTimeRequestHeader hdr = new ChangeInvisibleTimeRequestHeader();
        hdr.setTopic(ExtraInfoUtil.getRealTopic(x, T_POP, group));
        hdr.setQueueId(ExtraInfoUtil.getQueueId(x));
        hdr.setOffset(ExtraInfoUtil.getQueueOffset(x));
        hdr.setConsumerGroup(group);
        hdr.setExtraInfo(ck);
        hdr.setInvisibleTime(invisibleMs);
        hdr.setBrokerName(Harness.BROKER_NAME);
        long start = System.currentTimeMillis();
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.changeInvisibleTimeAsync(Harness.BROKER_NAME, brokerAddr, hdr, API_TIMEOUT_MS, callback(f));
        AckResult r = f.get(API_TIMEOUT_MS + 5000, TimeUnit.MILLISECONDS);
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("group", group);
        row.put("api", "MQClientAPIImpl.changeInvisibleTimeAsync");
        row.put("topic", T_POP);
        row.put("queueId", q);
        row.put("offset", offset);
        row.put("oldExtraInfo", ck);
        row.put("oldPopTime", old.get("popTime"));
        row.put("oldInvisibleTime", old.get("invisibleTime"));
        row.put("newInvisibleTime", invisibleMs);
        row.put("requestMs", start);
        row.put("responseMs", System.currentTimeMillis());
        row.put("status", String.valueOf(r.getStatus()));
        row.put("newPopTime", r.getPopTime());
        row.put("newExtraInfo", r.getExtraInfo());
        row.put("then", then);
        changes.add(row);
        if (!"OK".equals(String.valueOf(r.getStatus()))) {
            throw new Harness.HarnessError(group + " changeInvisibleTime of queue " + q + " offset " + offset + ": "
                + r.getStatus());
        }
        Map<String, Object> hd = handle(group, q, offset, r.getExtraInfo());
        hd.put("msgId", old.get("msgId"));
        hd.put("changedInvisibleTime", true);
        inFlight.put(key(group, q, offset), hd);
        return hd;
    }

    static AckCallback callback(CompletableFuture<AckResult> f) {
        return new AckCallback() {
            @Override
            public void onSuccess(AckResult r) {
                f.complete(r);
            }

            @Override
            public void onException(Throwable e) {
                f.completeExceptionally(e);
            }
        };
    }

    // =================================================================== G_PUSHPOP, G_PUSH, G_PULL

    void startPushPop() throws Exception {
        admin.setMessageRequestMode(brokerAddr, T_POP, G_PUSHPOP, MessageRequestMode.POP, 8, API_TIMEOUT_MS);
        cPushPop = new DefaultMQPushConsumer(G_PUSHPOP, new PushPopHook());
        wl.configureConsumer(cPushPop, "c-pushpop");
        cPushPop.setClientRebalance(false);
        cPushPop.setPopInvisibleTime(PUSHPOP_INVISIBLE_MS);
        cPushPop.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        cPushPop.setConsumeMessageBatchMaxSize(1);
        cPushPop.subscribe(T_POP, "*");
        cPushPop.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                boolean hang = T_POP.equals(m.getTopic()) && HUNG_OFFSETS.contains(m.getQueueOffset());
                String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
                Map<String, Object> d = new LinkedHashMap<>();
                d.put("group", G_PUSHPOP);
                d.put("topic", m.getTopic());
                d.put("queueId", m.getQueueId());
                d.put("queueOffset", m.getQueueOffset());
                d.put("msgId", m.getMsgId());
                d.putAll(parsed(ck));
                d.put("receivedMs", System.currentTimeMillis());
                d.put("listener", hang ? "never returns" : "CONSUME_SUCCESS");
                pushPopDeliveries.add(d);
                // the handle the pop response recorded, now with the message's own extraInfo (before any ack)
                inFlight.computeIfPresent(key(G_PUSHPOP, m.getQueueId(), m.getQueueOffset()),
                    (k, v) -> handle(G_PUSHPOP, m.getQueueId(), m.getQueueOffset(), ck));
                wl.recordConsumed(G_PUSHPOP, ctx.getMessageQueue(), m, hang ? "HUNG" : "CONSUME_SUCCESS");
                if (hang) {
                    hung.add(m.getQueueId() + "/" + m.getQueueOffset());
                    hangForever();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cPushPop.start();
    }

    /** Never returns (the consumer's shutdown interrupts its threads; the JVM ends with halt). */
    static void hangForever() {
        while (true) {
            try {
                Thread.sleep(3_600_000L);
            } catch (InterruptedException ignored) {
                // keep the message unacked
            }
        }
    }

    /**
     * Sees every request G_PUSHPOP's client sends and the broker's answer: pop responses (popTime, invisibleTime,
     * reviveQid and the popped offsets per queue: msgOffsetInfo) and acks (offset, extraInfo, response code).
     */
    final class PushPopHook implements RPCHook {
        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            try {
                int code = request.getCode();
                if (code == RequestCode.POP_MESSAGE) {
                    onPop(request, response);
                } else if (code == RequestCode.ACK_MESSAGE) {
                    onAck(request, response);
                } else if (code == RequestCode.BATCH_ACK_MESSAGE || code == RequestCode.CHANGE_MESSAGE_INVISIBLETIME) {
                    Map<String, Object> u = new LinkedHashMap<>();
                    u.put("code", code);
                    u.put("extFields", request.getExtFields());
                    u.put("responseCode", response == null ? null : response.getCode());
                    unexpectedRequests.add(u);
                }
            } catch (RuntimeException e) {
                notes.put("pushPopHookError", e.toString());
            }
        }
    }

    void onPop(RemotingCommand request, RemotingCommand response) {
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("group", G_PUSHPOP);
        row.put("api", "DefaultMQPushConsumer (POP mode)");
        if (request.readCustomHeader() instanceof PopMessageRequestHeader) {
            PopMessageRequestHeader hdr = (PopMessageRequestHeader) request.readCustomHeader();
            row.put("requestTopic", hdr.getTopic());
            row.put("requestQueueId", hdr.getQueueId());
            row.put("maxMsgNums", hdr.getMaxMsgNums());
            row.put("requestInvisibleTime", hdr.getInvisibleTime());
        }
        row.put("responseMs", System.currentTimeMillis());
        row.put("responseCode", response == null ? null : response.getCode());
        Map<String, String> ext = response == null || response.getExtFields() == null ? Map.of()
            : response.getExtFields();
        row.put("popTime", parseLong(ext.get("popTime")));
        row.put("invisibleTime", parseLong(ext.get("invisibleTime")));
        row.put("reviveQid", parseLong(ext.get("reviveQid")));
        row.put("restNum", parseLong(ext.get("restNum")));
        row.put("startOffsetInfo", ext.get("startOffsetInfo"));
        row.put("msgOffsetInfo", ext.get("msgOffsetInfo"));
        Map<String, List<Long>> byQueue = msgOffsets(ext.get("msgOffsetInfo"));
        row.put("offsetsByQueue", byQueue);
        if (response == null || response.getCode() != ResponseCode.SUCCESS || byQueue.isEmpty()) {
            return; // an empty long poll: no checkpoint
        }
        synchronized (pops) {
            row.put("seq", pops.size());
            pops.add(row);
        }
        for (Map.Entry<String, List<Long>> e : byQueue.entrySet()) {
            String[] k = e.getKey().split("@");
            if (!"0".equals(k[0])) {
                continue; // a POP retry topic (none in this run)
            }
            int q = Integer.parseInt(k[1]);
            for (long o : e.getValue()) {
                Map<String, Object> hd = new LinkedHashMap<>();
                hd.put("group", G_PUSHPOP);
                hd.put("topic", T_POP);
                hd.put("queueId", q);
                hd.put("queueOffset", o);
                hd.put("popTime", row.get("popTime"));
                hd.put("invisibleTime", row.get("invisibleTime"));
                Long pt = (Long) row.get("popTime");
                Long it = (Long) row.get("invisibleTime");
                hd.put("visibleAtMs", pt == null || it == null ? null : pt + it);
                hd.put("reviveQid", row.get("reviveQid"));
                inFlight.putIfAbsent(key(G_PUSHPOP, q, o), hd);
            }
        }
    }

    void onAck(RemotingCommand request, RemotingCommand response) {
        if (!(request.readCustomHeader() instanceof AckMessageRequestHeader)) {
            return;
        }
        AckMessageRequestHeader hdr = (AckMessageRequestHeader) request.readCustomHeader();
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("group", hdr.getConsumerGroup());
        row.put("api", "DefaultMQPushConsumer (POP mode) ackAsync");
        row.put("topic", hdr.getTopic());
        row.put("queueId", hdr.getQueueId());
        row.put("offset", hdr.getOffset());
        row.putAll(parsed(hdr.getExtraInfo()));
        row.put("responseMs", System.currentTimeMillis());
        row.put("responseCode", response == null ? null : response.getCode());
        boolean ok = response != null && response.getCode() == ResponseCode.SUCCESS;
        row.put("status", ok ? "OK" : "NO_EXIST");
        acks.add(row);
        if (ok) {
            pushPopAcked.add(hdr.getQueueId() + "/" + hdr.getOffset());
            inFlight.remove(key(G_PUSHPOP, hdr.getQueueId(), hdr.getOffset()));
        }
    }

    /** "0 1 0,1,2;0 0 5" (retry flag, queue id, offsets) -> {"0@1": [0,1,2], "0@0": [5]}. */
    static Map<String, List<Long>> msgOffsets(String info) {
        Map<String, List<Long>> m = new TreeMap<>();
        if (info == null || info.isEmpty()) {
            return m;
        }
        for (String one : info.split(";")) {
            String[] s = one.split(MessageConst.KEY_SEPARATOR);
            if (s.length != 3) {
                continue;
            }
            List<Long> offs = m.computeIfAbsent(s[0] + "@" + s[1], k -> new ArrayList<>());
            for (String o : s[2].split(",")) {
                if (!o.isEmpty()) {
                    offs.add(Long.parseLong(o));
                }
            }
        }
        return m;
    }

    /** Every message acked but offsets 5-7 of each queue, which hang in the listener. */
    void waitPushPop() throws Exception {
        int want = QUEUES * (PER_QUEUE - HUNG_OFFSETS.size());
        long end = System.currentTimeMillis() + 90_000;
        String status = "";
        while (true) {
            status = String.format("G_PUSHPOP acked %d/%d, hanging %d/%d, unexpected requests %d",
                pushPopAcked.size(), want, hung.size(), QUEUES * HUNG_OFFSETS.size(), unexpectedRequests.size());
            if (pushPopAcked.size() >= want && hung.size() >= QUEUES * HUNG_OFFSETS.size()) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("G_PUSHPOP did not finish: " + status);
            }
            Thread.sleep(200);
        }
        Thread.sleep(500);
        Harness.log(status);
        notes.put("pushPopStatus", status);
        for (int q = 0; q < QUEUES; q++) {
            expectInFlight(G_PUSHPOP, q, new ArrayList<>(new TreeSet<>(HUNG_OFFSETS)));
        }
        if (!unexpectedRequests.isEmpty()) {
            throw new Harness.HarnessError("G_PUSHPOP sent unexpected requests: " + unexpectedRequests);
        }
    }

    void startPush() throws Exception {
        cPush = new DefaultMQPushConsumer(G_PUSH);
        wl.configureConsumer(cPush, "c-push");
        cPush.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        cPush.subscribe(T_POP, "*");
        cPush.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                wl.recordConsumed(G_PUSH, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cPush.start();
    }

    /** G_PUSH got every message and the broker has its commit of the end of every queue (Diff 0). */
    void waitPush() throws Exception {
        long end = System.currentTimeMillis() + 90_000;
        String status = "";
        while (true) {
            long got = wl.positions.get(G_PUSH).size();
            long behind = 0;
            int rows = 0;
            try {
                for (Map<String, Object> row : Compat.consumeStats(admin, G_PUSH)) {
                    if (T_POP.equals(row.get("topic"))) {
                        behind += ((Number) row.get("diff")).longValue();
                        rows++;
                    }
                }
            } catch (Exception e) {
                rows = -1; // no route for %RETRY%G_PUSH yet
            }
            status = String.format("G_PUSH got %d/%d, admin diff %d over %d queues", got, QUEUES * PER_QUEUE,
                behind, rows);
            if (got >= QUEUES * PER_QUEUE && behind == 0 && rows == QUEUES) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("G_PUSH did not consume and commit everything: " + status);
            }
            Thread.sleep(200);
        }
        Harness.log(status);
        notes.put("pushStatus", status);
    }

    /** G_PULL pulls [0, 80) of every queue (the broker records pullOffset 80) and commits 60. */
    void pullAndCommit() throws Exception {
        cPull = new DefaultMQPullConsumer(G_PULL);
        wl.configureConsumer(cPull, "c-pull");
        cPull.setRegisterTopics(new HashSet<>(List.of(T_POP)));
        cPull.start();
        List<MessageQueue> mqs = new ArrayList<>(cPull.fetchSubscribeMessageQueues(T_POP));
        mqs.sort(Comparator.comparingInt(MessageQueue::getQueueId));
        List<Map<String, Object>> pulls = new ArrayList<>();
        for (MessageQueue mq : mqs) {
            long offset = 0;
            List<Map<String, Object>> requests = new ArrayList<>();
            while (offset < PULL_TO) {
                var pr = cPull.pull(mq, "*", offset, (int) Math.min(32, PULL_TO - offset));
                if (pr.getPullStatus() != PullStatus.FOUND) {
                    throw new Harness.HarnessError("G_PULL pull " + mq + " at " + offset + ": " + pr.getPullStatus());
                }
                for (MessageExt m : pr.getMsgFoundList()) {
                    wl.recordConsumed(G_PULL, mq, m, "PULLED");
                }
                Map<String, Object> req = new LinkedHashMap<>();
                req.put("offset", offset);
                req.put("found", pr.getMsgFoundList().size());
                req.put("nextBeginOffset", pr.getNextBeginOffset());
                requests.add(req);
                offset = pr.getNextBeginOffset();
            }
            if (offset != PULL_TO) {
                throw new Harness.HarnessError("G_PULL pulled " + mq + " to " + offset + ", planned " + PULL_TO);
            }
            wl.commitOffset(cPull, mq, PULL_COMMIT);
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("queueId", mq.getQueueId());
            row.put("pulledTo", offset);
            row.put("committed", PULL_COMMIT);
            row.put("pulledNotCommitted", range(PULL_COMMIT, offset));
            row.put("pulls", requests);
            row.put("committedMs", System.currentTimeMillis());
            pulls.add(row);
        }
        Map<String, Object> pg = new LinkedHashMap<>();
        pg.put("group", G_PULL);
        pg.put("queues", pulls);
        popTruth.put("pullGroup", pg);
    }

    // =================================================================== in flight

    static String key(String group, int q, long offset) {
        return group + "/" + q + "/" + offset;
    }

    static List<Long> range(long from, long to) {
        List<Long> l = new ArrayList<>();
        for (long o = from; o < to; o++) {
            l.add(o);
        }
        return l;
    }

    /** A message handle from its POP_CK extraInfo. */
    static Map<String, Object> handle(String group, int q, long offset, String extraInfo) {
        Map<String, Object> hd = new LinkedHashMap<>();
        hd.put("group", group);
        hd.put("topic", T_POP);
        hd.put("queueId", q);
        hd.put("queueOffset", offset);
        hd.putAll(parsed(extraInfo));
        hd.put("changedInvisibleTime", false);
        return hd;
    }

    /** extraInfo "ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset", parsed. */
    static Map<String, Object> parsed(String extraInfo) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("extraInfo", extraInfo);
        if (extraInfo == null) {
            return m;
        }
        String[] x = ExtraInfoUtil.split(extraInfo);
        long popTime = ExtraInfoUtil.getPopTime(x);
        long invisible = ExtraInfoUtil.getInvisibleTime(x);
        m.put("ckQueueOffset", ExtraInfoUtil.getCkQueueOffset(x));
        m.put("popTime", popTime);
        m.put("invisibleTime", invisible);
        m.put("visibleAtMs", popTime + invisible);
        m.put("reviveQid", ExtraInfoUtil.getReviveQid(x));
        m.put("retry", ExtraInfoUtil.getRetry(x));
        m.put("brokerNameInHandle", ExtraInfoUtil.getBrokerName(x));
        return m;
    }

    List<Long> inFlightOffsets(String group, int q) {
        List<Long> l = new ArrayList<>();
        for (Map<String, Object> hd : inFlight.values()) {
            if (group.equals(hd.get("group")) && ((Number) hd.get("queueId")).intValue() == q) {
                l.add(((Number) hd.get("queueOffset")).longValue());
            }
        }
        Collections.sort(l);
        return l;
    }

    void expectInFlight(String group, int q, List<Long> want) {
        List<Long> got = inFlightOffsets(group, q);
        if (!got.equals(want)) {
            throw new Harness.HarnessError(group + " queue " + q + " has " + got + " in flight, planned " + want);
        }
    }

    /** One row per (group, topic, queueId) of the POP groups: the sorted offsets in flight and their handles. */
    List<Map<String, Object>> inFlightRows(Long atMs) {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (String g : List.of(G_POP, G_PUSHPOP)) {
            for (int q = 0; q < QUEUES; q++) {
                List<Map<String, Object>> msgs = new ArrayList<>();
                for (long o : inFlightOffsets(g, q)) {
                    msgs.add(new LinkedHashMap<>(inFlight.get(key(g, q, o))));
                }
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("group", g);
                row.put("topic", T_POP);
                row.put("queueId", q);
                row.put("count", msgs.size());
                row.put("offsets", inFlightOffsets(g, q));
                row.put("messages", msgs);
                row.put("atMs", atMs == null ? System.currentTimeMillis() : atMs);
                rows.add(row);
            }
        }
        return rows;
    }

    // =================================================================== hot copy

    void hotCopy() throws Exception {
        s1CopyStartMs = System.currentTimeMillis();
        List<Map<String, Object>> inflight = inFlightRows(s1CopyStartMs);
        Map<String, Object> copy = new StoreCopier(h.store, h.out.resolve("snapshots/s1/store")).copy();
        snapshot.put("snapshot", "s1");
        snapshot.put("path", "snapshots/s1/store");
        snapshot.put("copyStartMs", s1CopyStartMs);
        snapshot.put("copyEndMs", System.currentTimeMillis());
        snapshot.put("taken", "after G_POP's five pops, before any ack: every popped message in flight");
        snapshot.put("copy", copy);
        Map<String, Object> s1 = new LinkedHashMap<>();
        s1.put("path", "snapshots/s1/store");
        s1.put("copyStartMs", s1CopyStartMs);
        s1.put("inflight", inflight);
        popTruth.put("snapshots", Map.of("s1", s1));
    }

    // =================================================================== admin views

    /** examineConsumeStats per group; for a low-level POP group (no %RETRY% route) GET_CONSUME_STATS to the broker. */
    List<Map<String, Object>> consumeStatsRows(String group) throws Exception {
        try {
            List<Map<String, Object>> rows = Compat.consumeStats(admin, group);
            notes.put("consumeStatsSource_" + group, "examineConsumeStats(group)");
            return rows;
        } catch (Exception e) {
            notes.put("consumeStatsSource_" + group, "examineConsumeStats(brokerAddr, group, null, timeout) after: "
                + e.getClass().getSimpleName() + ": " + firstLine(e.getMessage()));
            return rows(admin.examineConsumeStats(brokerAddr, group, null, API_TIMEOUT_MS));
        }
    }

    static List<Map<String, Object>> rows(ConsumeStats stats) {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Map.Entry<MessageQueue, OffsetWrapper> e : stats.getOffsetTable().entrySet()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("topic", e.getKey().getTopic());
            row.put("brokerName", e.getKey().getBrokerName());
            row.put("queueId", e.getKey().getQueueId());
            row.put("brokerOffset", e.getValue().getBrokerOffset());
            row.put("consumerOffset", e.getValue().getConsumerOffset());
            row.put("diff", e.getValue().getBrokerOffset() - e.getValue().getConsumerOffset());
            row.put("lastTimestamp", e.getValue().getLastTimestamp());
            row.put("pullOffset", e.getValue().getPullOffset());
            rows.add(row);
        }
        rows.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
            .thenComparing(m -> (Integer) m.get("queueId")));
        return rows;
    }

    List<Map<String, Object>> readGroups(long at) throws Exception {
        List<Map<String, Object>> cur = new ArrayList<>();
        for (String g : GROUPS) {
            List<Map<String, Object>> rows = consumeStatsRows(g);
            rows.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
                .thenComparing(m -> (Integer) m.get("queueId")));
            for (Map<String, Object> row : rows) {
                Map<String, Object> full = new LinkedHashMap<>();
                full.put("group", g);
                full.putAll(row);
                full.put("inflight", ((Number) row.get("pullOffset")).longValue()
                    - ((Number) row.get("consumerOffset")).longValue());
                full.put("snapshotMs", at);
                cur.add(full);
            }
        }
        return cur;
    }

    /**
     * Admin rows of every group, once two reads 5.5 s apart agree and config/consumerOffset.json was rewritten
     * between them (flushConsumerOffsetInterval 5 s): the file then holds the recorded values.
     */
    void snapshotGroups() throws Exception {
        Path file = h.store.resolve("config/consumerOffset.json");
        long prevAt = System.currentTimeMillis();
        List<Map<String, Object>> prev = readGroups(prevAt);
        for (int i = 0; i < 10; i++) {
            h.checkDeadline("waiting for stable consumer stats");
            Thread.sleep(5500);
            long at = System.currentTimeMillis();
            List<Map<String, Object>> cur = readGroups(at);
            long mtime = Files.exists(file) ? Files.getLastModifiedTime(file).toMillis() : -1;
            if (Workload.stripTimes(prev).equals(Workload.stripTimes(cur)) && mtime > prevAt) {
                groupSnapshot.clear();
                groupSnapshot.addAll(prev);
                notes.put("consumeStatsSnapshotMs", prevAt);
                notes.put("consumeStatsConfirmedMs", at);
                notes.put("consumerOffsetJsonPersistedMs", mtime);
                popTruth.put("snapshotMs", prevAt);
                return;
            }
            prev = cur;
            prevAt = at;
        }
        throw new Harness.HarnessError("consumer stats did not become stable (or consumerOffset.json not persisted)");
    }

    /** What each admin entry point answers per group (the CLI's consumerProgress with and without -t). */
    Map<String, Object> adminViews() {
        Map<String, Object> all = new LinkedHashMap<>();
        for (String g : GROUPS) {
            Map<String, Object> per = new LinkedHashMap<>();
            try {
                per.put("examineConsumeStats(group)", Compat.consumeStats(admin, g));
            } catch (Exception e) {
                per.put("examineConsumeStats(group)", Map.of("error", e.getClass().getName() + ": "
                    + firstLine(e.getMessage())));
            }
            try {
                per.put("examineConsumeStats(null, group, " + T_POP + ")",
                    rows(admin.examineConsumeStats(null, g, T_POP)));
            } catch (Exception e) {
                per.put("examineConsumeStats(null, group, " + T_POP + ")", Map.of("error",
                    e.getClass().getName() + ": " + firstLine(e.getMessage())));
            }
            try {
                per.put("getConsumeStats(brokerAddr, group)", rows(admin.examineConsumeStats(brokerAddr, g, null,
                    API_TIMEOUT_MS)));
            } catch (Exception e) {
                per.put("getConsumeStats(brokerAddr, group)", Map.of("error", e.getClass().getName() + ": "
                    + firstLine(e.getMessage())));
            }
            all.put(g, per);
        }
        return all;
    }

    static String firstLine(String s) {
        if (s == null) {
            return "";
        }
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    Map<String, Object> shutdownBroker() throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        long s = System.currentTimeMillis();
        r.put("sigtermMs", s);
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
        return r;
    }

    /**
     * config/consumerOffset.json after the clean shutdown against the recorded admin rows: consumerOffset =
     * max(offsetTable, 0), pullOffset = max(consumerOffset, pullOffsetTable or consumerOffset when absent).
     */
    Map<String, Object> checkConsumerOffsetFile() throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        Path file = h.store.resolve("config/consumerOffset.json");
        r.put("path", "store/config/consumerOffset.json");
        if (!Files.exists(file)) {
            r.put("missing", true);
            return r;
        }
        r.put("mtimeMs", Files.getLastModifiedTime(file).toMillis());
        String text = Files.readString(file, StandardCharsets.UTF_8);
        // fastjson2 writes integer map keys unquoted ({0:60,1:40})
        JSONObject doc = JSON.parseObject(text.replaceAll("([{,]\\s*)(-?\\d+)\\s*:", "$1\"$2\":"));
        JSONObject offsets = doc.getJSONObject("offsetTable");
        JSONObject pulls = doc.getJSONObject("pullOffsetTable");
        List<Map<String, Object>> rows = new ArrayList<>();
        boolean all = true;
        for (Map<String, Object> row : groupSnapshot) {
            String k = row.get("topic") + "@" + row.get("group");
            String q = String.valueOf(row.get("queueId"));
            Long fileCo = offsets == null || offsets.getJSONObject(k) == null ? null
                : offsets.getJSONObject(k).getLong(q);
            Long filePull = pulls == null || pulls.getJSONObject(k) == null ? null : pulls.getJSONObject(k).getLong(q);
            long co = fileCo == null ? -1 : Math.max(fileCo, 0);
            long pull = Math.max(co, filePull == null ? co : filePull);
            boolean ok = fileCo != null && co == ((Number) row.get("consumerOffset")).longValue()
                && pull == ((Number) row.get("pullOffset")).longValue();
            all &= ok;
            Map<String, Object> c = new LinkedHashMap<>();
            c.put("key", k);
            c.put("queueId", row.get("queueId"));
            c.put("adminConsumerOffset", row.get("consumerOffset"));
            c.put("adminPullOffset", row.get("pullOffset"));
            c.put("fileOffsetTable", fileCo);
            c.put("filePullOffsetTable", filePull);
            c.put("matches", ok);
            rows.add(c);
        }
        r.put("matchesAdmin", all);
        r.put("rows", rows);
        // entries of the four groups in the file that no admin row shows
        Set<String> shown = new TreeSet<>();
        for (Map<String, Object> row : groupSnapshot) {
            shown.add(row.get("topic") + "@" + row.get("group") + "#" + row.get("queueId"));
        }
        List<String> extra = new ArrayList<>();
        for (JSONObject table : new JSONObject[] {offsets, pulls}) {
            if (table == null) {
                continue;
            }
            for (String k : table.keySet()) {
                String g = k.substring(k.lastIndexOf('@') + 1);
                if (!GROUPS.contains(g)) {
                    continue;
                }
                for (String q : table.getJSONObject(k).keySet()) {
                    String id = k + "#" + q;
                    if (!shown.contains(id)) {
                        extra.add((table == offsets ? "offsetTable " : "pullOffsetTable ") + id + "="
                            + table.getJSONObject(k).get(q));
                    }
                }
            }
        }
        r.put("fileEntriesWithoutAdminRow", extra);
        Map<String, Object> other = new TreeMap<>();
        if (offsets != null) {
            for (String k : offsets.keySet()) {
                if (!GROUPS.contains(k.substring(k.lastIndexOf('@') + 1))) {
                    other.put(k, offsets.getJSONObject(k));
                }
            }
        }
        r.put("otherOffsetTableEntries", other);
        if (!all) {
            Harness.log("consumerOffset.json differs from the admin rows: " + rows);
        }
        return r;
    }

    static Long parseLong(Object o) {
        try {
            return o == null ? null : Long.parseLong(String.valueOf(o).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    // =================================================================== truth

    @Override
    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> msgs = wl == null ? new ArrayList<>() : new ArrayList<>(wl.sent);
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        for (Map<String, Object> r : msgs) {
            Object id = r.get("offsetMsgId");
            r.put("commitLogOffset", id == null ? null : Long.parseUnsignedLong(
                ((String) id).substring(((String) id).length() - 16), 16));
            boolean acked = Boolean.TRUE.equals(r.get("acked"));
            boolean inS1 = acked && s1CopyStartMs > 0 && ((Number) r.get("sendEndMs")).longValue() < s1CopyStartMs;
            r.put("inSnapshots", inS1 ? List.of("s1") : List.of());
            r.put("snapshot", !acked ? null : inS1 ? "s1" : "final");
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
        if (!snapshot.isEmpty()) {
            Harness.writeJson(h.truth.resolve("snapshots.json"), List.of(snapshot));
        }

        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_POP, "low-level POP (MQClientAPIImpl pop/ack/batchAck/changeInvisibleTime), invisible 600 s; "
            + "q0: 3 pops of 20, acks 0-14 and 30-34, batch ack 15-29, changeInvisibleTime(900 s) on 35 and 36: "
            + "35-59 in flight; q1: 2 pops of 20, acks 0-18, changeInvisibleTime(900 s) on 19 then acked with the "
            + "new handle: 20-39 in flight");
        groups.put(G_PUSHPOP, "DefaultMQPushConsumer in POP mode (setMessageRequestMode POP, clientRebalance false), "
            + "popInvisibleTime 300 s; the listener never returns for queue offsets 5-7: those 6 in flight, the other "
            + "194 acked; shut down");
        groups.put(G_PUSH, "classic push consumer, consumes and commits everything; shut down");
        groups.put(G_PULL, "classic pull consumer: pulls 0-79 of every queue, commits 60 (admin in-flight 20 per "
            + "queue); shut down");
        popTruth.put("groups", groups);
        Map<String, Object> invis = new LinkedHashMap<>();
        invis.put(G_POP, POP_INVISIBLE_MS);
        invis.put(G_POP + " after changeInvisibleTime", CHANGED_INVISIBLE_MS);
        invis.put(G_PUSHPOP, PUSHPOP_INVISIBLE_MS);
        popTruth.put("invisibleTimesMs", invis);
        popTruth.put("pops", new ArrayList<>(pops));
        // G_POP's in the order they were made; G_PUSHPOP's (sent by its consume threads) by queue and offset
        List<Map<String, Object>> ackRows = new ArrayList<>(acks);
        ackRows.sort(Comparator.comparing((Map<String, Object> m) -> G_PUSHPOP.equals(m.get("group")))
            .thenComparing(m -> G_PUSHPOP.equals(m.get("group")) ? ((Number) m.get("queueId")).longValue() : 0L)
            .thenComparing(m -> G_PUSHPOP.equals(m.get("group")) ? ((Number) m.get("offset")).longValue() : 0L));
        popTruth.put("acks", ackRows);
        popTruth.put("batchAcks", batchAcks);
        popTruth.put("changeInvisibleTimes", changes);
        List<Map<String, Object>> deliveries = new ArrayList<>(pushPopDeliveries);
        deliveries.sort(Comparator.comparing((Map<String, Object> m) -> ((Number) m.get("queueId")).longValue())
            .thenComparing(m -> ((Number) m.get("queueOffset")).longValue()));
        popTruth.put("pushPopDeliveries", deliveries);
        popTruth.put("pushPopHung", new ArrayList<>(new TreeSet<>(hung)));
        popTruth.put("unexpectedRequests", new ArrayList<>(unexpectedRequests));
        popTruth.put("timingsMs", h.timings);
        Harness.writeJson(h.truth.resolve("pop.json"), popTruth);

        run.put("topics", Map.of(T_POP, QUEUES));
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", Workload.COMPRESS_OVER);
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        run.put("client", client);
        Map<String, Object> plan = new LinkedHashMap<>();
        plan.put("messages", QUEUES * PER_QUEUE + " (message n to queue n % 2, offset n / 2)");
        plan.put("s1", "hot copy after G_POP's pops, before its acks");
        run.put("plan", plan);
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }
}
