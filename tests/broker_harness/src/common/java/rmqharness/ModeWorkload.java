package rmqharness;

import java.io.IOException;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
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
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * One broker in a deployment mode other than the default: a real name server and ONE broker (5.5.0, or 4.9.7
 * for v4-dledger), the same seeded workload, a hot copy and a clean shutdown; only the broker's mode and
 * line differ by variant. Version-specific admin calls go through {@link Compat}.
 *
 * <ul>
 *   <li>{@code v5-dledger}, {@code v4-dledger}: the commitlog is a DLedger (Raft) log: {@code enableDLegerCommitLog=true}, a
 *   single-node group ({@code dLegerPeers=n0-127.0.0.1:p}, {@code dLegerSelfId=n0}) that elects itself. The
 *   broker writes {@code dledger-n0/data/} (entries: a 48-byte header + a commitlog record),
 *   {@code dledger-n0/index/} (32-byte units), {@code dledger-n0/checkpoint} and {@code dledger-n0/currterm};
 *   consume queues and the index file as usual. Topics TopicDLedger*.</li>
 *   <li>{@code v5-rocksdb}: {@code storeType=defaultRocksDB}: consume queues live in a RocksDB database in
 *   {@code consumequeue/} itself, topics, subscription groups and consumer offsets in {@code config/topics/},
 *   {@code config/subscriptionGroups/}, {@code config/consumerOffsets/} (RocksDB, no JSON files); the commitlog
 *   and the index file as usual. Topics TopicRocks*.</li>
 * </ul>
 *
 * <p>This class has its own {@code main} (stores.py starts it instead of {@link Harness} for these variants),
 * so {@code Harness.java}, which every variant's fingerprint covers, stays untouched; a {@link Harness}
 * instance in its "-clean" mode is used for the helpers only (ports, child JVMs, logback files, timings,
 * deadline).
 *
 * <p>Scenario (seeded): Topic* (4 queues: tags, keys, user properties, the main workload's body kinds incl.
 * compressed bodies over 4 KiB, 3 client batches of 10), Topic*Bulk (2 queues: 2–8 KiB binary and text
 * bodies, the volume that fills three 1 MiB files), Topic*Delay (2 queues: delay levels 1 and 2). G_ALL
 * (push) consumes everything; a hot copy {@code snapshots/s1/store} (StoreCopier) is taken before the last
 * ~100 messages; G_HALF (pull) commits half of every queue; clean shutdown (SIGTERM).
 */
final class ModeWorkload extends StandaloneScenario {
    /** The variants this class runs, and the deployment mode each one puts its broker in. */
    static final Map<String, String> MODES = Map.of("v5-dledger", "dledger", "v5-rocksdb", "rocksdb",
        "v4-dledger", "dledger", "v5-rocksdb-single", "rocksdb", "v5-rocksdb-v2", "rocksdb",
        "v5-compaction", "compaction");
    /**
     * The broker properties a variant adds to its mode's: the two other ways a RocksDB broker keeps its config
     * (one database {@code config/metadata/} for every table; the v2 managers' {@code config/rdb/}).
     */
    static final Map<String, Map<String, String>> MODE_PROPERTIES = Map.of(
        "v5-rocksdb-single", Map.of("useSingleRocksDBForAllConfigs", "true"),
        "v5-rocksdb-v2", Map.of("configManagerVersion", "v2"),
        // Compaction every 2-3 s per queue, over 20-slot queue files (19 units and the end unit): a
        // run needs two segments and never touches the last one, so a few dozen messages compact.
        "v5-compaction", Map.of("compactionCqMappedFileSize", "920", "compactionMappedFileSize", "8192",
            "compactionScheduleInternal", "1000", "maxOffsetMapSize", "1048576", "compactionThreadNum", "2"));
    /** mode "compaction": the topic with {@code cleanup.policy=COMPACTION}, its queues and keys. */
    static final String T_COMPACTED = "TopicCompacted";
    static final int COMPACTED_QUEUES = 2;
    static final int COMPACTED_KEYS = 50;
    static final long SEED = 20240614L;
    static final String SELF_ID = "n0";

