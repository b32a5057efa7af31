package rmqharness;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.KVTable;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeader;

/** RocketMQ 5.x specifics: admin result classes moved to org.apache.rocketmq.remoting.protocol.admin; timer messages. */
final class Compat {
    static final String LINE = "5";

    private Compat() {
    }

    /** Timer messages: TIMER_DELAY_SEC property, stored first in rmq_sys_wheel_timer. */
    static boolean supportsTimer() {
        return true;
    }

    static void setTimerDelaySec(Message msg, long sec) {
        msg.setDelayTimeSec(sec);
    }

    /** Whether the broker accepts a message with an empty body: 5.5.0 answers SYSTEM_ERROR (NullPointerException in AbstractSendMessageProcessor.buildMsgContext). */
    static boolean brokerAcceptsEmptyBody() {
        return false;
    }

    static List<Map<String, Object>> consumeStats(DefaultMQAdminExt admin, String group) throws Exception {
        ConsumeStats stats = admin.examineConsumeStats(group);
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
        return rows;
    }

    static List<Map<String, Object>> topicStats(DefaultMQAdminExt admin, String topic) throws Exception {
        TopicStatsTable table = admin.examineTopicStats(topic);
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
        return rows;
    }

    /**
     * Sends one message through the client's remoting layer (MQClientAPIImpl.sendMessage), i.e. the
     * same request DefaultMQProducer builds, minus the client-side Validators check. Used only for
     * empty bodies, which Validators.checkMessage rejects but the broker stores fine.
     */
    static SendResult sendRaw(DefaultMQProducer producer, Message msg, String brokerAddr, String brokerName,
        int queueId) throws Exception {
        MessageClientIDSetter.setUniqID(msg);
        SendMessageRequestHeader h = new SendMessageRequestHeader();
        h.setProducerGroup(producer.getProducerGroup());
        h.setTopic(msg.getTopic());
        h.setDefaultTopic(producer.getCreateTopicKey());
        h.setDefaultTopicQueueNums(producer.getDefaultTopicQueueNums());
        h.setQueueId(queueId);
        h.setSysFlag(0);
        h.setBornTimestamp(System.currentTimeMillis());
        h.setFlag(msg.getFlag());
        h.setProperties(MessageDecoder.messageProperties2String(msg.getProperties()));
        h.setReconsumeTimes(0);
        h.setUnitMode(false);
        h.setBatch(false);
        h.setBrokerName(brokerName);
        return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl().sendMessage(
            brokerAddr, brokerName, msg, h, producer.getSendMsgTimeout(), CommunicationMode.SYNC, null,
            producer.getDefaultMQProducerImpl());
    }

    /** The addresses the name server lists for a broker name (brokerId -> address), or null. */
    static Map<Long, String> brokerAddrs(DefaultMQAdminExt admin, String brokerName) throws Exception {
        ClusterInfo ci = admin.examineBrokerClusterInfo();
        BrokerData bd = ci.getBrokerAddrTable().get(brokerName);
        return bd == null ? null : new TreeMap<>(bd.getBrokerAddrs());
    }

    /** The broker's runtime statistics (what mqadmin brokerStatus prints), once the broker has sampled them. */
    static Map<String, String> runtimeStats(DefaultMQAdminExt admin, String brokerAddr) throws Exception {
        KVTable kv = Harness.afterFirstStatsSample(() -> admin.fetchBrokerRuntimeStats(brokerAddr));
        return new TreeMap<>(kv.getTable());
    }

    /** Creates (or updates) a subscription group through the admin API, as {@code mqadmin updateSubGroup} does. */
    static void createGroup(DefaultMQAdminExt admin, String brokerAddr, String group) throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        admin.createAndUpdateSubscriptionGroupConfig(brokerAddr, config);
    }

    /**
     * The broker's own topic and subscription group tables (what it serves to mqadmin), by name: for a topic its
     * queue counts and perm, for a group its name.
     */
    static Map<String, Object> configTables(DefaultMQAdminExt admin, String brokerAddr) throws Exception {
        Map<String, Object> topics = new TreeMap<>();
        for (var e : admin.getAllTopicConfig(brokerAddr, 10_000).getTopicConfigTable().entrySet()) {
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("readQueueNums", e.getValue().getReadQueueNums());
            t.put("writeQueueNums", e.getValue().getWriteQueueNums());
            t.put("perm", e.getValue().getPerm());
            topics.put(e.getKey(), t);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topics", topics);
        out.put("groups", new ArrayList<>(new java.util.TreeSet<>(
            admin.getAllSubscriptionGroup(brokerAddr, 10_000).getSubscriptionGroupTable().keySet())));
        return out;
    }

    /** Creates a topic whose {@code cleanup.policy} is COMPACTION (settable at creation only), as {@code
     * mqadmin updateTopic -a +cleanup.policy=COMPACTION} does. */
    static void createCompactedTopic(DefaultMQAdminExt admin, String brokerAddr, String topic, int queues)
        throws Exception {
        org.apache.rocketmq.common.TopicConfig config = new org.apache.rocketmq.common.TopicConfig(topic, queues, queues);
        config.setAttributes(Map.of("+cleanup.policy", "COMPACTION"));
        admin.createAndUpdateTopicConfig(brokerAddr, config);
    }
}
