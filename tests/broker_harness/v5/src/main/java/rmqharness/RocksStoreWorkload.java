package rmqharness;

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
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The {@code v5-rocksdbstore} scenario: one 5.5.0 name server and broker with the 5.5.x RocksDB state store
 * ({@code <store>/rocksdbstore}, column families {@code default}, {@code timer}, {@code trans}) populated:
 * {@code transRocksDBEnable=true} with {@code transWriteOriginTransHalfEnable=false} (halves go to
 * {@code RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC}, indexed in the {@code trans} CF, decisions to
 * {@code RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC}) and {@code timerRocksDBEnable=true} (timer messages still stored in
 * {@code rmq_sys_wheel_timer}, indexed in the {@code timer} CF instead of timerlog/timerwheel).
 *
 * <ul>
 *   <li>{@code PG_ROCKS_TX} ({@code TransactionMQProducer}): {@link #TX_COUNTS} transactional sends to
 *   {@code TopicRocksTx}, plans shuffled with {@link #SEED}: commit, rollback, unknown-commit / unknown-rollback
 *   (UNKNOW, then the decision at the first check), never (UNKNOW at every check: the broker drops the key after
 *   {@code checkTimes > transactionCheckMax}, nothing in the commitlog) and immune (UNKNOW with
 *   {@code CHECK_IMMUNITY_TIME_IN_SECONDS=3600}: never checked, pending at shutdown).</li>
 *   <li>{@code PG_ROCKS_TIMER}: timer messages ({@code setDelayTimeSec}) to {@code TopicRocksTimer}, 3 s ones
 *   (delivered during the run) and 3600 s ones (pending at shutdown).</li>
 *   <li>{@code G_ROCKS_TIMER}, {@code G_ROCKS_TX}: push consumers recording every delivery.</li>
 * </ul>
 *
 * <p>The driver waits (on conditions, never fixed sleeps) until every decidable transaction is decided and its op is
 * stored, the broker logged the deletion of every never-answered one, every 3 s timer was delivered and the
 * timeline checkpoint passed it; then the clients stop and the broker gets SIGTERM (its shutdown flushes RocksDB).
 *
 * <p>Own {@code main} (stores.py starts it, see {@code MAIN_CLASSES}; fingerprinted for {@code v5-rocksdbstore} alone
 * via {@code SCENARIO_OF}). Truth ({@code truth/}): {@code transactions.jsonl}, {@code tx_calls.jsonl},
 * {@code timers.jsonl}, {@code deliveries.jsonl}, {@code topic_stats.jsonl}, {@code rocksdbstore.json},
 * {@code run.json}.
 */
final class RocksStoreWorkload extends StandaloneScenario {
    static final String VARIANT = "v5-rocksdbstore";
    static final long SEED = 20250917L;
    static final String T_TX = "TopicRocksTx";
    static final String T_TIMER = "TopicRocksTimer";
    static final String PG_TX = "PG_ROCKS_TX";
    static final String PG_TIMER = "PG_ROCKS_TIMER";
    static final String G_TX = "G_ROCKS_TX";
    static final String G_TIMER = "G_ROCKS_TIMER";
    static final String HALF_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC";
    static final String OP_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC";
    static final String TIMER_TOPIC = "rmq_sys_wheel_timer";
    static final List<String> STAT_TOPICS = List.of(T_TX, T_TIMER, HALF_TOPIC, OP_TOPIC, TIMER_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC");

    static final long TX_TIMEOUT_MS = 2000;
    static final long TX_CHECK_INTERVAL_MS = 1000;
    static final int TX_CHECK_MAX = 3;
    static final int IMMUNITY_SEC = 3600;
    static final Map<String, Integer> TX_COUNTS = txCounts();
    static final int SHORT_DELAY_SEC = 3;
    static final int LONG_DELAY_SEC = 3600;
    static final int N_SHORT_TIMERS = 6;
    static final int N_LONG_TIMERS = 4;
    static final long WAIT_MS = 120_000L;
    static final Pattern DELETE_LINE = Pattern.compile("need delete, checkTimes: (\\d+), msgId: (\\S+)");
    static final Pattern TIMELINE_LINE = Pattern.compile("reput messages to commitlog, checkPoint: (\\d+)");

    final Random rnd = new Random(SEED);
    final Map<String, Object> notes = new LinkedHashMap<>();
    final Map<String, Object> info = new LinkedHashMap<>();
    final List<Map<String, Object>> txSends = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> txCalls = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> timers = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> deliveries = Collections.synchronizedList(new ArrayList<>());
    final Map<String, String> planOf = new ConcurrentHashMap<>();
    final Map<String, SendResult> halfSendResults = new ConcurrentHashMap<>();
    final List<Map<String, Object>> topicStats = new ArrayList<>();
    Workload wl;
    DefaultMQAdminExt admin;
    TransactionMQProducer txProducer;
    DefaultMQProducer timerProducer;
    final List<DefaultMQPushConsumer> consumers = new ArrayList<>();
    Process namesrv;
    Process broker;
    String brokerAddr;

    RocksStoreWorkload(Harness h, String variant) {
        super(h);
    }

    /** Usage: {@code java -cp ... rmqharness.RocksStoreWorkload --variant v5-rocksdbstore --out DIR [--timeout SEC]}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "RocksStoreWorkload", Set.of(VARIANT), RocksStoreWorkload::new);
    }

    static Map<String, Integer> txCounts() {
        Map<String, Integer> m = new LinkedHashMap<>();
        m.put("commit", 4);
        m.put("rollback", 4);
        m.put("unknown-commit", 3);
        m.put("unknown-rollback", 3);
        m.put("never", 3);
        m.put("immune", 3);
        return m;
    }

    // =================================================================== flow

    @Override
    void runScenario(Map<String, Object> run) throws Exception {
        String lo = h.loopback;
        int nsPort = Harness.freePort(lo, 0, 0);
        int brokerPort = Harness.freePort(lo, 2, 1, new HashSet<>(List.of(nsPort)));
        String nsAddr = Harness.hostPort(lo, nsPort);
        brokerAddr = Harness.hostPort(lo, brokerPort);

        Map<String, String> nsConf = new LinkedHashMap<>();
        nsConf.put("listenPort", String.valueOf(nsPort));
        nsConf.put("bindAddress", lo);
        nsConf.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        nsConf.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        nsConf.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        nsConf.put("scanAvailableNameSrv", "false");

        Map<String, String> brokerConf = h.brokerConfig(nsAddr, brokerPort);
        // halves to RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC only (with the default true they would still go to the classic
        // half topic, which the trans dispatcher ignores), indexed in the trans column family
        brokerConf.put("transRocksDBEnable", "true");
        brokerConf.put("transWriteOriginTransHalfEnable", "false");
        // the timer store reads rmq_sys_wheel_timer into the timer column family (timerWheelEnable stays true)
        brokerConf.put("timerRocksDBEnable", "true");
        brokerConf.put("transactionTimeOut", String.valueOf(TX_TIMEOUT_MS));
        brokerConf.put("transactionCheckInterval", String.valueOf(TX_CHECK_INTERVAL_MS));
        brokerConf.put("transactionCheckMax", String.valueOf(TX_CHECK_MAX));

        Path nsConfFile = h.work.resolve("namesrv.conf");
        Path brokerConfFile = h.work.resolve("broker.conf");
        Harness.writeProperties(nsConfFile, nsConf);
        Harness.writeProperties(brokerConfFile, brokerConf);
        Files.copy(nsConfFile, h.logs.resolve("namesrv.conf"));
        Files.copy(brokerConfFile, h.logs.resolve("broker.conf"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_namesrv.xml"), h.logs.resolve("namesrv.log"));
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_broker.xml"), h.logs.resolve("broker.log"));

        run.put("variant", VARIANT);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("shutdownMode", "clean");
        run.put("scenario", "rocksstore");
        run.put("seed", SEED);
        run.put("javaVersion", System.getProperty("java.version"));
        run.put("ports", Map.of("namesrv", nsPort, "broker", brokerPort));
        run.put("namesrvAddr", nsAddr);
        run.put("brokerAddr", brokerAddr);
        run.put("brokerName", Harness.BROKER_NAME);
        run.put("clusterName", Harness.CLUSTER);
        run.put("brokerConfig", brokerConf);
        run.put("namesrvConfig", nsConf);
        run.put("storePathAtGeneration", h.store.toString());

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
        info.put("brokerConfigEffective", effectiveBrokerConfig());

        wl = new Workload(h, nsAddr, brokerAddr, rnd);
        wl.admin = admin;
        Map<String, Integer> topics = new LinkedHashMap<>();
        topics.put(T_TX, 2);
        topics.put(T_TIMER, 2);
        wl.createTopics(topics);
        run.put("topics", topics);
        for (String g : List.of(G_TX, G_TIMER)) {
            Compat.createGroup(admin, brokerAddr, g);
        }
        h.mark("topicsCreated");

        consumers.add(consumer(G_TX, "c-rocks-tx", T_TX));
        consumers.add(consumer(G_TIMER, "c-rocks-timer", T_TIMER));
        h.mark("consumersStarted");
        startProducers();
        h.mark("producersStarted");

        sendTransactions();
        h.mark("transactionsSent");
        sendTimers();
        h.mark("timersSent");
        readBack();
        h.mark("readBack");

        waitDone();
        h.mark("done");

        for (DefaultMQPushConsumer c : consumers) {
            Workload.shutdownQuietly(c);
        }
        Workload.shutdownQuietly(txProducer);
        Workload.shutdownQuietly(timerProducer);
        h.mark("clientsStopped");
        topicStats.addAll(topicStats());
        h.mark("adminSnapshot");
        admin.shutdown();
        run.put("shutdown", shutdownBroker());
        h.mark("brokerStopped");
        namesrv.destroyForcibly(); // nothing of the name server is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        info.put("brokerLog", brokerLogFacts());
        h.mark("end");
    }

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

    /** The broker's own answer (getBrokerConfig: broker, netty and store configs) for the keys this variant uses. */
    Map<String, Object> effectiveBrokerConfig() {
        Map<String, Object> picked = new TreeMap<>();
        try {
            Properties p = admin.getBrokerConfig(brokerAddr);
            for (String k : p.stringPropertyNames()) {
                String lk = k.toLowerCase();
                if (lk.contains("rocksdb") || lk.contains("transaction") || lk.startsWith("trans")
                    || lk.startsWith("timer") || lk.equals("messageindexenable") || lk.equals("storetype")) {
                    picked.put(k, p.getProperty(k));
                }
            }
        } catch (Exception e) {
            picked.put("error", e.toString());
        }
        return picked;
    }

    // =================================================================== clients

    DefaultMQPushConsumer consumer(String group, String instance, String topic) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        wl.configureConsumer(c, instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(1);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long at = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                deliveries.add(delivery(group, ctx.getMessageQueue(), m, at));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    static Map<String, Object> delivery(String group, MessageQueue mq, MessageExt m, long at) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", group);
        r.put("topic", m.getTopic());
        r.put("queueId", mq.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("msgId", m.getMsgId());
        r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("storeSize", m.getStoreSize());
        r.put("sysFlag", m.getSysFlag());
        r.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        r.put("bornTimestamp", m.getBornTimestamp());
        r.put("storeTimestamp", m.getStoreTimestamp());
        r.put("receivedMs", at);
        r.put("reconsumeTimes", m.getReconsumeTimes());
        r.put("timerOutMs", m.getProperty("TIMER_OUT_MS"));
        r.put("checkTimesProperty", m.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
        r.put("plan", m.getUserProperty("plan"));
        r.put("properties", new TreeMap<>(m.getProperties()));
        return r;
    }

    void startProducers() throws Exception {
        txProducer = new TransactionMQProducer(PG_TX);
        wl.configureProducer(txProducer, "harness-rocks-tx-producer");
        txProducer.setTransactionListener(new TxListener());
        // TransactionSendResult drops offsetMsgId: a send hook keeps the half message's SendResult
        txProducer.getDefaultMQProducerImpl().registerSendMessageHook(new SendMessageHook() {
            @Override
            public String hookName() {
                return "harness-half-send-results";
            }

            @Override
            public void sendMessageBefore(SendMessageContext context) {
            }

            @Override
            public void sendMessageAfter(SendMessageContext context) {
                if (context.getSendResult() != null) {
                    halfSendResults.put(MessageClientIDSetter.getUniqID(context.getMessage()),
                        context.getSendResult());
                }
            }
        });
        txProducer.start();
        timerProducer = new DefaultMQProducer(PG_TIMER);
        wl.configureProducer(timerProducer, "harness-rocks-timer-producer");
        timerProducer.start();
    }

    // =================================================================== sends

    void sendTransactions() {
        List<String> plans = new ArrayList<>();
        TX_COUNTS.forEach((plan, n) -> {
            for (int i = 0; i < n; i++) {
                plans.add(plan);
            }
        });
        Collections.shuffle(plans, rnd);
        for (int n = 0; n < plans.size(); n++) {
            String plan = plans.get(n);
            byte[] body = wl.body("text-small");
            List<String> keys = List.of(String.format("rocks-tx-%04d", n));
            Map<String, String> props = new LinkedHashMap<>();
            props.put("seqNo", String.valueOf(n));
            props.put("plan", plan);
            if (plan.equals("immune")) {
                props.put(MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, String.valueOf(IMMUNITY_SEC));
            }
            Message msg = wl.buildMessage(T_TX, "tx", keys, props, body);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("seq", n);
            r.put("plan", plan);
            r.put("producerGroup", PG_TX);
            r.put("topic", T_TX);
            r.put("keys", keys);
            r.put("userProperties", props);
            r.put("bodyLength", body.length);
            r.put("bodySha256", Workload.sha256(body));
            long start = System.currentTimeMillis();
            r.put("sendStartMs", start);
            try {
                TransactionSendResult res = txProducer.sendMessageInTransaction(msg, plan);
                r.put("sendEndMs", System.currentTimeMillis());
                String id = MessageClientIDSetter.getUniqID(msg);
                planOf.put(id, plan);
                r.put("msgId", id);
                r.put("sendStatus", res.getSendStatus().name());
                r.put("acked", "SEND_OK".equals(res.getSendStatus().name()));
                r.put("transactionId", res.getTransactionId());
                r.put("messageTransactionId", msg.getTransactionId());
                r.put("localTransactionState", res.getLocalTransactionState() == null ? null
                    : res.getLocalTransactionState().name());
                r.put("queueId", res.getMessageQueue().getQueueId());
                r.put("brokerName", res.getMessageQueue().getBrokerName());
                SendResult half = halfSendResults.get(id);
                if (half != null) {
                    r.put("halfOffsetMsgId", half.getOffsetMsgId());
                    r.put("halfCommitLogOffset", commitLogOffsetOf(half.getOffsetMsgId()));
                    r.put("halfQueueOffset", half.getQueueOffset());
                    r.put("halfSendResultTopic", half.getMessageQueue().getTopic());
                }
                r.put("error", null);
            } catch (Exception e) {
                r.put("sendEndMs", System.currentTimeMillis());
                r.put("msgId", MessageClientIDSetter.getUniqID(msg));
                r.put("acked", false);
                r.put("error", e.toString());
            }
            txSends.add(r);
        }
    }

    static Long commitLogOffsetOf(String offsetMsgId) {
        return offsetMsgId == null ? null
            : Long.parseUnsignedLong(offsetMsgId.substring(offsetMsgId.length() - 16), 16);
    }

    void sendTimers() {
        List<Integer> delays = new ArrayList<>();
        for (int i = 0; i < N_SHORT_TIMERS; i++) {
            delays.add(SHORT_DELAY_SEC);
        }
        for (int i = 0; i < N_LONG_TIMERS; i++) {
            delays.add(LONG_DELAY_SEC);
        }
        Collections.shuffle(delays, rnd);
        for (int n = 0; n < delays.size(); n++) {
            int sec = delays.get(n);
            byte[] body = wl.body("text-small");
            List<String> keys = List.of(String.format("rocks-timer-%04d", n));
            Map<String, String> props = new LinkedHashMap<>();
            props.put("seqNo", String.valueOf(n));
            props.put("delaySec", String.valueOf(sec));
            Message msg = wl.buildMessage(T_TIMER, "timer", keys, props, body);
            Compat.setTimerDelaySec(msg, sec);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("seq", n);
            r.put("delaySec", sec);
            r.put("producerGroup", PG_TIMER);
            r.put("topic", T_TIMER);
            r.put("keys", keys);
            r.put("bodyLength", body.length);
            r.put("bodySha256", Workload.sha256(body));
            long start = System.currentTimeMillis();
            r.put("sendStartMs", start);
            try {
                SendResult res = timerProducer.send(msg);
                r.put("sendEndMs", System.currentTimeMillis());
                r.put("msgId", MessageClientIDSetter.getUniqID(msg));
                r.put("sendStatus", res.getSendStatus().name());
                r.put("acked", "SEND_OK".equals(res.getSendStatus().name()));
                r.put("queueId", res.getMessageQueue().getQueueId());
                r.put("wheelOffsetMsgId", res.getOffsetMsgId());
                r.put("wheelCommitLogOffset", commitLogOffsetOf(res.getOffsetMsgId()));
                r.put("wheelQueueOffset", res.getQueueOffset());
                r.put("expectedDeliverMs", start + sec * 1000L);
                r.put("error", null);
            } catch (Exception e) {
                r.put("sendEndMs", System.currentTimeMillis());
                r.put("msgId", MessageClientIDSetter.getUniqID(msg));
                r.put("acked", false);
                r.put("error", e.toString());
            }
            timers.add(r);
        }
    }

    /** The half and rmq_sys_wheel_timer records as the broker stored them (viewMessage by offsetMsgId). */
    void readBack() {
        for (Map<String, Object> r : snapshot(txSends)) {
            if (r.get("halfOffsetMsgId") != null) {
                try {
                    MessageExt m = admin.viewMessage(HALF_TOPIC, (String) r.get("halfOffsetMsgId"));
                    r.put("halfTopic", m.getTopic());
                    r.put("halfStoreSize", m.getStoreSize());
                    r.put("halfQueueId", m.getQueueId());
                    r.put("halfSysFlag", m.getSysFlag());
                    r.put("halfBornTimestamp", m.getBornTimestamp());
                    r.put("halfProperties", new TreeMap<>(m.getProperties()));
                } catch (Exception e) {
                    r.put("halfReadError", e.toString());
                }
            }
        }
        for (Map<String, Object> t : snapshot(timers)) {
            if (t.get("wheelOffsetMsgId") != null) {
                try {
                    MessageExt m = admin.viewMessage(TIMER_TOPIC, (String) t.get("wheelOffsetMsgId"));
                    t.put("wheelTopic", m.getTopic());
                    t.put("wheelStoreSize", m.getStoreSize());
                    t.put("wheelQueueId", m.getQueueId());
                    t.put("wheelStoreTimestamp", m.getStoreTimestamp());
                    String out = m.getProperty("TIMER_OUT_MS");
                    t.put("timerOutMs", out == null ? null : Long.parseLong(out));
                    t.put("wheelProperties", new TreeMap<>(m.getProperties()));
                } catch (Exception e) {
                    t.put("wheelReadError", e.toString());
                }
            }
        }
    }

    static List<Map<String, Object>> snapshot(List<Map<String, Object>> rows) {
        synchronized (rows) {
            return new ArrayList<>(rows);
        }
    }

    final class TxListener implements TransactionListener {
        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            String plan = (String) arg;
            LocalTransactionState s = plan.equals("commit") ? LocalTransactionState.COMMIT_MESSAGE
                : plan.equals("rollback") ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("kind", "local");
            e.put("msgId", MessageClientIDSetter.getUniqID(msg));
            e.put("transactionId", msg.getTransactionId());
            e.put("plan", plan);
            e.put("checkNo", 0);
            e.put("timeMs", System.currentTimeMillis());
            e.put("state", s.name());
            txCalls.add(e);
            return s;
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            long at = System.currentTimeMillis();
            String id = msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
            String plan = msg.getUserProperty("plan");
            int k;
            synchronized (txCalls) {
                k = 1 + (int) txCalls.stream().filter(c -> "check".equals(c.get("kind"))
                    && String.valueOf(id).equals(c.get("msgId"))).count();
            }
            LocalTransactionState s;
            switch (String.valueOf(plan)) {
                case "commit":
                case "unknown-commit":
                    s = LocalTransactionState.COMMIT_MESSAGE;
                    break;
                case "rollback":
                case "unknown-rollback":
                    s = LocalTransactionState.ROLLBACK_MESSAGE;
                    break;
                default: // never, immune
                    s = LocalTransactionState.UNKNOW;
            }
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("kind", "check");
            e.put("msgId", id);
            e.put("transactionId", msg.getTransactionId());
            e.put("plan", plan);
            e.put("checkNo", k);
            e.put("timeMs", at);
            e.put("state", s.name());
            e.put("checkTimesProperty", msg.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
            e.put("checkedTopic", msg.getTopic());
            e.put("checkedQueueId", msg.getQueueId());
            e.put("checkedOffsetMsgId", msg.getMsgId());
            e.put("checkedQueueOffset", msg.getQueueOffset());
            e.put("checkedCommitLogOffset", msg.getCommitLogOffset());
            txCalls.add(e);
            return s;
        }
    }

    // =================================================================== waiting

    Set<String> txIds(String... plans) {
        Set<String> want = Set.of(plans);
        Set<String> ids = new HashSet<>();
        for (Map<String, Object> r : snapshot(txSends)) {
            if (Boolean.TRUE.equals(r.get("acked")) && want.contains(r.get("plan"))) {
                ids.add((String) r.get("msgId"));
            }
        }
        return ids;
    }

    long checks(String msgId, boolean decidedOnly) {
        return snapshot(txCalls).stream().filter(c -> "check".equals(c.get("kind")) && msgId.equals(c.get("msgId"))
            && (!decidedOnly || !"UNKNOW".equals(c.get("state")))).count();
    }

    long maxOffsetSum(String topic) {
        try {
            TopicStatsTable t = admin.examineTopicStats(brokerAddr, topic);
            return t.getOffsetTable().values().stream().mapToLong(TopicOffset::getMaxOffset).sum();
        } catch (Exception e) {
            return -1;
        }
    }

    Set<String> delivered(String group) {
        Set<String> ids = new HashSet<>();
        for (Map<String, Object> d : snapshot(deliveries)) {
            if (group.equals(d.get("group"))) {
                ids.add((String) d.get("msgId"));
            }
        }
        return ids;
    }

    /**
     * Every decidable transaction decided (the unknown ones at a check) with its op stored and its committed copy
     * delivered; every never-answered one checked transactionCheckMax+1 times and its deletion logged by the broker;
     * every 3 s timer delivered and the timeline checkpoint (as the broker logs it) past it.
     */
    void waitDone() throws Exception {
        Set<String> checked = txIds("unknown-commit", "unknown-rollback");
        Set<String> never = txIds("never");
        Set<String> committed = txIds("commit", "unknown-commit");
        long decidedCount = txIds("commit", "rollback", "unknown-commit", "unknown-rollback").size();
        Set<String> shortTimers = new HashSet<>();
        long maxShortOut = 0;
        for (Map<String, Object> t : snapshot(timers)) {
            if (Boolean.TRUE.equals(t.get("acked")) && ((Integer) t.get("delaySec")) == SHORT_DELAY_SEC) {
                shortTimers.add((String) t.get("msgId"));
                Object out = t.get("timerOutMs");
                maxShortOut = Math.max(maxShortOut, out == null ? 0 : (Long) out);
            }
        }
        long wantCheckpoint = maxShortOut + 1;
        long end = Math.min(System.currentTimeMillis() + WAIT_MS, h.deadline);
        String status;
        while (true) {
            long decided = checked.stream().filter(id -> checks(id, true) > 0).count();
            long neverChecked = never.stream().filter(id -> checks(id, false) > TX_CHECK_MAX).count();
            Map<String, Integer> deleted = deletedByBroker();
            long neverDeleted = never.stream().filter(deleted::containsKey).count();
            long ops = maxOffsetSum(OP_TOPIC);
            Set<String> txDelivered = delivered(G_TX);
            long txSeen = committed.stream().filter(txDelivered::contains).count();
            Set<String> timerDelivered = delivered(G_TIMER);
            long timersSeen = shortTimers.stream().filter(timerDelivered::contains).count();
            long checkpoint = timelineCheckpointLogged();
            status = String.format("checked and decided %d/%d, never checked >%d times %d/%d, never deleted %d/%d, "
                    + "ops %d/%d, committed delivered %d/%d, 3 s timers delivered %d/%d, timeline checkpoint %d/%d",
                decided, checked.size(), TX_CHECK_MAX, neverChecked, never.size(), neverDeleted, never.size(), ops,
                decidedCount, txSeen, committed.size(), timersSeen, shortTimers.size(), checkpoint, wantCheckpoint);
            if (decided >= checked.size() && neverChecked >= never.size() && neverDeleted >= never.size()
                && ops >= decidedCount && txSeen >= committed.size() && timersSeen >= shortTimers.size()
                && checkpoint >= wantCheckpoint) {
                break;
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("the run did not complete: " + status);
            }
            if (!broker.isAlive()) {
                throw new Harness.HarnessError("broker exited with code " + broker.exitValue());
            }
            Thread.sleep(300);
        }
        Harness.log("done: " + status);
        notes.put("waitStatus", status);
        for (String id : txIds("immune")) {
            if (checks(id, false) > 0) {
                throw new Harness.HarnessError("the broker checked the immune transaction " + id);
            }
        }
    }

    List<String> brokerLog() {
        try {
            return Files.readAllLines(h.logs.resolve("broker.log"), StandardCharsets.ISO_8859_1);
        } catch (Exception e) {
            return List.of();
        }
    }

    /** msgId -> checkTimes of the broker's "need delete" lines (TransactionalMessageRocksDBService). */
    Map<String, Integer> deletedByBroker() {
        Map<String, Integer> m = new TreeMap<>();
        for (String l : brokerLog()) {
            Matcher x = DELETE_LINE.matcher(l);
            if (x.find()) {
                m.put(x.group(2), Integer.parseInt(x.group(1)));
            }
        }
        return m;
    }

    /** The last timeline checkpoint the timer store's reput service logged (0 if none). */
    long timelineCheckpointLogged() {
        long last = 0;
        for (String l : brokerLog()) {
            Matcher x = TIMELINE_LINE.matcher(l);
            if (x.find()) {
                last = Math.max(last, Long.parseLong(x.group(1)));
            }
        }
        return last;
    }

    Map<String, Object> brokerLogFacts() {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("needDelete", deletedByBroker());
        List<Long> cps = new ArrayList<>();
        List<String> lines = brokerLog();
        for (String l : lines) {
            Matcher x = TIMELINE_LINE.matcher(l);
            if (x.find()) {
                cps.add(Long.parseLong(x.group(1)));
            }
        }
        r.put("timelineCheckpoints", cps);
        r.put("timerWheelNotUsed", lines.stream().filter(l -> l.contains("will not enqueue in timer wheel")).count());
        r.put("errors", lines.stream().filter(l -> l.contains(" ERROR ")).limit(50).toList());
        return r;
    }

    List<Map<String, Object>> topicStats() {
        long at = System.currentTimeMillis();
        List<Map<String, Object>> out = new ArrayList<>();
        for (String t : STAT_TOPICS) {
            try {
                List<Map<String, Object>> rows = Compat.topicStats(admin, t);
                rows.forEach(row -> row.put("snapshotMs", at));
                rows.sort(Comparator.comparingInt(m -> (Integer) m.get("queueId")));
                out.addAll(rows);
            } catch (Exception e) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("topic", t);
                row.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                row.put("snapshotMs", at);
                out.add(row);
            }
        }
        return out;
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

    // =================================================================== truth

    @Override
    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> calls = snapshot(txCalls);
        calls.sort(Comparator.comparingLong((Map<String, Object> e) -> ((Number) e.get("timeMs")).longValue()));
        for (int i = 0; i < calls.size(); i++) {
            calls.get(i).put("seq", i);
        }
        Map<String, Integer> deleted = deletedByBroker();
        List<Map<String, Object>> sends = snapshot(txSends);
        for (Map<String, Object> r : sends) {
            String id = String.valueOf(r.get("msgId"));
            List<Map<String, Object>> mine = new ArrayList<>();
            for (Map<String, Object> c : calls) {
                if (id.equals(c.get("msgId"))) {
                    Map<String, Object> slim = new LinkedHashMap<>();
                    slim.put("kind", c.get("kind"));
                    slim.put("checkNo", c.get("checkNo"));
                    slim.put("timeMs", c.get("timeMs"));
                    slim.put("state", c.get("state"));
                    mine.add(slim);
                }
            }
            r.put("calls", mine);
            long nChecks = mine.stream().filter(c -> "check".equals(c.get("kind"))).count();
            r.put("checkCount", nChecks);
            String outcome = "pending";
            Long decidedMs = null;
            for (Map<String, Object> c : mine) {
                String st = (String) c.get("state");
                if (!"UNKNOW".equals(st)) {
                    outcome = "COMMIT_MESSAGE".equals(st) ? "commit" : "rollback";
                    decidedMs = ((Number) c.get("timeMs")).longValue();
                    break;
                }
            }
            if (deleted.containsKey(id)) {
                outcome = "dropped";
            }
            r.put("outcome", outcome);
            r.put("decidedMs", decidedMs);
            r.put("brokerDeleteCheckTimes", deleted.get(id));
        }
        Harness.writeJsonLines(h.truth.resolve("transactions.jsonl"), sends);
        Harness.writeJsonLines(h.truth.resolve("tx_calls.jsonl"), calls);
        List<Map<String, Object>> dels = snapshot(deliveries);
        dels.sort(Comparator.comparingLong((Map<String, Object> d) -> ((Number) d.get("receivedMs")).longValue()));
        Harness.writeJsonLines(h.truth.resolve("deliveries.jsonl"), dels);
        List<Map<String, Object>> ts = snapshot(timers);
        for (Map<String, Object> t : ts) {
            Object id = t.get("msgId");
            t.put("deliveries", dels.stream().filter(d -> G_TIMER.equals(d.get("group")) && id != null
                && id.equals(d.get("msgId"))).count());
        }
        Harness.writeJsonLines(h.truth.resolve("timers.jsonl"), ts);
        Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), topicStats);

        Map<String, Object> settings = new LinkedHashMap<>();
        settings.put("transactionTimeOutMs", TX_TIMEOUT_MS);
        settings.put("transactionCheckIntervalMs", TX_CHECK_INTERVAL_MS);
        settings.put("transactionCheckMax", TX_CHECK_MAX);
        settings.put("immunitySec", IMMUNITY_SEC);
        settings.put("txPlans", TX_COUNTS);
        settings.put("shortDelaySec", SHORT_DELAY_SEC);
        settings.put("longDelaySec", LONG_DELAY_SEC);
        settings.put("shortTimers", N_SHORT_TIMERS);
        settings.put("longTimers", N_LONG_TIMERS);
        info.put("settings", settings);
        info.put("timingsMs", h.timings);
        Harness.writeJson(h.truth.resolve("rocksdbstore.json"), info);

        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(PG_TX, "TransactionMQProducer: " + sends.size() + " transactional sends to " + T_TX + " " + TX_COUNTS);
        groups.put(PG_TIMER, "DefaultMQProducer: " + ts.size() + " timer sends to " + T_TIMER + " ("
            + N_SHORT_TIMERS + " x " + SHORT_DELAY_SEC + " s, " + N_LONG_TIMERS + " x " + LONG_DELAY_SEC + " s)");
        groups.put(G_TX, "push consumer of " + T_TX + " (the committed transactions)");
        groups.put(G_TIMER, "push consumer of " + T_TIMER + " (the delivered timers)");
        run.put("groups", groups);
        run.put("counts", Map.of("transactions", sends.size(), "txCalls", calls.size(), "timers", ts.size(),
            "deliveries", dels.size()));
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }
}
