package rmqharness;

import java.nio.file.Files;
import java.nio.file.Path;
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
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The "growing" scenario: successive hot copies of one running broker's store.
 *
 * <ol>
 *   <li>p1: TopicNormal + TopicBulk sends; G_ALL (push) consumes everything, G_STEP (pull) commits
 *       {@code maxOffset/2} of every queue (3/4 right after s2); once the broker has persisted consumerOffset.json the store
 *       is copied to {@code snapshots/s1/store} while a trickle producer keeps sending.</li>
 *   <li>p2: more of the same (at least one more full commitlog file), G_STEP commits again, copy s2.</li>
 *   <li>G_STEP commits again; retention is switched on through {@code updateBrokerConfig}
 *       ({@code fileReservedTime=1} hour, {@code deleteWhen} = every hour, {@code cleanFileForciblyEnable=false})
 *       after the two oldest commitlog files were aged to 48 h; the broker's CleanCommitLogService (first run
 *       60 s after the store started, then every {@code cleanResourceInterval}) deletes exactly those two;
 *       the settings are restored as soon as they are gone; the broker's consume-queue/index cleanup
 *       follows.</li>
 *   <li>p3: a few more sends, copy s3; then a clean shutdown (SIGTERM) leaves the final {@code store/}.</li>
 * </ol>
 *
 * Consumer-status groups (TopicBulk only, offsets committed without pulling, just before each copy; see
 * {@link #lagCommit}): G_SLOW falls behind (moves a quarter of what was produced), G_STOP commits once
 * before s1 and never again, G_RESET commits lower before s2 than before s1 (a reset backwards) and
 * catches up before s3, G_LOST stays near the start of the queue until retention deleted its
 * unconsumed messages (s3). Their commits are in lag_commits.jsonl.
 *
 * Ground truth: messages.jsonl (with the first snapshot that surely holds each message),
 * snapshots.json (copy windows, files per snapshot, retention details), consumer_groups_sN.jsonl and
 * topic_stats_sN.jsonl (admin views taken just before copy sN), plus the usual final files.
 */
final class GrowingWorkload {
    static final String G_STEP = "G_STEP";
    static final String G_SLOW = "G_SLOW";
    static final String G_STOP = "G_STOP";
    static final String G_RESET = "G_RESET";
    static final String G_LOST = "G_LOST";
    /** The consumer-status groups: pull consumers of TopicBulk that only commit offsets. */
    static final List<String> LAG_GROUPS = List.of(G_SLOW, G_STOP, G_RESET, G_LOST);
    static final List<String> GROUPS = List.of(Workload.G_ALL, G_STEP, G_SLOW, G_STOP, G_RESET, G_LOST);
    /** How far G_RESET goes back before s2, below its s1 commit (messages per queue). */
    static final long RESET_BACK = 50;
    static final List<String> SNAPSHOTS = List.of("s1", "s2", "s3");
    /** Broker setting of this variant (see Harness.brokerConfig): period of the retention services. */
    static final int CLEAN_RESOURCE_INTERVAL_MS = 2000;
    /** Retention deletes exactly this many commitlog files, the oldest: the ones the harness ages. */
    static final int RETENTION_FILES = 2;
    /** fileReservedTime while retention is on (hours): only files modified longer ago are deleted. */
    static final int RESERVED_HOURS = 1;
    /** How old the harness makes the files retention must delete (their modification time, hours). */
    static final int AGE_HOURS = 48;
    /** (TopicNormal, TopicBulk) sends of the production phases p1, p2, p3. */
    static final int[][] PHASE_SENDS = {{300, 1100}, {200, 900}, {40, 60}};
    static final int TRICKLE_PAUSE_MS = 20;
    static final int TRICKLE_LEAD_MS = 200;
    static final long MiB = 1024L * 1024L;
    static final String ALL_HOURS = IntStream.range(0, 24).mapToObj(i -> String.format("%02d", i))
        .collect(Collectors.joining(";"));
    static final List<String> RETENTION_KEYS = List.of("fileReservedTime", "deleteWhen", "cleanFileForciblyEnable");

    static Map<String, Integer> topics() {
        Map<String, Integer> t = new LinkedHashMap<>();
        t.put(Workload.T_NORMAL, 4);
        t.put(Workload.T_BULK, 2);
        return t;
    }

    final Harness h;
    final Workload wl;
    final Map<String, Object> notes = new LinkedHashMap<>();
    final List<Map<String, Object>> snapshots = new ArrayList<>();
    final Map<String, List<Map<String, Object>>> groupStats = new LinkedHashMap<>();
    final Map<String, List<Map<String, Object>>> topicStats = new LinkedHashMap<>();
    final Map<String, Object> retention = new LinkedHashMap<>();
    final Map<MessageQueue, Long> stepOffsets = new HashMap<>();
    final Random trickleRnd = new Random(20240612L);
    final AtomicInteger trickleSeq = new AtomicInteger();
    final List<Map<String, Object>> stepCommits = new ArrayList<>();
    final List<Map<String, Object>> lagCommits = new ArrayList<>();
    final Map<String, DefaultMQPullConsumer> lagConsumers = new LinkedHashMap<>();
    /** (group, queue) -> [committed offset, queue max offset at that commit]. */
    final Map<String, long[]> lagOffsets = new HashMap<>();
    long lagCommittedMs;
    List<Map<String, Object>> finalGroups = new ArrayList<>();
    List<Map<String, Object>> finalTopics = new ArrayList<>();
    int normalN;
    int bulkN;
    long stepCommittedMs;
    long allCaughtUpMs;
    DefaultMQAdminExt admin;
    DefaultMQPushConsumer cAll;
    DefaultMQPullConsumer cStep;
    DefaultMQProducer trickle;

    GrowingWorkload(Harness h, Workload wl) {
        this.h = h;
        this.wl = wl;
        wl.positions.put(G_STEP, ConcurrentHashMap.newKeySet());
    }

    // =================================================================== main flow

    void run(Map<String, Object> run) throws Exception {
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(wl.nsAddr);
        admin.setClientIP("127.0.0.1");
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        wl.admin = admin;
        wl.createTopics(topics());
        h.mark("topicsCreated");
        startConsumers();
        h.mark("consumersStarted");
        wl.producer = new DefaultMQProducer("PG_MAIN");
        wl.configureProducer(wl.producer, "harness-producer");
        wl.producer.start();
        trickle = new DefaultMQProducer("PG_TRICKLE");
        wl.configureProducer(trickle, "harness-trickle-producer");
        trickle.start();

        produce(0);
        h.mark("p1Produced");
        beforeSnapshot("s1", true);
        takeSnapshot("s1");
        h.mark("s1Copied");

        produce(1);
        h.mark("p2Produced");
        beforeSnapshot("s2", true);
        takeSnapshot("s2");
        h.mark("s2Copied");
        checkGrowth();

        // offsets move again between s2 and s3 (committed while the retention service is not due yet)
        stepCommit("s3");
        h.mark("s3StepCommitted");
        runRetention();
        h.mark("retentionDone");

        produce(2);
        h.mark("p3Produced");
        beforeSnapshot("s3", false);
        takeSnapshot("s3");
        h.mark("s3Copied");

        Workload.shutdownQuietly(cAll);
        Workload.shutdownQuietly(cStep);
        for (DefaultMQPullConsumer c : lagConsumers.values()) {
            Workload.shutdownQuietly(c);
        }
        Thread.sleep(1000);
        h.mark("consumersStopped");
        finalGroups = consumeStats();
        finalTopics = topicStatsRows();
        h.mark("finalStats");
        // producers and admin only unregister from the broker: no need to wait for that
        Workload.shutdownInBackground(wl.producer);
        Workload.shutdownInBackground(trickle);
        Workload.shutdownInBackground(admin);
        Thread.sleep(300);
        run.put("shutdown", h.shutdownBrokerCleanly());
        h.mark("brokerStopped");
    }

    void startConsumers() throws Exception {
        cAll = new DefaultMQPushConsumer(Workload.G_ALL);
        wl.configureConsumer(cAll, "c-all");
        cAll.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String t : topics().keySet()) {
            cAll.subscribe(t, "*");
        }
        cAll.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                wl.recordConsumed(Workload.G_ALL, ctx.getMessageQueue(), m, "CONSUME_SUCCESS");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        cAll.start();

        cStep = new DefaultMQPullConsumer(G_STEP);
        wl.configureConsumer(cStep, "c-step");
        cStep.setRegisterTopics(new HashSet<>(topics().keySet()));
        cStep.start();

        for (String g : LAG_GROUPS) {
            DefaultMQPullConsumer c = new DefaultMQPullConsumer(g);
            wl.configureConsumer(c, "c-" + g.toLowerCase());
            c.setRegisterTopics(new HashSet<>(List.of(Workload.T_BULK)));
            c.start();
            lagConsumers.put(g, c);
        }
    }

    /**
     * The consumer-status groups commit (without pulling) just before copy {@code forSnapshot}, per
     * TopicBulk queue with max offset {@code max} and what was produced since their previous commit:
     * <ul>
     *   <li>G_SLOW: s1 {@code max - max/10}, then + a quarter of what was produced (lag rises, offset moves);</li>
     *   <li>G_STOP: s1 {@code max}, never again (lag grows, nothing moves);</li>
     *   <li>G_RESET: s1 {@code max}, s2 its s1 offset - {@link #RESET_BACK} (backwards), s3 {@code max};</li>
     *   <li>G_LOST: s1 {@code max/10}, s2 + a quarter of what was produced, s3 nothing: retention deleted
     *       the messages it had not consumed.</li>
     * </ul>
     */
    /** The offset {@code group} commits before copy {@code forSnapshot}, or null for no commit. */
    static Long lagTarget(String group, String forSnapshot, long max, long[] prev) {
        if (prev == null) {  // before s1
            if (group.equals(G_SLOW)) {
                return max - max / 10;
            }
            return group.equals(G_LOST) ? max / 10 : max;
        }
        long quarter = (max - prev[1] + 3) / 4;
        if (group.equals(G_SLOW) || (group.equals(G_LOST) && forSnapshot.equals("s2"))) {
            return prev[0] + quarter;
        }
        if (group.equals(G_RESET)) {
            return forSnapshot.equals("s2") ? prev[0] - RESET_BACK : max;
        }
        return null;  // G_STOP after s1, G_LOST before s3
    }

    void lagCommit(String forSnapshot) throws Exception {
        for (String g : LAG_GROUPS) {
            DefaultMQPullConsumer c = lagConsumers.get(g);
            List<MessageQueue> mqs = new ArrayList<>(c.fetchSubscribeMessageQueues(Workload.T_BULK));
            mqs.sort(Comparator.comparingInt(MessageQueue::getQueueId));
            for (MessageQueue mq : mqs) {
                long max = c.maxOffset(mq);
                String key = g + "/" + mq.getQueueId();
                long[] prev = lagOffsets.get(key);
                Long target = lagTarget(g, forSnapshot, max, prev);
                if (target == null) {
                    continue;
                }
                wl.commitOffset(c, mq, target);
                lagOffsets.put(key, new long[] {target, max});
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("group", g);
                r.put("forSnapshot", forSnapshot);
                r.put("topic", mq.getTopic());
                r.put("queueId", mq.getQueueId());
                r.put("maxOffset", max);
                r.put("committedOffset", target);
                r.put("committedMs", System.currentTimeMillis());
                lagCommits.add(r);
            }
        }
        lagCommittedMs = System.currentTimeMillis();
    }

    void produce(int phase) throws Exception {
        String name = "p" + (phase + 1);
        List<Workload.Op> ops = new ArrayList<>();
        for (int i = 0; i < PHASE_SENDS[phase][0]; i++) {
            final int n = normalN++;
            ops.add(() -> wl.sendNormal(n));
        }
        for (int i = 0; i < PHASE_SENDS[phase][1]; i++) {
            final int n = bulkN++;
            ops.add(() -> wl.sendBulk(n));
        }
        Collections.shuffle(ops, wl.rnd);
        int before = wl.sent.size();
        for (Workload.Op op : ops) {
            op.run();
        }
        int failed = 0;
        synchronized (wl.sent) {
            for (int i = before; i < wl.sent.size(); i++) {
                Map<String, Object> r = wl.sent.get(i);
                r.put("phase", name);
                if (!Boolean.TRUE.equals(r.get("acked"))) {
                    failed++;
                }
            }
        }
        Harness.log(name + ": " + ops.size() + " sends, " + failed + " not acked");
        if (failed > 0) {
            notes.put("notAcked" + name, failed);
        }
        h.checkDeadline("producing " + name);
    }

    // =================================================================== before each copy

    long ackedCount() {
        synchronized (wl.sent) {
            return wl.sent.stream().filter(r -> Boolean.TRUE.equals(r.get("acked"))).count();
        }
    }

    /** Waits until G_ALL was handed every acked message (no retries here: it always succeeds). */
    void waitForAll(String what) throws Exception {
        long want = ackedCount();
        long end = System.currentTimeMillis() + 60_000;
        while (wl.positions.get(Workload.G_ALL).size() < want) {
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("G_ALL did not consume everything before " + what + ": "
                    + wl.positions.get(Workload.G_ALL).size() + "/" + want);
            }
            Thread.sleep(50);
        }
        waitForAllCommitted(what, System.currentTimeMillis() + 60_000);
        allCaughtUpMs = System.currentTimeMillis();
    }

    /**
     * Waits until the broker holds G_ALL's committed offset at the max offset of every queue (Diff 0 in
     * the admin's consume stats). Being handed every message is not enough: the push consumer commits
     * only what its listener has returned, every persistConsumerOffsetInterval, and on a busy machine a
     * copy taken a few seconds after the last delivery once showed G_ALL 272 messages behind per queue.
     */
    void waitForAllCommitted(String what, long end) throws Exception {
        while (true) {
            long behind = 0;
            for (Map<String, Object> row : Compat.consumeStats(admin, Workload.G_ALL)) {
                behind += ((Number) row.get("diff")).longValue();
            }
            if (behind == 0) {
                return;
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("G_ALL did not commit everything before " + what + ": "
                    + behind + " behind");
            }
            Thread.sleep(200);
        }
    }

    /**
     * G_STEP pulls every queue (from where it stopped) up to a fraction of its max offset (1/2 before s1
     * and s2, 3/4 before s3) and commits that offset synchronously.
     */
    void stepCommit(String forSnapshot) throws Exception {
        long num = forSnapshot.equals("s3") ? 3 : 1;
        long den = forSnapshot.equals("s3") ? 4 : 2;
        for (String t : topics().keySet()) {
            List<MessageQueue> mqs = new ArrayList<>(cStep.fetchSubscribeMessageQueues(t));
            mqs.sort(Comparator.comparingInt(MessageQueue::getQueueId));
            for (MessageQueue mq : mqs) {
                long max = cStep.maxOffset(mq);
                long offset = stepOffsets.getOrDefault(mq, 0L);
                long target = Math.max(offset, max * num / den);
                while (offset < target) {
                    var pr = cStep.pull(mq, "*", offset, (int) Math.min(32, target - offset));
                    if (pr.getPullStatus() != PullStatus.FOUND) {
                        throw new Harness.HarnessError("G_STEP pull " + mq + " at " + offset + ": " + pr.getPullStatus());
                    }
                    for (MessageExt m : pr.getMsgFoundList()) {
                        if (m.getQueueOffset() < target) {
                            wl.recordConsumed(G_STEP, mq, m, "PULLED");
                        }
                    }
                    offset = Math.min(target, pr.getNextBeginOffset());
                }
                wl.commitOffset(cStep, mq, target);
                stepOffsets.put(mq, target);
                Map<String, Object> c = new LinkedHashMap<>();
                c.put("forSnapshot", forSnapshot);
                c.put("topic", mq.getTopic());
                c.put("queueId", mq.getQueueId());
                c.put("maxOffset", max);
                c.put("committedOffset", target);
                c.put("committedMs", System.currentTimeMillis());
                stepCommits.add(c);
            }
        }
        stepCommittedMs = System.currentTimeMillis();
    }

    /**
     * Waits until consumerOffset.json was rewritten after {@code afterMs} (the broker persists it every
     * flushConsumerOffsetInterval = 5 s), so the copy's config holds the offsets just committed.
     */
    boolean waitConfigPersisted(long afterMs) throws Exception {
        Path p = h.store.resolve("config").resolve("consumerOffset.json");
        long end = System.currentTimeMillis() + 15_000;
        while (System.currentTimeMillis() < end) {
            if (Files.exists(p) && Files.getLastModifiedTime(p).toMillis() > afterMs) {
                return true;
            }
            Thread.sleep(100);
        }
        return false;
    }

    void beforeSnapshot(String name, boolean commitStep) throws Exception {
        waitForAll(name);
        Map<String, Object> prep = new LinkedHashMap<>();
        prep.put("gAllCaughtUpMs", allCaughtUpMs);
        if (commitStep) {
            stepCommit(name);
            prep.put("gStepCommittedMs", stepCommittedMs);
        }
        lagCommit(name);
        prep.put("lagGroupsCommittedMs", lagCommittedMs);
        // push consumers commit every 2 s (persistConsumerOffsetInterval), the broker persists every 5 s
        long after = Math.max(lagCommittedMs, allCaughtUpMs + 2500);
        boolean ok = waitConfigPersisted(after);
        prep.put("consumerOffsetJsonPersistedAfterMs", after);
        prep.put("consumerOffsetJsonPersisted", ok);
        if (!ok) {
            notes.put("persistWait" + name, "consumerOffset.json not rewritten within 15 s");
        }
        groupStats.put(name, consumeStats());
        topicStats.put(name, topicStatsRows());
        prep.put("adminStatsMs", System.currentTimeMillis());
        Map<String, Object> snap = new LinkedHashMap<>();
        snap.put("name", name);
        snap.put("path", "snapshots/" + name + "/store");
        snap.put("prepare", prep);
        snapshots.add(snap);
    }

    List<Map<String, Object>> consumeStats() {
        List<Map<String, Object>> out = new ArrayList<>();
        long at = System.currentTimeMillis();
        for (String g : GROUPS) {
            try {
                List<Map<String, Object>> rows = Compat.consumeStats(admin, g);
                rows.sort(Comparator.comparing((Map<String, Object> m) -> (String) m.get("topic"))
                    .thenComparing(m -> (Integer) m.get("queueId")));
                for (Map<String, Object> row : rows) {
                    Map<String, Object> full = new LinkedHashMap<>();
                    full.put("group", g);
                    full.putAll(row);
                    full.put("snapshotMs", at);
                    out.add(full);
                }
            } catch (Exception e) {
                notes.put("consumeStatsError" + g + "@" + at, e.getClass().getName() + ": " + e.getMessage());
            }
        }
        return out;
    }

    List<Map<String, Object>> topicStatsRows() {
        List<Map<String, Object>> out = new ArrayList<>();
        long at = System.currentTimeMillis();
        for (String t : topics().keySet()) {
            try {
                List<Map<String, Object>> rows = Compat.topicStats(admin, t);
                rows.sort(Comparator.comparingInt(m -> (Integer) m.get("queueId")));
                for (Map<String, Object> row : rows) {
                    row.put("snapshotMs", at);
                    out.add(row);
                }
            } catch (Exception e) {
                notes.put("topicStatsError" + t + "@" + at, e.getClass().getName() + ": " + e.getMessage());
            }
        }
        return out;
    }

    Map<String, Object> runtime() {
        Map<String, Object> m = new TreeMap<>();
        try {
            var table = Compat.runtimeStats(admin, wl.brokerAddr);
            for (Map.Entry<String, String> e : table.entrySet()) {
                String k = e.getKey();
                if (k.startsWith("commitLog") || k.startsWith("dispatch") || k.startsWith("msgPut")
                    || k.startsWith("putMessage") || k.equals("runtime") || k.startsWith("consumeQueue")) {
                    m.put(k, e.getValue());
                }
            }
            m.put("fetchedMs", System.currentTimeMillis());
        } catch (Exception e) {
            m.put("error", e.getClass().getName() + ": " + e.getMessage());
        }
        return m;
    }

    // =================================================================== the copy

    Thread trickleThread(String snapshot, AtomicBoolean stop) {
        Thread t = new Thread(() -> {
            while (!stop.get()) {
                int n = trickleSeq.getAndIncrement();
                byte[] body = Workload.textWith(trickleRnd, 20 + trickleRnd.nextInt(400));
                List<String> keys = List.of("trickle-" + n);
                Map<String, String> props = new LinkedHashMap<>();
                props.put("seqNo", String.valueOf(n));
                props.put("trickle", snapshot);
                Message msg = wl.buildMessage(Workload.T_NORMAL, "trickle", keys, props, body);
                Map<String, Object> r = wl.newRecord("trickle", "copy-" + snapshot, Workload.T_NORMAL, msg, body,
                    "text-small", props, keys);
                long start = System.currentTimeMillis();
                try {
                    SendResult res = trickle.send(msg);
                    wl.fillResult(r, msg, res, start, null, null);
                } catch (Exception e) {
                    wl.fillError(r, msg, e, start, null);
                }
                wl.sent.add(r);
                try {
                    Thread.sleep(TRICKLE_PAUSE_MS);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "trickle-" + snapshot);
        t.setDaemon(true);
        return t;
    }

    Map<String, Object> snapshotEntry(String name) {
        for (Map<String, Object> s : snapshots) {
            if (name.equals(s.get("name"))) {
                return s;
            }
        }
        throw new IllegalStateException(name);
    }

    void takeSnapshot(String name) throws Exception {
        Map<String, Object> snap = snapshotEntry(name);
        Path dest = h.out.resolve("snapshots").resolve(name).resolve("store");
        AtomicBoolean stop = new AtomicBoolean();
        Thread t = trickleThread(name, stop);
        t.start();
        Thread.sleep(TRICKLE_LEAD_MS);
        snap.put("brokerRuntimeBeforeCopy", runtime());
        Map<String, Object> copy = new StoreCopier(h.store, dest).copy();
        snap.putAll(copy);
        Thread.sleep(TRICKLE_LEAD_MS);
        stop.set(true);
        t.join(15_000);
        snap.put("brokerRuntimeAfterCopy", runtime());
        // the broker's own view (runtime stats) just before and just after the copy
        snap.put("commitLogMinOffset", runtimeLong(snap, "brokerRuntimeBeforeCopy", "commitLogMinOffset"));
        snap.put("commitLogMaxOffsetBeforeCopy", runtimeLong(snap, "brokerRuntimeBeforeCopy", "commitLogMaxOffset"));
        snap.put("commitLogMaxOffsetAfterCopy", runtimeLong(snap, "brokerRuntimeAfterCopy", "commitLogMaxOffset"));
        snap.putAll(describeStore(dest));
        Harness.log("snapshot " + name + ": " + copy.get("files") + " files, "
            + ((Number) copy.get("copyEndMs")).longValue() + " - " + ((Number) copy.get("copyStartMs")).longValue()
            + " ms, commitlog " + snap.get("commitlogFiles"));
    }

    @SuppressWarnings("unchecked")
    static Long runtimeLong(Map<String, Object> snap, String table, String key) {
        Object v = ((Map<String, Object>) snap.get(table)).get(key);
        try {
            return v == null ? null : Long.parseLong(String.valueOf(v));
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** File names of one store root, by area (for snapshots.json). */
    static Map<String, Object> describeStore(Path root) throws Exception {
        Map<String, Long> files = StoreCopier.listFiles(root);
        List<String> commitlog = new ArrayList<>();
        List<String> cq = new ArrayList<>();
        List<String> index = new ArrayList<>();
        List<String> config = new ArrayList<>();
        long end = -1;
        for (Map.Entry<String, Long> e : files.entrySet()) {
            String p = e.getKey();
            if (p.startsWith("commitlog/")) {
                String n = p.substring("commitlog/".length());
                commitlog.add(n);
                end = Math.max(end, Long.parseLong(n) + e.getValue());
            } else if (p.startsWith("consumequeue/")) {
                cq.add(p.substring("consumequeue/".length()));
            } else if (p.startsWith("index/")) {
                index.add(p.substring("index/".length()));
            } else if (p.startsWith("config/")) {
                config.add(p.substring("config/".length()));
            }
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("commitlogFiles", commitlog);
        m.put("commitlogFirstFileOffset", commitlog.isEmpty() ? null : Long.parseLong(commitlog.get(0)));
        m.put("commitlogFilesEnd", end < 0 ? null : end);
        m.put("consumeQueueFiles", cq);
        m.put("indexFiles", index);
        m.put("configFiles", config);
        m.put("topLevel", StoreCopier.sortedNames(root));
        return m;
    }

    /** s2 must hold at least one more full commitlog file than s1 (files before the one with the last record). */
    void checkGrowth() {
        long[] last = new long[2];
        for (int i = 0; i < 2; i++) {
            long start = ((Number) snapshotEntry(SNAPSHOTS.get(i)).get("copyStartMs")).longValue();
            long max = -1;
            synchronized (wl.sent) {
                for (Map<String, Object> r : wl.sent) {
                    Long off = commitLogOffset(r);
                    if (off != null && ((Number) r.get("sendEndMs")).longValue() < start) {
                        max = Math.max(max, off);
                    }
                }
            }
            last[i] = max;
        }
        long full1 = last[0] / MiB;
        long full2 = last[1] / MiB;
        notes.put("fullCommitlogFiles", Map.of("s1", full1, "s2", full2));
        if (full2 < full1 + 1) {
            throw new Harness.HarnessError("s2 does not hold a full commitlog file more than s1 (" + full1 + " vs "
                + full2 + ")");
        }
    }

    // =================================================================== retention

    Map<String, Long> retentionAreas() throws Exception {
        Map<String, Long> all = StoreCopier.listFiles(h.store);
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<String, Long> e : all.entrySet()) {
            String p = e.getKey();
            if (p.startsWith("commitlog/") || p.startsWith("consumequeue/") || p.startsWith("index/")) {
                out.put(p, e.getValue());
            }
        }
        return out;
    }

    Map<String, Object> brokerSettings(List<String> keys) throws Exception {
        Properties p = admin.getBrokerConfig(wl.brokerAddr);
        Map<String, Object> m = new LinkedHashMap<>();
        for (String k : keys) {
            m.put(k, p.getProperty(k));
        }
        return m;
    }

    void runRetention() throws Exception {
        Map<String, Long> before = retentionAreas();
        List<String> logsBefore = before.keySet().stream().filter(p -> p.startsWith("commitlog/"))
            .collect(Collectors.toList());
        List<String> aged = logsBefore.subList(0, RETENTION_FILES);
        List<String> keys = new ArrayList<>(RETENTION_KEYS);
        keys.add("cleanResourceInterval");
        Map<String, Object> original = brokerSettings(keys);
        retention.put("mechanism", "the " + RETENTION_FILES + " oldest commitlog files aged " + AGE_HOURS
            + " h (modification time), then DefaultMQAdminExt.updateBrokerConfig (UPDATE_BROKER_CONFIG):"
            + " fileReservedTime=" + RESERVED_HOURS + ", deleteWhen=every hour, cleanFileForciblyEnable=false;"
            + " the broker's CleanCommitLogService deletes the expired files, its consume-queue cleanup follows;"
            + " settings restored right after the deletion");
        retention.put("originalSettings", original);
        // The broker deletes, from the oldest on, the files older than fileReservedTime and stops at the first
        // younger one (MappedFileQueue.deleteExpiredFileByTime): ageing exactly the files to lose makes the
        // outcome independent of when, how often and how fast its clean runs happen on a loaded machine.
        // cleanFileForciblyEnable=false keeps a nearly full disk from deleting regardless of age.
        long agedTo = System.currentTimeMillis() - AGE_HOURS * 3_600_000L;
        for (String p : aged) {
            Files.setLastModifiedTime(h.store.resolve(p), java.nio.file.attribute.FileTime.fromMillis(agedTo));
        }
        retention.put("agedCommitlogFiles", aged.stream().map(p -> p.substring("commitlog/".length()))
            .collect(Collectors.toList()));
        Properties on = new Properties();
        on.setProperty("fileReservedTime", String.valueOf(RESERVED_HOURS));
        on.setProperty("deleteWhen", ALL_HOURS);
        on.setProperty("cleanFileForciblyEnable", "false");
        long appliedAt = System.currentTimeMillis();
        admin.updateBrokerConfig(wl.brokerAddr, on);
        retention.put("appliedSettings", new TreeMap<>(on));
        retention.put("appliedAtMs", appliedAt);
        retention.put("settingsSeenByBroker", brokerSettings(RETENTION_KEYS));
        retention.put("commitlogFilesBefore", logsBefore);

        // CleanCommitLogService runs first 60 s after the message store started, then every cleanResourceInterval;
        // a run stops at a file a reader still holds, which a later run deletes (forcibly after
        // destroyMapedFileIntervalForcibly, 120 s): 200 s covers both.
        long end = System.currentTimeMillis() + 200_000;
        long firstGone = 0;
        int gone;
        while (true) {
            gone = (int) aged.stream().filter(p -> !Files.exists(h.store.resolve(p))).count();
            if (gone > 0 && firstGone == 0) {
                firstGone = System.currentTimeMillis();
            }
            if (gone == aged.size()) {
                break;
            }
            if (System.currentTimeMillis() > end) {
                throw new Harness.HarnessError("retention deleted " + gone + " of " + RETENTION_FILES
                    + " aged commitlog files within 200 s");
            }
            h.checkDeadline("waiting for retention");
            Thread.sleep(25);
        }
        long seen = System.currentTimeMillis();
        // the broker's own settings again (only the aged files had expired, so nothing more can go either way)
        Properties off = new Properties();
        for (String k : RETENTION_KEYS) {
            off.setProperty(k, String.valueOf(original.get(k)));
        }
        admin.updateBrokerConfig(wl.brokerAddr, off);
        long restoredAt = System.currentTimeMillis();
        retention.put("firstDeletionSeenMs", firstGone);
        retention.put("deletionCompleteSeenMs", seen);
        retention.put("restoredAtMs", restoredAt);
        retention.put("restoredSettings", brokerSettings(RETENTION_KEYS));
        Harness.log("retention: " + gone + " commitlog file(s) deleted, " + (firstGone - appliedAt)
            + " ms after the settings were applied");

        // the consume-queue cleanup (same period, own thread) deletes queue/index files below the new minimum
        // and moves the queues' min offsets; wait until TopicBulk's min offsets moved and the files settled
        long cqEnd = System.currentTimeMillis() + 15L * CLEAN_RESOURCE_INTERVAL_MS;
        long cqSeen = 0;
        Map<String, Long> prev = null;
        while (System.currentTimeMillis() < cqEnd) {
            boolean moved = true;
            for (Map<String, Object> row : Compat.topicStats(admin, Workload.T_BULK)) {
                moved &= ((Number) row.get("minOffset")).longValue() > 0;
            }
            Map<String, Long> cur = retentionAreas();
            if (moved && cqSeen == 0) {
                cqSeen = System.currentTimeMillis();
            }
            if (moved && cur.equals(prev)) {
                break;
            }
            prev = cur;
            Thread.sleep(moved ? 300 : 100);
        }
        if (cqSeen == 0) {   // the later snapshots' lag statuses depend on it: fail, the build retries alone
            throw new Harness.HarnessError("TopicBulk min offsets did not move within "
                + (cqEnd - seen) + " ms of the commitlog deletion");
        }
        retention.put("queueCleanupSeenMs", cqSeen == 0 ? null : cqSeen);
        Map<String, Long> after = retentionAreas();
        List<String> delLog = new ArrayList<>();
        List<String> delCq = new ArrayList<>();
        List<String> delIndex = new ArrayList<>();
        for (String p : before.keySet()) {
            if (after.containsKey(p)) {
                continue;
            }
            if (p.startsWith("commitlog/")) {
                delLog.add(p.substring("commitlog/".length()));
            } else if (p.startsWith("consumequeue/")) {
                delCq.add(p.substring("consumequeue/".length()));
            } else {
                delIndex.add(p.substring("index/".length()));
            }
        }
        retention.put("deletedCommitlogFiles", delLog);
        retention.put("deletedConsumeQueueFiles", delCq);
        retention.put("deletedIndexFiles", delIndex);
        List<String> logsAfter = after.keySet().stream().filter(p -> p.startsWith("commitlog/"))
            .map(p -> p.substring("commitlog/".length())).collect(Collectors.toList());
        retention.put("commitlogFilesAfter", logsAfter);
        retention.put("commitlogFirstFileOffsetAfter", logsAfter.isEmpty() ? null : Long.parseLong(logsAfter.get(0)));
        retention.put("topicStatsAfter", topicStatsRows());
        retention.put("brokerRuntimeAfter", runtime());
        if (!delLog.equals(retention.get("agedCommitlogFiles"))) {
            throw new Harness.HarnessError("retention deleted commitlog files " + delLog + ", not the aged "
                + retention.get("agedCommitlogFiles"));
        }
    }

    // =================================================================== truth

    static Long commitLogOffset(Map<String, Object> r) {
        Object id = r.get("offsetMsgId");
        if (!(id instanceof String) || ((String) id).length() < 16 || !Boolean.TRUE.equals(r.get("acked"))) {
            return null;
        }
        String s = (String) id;
        return Long.parseUnsignedLong(s.substring(s.length() - 16), 16);
    }

    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> msgs;
        synchronized (wl.sent) {
            msgs = new ArrayList<>(wl.sent);
        }
        msgs.sort(Comparator.comparingInt(r -> (Integer) r.get("seq")));
        Long retainedFrom = (Long) retention.get("commitlogFirstFileOffsetAfter");
        Map<String, Map<String, Long>> perSnapshot = new LinkedHashMap<>();
        for (String s : SNAPSHOTS) {
            Map<String, Long> c = new LinkedHashMap<>();
            c.put("ackedBeforeCopyStart", 0L);
            c.put("guaranteedPresent", 0L);
            c.put("maybePresent", 0L);
            c.put("deletedByRetention", 0L);
            perSnapshot.put(s, c);
        }
        for (Map<String, Object> r : msgs) {
            Long off = commitLogOffset(r);
            r.put("commitLogOffset", off);
            String first = null;
            String maybe = null;
            List<String> in = new ArrayList<>();
            boolean deleted = off != null && retainedFrom != null && off < retainedFrom;
            if (off != null) {
                long startMs = ((Number) r.get("sendStartMs")).longValue();
                long endMs = ((Number) r.get("sendEndMs")).longValue();
                for (Map<String, Object> snap : snapshots) {
                    if (snap.get("copyStartMs") == null) {
                        continue;
                    }
                    String name = (String) snap.get("name");
                    long cs = ((Number) snap.get("copyStartMs")).longValue();
                    long ce = ((Number) snap.get("copyEndMs")).longValue();
                    Map<String, Long> c = perSnapshot.get(name);
                    if (endMs < cs) {
                        c.merge("ackedBeforeCopyStart", 1L, Long::sum);
                        if (first == null) {
                            first = name;
                        }
                        if (name.equals("s3") && deleted) {
                            c.merge("deletedByRetention", 1L, Long::sum);
                        } else {
                            in.add(name);
                            c.merge("guaranteedPresent", 1L, Long::sum);
                        }
                    } else if (startMs <= ce) {
                        maybe = name;
                        c.merge("maybePresent", 1L, Long::sum);
                    }
                }
                if (first == null) {
                    first = "final";
                }
            }
            r.put("snapshot", first);
            r.put("maybeSnapshot", maybe);
            r.put("inSnapshots", in);
            r.put("deletedByRetention", off == null ? null : deleted);
        }
        Harness.writeJsonLines(h.truth.resolve("messages.jsonl"), msgs);
        List<Map<String, Object>> cons;
        synchronized (wl.consumed) {
            cons = new ArrayList<>(wl.consumed);
        }
        Harness.writeJsonLines(h.truth.resolve("consumed.jsonl"), cons);
        for (Map.Entry<String, List<Map<String, Object>>> e : groupStats.entrySet()) {
            Harness.writeJsonLines(h.truth.resolve("consumer_groups_" + e.getKey() + ".jsonl"), e.getValue());
        }
        for (Map.Entry<String, List<Map<String, Object>>> e : topicStats.entrySet()) {
            Harness.writeJsonLines(h.truth.resolve("topic_stats_" + e.getKey() + ".jsonl"), e.getValue());
        }
        Harness.writeJsonLines(h.truth.resolve("consumer_groups.jsonl"), finalGroups);
        Harness.writeJsonLines(h.truth.resolve("topic_stats.jsonl"), finalTopics);
        Harness.writeJsonLines(h.truth.resolve("step_commits.jsonl"), stepCommits);
        Harness.writeJsonLines(h.truth.resolve("lag_commits.jsonl"), lagCommits);

        for (Map<String, Object> snap : snapshots) {
            Map<String, Long> c = perSnapshot.get((String) snap.get("name"));
            if (c != null) {
                snap.put("messages", c);
            }
        }
        Map<String, Object> sj = new LinkedHashMap<>();
        sj.put("rules", rules());
        sj.put("snapshots", snapshots);
        sj.put("retention", retention);
        Map<String, Object> fin = new LinkedHashMap<>();
        fin.put("name", "final");
        fin.put("path", "store");
        fin.put("note", "the live store after the clean shutdown (SIGTERM), not a copy");
        if (Files.isDirectory(h.store)) {
            fin.putAll(describeStore(h.store));
        }
        sj.put("final", fin);
        Harness.writeJson(h.truth.resolve("snapshots.json"), sj);

        run.put("topics", topics());
        Map<String, Object> groups = new LinkedHashMap<>();
        groups.put(Workload.G_ALL, "push, concurrently, TopicNormal + TopicBulk, always CONSUME_SUCCESS");
        groups.put(G_STEP, "pull; before s1 and s2 pulls up to maxOffset/2, right after s2 up to 3*maxOffset/4 of"
            + " every queue of TopicNormal and TopicBulk and commits that offset synchronously (step_commits.jsonl)");
        groups.put(G_SLOW, "pull, TopicBulk, commits only: before s1 max - max/10, before s2 and s3 + a quarter of"
            + " what was produced since (falls behind)");
        groups.put(G_STOP, "pull, TopicBulk, commits only: max before s1, never again (stopped)");
        groups.put(G_RESET, "pull, TopicBulk, commits only: max before s1, its s1 offset - " + RESET_BACK
            + " before s2 (reset backwards), max before s3");
        groups.put(G_LOST, "pull, TopicBulk, commits only: max/10 before s1, + a quarter of what was produced"
            + " before s2, nothing before s3 (retention deleted its unconsumed messages)");
        run.put("groups", groups);
        Map<String, Object> client = new LinkedHashMap<>();
        client.put("compressMsgBodyOverHowmuch", Workload.COMPRESS_OVER);
        client.put("retryTimesWhenSendFailed", 0);
        client.put("vipChannelEnabled", false);
        client.put("persistConsumerOffsetInterval", 2000);
        run.put("client", client);
        Map<String, Object> plan = new LinkedHashMap<>();
        for (int i = 0; i < PHASE_SENDS.length; i++) {
            plan.put("p" + (i + 1), Map.of(Workload.T_NORMAL, PHASE_SENDS[i][0], Workload.T_BULK, PHASE_SENDS[i][1]));
        }
        plan.put("trickle", "TopicNormal, 20-420 byte text, one send every ~" + TRICKLE_PAUSE_MS
            + " ms from " + TRICKLE_LEAD_MS + " ms before to " + TRICKLE_LEAD_MS + " ms after each copy");
        run.put("plan", plan);
        Map<String, Object> counts = wl.counts(msgs, cons);
        counts.put("perSnapshot", perSnapshot);
        run.put("counts", counts);
        run.put("timingsMs", h.timings);
        run.put("notes", notes);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }

    static Map<String, Object> rules() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("copyOrder", "config/, consumequeue/ (+batchconsumequeue/, consumequeue_ext/) and index/, commitlog/,"
            + " everything else, checkpoint, abort/abort.bak/lock; taken while the broker runs and a trickle"
            + " producer sends");
        m.put("snapshot", "first snapshot whose copyStartMs is later than the message's sendEndMs (acked before"
            + " the copy began, so its record is in that copy's commitlog unless retention deleted it);"
            + " 'final' = only the final store/; null = not acked");
        m.put("maybeSnapshot", "the snapshot whose copy window overlapped the send: the record may or may not be"
            + " in that copy");
        m.put("inSnapshots", "snapshots that surely hold the record (acked before the copy began, file not deleted)");
        m.put("deletedByRetention", "commitLogOffset lies below the first commitlog file left after retention");
        return m;
    }
}
