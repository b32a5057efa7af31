package rmqharness;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The v5-features scenario (5.x only, loaded by {@link Harness} by name): one 5.5.0 broker with every
 * optional store feature a decoder could skip switched on, each with ground truth.
 *
 * <ul>
 * <li>TopicBatchCQ: attribute {@code queue.type=BatchCQ}; client batches (which carry a batch-level
 * UNIQ_KEY) are stored as ONE inner-batch record (sysflag 0x40|0x80, INNER_NUM, INNER_BASE), single sends too;
 * consumed by G_BATCHCQ (the client unwraps inner batches).</li>
 * <li>TopicExt + enableConsumeQueueExt / enablePropertyFilter / enableCalcFilterBitMap: tag consumer G_TAG,
 * SQL92 consumer G_SQL (its bloom bits end up in the ext units' bitmaps).</li>
 * <li>TopicLmq + enableLmq / enableMultiDispatch: INNER_MULTI_DISPATCH with two %LMQ% names per message.</li>
 * <li>enabledAppendPropCRC: every record ends with the __CRC32# property.</li>
 * <li>TopicCompress: the same producer API with ZLIB, LZ4 and ZSTD (one producer per type).</li>
 * <li>G_LONG (120 characters, the 5.5.0 maximum) fails messages with maxReconsumeTimes=1: %RETRY% (127 bytes,
 * still magic v1) and %DLQ%; G_POP pops TopicPopFeat and never acks: the revived copies land in
 * %RETRY%G_POP..._TopicPopFeat (140 bytes): message magic v2 (topic length as i16).</li>
 * <li>TopicTimerFeat: timer messages firing while the broker runs, and others ~1 h out (pending).</li>
 * <li>every process on ::1 (born/store host IPv6, 56-hex offsetMsgIds).</li>
 * </ul>
 */
final class FeaturesWorkload implements Harness.Scenario {
    /** Whether this scenario runs over IPv6 (::1). */
    static final boolean IPV6 = true;

    static final String T_BATCHCQ = "TopicBatchCQ";
    static final String T_EXT = "TopicExt";
    static final String T_LMQ = "TopicLmq";
    static final String T_COMPRESS = "TopicCompress";
    static final String T_TIMER = "TopicTimerFeat";
    static final String T_RETRY = "TopicRetryFeat";
    static final String TIMER_TOPIC = "rmq_sys_wheel_timer";

    static final String G_FEAT = "G_FEAT";
    static final String G_BATCHCQ = "G_BATCHCQ";
    static final String G_TAG = "G_TAG";
    static final String G_SQL = "G_SQL";
    /**
     * Group names are capped at 120 characters on 5.5.0, by the client (Validators.checkGroup, namespace
     * included) and by the broker (TopicValidator.validateGroup on auto-create and admin create), so a
     * %RETRY%/%DLQ% topic of a group is at most 127 / 125 bytes: G_LONG (120) makes the classic retry topic
     * exactly 127 bytes (still magic v1, the boundary). Topics over 127 bytes come from POP retries:
     * %RETRY% + group + '_' + topic; G_POP (120) on TopicPopFeat gives a 140-byte topic, magic v2.
     */
    static final String G_LONG = longGroupName("G_LONG_", 120);
    static final String G_POP = longGroupName("G_POP_", 120);
    static final String T_POP = "TopicPopFeat";
    static final long POP_INVISIBLE_MS = 2000;

    static final String TAG_EXPR = "TagA || TagB";
    static final String SQL_EXPR = "region = 'eu' AND amount > 500";
    static final String[] LMQ_NAMES = {"%LMQ%feat-a", "%LMQ%feat-b", "%LMQ%feat-c"};
    static final int[] BATCH_SIZES = {1, 2, 3, 5, 8, 10, 1, 16, 4, 7, 1, 12};
    static final int N_BATCHCQ_SINGLE = 16;
    static final int N_EXT = 60;
    static final int N_LMQ = 30;
    static final int N_COMPRESS_PER_TYPE = 15;
    static final int N_TIMER_NEAR = 12;
    static final int N_TIMER_FAR = 8;
    static final int N_RETRY = 20;
    static final int N_POP = 10;
    static final int COMPRESS_OVER = 4096;
    static final int MAX_RECONSUME_TIMES = 1;
    static final long FAR_DELAY_MS = 3_600_000L;

    final Harness h;
    Workload wl;
    DefaultMQAdminExt admin;
    DefaultMQProducer producer;
    final Map<CompressionType, DefaultMQProducer> compressProducers = new LinkedHashMap<>();
    final List<DefaultMQPushConsumer> consumers = new ArrayList<>();
    final List<Map<String, Object>> consumed = Collections.synchronizedList(new ArrayList<>());
    final Map<String, Set<String>> seen = new ConcurrentHashMap<>();
    final Map<String, AtomicInteger> longAttempts = new ConcurrentHashMap<>();
    final List<Map<String, Object>> batches = new ArrayList<>();
    final List<Map<String, Object>> lmq = new ArrayList<>();
    final List<Map<String, Object>> timers = new ArrayList<>();
    final List<Map<String, Object>> groupSnapshot = new ArrayList<>();
    final List<Map<String, Object>> topicSnapshot = new ArrayList<>();
    final Map<String, Object> notes = new LinkedHashMap<>();
    final List<String> notPossible = new ArrayList<>();
    final Map<String, Long> lmqCounters = new TreeMap<>();
    Map<String, Object> runtimeStats = new TreeMap<>();
    Map<String, Object> effectiveConfig = new TreeMap<>();

    FeaturesWorkload(Harness h) {
        this.h = h;
    }

    static String longGroupName(String prefix, int length) {
        StringBuilder sb = new StringBuilder(prefix);
        int i = 0;
        while (sb.length() < length) {
            sb.append((char) ('a' + i++ % 26));
        }
        return sb.toString();
    }

    @Override
    public String loopback() {
        return IPV6 ? "::1" : "127.0.0.1";
    }

    @Override
    public void configure(Map<String, String> ns, Map<String, String> c) {
        c.put("enableConsumeQueueExt", "true");
        c.put("mappedFileSizeConsumeQueueExt", String.valueOf(1024 * 1024));
        c.put("enablePropertyFilter", "true");
        c.put("enableCalcFilterBitMap", "true");
        c.put("enableLmq", "true");
        c.put("enableMultiDispatch", "true");
        c.put("enabledAppendPropCRC", "true");
        c.put("timerWheelEnable", "true");
        c.put("timerPrecisionMs", "1000");
        c.put("mapperFileSizeBatchConsumeQueue", String.valueOf(46 * 300));
        c.put("autoMessageVersionOnTopicLen", "true");
    }

    static Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(T_BATCHCQ, 4);
        t.put(T_EXT, 2);
        t.put(T_LMQ, 2);
        t.put(T_COMPRESS, 2);
        t.put(T_TIMER, 2);
        t.put(T_RETRY, 2);
        t.put(T_POP, 2);
        return t;
    }

    // =================================================================== flow

    @Override
    public void run(Workload w, Map<String, Object> run) throws Exception {
        this.wl = w;
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(wl.nsAddr);
        admin.setClientIP(h.loopback);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        wl.admin = admin;
        createTopics();
        h.mark("topicsCreated");

        startConsumers();
        h.mark("consumersStarted");

        producer = new DefaultMQProducer("PG_FEAT");
        wl.configureProducer(producer, "harness-producer");
        producer.setCompressMsgBodyOverHowmuch(COMPRESS_OVER);
        producer.start();
        for (CompressionType ct : new CompressionType[] {CompressionType.ZLIB, CompressionType.LZ4,
            CompressionType.ZSTD}) {
            DefaultMQProducer p = new DefaultMQProducer("PG_" + ct.name());
            wl.configureProducer(p, "harness-producer-" + ct.name().toLowerCase());
            p.setCompressMsgBodyOverHowmuch(COMPRESS_OVER);
            p.setCompressType(ct);
            p.start();
            compressProducers.put(ct, p);
        }
        h.mark("producersStarted");

        produce();
        h.mark("produced");

        readBackLmqOffsets();
        readBackTimerRecords();
        h.mark("readBack");

        popAll();
        h.mark("popped");

        waitForDelivery();
        h.mark("delivered");

        readBackQueues();
        h.mark("queuesReadBack");

        for (DefaultMQPushConsumer c : consumers) {
            Workload.shutdownQuietly(c);
        }
        Thread.sleep(1500);
        h.mark("consumersStopped");
        snapshotGroups();
        h.mark("groupsSnapshot");
        snapshotTopics();
        h.mark("topicsSnapshot");
        snapshotBroker();
        h.mark("brokerSnapshot");
        producer.shutdown();
        for (DefaultMQProducer p : compressProducers.values()) {
            p.shutdown();
        }
        admin.shutdown();
        Thread.sleep(300);
        run.put("shutdown", h.shutdownBrokerCleanly());
        h.mark("brokerStopped");
    }

    void createTopics() throws Exception {
        for (Map.Entry<String, Integer> e : topics().entrySet()) {
            TopicConfig tc = new TopicConfig(e.getKey());
            tc.setReadQueueNums(e.getValue());
            tc.setWriteQueueNums(e.getValue());
            tc.setPerm(6);
            if (e.getKey().equals(T_BATCHCQ)) {
                Map<String, String> attrs = new LinkedHashMap<>();
                attrs.put("+queue.type", "BatchCQ");
                tc.setAttributes(attrs);
            }
            admin.createAndUpdateTopicConfig(wl.brokerAddr, tc);
        }
        for (String t : topics().keySet()) {
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
        // what the broker made of the BatchCQ attribute
        TopicConfig bcq = admin.examineTopicConfig(wl.brokerAddr, T_BATCHCQ);
        notes.put("batchCqTopicAttributes", bcq == null ? null : bcq.getAttributes());
        if (bcq == null || bcq.getAttributes() == null || !"BatchCQ".equals(bcq.getAttributes().get("queue.type"))) {
            throw new Harness.HarnessError("the broker did not keep queue.type=BatchCQ on " + T_BATCHCQ + ": "
                + (bcq == null ? null : bcq.getAttributes()));
        }
    }

    // =================================================================== consumers

    DefaultMQPushConsumer push(String group, String instance) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        wl.configureConsumer(c, instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        seen.put(group, ConcurrentHashMap.newKeySet());
        consumers.add(c);
        return c;
    }

    void startConsumers() throws Exception {
        DefaultMQPushConsumer feat = push(G_FEAT, "c-feat");
        for (String t : List.of(T_LMQ, T_COMPRESS, T_TIMER, T_EXT)) {
            feat.subscribe(t, "*");
        }
        feat.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                record(G_FEAT, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        DefaultMQPushConsumer bcq = push(G_BATCHCQ, "c-batchcq");
        bcq.subscribe(T_BATCHCQ, "*");
        bcq.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                record(G_BATCHCQ, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        DefaultMQPushConsumer tag = push(G_TAG, "c-tag");
        tag.subscribe(T_EXT, TAG_EXPR);
        tag.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                record(G_TAG, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        DefaultMQPushConsumer sql = push(G_SQL, "c-sql");
        sql.subscribe(T_EXT, MessageSelector.bySql(SQL_EXPR));
        sql.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                record(G_SQL, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        // The long group: failPlan=retry fails the first delivery only (-> %RETRY%<120 chars>, 127 bytes),
        // failPlan=dlq every delivery (maxReconsumeTimes=1: -> %RETRY% -> %DLQ%<120 chars>).
        DefaultMQPushConsumer lg = push(G_LONG, "c-long");
        lg.setMaxReconsumeTimes(MAX_RECONSUME_TIMES);
        lg.subscribe(T_RETRY, "*");
        lg.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            boolean fail = false;
            for (MessageExt m : msgs) {
                String plan = m.getUserProperty("failPlan");
                longAttempts.computeIfAbsent(m.getMsgId(), k -> new AtomicInteger()).incrementAndGet();
                fail |= "dlq".equals(plan) || "retry".equals(plan) && m.getReconsumeTimes() == 0;
            }
            for (MessageExt m : msgs) {
                record(G_LONG, ctx.getMessageQueue(), m, fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS");
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        for (DefaultMQPushConsumer c : consumers) {
            c.start();
        }
        // The SQL filter must be registered (first heartbeat) before TopicExt is written, or the
        // dispatcher computes no bitmap for the early messages.
        long end = System.currentTimeMillis() + 20000;
        while (true) {
            try {
                var conn = admin.examineConsumerConnectionInfo(G_SQL);
                if (conn != null && !conn.getConnectionSet().isEmpty() && conn.getSubscriptionTable().containsKey(T_EXT)) {
                    notes.put("sqlSubscription", String.valueOf(conn.getSubscriptionTable().get(T_EXT)));
                    break;
                }
            } catch (Exception e) {
                // not yet
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("G_SQL never registered its subscription");
            }
            Thread.sleep(200);
        }
        Thread.sleep(500);
    }

    Map<String, Object> record(String group, MessageQueue mq, MessageExt m, String status) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("group", group);
        r.put("queueTopic", mq.getTopic());
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("topic", m.getTopic());
        r.put("msgId", m.getMsgId());
        r.put("uniqKey", m.getProperty("UNIQ_KEY"));
        r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
        r.put("tags", m.getTags());
        r.put("keys", m.getKeys());
        r.put("sysFlag", m.getSysFlag());
        r.put("reconsumeTimes", m.getReconsumeTimes());
        r.put("bodyLength", m.getBody() == null ? 0 : m.getBody().length);
        r.put("bodySha256", Workload.sha256(m.getBody() == null ? new byte[0] : m.getBody()));
        r.put("storeTimestamp", m.getStoreTimestamp());
        r.put("bornTimestamp", m.getBornTimestamp());
        r.put("bornHost", String.valueOf(m.getBornHost()));
        r.put("storeHost", String.valueOf(m.getStoreHost()));
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("storeSize", m.getStoreSize());
        r.put("realTopicProp", m.getProperty("REAL_TOPIC"));
        r.put("retryTopicProp", m.getProperty("RETRY_TOPIC"));
        r.put("timerOutMs", m.getProperty("TIMER_OUT_MS"));
        r.put("innerNum", m.getProperty("INNER_NUM"));
        r.put("innerBase", m.getProperty("INNER_BASE"));
        r.put("lmqQueues", m.getProperty("INNER_MULTI_DISPATCH"));
        r.put("lmqOffsets", m.getProperty("INNER_MULTI_QUEUE_OFFSET"));
        r.put("status", status);
        r.put("receivedMs", System.currentTimeMillis());
        consumed.add(r);
        seen.get(group).add(mq.getTopic() + "/" + m.getQueueId() + "/" + m.getQueueOffset() + "/"
            + m.getMsgId());
        return r;
    }

    // =================================================================== producing

    void produce() throws Exception {
        Random rnd = wl.rnd;
        List<Workload.Op> ops = new ArrayList<>();
        int n = 0;
        for (int b = 0; b < BATCH_SIZES.length; b++) {
            final int bb = b;
            final int first = n;
            n += BATCH_SIZES[b];
            ops.add(() -> sendBatchCq(bb, first));
        }
        for (int i = 0; i < N_BATCHCQ_SINGLE; i++) {
            final int k = i;
            ops.add(() -> sendBatchCqSingle(k));
        }
        for (int i = 0; i < N_EXT; i++) {
            final int k = i;
            ops.add(() -> sendExt(k));
        }
        // LMQ sends stay in order relative to each other (offsets per LMQ are predicted from the order)
        for (int i = 0; i < N_LMQ; i++) {
            final int k = i;
            ops.add(() -> sendLmq(k));
        }
        for (CompressionType ct : compressProducers.keySet()) {
            for (int i = 0; i < N_COMPRESS_PER_TYPE; i++) {
                final int k = i;
                ops.add(() -> sendCompressed(ct, k));
            }
        }
        for (int i = 0; i < N_RETRY; i++) {
            final int k = i;
            ops.add(() -> sendRetry(k));
        }
        for (int i = 0; i < N_POP; i++) {
            final int k = i;
            ops.add(() -> sendPop(k));
        }
        for (int i = 0; i < N_TIMER_FAR; i++) {
            final int k = i;
            ops.add(() -> sendTimer(k, true));
        }
        Collections.shuffle(ops, rnd);
        // near timers first-ish so they fire while the rest is still being sent / consumed
        for (int i = N_TIMER_NEAR - 1; i >= 0; i--) {
            final int k = i;
            ops.add(Math.min(ops.size(), i * 3), () -> sendTimer(k, false));
        }
        for (Workload.Op op : ops) {
            op.run();
        }
        h.checkDeadline("producing");
    }

    Map<String, Object> rec(String kind, String topic, Message msg, byte[] body, String bodyKind,
        Map<String, String> props, List<String> keys) {
        Map<String, Object> r = wl.newRecord(kind, "main", topic, msg, body, bodyKind, props, keys);
        r.put("feature", kind);
        r.put("compressedByClient", false);
        r.put("compressType", null);
        return r;
    }

    void sendSimple(Map<String, Object> r, DefaultMQProducer p, Message msg, Integer queueId, String storedTopic,
        Integer storedQueueId) {
        long start = System.currentTimeMillis();
        try {
            SendResult res = queueId == null ? p.send(msg) : p.send(msg, Workload.BY_ARG, queueId);
            wl.fillResult(r, msg, res, start, storedTopic, storedQueueId);
            r.put("regionId", res.getRegionId());
        } catch (Exception e) {
            wl.fillError(r, msg, e, start, queueId);
        }
        wl.sent.add(r);
    }

    static final String[] BCQ_TAGS = {"TagA", "TagB", null, "批次"};

    void sendBatchCq(int b, int firstN) {
        int size = BATCH_SIZES[b];
        int q = b % 4;
        List<Message> msgs = new ArrayList<>();
        List<Map<String, Object>> recs = new ArrayList<>();
        for (int i = 0; i < size; i++) {
            int n = firstN + i;
            String kindOfBody = i % 5 == 0 ? "binary-small" : (i % 7 == 3 ? "tiny" : "text-small");
            byte[] body = wl.body(kindOfBody);
            List<String> keys = wl.keysFor("bcq", n);
            Map<String, String> props = wl.userProps(n, i % 2 == 0);
            props.put("member", String.valueOf(i));
            String tag = BCQ_TAGS[n % BCQ_TAGS.length];
            Message msg = wl.buildMessage(T_BATCHCQ, tag, keys, props, body);
            Map<String, Object> r = rec("batchcq", T_BATCHCQ, msg, body, kindOfBody, props, keys);
            r.put("batch", true);
            r.put("innerBatch", true);
            r.put("batchId", b);
            r.put("batchIndex", i);
            r.put("batchSize", size);
            msgs.add(msg);
            recs.add(r);
        }
        long start = System.currentTimeMillis();
        Map<String, Object> batch = new LinkedHashMap<>();
        batch.put("batchId", b);
        batch.put("topic", T_BATCHCQ);
        batch.put("requestedQueueId", q);
        batch.put("size", size);
        try {
            SendResult res = producer.send(msgs, new MessageQueue(T_BATCHCQ, Harness.BROKER_NAME, q));
            long base = res.getQueueOffset();
            for (int i = 0; i < recs.size(); i++) {
                Map<String, Object> r = recs.get(i);
                wl.fillResult(r, msgs.get(i), res, start, null, null);
                // one record for the whole batch: the send result's ids belong to it
                r.put("msgId", MessageClientIDSetter.getUniqID(msgs.get(i)));
                r.put("batchUniqKey", res.getMsgId());
                r.put("sendResultMsgId", res.getMsgId());
                r.put("offsetMsgId", res.getOffsetMsgId());
                r.put("innerBase", base);
                r.put("batchFirstQueueOffset", base);
                r.put("queueOffset", base + i);
            }
            batch.put("acked", "SEND_OK".equals(res.getSendStatus().name()));
            batch.put("batchUniqKey", res.getMsgId());
            batch.put("offsetMsgId", res.getOffsetMsgId());
            batch.put("queueId", res.getMessageQueue().getQueueId());
            batch.put("innerBase", base);
            batch.put("sendStatus", res.getSendStatus().name());
        } catch (Exception e) {
            for (int i = 0; i < recs.size(); i++) {
                wl.fillError(recs.get(i), msgs.get(i), e, start, q);
            }
            batch.put("acked", false);
            batch.put("error", e.toString());
        }
        List<String> ids = new ArrayList<>();
        for (Message m : msgs) {
            ids.add(MessageClientIDSetter.getUniqID(m));
        }
        batch.put("memberMsgIds", ids);
        batch.put("firstSeq", recs.get(0).get("seq"));
        batches.add(batch);
        wl.sent.addAll(recs);
    }

    void sendBatchCqSingle(int k) {
        int n = 1000 + k;
        String kindOfBody = k % 3 == 0 ? "binary-small" : "text-small";
        byte[] body = wl.body(kindOfBody);
        List<String> keys = wl.keysFor("bcqs", n);
        Map<String, String> props = wl.userProps(n, k % 2 == 1);
        Message msg = wl.buildMessage(T_BATCHCQ, BCQ_TAGS[k % BCQ_TAGS.length], keys, props, body);
        Map<String, Object> r = rec("batchcq-single", T_BATCHCQ, msg, body, kindOfBody, props, keys);
        r.put("innerBatch", false);
        r.put("batchSize", 1);
        sendSimple(r, producer, msg, k % 4, null, null);
    }

    static final String[] EXT_TAGS = {"TagA", "TagB", "TagC", null};
    static final String[] REGIONS = {"eu", "us", "apac"};

    void sendExt(int k) {
        String tag = EXT_TAGS[k % EXT_TAGS.length];
        String region = REGIONS[(k / 4) % REGIONS.length];
        int amount = wl.rnd.nextInt(1000);
        byte[] body = wl.body("text-small");
        List<String> keys = wl.keysFor("ext", k);
        Map<String, String> props = new LinkedHashMap<>();
        props.put("region", region);
        props.put("amount", String.valueOf(amount));
        props.put("seqNo", String.valueOf(k));
        Message msg = wl.buildMessage(T_EXT, tag, keys, props, body);
        Map<String, Object> r = rec("ext", T_EXT, msg, body, "text-small", props, keys);
        r.put("tagMatch", "TagA".equals(tag) || "TagB".equals(tag));
        r.put("sqlMatch", "eu".equals(region) && amount > 500);
        sendSimple(r, producer, msg, k % 2, null, null);
    }

    void sendLmq(int k) {
        String a = LMQ_NAMES[k % 3];
        String b = LMQ_NAMES[(k + 1) % 3];
        String dispatch = a + "," + b;
        byte[] body = wl.body(k % 4 == 0 ? "binary-small" : "text-small");
        List<String> keys = wl.keysFor("lmq", k);
        Map<String, String> props = wl.userProps(k, k % 2 == 0);
        props.put("INNER_MULTI_DISPATCH", dispatch);
        Message msg = wl.buildMessage(T_LMQ, "lmq", keys, props, body);
        Map<String, String> userProps = new LinkedHashMap<>(props);
        userProps.remove("INNER_MULTI_DISPATCH");
        Map<String, Object> r = rec("lmq", T_LMQ, msg, body, k % 4 == 0 ? "binary-small" : "text-small",
            userProps, keys);
        r.put("innerMultiDispatch", dispatch);
        r.put("lmqQueues", List.of(a, b));
        sendSimple(r, producer, msg, k % 2, null, null);
        List<Long> expected = new ArrayList<>();
        if (Boolean.TRUE.equals(r.get("acked"))) {
            for (String q : List.of(a, b)) {
                long off = lmqCounters.getOrDefault(q, 0L);
                expected.add(off);
                lmqCounters.put(q, off + 1);
            }
        }
        r.put("lmqExpectedOffsets", expected);
    }

    void sendCompressed(CompressionType ct, int k) {
        String kindOfBody = k < 10 ? "text-large" : (k < 13 ? "binary-large" : "text-small");
        byte[] body = wl.body(kindOfBody);
        List<String> keys = wl.keysFor("z" + ct.name().toLowerCase(), k);
        Map<String, String> props = wl.userProps(k, k % 2 == 0);
        props.put("codec", ct.name());
        Message msg = wl.buildMessage(T_COMPRESS, ct.name(), keys, props, body);
        Map<String, Object> r = rec("compress", T_COMPRESS, msg, body, kindOfBody, props, keys);
        DefaultMQProducer p = compressProducers.get(ct);
        boolean compressed = body.length >= COMPRESS_OVER;
        r.put("compressedByClient", compressed);
        r.put("compressType", compressed ? ct.name() : null);
        r.put("producerCompressType", ct.name());
        r.put("compressLevel", p.getCompressLevel());
        if (compressed) {
            try {
                // the client's own compressor, same level: what the broker stores as the body
                byte[] stored = CompressorFactory.getCompressor(ct).compress(body, p.getCompressLevel());
                r.put("storedBodyLength", stored.length);
                r.put("storedBodySha256", Workload.sha256(stored));
            } catch (Exception e) {
                r.put("storedBodyError", e.toString());
            }
        } else {
            r.put("storedBodyLength", body.length);
            r.put("storedBodySha256", r.get("bodySha256"));
        }
        sendSimple(r, p, msg, k % 2, null, null);
    }

    void sendRetry(int k) {
        byte[] body = wl.body("text-small");
        List<String> keys = wl.keysFor("retry", k);
        Map<String, String> props = wl.userProps(k, k % 2 == 1);
        String plan = k % 10 == 3 ? "dlq" : (k % 4 == 1 ? "retry" : null);
        if (plan != null) {
            props.put("failPlan", plan);
        }
        Message msg = wl.buildMessage(T_RETRY, "retry", keys, props, body);
        Map<String, Object> r = rec("retry", T_RETRY, msg, body, "text-small", props, keys);
        r.put("failPlan", plan);
        sendSimple(r, producer, msg, k % 2, null, null);
    }

    void sendPop(int k) {
        byte[] body = wl.body(k % 3 == 0 ? "binary-small" : "text-small");
        List<String> keys = wl.keysFor("pop", k);
        Map<String, String> props = wl.userProps(k, k % 2 == 0);
        Message msg = wl.buildMessage(T_POP, k % 2 == 0 ? "pop" : null, keys, props, body);
        Map<String, Object> r = rec("pop", T_POP, msg, body, k % 3 == 0 ? "binary-small" : "text-small", props,
            keys);
        r.put("popRetryTopic", popRetryTopic());
        sendSimple(r, producer, msg, k % 2, null, null);
    }

    void sendTimer(int k, boolean far) {
        byte[] body = wl.body("text-small");
        List<String> keys = wl.keysFor(far ? "tfar" : "tnear", k);
        Map<String, String> props = wl.userProps(k, true);
        props.put("timerPlan", far ? "pending" : "fire");
        Message msg = wl.buildMessage(T_TIMER, far ? "far" : "near", keys, props, body);
        long now = System.currentTimeMillis();
        String how;
        long requested;
        long expectedDeliverMs;
        if (far) {
            if (k % 2 == 0) {
                how = "deliverTimeMs";
                requested = now + FAR_DELAY_MS + k * 60_000L;
                msg.setDeliverTimeMs(requested);
                expectedDeliverMs = requested;
            } else {
                how = "delayTimeSec";
                requested = 3600 + k * 60L;
                msg.setDelayTimeSec(requested);
                expectedDeliverMs = now + requested * 1000;
            }
        } else {
            long delayMs = 3000 + (k % 6) * 500L;
            switch (k % 3) {
                case 0:
                    how = "deliverTimeMs";
                    requested = now + delayMs;
                    msg.setDeliverTimeMs(requested);
                    break;
                case 1:
                    how = "delayTimeMs";
                    requested = delayMs;
                    msg.setDelayTimeMs(requested);
                    break;
                default:
                    how = "delayTimeSec";
                    requested = delayMs / 1000;
                    msg.setDelayTimeSec(requested);
                    delayMs = requested * 1000;
                    break;
            }
            expectedDeliverMs = now + delayMs;
        }
        Map<String, Object> r = rec(far ? "timer-pending" : "timer-fire", T_TIMER, msg, body, "text-small", props,
            keys);
        r.put("timerHow", how);
        r.put("timerRequested", requested);
        r.put("timerExpectedDeliverMs", expectedDeliverMs);
        r.put("timerFar", far);
        sendSimple(r, producer, msg, k % 2, TIMER_TOPIC, 0);
        Map<String, Object> t = new LinkedHashMap<>();
        t.put("seq", r.get("seq"));
        t.put("msgId", r.get("msgId"));
        t.put("topic", T_TIMER);
        t.put("queueId", r.get("queueId"));
        t.put("plan", far ? "pending" : "fire");
        t.put("how", how);
        t.put("requested", requested);
        t.put("sendStartMs", r.get("sendStartMs"));
        t.put("expectedDeliverMs", expectedDeliverMs);
        t.put("acked", r.get("acked"));
        t.put("wheelTopic", TIMER_TOPIC);
        t.put("wheelQueueId", 0);
        t.put("wheelOffsetMsgId", r.get("offsetMsgId"));
        t.put("wheelQueueOffset", r.get("queueOffset"));
        synchronized (timers) {
            timers.add(t);
        }
    }

    // =================================================================== POP retries (magic v2)

    final List<Map<String, Object>> pops = new ArrayList<>();

    /**
     * G_POP pops every message of TopicPopFeat (POP_MESSAGE through the client's remoting API, invisibleTime
     * 2 s) and never acks: the broker's PopReviveService writes each one to %RETRY%G_POP..._TopicPopFeat
     * (140 bytes, magic v2). Returns immediately after the pops; the revive is awaited in waitForDelivery.
     */
    void popAll() throws Exception {
        seen.putIfAbsent(G_POP, ConcurrentHashMap.newKeySet());
        var api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        long want = acked("pop");
        long got = 0;
        long end = System.currentTimeMillis() + 20000;
        while (got < want && System.currentTimeMillis() < end) {
            var hdr = new org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader();
            hdr.setConsumerGroup(G_POP);
            hdr.setTopic(T_POP);
            hdr.setQueueId(-1);
            hdr.setMaxMsgNums(32);
            hdr.setInvisibleTime(POP_INVISIBLE_MS);
            hdr.setPollTime(1000);
            hdr.setBornTime(System.currentTimeMillis());
            hdr.setInitMode(org.apache.rocketmq.common.constant.ConsumeInitMode.MIN);
            hdr.setExpType("TAG");
            hdr.setExp("*");
            hdr.setOrder(false);
            java.util.concurrent.CompletableFuture<org.apache.rocketmq.client.consumer.PopResult> f =
                new java.util.concurrent.CompletableFuture<>();
            api.popMessageAsync(Harness.BROKER_NAME, wl.brokerAddr, hdr, 5000,
                new org.apache.rocketmq.client.consumer.PopCallback() {
                    @Override
                    public void onSuccess(org.apache.rocketmq.client.consumer.PopResult r) {
                        f.complete(r);
                    }

                    @Override
                    public void onException(Throwable e) {
                        f.completeExceptionally(e);
                    }
                });
            org.apache.rocketmq.client.consumer.PopResult pr;
            try {
                pr = f.get(10, java.util.concurrent.TimeUnit.SECONDS);
            } catch (Exception e) {
                notes.put("popError", e.toString());
                Thread.sleep(300);
                continue;
            }
            if (pr.getMsgFoundList() != null) {
                for (MessageExt m : pr.getMsgFoundList()) {
                    got++;
                    Map<String, Object> row = record(G_POP, new MessageQueue(m.getTopic(), Harness.BROKER_NAME,
                        m.getQueueId()), m, "POPPED_NEVER_ACKED");
                    row.put("popTime", pr.getPopTime());
                    row.put("invisibleTime", pr.getInvisibleTime());
                    row.put("popCk", m.getProperty("POP_CK"));
                    synchronized (pops) {
                        pops.add(row);
                    }
                }
            }
        }
        notes.put("popped", got + "/" + want);
        if (got < want) {
            notPossible.add("G_POP popped only " + got + " of " + want + " messages");
        }
    }

    long popRetryCount() {
        return brokerMaxOffset(popRetryTopic(), 0);
    }

    /**
     * GET_MAX_OFFSET straight to the broker: needs no name-server route (a topic the broker created itself,
     * e.g. %DLQ%/pop retry, is routed only after its next registration, up to 30 s later).
     */
    long brokerMaxOffset(String topic, int queueId) {
        try {
            return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl().getMaxOffset(
                wl.brokerAddr, new MessageQueue(topic, Harness.BROKER_NAME, queueId), 5000);
        } catch (Exception e) {
            return 0;
        }
    }

    long brokerMinOffset(String topic, int queueId) {
        try {
            return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl().getMinOffset(
                wl.brokerAddr, new MessageQueue(topic, Harness.BROKER_NAME, queueId), 5000);
        } catch (Exception e) {
            return -1;
        }
    }

    static String popRetryTopic() {
        return "%RETRY%" + G_POP + "_" + T_POP;
    }

    // =================================================================== queues only a pull can show

    static final String G_READER = "G_READER";
    final List<Map<String, Object>> queueRecords = new ArrayList<>();
    final List<Map<String, Object>> lmqStats = new ArrayList<>();

    /**
     * Pulls (transport-only group G_READER, nothing committed) every record of the queues no consumer group
     * reads: the LMQ queues, the pop retry topic (magic v2) and %DLQ% of the long group; and asks the
     * broker for each LMQ queue's min/max offset (GET_MIN_OFFSET / GET_MAX_OFFSET: examineTopicStats has no
     * route for an LMQ). Rows go to queue_records.jsonl / topic_stats.jsonl.
     */
    void readBackQueues() throws Exception {
        // PULL_MESSAGE straight to the broker's address: DefaultMQPullConsumer needs a name-server route to find
        // the broker, and these topics have none (LMQ) or not yet (created by the broker itself).
        var api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        try {
            List<MessageQueue> queues = new ArrayList<>();
            for (String l : LMQ_NAMES) {
                MessageQueue mq = new MessageQueue(l, Harness.BROKER_NAME, 0);
                queues.add(mq);
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("topic", l);
                row.put("brokerName", Harness.BROKER_NAME);
                row.put("queueId", 0);
                try {
                    row.put("minOffset", api.getMinOffset(wl.brokerAddr, mq, 5000));
                    row.put("maxOffset", api.getMaxOffset(wl.brokerAddr, mq, 5000));
                } catch (Exception e) {
                    row.put("error", e.toString());
                }
                row.put("source", "MQClientAPIImpl.getMinOffset/getMaxOffset (examineTopicStats: no route for an LMQ)");
                row.put("snapshotMs", System.currentTimeMillis());
                lmqStats.add(row);
            }
            queues.add(new MessageQueue(popRetryTopic(), Harness.BROKER_NAME, 0));
            queues.add(new MessageQueue("%DLQ%" + G_LONG, Harness.BROKER_NAME, 0));
            for (MessageQueue mq : queues) {
                long offset = 0;
                long max;
                try {
                    max = api.getMaxOffset(wl.brokerAddr, mq, 5000);
                } catch (Exception e) {
                    notes.put("readBackMaxOffsetError " + mq.getTopic(), e.toString());
                    continue;
                }
                while (offset < max) {
                    org.apache.rocketmq.client.consumer.PullResult pr;
                    List<MessageExt> found;
                    try {
                        var hdr = new org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader();
                        hdr.setConsumerGroup(G_READER);
                        hdr.setTopic(mq.getTopic());
                        hdr.setQueueId(mq.getQueueId());
                        hdr.setQueueOffset(offset);
                        hdr.setMaxMsgNums(32);
                        hdr.setSysFlag(org.apache.rocketmq.common.sysflag.PullSysFlag.buildSysFlag(false, false, true,
                            false));
                        hdr.setCommitOffset(0L);
                        hdr.setSuspendTimeoutMillis(0L);
                        hdr.setSubscription("*");
                        hdr.setSubVersion(0L);
                        hdr.setExpressionType("TAG");
                        hdr.setBrokerName(Harness.BROKER_NAME);
                        pr = api.pullMessage(wl.brokerAddr, hdr, 5000,
                            org.apache.rocketmq.client.impl.CommunicationMode.SYNC, null);
                        found = pr.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.FOUND ? List.of()
                            : org.apache.rocketmq.common.message.MessageDecoder.decodesBatch(java.nio.ByteBuffer.wrap(
                                ((org.apache.rocketmq.client.impl.consumer.PullResultExt) pr).getMessageBinary()),
                                true, true, true);
                    } catch (Exception e) {
                        notes.put("readBackPullError " + mq.getTopic(), e.toString());
                        break;
                    }
                    if (pr.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.FOUND) {
                        notes.put("readBackPullStatus " + mq.getTopic() + " @" + offset, pr.getPullStatus().name());
                        break;
                    }
                    long position = offset;
                    for (MessageExt m : found) {
                        Map<String, Object> r = new LinkedHashMap<>();
                        r.put("queueTopic", mq.getTopic());
                        r.put("queueId", mq.getQueueId());
                        // the unit's position in the pulled queue (an LMQ message reports its record's own
                        // QUEUEOFFSET, i.e. the main queue's, as queueOffset)
                        r.put("queuePosition", position++);
                        r.put("queueOffset", m.getQueueOffset());
                        r.put("topic", m.getTopic());
                        r.put("msgId", m.getMsgId());
                        r.put("uniqKey", m.getProperty("UNIQ_KEY"));
                        r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
                        r.put("commitLogOffset", m.getCommitLogOffset());
                        r.put("storeSize", m.getStoreSize());
                        r.put("sysFlag", m.getSysFlag());
                        r.put("reconsumeTimes", m.getReconsumeTimes());
                        r.put("storeTimestamp", m.getStoreTimestamp());
                        r.put("tags", m.getTags());
                        r.put("keys", m.getKeys());
                        r.put("bodySha256", Workload.sha256(m.getBody() == null ? new byte[0] : m.getBody()));
                        r.put("properties", new TreeMap<>(m.getProperties()));
                        queueRecords.add(r);
                    }
                    offset = pr.getNextBeginOffset();
                }
            }
        } finally {
            notes.put("readBackVia", "MQClientAPIImpl.pullMessage (PULL_MESSAGE to " + wl.brokerAddr + ", group "
                + G_READER + ", nothing committed)");
        }
    }

    // =================================================================== read back through the admin API

    /** LMQ offsets as the broker stored them (INNER_MULTI_QUEUE_OFFSET), via viewMessage(offsetMsgId). */
    void readBackLmqOffsets() {
        for (Map<String, Object> r : snapshotSent()) {
            if (!"lmq".equals(r.get("kind")) || !Boolean.TRUE.equals(r.get("acked"))) {
                continue;
            }
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("seq", r.get("seq"));
            row.put("msgId", r.get("msgId"));
            row.put("offsetMsgId", r.get("offsetMsgId"));
            row.put("topic", r.get("topic"));
            row.put("queueId", r.get("queueId"));
            row.put("queueOffset", r.get("queueOffset"));
            row.put("lmqQueues", r.get("lmqQueues"));
            row.put("lmqExpectedOffsets", r.get("lmqExpectedOffsets"));
            try {
                MessageExt m = admin.viewMessage(T_LMQ, (String) r.get("offsetMsgId"));
                row.put("source", "DefaultMQAdminExt.viewMessage(topic, offsetMsgId)");
                row.put("storedDispatch", m.getProperty("INNER_MULTI_DISPATCH"));
                String offs = m.getProperty("INNER_MULTI_QUEUE_OFFSET");
                row.put("storedOffsetsRaw", offs);
                List<Long> parsed = new ArrayList<>();
                if (offs != null) {
                    for (String s : offs.split(",")) {
                        parsed.add(Long.parseLong(s.trim()));
                    }
                }
                row.put("storedOffsets", parsed);
                row.put("storedWait", m.getProperty("WAIT"));
                row.put("storedCrc32", m.getProperty("__CRC32#"));
                r.put("lmqStoredOffsets", parsed);
            } catch (Exception e) {
                row.put("error", e.toString());
            }
            lmq.add(row);
        }
    }

    /** TIMER_OUT_MS etc. of each rmq_sys_wheel_timer record, via viewMessage(offsetMsgId). */
    void readBackTimerRecords() {
        synchronized (timers) {
            for (Map<String, Object> t : timers) {
                if (!Boolean.TRUE.equals(t.get("acked"))) {
                    continue;
                }
                try {
                    MessageExt m = admin.viewMessage(TIMER_TOPIC, (String) t.get("wheelOffsetMsgId"));
                    t.put("wheelRecordTopic", m.getTopic());
                    t.put("wheelRecordQueueOffset", m.getQueueOffset());
                    t.put("wheelRecordCommitLogOffset", m.getCommitLogOffset());
                    t.put("wheelRecordStoreTimestamp", m.getStoreTimestamp());
                    t.put("timerOutMs", parseLong(m.getProperty("TIMER_OUT_MS")));
                    t.put("realTopic", m.getProperty("REAL_TOPIC"));
                    t.put("realQueueId", parseLong(m.getProperty("REAL_QID")));
                    t.put("wheelProps", new TreeMap<>(m.getProperties()));
                } catch (Exception e) {
                    t.put("wheelReadError", e.toString());
                }
            }
        }
    }

    static Long parseLong(String s) {
        try {
            return s == null ? null : Long.parseLong(s);
        } catch (NumberFormatException e) {
            return null;
        }
    }

    List<Map<String, Object>> snapshotSent() {
        synchronized (wl.sent) {
            return new ArrayList<>(wl.sent);
        }
    }

    // =================================================================== waiting

    long acked(String kind) {
        return snapshotSent().stream().filter(r -> kind.equals(r.get("kind")) && Boolean.TRUE.equals(r.get("acked")))
            .count();
    }

    long dlqCount() {
        return brokerMaxOffset("%DLQ%" + G_LONG, 0);
    }

    long seenIn(String group, String topic) {
        return seen.get(group).stream().filter(p -> p.startsWith(topic + "/")).count();
    }

    long distinctIds(String group, String topic) {
        return distinctIds(group, topic, false);
    }

    /** Distinct msgIds a group saw in queues of topic (or, with suffix, of any topic ending in topic). */
    long distinctIds(String group, String topic, boolean suffix) {
        Set<String> ids = new TreeSet<>();
        for (String p : seen.get(group)) {
            String qt = p.substring(0, p.indexOf('/'));
            if (suffix ? qt.endsWith(topic) : p.startsWith(topic + "/")) {
                ids.add(p.substring(p.lastIndexOf('/') + 1));
            }
        }
        return ids.size();
    }

    void waitForDelivery() throws Exception {
        List<Map<String, Object>> sent = snapshotSent();
        long wantBcq = acked("batchcq") + acked("batchcq-single");
        long wantLmq = acked("lmq");
        long wantCompress = acked("compress");
        long wantNear = acked("timer-fire");
        long wantExt = acked("ext");
        long wantTag = sent.stream().filter(r -> "ext".equals(r.get("kind")) && Boolean.TRUE.equals(r.get("acked"))
            && Boolean.TRUE.equals(r.get("tagMatch"))).count();
        long wantSql = sent.stream().filter(r -> "ext".equals(r.get("kind")) && Boolean.TRUE.equals(r.get("acked"))
            && Boolean.TRUE.equals(r.get("sqlMatch"))).count();
        long wantRetry = acked("retry");
        long wantRetried = sent.stream().filter(r -> "retry".equals(r.get("kind"))
            && Boolean.TRUE.equals(r.get("acked")) && r.get("failPlan") != null).count();
        long wantDlq = sent.stream().filter(r -> "retry".equals(r.get("kind"))
            && Boolean.TRUE.equals(r.get("acked")) && "dlq".equals(r.get("failPlan"))).count();
        long wantPop = acked("pop");
        long end = System.currentTimeMillis() + 90_000;
        boolean bcqGaveUp = false;
        long bcqDeadline = System.currentTimeMillis() + 30_000;
        String status;
        while (true) {
            long bcq = distinctIds(G_BATCHCQ, T_BATCHCQ);
            long lmqN = seenIn(G_FEAT, T_LMQ);
            long comp = seenIn(G_FEAT, T_COMPRESS);
            long near = distinctIds(G_FEAT, T_TIMER);
            long ext = seenIn(G_FEAT, T_EXT);
            long tag = seenIn(G_TAG, T_EXT);
            long sql = seenIn(G_SQL, T_EXT);
            long lg = distinctIds(G_LONG, T_RETRY);
            long lgRetry = distinctIds(G_LONG, "%RETRY%" + G_LONG);
            long dlq = dlqCount();
            long popRetry = popRetryCount();
            status = String.format("G_BATCHCQ %d/%d, LMQ %d/%d, compress %d/%d, timers fired %d/%d, ext %d/%d,"
                    + " G_TAG %d/%d, G_SQL %d/%d, G_LONG %d/%d, G_LONG retried %d/%d, DLQ %d/%d, pop retry %d/%d",
                bcq, wantBcq, lmqN, wantLmq, comp, wantCompress, near, wantNear, ext, wantExt, tag, wantTag, sql,
                wantSql, lg, wantRetry, lgRetry, wantRetried, dlq, wantDlq, popRetry, wantPop);
            boolean bcqDone = bcq >= wantBcq || bcqGaveUp;
            if (bcqDone && lmqN >= wantLmq && comp >= wantCompress && near >= wantNear && ext >= wantExt
                && tag >= wantTag && sql >= wantSql && lg >= wantRetry && lgRetry >= wantRetried && dlq >= wantDlq
                && popRetry >= wantPop) {
                break;
            }
            if (!bcqGaveUp && bcq < wantBcq && System.currentTimeMillis() > bcqDeadline) {
                bcqGaveUp = true;
                notPossible.add("G_BATCHCQ (push consumer on the BatchCQ topic) received only " + bcq + " of "
                    + wantBcq + " messages within 30 s");
            }
            if (System.currentTimeMillis() > end || System.currentTimeMillis() > h.deadline) {
                throw new Harness.HarnessError("delivery did not complete: " + status);
            }
            Thread.sleep(250);
        }
        Harness.log("delivery complete: " + status);
        notes.put("deliveryStatus", status);
    }

    // =================================================================== snapshots

    static final List<String> GROUPS = List.of(G_FEAT, G_BATCHCQ, G_TAG, G_SQL, G_LONG, G_POP);

    void snapshotGroups() throws Exception {
        List<Map<String, Object>> prev = null;
        for (int i = 0; i < 10; i++) {
            List<Map<String, Object>> cur = new ArrayList<>();
            Map<String, Object> noRows = new TreeMap<>();
            long at = System.currentTimeMillis();
            for (String g : GROUPS) {
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
            if (prev != null && Workload.stripTimes(prev).equals(Workload.stripTimes(cur))) {
                groupSnapshot.clear();
                groupSnapshot.addAll(cur);
                notes.put("consumeStatsWithoutRows", noRows);
                notes.put("consumeStatsSnapshotMs", at);
                return;
            }
            prev = cur;
            Thread.sleep(1000);
        }
        throw new Harness.HarnessError("consumer stats did not become stable");
    }

    void snapshotTopics() {
        Set<String> names = new TreeSet<>();
        try {
            names.addAll(admin.fetchAllTopicList().getTopicList());
        } catch (Exception e) {
            notes.put("topicListError", e.toString());
        }
        names.addAll(topics().keySet());
        names.add("%RETRY%" + G_LONG);
        names.add("%DLQ%" + G_LONG);
        names.add(popRetryTopic());
        names.add(TIMER_TOPIC);
        long at = System.currentTimeMillis();
        Map<String, Object> errors = new TreeMap<>();
        for (String t : names) {
            try {
                List<Map<String, Object>> rows = Compat.topicStats(admin, t);
                rows.sort(Comparator.comparingInt(m -> (Integer) m.get("queueId")));
                boolean wanted = topics().containsKey(t) || t.startsWith("%LMQ%") || t.contains(G_LONG)
                    || t.contains(G_POP)
                    || rows.stream().anyMatch(m -> ((Number) m.get("maxOffset")).longValue() > 0);
                if (!wanted) {
                    continue;
                }
                for (Map<String, Object> row : rows) {
                    row.put("snapshotMs", at);
                    topicSnapshot.add(row);
                }
            } catch (Exception e) {
                if (topics().containsKey(t) || t.startsWith("%LMQ%") || t.contains(G_LONG) || t.contains(G_POP)) {
                    // no route yet: the broker's own min/max (these topics have one queue)
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("topic", t);
                    row.put("brokerName", Harness.BROKER_NAME);
                    row.put("queueId", 0);
                    row.put("minOffset", brokerMinOffset(t, 0));
                    row.put("maxOffset", brokerMaxOffset(t, 0));
                    row.put("source", "MQClientAPIImpl.getMinOffset/getMaxOffset (examineTopicStats: "
                        + e.getClass().getSimpleName() + ")");
                    row.put("snapshotMs", at);
                    topicSnapshot.add(row);
                    errors.put(t, e.getClass().getSimpleName() + ": " + e.getMessage());
                }
            }
        }
        notes.put("topicStatsErrors", errors);
        topicSnapshot.addAll(lmqStats);
    }

    void snapshotBroker() {
        try {
            runtimeStats = new TreeMap<>(Compat.runtimeStats(admin, wl.brokerAddr));
        } catch (Exception e) {
            runtimeStats.put("error", e.toString());
        }
        try {
            Properties p = admin.getBrokerConfig(wl.brokerAddr);
            for (String k : p.stringPropertyNames()) {
                effectiveConfig.put(k, p.getProperty(k));
            }
        } catch (Exception e) {
            effectiveConfig.put("error", e.toString());
        }
        try {
            TopicConfig bcq = admin.examineTopicConfig(wl.brokerAddr, T_BATCHCQ);
            notes.put("batchCqTopicConfig", bcq == null ? null : bcq.toString());
        } catch (Exception e) {
            notes.put("batchCqTopicConfig", e.toString());
        }
    }

    // =================================================================== truth

    /** Files under store/ per area after the clean shutdown (names and sizes). */
    Map<String, Object> storeFiles() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        for (String area : List.of("commitlog", "consumequeue", "batchconsumequeue", "consumequeue_ext", "timerlog",
            "index", "config", "compaction")) {
            Path root = h.store.resolve(area);
            Map<String, Long> files = new TreeMap<>();
            if (Files.isDirectory(root)) {
                try (var walk = Files.walk(root)) {
                    for (Path p : (Iterable<Path>) walk.filter(Files::isRegularFile)::iterator) {
                        files.put(root.relativize(p).toString(), Files.size(p));
                    }
                }
            }
            out.put(area, Files.isDirectory(root) ? files : null);
        }
        List<String> top = new ArrayList<>();
        try (var list = Files.list(h.store)) {
            list.forEach(p -> top.add(p.getFileName().toString() + (Files.isDirectory(p) ? "/" : "")));
        }
        Collections.sort(top);
        out.put("topLevel", top);
        return out;
    }

    Map<String, Object> timerCheckpoint() {
        Map<String, Object> m = new LinkedHashMap<>();
        try {
            byte[] b = Files.readAllBytes(h.store.resolve("config/timercheck"));
            java.nio.ByteBuffer bb = java.nio.ByteBuffer.wrap(b);
            String[] names = {"lastReadTimeMs", "lastTimerLogFlushPos", "lastTimerQueueOffset",
                "masterTimerQueueOffset", "dataVersionStateVersion", "dataVersionTimestamp", "dataVersionCounter"};
            for (int i = 0; i < names.length; i++) {
                m.put(names[i], bb.getLong(i * 8));
            }
            m.put("fileLength", b.length);
        } catch (Exception e) {
            m.put("error", e.toString());
        }
        try {
            m.put("timermetricsJson", Files.readString(h.store.resolve("config/timermetrics"), StandardCharsets.UTF_8));
        } catch (Exception e) {
            m.put("timermetricsError", e.toString());
        }
        return m;
    }

    @Override
    public void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> msgs = snapshotSent();
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        List<Map<String, Object>> cons;
        synchronized (consumed) {
            cons = new ArrayList<>(consumed);
        }
        // fired timer copies, as G_FEAT saw them
        Map<String, Map<String, Object>> firstFired = new LinkedHashMap<>();
        for (Map<String, Object> c : cons) {
            if (G_FEAT.equals(c.get("group")) && T_TIMER.equals(c.get("queueTopic"))) {
                firstFired.putIfAbsent((String) c.get("msgId"), c);
            }
        }
        synchronized (timers) {
            for (Map<String, Object> t : timers) {
                Map<String, Object> c = firstFired.get(t.get("msgId"));
                t.put("fired", c != null);
                t.put("firedOffsetMsgId", c == null ? null : c.get("offsetMsgId"));
                t.put("firedQueueId", c == null ? null : c.get("queueId"));
                t.put("firedQueueOffset", c == null ? null : c.get("queueOffset"));
                t.put("firedCommitLogOffset", c == null ? null : c.get("commitLogOffset"));
                t.put("firedStoreTimestamp", c == null ? null : c.get("storeTimestamp"));
                t.put("firedTimerOutMs", c == null ? null : c.get("timerOutMs"));
                t.put("firedReceivedMs", c == null ? null : c.get("receivedMs"));
            }
        }
        for (Map<String, Object> r : msgs) {
            if (String.valueOf(r.get("kind")).startsWith("timer")) {
                Map<String, Object> c = firstFired.get(r.get("msgId"));
                r.put("timerFired", c != null);
                r.put("firedOffsetMsgId", c == null ? null : c.get("offsetMsgId"));
                r.put("firedQueueOffset", c == null ? null : c.get("queueOffset"));
            }
            if ("retry".equals(r.get("kind"))) {
                AtomicInteger a = longAttempts.get(String.valueOf(r.get("msgId")));
                r.put("longGroupAttempts", a == null ? 0 : a.get());
            }
        }
        Harness.writeJsonLines(h.truth.resolve("messages.jsonl"), msgs);
        Harness.writeJsonLines(h.truth.resolve("consumed.jsonl"), cons);
        Harness.writeJsonLines(h.truth.resolve("consumer_groups.jsonl"), groupSnapshot);
        Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), topicSnapshot);
        Harness.writeJsonLines(h.truth.resolve("batches.jsonl"), batches);
        Harness.writeJsonLines(h.truth.resolve("lmq.jsonl"), lmq);
        Harness.writeJsonLines(h.truth.resolve("pops.jsonl"), pops);
        Harness.writeJsonLines(h.truth.resolve("queue_records.jsonl"), queueRecords);
        synchronized (timers) {
            Harness.writeJsonLines(h.truth.resolve("timers.jsonl"), timers);
        }
        Harness.writeJson(h.truth.resolve("runtime_stats.json"), runtimeStats);

        run.put("topics", topics());
        run.put("topicAttributes", Map.of(T_BATCHCQ, Map.of("queue.type", "BatchCQ")));
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(G_FEAT, "push, " + T_LMQ + ", " + T_COMPRESS + ", " + T_TIMER + " (fired copies), " + T_EXT
            + "; always CONSUME_SUCCESS");
        groups.put(G_BATCHCQ, "push on the BatchCQ topic " + T_BATCHCQ + " (client unwraps inner batches)");
        groups.put(G_TAG, "push on " + T_EXT + ", tag expression '" + TAG_EXPR + "'");
        groups.put(G_SQL, "push on " + T_EXT + ", SQL92 '" + SQL_EXPR + "'");
        groups.put(G_LONG, "push on " + T_RETRY + ", " + G_LONG.length() + "-character name (the 5.5.0 maximum),"
            + " maxReconsumeTimes=" + MAX_RECONSUME_TIMES + "; failPlan=retry fails the first delivery,"
            + " failPlan=dlq every delivery (-> %RETRY% (127 bytes) -> %DLQ% (125 bytes))");
        groups.put(G_POP, G_POP.length() + "-character group; POP_MESSAGE on " + T_POP + " (invisibleTime "
            + POP_INVISIBLE_MS + " ms, never acked): revived into " + popRetryTopic() + " (" + popRetryTopic().length()
            + " bytes, magic v2)");
        run.put("popRetryTopic", popRetryTopic());
        run.put("groups", groups);
        run.put("longGroup", G_LONG);
        run.put("popGroup", G_POP);
        run.put("longGroupRetryTopic", "%RETRY%" + G_LONG);
        run.put("longGroupDlqTopic", "%DLQ%" + G_LONG);
        run.put("lmqNames", List.of(LMQ_NAMES));
        run.put("lmqFinalCounters", lmqCounters);
        run.put("tagExpression", TAG_EXPR);
        run.put("sqlExpression", SQL_EXPR);
        run.put("ipv6", IPV6);
        run.put("loopback", h.loopback);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", COMPRESS_OVER);
        client.put("compressionRule", "single messages with body length >= threshold are compressed by the client"
            + " with the producer's compressType (PG_ZLIB, PG_LZ4, PG_ZSTD); batches never");
        client.put("retryTimesWhenSendFailed", 0);
        client.put("maxReconsumeTimes", MAX_RECONSUME_TIMES);
        client.put("vipChannelEnabled", false);
        run.put("client", client);
        run.put("brokerConfigEffective", effectiveConfig);
        run.put("counts", counts(msgs, cons));
        try {
            run.put("storeFiles", storeFiles());
        } catch (Exception e) {
            run.put("storeFiles", e.toString());
        }
        run.put("timerCheckpoint", timerCheckpoint());
        run.put("notPossible", notPossible);
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
        long total = 0;
        long ackedTotal = 0;
        for (Map<String, Object> r : msgs) {
            boolean ok = Boolean.TRUE.equals(r.get("acked"));
            Map<String, Long> k = byKind.computeIfAbsent((String) r.get("kind"), x -> new TreeMap<>());
            k.merge("sent", 1L, Long::sum);
            k.putIfAbsent("acked", 0L);
            k.putIfAbsent("notAcked", 0L);
            k.merge(ok ? "acked" : "notAcked", 1L, Long::sum);
            total++;
            if (ok) {
                ackedTotal++;
            }
        }
        c.put("messagesSent", total);
        c.put("messagesAcked", ackedTotal);
        c.put("byKind", byKind);
        c.put("innerBatchRecords", batches.stream().filter(b -> Boolean.TRUE.equals(b.get("acked"))).count());
        Map<String, Long> byCodec = new TreeMap<>();
        for (Map<String, Object> r : msgs) {
            if (r.get("compressType") != null && Boolean.TRUE.equals(r.get("acked"))) {
                byCodec.merge((String) r.get("compressType"), 1L, Long::sum);
            }
        }
        c.put("compressedByType", byCodec);
        c.put("timersPending", timers.stream().filter(t -> "pending".equals(t.get("plan"))
            && Boolean.TRUE.equals(t.get("acked"))).count());
        c.put("timersFired", timers.stream().filter(t -> Boolean.TRUE.equals(t.get("fired"))).count());
        c.put("lmqDispatches", lmqCounters.values().stream().mapToLong(Long::longValue).sum());
        c.put("extSqlMatches", msgs.stream().filter(r -> Boolean.TRUE.equals(r.get("sqlMatch"))
            && Boolean.TRUE.equals(r.get("acked"))).count());
        c.put("extTagMatches", msgs.stream().filter(r -> Boolean.TRUE.equals(r.get("tagMatch"))
            && Boolean.TRUE.equals(r.get("acked"))).count());
        Map<String, Map<String, Long>> consumedBy = new TreeMap<>();
        for (Map<String, Object> r : cons) {
            consumedBy.computeIfAbsent((String) r.get("group"), x -> new TreeMap<>())
                .merge((String) r.get("queueTopic"), 1L, Long::sum);
        }
        c.put("deliveriesByGroupAndQueueTopic", consumedBy);
        return c;
    }
}
