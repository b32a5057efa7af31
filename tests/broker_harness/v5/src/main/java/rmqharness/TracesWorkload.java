package rmqharness;

import java.nio.ByteBuffer;
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
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.hook.ConsumeMessageContext;
import org.apache.rocketmq.client.hook.ConsumeMessageHook;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.trace.AsyncTraceDispatcher;
import org.apache.rocketmq.client.trace.TraceBean;
import org.apache.rocketmq.client.trace.TraceContext;
import org.apache.rocketmq.client.trace.TraceDataEncoder;
import org.apache.rocketmq.client.trace.TraceDispatcher;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The {@code v5-traces} scenario: one 5.5.0 name server and broker ({@code traceTopicEnable=true}, transaction checks
 * every second after 2 s, at most 3 checks), every client with message tracing on, so the store holds the trace
 * topic {@code RMQ_SYS_TRACE_TOPIC} (the clients' {@code AsyncTraceDispatcher} bodies: Pub, SubBefore, SubAfter,
 * EndTransaction contexts) next to the transaction system topics.
 *
 * <ul>
 *   <li>{@code PG_TRACE} ({@code new DefaultMQProducer(group, true, null)}): 30 synchronous sends with tags and three
 *   keys to {@code TopicTraceNormal} (in a row, so a 20-context trace batch exceeds 4 KiB and is compressed), two client
 *   batches of 5, 24 orderly sends ({@code MessageQueueSelector} by order id, 8 orders x 3 steps) to
 *   {@code TopicTraceOrder} and one delay message (level 2).</li>
 *   <li>{@code PG_TRACE_TX} ({@code new TransactionMQProducer(group, null, true, null)}): 24 transactional sends to
 *   {@code TopicTraceTx}: 8 COMMIT, 4 ROLLBACK, UNKNOW then COMMIT (4) or ROLLBACK (3) at the first check, UNKNOW at the
 *   first check and COMMIT at the second (3), and 2 that always answer UNKNOW: checked {@code transactionCheckMax}
 *   times, then discarded by the broker into {@code TRANS_CHECK_MAX_TIME_TOPIC}.</li>
 *   <li>Traced push consumers ({@code new DefaultMQPushConsumer(group, true, null)}): {@code G_TRACE_ALL} (concurrently,
 *   TopicTraceNormal + TopicTraceOrder, always succeeds), {@code G_TRACE_RETRY} (concurrently, TopicTraceNormal,
 *   RECONSUME_LATER while a message's reconsumeTimes is below its {@code failTimes} property: 4 messages once, 2 twice),
 *   {@code G_TRACE_ORDERLY} ({@code MessageListenerOrderly} on TopicTraceOrder) and {@code G_TRACE_TX} (concurrently,
 *   TopicTraceTx: the committed ones).</li>
 * </ul>
 *
 * <p>{@code snapshots/s1/store} is a hot copy (StoreCopier) right after the transactional sends, before the broker's
 * first check could resolve any UNKNOW one; the final {@code store/} is taken after every delivery, check and discard,
 * after every expected trace context was read back from the trace topic, the clients' shutdown (which flushes their
 * trace dispatchers) and the trace topic's max offset stopped growing; then SIGTERM.
 *
 * <p>Own {@code main} (stores.py starts it for this variant, see {@code MAIN_CLASSES}); a {@link Harness} in its
 * "-clean" mode is used for the helpers. 5.x only.
 *
 * <p>Under load the broker may check a transaction again after it was decided (a check run that read the op queue
 * before the decision's op was stored): the producer answers again, a COMMIT gives a second committed copy and
 * G_TRACE_TX a second delivery with reconsumeTimes 0. The run waits until the broker is done with every transaction
 * ({@link #waitTransactionsSettled}) and records what it did; an outcome the truth cannot describe (a failed send, a
 * check the producer never answered, a trace context missing after the shutdown) is a HarnessError.
 *
 * <p>Truth ({@code truth/}): {@code messages.jsonl} (every send; a transactional one with {@code txHalfCopies} and
 * {@code txCommittedCopies}, the broker's copies as it answered a pull), {@code consumed.jsonl} (every listener call
 * per message, with {@code traceRequestId}: the request id of its SubBefore/SubAfter contexts), {@code
 * transactions.jsonl} (every local decision and check callback), {@code trace_messages.jsonl} (the
 * trace topic read back, each body decoded by the client's own {@code TraceDataEncoder}), {@code traces.json}
 * (dispatcher settings, expected and found contexts, discarded transactions, broker log counts),
 * {@code consumer_groups.jsonl}, {@code topic_stats.jsonl}, {@code consumer_groups_s1.jsonl},
 * {@code topic_stats_s1.jsonl}, {@code snapshots.json}, {@code run.json}.
 */
final class TracesWorkload extends StandaloneScenario {
    static final String VARIANT = "v5-traces";
    static final long SEED = 20240707L;
    static final String T_NORMAL = "TopicTraceNormal";
    static final String T_ORDER = "TopicTraceOrder";
    static final String T_TX = "TopicTraceTx";
    static final Map<String, Integer> TOPICS = topics();
    static final String TRACE_TOPIC = TopicValidator.RMQ_SYS_TRACE_TOPIC;
    static final String HALF_TOPIC = TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC;
    static final String OP_HALF_TOPIC = TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC;
    static final String CHECK_MAX_TOPIC = TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC;
    static final List<String> SYSTEM_TOPICS = List.of(TRACE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TOPIC,
        TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);

    static final String PG = "PG_TRACE";
    static final String PG_TX = "PG_TRACE_TX";
    static final String G_ALL = "G_TRACE_ALL";
    static final String G_RETRY = "G_TRACE_RETRY";
    static final String G_ORDERLY = "G_TRACE_ORDERLY";
    static final String G_TX = "G_TRACE_TX";
    static final List<String> GROUPS = List.of(G_ALL, G_RETRY, G_ORDERLY, G_TX);
    /** Reads the trace topic and TRANS_CHECK_MAX_TIME_TOPIC back (PULL_MESSAGE, nothing committed, not traced). */
    static final String G_READER = "G_TRACE_READER";

    static final int N_NORMAL = 30;
    static final int N_BATCHES = 2;
    static final int BATCH_SIZE = 5;
    static final int N_ORDERS = 8;
    static final String[] ORDER_STEPS = {"create", "pay", "ship"};
    static final int DELAY_LEVEL = 2;
    static final String[] TAGS = {"TagA", "TagB", "TagC"};
    /** G_TRACE_RETRY: normal send n -> how many times it answers RECONSUME_LATER (the failTimes property). */
    static final Map<Integer, Integer> FAIL_TIMES = Map.of(3, 1, 10, 1, 17, 1, 24, 1, 6, 2, 20, 2);
    static final int MAX_RECONSUME_TIMES = 3;
    /** The producer's trace batch (contexts per trace message, the client caps it at 20); consumers keep 10. */
    static final int PRODUCER_TRACE_BATCH = 20;

    static final long TX_TIMEOUT_MS = 2000;
    static final long TX_CHECK_INTERVAL_MS = 1000;
    static final int TX_CHECK_MAX = 3;
    static final String[] TX_PLANS = {
        "commit", "rollback", "unknown-commit", "commit", "unknown-rollback", "commit", "unknown-unknown-commit",
        "rollback", "commit", "never", "unknown-commit", "commit", "rollback", "unknown-rollback", "commit",
        "unknown-unknown-commit", "commit", "unknown-commit", "rollback", "never", "commit", "unknown-rollback",
        "unknown-commit", "unknown-unknown-commit"};
    static final long API_TIMEOUT_MS = 10_000L;

    final Random rnd = new Random(SEED);
    final Map<String, Object> notes = new LinkedHashMap<>();
    final Map<String, Object> traceTruth = new LinkedHashMap<>();
    final Map<String, Object> snapshot = new LinkedHashMap<>();
    final List<Map<String, Object>> consumedRows = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> txEvents = Collections.synchronizedList(new ArrayList<>());
    final Map<String, AtomicInteger> txChecks = new ConcurrentHashMap<>();
    final Map<String, SendResult> halfSendResults = new ConcurrentHashMap<>();
    final Map<String, Set<String>> succeeded = new ConcurrentHashMap<>();
    final Map<String, String> clientIds = new ConcurrentHashMap<>();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    final List<Map<String, Object>> topicSnapshot = new ArrayList<>();
    final List<Map<String, Object>> groupSnapshotS1 = new ArrayList<>();
    final List<Map<String, Object>> topicSnapshotS1 = new ArrayList<>();
    List<Map<String, Object>> traceMessages = new ArrayList<>();
    Workload wl;
    DefaultMQAdminExt admin;
    MQClientAPIImpl api;
    DefaultMQProducer producer;
    TransactionMQProducer txProducer;
    final Map<String, DefaultMQPushConsumer> consumers = new LinkedHashMap<>();
    Process namesrv;
    Process broker;
    String nsAddr;
    String brokerAddr;
    long s1CopyStartMs = -1;
    long s1CopyEndMs = -1;
    long s1TraceMaxBefore = -1;
    long s1TraceMaxAfter = -1;
    /** The half topic and the committed copies in TopicTraceTx as the broker answered a pull at the read-back. */
    List<Map<String, Object>> halfCopies = new ArrayList<>();
    List<Map<String, Object>> committedCopies = new ArrayList<>();
    /** The trace request id of the consumption running on this thread (set by {@link #REQUEST_ID_HOOK}). */
    static final ThreadLocal<String> TRACE_REQUEST_ID = new ThreadLocal<>();
    /**
     * Registered after the consumer's start, so after the client's ConsumeMessageTraceHookImpl: the trace context it
     * made for this consume request (SubBefore, then SubAfter with the same requestId) is already there. The hooks
     * and the listener run one after the other on the consume thread.
     */
    static final ConsumeMessageHook REQUEST_ID_HOOK = new ConsumeMessageHook() {
        @Override
        public String hookName() {
            return "harness-trace-request-id";
        }

        @Override
        public void consumeMessageBefore(ConsumeMessageContext context) {
            Object t = context.getMqTraceContext();
            TRACE_REQUEST_ID.set(t instanceof TraceContext ? ((TraceContext) t).getRequestId() : null);
        }

        @Override
        public void consumeMessageAfter(ConsumeMessageContext context) {
            TRACE_REQUEST_ID.remove();
        }
    };

    TracesWorkload(Harness h, String variant) {
        super(h);
    }

    /** Usage: {@code java -cp ... rmqharness.TracesWorkload --variant v5-traces --out DIR [--timeout SEC]}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "TracesWorkload", Set.of(VARIANT), TracesWorkload::new);
    }

    static Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(T_NORMAL, 4);
        t.put(T_ORDER, 4);
        t.put(T_TX, 2);
        return t;
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
        // the broker creates RMQ_SYS_TRACE_TOPIC (1 queue, a system topic) at start (TopicConfigManager)
        brokerConf.put("traceTopicEnable", "true");
        brokerConf.put("msgTraceTopicName", TRACE_TOPIC);
        // a half message is first checked once it is older than transactionTimeOut, by the check service that runs
        // every transactionCheckInterval; the copy carrying TRANSACTION_CHECK_TIMES >= transactionCheckMax is
        // discarded into TRANS_CHECK_MAX_TIME_TOPIC instead (TransactionalMessageServiceImpl.needDiscard)
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
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", "clean");
        run.put("scenario", "traces");
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
        api = admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl();
        waitRegistered();
        h.mark("brokerRegistered");
        traceTruth.put("brokerConfigEffective", effectiveBrokerConfig());

        wl = new Workload(h, nsAddr, brokerAddr, rnd);
        wl.admin = admin;
        wl.createTopics(TOPICS);
        for (String g : GROUPS) {
            Compat.createGroup(admin, brokerAddr, g);
            succeeded.put(g, ConcurrentHashMap.newKeySet());
        }
        traceTruth.put("traceTopicRoute", routeOf(TRACE_TOPIC));
        h.mark("topicsCreated");

        startConsumers();
        h.mark("consumersStarted");
        startProducers();
        h.mark("producersStarted");

        produce();
        h.mark("produced");
        sendTransactions();
        h.mark("transactionsSent");
        requireAllAcked();
        hotCopy();
        h.mark("s1Copied");

        waitDelivered();
        h.mark("delivered");
        waitTransactionsSettled();
        h.mark("transactionsSettled");
        waitTraces("beforeShutdown");
        h.mark("tracesRead");

        // every client's shutdown flushes its trace dispatcher (AsyncTraceDispatcher.shutdown: flush, then up to 5 s
        // for its send threads); the consumers first (their offsets), then the producers, each batch at once
        shutdownAll(new ArrayList<>(consumers.values()));
        h.mark("consumersStopped");
        shutdownAll(List.of(producer, txProducer));
        h.mark("producersStopped");
        traceTruth.put("traceTopicAfterShutdown", waitTraceTopicStable());
        h.mark("traceTopicStable");
        traceMessages = readTraceTopic();
        Map<String, Object> finalCoverage = coverage(traceMessages);
        traceTruth.put("coverage", finalCoverage);
        traceTruth.put("discarded", readCheckMaxTopic());
        TxView view = txView();
        halfCopies = view.half;
        committedCopies = view.committed;
        traceTruth.put("transactionCopies", view.summary());
        h.mark("readBack");

        wl.snapshotGroups(GROUPS, true);
        groupSnapshot.addAll(wl.groupSnapshot);
        topicSnapshot.addAll(topicStats(System.currentTimeMillis(), null));
        h.mark("adminSnapshot");
        requireDescribed(finalCoverage, view);
        admin.shutdown();
        Thread.sleep(300);
        Map<String, Object> shutdown = shutdownBroker();
        run.put("shutdown", shutdown);
        h.mark("brokerStopped");
        namesrv.destroyForcibly(); // nothing of the name server is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        traceTruth.put("brokerLog", brokerLogCounts());
        h.mark("end");
    }

    /** Shuts the clients down in parallel and waits for all of them. */
    static void shutdownAll(List<?> clients) throws InterruptedException {
        List<Thread> threads = new ArrayList<>();
        for (Object c : clients) {
            Thread t = new Thread(() -> Workload.shutdownQuietly(c), "shutdown-" + threads.size());
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join(60_000);
        }
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

    /** The broker's effective trace and transaction settings (its own getBrokerConfig answer). */
    Map<String, Object> effectiveBrokerConfig() {
        Map<String, Object> picked = new TreeMap<>();
        try {
            Properties p = admin.getBrokerConfig(brokerAddr);
            for (String k : p.stringPropertyNames()) {
                String lk = k.toLowerCase();
                if (lk.contains("trace") || lk.contains("transaction") || lk.contains("trans") || lk.equals("regionid")
                    || lk.equals("messagedelaylevel")) {
                    picked.put(k, p.getProperty(k));
                }
            }
        } catch (Exception e) {
            picked.put("error", e.toString());
        }
        return picked;
    }

    Object routeOf(String topic) {
        try {
            var route = admin.examineTopicRouteInfo(topic);
            List<Object> queues = new ArrayList<>();
            for (var q : route.getQueueDatas()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("brokerName", q.getBrokerName());
                m.put("readQueueNums", q.getReadQueueNums());
                m.put("writeQueueNums", q.getWriteQueueNums());
                m.put("perm", q.getPerm());
                queues.add(m);
            }
            return Map.of("queueDatas", queues);
        } catch (Exception e) {
            return Map.of("error", e.getClass().getSimpleName() + ": " + firstLine(e.getMessage()));
        }
    }

    // =================================================================== clients

    void startConsumers() throws Exception {
        consumers.put(G_ALL, consumer(G_ALL, "c-trace-all", List.of(T_NORMAL, T_ORDER), false));
        consumers.put(G_RETRY, consumer(G_RETRY, "c-trace-retry", List.of(T_NORMAL), false));
        consumers.put(G_ORDERLY, consumer(G_ORDERLY, "c-trace-orderly", List.of(T_ORDER), true));
        consumers.put(G_TX, consumer(G_TX, "c-trace-tx", List.of(T_TX), false));
        Map<String, Object> dispatchers = new LinkedHashMap<>();
        for (Map.Entry<String, DefaultMQPushConsumer> e : consumers.entrySet()) {
            DefaultMQPushConsumer c = e.getValue();
            clientIds.put(e.getKey(), c.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId());
            Map<String, Object> d = dispatcher(c.getTraceDispatcher());
            d.put("hostClientId", clientIds.get(e.getKey()));
            d.put("hostClientIP", c.getClientIP());
            d.put("traceMsgBatchNum", c.getTraceMsgBatchNum());
            dispatchers.put(e.getKey(), d);
        }
        traceTruth.put("consumerDispatchers", dispatchers);
    }

    DefaultMQPushConsumer consumer(String group, String instance, List<String> topics, boolean orderly)
        throws Exception {
        // enableMsgTrace=true, customizedTraceTopic=null: RMQ_SYS_TRACE_TOPIC (DefaultMQPushConsumer.start creates the
        // AsyncTraceDispatcher and registers ConsumeMessageTraceHookImpl)
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, true, null);
        wl.configureConsumer(c, instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(1);
        c.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
        for (String t : topics) {
            c.subscribe(t, "*");
        }
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                long start = System.currentTimeMillis();
                long end = System.currentTimeMillis();
                for (MessageExt m : msgs) {
                    recordConsumed(group, ctx.getMessageQueue(), m, start, end, "SUCCESS", true);
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                long start = System.currentTimeMillis();
                boolean fail = false;
                if (G_RETRY.equals(group)) {
                    for (MessageExt m : msgs) {
                        String ft = m.getUserProperty("failTimes");
                        fail |= ft != null && m.getReconsumeTimes() < Integer.parseInt(ft);
                    }
                }
                long end = System.currentTimeMillis();
                for (MessageExt m : msgs) {
                    recordConsumed(group, ctx.getMessageQueue(), m, start, end,
                        fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS", !fail);
                }
                return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        c.getDefaultMQPushConsumerImpl().registerConsumeMessageHook(REQUEST_ID_HOOK);
        return c;
    }

    void recordConsumed(String group, MessageQueue mq, MessageExt m, long start, long end, String result,
        boolean success) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", group);
        r.put("topic", m.getTopic());
        r.put("queueTopic", mq.getTopic());
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("msgId", m.getMsgId());
        r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("tags", m.getTags());
        r.put("keys", m.getKeys());
        r.put("reconsumeTimes", m.getReconsumeTimes());
        r.put("storeTimestamp", m.getStoreTimestamp());
        String region = m.getProperty(MessageConst.PROPERTY_MSG_REGION);
        String traceOn = m.getProperty(MessageConst.PROPERTY_TRACE_SWITCH);
        r.put("regionProp", region);
        r.put("traceOnProp", traceOn);
        // ConsumeMessageTraceHookImpl takes the context's region from the message's MSG_REGION, which the broker
        // adds to the send request's properties (AbstractSendMessageProcessor.buildMsgContext): a batch member keeps
        // only its own properties, so its context has no region and AsyncTraceDispatcher drops it (SubBefore and
        // SubAfter); TRACE_ON=false would skip it in the hook itself
        r.put("traceExpected", region != null && !"false".equals(traceOn));
        // the requestId of this consume request's SubBefore and SubAfter contexts: a message delivered twice with the
        // same reconsumeTimes (a transaction committed twice) has two pairs, each consumption its own
        r.put("traceRequestId", TRACE_REQUEST_ID.get());
        r.put("listenerStartMs", start);
        r.put("listenerEndMs", end);
        r.put("result", result);
        r.put("success", success);
        r.put("clientId", clientIds.get(group));
        r.put("clientHost", h.loopback);
        r.put("thread", Thread.currentThread().getName());
        consumedRows.add(r);
        if (success) {
            succeeded.get(group).add(m.getMsgId());
        }
    }

    void startProducers() throws Exception {
        // enableMsgTrace=true, customizedTraceTopic=null (5.5.0 has no (group, boolean) constructor)
        producer = new DefaultMQProducer(PG, true, null);
        wl.configureProducer(producer, "harness-trace-producer");
        producer.setTraceMsgBatchNum(PRODUCER_TRACE_BATCH);
        producer.start();
        wl.producer = producer;

        txProducer = new TransactionMQProducer(PG_TX, null, true, null);
        wl.configureProducer(txProducer, "harness-trace-tx-producer");
        txProducer.setTraceMsgBatchNum(PRODUCER_TRACE_BATCH);
        txProducer.setTransactionListener(new TxListener());
        // TransactionSendResult drops offsetMsgId; a send hook sees the half message's SendResult.
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

        Map<String, Object> dispatchers = new LinkedHashMap<>();
        for (DefaultMQProducer p : List.of(producer, txProducer)) {
            Map<String, Object> d = dispatcher(p.getTraceDispatcher());
            d.put("hostClientId", p.getDefaultMQProducerImpl().getMqClientFactory().getClientId());
            d.put("traceMsgBatchNum", p.getTraceMsgBatchNum());
            dispatchers.put(p.getProducerGroup(), d);
        }
        traceTruth.put("producerDispatchers", dispatchers);
    }

    /** The trace dispatcher of a client: its own (untraced) producer's group, instance and client id. */
    static Map<String, Object> dispatcher(TraceDispatcher td) {
        Map<String, Object> d = new LinkedHashMap<>();
        if (!(td instanceof AsyncTraceDispatcher)) {
            d.put("dispatcher", td == null ? null : td.getClass().getName());
            return d;
        }
        AsyncTraceDispatcher a = (AsyncTraceDispatcher) td;
        DefaultMQProducer tp = a.getTraceProducer();
        d.put("dispatcher", a.getClass().getName());
        d.put("traceTopic", a.getTraceTopicName());
        d.put("accessChannel", String.valueOf(a.getAccessChannel()));
        d.put("traceProducerGroup", tp.getProducerGroup());
        d.put("traceProducerInstanceName", tp.getInstanceName());
        d.put("traceProducerClientIP", tp.getClientIP());
        d.put("traceProducerMaxMessageSize", tp.getMaxMessageSize());
        d.put("traceProducerCompressOver", tp.getCompressMsgBodyOverHowmuch());
        try {
            d.put("traceProducerClientId", tp.getDefaultMQProducerImpl().getMqClientFactory().getClientId());
        } catch (Exception e) {
            d.put("traceProducerClientId", null);
        }
        return d;
    }

    // =================================================================== producing

    void produce() throws Exception {
        // 30 normal sends in a row: the trace dispatcher groups a batch's contexts by topic, so a batch of 20 Pub
        // contexts of one topic makes one body (> 4 KiB with these keys: compressed by the trace producer)
        for (int n = 0; n < N_NORMAL; n++) {
            sendNormal(n);
        }
        for (int b = 0; b < N_BATCHES; b++) {
            sendBatch(b);
        }
        for (String step : ORDER_STEPS) {
            for (int o = 0; o < N_ORDERS; o++) {
                sendOrder(o, step);
            }
        }
        sendDelay();
    }

    Map<String, Object> record(String kind, String topic, Message msg, byte[] body, String bodyKind,
        Map<String, String> props, List<String> keys, String group, String traceType) {
        Map<String, Object> r = wl.newRecord(kind, "main", topic, msg, body, bodyKind, props, keys);
        r.put("producerGroup", group);
        r.put("traceMsgType", traceType);
        return r;
    }

    void finish(Map<String, Object> r, Message msg, SendResult res, long start, Exception error, Integer queue) {
        if (res != null) {
            wl.fillResult(r, msg, res, start, null, null);
            r.put("pubMsgId", res.getMsgId());
            r.put("pubOffsetMsgId", res.getOffsetMsgId());
            r.put("regionId", res.getRegionId());
            r.put("traceOn", res.isTraceOn());
        } else {
            wl.fillError(r, msg, error, start, queue);
            r.put("pubMsgId", null);
            r.put("pubOffsetMsgId", null);
        }
        wl.sent.add(r);
    }

    void sendNormal(int n) {
        byte[] body = wl.body(n % 5 == 4 ? "tiny" : "text-small");
        String tags = TAGS[n % TAGS.length];
        List<String> keys = List.of(String.format("trace-normal-%04d", n), String.format("customer-%05d", n % 7),
            String.format("invoice-2024-%06d", 1000 + n));
        Map<String, String> props = new LinkedHashMap<>();
        props.put("seqNo", String.valueOf(n));
        Integer fail = FAIL_TIMES.get(n);
        if (fail != null) {
            props.put("failTimes", String.valueOf(fail));
        }
        Message msg = wl.buildMessage(T_NORMAL, tags, keys, props, body);
        Map<String, Object> r = record("normal", T_NORMAL, msg, body, "text-small", props, keys, PG, "Normal_Msg");
        r.put("failTimes", fail == null ? 0 : fail);
        long start = System.currentTimeMillis();
        try {
            finish(r, msg, producer.send(msg), start, null, null);
        } catch (Exception e) {
            finish(r, msg, null, start, e, null);
        }
    }

    void sendBatch(int b) {
        List<Message> msgs = new ArrayList<>();
        List<Map<String, Object>> recs = new ArrayList<>();
        for (int i = 0; i < BATCH_SIZE; i++) {
            byte[] body = wl.body("text-small");
            List<String> keys = List.of(String.format("trace-batch-%d-%d", b, i));
            Map<String, String> props = new LinkedHashMap<>();
            props.put("batchId", String.valueOf(b));
            props.put("batchIndex", String.valueOf(i));
            Message msg = wl.buildMessage(T_NORMAL, "batch", keys, props, body);
            Map<String, Object> r = record("batch", T_NORMAL, msg, body, "text-small", props, keys, PG, "Normal_Msg");
            r.put("batch", true);
            r.put("batchId", b);
            r.put("batchIndex", i);
            r.put("compressedByClient", false);
            msgs.add(msg);
            recs.add(r);
        }
        long start = System.currentTimeMillis();
        try {
            SendResult res = producer.send(msgs);
            String[] offIds = res.getOffsetMsgId() == null ? new String[0] : res.getOffsetMsgId().split(",");
            for (int i = 0; i < recs.size(); i++) {
                Map<String, Object> r = recs.get(i);
                finish(r, msgs.get(i), res, start, null, null);
                r.put("offsetMsgId", i < offIds.length ? offIds[i] : null);
                r.put("queueOffset", res.getQueueOffset() + i);
                r.put("batchFirstQueueOffset", res.getQueueOffset());
            }
        } catch (Exception e) {
            for (int i = 0; i < recs.size(); i++) {
                finish(recs.get(i), msgs.get(i), null, start, e, null);
            }
        }
    }

    void sendOrder(int orderId, String step) {
        byte[] body = ("{\"order\":" + orderId + ",\"step\":\"" + step + "\",\"amount\":" + rnd.nextInt(10000) + "}")
            .getBytes(StandardCharsets.UTF_8);
        List<String> keys = List.of(String.format("order-%04d", orderId));
        Map<String, String> props = new LinkedHashMap<>();
        props.put("orderId", String.valueOf(orderId));
        props.put("step", step);
        Message msg = wl.buildMessage(T_ORDER, step, keys, props, body);
        // the Java client never reports Order_Msg: a selector send is traced as Normal_Msg
        Map<String, Object> r = record("orderly", T_ORDER, msg, body, "text-small", props, keys, PG, "Normal_Msg");
        r.put("ordered", true);
        r.put("orderId", orderId);
        long start = System.currentTimeMillis();
        try {
            finish(r, msg, producer.send(msg, Workload.BY_ARG, orderId), start, null, null);
        } catch (Exception e) {
            finish(r, msg, null, start, e, orderId % TOPICS.get(T_ORDER));
        }
    }

    void sendDelay() {
        byte[] body = wl.body("text-small");
        List<String> keys = List.of("trace-delay-0000");
        Map<String, String> props = new LinkedHashMap<>();
        props.put("seqNo", "0");
        Message msg = wl.buildMessage(T_NORMAL, "delay", keys, props, body);
        msg.setDelayTimeLevel(DELAY_LEVEL);
        Map<String, Object> r = record("delay", T_NORMAL, msg, body, "text-small", props, keys, PG, "Delay_Msg");
        r.put("delayLevel", DELAY_LEVEL);
        long start = System.currentTimeMillis();
        try {
            SendResult res = producer.send(msg);
            finish(r, msg, res, start, null, null);
            r.put("storedTopic", TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);
            r.put("storedQueueId", DELAY_LEVEL - 1);
        } catch (Exception e) {
            finish(r, msg, null, start, e, null);
        }
    }

    void sendTransactions() {
        for (int n = 0; n < TX_PLANS.length; n++) {
            String plan = TX_PLANS[n];
            byte[] body = wl.body("text-small");
            List<String> keys = List.of(String.format("trace-tx-%04d", n), "plan-" + plan);
            Map<String, String> props = new LinkedHashMap<>();
            props.put("seqNo", String.valueOf(n));
            props.put("txPlan", plan);
            Message msg = wl.buildMessage(T_TX, "tx", keys, props, body);
            Map<String, Object> r = record("transactional", T_TX, msg, body, "text-small", props, keys, PG_TX,
                "Trans_Msg_Half");
            r.put("txPlan", plan);
            r.put("transaction", plan.endsWith("commit") ? "commit" : plan.equals("never") ? "discard" : "rollback");
            long start = System.currentTimeMillis();
            try {
                TransactionSendResult res = txProducer.sendMessageInTransaction(msg, plan);
                finish(r, msg, res, start, null, null);
                SendResult half = halfSendResults.get(MessageClientIDSetter.getUniqID(msg));
                r.put("storedTopic", HALF_TOPIC);
                r.put("storedQueueId", 0);
                if (half != null) {
                    // TransactionSendResult keeps neither offsetMsgId nor the region / trace switch the broker
                    // answered the half message with
                    r.put("regionId", half.getRegionId());
                    r.put("traceOn", half.isTraceOn());
                    r.put("halfQueueOffset", half.getQueueOffset());
                    r.put("offsetMsgId", half.getOffsetMsgId());
                    r.put("pubOffsetMsgId", half.getOffsetMsgId());
                    r.put("queueOffset", half.getQueueOffset());
                    r.put("halfTransactionId", half.getTransactionId());
                }
                r.put("localTransactionState", res.getLocalTransactionState() == null ? null
                    : res.getLocalTransactionState().name());
                r.put("sendResultTransactionId", res.getTransactionId());
            } catch (Exception e) {
                finish(r, msg, null, start, e, null);
            }
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
            e.put("msgId", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            e.put("transactionId", msg.getTransactionId());
            e.put("plan", plan);
            e.put("checkNo", 0);
            e.put("timeMs", System.currentTimeMillis());
            e.put("state", s.name());
            e.put("fromTransactionCheck", false);
            txEvents.add(e);
            return s;
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            long at = System.currentTimeMillis();
            String id = msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
            String plan = msg.getUserProperty("txPlan");
            int k = txChecks.computeIfAbsent(String.valueOf(id), x -> new AtomicInteger()).incrementAndGet();
            LocalTransactionState s;
            boolean expected = true;
            switch (String.valueOf(plan)) {
                case "unknown-commit":
                    s = LocalTransactionState.COMMIT_MESSAGE;
                    break;
                case "unknown-rollback":
                    s = LocalTransactionState.ROLLBACK_MESSAGE;
                    break;
                case "unknown-unknown-commit":
                    s = k == 1 ? LocalTransactionState.UNKNOW : LocalTransactionState.COMMIT_MESSAGE;
                    break;
                case "never":
                    s = LocalTransactionState.UNKNOW;
                    break;
                case "commit":
                    s = LocalTransactionState.COMMIT_MESSAGE;
                    expected = false;
                    break;
                default:
                    s = LocalTransactionState.ROLLBACK_MESSAGE;
                    expected = false;
                    break;
            }
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("kind", "check");
            e.put("msgId", id);
            e.put("transactionId", msg.getTransactionId());
            e.put("plan", plan);
            e.put("checkNo", k);
            e.put("timeMs", at);
            e.put("state", s.name());
            e.put("fromTransactionCheck", true);
            e.put("checkTimesProperty", msg.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
            e.put("checkedTopic", msg.getTopic());
            e.put("checkedQueueId", msg.getQueueId());
            e.put("checkedOffsetMsgId", msg.getMsgId());
            e.put("checkedHalfQueueOffset", msg.getQueueOffset());
            e.put("checkedCommitLogOffset", msg.getCommitLogOffset());
            e.put("expectedByPlan", expected);
            txEvents.add(e);
            return s;
        }
    }

    // =================================================================== s1

    void hotCopy() throws Exception {
        long before = System.currentTimeMillis();
        topicSnapshotS1.addAll(topicStats(before, "beforeCopy"));
        s1TraceMaxBefore = maxOffset(topicSnapshotS1, TRACE_TOPIC);
        s1CopyStartMs = System.currentTimeMillis();
        Map<String, Object> copy = new StoreCopier(h.store, h.out.resolve("snapshots/s1/store")).copy();
        s1CopyEndMs = System.currentTimeMillis();
        List<Map<String, Object>> after = topicStats(s1CopyEndMs, "afterCopy");
        topicSnapshotS1.addAll(after);
        s1TraceMaxAfter = maxOffset(after, TRACE_TOPIC);
        for (String g : GROUPS) {
            try {
                for (Map<String, Object> row : Compat.consumeStats(admin, g)) {
                    Map<String, Object> full = new LinkedHashMap<>();
                    full.put("group", g);
                    full.putAll(row);
                    full.put("snapshotMs", s1CopyEndMs);
                    groupSnapshotS1.add(full);
                }
            } catch (Exception e) {
                notes.put("consumeStatsS1_" + g, e.getClass().getSimpleName() + ": " + firstLine(e.getMessage()));
            }
        }
        synchronized (txEvents) {
            for (Map<String, Object> e : txEvents) {
                if ("check".equals(e.get("kind")) && ((Number) e.get("timeMs")).longValue() < s1CopyEndMs) {
                    // s1 is the store with every UNKNOW transaction undecided; a slow copy is a failed run
                    throw new Harness.HarnessError("the broker checked " + e.get("msgId") + " before the s1 copy "
                        + "ended (" + e.get("timeMs") + " < " + s1CopyEndMs + ")");
                }
            }
        }
        snapshot.put("snapshot", "s1");
        snapshot.put("path", "snapshots/s1/store");
        snapshot.put("taken", "hot copy right after the transactional sends, before the broker's first check "
            + "(transactionTimeOut " + TX_TIMEOUT_MS + " ms after a half message was born)");
        snapshot.put("topicStatsBeforeMs", before);
        snapshot.put("copyStartMs", s1CopyStartMs);
        snapshot.put("copyEndMs", s1CopyEndMs);
        snapshot.put("traceTopicMaxOffsetBeforeCopy", s1TraceMaxBefore);
        snapshot.put("traceTopicMaxOffsetAfterCopy", s1TraceMaxAfter);
        snapshot.put("copy", copy);
    }

    static long maxOffset(List<Map<String, Object>> rows, String topic) {
        long max = -1;
        for (Map<String, Object> r : rows) {
            if (topic.equals(r.get("topic")) && r.get("maxOffset") != null) {
                max = Math.max(max, ((Number) r.get("maxOffset")).longValue());
            }
        }
        return max;
    }

    /** Topic stats straight from the broker (no name-server route needed): user, system and retry topics. */
    List<Map<String, Object>> topicStats(long at, String when) {
        List<String> names = new ArrayList<>(TOPICS.keySet());
        names.addAll(SYSTEM_TOPICS);
        for (String g : GROUPS) {
            names.add("%RETRY%" + g);
        }
        List<Map<String, Object>> out = new ArrayList<>();
        for (String t : names) {
            try {
                TopicStatsTable table = admin.examineTopicStats(brokerAddr, t);
                List<Map<String, Object>> rows = new ArrayList<>();
                for (Map.Entry<MessageQueue, TopicOffset> e : table.getOffsetTable().entrySet()) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("topic", e.getKey().getTopic());
                    row.put("brokerName", e.getKey().getBrokerName());
                    row.put("queueId", e.getKey().getQueueId());
                    row.put("minOffset", e.getValue().getMinOffset());
                    row.put("maxOffset", e.getValue().getMaxOffset());
                    row.put("lastUpdateTimestamp", e.getValue().getLastUpdateTimestamp());
                    rows.add(row);
                }
                rows.sort(Comparator.comparingInt(m -> (Integer) m.get("queueId")));
                for (Map<String, Object> row : rows) {
                    if (when != null) {
                        row.put("when", when);
                    }
                    row.put("snapshotMs", at);
                    row.put("source", "examineTopicStats(brokerAddr, topic)");
                    out.add(row);
                }
            } catch (Exception e) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("topic", t);
                row.put("error", e.getClass().getSimpleName() + ": " + firstLine(e.getMessage()));
                if (when != null) {
                    row.put("when", when);
                }
                row.put("snapshotMs", at);
                out.add(row);
            }
        }
        return out;
    }

    // =================================================================== what the broker did with the transactions

    /** Every send was acked: a failed one (say, no route while the name server had dropped the broker) is a run the
     *  truth cannot describe (was it stored? traced?), so the variant is generated again. */
    void requireAllAcked() {
        synchronized (wl.sent) {
            for (Map<String, Object> r : wl.sent) {
                if (!Boolean.TRUE.equals(r.get("acked"))) {
                    throw new Harness.HarnessError("send " + r.get("seq") + " (" + r.get("kind") + ", " + r.get("topic")
                        + ") failed: " + firstLine(String.valueOf(r.get("error"))));
                }
            }
        }
    }

    /** The transactional side of the store as the broker answers pulls: half copies, op offsets, committed copies. */
    static final class TxView {
        final List<Map<String, Object>> half = new ArrayList<>();
        final Set<Long> opOffsets = new HashSet<>();
        final List<Map<String, Object>> committed = new ArrayList<>();
        final Set<String> discarded = new HashSet<>();
        int opMessages;

        /** The rows of {@code rows} (half or committed copies) of one message. */
        static List<Map<String, Object>> copiesOf(List<Map<String, Object>> rows, String msgId) {
            List<Map<String, Object>> out = new ArrayList<>();
            for (Map<String, Object> r : rows) {
                if (String.valueOf(msgId).equals(r.get("msgId"))) {
                    out.add(r);
                }
            }
            return out;
        }

        /** Commitlog offsets of the half copies a check put back (they carry TRANSACTION_CHECK_TIMES). */
        Set<Long> recheckedOffsets() {
            Set<Long> out = new HashSet<>();
            for (Map<String, Object> r : half) {
                if (r.get("checkTimes") != null) {
                    out.add(((Number) r.get("commitLogOffset")).longValue());
                }
            }
            return out;
        }

        String signature() {
            return half.size() + "/" + opOffsets.size() + "/" + committed.size() + "/" + discarded.size();
        }

        Map<String, Object> summary() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("halfCopies", half.size());
            m.put("rechecked", recheckedOffsets().size());
            m.put("opMessages", opMessages);
            m.put("opOffsets", opOffsets.size());
            m.put("committedCopies", committed.size());
            m.put("discarded", discarded.size());
            return m;
        }
    }

    static Map<String, Object> copyRow(MessageExt m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("msgId", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("checkTimes", m.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
        r.put("storeTimestamp", m.getStoreTimestamp());
        return r;
    }

    TxView txView() throws Exception {
        TxView v = new TxView();
        for (MessageExt m : pullAll(HALF_TOPIC)) {
            v.half.add(copyRow(m));
        }
        for (MessageExt m : pullAll(OP_HALF_TOPIC)) {
            v.opMessages++;
            byte[] body = m.getBody() == null ? new byte[0] : m.getBody();
            if ((m.getSysFlag() & MessageSysFlag.COMPRESSED_FLAG) != 0) {
                body = CompressorFactory.getCompressor(MessageSysFlag.getCompressionType(m.getSysFlag()))
                    .decompress(body);
            }
            // "<half queue offset>," repeated (TransactionalMessageServiceImpl reads it back the same way)
            for (String token : new String(body, StandardCharsets.UTF_8).split(",")) {
                try {
                    v.opOffsets.add(Long.parseLong(token.trim()));
                } catch (NumberFormatException e) {
                    // not an offset: the broker skips it too
                }
            }
        }
        for (int q = 0; q < TOPICS.get(T_TX); q++) {
            for (MessageExt m : pullAll(T_TX, q)) {
                v.committed.add(copyRow(m));
            }
        }
        v.committed.sort(Comparator.comparingLong(r -> ((Number) r.get("commitLogOffset")).longValue()));
        if (checkMaxTopicMessages() > 0) {
            for (MessageExt m : pullAll(CHECK_MAX_TOPIC)) {
                v.discarded.add(m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            }
        }
        return v;
    }

    /**
     * What still keeps the broker busy with the transactions (null: nothing): a transaction whose latest half copy no
     * op message names and that was not discarded will be checked again; a check the broker made (a re-put half copy)
     * the producer has not answered yet; a committed copy G_TRACE_TX has not consumed yet.
     */
    String unsettled(TxView v) {
        List<String> out = new ArrayList<>();
        for (String id : ackedIds(r -> r.get("txPlan") != null)) {
            Map<String, Object> latest = null;
            for (Map<String, Object> c : TxView.copiesOf(v.half, id)) {
                if (latest == null || ((Number) c.get("queueOffset")).longValue()
                    > ((Number) latest.get("queueOffset")).longValue()) {
                    latest = c;
                }
            }
            if (latest == null) {
                out.add(id + " has no half copy");
            } else if (!v.opOffsets.contains(((Number) latest.get("queueOffset")).longValue())
                && !v.discarded.contains(id)) {
                out.add(id + " open at half offset " + latest.get("queueOffset"));
            }
        }
        Set<Long> answered = new HashSet<>();
        synchronized (txEvents) {
            for (Map<String, Object> e : txEvents) {
                if ("check".equals(e.get("kind"))) {
                    answered.add(((Number) e.get("checkedCommitLogOffset")).longValue());
                }
            }
        }
        Set<Long> rechecked = v.recheckedOffsets();
        if (!rechecked.equals(answered)) {
            Set<Long> unanswered = new HashSet<>(rechecked);
            unanswered.removeAll(answered);
            Set<Long> unknown = new HashSet<>(answered);
            unknown.removeAll(rechecked);
            out.add("checks re-put but not answered " + unanswered + ", answered but not re-put " + unknown);
        }
        Set<Long> consumedTx = new HashSet<>();
        synchronized (consumedRows) {
            for (Map<String, Object> c : consumedRows) {
                if (G_TX.equals(c.get("group")) && Boolean.TRUE.equals(c.get("success"))) {
                    consumedTx.add(((Number) c.get("commitLogOffset")).longValue());
                }
            }
        }
        for (Map<String, Object> c : v.committed) {
            if (!consumedTx.contains(((Number) c.get("commitLogOffset")).longValue())) {
                out.add("committed copy " + c.get("msgId") + "@" + c.get("commitLogOffset") + " not consumed by " + G_TX);
            }
        }
        return out.isEmpty() ? null : out.size() + ": " + String.join("; ", out.subList(0, Math.min(4, out.size())));
    }

    /**
     * Waits until the broker is done with every transaction and has been for a few check intervals: under load a
     * check can race a decision (a check run that read the op queue before the producer's END_TRANSACTION was stored
     * checks the half message again; the producer answers COMMIT again and the broker commits a second copy, which
     * G_TRACE_TX consumes again with reconsumeTimes 0). Such extra checks and copies are what the broker did: the
     * truth records them ({@code txHalfCopies}, {@code txCommittedCopies}, the check events), this only makes sure
     * none is still under way when the store is taken.
     */
    void waitTransactionsSettled() throws Exception {
        long quiet = 4 * TX_CHECK_INTERVAL_MS;
        long end = System.currentTimeMillis() + 90_000;
        String sig = null;
        long since = System.currentTimeMillis();
        String status;
        while (true) {
            TxView v = txView();
            status = unsettled(v);
            int events;
            synchronized (txEvents) {
                events = txEvents.size();
            }
            String now = v.signature() + "/" + events;
            long t = System.currentTimeMillis();
            if (status != null || !now.equals(sig)) {
                sig = now;
                since = t;
            } else if (t - since >= quiet) {
                notes.put("transactionsSettled", v.summary());
                Harness.log("transactions settled: " + v.summary());
                return;
            }
            if (t > end || t > h.deadline) {
                throw new Harness.HarnessError("the broker did not settle the transactions: "
                    + (status == null ? "copies kept changing " + now : status));
            }
            Thread.sleep(300);
        }
    }

    /**
     * After the clients' shutdown and the admin snapshot: what the truth says is all that is in the store. A trace
     * context missing or doubled, a check the broker made after the read-back (or the producer never answered), a
     * transactional copy stored after it: the run is generated again.
     */
    void requireDescribed(Map<String, Object> coverage, TxView v) {
        if (!Boolean.TRUE.equals(coverage.get("complete")) || !((List<?>) coverage.get("extra")).isEmpty()) {
            throw new Harness.HarnessError("trace contexts after the clients' shutdown: " + coverage.get("summary"));
        }
        String status = unsettled(v);
        if (status != null) {
            throw new Harness.HarnessError("transactions unsettled at the read-back: " + status);
        }
        long halfMax = 0;
        long txMax = 0;
        for (Map<String, Object> r : topicSnapshot) {
            if (r.get("maxOffset") == null) {
                continue;
            }
            if (HALF_TOPIC.equals(r.get("topic"))) {
                halfMax += ((Number) r.get("maxOffset")).longValue();
            } else if (T_TX.equals(r.get("topic"))) {
                txMax += ((Number) r.get("maxOffset")).longValue();
            }
        }
        if (halfMax != v.half.size() || txMax != v.committed.size()) {
            throw new Harness.HarnessError("transactional copies stored after the read-back: half " + v.half.size()
                + " read, " + halfMax + " at the end; " + T_TX + " " + v.committed.size() + " read, " + txMax
                + " at the end");
        }
    }

    // =================================================================== waiting

    Set<String> ackedIds(java.util.function.Predicate<Map<String, Object>> which) {
        Set<String> ids = new HashSet<>();
        synchronized (wl.sent) {
            for (Map<String, Object> r : wl.sent) {
                if (Boolean.TRUE.equals(r.get("acked")) && which.test(r)) {
                    ids.add((String) r.get("msgId"));
                }
            }
        }
        return ids;
    }

    long checkMaxTopicMessages() {
        try {
            long n = 0;
            for (TopicOffset o : admin.examineTopicStats(brokerAddr, CHECK_MAX_TOPIC).getOffsetTable().values()) {
                n += o.getMaxOffset();
            }
            return n;
        } catch (Exception e) {
            return 0; // the broker creates the topic at the first discard
        }
    }

    /**
     * Every group got what it should (G_TRACE_RETRY: every TopicTraceNormal message finally succeeded, i.e. after its
     * planned failures), every checked transaction got its final answer and the never-answered ones were checked
     * transactionCheckMax times and discarded.
     */
    void waitDelivered() throws Exception {
        Map<String, Set<String>> want = new LinkedHashMap<>();
        want.put(G_ALL, ackedIds(r -> !T_TX.equals(r.get("topic"))));
        want.put(G_RETRY, ackedIds(r -> T_NORMAL.equals(r.get("topic"))));
        want.put(G_ORDERLY, ackedIds(r -> T_ORDER.equals(r.get("topic"))));
        want.put(G_TX, ackedIds(r -> T_TX.equals(r.get("topic")) && String.valueOf(r.get("txPlan")).endsWith("commit")));
        Set<String> checked = ackedIds(r -> String.valueOf(r.get("txPlan")).startsWith("unknown"));
        Set<String> never = ackedIds(r -> "never".equals(r.get("txPlan")));
        long end = System.currentTimeMillis() + 120_000;
        String status;
        while (true) {
            StringBuilder sb = new StringBuilder();
            boolean done = true;
            for (Map.Entry<String, Set<String>> e : want.entrySet()) {
                long got = e.getValue().stream().filter(succeeded.get(e.getKey())::contains).count();
                sb.append(e.getKey()).append(' ').append(got).append('/').append(e.getValue().size()).append(", ");
                done &= got >= e.getValue().size();
            }
            long decided = checked.stream().filter(this::finallyDecided).count();
            long neverChecked = never.stream().filter(id -> txChecks.containsKey(id)
                && txChecks.get(id).get() >= TX_CHECK_MAX).count();
            long discarded = checkMaxTopicMessages();
            sb.append(String.format("checked and decided %d/%d, never-answered checked %dx %d/%d, %s %d/%d",
                decided, checked.size(), TX_CHECK_MAX, neverChecked, never.size(), CHECK_MAX_TOPIC, discarded,
                never.size()));
            status = sb.toString();
            done &= decided >= checked.size() && neverChecked >= never.size() && discarded >= never.size();
            if (done) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("delivery and transaction checks did not complete: " + status);
            }
            Thread.sleep(300);
        }
        Harness.log("delivered: " + status);
        notes.put("deliveryStatus", status);
    }

    boolean finallyDecided(String msgId) {
        synchronized (txEvents) {
            return txEvents.stream().anyMatch(e -> msgId.equals(e.get("msgId")) && "check".equals(e.get("kind"))
                && !"UNKNOW".equals(e.get("state")));
        }
    }

    /** Waits until the trace topic holds a context for every send, consumption and transaction decision so far. */
    void waitTraces(String what) throws Exception {
        long end = System.currentTimeMillis() + 60_000;
        Map<String, Object> cov;
        while (true) {
            cov = coverage(readTraceTopic());
            if (Boolean.TRUE.equals(cov.get("complete"))) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("trace contexts missing from " + TRACE_TOPIC + " (" + what + "): "
                    + cov.get("summary"));
            }
            Thread.sleep(1000);
        }
        Harness.log("trace contexts complete (" + what + "): " + cov.get("summary"));
        notes.put("traceCoverage_" + what, cov.get("summary"));
    }

    /** Waits until the trace topic's max offset is the same in two reads 1.5 s apart (after the clients' shutdown). */
    Map<String, Object> waitTraceTopicStable() throws Exception {
        List<Long> seen = new ArrayList<>();
        long prev = -2;
        long end = System.currentTimeMillis() + 30_000;
        while (true) {
            long cur = maxOffset(topicStats(System.currentTimeMillis(), null), TRACE_TOPIC);
            seen.add(cur);
            if (cur == prev) {
                break;
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("trace topic max offset kept moving: " + seen);
            }
            prev = cur;
            Thread.sleep(1500);
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("maxOffsets", seen);
        r.put("stableAtMs", System.currentTimeMillis());
        return r;
    }

    // =================================================================== read-back

    /**
     * Every message of queue 0 of {@code topic}, pulled straight from the broker; bodies as stored (compressed ones
     * too: the client's decoder would clear COMPRESSED_FLAG when it decompresses).
     */
    List<MessageExt> pullAll(String topic) throws Exception {
        return pullAll(topic, 0);
    }

    List<MessageExt> pullAll(String topic, int queueId) throws Exception {
        List<MessageExt> all = new ArrayList<>();
        long offset = 0;
        for (int round = 0; round < 10_000; round++) {
            PullMessageRequestHeader hdr = new PullMessageRequestHeader();
            hdr.setConsumerGroup(G_READER);
            hdr.setTopic(topic);
            hdr.setQueueId(queueId);
            hdr.setQueueOffset(offset);
            hdr.setMaxMsgNums(32);
            hdr.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
            hdr.setCommitOffset(0L);
            hdr.setSuspendTimeoutMillis(0L);
            hdr.setSubscription("*");
            hdr.setSubVersion(0L);
            hdr.setExpressionType("TAG");
            hdr.setBrokerName(Harness.BROKER_NAME);
            PullResult pr = api.pullMessage(brokerAddr, hdr, API_TIMEOUT_MS, CommunicationMode.SYNC, null);
            if (pr.getPullStatus() != PullStatus.FOUND) {
                break;
            }
            List<MessageExt> found = MessageDecoder.decodesBatch(ByteBuffer.wrap(((PullResultExt) pr)
                .getMessageBinary()), true, false, true);
            if (found.isEmpty()) {
                break;
            }
            all.addAll(found);
            offset = pr.getNextBeginOffset();
        }
        return all;
    }

    List<Map<String, Object>> readTraceTopic() throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (MessageExt m : pullAll(TRACE_TOPIC)) {
            byte[] stored = m.getBody() == null ? new byte[0] : m.getBody();
            boolean compressed = (m.getSysFlag() & MessageSysFlag.COMPRESSED_FLAG) != 0;
            CompressionType codec = compressed ? MessageSysFlag.getCompressionType(m.getSysFlag()) : null;
            byte[] body = codec == null ? stored : CompressorFactory.getCompressor(codec).decompress(stored);
            String text = new String(body, StandardCharsets.UTF_8);
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("topic", m.getTopic());
            r.put("queueId", m.getQueueId());
            r.put("queueOffset", m.getQueueOffset());
            r.put("msgId", m.getMsgId());
            r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
            r.put("commitLogOffset", m.getCommitLogOffset());
            r.put("storeSize", m.getStoreSize());
            r.put("sysFlag", m.getSysFlag());
            r.put("compressed", compressed);
            r.put("compressionType", codec == null ? null : codec.name());
            r.put("storedBodyLength", stored.length);
            r.put("bornHost", String.valueOf(m.getBornHost()));
            r.put("bornTimestamp", m.getBornTimestamp());
            r.put("storeTimestamp", m.getStoreTimestamp());
            r.put("keys", m.getKeys());
            r.put("bodyLength", body.length);
            r.put("bodySha256", Workload.sha256(body));
            List<Map<String, Object>> ctxs = new ArrayList<>();
            for (TraceContext c : TraceDataEncoder.decoderFromTraceDataString(text)) {
                ctxs.add(context(c));
            }
            r.put("contexts", ctxs);
            r.put("decoder", "TraceDataEncoder.decoderFromTraceDataString (client 5.5.0)");
            rows.add(r);
        }
        return rows;
    }

    /** One context as the Java decoder read it: only the fields its type carries (text "null" kept as text). */
    static Map<String, Object> context(TraceContext c) {
        Map<String, Object> m = new LinkedHashMap<>();
        String type = c.getTraceType() == null ? null : c.getTraceType().name();
        m.put("type", type);
        TraceBean b = c.getTraceBeans() == null || c.getTraceBeans().isEmpty() ? null : c.getTraceBeans().get(0);
        switch (String.valueOf(type)) {
            case "Pub":
                m.put("timeStamp", c.getTimeStamp());
                m.put("regionId", c.getRegionId());
                m.put("groupName", c.getGroupName());
                m.put("topic", b.getTopic());
                m.put("msgId", b.getMsgId());
                m.put("tags", b.getTags());
                m.put("keys", b.getKeys());
                m.put("storeHost", b.getStoreHost());
                m.put("bodyLength", b.getBodyLength());
                m.put("costTime", c.getCostTime());
                m.put("msgType", String.valueOf(b.getMsgType()));
                m.put("offsetMsgId", b.getOffsetMsgId());
                m.put("success", c.isSuccess());
                break;
            case "SubBefore":
                m.put("timeStamp", c.getTimeStamp());
                m.put("regionId", c.getRegionId());
                m.put("groupName", c.getGroupName());
                m.put("requestId", c.getRequestId());
                m.put("msgId", b.getMsgId());
                m.put("retryTimes", b.getRetryTimes());
                m.put("keys", b.getKeys());
                break;
            case "SubAfter":
                m.put("requestId", c.getRequestId());
                m.put("msgId", b.getMsgId());
                m.put("costTime", c.getCostTime());
                m.put("success", c.isSuccess());
                m.put("keys", b.getKeys());
                m.put("contextCode", c.getContextCode());
                m.put("timeStamp", c.getTimeStamp());
                m.put("groupName", c.getGroupName());
                break;
            case "EndTransaction":
                m.put("timeStamp", c.getTimeStamp());
                m.put("regionId", c.getRegionId());
                m.put("groupName", c.getGroupName());
                m.put("topic", b.getTopic());
                m.put("msgId", b.getMsgId());
                m.put("tags", b.getTags());
                m.put("keys", b.getKeys());
                m.put("storeHost", b.getStoreHost());
                m.put("msgType", String.valueOf(b.getMsgType()));
                m.put("transactionId", b.getTransactionId());
                m.put("transactionState", String.valueOf(b.getTransactionState()));
                m.put("fromTransactionCheck", b.isFromTransactionCheck());
                break;
            default:
                m.put("timeStamp", c.getTimeStamp());
                m.put("groupName", c.getGroupName());
                m.put("msgId", b == null ? null : b.getMsgId());
                break;
        }
        return m;
    }

    /**
     * What the trace topic holds against what happened: a Pub per send (batch: the joined msgIds), a SubBefore and a
     * SubAfter per consumption (group, msgId, retry times / success), an EndTransaction per decision (msgId, state,
     * fromTransactionCheck); counted as multisets, so duplicates and missing ones both show.
     */
    Map<String, Object> coverage(List<Map<String, Object>> traceRows) {
        Map<String, Integer> found = new TreeMap<>();
        Map<String, Integer> typeCounts = new TreeMap<>();
        for (Map<String, Object> row : traceRows) {
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> ctxs = (List<Map<String, Object>>) row.get("contexts");
            for (Map<String, Object> c : ctxs) {
                String type = String.valueOf(c.get("type"));
                typeCounts.merge(type, 1, Integer::sum);
                String key;
                switch (type) {
                    case "Pub":
                        key = "Pub|" + c.get("groupName") + "|" + c.get("msgId");
                        break;
                    case "SubBefore":
                        key = "SubBefore|" + c.get("groupName") + "|" + c.get("msgId") + "|" + c.get("retryTimes");
                        break;
                    case "SubAfter":
                        key = "SubAfter|" + c.get("groupName") + "|" + c.get("msgId") + "|" + c.get("success");
                        break;
                    case "EndTransaction":
                        key = "EndTransaction|" + c.get("groupName") + "|" + c.get("msgId") + "|"
                            + c.get("transactionState") + "|" + c.get("fromTransactionCheck");
                        break;
                    default:
                        key = type + "|" + c.get("msgId");
                }
                found.merge(key, 1, Integer::sum);
            }
        }
        Map<String, Integer> expected = new TreeMap<>();
        Set<String> pubs = new HashSet<>();
        synchronized (wl.sent) {
            for (Map<String, Object> r : wl.sent) {
                if (Boolean.TRUE.equals(r.get("acked")) && pubs.add(r.get("producerGroup") + "|" + r.get("pubMsgId"))) {
                    expected.merge("Pub|" + r.get("producerGroup") + "|" + r.get("pubMsgId"), 1, Integer::sum);
                }
            }
        }
        int untraced = 0;
        synchronized (consumedRows) {
            for (Map<String, Object> r : consumedRows) {
                if (!Boolean.TRUE.equals(r.get("traceExpected"))) {
                    untraced++;
                    continue;
                }
                expected.merge("SubBefore|" + r.get("group") + "|" + r.get("msgId") + "|" + r.get("reconsumeTimes"), 1,
                    Integer::sum);
                expected.merge("SubAfter|" + r.get("group") + "|" + r.get("msgId") + "|" + r.get("success"), 1,
                    Integer::sum);
            }
        }
        synchronized (txEvents) {
            for (Map<String, Object> e : txEvents) {
                expected.merge("EndTransaction|" + PG_TX + "|" + e.get("msgId") + "|" + e.get("state") + "|"
                    + e.get("fromTransactionCheck"), 1, Integer::sum);
            }
        }
        List<String> missing = new ArrayList<>();
        List<String> extra = new ArrayList<>();
        for (Map.Entry<String, Integer> e : expected.entrySet()) {
            int f = found.getOrDefault(e.getKey(), 0);
            if (f < e.getValue()) {
                missing.add(e.getKey() + " x" + (e.getValue() - f));
            }
        }
        for (Map.Entry<String, Integer> e : found.entrySet()) {
            int x = expected.getOrDefault(e.getKey(), 0);
            if (e.getValue() > x) {
                extra.add(e.getKey() + " x" + (e.getValue() - x));
            }
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("traceMessages", traceRows.size());
        r.put("contextsByType", typeCounts);
        r.put("expectedContexts", expected.values().stream().mapToInt(Integer::intValue).sum());
        r.put("consumptionsWithoutTrace", untraced);
        r.put("missing", missing);
        r.put("extra", extra);
        r.put("complete", missing.isEmpty());
        r.put("summary", traceRows.size() + " trace messages, contexts " + typeCounts + ", missing " + missing.size()
            + (missing.isEmpty() ? "" : " e.g. " + missing.get(0)) + ", extra " + extra.size());
        return r;
    }

    /** The discarded half messages as the broker stored them in TRANS_CHECK_MAX_TIME_TOPIC. */
    List<Map<String, Object>> readCheckMaxTopic() throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (MessageExt m : pullAll(CHECK_MAX_TOPIC)) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("queueOffset", m.getQueueOffset());
            r.put("msgId", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
            r.put("commitLogOffset", m.getCommitLogOffset());
            r.put("sysFlag", m.getSysFlag());
            r.put("realTopic", m.getProperty(MessageConst.PROPERTY_REAL_TOPIC));
            r.put("checkTimesProperty", m.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
            r.put("txPlan", m.getUserProperty("txPlan"));
            r.put("storeTimestamp", m.getStoreTimestamp());
            rows.add(r);
        }
        return rows;
    }

    /** Lines of logs/broker.log (after the broker stopped) that show the check service's work. */
    Map<String, Object> brokerLogCounts() {
        Map<String, Object> r = new LinkedHashMap<>();
        try {
            List<String> lines = Files.readAllLines(h.logs.resolve("broker.log"), StandardCharsets.UTF_8);
            r.put("checkTransaction", lines.stream().filter(l -> l.contains("Check transaction. real_topic=")).count());
            r.put("checkedTooManyTimes", lines.stream().filter(l -> l.contains("has been checked too many times"))
                .count());
        } catch (Exception e) {
            r.put("error", e.toString());
        }
        return r;
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

    static String firstLine(String s) {
        if (s == null) {
            return "";
        }
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    // =================================================================== truth

    @Override
    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> events;
        synchronized (txEvents) {
            events = new ArrayList<>(txEvents);
        }
        events.sort(Comparator.comparingLong((Map<String, Object> e) -> ((Number) e.get("timeMs")).longValue()));
        for (int i = 0; i < events.size(); i++) {
            Map<String, Object> e = events.get(i);
            e.put("seq", i);
            e.put("snapshot", snapshotOf(((Number) e.get("timeMs")).longValue()));
        }
        List<Map<String, Object>> msgs = wl == null ? new ArrayList<>() : new ArrayList<>(wl.sent);
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        for (Map<String, Object> r : msgs) {
            Object id = r.get("offsetMsgId");
            r.put("commitLogOffset", id == null ? null : Long.parseUnsignedLong(
                ((String) id).substring(((String) id).length() - 16), 16));
            boolean acked = Boolean.TRUE.equals(r.get("acked"));
            r.put("snapshot", !acked ? null : snapshotOf(((Number) r.get("sendEndMs")).longValue()));
            if (r.get("txPlan") != null) {
                txSummary(r, events);
            }
        }
        Harness.writeJsonLines(h.truth.resolve("messages.jsonl"), msgs);
        List<Map<String, Object>> cons;
        synchronized (consumedRows) {
            cons = new ArrayList<>(consumedRows);
        }
        cons.sort(Comparator.comparingLong((Map<String, Object> m) -> ((Number) m.get("listenerStartMs")).longValue())
            .thenComparing(m -> (String) m.get("group")));
        for (Map<String, Object> c : cons) {
            c.put("snapshot", snapshotOf(((Number) c.get("listenerEndMs")).longValue()));
        }
        Harness.writeJsonLines(h.truth.resolve("consumed.jsonl"), cons);
        Harness.writeJsonLines(h.truth.resolve("transactions.jsonl"), events);
        for (Map<String, Object> t : traceMessages) {
            long q = ((Number) t.get("queueOffset")).longValue();
            t.put("inS1", q < s1TraceMaxBefore);
            t.put("maybeInS1", q >= s1TraceMaxBefore && q < s1TraceMaxAfter);
        }
        Harness.writeJsonLines(h.truth.resolve("trace_messages.jsonl"), traceMessages);
        Harness.writeJsonLines(h.truth.resolve("consumer_groups.jsonl"), groupSnapshot);
        Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), topicSnapshot);
        Harness.writeJsonLines(h.truth.resolve("consumer_groups_s1.jsonl"), groupSnapshotS1);
        Harness.writeJsonLines(h.truth.resolve("topic_stats_s1.jsonl"), topicSnapshotS1);
        if (!snapshot.isEmpty()) {
            List<String> undecided = new ArrayList<>();
            for (Map<String, Object> r : msgs) {
                if (Boolean.TRUE.equals(r.get("txUndecidedAtS1"))) {
                    undecided.add((String) r.get("msgId"));
                }
            }
            snapshot.put("undecidedTransactions", undecided);
            snapshot.put("sendsAckedBeforeCopy", msgs.stream().filter(r -> "s1".equals(r.get("snapshot"))).count());
            snapshot.put("consumptionsBeforeCopy", cons.stream().filter(r -> "s1".equals(r.get("snapshot"))).count());
            snapshot.put("checksBeforeCopyEnd", events.stream().filter(e -> "check".equals(e.get("kind"))
                && ((Number) e.get("timeMs")).longValue() < s1CopyEndMs).count());
            Harness.writeJson(h.truth.resolve("snapshots.json"), List.of(snapshot));
        }

        traceTruth.put("traceTopic", TRACE_TOPIC);
        traceTruth.put("traceTopicQueues", 1);
        Map<String, Object> disp = new LinkedHashMap<>();
        disp.put("class", "org.apache.rocketmq.client.trace.AsyncTraceDispatcher");
        disp.put("maxContextsPerBody", "min(traceMsgBatchNum, 20)");
        disp.put("maxMsgSize", 128000);
        disp.put("flushTraceIntervalMs", 5000);
        disp.put("queueCapacity", 2048);
        disp.put("bodiesPerTopic", "one body per (user topic, trace topic) of a batch");
        traceTruth.put("dispatcher", disp);
        Map<String, Object> tx = new LinkedHashMap<>();
        tx.put("transactionTimeOutMs", TX_TIMEOUT_MS);
        tx.put("transactionCheckIntervalMs", TX_CHECK_INTERVAL_MS);
        tx.put("transactionCheckMax", TX_CHECK_MAX);
        tx.put("plans", List.of(TX_PLANS));
        traceTruth.put("transactions", tx);
        traceTruth.put("timingsMs", h.timings);
        Harness.writeJson(h.truth.resolve("traces.json"), traceTruth);

        run.put("topics", TOPICS);
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(PG, "traced producer: " + N_NORMAL + " sync sends (tags, 3 keys) to " + T_NORMAL + ", " + N_BATCHES
            + " batches of " + BATCH_SIZE + ", " + N_ORDERS * ORDER_STEPS.length + " orderly sends to " + T_ORDER
            + " (selector by order id), 1 delay message (level " + DELAY_LEVEL + ")");
        groups.put(PG_TX, "traced TransactionMQProducer: " + TX_PLANS.length + " transactional sends to " + T_TX);
        groups.put(G_ALL, "traced push consumer, concurrently, " + T_NORMAL + " + " + T_ORDER + ", always succeeds");
        groups.put(G_RETRY, "traced push consumer, concurrently, " + T_NORMAL + ", RECONSUME_LATER while reconsumeTimes "
            + "< failTimes (" + FAIL_TIMES.size() + " messages), maxReconsumeTimes " + MAX_RECONSUME_TIMES);
        groups.put(G_ORDERLY, "traced push consumer, MessageListenerOrderly, " + T_ORDER);
        groups.put(G_TX, "traced push consumer, concurrently, " + T_TX + " (the committed transactions)");
        groups.put(G_READER, "PULL_MESSAGE of " + TRACE_TOPIC + " and " + CHECK_MAX_TOPIC + " by the driver, "
            + "nothing committed, not traced");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", Workload.COMPRESS_OVER);
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        client.put("enableMsgTrace", true);
        client.put("producerTraceMsgBatchNum", PRODUCER_TRACE_BATCH);
        client.put("maxReconsumeTimes", MAX_RECONSUME_TIMES);
        run.put("client", client);
        if (wl != null) {
            run.put("counts", wl.counts(msgs, new ArrayList<>()));
        }
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }

    /** "s1" for something that ended before the s1 copy started, else "final". */
    String snapshotOf(long ms) {
        return s1CopyStartMs > 0 && ms < s1CopyStartMs ? "s1" : "final";
    }

    /** Per transactional send: its local decision, every check answer, the outcome and its state at s1. */
    void txSummary(Map<String, Object> r, List<Map<String, Object>> events) {
        String id = (String) r.get("msgId");
        List<String> answers = new ArrayList<>();
        String local = null;
        String transactionId = null;
        Long decidedMs = null;
        String outcome = null;
        for (Map<String, Object> e : events) {
            if (!String.valueOf(id).equals(e.get("msgId"))) {
                continue;
            }
            String state = (String) e.get("state");
            if ("local".equals(e.get("kind"))) {
                local = state;
                transactionId = (String) e.get("transactionId");
            } else {
                answers.add(state);
            }
            if (decidedMs == null && !"UNKNOW".equals(state)) {
                decidedMs = ((Number) e.get("timeMs")).longValue();
                outcome = "COMMIT_MESSAGE".equals(state) ? "commit" : "rollback";
            }
        }
        List<Map<String, Object>> discarded = discardedRows();
        boolean isDiscarded = discarded.stream().anyMatch(d -> String.valueOf(id).equals(d.get("msgId")));
        r.put("txTransactionId", transactionId);
        r.put("txLocalState", local);
        r.put("txCheckAnswers", answers);
        r.put("txCheckCount", answers.size());
        r.put("txOutcome", isDiscarded ? "discarded" : outcome);
        r.put("txDecidedMs", decidedMs);
        r.put("txUndecidedAtS1", s1CopyStartMs > 0 && (decidedMs == null || decidedMs >= s1CopyStartMs));
        // what the broker stored for it (read back before the shutdown): the half message and every copy a check put
        // back, and each committed copy in TopicTraceTx (more than one when a check raced a commit)
        r.put("txHalfCopies", truthCopiesOf(halfCopies, id));
        r.put("txCommittedCopies", truthCopiesOf(committedCopies, id));
    }

    static List<Map<String, Object>> truthCopiesOf(List<Map<String, Object>> rows, String msgId) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Map<String, Object> row : TxView.copiesOf(rows, msgId)) {
            Map<String, Object> c = new LinkedHashMap<>(row);
            c.remove("msgId");
            out.add(c);
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    List<Map<String, Object>> discardedRows() {
        Object d = traceTruth.get("discarded");
        return d instanceof List ? (List<Map<String, Object>>) d : List.of();
    }
}