    final String variant;
    /** "dledger": enableDLegerCommitLog; "rocksdb": storeType=defaultRocksDB (queues and config in RocksDB). */
    final String mode;
    final String tMain;
    final String tBulk;
    final String tDelay;
    static final String G_ALL = Workload.G_ALL;
    static final String G_HALF = Workload.G_HALF;
    static final List<String> GROUPS = List.of(G_ALL, G_HALF);

    static final int N_MAIN = 240;
    static final int N_BULK = 450;
    static final int N_BATCHES = 3;
    static final int BATCH_SIZE = 10;
    static final int N_DELAYED = 6;
    static final int[] DELAY_LEVELS_USED = {1, 2};
    /** Messages sent after the hot copy s1 (at least this many; a batch is never split). */
    static final int TAIL_MESSAGES = 100;
    static final int COMPRESS_OVER = Workload.COMPRESS_OVER;

    final Random rnd = new Random(SEED);
    final Map<String, Object> notes = new LinkedHashMap<>();
    final List<String> notPossible = new ArrayList<>();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    /** The mode's own truth file ({@code dledger.json}, {@code rocksdb.json}): broker views, the layout. */
    final Map<String, Object> modeTruth = new LinkedHashMap<>();
    final Map<String, Object> snapshot = new LinkedHashMap<>();
    Workload wl;
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    DefaultMQPushConsumer cAll;
    DefaultMQPullConsumer cHalf;
    Process namesrv;
    Process broker;
    String nsAddr;
    String brokerAddr;
    long s1CopyStartMs = -1;

