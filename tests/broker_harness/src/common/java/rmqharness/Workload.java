package rmqharness;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.hook.SendMessageContext;
import org.apache.rocketmq.client.hook.SendMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The workload: topics, producers, consumer groups, waiting for delivery, the admin snapshot
 * and (killed variants) the in-flight tail. Uses only client APIs present in 4.9.x and 5.x;
 * everything whose class moved between the lines goes through {@link Compat}.
 */
final class Workload {
    // ---- topics (name -> queue count)
    static final String T_NORMAL = "TopicNormal";
    static final String T_BULK = "TopicBulk";
    static final String T_ORDER = "TopicOrder";
    static final String T_DELAY = "TopicDelay";
    static final String T_TX = "TopicTx";
    static final String T_BATCH = "TopicBatch";
    static final String T_TIMER = "TopicTimer";
    static final String T_EMPTY = "TopicEmpty";

    // ---- groups
    static final String G_ALL = "G_ALL";
    static final String G_ORDERLY = "G_ORDERLY";
    static final String G_HALF = "G_HALF";
    static final String G_IDLE = "G_IDLE";
    static final String G_FAIL = "G_FAIL";
    static final String G_NOOFFSET = "G_NOOFFSET";
    static final List<String> HALF_TOPICS = List.of(T_NORMAL, T_BULK, T_EMPTY);
    static final List<String> GROUPS = List.of(G_ALL, G_ORDERLY, G_HALF, G_IDLE, G_FAIL, G_NOOFFSET);

    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";
    static final String HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC";
    static final String TIMER_TOPIC = "rmq_sys_wheel_timer";

    static final int COMPRESS_OVER = 4096;
    static final int MAX_RECONSUME_TIMES = 2;

    // ---- volumes
    static final int N_NORMAL = 480;
    static final int N_BULK = 1400;
    static final int N_ORDERS = 60;
    static final String[] ORDER_STEPS = {"create", "pay", "ship", "done"};
    static final int N_DELAYED = 80;
    static final int[] DELAY_LEVELS_USED = {1, 2, 3, 4};
    static final int N_TX = 60;
    static final int N_BATCHES = 30;
    static final int BATCH_SIZE = 10;
    static final int N_TIMER = 20;
    static final int N_EMPTY = 20;
    static final int FAIL_EVERY = 20;