    ModeWorkload(Harness h, String variant) {
        super(h);
        this.variant = variant;
        this.mode = MODES.get(variant);
        String prefix = Map.of("dledger", "TopicDLedger", "rocksdb", "TopicRocks", "compaction", "TopicCmp").get(mode);
        this.tMain = prefix;
        this.tBulk = prefix + "Bulk";
        this.tDelay = prefix + "Delay";
    }

    Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(tMain, 4);
        t.put(tBulk, 2);
        t.put(tDelay, 2);
        return t;
    }

    /** Usage: {@code java -cp ... rmqharness.ModeWorkload --variant <a variant of MODES> --out DIR [--timeout SEC]}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "ModeWorkload", MODES.keySet(), ModeWorkload::new);
    }

    // =================================================================== flow

    @Override
    void runScenario(Map<String, Object> run) throws Exception {
        String lo = h.loopback;
        int nsPort = Harness.freePort(lo, 0, 0);
        Set<Integer> taken = new HashSet<>(List.of(nsPort));
        int brokerPort = Harness.freePort(lo, 2, 1, taken);
        for (int p = brokerPort - 2; p <= brokerPort + 1; p++) {
            taken.add(p);
        }
        int dledgerPort = Harness.freePort(lo, 0, 0, taken);
        nsAddr = Harness.hostPort(lo, nsPort);
        brokerAddr = Harness.hostPort(lo, brokerPort);
        String peers = SELF_ID + "-" + Harness.hostPort(lo, dledgerPort);

        Map<String, String> nsConf = new LinkedHashMap<>();
        nsConf.put("listenPort", String.valueOf(nsPort));
        nsConf.put("bindAddress", lo);
        nsConf.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        nsConf.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        nsConf.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        nsConf.put("scanAvailableNameSrv", "false");

        Map<String, String> brokerConf = h.brokerConfig(nsAddr, brokerPort);
        if ("dledger".equals(mode)) {
            brokerConf.put("enableDLegerCommitLog", "true");
            brokerConf.put("dLegerGroup", Harness.BROKER_NAME);
            brokerConf.put("dLegerPeers", peers);
            brokerConf.put("dLegerSelfId", SELF_ID);
        } else if ("rocksdb".equals(mode)) {
            // Consume queues in RocksDB (consumequeue/ is a RocksDB directory) and, with the default
            // configManagerVersion=v1, topics, groups and offsets in config/<name>/ RocksDB directories.
            brokerConf.put("storeType", "defaultRocksDB");
        }
        brokerConf.putAll(MODE_PROPERTIES.getOrDefault(variant, Map.of()));

        Path nsConfFile = h.work.resolve("namesrv.conf");
        Path brokerConfFile = h.work.resolve("broker.conf");
        Harness.writeProperties(nsConfFile, nsConf);
        Harness.writeProperties(brokerConfFile, brokerConf);
        Files.copy(nsConfFile, h.logs.resolve("namesrv.conf"));
        Files.copy(brokerConfFile, h.logs.resolve("broker.conf"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_namesrv.xml"), h.logs.resolve("namesrv.log"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_broker.xml"), h.logs.resolve("broker.log"));

        namesrv = h.startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "128m",
            List.of("-c", nsConfFile.toString()));
        h.addChild(namesrv);
        h.waitForLine("namesrv", namesrv, h.logs.resolve("namesrv.out"), "boot success", 60);
        h.mark("namesrvStarted");
        broker = h.startJvm("broker", "org.apache.rocketmq.broker.BrokerStartup", "512m",
            List.of("-c", brokerConfFile.toString()));
        h.addChild(broker);
        h.waitForLine("broker", broker, h.logs.resolve("broker.out"), "boot success", 120);
        h.mark("brokerStarted");

        run.put("variant", variant);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("dledgerVersion", dledgerJarVersion());
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", "clean");
        run.put("scenario", mode);
        run.put("seed", SEED);
        run.put("javaVersion", System.getProperty("java.version"));
        Map<String, Object> ports = new LinkedHashMap<>();
        ports.put("namesrv", nsPort);
        ports.put("broker", brokerPort);
        ports.put("brokerFast", brokerPort - 2);
        ports.put("brokerHa", brokerPort + 1);
        ports.put("dledger", dledgerPort);
        run.put("ports", ports);
        run.put("namesrvAddr", nsAddr);
        run.put("brokerAddr", brokerAddr);
        run.put("brokerName", Harness.BROKER_NAME);
        run.put("clusterName", Harness.CLUSTER);
        run.put("brokerConfig", brokerConf);
        run.put("namesrvConfig", nsConf);
        run.put("childJvmOptions", Harness.ADD_OPENS);
        run.put("storePathAtGeneration", h.store.toString());

        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(lo);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        run.put("election", waitForMaster());
        h.mark("brokerIsMaster");

        wl = new Workload(h, nsAddr, brokerAddr, rnd);
        wl.admin = admin;
        wl.createTopics(topics());
        // G_HALF is created through the admin API, G_ALL by the broker when its consumer first registers: a v2
        // config manager persists only the first kind.
        Compat.createGroup(admin, brokerAddr, G_HALF);
        if ("compaction".equals(mode)) {
            Compat.createCompactedTopic(admin, brokerAddr, T_COMPACTED, COMPACTED_QUEUES);
        }
        h.mark("topicsCreated");
        startConsumers();
        h.mark("consumersStarted");
        producer = new DefaultMQProducer("PG_" + mode.toUpperCase());
        wl.configureProducer(producer, "harness-producer");
        producer.start();
        wl.producer = producer;

        List<Object[]> ops = plan();
        int split = ops.size();
        int tail = 0;
        while (split > 0 && tail < TAIL_MESSAGES) {
            split--;
            tail += (Integer) ops.get(split)[0];
        }
        notes.put("tailMessagesPlanned", tail);
        for (Object[] op : ops.subList(0, split)) {
            ((Workload.Op) op[1]).run();
        }
        h.mark("beforeS1Produced");
        if ("compaction".equals(mode)) {
            for (int version = 0; version < 3; version++) {
                sendCompactedVersion(version);
            }
            waitForCompaction("round A");
        }
        wl.waitForAllConsumed("before s1", topics().keySet(), System.currentTimeMillis() + 90_000);
        h.mark("beforeS1Delivered");
        hotCopy();
        h.mark("s1Copied");
        for (Object[] op : ops.subList(split, ops.size())) {
            ((Workload.Op) op[1]).run();
        }
        h.mark("tailProduced");
        wl.waitForAllConsumed("before the end", topics().keySet(), System.currentTimeMillis() + 90_000);
        h.mark("delivered");
        if ("compaction".equals(mode)) {
            sendCompactedVersion(3);
            waitForCompaction("round B");
            pullCompacted();
            h.mark("compacted");
        }
        wl.consumeHalf(topics().keySet());
        h.mark("halfConsumed");

        Workload.shutdownQuietly(cAll);
        Workload.shutdownQuietly(cHalf);
        Thread.sleep(1500);
        h.mark("consumersStopped");
        wl.snapshotGroups(GROUPS, true);
        groupSnapshot.addAll(wl.groupSnapshot);
        h.mark("groupsSnapshot");
        wl.snapshotTopics();
        h.mark("topicsSnapshot");
        modeTruth.put("beforeShutdown", brokerView());
        modeTruth.put("configTables", Compat.configTables(admin, brokerAddr));
        producer.shutdown();
        admin.shutdown();
        Thread.sleep(500);
        run.put("shutdown", shutdownBroker());
        h.mark("brokerStopped");
        namesrv.destroyForcibly(); // nothing of the name server is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        modeTruth.put("afterShutdown", describeLayout(h.store));
        h.mark("end");
    }

    /**
     * Waits until the single-node Raft group elected this broker and it registered as master: brokerId 0 of
     * broker-a in the name server's cluster info (a DLedger broker starts with brokerId -1 and registers only
     * after DLedgerRoleChangeHandler turned it into a master).
     */
    Map<String, Object> waitForMaster() throws Exception {
        long start = System.currentTimeMillis();
        long end = start + 60_000;
        String last = "";
        while (System.currentTimeMillis() < end) {
            try {
                Map<Long, String> addrs = Compat.brokerAddrs(admin, Harness.BROKER_NAME);
                if (addrs != null) {
                    last = String.valueOf(addrs);
                    if (brokerAddr.equals(addrs.get(0L))) {
                        Map<String, Object> r = new LinkedHashMap<>();
                        r.put("waitedMs", System.currentTimeMillis() - start);
                        r.put("brokerAddrs", flatAddrs(addrs));
                        r.put("leaderLogLines", grep(h.logs.resolve("broker.log"),
                            List.of("DLedgerRoleChangeHandler", "changeToMaster", "Begin handling broker role change",
                                "Finish handling broker role change", "LEADER")));
                        return r;
                    }
                }
            } catch (Exception e) {
                last = e.toString();
            }
            if (!broker.isAlive()) {
                throw new Harness.HarnessError("broker exited with code " + broker.exitValue() + " before it became master");
            }
            Thread.sleep(200);
        }
        throw new Harness.HarnessError("broker did not register as master (brokerId 0) within 60 s: " + last);
    }

    static Map<String, Object> flatAddrs(Map<Long, String> addrs) {
        Map<String, Object> m = new TreeMap<>();
        for (Map.Entry<Long, String> e : addrs.entrySet()) {
            m.put(String.valueOf(e.getKey()), e.getValue());
        }
        return m;
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

    // =================================================================== consumers

    void startConsumers() throws Exception {
        cAll = new DefaultMQPushConsumer(G_ALL);
        wl.configureConsumer(cAll, "c-all");
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

        // online from the start (heartbeats), pulls and commits half of every queue at the end
        cHalf = new DefaultMQPullConsumer(G_HALF);
        wl.configureConsumer(cHalf, "c-half");
        cHalf.setRegisterTopics(new HashSet<>(topics().keySet()));
        cHalf.start();
        wl.cHalf = cHalf;
    }

    // =================================================================== compaction

    final List<Map<String, Object>> compactedSends = new ArrayList<>();
    final List<Map<String, Object>> compactedView = new ArrayList<>();

    /** One version of every key k00..k49 to the compacted topic; key kNN always to queue NN % 2. */
    void sendCompactedVersion(int version) {
        for (int k = 0; k < COMPACTED_KEYS; k++) {
            String key = String.format("k%02d", k);
            byte[] body = (key + "-v" + version + "-" + "x".repeat(rnd.nextInt(40)))
                .getBytes(StandardCharsets.UTF_8);
            Message msg = wl.buildMessage(T_COMPACTED, "TagV" + version, List.of(key), new LinkedHashMap<>(), body);
            Map<String, Object> r = wl.newRecord("compacted", phase(), T_COMPACTED, msg, body, "text-small",
                new LinkedHashMap<>(), List.of(key));
            r.put("compactionKey", key);
            r.put("version", version);
            long start = System.currentTimeMillis();
            try {
                wl.fillResult(r, msg, producer.send(msg, Workload.BY_ARG, k), start, null, null);
            } catch (Exception e) {
                wl.fillError(r, msg, e, start, k % COMPACTED_QUEUES);
            }
            compactedSends.add(r);
        }
    }

    /**
     * Waits until every queue of the compacted topic was compacted up to its last full segment: the broker's
     * {@code compaction/position-checkpoint} names, per queue, the last queue offset a run compacted, and the
     * active segment holds at most 19 units, so a finished run leaves it at or past (messages - 20); then the
     * file must stay the same for 4 s (a run every 2-3 s finds nothing new).
     */
    void waitForCompaction(String what) throws Exception {
        Map<Integer, Long> sent = new TreeMap<>();
        for (Map<String, Object> r : compactedSends) {
            if (Boolean.TRUE.equals(r.get("acked"))) {
                sent.merge((Integer) r.get("queueId"), 1L, Long::sum);
            }
        }
        Path checkpoint = h.store.resolve("compaction/position-checkpoint");
        long end = System.currentTimeMillis() + 60_000;
        String last = null;
        long stableSince = 0;
        while (true) {
            String text = Files.exists(checkpoint) ? Files.readString(checkpoint) : "";
            boolean reached = true;
            for (Map.Entry<Integer, Long> e : sent.entrySet()) {
                var m = java.util.regex.Pattern.compile("\"" + T_COMPACTED + "_" + e.getKey() + "\"\\s*:\\s*(\\d+)")
                    .matcher(text);
                reached &= m.find() && Long.parseLong(m.group(1)) >= e.getValue() - 20;
            }
            if (!text.equals(last)) {
                last = text;
                stableSince = System.currentTimeMillis();
            }
            if (reached && System.currentTimeMillis() - stableSince >= 4000) {
                notes.put("compactionCheckpoint_" + what, text);
                Harness.log("compaction " + what + ": " + text.replaceAll("\\s+", ""));
                return;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("compaction " + what + " did not finish: sent " + sent
                    + ", checkpoint " + text);
            }
            Thread.sleep(250);
        }
    }

    /**
     * What a consumer of the compacted topic is served now: every queue pulled from offset 0 (the broker serves a
     * compacted topic from its compaction log only), each message with its queue offset, its position in the
     * compaction log (what the pulled message calls its commitlog offset) and its store size.
     */
    void pullCompacted() throws Exception {
        for (int q = 0; q < COMPACTED_QUEUES; q++) {
            MessageQueue mq = new MessageQueue(T_COMPACTED, Harness.BROKER_NAME, q);
            long offset = 0;
            while (true) {
                var pr = cHalf.pull(mq, "*", offset, 32);
                if (pr.getPullStatus() != PullStatus.FOUND) {
                    modeTruth.put("compactedPullEnd_" + q, pr.getPullStatus() + " at " + offset
                        + ", min " + pr.getMinOffset() + ", max " + pr.getMaxOffset());
                    break;
                }
                for (MessageExt m : pr.getMsgFoundList()) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("queueId", m.getQueueId());
                    row.put("queueOffset", m.getQueueOffset());
                    row.put("compactionLogPosition", m.getCommitLogOffset());
                    row.put("storeSize", m.getStoreSize());
                    row.put("keys", m.getKeys());
                    row.put("tags", m.getTags());
                    row.put("msgId", m.getMsgId());
                    row.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                    row.put("storeTimestamp", m.getStoreTimestamp());
                    compactedView.add(row);
                }
                offset = pr.getNextBeginOffset();
            }
        }
    }

    // =================================================================== producing

    /** The seeded, shuffled send operations: {messages (Integer), Workload.Op}. */
    List<Object[]> plan() {
        List<Object[]> ops = new ArrayList<>();
        for (int i = 0; i < N_MAIN; i++) {
            final int n = i;
            ops.add(new Object[] {1, (Workload.Op) () -> sendMain(n)});
        }
        for (int i = 0; i < N_BULK; i++) {
            final int n = i;
            ops.add(new Object[] {1, (Workload.Op) () -> sendBulk(n)});
        }
        for (int i = 0; i < N_BATCHES; i++) {
            final int n = i;
            ops.add(new Object[] {BATCH_SIZE, (Workload.Op) () -> sendBatch(n)});
        }
        Collections.shuffle(ops, rnd);
        // the delayed sends go into the first half, so their re-put records exist before the hot copy too
        for (int i = 0; i < N_DELAYED; i++) {
            final int n = i;
            ops.add(rnd.nextInt(ops.size() / 2), new Object[] {1, (Workload.Op) () -> sendDelayed(n)});
        }
        return ops;
    }

    void sendMain(int n) {
        String kindOfBody = Workload.BODY_KINDS[n % Workload.BODY_KINDS.length];
        byte[] body = wl.body(kindOfBody);
        String tags = Workload.NORMAL_TAGS[n % Workload.NORMAL_TAGS.length];
        List<String> keys = wl.keysFor("dl", n);
        Map<String, String> props = wl.userProps(n, n % 2 == 0);
        Message msg = wl.buildMessage(tMain, tags, keys, props, body);
        Map<String, Object> r = wl.newRecord("normal", phase(), tMain, msg, body, kindOfBody, props, keys);
        wl.sendSimple(r, msg, null, null);
    }

    void sendBulk(int n) {
        // every third: random bytes of 4 097-8 192 (compressed by the client, but incompressible: the
        // volume stays); the others 2 048-4 095 bytes of text or random bytes (never compressed)
        boolean large = n % 3 == 0;
        boolean binary = large || n % 3 == 1;
        int len = large ? COMPRESS_OVER + 1 + rnd.nextInt(4096) : 2048 + rnd.nextInt(2048);
        byte[] body = binary ? wl.bytes(len) : wl.text(len);
        List<String> keys = List.of("dlbulk-" + n);
        Map<String, String> props = new LinkedHashMap<>();
        props.put("seqNo", String.valueOf(n));
        Message msg = wl.buildMessage(tBulk, "bulk", keys, props, body);
        Map<String, Object> r = wl.newRecord("bulk", phase(), tBulk, msg, body,
            large ? "binary-large" : binary ? "binary-medium" : "text-medium", props, keys);
        wl.sendSimple(r, msg, null, null);
    }

    void sendDelayed(int n) {
        int level = DELAY_LEVELS_USED[n % DELAY_LEVELS_USED.length];
        byte[] body = wl.body("text-small");
        List<String> keys = wl.keysFor("dldelay", n);
        Map<String, String> props = wl.userProps(n, true);
        Message msg = wl.buildMessage(tDelay, "delay" + level, keys, props, body);
        msg.setDelayTimeLevel(level);
        Map<String, Object> r = wl.newRecord("delayed", phase(), tDelay, msg, body, "text-small", props, keys);
        r.put("delayLevel", level);
        wl.sendSimple(r, msg, Workload.SCHEDULE_TOPIC, level - 1);
    }

    void sendBatch(int b) {
        wl.sendBatch(tMain, "dlbatch", phase(), b, 1000 + b * BATCH_SIZE, BATCH_SIZE);
    }

    String phase() {
        return s1CopyStartMs < 0 ? "before_s1" : "after_s1";
    }

    // =================================================================== hot copy, broker views

    void hotCopy() throws Exception {
        Map<String, Object> before = brokerView();
        s1CopyStartMs = System.currentTimeMillis();
        Map<String, Object> copy = new StoreCopier(h.store, h.out.resolve("snapshots/s1/store")).copy();
        Map<String, Object> after = brokerView();
        snapshot.put("snapshot", "s1");
        snapshot.put("path", "snapshots/s1/store");
        snapshot.put("copyStartMs", s1CopyStartMs);
        snapshot.put("copy", copy);
        snapshot.put("brokerBeforeCopy", before);
        snapshot.put("brokerAfterCopy", after);
        snapshot.put("layout", describeLayout(h.out.resolve("snapshots/s1/store")));
    }

    /** What the broker says about its (DLedger) commitlog: runtime stats, effective config, cluster info. */
    Map<String, Object> brokerView() {
        Map<String, Object> v = new LinkedHashMap<>();
        v.put("atMs", System.currentTimeMillis());
        try {
            Map<String, Object> all = new TreeMap<>(Compat.runtimeStats(admin, brokerAddr));
            Map<String, Object> picked = new TreeMap<>();
            for (Map.Entry<String, Object> e : all.entrySet()) {
                String k = e.getKey().toLowerCase();
                if (k.contains("dleg") || k.contains("commitlog") || k.contains("raft") || k.contains("brokerid")
                    || k.contains("dispatchbehind") || k.contains("role")) {
                    picked.put(e.getKey(), e.getValue());
                }
            }
            v.put("runtimeStats", picked);
            v.put("commitLogMaxOffset", parseLong(all.get("commitLogMaxOffset")));
            v.put("commitLogMinOffset", parseLong(all.get("commitLogMinOffset")));
            v.put("runtimeStatsAll", all);
        } catch (Exception e) {
            v.put("runtimeStatsError", e.toString());
        }
        try {
            Properties p = admin.getBrokerConfig(brokerAddr);
            Map<String, Object> picked = new TreeMap<>();
            for (String k : p.stringPropertyNames()) {
                String lk = k.toLowerCase();
                if (lk.contains("dleg") || lk.contains("dledger") || lk.equals("brokerid") || lk.equals("brokerrole")
                    || lk.contains("rocksdb") || lk.equals("storetype") || lk.contains("configmanager")
                    || lk.contains("mappedfilesizecommitlog") || lk.contains("storepath")
                    || lk.contains("enablebatchpush") || lk.contains("preferredleader")) {
                    picked.put(k, p.getProperty(k));
                }
            }
            v.put("brokerConfigEffective", picked);
        } catch (Exception e) {
            v.put("brokerConfigError", e.toString());
        }
        try {
            Map<Long, String> addrs = Compat.brokerAddrs(admin, Harness.BROKER_NAME);
            v.put("clusterInfoBrokerAddrs", addrs == null ? null : flatAddrs(addrs));
        } catch (Exception e) {
            v.put("clusterInfoError", e.toString());
        }
        return v;
    }

    static Long parseLong(Object o) {
        try {
            return o == null ? null : Long.parseLong(String.valueOf(o).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    Map<String, Object> shutdownBroker() throws Exception {
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
        return r;
    }

    /** Every file under a store root (relative path, size) and the DLedger files' text. */
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
        Set<String> dirs = new TreeSet<>();
        try (var walk = Files.walk(root)) {
            for (Path p : (Iterable<Path>) walk::iterator) {
                if (Files.isDirectory(p) && !p.equals(root)) {
                    dirs.add(root.relativize(p).toString().replace('\\', '/'));
                }
            }
        }
        d.put("directories", new ArrayList<>(dirs));
        Path base = root.resolve("dledger-" + SELF_ID);
        d.put("dledgerDir", "dledger-" + SELF_ID);
        d.put("dataFiles", names(base.resolve("data")));
        d.put("indexFiles", names(base.resolve("index")));
        d.put("commitlogDirExists", Files.isDirectory(root.resolve("commitlog")));
        d.put("commitlogFiles", names(root.resolve("commitlog")));
        for (String f : List.of("checkpoint", "currterm")) {
            Path p = base.resolve(f);
            if (Files.exists(p)) {
                String text = Files.readString(p, StandardCharsets.ISO_8859_1);
                d.put(f, text);
                Properties props = new Properties();
                props.load(new StringReader(text));
                Map<String, Object> m = new TreeMap<>();
                for (String k : props.stringPropertyNames()) {
                    m.put(k, props.getProperty(k));
                }
                d.put(f + "Properties", m);
            } else {
                d.put(f, null);
            }
            d.put(f + "BakExists", Files.exists(base.resolve(f + ".bak")));
        }
        d.put("storeCheckpointExists", Files.exists(root.resolve("checkpoint")));
        return d;
    }

    static List<String> names(Path dir) throws IOException {
        List<String> out = new ArrayList<>();
        if (Files.isDirectory(dir)) {
            try (var s = Files.list(dir)) {
                s.map(p -> p.getFileName().toString()).sorted().forEach(out::add);
            }
        }
        return out;
    }

    static String dledgerJarVersion() {
        for (String e : System.getProperty("java.class.path").split(java.io.File.pathSeparator)) {
            String n = Paths.get(e).getFileName().toString();
            if (n.startsWith("dledger-") && n.endsWith(".jar")) {
                return n.substring("dledger-".length(), n.length() - ".jar".length());
            }
        }
        return "unknown";
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
        if ("compaction".equals(mode)) {
            for (Map<String, Object> r : compactedSends) {
                Object id = r.get("offsetMsgId");
                r.put("commitLogOffset", id == null ? null : Long.parseUnsignedLong(
                    ((String) id).substring(((String) id).length() - 16), 16));
            }
            Harness.writeJsonLines(h.truth.resolve("compacted_sends.jsonl"), compactedSends);
            Harness.writeJsonLines(h.truth.resolve("compacted_view.jsonl"), compactedView);
        }
        if (!snapshot.isEmpty()) {
            Harness.writeJson(h.truth.resolve("snapshots.json"), List.of(snapshot));
        }
        Harness.writeJson(h.truth.resolve(mode + ".json"), modeTruth);

        run.put("topics", topics());
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_ALL, "push, concurrently, every topic, always CONSUME_SUCCESS; Diff 0 before s1 and at the end");
        groups.put(G_HALF, "pull, first half (maxOffset/2) of every queue of every topic, committed synchronously");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", COMPRESS_OVER);
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        run.put("client", client);
        Map<String, Object> sc = new LinkedHashMap<>();
        sc.put("main", N_MAIN);
        sc.put("bulk", N_BULK);
        sc.put("batches", N_BATCHES + " x " + BATCH_SIZE);
        sc.put("delayed", N_DELAYED);
        sc.put("tailAfterS1", notes.get("tailMessagesPlanned"));
        run.put("plan", sc);
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("notPossible", notPossible);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }
}