    static final String[] CITIES = {"北京", "東京", "Zürich", "São Paulo", "Москва", "Paris"};
    static final String[] NORMAL_TAGS = {"TagA", "TagB", "TagC", "标签", null};
    static final String[] WORDS = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
        "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec",
        "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "0", "42",
        "1337", "{", "}", ":", ","};
    static final String[] BODY_KINDS = {"tiny", "text-small", "text-medium", "text-4095", "text-4096",
        "text-large", "binary-small", "binary-large", "text-utf8"};

    final Harness h;
    final String nsAddr;
    final String brokerAddr;
    final Random rnd;

    final List<Map<String, Object>> sent = Collections.synchronizedList(new ArrayList<>());
    final List<Map<String, Object>> consumed = Collections.synchronizedList(new ArrayList<>());
    final Map<String, Set<String>> positions = new ConcurrentHashMap<>();
    final Map<String, AtomicInteger> txChecks = new ConcurrentHashMap<>();
    final Map<String, SendResult> halfSendResults = new ConcurrentHashMap<>();
    final AtomicInteger seq = new AtomicInteger();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    final List<Map<String, Object>> topicSnapshot = new ArrayList<>();
    final Map<String, Object> notes = new LinkedHashMap<>();

    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    TransactionMQProducer txProducer;
    DefaultMQPushConsumer cAll;
    DefaultMQPushConsumer cOrderly;
    DefaultMQPushConsumer cFail;
    DefaultMQPullConsumer cIdle;
    DefaultMQPullConsumer cNoOffset;
    DefaultMQPullConsumer cHalf;
    long halfCommittedMs;

    Workload(Harness h, String nsAddr, String brokerAddr, Random rnd) {
        this.h = h;
        this.nsAddr = nsAddr;
        this.brokerAddr = brokerAddr;
        this.rnd = rnd;
        for (String g : GROUPS) {
            positions.put(g, ConcurrentHashMap.newKeySet());
        }
    }

    static Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(T_NORMAL, 4);
        t.put(T_BULK, 2);
        t.put(T_ORDER, 4);
        t.put(T_DELAY, 2);
        t.put(T_TX, 2);
        t.put(T_BATCH, 2);
        t.put(T_EMPTY, 2);
        if (Compat.supportsTimer()) {
            t.put(T_TIMER, 1);
        }
        return t;
    }

    /**
     * Topics the push consumer G_ALL subscribes to: all but TopicEmpty. Empty bodies make the 4.9.7
     * push consumer throw a NullPointerException in ProcessQueue.putMessage and stall that queue, so
     * they live in their own topic, read only by the pull consumer G_HALF.
     */
    static List<String> pushTopics() {
        List<String> l = new ArrayList<>(topics().keySet());
        l.remove(T_EMPTY);
        return l;
    }

    // =================================================================== main flow

    void run(Map<String, Object> run) throws Exception {
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(h.loopback);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        createTopics();
        h.mark("topicsCreated");

        startConsumers();
        h.mark("consumersStarted");

        producer = new DefaultMQProducer("PG_MAIN");
        configureProducer(producer, "harness-producer");
        producer.start();
        txProducer = new TransactionMQProducer("PG_TX");
        configureProducer(txProducer, "harness-tx-producer");
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

        produceMain();
        h.mark("mainProduced");

        waitForDelivery();
        h.mark("delivered");

        consumeHalf();
        h.mark("halfConsumed");

        if (!h.killedMode) {
            // Push consumers persist their offsets on shutdown (oneway in 4.9, so give the broker a moment).
            shutdownQuietly(cAll);
            shutdownQuietly(cOrderly);
            shutdownQuietly(cFail);
            shutdownQuietly(cHalf);
            Thread.sleep(1500);
            h.mark("pushConsumersStopped");
            snapshotGroups(true);
            h.mark("groupsSnapshot");
            snapshotTopics();
            h.mark("topicsSnapshot");
            shutdownQuietly(cIdle);
            shutdownQuietly(cNoOffset);
            producer.shutdown();
            txProducer.shutdown();
            admin.shutdown();
            Thread.sleep(500);
            run.put("shutdown", h.shutdownBrokerCleanly());
            h.mark("brokerStopped");
        } else {
            snapshotTopics();
            h.mark("topicsSnapshot");
            waitForConfigPersisted();
            h.mark("configPersisted");
            run.put("kill", tailAndKill());
            h.mark("brokerKilled");
            for (Object c : new Object[] {cAll, cOrderly, cFail, cIdle, cNoOffset, cHalf}) {
                shutdownInBackground(c);
            }
            run.put("shutdown", h.afterKill());
            h.mark("afterKill");
        }
    }

    void configureProducer(DefaultMQProducer p, String instance) {
        p.setNamesrvAddr(nsAddr);
        p.setClientIP(h.loopback);
        p.setInstanceName(instance);
        p.setVipChannelEnabled(false);
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(0);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.setRetryAnotherBrokerWhenNotStoreOK(false);
        p.setCompressMsgBodyOverHowmuch(COMPRESS_OVER);
        p.setPollNameServerInterval(1000);
    }

    void createTopics() throws Exception {
        createTopics(topics());
    }

    /** Creates the topics (name -> queue count) on the broker and waits until the name server routes them. */
    void createTopics(Map<String, Integer> wanted) throws Exception {
        for (Map.Entry<String, Integer> e : wanted.entrySet()) {
            TopicConfig tc = new TopicConfig(e.getKey());
            tc.setReadQueueNums(e.getValue());
            tc.setWriteQueueNums(e.getValue());
            tc.setPerm(6);
            if (e.getKey().equals(T_ORDER)) {
                tc.setOrder(false);
            }
            admin.createAndUpdateTopicConfig(brokerAddr, tc);
        }
        // wait until the name server routes every topic
        for (String t : wanted.keySet()) {
            long end = System.currentTimeMillis() + 30000;
            while (true) {
                try {
                    admin.examineTopicRouteInfo(t);
                    break;
                } catch (Exception ex) {
                    if (System.currentTimeMillis() > end) {
                        throw new Harness.HarnessError("no route for topic " + t + ": " + ex);
                    }
                    Thread.sleep(200);
                }
            }
        }
    }

    // =================================================================== consumers

    void configureConsumer(org.apache.rocketmq.client.ClientConfig c, String instance) {
        c.setNamesrvAddr(nsAddr);
        c.setClientIP(h.loopback);
        c.setInstanceName(instance);
        c.setVipChannelEnabled(false);
        c.setPersistConsumerOffsetInterval(2000);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(5000);
    }

    void startConsumers() throws Exception {
        // G_ALL: consumes every user topic, always succeeds.
        cAll = new DefaultMQPushConsumer(G_ALL);
        configureConsumer(cAll, "c-all");
        cAll.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String t : pushTopics()) {
            cAll.subscribe(t, "*");
        }
        cAll.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                recordConsumed(G_ALL, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cAll.start();

        // G_ORDERLY: orderly listener on the ordered topic.
        cOrderly = new DefaultMQPushConsumer(G_ORDERLY);
        configureConsumer(cOrderly, "c-orderly");
        cOrderly.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        cOrderly.subscribe(T_ORDER, "*");
        cOrderly.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                recordConsumed(G_ORDERLY, ctx.getMessageQueue(), m, "SUCCESS");
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        cOrderly.start();

        // G_FAIL: fails messages carrying failPlan=dlq every time -> %RETRY%G_FAIL -> %DLQ%G_FAIL.
        cFail = new DefaultMQPushConsumer(G_FAIL);
        configureConsumer(cFail, "c-fail");
        cFail.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        cFail.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
        cFail.subscribe(T_NORMAL, "*");
        cFail.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            boolean fail = false;
            for (MessageExt m : msgs) {
                fail |= "dlq".equals(m.getUserProperty("failPlan"));
            }
            for (MessageExt m : msgs) {
                recordConsumed(G_FAIL, ctx.getMessageQueue(), m, fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS");
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cFail.start();

        // G_IDLE: subscribes (registered topics are sent in heartbeats) and commits offset 0 for every
        // queue before any message exists, then never pulls. Without the explicit commit the broker
        // would have no offsets at all for it (that is what G_NOOFFSET shows).
        cIdle = new DefaultMQPullConsumer(G_IDLE);
        configureConsumer(cIdle, "c-idle");
        cIdle.setRegisterTopics(new HashSet<>(List.of(T_NORMAL, T_BULK)));
        cIdle.start();
        for (String t : List.of(T_NORMAL, T_BULK)) {
            for (MessageQueue mq : cIdle.fetchSubscribeMessageQueues(t)) {
                commitOffset(cIdle, mq, 0);
            }
        }

        // G_NOOFFSET: subscribes (heartbeats) but never pulls and never commits.
        cNoOffset = new DefaultMQPullConsumer(G_NOOFFSET);
        configureConsumer(cNoOffset, "c-nooffset");
        cNoOffset.setRegisterTopics(new HashSet<>(List.of(T_NORMAL)));
        cNoOffset.start();

        // G_HALF: online from the start (heartbeats create %RETRY%G_HALF, which 4.9's
        // examineConsumeStats needs), pulls and commits half of each queue after delivery.
        cHalf = new DefaultMQPullConsumer(G_HALF);
        configureConsumer(cHalf, "c-half");
        cHalf.setRegisterTopics(new HashSet<>(HALF_TOPICS));
        cHalf.start();
    }

    /**
     * Synchronous offset commit. 5.x answers SUBSCRIPTION_GROUP_NOT_EXIST until the group's first
     * heartbeat has auto-created it, so retry for a few seconds.
     */
    void commitOffset(DefaultMQPullConsumer c, MessageQueue mq, long offset) throws Exception {
        long end = System.currentTimeMillis() + 15000;
        while (true) {
            try {
                c.getOffsetStore().updateConsumeOffsetToBroker(mq, offset, false);
                return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > end) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    void recordConsumed(String group, MessageQueue mq, MessageExt m, String status) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", group);
        r.put("queueTopic", mq.getTopic());
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("topic", m.getTopic());
        r.put("msgId", m.getMsgId());
        r.put("offsetMsgId", offsetMsgIdOf(m));
        r.put("tags", m.getTags());
        r.put("keys", m.getKeys());
        r.put("reconsumeTimes", m.getReconsumeTimes());
        r.put("bodyLength", m.getBody() == null ? 0 : m.getBody().length);
        r.put("bodySha256", sha256(m.getBody() == null ? new byte[0] : m.getBody()));
        r.put("storeTimestamp", m.getStoreTimestamp());
        r.put("bornTimestamp", m.getBornTimestamp());
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("realTopicProp", m.getProperty("REAL_TOPIC"));
        r.put("retryTopicProp", m.getProperty("RETRY_TOPIC"));
        r.put("delayProp", m.getProperty("DELAY"));
        r.put("status", status);
        r.put("receivedMs", System.currentTimeMillis());
        consumed.add(r);
        positions.get(group).add(mq.getTopic() + "/" + m.getQueueId() + "/" + m.getQueueOffset());
    }

    static String offsetMsgIdOf(MessageExt m) {
        try {
            return (String) m.getClass().getMethod("getOffsetMsgId").invoke(m);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    // =================================================================== producing

    interface Op {
        void run() throws Exception;
    }

    void produceMain() throws Exception {
        List<Op> ops = new ArrayList<>();
        for (int i = 0; i < N_NORMAL; i++) {
            final int n = i;
            ops.add(() -> sendNormal(n));
        }
        for (int i = 0; i < N_BULK; i++) {
            final int n = i;
            ops.add(() -> sendBulk(n));
        }
        for (int i = 0; i < N_ORDERS; i++) {
            final int n = i;
            ops.add(() -> sendOrder(n));
        }
        for (int i = 0; i < N_DELAYED; i++) {
            final int n = i;
            ops.add(() -> sendDelayed(n));
        }
        for (int i = 0; i < N_TX; i++) {
            final int n = i;
            ops.add(() -> sendTx(n));
        }
        for (int i = 0; i < N_BATCHES; i++) {
            final int n = i;
            ops.add(() -> sendBatch(n));
        }
        if (Compat.brokerAcceptsEmptyBody()) {
            for (int i = 0; i < N_EMPTY; i++) {
                final int n = i;
                ops.add(() -> sendEmpty(n));
            }
        }
        if (Compat.supportsTimer()) {
            for (int i = 0; i < N_TIMER; i++) {
                final int n = i;
                ops.add(() -> sendTimer(n));
            }
        }
        Collections.shuffle(ops, rnd);
        int done = 0;
        for (Op op : ops) {
            op.run();
            if (++done % 500 == 0) {
                h.checkDeadline("producing");
                Harness.log("main phase: " + done + "/" + ops.size() + " send operations");
            }
        }
    }

    Map<String, Object> newRecord(String kind, String phase, String topic, Message msg, byte[] body,
        String bodyKind, Map<String, String> userProps, List<String> keys) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("seq", seq.getAndIncrement());
        r.put("kind", kind);
        r.put("phase", phase);
        r.put("topic", topic);
        r.put("tags", msg.getTags());
        r.put("keys", keys);
        r.put("userProperties", userProps);
        r.put("delayLevel", 0);
        r.put("timerDelaySec", null);
        r.put("transaction", "none");
        r.put("txPlan", null);
        r.put("batch", false);
        r.put("batchId", null);
        r.put("batchIndex", null);
        r.put("ordered", false);
        r.put("orderId", null);
        r.put("bodyKind", bodyKind);
        r.put("bodyLength", body.length);
        r.put("bodySha256", sha256(body));
        r.put("compressedByClient", body.length >= COMPRESS_OVER);
        r.put("rawSend", false);
        return r;
    }

    Message buildMessage(String topic, String tags, List<String> keys, Map<String, String> userProps, byte[] body) {
        Message m = new Message(topic, body);
        if (tags != null) {
            m.setTags(tags);
        }
        if (!keys.isEmpty()) {
            m.setKeys(keys);
        }
        for (Map.Entry<String, String> e : userProps.entrySet()) {
            m.putUserProperty(e.getKey(), e.getValue());
        }
        return m;
    }

    void fillResult(Map<String, Object> r, Message msg, SendResult res, long start, String storedTopic,
        Integer storedQueueId) {
        r.put("sendStartMs", start);
        r.put("sendEndMs", System.currentTimeMillis());
        r.put("sendStatus", res.getSendStatus().name());
        r.put("acked", res.getSendStatus().name().equals("SEND_OK"));
        r.put("error", null);
        r.put("msgId", MessageClientIDSetter.getUniqID(msg));
        r.put("sendResultMsgId", res.getMsgId());
        r.put("offsetMsgId", res.getOffsetMsgId());
        r.put("brokerName", res.getMessageQueue().getBrokerName());
        r.put("queueId", res.getMessageQueue().getQueueId());
        r.put("queueOffset", res.getQueueOffset());
        r.put("storedTopic", storedTopic != null ? storedTopic : res.getMessageQueue().getTopic());
        r.put("storedQueueId", storedQueueId != null ? storedQueueId : res.getMessageQueue().getQueueId());
    }

    void fillError(Map<String, Object> r, Message msg, Throwable e, long start, Integer intendedQueue) {
        r.put("sendStartMs", start);
        r.put("sendEndMs", System.currentTimeMillis());
        r.put("sendStatus", "EXCEPTION");
        r.put("acked", false);
        r.put("error", e.getClass().getName() + ": " + e.getMessage());
        r.put("msgId", MessageClientIDSetter.getUniqID(msg));
        r.put("sendResultMsgId", null);
        r.put("offsetMsgId", null);
        r.put("brokerName", null);
        r.put("queueId", intendedQueue);
        r.put("queueOffset", null);
        r.put("storedTopic", null);
        r.put("storedQueueId", null);
    }

    void sendSimple(Map<String, Object> r, Message msg, String storedTopic, Integer storedQueueId) {
        long start = System.currentTimeMillis();
        try {
            SendResult res = producer.send(msg);
            fillResult(r, msg, res, start, storedTopic, storedQueueId);
        } catch (Exception e) {
            fillError(r, msg, e, start, null);
        }
        sent.add(r);
    }

    Map<String, String> userProps(int n, boolean rich) {
        Map<String, String> p = new LinkedHashMap<>();
        p.put("seqNo", String.valueOf(n));
        if (rich) {
            p.put("city", CITIES[n % CITIES.length]);
            p.put("note", "订单✓🚀 Grüße #" + n);
            if (n % 3 == 0) {
                p.put("emoji", "😀🎉".repeat(1 + n % 4));
            }
            if (n % 7 == 0) {
                p.put("spaces", " leading and trailing ");
            }
        }
        return p;
    }

    List<String> keysFor(String prefix, int n) {
        List<String> keys = new ArrayList<>();
        int k = n % 4; // 0..3 keys
        if (k >= 1) {
            keys.add(prefix + "-" + n);
        }
        if (k >= 2) {
            keys.add("cust-" + (n % 17));
        }
        if (k >= 3) {
            keys.add(n % 2 == 0 ? "键-" + n : "🔑" + n);
        }
        return keys;
    }

    void sendNormal(int n) {
        String kindOfBody = BODY_KINDS[n % BODY_KINDS.length];
        byte[] body = body(kindOfBody);
        String tags = NORMAL_TAGS[n % NORMAL_TAGS.length];
        List<String> keys = keysFor("norm", n);
        Map<String, String> props = userProps(n, n % 2 == 0);
        if (n % FAIL_EVERY == 5) {
            props.put("failPlan", "dlq");
        }
        Message msg = buildMessage(T_NORMAL, tags, keys, props, body);
        Map<String, Object> r = newRecord("normal", "main", T_NORMAL, msg, body, kindOfBody, props, keys);
        sendSimple(r, msg, null, null);
    }

    /**
     * Empty bodies: the client's Validators reject them, the broker does not. The identical request
     * goes through the client's remoting layer instead (see Compat.sendRaw).
     */
    void sendEmpty(int n) {
        byte[] body = new byte[0];
        List<String> keys = keysFor("empty", n);
        Map<String, String> props = userProps(n, n % 2 == 0);
        Message msg = buildMessage(T_EMPTY, n % 3 == 0 ? null : "empty", keys, props, body);
        Map<String, Object> r = newRecord("empty", "main", T_EMPTY, msg, body, "empty", props, keys);
        r.put("rawSend", true);
        int q = n % 2;
        long start = System.currentTimeMillis();
        try {
            SendResult res = Compat.sendRaw(producer, msg, brokerAddr, Harness.BROKER_NAME, q);
            fillResult(r, msg, res, start, null, null);
        } catch (Exception e) {
            fillError(r, msg, e, start, q);
        }
        sent.add(r);
    }

    void sendBulk(int n) {
        byte[] body = text(800 + rnd.nextInt(1700));
        List<String> keys = List.of("bulk-" + n);
        Map<String, String> props = new LinkedHashMap<>();
        props.put("seqNo", String.valueOf(n));
        Message msg = buildMessage(T_BULK, "bulk", keys, props, body);
        Map<String, Object> r = newRecord("bulk", "main", T_BULK, msg, body, "text-medium", props, keys);
        sendSimple(r, msg, null, null);
    }

    static final MessageQueueSelector BY_ARG = (mqs, msg, arg) -> mqs.get(((Integer) arg) % mqs.size());

    void sendOrder(int orderId) {
        for (String step : ORDER_STEPS) {
            byte[] body = ("{\"order\":" + orderId + ",\"step\":\"" + step + "\",\"amount\":" + rnd.nextInt(10000)
                + "}").getBytes(StandardCharsets.UTF_8);
            List<String> keys = List.of("order-" + orderId);
            Map<String, String> props = new LinkedHashMap<>();
            props.put("orderId", String.valueOf(orderId));
            props.put("step", step);
            Message msg = buildMessage(T_ORDER, step, keys, props, body);
            Map<String, Object> r = newRecord("ordered", "main", T_ORDER, msg, body, "text-small", props, keys);
            r.put("ordered", true);
            r.put("orderId", orderId);
            long start = System.currentTimeMillis();
            try {
                SendResult res = producer.send(msg, BY_ARG, orderId);
                fillResult(r, msg, res, start, null, null);
            } catch (Exception e) {
                fillError(r, msg, e, start, orderId % 4);
            }
            sent.add(r);
        }
    }

    void sendDelayed(int n) {
        int level = DELAY_LEVELS_USED[n % DELAY_LEVELS_USED.length];
        String kindOfBody = n % 5 == 0 ? "binary-small" : "text-small";
        byte[] body = body(kindOfBody);
        List<String> keys = keysFor("delay", n);
        Map<String, String> props = userProps(n, n % 2 == 1);
        Message msg = buildMessage(T_DELAY, "delay" + level, keys, props, body);
        msg.setDelayTimeLevel(level);
        Map<String, Object> r = newRecord("delayed", "main", T_DELAY, msg, body, kindOfBody, props, keys);
        r.put("delayLevel", level);
        sendSimple(r, msg, SCHEDULE_TOPIC, level - 1);
    }

    void sendTimer(int n) {
        int sec = 2 + n % 2;
        byte[] body = body("text-small");
        List<String> keys = keysFor("timer", n);
        Map<String, String> props = userProps(n, true);
        Message msg = buildMessage(T_TIMER, "timer", keys, props, body);
        Compat.setTimerDelaySec(msg, sec);
        Map<String, Object> r = newRecord("timer", "main", T_TIMER, msg, body, "text-small", props, keys);
        r.put("timerDelaySec", sec);
        sendSimple(r, msg, TIMER_TOPIC, 0);
    }

    static final String[] TX_PLANS = {"commit", "rollback", "commit", "rollback", "check-commit", "check-rollback"};

    void sendTx(int n) {
        String plan = TX_PLANS[n % TX_PLANS.length];
        String kindOfBody = n % 4 == 0 ? "text-large" : "text-small";
        byte[] body = body(kindOfBody);
        List<String> keys = keysFor("tx", n);
        Map<String, String> props = userProps(n, true);
        props.put("txPlan", plan);
        Message msg = buildMessage(T_TX, "tx", keys, props, body);
        Map<String, Object> r = newRecord("transaction", "main", T_TX, msg, body, kindOfBody, props, keys);
        r.put("txPlan", plan);
        r.put("transaction", plan.endsWith("commit") ? "commit" : "rollback");
        long start = System.currentTimeMillis();
        try {
            TransactionSendResult res = txProducer.sendMessageInTransaction(msg, plan);
            fillResult(r, msg, res, start, HALF_TOPIC, 0);
            SendResult half = halfSendResults.get(MessageClientIDSetter.getUniqID(msg));
            if (half != null) {
                r.put("offsetMsgId", half.getOffsetMsgId());
                r.put("queueOffset", half.getQueueOffset());
            }
            r.put("localTransactionState", res.getLocalTransactionState() == null ? null
                : res.getLocalTransactionState().name());
        } catch (Exception e) {
            fillError(r, msg, e, start, null);
        }
        sent.add(r);
    }

    void sendBatch(int b) {
        sendBatch(T_BATCH, "batch", "main", b, b * BATCH_SIZE, BATCH_SIZE);
    }

    /**
     * One client batch of {@code size} messages to {@code topic} (batch number {@code b}, message numbers from
     * {@code first}, keys {@code keyPrefix-n}), each recorded with its place in the batch and its offsets.
     */
    void sendBatch(String topic, String keyPrefix, String phase, int b, int first, int size) {
        List<Message> msgs = new ArrayList<>();
        List<Map<String, Object>> recs = new ArrayList<>();
        for (int i = 0; i < size; i++) {
            int n = first + i;
            String kindOfBody = i % 4 == 0 ? "binary-small" : (i == 3 ? "tiny" : "text-small");
            byte[] body = body(kindOfBody);
            List<String> keys = keysFor(keyPrefix, n);
            Map<String, String> props = userProps(n, i % 2 == 0);
            Message msg = buildMessage(topic, "batch", keys, props, body);
            Map<String, Object> r = newRecord("batch", phase, topic, msg, body, kindOfBody, props, keys);
            r.put("batch", true);
            r.put("batchId", b);
            r.put("batchIndex", i);
            r.put("compressedByClient", false); // the client never compresses batches
            msgs.add(msg);
            recs.add(r);
        }
        long start = System.currentTimeMillis();
        try {
            SendResult res = producer.send(msgs);
            String[] offIds = res.getOffsetMsgId() == null ? new String[0] : res.getOffsetMsgId().split(",");
            for (int i = 0; i < recs.size(); i++) {
                Map<String, Object> r = recs.get(i);
                fillResult(r, msgs.get(i), res, start, null, null);
                r.put("offsetMsgId", i < offIds.length ? offIds[i] : null);
                r.put("queueOffset", res.getQueueOffset() + i);
                r.put("batchFirstQueueOffset", res.getQueueOffset());
            }
        } catch (Exception e) {
            for (int i = 0; i < recs.size(); i++) {
                fillError(recs.get(i), msgs.get(i), e, start, null);
            }
        }
        sent.addAll(recs);
    }

    final class TxListener implements TransactionListener {
        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            switch ((String) arg) {
                case "commit":
                    return LocalTransactionState.COMMIT_MESSAGE;
                case "rollback":
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                default:
                    return LocalTransactionState.UNKNOW;
            }
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            String id = msg.getProperty("UNIQ_KEY");
            txChecks.computeIfAbsent(id == null ? "?" : id, k -> new AtomicInteger()).incrementAndGet();
            String plan = msg.getUserProperty("txPlan");
            if (plan != null && plan.endsWith("commit")) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }
    }

    // =================================================================== waiting / half consumption

    long countAcked(String kind) {
        return sent.stream().filter(r -> kind.equals(r.get("kind")) && Boolean.TRUE.equals(r.get("acked"))).count();
    }

    long expectedVisible() {
        long n = 0;
        synchronized (sent) {
            for (Map<String, Object> r : sent) {
                if (!Boolean.TRUE.equals(r.get("acked")) || T_EMPTY.equals(r.get("topic"))) {
                    continue;
                }
                if ("transaction".equals(r.get("kind"))) {
                    if ("commit".equals(r.get("transaction"))) {
                        n++;
                    }
                } else {
                    n++;
                }
            }
        }
        return n;
    }

    long positionsIn(String group, String topicPrefix) {
        return positions.get(group).stream().filter(p -> p.startsWith(topicPrefix + "/")).count();
    }

    long userTopicPositions(String group) {
        Set<String> user = new HashSet<>(pushTopics());
        return positions.get(group).stream().filter(p -> user.contains(p.substring(0, p.indexOf('/')))).count();
    }

    long dlqCount() {
        try {
            long total = 0;
            for (Map<String, Object> row : Compat.topicStats(admin, "%DLQ%" + G_FAIL)) {
                total += ((Number) row.get("maxOffset")).longValue();
            }
            return total;
        } catch (Exception e) {
            return 0;
        }
    }

    void waitForDelivery() throws Exception {
        long wantAll = expectedVisible();
        long wantOrdered = countAcked("ordered");
        long wantNormal = countAcked("normal");
        long wantDlq = sent.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))
            && r.get("userProperties") instanceof Map
            && "dlq".equals(((Map<?, ?>) r.get("userProperties")).get("failPlan"))).count();
        List<String> checkIds = new ArrayList<>();
        synchronized (sent) {
            for (Map<String, Object> r : sent) {
                if (Boolean.TRUE.equals(r.get("acked")) && String.valueOf(r.get("txPlan")).startsWith("check-")) {
                    checkIds.add((String) r.get("msgId"));
                }
            }
        }
        long end = System.currentTimeMillis() + 150_000;
        String status = "";
        while (true) {
            long all = userTopicPositions(G_ALL);
            long ord = positionsIn(G_ORDERLY, T_ORDER);
            long fail = positionsIn(G_FAIL, T_NORMAL);
            long dlq = dlqCount();
            long checked = checkIds.stream().filter(id -> txChecks.containsKey(id)).count();
            status = String.format("G_ALL %d/%d, G_ORDERLY %d/%d, G_FAIL %d/%d, DLQ %d/%d, tx checked %d/%d",
                all, wantAll, ord, wantOrdered, fail, wantNormal, dlq, wantDlq, checked, checkIds.size());
            if (all >= wantAll && ord >= wantOrdered && fail >= wantNormal && dlq >= wantDlq
                && checked >= checkIds.size()) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("delivery did not complete: " + status);
            }
            Thread.sleep(500);
        }
        Harness.log("delivery complete: " + status);
        notes.put("deliveryStatus", status);
        notes.put("expectedDlq", wantDlq);
    }

    /** G_HALF pulls the first half of every queue of TopicNormal, TopicBulk, TopicEmpty; commits that offset. */
    void consumeHalf() throws Exception {
        consumeHalf(HALF_TOPICS);
    }

    /** G_HALF ({@link #cHalf}) pulls the first maxOffset/2 of every queue of {@code topics}, commits that offset. */
    void consumeHalf(Collection<String> topics) throws Exception {
        DefaultMQPullConsumer c = cHalf;
        for (String t : topics) {
            List<MessageQueue> mqs = new ArrayList<>(c.fetchSubscribeMessageQueues(t));
            mqs.sort(Comparator.comparingInt(MessageQueue::getQueueId));
            for (MessageQueue mq : mqs) {
                long target = c.maxOffset(mq) / 2;
                long offset = 0;
                while (offset < target) {
                    var pr = c.pull(mq, "*", offset, (int) Math.min(32, target - offset));
                    if (pr.getPullStatus() != PullStatus.FOUND) {
                        throw new Harness.HarnessError("G_HALF pull " + mq + " at " + offset + ": "
                            + pr.getPullStatus());
                    }
                    for (MessageExt m : pr.getMsgFoundList()) {
                        if (m.getQueueOffset() < target) {
                            recordConsumed(G_HALF, mq, m, "PULLED");
                        }
                    }
                    offset = Math.min(target, pr.getNextBeginOffset());
                }
                commitOffset(c, mq, target);
            }
        }
        halfCommittedMs = System.currentTimeMillis();
    }

    /**
     * Waits until G_ALL got every acked message sent so far (the delayed ones after their delay) and committed it:
     * Diff 0, and a row for every queue of {@code topics} that has messages. The status line goes to the log and
     * to the notes ({@code deliveryStatus_<what>}).
     */
    void waitForAllConsumed(String what, Collection<String> topics, long end) throws Exception {
        long want;
        synchronized (sent) {
            want = sent.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))).count();
        }
        String status;
        while (true) {
            long got = positions.get(G_ALL).size();
            long behind = 0;
            Set<String> rows = new TreeSet<>();
            for (Map<String, Object> row : Compat.consumeStats(admin, G_ALL)) {
                behind += ((Number) row.get("diff")).longValue();
                rows.add(row.get("topic") + "/" + row.get("queueId"));
            }
            Set<String> nonEmpty = new TreeSet<>();
            for (String t : topics) {
                for (Map<String, Object> row : Compat.topicStats(admin, t)) {
                    if (((Number) row.get("maxOffset")).longValue() > 0) {
                        nonEmpty.add(t + "/" + row.get("queueId"));
                    }
                }
            }
            status = String.format("G_ALL got %d/%d, admin diff %d, queues with rows %s of %s", got, want, behind,
                rows.containsAll(nonEmpty) ? "all" : "some", nonEmpty.size());
            if (got >= want && behind == 0 && rows.containsAll(nonEmpty)) {
                break;
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("G_ALL did not get and commit everything (" + what + "): " + status);
            }
            Thread.sleep(200);
        }
        Harness.log(what + ": " + status);
        notes.put("deliveryStatus_" + what, status);
    }

    // =================================================================== snapshots

    void snapshotGroups(boolean waitStable) throws Exception {
        snapshotGroups(GROUPS, waitStable);
    }

    /**
     * The admin API's consumeStats rows of {@code groups} into {@link #groupSnapshot}; with {@code waitStable}, once
     * two reads a second apart agree (a group without rows, or whose read failed, is noted).
     */
    void snapshotGroups(List<String> groups, boolean waitStable) throws Exception {
        List<Map<String, Object>> prev = null;
        for (int i = 0; i < 10; i++) {
            List<Map<String, Object>> cur = new ArrayList<>();
            Map<String, Object> noRows = new TreeMap<>();
            long at = System.currentTimeMillis();
            for (String g : groups) {
                try {
                    List<Map<String, Object>> rows = Compat.consumeStats(admin, g);
                    rows.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
                        .thenComparing(m -> (Integer) m.get("queueId")));
                    if (rows.isEmpty()) {
                        noRows.put(g, "no rows (empty offset table, no error)");
                    }
                    for (Map<String, Object> row : rows) {
                        Map<String, Object> full = new LinkedHashMap<>();
                        full.put("group", g);
                        full.putAll(row);
                        cur.add(full);
                    }
                } catch (Exception e) {
                    noRows.put(g, "error: " + e.getClass().getName() + ": " + e.getMessage());
                }
            }
            for (Map<String, Object> row : cur) {
                row.put("snapshotMs", at);
            }
            if (!waitStable || (prev != null && stripTimes(prev).equals(stripTimes(cur)))) {
                groupSnapshot.clear();
                groupSnapshot.addAll(cur);
                // groups for which examineConsumeStats gave no (topic, queue) rows
                notes.put("consumeStatsWithoutRows", noRows);
                notes.put("consumeStatsSnapshotMs", at);
                return;
            }
            prev = cur;
            Thread.sleep(1000);
        }
        throw new Harness.HarnessError("consumer stats did not become stable");
    }

    static List<Map<String, Object>> stripTimes(List<Map<String, Object>> rows) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Map<String, Object> r : rows) {
            Map<String, Object> c = new TreeMap<>(r);
            c.remove("snapshotMs");
            out.add(c);
        }
        return out;
    }

    void snapshotTopics() {
        topicSnapshot.clear();
        Set<String> names;
        try {
            var list = admin.fetchAllTopicList();
            names = new java.util.TreeSet<>(list.getTopicList());
        } catch (Exception e) {
            notes.put("topicListError", e.toString());
            return;
        }
        long at = System.currentTimeMillis();
        for (String t : names) {
            try {
                List<Map<String, Object>> rows = Compat.topicStats(admin, t);
                rows.sort(Comparator.comparingInt(m -> (Integer) m.get("queueId")));
                boolean used = topics().containsKey(t)
                    || rows.stream().anyMatch(m -> ((Number) m.get("maxOffset")).longValue() > 0);
                if (!used) {
                    continue; // e.g. BenchmarkTest (1024 queues), TBW102, cluster/broker-name topics
                }
                for (Map<String, Object> row : rows) {
                    row.put("snapshotMs", at);
                    topicSnapshot.add(row);
                }
            } catch (Exception e) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("topic", t);
                row.put("error", e.getClass().getName() + ": " + e.getMessage());
                row.put("snapshotMs", at);
                topicSnapshot.add(row);
            }
        }
    }

    // =================================================================== killed variant

    /**
     * The broker persists consumerOffset.json / delayOffset.json periodically (first time ~10 s
     * after start). Before killing it, wait until both were written after G_HALF's commit so the
     * killed store has config files that are recent but (for the tail) stale.
     */
    void waitForConfigPersisted() throws Exception {
        java.nio.file.Path cfg = h.store.resolve("config");
        long end = System.currentTimeMillis() + 20000;
        while (System.currentTimeMillis() < end) {
            boolean ok = true;
            for (String f : List.of("consumerOffset.json", "delayOffset.json")) {
                java.nio.file.Path p = cfg.resolve(f);
                ok &= java.nio.file.Files.exists(p)
                    && java.nio.file.Files.getLastModifiedTime(p).toMillis() > halfCommittedMs;
            }
            if (ok) {
                return;
            }
            Thread.sleep(200);
        }
        notes.put("configPersistWait", "timed out waiting for consumerOffset.json/delayOffset.json");
    }

    Map<String, Object> tailAndKill() throws Exception {
        DefaultMQProducer tail = new DefaultMQProducer("PG_TAIL");
        configureProducer(tail, "harness-tail-producer");
        tail.setSendMsgTimeout(3000);
        tail.start();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong acked = new AtomicLong();
        AtomicInteger tailSeq = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            final int tid = t;
            final Random tr = new Random(1000 + t);
            Thread th = new Thread(() -> {
                while (!stop.get()) {
                    int n = tailSeq.getAndIncrement();
                    boolean delayed = n % 10 == 7;
                    String topic = delayed ? T_DELAY : (n % 4 == 0 ? T_NORMAL : T_BULK);
                    byte[] body = textWith(tr, 200 + tr.nextInt(3000));
                    List<String> keys = List.of("tail-" + n, "tail-thread-" + tid);
                    Map<String, String> props = new LinkedHashMap<>();
                    props.put("seqNo", String.valueOf(n));
                    props.put("tail", "true");
                    Message msg = buildMessage(topic, "tail", keys, props, body);
                    Map<String, Object> r = newRecord(delayed ? "delayed" : "tail", "tail", topic, msg, body,
                        "text-medium", props, keys);
                    int qn = topics().get(topic);
                    int intended = n % qn;
                    if (delayed) {
                        msg.setDelayTimeLevel(2);
                        r.put("delayLevel", 2);
                    }
                    long start = System.currentTimeMillis();
                    try {
                        SendResult res = tail.send(msg, BY_ARG, n);
                        fillResult(r, msg, res, start, delayed ? SCHEDULE_TOPIC : null, delayed ? 1 : null);
                        if (Boolean.TRUE.equals(r.get("acked"))) {
                            acked.incrementAndGet();
                        }
                        sent.add(r);
                    } catch (Exception e) {
                        fillError(r, msg, e, start, intended);
                        sent.add(r);
                        return; // broker gone: this thread stops after its first failed send
                    }
                }
            }, "tail-" + t);
            th.start();
            threads.add(th);
        }
        long end = System.currentTimeMillis() + 8000;
        while (acked.get() < 600 && System.currentTimeMillis() < end) {
            Thread.sleep(20);
        }
        // consumer stats "just before the kill" (producers are still sending, so broker offsets move on)
        snapshotGroups(false);
        Map<String, Object> kill = h.killBroker();
        kill.put("tailAckedAtKill", acked.get());
        for (Thread th : threads) {
            th.join(30000);
        }
        stop.set(true);
        for (Thread th : threads) {
            th.join(5000);
        }
        shutdownInBackground(tail);
        return kill;
    }

    // =================================================================== truth output

    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> msgs;
        synchronized (sent) {
            msgs = new ArrayList<>(sent);
        }
        for (Map<String, Object> r : msgs) {
            if (r.get("txPlan") != null) {
                AtomicInteger c = txChecks.get(String.valueOf(r.get("msgId")));
                r.put("txCheckCount", c == null ? 0 : c.get());
            }
        }
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        Harness.writeJsonLines(h.truth.resolve("messages.jsonl"), msgs);
        List<Map<String, Object>> cons;
        synchronized (consumed) {
            cons = new ArrayList<>(consumed);
        }
        Harness.writeJsonLines(h.truth.resolve("consumed.jsonl"), cons);
        Harness.writeJsonLines(h.truth.resolve("consumer_groups.jsonl"), groupSnapshot);
        Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), topicSnapshot);

        run.put("topics", topics());
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_ALL, "push, concurrently, all user topics except " + T_EMPTY + ", always CONSUME_SUCCESS");
        groups.put(G_ORDERLY, "push, orderly listener, " + T_ORDER);
        groups.put(G_HALF, "pull, first half (maxOffset/2) of every queue of " + HALF_TOPICS
            + ", offsets committed synchronously");
        groups.put(G_IDLE, "pull consumer subscribed to " + T_NORMAL + " and " + T_BULK
            + "; committed offset 0 for every queue before producing, never pulls");
        groups.put(G_FAIL, "push on " + T_NORMAL + ", RECONSUME_LATER for failPlan=dlq, maxReconsumeTimes="
            + MAX_RECONSUME_TIMES);
        groups.put(G_NOOFFSET, "pull consumer subscribed to " + T_NORMAL + "; never pulls, never commits");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", COMPRESS_OVER);
        client.put("compressionRule", "single (non-batch) messages with body length >= threshold are compressed"
            + " by the client (zlib by default)");
        client.put("retryTimesWhenSendFailed", 0);
        client.put("maxReconsumeTimes", MAX_RECONSUME_TIMES);
        client.put("vipChannelEnabled", false);
        run.put("client", client);
        run.put("counts", counts(msgs, cons));
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }

    Map<String, Object> counts(List<Map<String, Object>> msgs, List<Map<String, Object>> cons) {
        Map<String, Object> c = new LinkedHashMap<>();
        Map<String, Map<String, Long>> byKind = new TreeMap<>();
        Map<String, Map<String, Map<String, Long>>> byPhase = new TreeMap<>();
        Map<String, Long> byLevel = new TreeMap<>();
        Map<String, Long> tx = new TreeMap<>();
        long total = 0;
        long ackedTotal = 0;
        for (Map<String, Object> r : msgs) {
            String kind = (String) r.get("kind");
            boolean ok = Boolean.TRUE.equals(r.get("acked"));
            Map<String, Long> k = byKind.computeIfAbsent(kind, x -> new TreeMap<>());
            k.merge("sent", 1L, Long::sum);
            k.putIfAbsent("acked", 0L);
            k.putIfAbsent("notAcked", 0L);
            k.merge(ok ? "acked" : "notAcked", 1L, Long::sum);
            Map<String, Long> pk = byPhase.computeIfAbsent((String) r.get("phase"), x -> new TreeMap<>())
                .computeIfAbsent(kind, x -> new TreeMap<>());
            pk.putIfAbsent("acked", 0L);
            pk.putIfAbsent("notAcked", 0L);
            pk.merge("sent", 1L, Long::sum);
            pk.merge(ok ? "acked" : "notAcked", 1L, Long::sum);
            total++;
            if (ok) {
                ackedTotal++;
            }
            int lvl = ((Number) r.get("delayLevel")).intValue();
            if (lvl > 0 && ok) {
                byLevel.merge(String.valueOf(lvl), 1L, Long::sum);
            }
            if (r.get("txPlan") != null && ok) {
                tx.merge((String) r.get("txPlan"), 1L, Long::sum);
            }
        }
        c.put("messagesSent", total);
        c.put("messagesAcked", ackedTotal);
        c.put("byKind", byKind);
        c.put("byPhaseAndKind", byPhase);
        c.put("ackedDelayedByLevel", byLevel);
        c.put("ackedTransactionsByPlan", tx);
        c.put("ackedBodyOverCompressThreshold", msgs.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))
            && Boolean.TRUE.equals(r.get("compressedByClient"))).count());
        c.put("ackedEmptyBodies", msgs.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))
            && ((Number) r.get("bodyLength")).intValue() == 0).count());
        c.put("ackedFailPlanDlq", msgs.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))
            && "dlq".equals(((Map<?, ?>) r.get("userProperties")).get("failPlan"))).count());
        Map<String, Map<String, Long>> consumedBy = new TreeMap<>();
        for (Map<String, Object> r : cons) {
            consumedBy.computeIfAbsent((String) r.get("group"), x -> new TreeMap<>())
                .merge((String) r.get("queueTopic"), 1L, Long::sum);
        }
        c.put("deliveriesByGroupAndQueueTopic", consumedBy);
        return c;
    }

    // =================================================================== bodies

    byte[] body(String kind) {
        switch (kind) {
            case "empty":
                return new byte[0];
            case "tiny":
                return new byte[] {(byte) rnd.nextInt(256)};
            case "text-small":
                return text(1 + rnd.nextInt(300));
            case "text-medium":
                return text(300 + rnd.nextInt(2700));
            case "text-4095":
                return text(4095);
            case "text-4096":
                return text(4096);
            case "text-large":
                return text(4097 + rnd.nextInt(12000));
            case "binary-small":
                return bytes(1 + rnd.nextInt(1000));
            case "binary-large":
                return bytes(4097 + rnd.nextInt(5000));
            case "text-utf8": {
                StringBuilder sb = new StringBuilder();
                int n = 1 + rnd.nextInt(40);
                for (int i = 0; i < n; i++) {
                    sb.append("消息体 ").append(CITIES[rnd.nextInt(CITIES.length)]).append(" 🚀 ");
                }
                return sb.toString().getBytes(StandardCharsets.UTF_8);
            }
            default:
                throw new IllegalArgumentException(kind);
        }
    }

    byte[] text(int n) {
        return textWith(rnd, n);
    }

    static byte[] textWith(Random r, int n) {
        StringBuilder sb = new StringBuilder(n + 16);
        while (sb.length() < n) {
            sb.append(WORDS[r.nextInt(WORDS.length)]).append(' ');
        }
        sb.setLength(n);
        return sb.toString().getBytes(StandardCharsets.US_ASCII);
    }

    byte[] bytes(int n) {
        byte[] b = new byte[n];
        rnd.nextBytes(b);
        return b;
    }

    static String sha256(byte[] b) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            byte[] d = md.digest(b);
            StringBuilder sb = new StringBuilder();
            for (byte x : d) {
                sb.append(String.format("%02x", x));
            }
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    // =================================================================== shutdown helpers

    static void shutdownQuietly(Object client) {
        if (client == null) {
            return;
        }
        try {
            client.getClass().getMethod("shutdown").invoke(client);
        } catch (Exception ignored) {
            // best effort
        }
    }

    static void shutdownInBackground(Object client) {
        Thread t = new Thread(() -> shutdownQuietly(client), "bg-shutdown");
        t.setDaemon(true);
        t.start();
    }

}
