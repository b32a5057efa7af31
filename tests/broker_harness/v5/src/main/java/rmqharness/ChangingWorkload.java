package rmqharness;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.body.HARuntimeInfo;
import org.apache.rocketmq.remoting.protocol.header.ExchangeHAInfoRequestHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Stores that change under a reader: three 5.5.0 scenarios whose broker stores lose, rewrite or replace what an
 * earlier copy of them held. Own {@code main} (stores.py starts it for the three variants, {@code MAIN_CLASSES};
 * fingerprinted for all three, {@code SCENARIO_OF}); a {@link Harness} in its "-clean" mode serves the helpers.
 * Every process is a child JVM on 127.0.0.1; store roots live in {@code work/} (deleted at the end), what is kept
 * are store copies {@code copies/<node>/<NN-phase>/store} (NN counts every copy of the run, in time order) and
 * {@code truth/}.
 *
 * <ul>
 *   <li>{@code v5-failover}: a name server with the embedded controller ({@code enableElectUncleanMaster=true}) and
 *       a broker set of two nodes in controller mode (n1, n2; {@code allAckInSyncStateSet=true}). M1 acked by both;
 *       n2 SIGKILLed; once the SyncStateSet is {n1}, M2 acked by n1 alone; n1 SIGKILLed; once the controller lists
 *       no master, n2 restarted: elected master (unclean: it was not in the SyncStateSet), M3 sent to it (at the
 *       offsets M2 had on n1); n1 restarted: it rejoins as slave, truncates its commitlog to the consistent point of
 *       the two epoch caches and receives M3.</li>
 *   <li>{@code v5-resync}: a classic ASYNC_MASTER / SLAVE pair; the slave's HA connection runs through a valve in
 *       this JVM (a TCP relay, {@code haMasterAddress}); R1 replicated, the slave copied, SIGKILLed, its store
 *       deleted; R2 to the master; the slave restarted on an empty store while the valve lets only part of the
 *       stream through: copied while behind the first copy's write position; the valve opened, copied again.</li>
 *   <li>{@code v5-reprovisioned}: one broker {@code broker-a}: life 1 (P1), clean stop, copy; its store deleted and
 *       the same broker started on an empty store with other topics and messages (P2), hot copy; P3, hot copy.</li>
 * </ul>
 *
 * <p>The truth of what a copy holds is the broker's own reading of its store at the time of the copy: every record
 * from {@code commitLogMinOffset} to {@code commitLogMaxOffset} (runtime stats) read back through
 * {@code VIEW_MESSAGE_BY_ID} ({@code MQClientAPIImpl.viewMessage(addr, topic, offset)}), stepping by each record's
 * store size and over each file's end BLANK. A copy of a stopped broker gets the reading taken right before it was
 * stopped. Truth files: {@code sends.jsonl} (every send: msgId, offsetMsgId, commitLogOffset, the node that acked
 * it, topic, keys, queue id/offset, phase), {@code copies.json} (every copy in time order with its reading and, in
 * controller mode, the epoch cache / SyncStateSet / controller metadata), {@code events.jsonl} (the admin API's
 * views at each step), {@code <variant-suffix>.json} (what happened, e.g. {@code failover.json}: the election, the
 * truncation, which acked messages are gone from the cluster) and {@code run.json}.
 */
final class ChangingWorkload extends StandaloneScenario {
    static final String FAILOVER = "v5-failover";
    static final String RESYNC = "v5-resync";
    static final String REPROVISIONED = "v5-reprovisioned";
    static final String DLEDGER = "v5-dledger-truncated";
    /** A DLedger data file holds entries: a 48-byte header, then the commitlog record (its PHYSICALOFFSET). */
    static final int DLEDGER_ENTRY_HEADER = 48;
    static final long SEED = 20240620L;
    static final String CONTROLLER_GROUP = "HarnessController";
    static final String CONTROLLER_SELF_ID = "n0";
    static final String BROKER = Harness.BROKER_NAME;
    /** commitlog file size per variant: failover small enough that M1..M3 cross a file boundary. */
    static final Map<String, Integer> FILE_SIZE = Map.of(FAILOVER, 128 * 1024, RESYNC, 256 * 1024,
        REPROVISIONED, 1024 * 1024, DLEDGER, 128 * 1024);

    final String variant;
    final int fileSize;
    final Random rnd = new Random(SEED);
    final Map<String, Node> nodes = new LinkedHashMap<>();
    final List<Map<String, Object>> copies = new ArrayList<>();
    final List<Map<String, Object>> events = new ArrayList<>();
    final Map<String, Object> story = new LinkedHashMap<>();
    final Map<String, Object> notes = new LinkedHashMap<>();
    Workload wl;
    DefaultMQAdminExt admin;
    Process namesrv;
    String nsAddr;
    String ctlAddr;
    int copySeq;
    int producerSeq;
    /** A topic of the workload, named in VIEW_MESSAGE_BY_ID requests (the broker reads by offset only). */
    String viewTopic = "TopicView";
    /** v5-resync: the valve's address, the slave's HA master address. */
    String valveAddr;

    /** One broker process of the scenario (restarted on the same store unless the scenario deletes it). */
    static final class Node {
        final String id;
        final int port;
        final String addr;
        final Path store;
        Map<String, String> config;
        Path confFile;
        Process proc;
        int starts;

        Node(String id, int port, String addr, Path store) {
            this.id = id;
            this.port = port;
            this.addr = addr;
            this.store = store;
        }

        String logName() {
            return "broker-" + id + "-run" + starts;
        }
    }

    ChangingWorkload(Harness h, String variant) {
        super(h);
        this.variant = variant;
        this.fileSize = FILE_SIZE.get(variant);
    }

    /** Usage: {@code java -cp ... rmqharness.ChangingWorkload --variant v5-failover|v5-resync|v5-reprovisioned --out DIR}. */
    public static void main(String[] args) {
        StandaloneScenario.main(args, "ChangingWorkload", Set.of(FAILOVER, RESYNC, REPROVISIONED, DLEDGER),
            ChangingWorkload::new);
    }

    @Override
    void runScenario(Map<String, Object> run) throws Exception {
        Files.deleteIfExists(h.store); // several store roots (work/nodes/<id>/store), kept only as copies
        run.put("variant", variant);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", Harness.rocketmqJarVersion());
        run.put("scenario", "changing");
        run.put("seed", SEED);
        run.put("javaVersion", System.getProperty("java.version"));
        run.put("brokerName", BROKER);
        run.put("clusterName", Harness.CLUSTER);
        run.put("mappedFileSizeCommitLog", fileSize);
        switch (variant) {
            case FAILOVER:
                failover(run);
                break;
            case RESYNC:
                resync(run);
                break;
            case DLEDGER:
                dledger(run);
                break;
            default:
                reprovisioned(run);
        }
        for (Node n : nodes.values()) {
            kill(n);
        }
        admin.shutdown();
        namesrv.destroyForcibly(); // nothing of the name server (or the controller's Raft log) is kept
        namesrv.waitFor(30, TimeUnit.SECONDS);
        h.mark("end");
    }

    // =================================================================== v5-failover

    void failover(Map<String, Object> run) throws Exception {
        startNamesrv(true, run);
        Node n1 = node("n1");
        Node n2 = node("n2");
        for (Node n : List.of(n1, n2)) {
            Map<String, String> c = brokerConfig(n);
            // the controller assigns the replica id and the role (brokerId 0 / SYNC_MASTER when elected)
            c.remove("brokerId");
            c.remove("brokerRole");
            c.put("enableControllerMode", "true");
            c.put("controllerAddr", ctlAddr);
            c.put("syncBrokerMetadataPeriod", "1000");
            c.put("checkSyncStateSetPeriod", "1000");
            c.put("syncControllerMetadataPeriod", "5000");
            // the controller drops a broker from its live table this long after its last heartbeat
            c.put("controllerHeartBeatTimeoutMills", "3000");
            // a send is acked once every replica of the SyncStateSet has it (M1: both nodes, M2/M3: the master)
            c.put("allAckInSyncStateSet", "true");
            writeConfig(n, c);
        }
        run.put("brokerConfigs", Map.of(n1.id, n1.config, n2.id, n2.config));

        // ---- n1 first: the first broker of a set to ask is elected (epoch 1); then n2 joins as slave
        startBroker(n1);
        Map<String, Object> elected = waitMaster(n1);
        story.put("n1Elected", elected);
        event("n1-master", elected);
        startBroker(n2);
        story.put("n2InSync", waitInSync(n1, n2));
        event("n2-in-sync", null);
        wl = new Workload(h, nsAddr, n1.addr, rnd);
        wl.admin = admin;
        Map<String, Integer> topics = Map.of("TopicFailover", 2);
        createTopics(n1, topics);
        h.mark("topicsCreated");

        // ---- M1, acked by both (allAckInSyncStateSet), replicated
        send("M1", "TopicFailover", 100, 600, 1400, n1);
        story.put("n2CaughtUpAfterM1", waitCaughtUp(n2, n1));
        Map<String, Object> n1View = brokerView(n1);
        Map<String, Object> n2View = brokerView(n2);
        copy(n1, "in-sync", "hot", n1View);
        copy(n2, "in-sync", "hot", n2View);
        event("after-M1", null);

        // ---- the slave goes away; the master shrinks its SyncStateSet to itself
        Map<String, Object> n2Last = brokerView(n2);
        story.put("n2Killed", kill(n2));
        copy(n2, "slave-stopped", "after SIGKILL", n2Last);
        story.put("syncStateSetShrunk", waitSyncStateSet(n1, 1));
        event("sync-state-set-shrunk", null);

        // ---- M2, acked by n1 alone, then n1 dies
        send("M2", "TopicFailover", 60, 600, 1400, n1);
        copy(n1, "m2-acked", "hot", brokerView(n1));
        event("after-M2", null);
        Map<String, Object> n1Last = brokerView(n1);
        story.put("n1Killed", kill(n1));
        copy(n1, "old-master-down", "after SIGKILL", n1Last);
        story.put("noMaster", waitNoMaster());
        event("no-master", null);

        // ---- n2 comes back: not in the SyncStateSet, elected only because unclean elections are allowed
        startBroker(n2);
        Map<String, Object> reElected = waitMaster(n2);
        story.put("n2Elected", reElected);
        event("n2-master", reElected);
        createTopics(n2, topics);
        send("M3", "TopicFailover", 110, 900, 1600, n2);
        copy(n2, "new-master-m3", "hot", brokerView(n2));
        event("after-M3", null);

        // ---- n1 comes back: slave of n2, truncates to the consistent point, receives M3
        startBroker(n1);
        story.put("n1Rejoined", waitCaughtUp(n1, n2));
        story.put("n1InSyncAgain", waitInSync(n2, n1));
        event("n1-rejoined", null);
        Map<String, Object> n1Rejoined = brokerView(n1);
        copy(n1, "rejoined", "hot", n1Rejoined);
        copy(n2, "rejoined", "hot", brokerView(n2));
        story.put("n1TruncationLog", ControllerWorkload.grep(h.logs.resolve(n1.logName() + ".log"), List.of(
            "Receive handshake", "master epoch entries", "local epoch entries", "truncateOffset is",
            "Truncate slave log", "truncate", "Truncate", "consistent point", "Change ha to slave",
            "Begin to change to slave")));
        story.put("n2ElectionLog", ControllerWorkload.grep(h.logs.resolve(n2.logName() + ".log"), List.of(
            "Change ha to master", "Begin to change to master", "TruncateOffset is", "Failed to elect",
            "no master", "elect")));
        story.put("fate", fate(List.of(n1, n2)));
        h.mark("fateChecked");
    }

    /** Waits until the node is master (epoch cache brokerId 0) and the name server routes broker-a to it. */
    Map<String, Object> waitMaster(Node n) throws Exception {
        long start = System.currentTimeMillis();
        Object r = waitUntil(n.id + " elected master and routed", 90_000, () -> {
            alive(n);
            var c = admin.getBrokerEpochCache(n.addr);
            Map<Long, String> addrs = Compat.brokerAddrs(admin, BROKER);
            if (c != null && c.getBrokerId() == 0 && addrs != null && n.addr.equals(addrs.get(0L))) {
                return ControllerWorkload.epochCache(c);
            }
            return null;
        });
        h.mark(n.id + "Master" + n.starts);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("waitedMs", System.currentTimeMillis() - start);
        m.put("epochCache", r);
        return m;
    }

    /** Waits until the controller's SyncStateSet of broker-a is {master, slave} with the given master. */
    Map<String, Object> waitInSync(Node master, Node slave) throws Exception {
        long start = System.currentTimeMillis();
        Object r = waitUntil(slave.id + " in the SyncStateSet of " + master.id, 90_000, () -> {
            alive(master);
            alive(slave);
            BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
            if (ri != null && master.addr.equals(ri.getMasterAddress()) && ri.getInSyncReplicas() != null
                && ri.getInSyncReplicas().stream().anyMatch(x -> slave.addr.equals(x.getBrokerAddress()))) {
                return ControllerWorkload.replicas(ri);
            }
            return null;
        });
        h.mark(slave.id + "InSync" + slave.starts);
        return Map.of("waitedMs", System.currentTimeMillis() - start, "inSyncStateData", r);
    }

    /** Waits until the controller's SyncStateSet of broker-a has {@code size} members. */
    Map<String, Object> waitSyncStateSet(Node master, int size) throws Exception {
        long start = System.currentTimeMillis();
        Object r = waitUntil("a SyncStateSet of " + size, 60_000, () -> {
            alive(master);
            BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
            return ri != null && ri.getInSyncReplicas() != null && ri.getInSyncReplicas().size() == size
                ? ControllerWorkload.replicas(ri) : null;
        });
        h.mark("syncStateSet" + size);
        return Map.of("waitedMs", System.currentTimeMillis() - start, "inSyncStateData", r);
    }

    /** Waits until the controller lists no master, and its master epoch stayed the same for 2 s. */
    Map<String, Object> waitNoMaster() throws Exception {
        long start = System.currentTimeMillis();
        int[] epoch = {Integer.MIN_VALUE};
        long[] since = {0};
        Object r = waitUntil("the controller to list no master", 60_000, () -> {
            BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
            boolean none = ri != null && (ri.getMasterBrokerId() == null || ri.getMasterAddress() == null
                || ri.getMasterAddress().isEmpty());
            if (!none) {
                return null;
            }
            if (ri.getMasterEpoch() != epoch[0]) {
                epoch[0] = ri.getMasterEpoch();
                since[0] = System.currentTimeMillis();
                return null;
            }
            return System.currentTimeMillis() - since[0] >= 2000 ? ControllerWorkload.replicas(ri) : null;
        });
        h.mark("noMaster");
        return Map.of("waitedMs", System.currentTimeMillis() - start, "inSyncStateData", r);
    }

    BrokerReplicasInfo.ReplicasInfo replicasInfo() throws Exception {
        BrokerReplicasInfo info = admin.getInSyncStateData(ctlAddr, List.of(BROKER));
        return info == null ? null : info.getReplicasInfoTable().get(BROKER);
    }

    /**
     * Where every send is at the end (acked or not), asked of the live nodes (their reading of their commitlog: the
     * offset of the record with its msgId) and of the cluster (admin viewMessage by msgId, through the index of
     * the routed brokers): the acked ones no node holds any more, and the unacked ones that are stored anyway.
     */
    Map<String, Object> fate(List<Node> live) throws Exception {
        Map<String, Map<String, Long>> held = new LinkedHashMap<>();
        for (Node n : live) {
            Map<String, Long> m = new HashMap<>();
            for (Object o : (List<?>) readStore(n).get("records")) {
                Map<?, ?> rec = (Map<?, ?>) o;
                m.put((String) rec.get("msgId"), (Long) rec.get("commitLogOffset"));
            }
            held.put(n.id, m);
        }
        List<Map<String, Object>> rows = new ArrayList<>();
        List<String> gone = new ArrayList<>();
        List<String> storedUnacked = new ArrayList<>();
        Map<String, Integer> goneByPhase = new TreeMap<>();
        Map<String, Integer> storedUnackedByPhase = new TreeMap<>();
        List<Map<String, Object>> all = sends();
        all.sort(java.util.Comparator.comparingInt(r -> (Integer) r.get("seq")));
        for (Map<String, Object> s : all) {
            String msgId = (String) s.get("msgId");
            boolean acked = Boolean.TRUE.equals(s.get("acked"));
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("msgId", msgId);
            row.put("phase", s.get("phase"));
            row.put("acked", acked);
            row.put("sendStatus", s.get("sendStatus"));
            row.put("ackedBy", s.get("ackedBy"));
            row.put("commitLogOffset", s.get("commitLogOffset"));
            Map<String, Object> at = new LinkedHashMap<>();
            boolean anywhere = false;
            for (Map.Entry<String, Map<String, Long>> e : held.entrySet()) {
                Long off = e.getValue().get(msgId);
                at.put(e.getKey(), off);
                anywhere |= off != null;
            }
            row.put("offsetOn", at);
            Object byId;
            try {
                MessageExt m = admin.viewMessage((String) s.get("topic"), msgId);
                byId = m == null ? null : Map.of("commitLogOffset", m.getCommitLogOffset(), "storeHost",
                    String.valueOf(m.getStoreHost()));
            } catch (Exception e) {
                byId = null;
                row.put("viewMessageError", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            row.put("viewMessageByMsgId", byId);
            boolean present = anywhere || byId != null;
            row.put("inCluster", present);
            if (acked && !present) {
                gone.add(msgId);
                goneByPhase.merge((String) s.get("phase"), 1, Integer::sum);
            } else if (!acked && present) {
                storedUnacked.add(msgId);
                storedUnackedByPhase.merge((String) s.get("phase"), 1, Integer::sum);
            }
            rows.add(row);
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("goneAckedMsgIds", gone);
        r.put("goneByPhase", goneByPhase);
        r.put("storedUnackedMsgIds", storedUnacked);
        r.put("storedUnackedByPhase", storedUnackedByPhase);
        r.put("messages", rows);
        return r;
    }

    // =================================================================== v5-resync

    void resync(Map<String, Object> run) throws Exception {
        startNamesrv(false, run);
        Node master = node("master");
        Node slave = node("slave");
        try (Valve valve = new Valve(h.loopback, master.port + 1)) {
            Map<String, String> mc = brokerConfig(master);
            writeConfig(master, mc);
            Map<String, String> sc = brokerConfig(slave);
            sc.put("brokerId", "1");
            sc.put("brokerRole", "SLAVE");
            // replicate through the valve, not from the address the name server hands out: a configured
            // haMasterAddress stops the slave from taking the master's from its registrations
            // (updateMasterHAServerAddrPeriodically=false), but 5.5.0 drops the value itself (see pointHaClient)
            sc.put("haMasterAddress", valveAddr = Harness.hostPort(h.loopback, valve.port));
            writeConfig(slave, sc);
            run.put("brokerConfigs", Map.of(master.id, mc, slave.id, sc));
            run.put("valvePort", valve.port);

            startBroker(master);
            waitRouted(master, 0L);
            startBroker(slave);
            waitRouted(slave, 1L);
            pointHaClient(slave, master);
            // connected before anything is written: the first life replicates from offset 0
            story.put("slaveConnected", waitUntil("the slave's HA connection", 30_000, () -> {
                alive(slave);
                HARuntimeInfo ha = admin.getBrokerHAStatus(master.addr);
                return ha.getHaConnectionInfo() != null && !ha.getHaConnectionInfo().isEmpty()
                    ? haStatus(master) : null;
            }));
            wl = new Workload(h, nsAddr, master.addr, rnd);
            wl.admin = admin;
            createTopics(master, Map.of("TopicResync", 4));
            h.mark("topicsCreated");

            // ---- R1 replicated: the slave's first life, copied
            send("R1", "TopicResync", 190, 3000, 4000, master);
            story.put("slaveCaughtUpAfterR1", waitCaughtUp(slave, master));
            Map<String, Object> first = brokerView(slave);
            Map<String, Object> c1 = copy(slave, "synced", "hot", first);
            c1.put("masterMaxOffset", maxOffset(master));

            // ---- the slave is lost with its disk; the master goes on
            story.put("slaveKilled", kill(slave));
            Harness.deleteTree(slave.store);
            story.put("slaveStoreDeleted", !Files.exists(slave.store));
            send("R2", "TopicResync", 12, 3000, 4000, master);
            long masterMax = maxOffset(master);
            long lastFile = masterMax - masterMax % fileSize;
            long firstMax = (Long) first.get("maxOffset");
            // an empty slave asks for offset 0; a classic master then starts at the beginning of its last file
            // (DefaultHAConnection): let through about half of what separates that from the first copy's end
            long budget = (firstMax - lastFile) / 2;
            if (budget < 2 * 32 * 1024) {
                throw new Harness.HarnessError("the first copy ends only " + (firstMax - lastFile)
                    + " bytes past the master's last file start " + lastFile + ": too little to stop the resync within");
            }
            Map<String, Object> plan = new LinkedHashMap<>();
            plan.put("masterMaxOffset", masterMax);
            plan.put("masterLastFileStart", lastFile);
            plan.put("firstCopyMaxOffset", firstMax);
            plan.put("valveBudgetBytes", budget);
            story.put("resyncPlan", plan);

            // ---- the slave restarted on an empty store, the valve stops the stream part way
            valve.limit(budget);
            startBroker(slave);
            pointHaClient(slave, master);
            story.put("partialResync", waitValveDrained(valve, slave));
            Map<String, Object> partial = brokerView(slave);
            Map<String, Object> c2 = copy(slave, "resyncing", "hot, replication held by the valve", partial);
            c2.put("masterMaxOffset", maxOffset(master));
            c2.put("valveForwardedBytes", valve.forwarded());
            c2.put("maxOffsetAfterCopy", maxOffset(slave));

            // ---- the valve opens: the slave catches up
            valve.open();
            story.put("slaveCaughtUpAfterResync", waitCaughtUp(slave, master));
            Map<String, Object> c3 = copy(slave, "caught-up", "hot", brokerView(slave));
            c3.put("masterMaxOffset", maxOffset(master));
            copy(master, "caught-up", "hot", brokerView(master));
            story.put("haStatus", haStatus(master));
            story.put("valveConnections", valve.connections);
        }
    }

    /**
     * Gives the slave's HA client the valve's address with the broker's own EXCHANGE_BROKER_HA_INFO request (what
     * a master sends its slaves in slave-acting-master mode). Needed on 5.5.0: BrokerController.initialize hands
     * the configured {@code haMasterAddress} to the message store before DefaultMessageStore.start has created the
     * HA client (DefaultHAService.init), so DefaultHAService.updateHaMasterAddress drops it (haClient == null) and
     * the slave logs "HAClient connect to master null failed" every 5 s.
     */
    void pointHaClient(Node slave, Node master) throws Exception {
        ExchangeHAInfoRequestHeader header = new ExchangeHAInfoRequestHeader();
        header.setMasterHaAddress(valveAddr);
        header.setMasterAddress(master.addr);
        header.setMasterFlushOffset(0L);
        RemotingCommand req = RemotingCommand.createRequestCommand(RequestCode.EXCHANGE_BROKER_HA_INFO, header);
        RemotingCommand resp = api().getRemotingClient().invokeSync(slave.addr, req, 5000);
        if (resp == null || resp.getCode() != 0) {
            throw new Harness.HarnessError("EXCHANGE_BROKER_HA_INFO to " + slave.id + " failed: "
                + (resp == null ? null : resp.getCode() + " " + resp.getRemark()));
        }
        notes.put("haMasterAddress", "5.5.0 drops the configured haMasterAddress of a classic slave (its HA client "
            + "does not exist yet when BrokerController.initialize applies it); the harness sets it with "
            + "EXCHANGE_BROKER_HA_INFO after each slave start");
        h.mark(slave.id + "HaPointed" + slave.starts);
    }

    /** Waits until the valve forwarded its whole budget and the slave's max offset stayed put for 1.5 s. */
    Map<String, Object> waitValveDrained(Valve valve, Node slave) throws Exception {
        long start = System.currentTimeMillis();
        long[] last = {-1};
        long[] since = {0};
        Object r = waitUntil("the slave to stop where the valve held the stream", 60_000, () -> {
            alive(slave);
            if (!valve.exhausted()) {
                return null;
            }
            long max = maxOffset(slave);
            if (max != last[0]) {
                last[0] = max;
                since[0] = System.currentTimeMillis();
                return null;
            }
            return System.currentTimeMillis() - since[0] >= 1500 ? max : null;
        });
        h.mark("resyncHeld");
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("waitedMs", System.currentTimeMillis() - start);
        m.put("slaveMaxOffset", r);
        m.put("valveForwardedBytes", valve.forwarded());
        return m;
    }

    Map<String, Object> haStatus(Node master) {
        Map<String, Object> m = new LinkedHashMap<>();
        try {
            HARuntimeInfo ha = admin.getBrokerHAStatus(master.addr);
            m.put("master", ha.isMaster());
            m.put("masterCommitLogMaxOffset", ha.getMasterCommitLogMaxOffset());
            m.put("inSyncSlaveNums", ha.getInSyncSlaveNums());
            List<Map<String, Object>> conns = new ArrayList<>();
            for (HARuntimeInfo.HAConnectionRuntimeInfo c : ha.getHaConnectionInfo()) {
                conns.add(Map.of("addr", String.valueOf(c.getAddr()), "slaveAckOffset", c.getSlaveAckOffset(),
                    "diff", c.getDiff(), "inSync", c.isInSync()));
            }
            m.put("connections", conns);
        } catch (Exception e) {
            m.put("error", e.toString());
        }
        return m;
    }

    // =================================================================== v5-dledger-truncated

    /**
     * Three brokers whose commitlog is one DLedger (Raft) group. D1 committed on all three. D2: both followers
     * frozen (SIGSTOP), D2 sent to the leader at once: appended by the leader, its sends fail (no quorum ack
     * within DLedger's wait), but the pushes wait in the frozen followers' socket buffers: once resumed they
     * append them, and the leader commits them: messages whose producer saw an error, in every node's log. D3:
     * both followers SIGKILLed, D3 sent: appended by the leader alone, failed; the leader SIGKILLed. The two
     * followers restarted: one of them is elected (a new term), D4 committed at the indexes (and data positions)
     * D3 had on the old leader; the old leader restarted: a follower now, it truncates the entries the new leader
     * does not have (DLedgerMmapFileStore.truncate) and appends D4.
     */
    void dledger(Map<String, Object> run) throws Exception {
        startNamesrv(false, run);
        List<Node> group = List.of(node("n0"), node("n1"), node("n2"));
        Set<Integer> taken = new HashSet<>();
        for (Node n : group) {
            for (int p = n.port - 2; p <= n.port + 1; p++) {
                taken.add(p);
            }
        }
        List<String> peers = new ArrayList<>();
        for (Node n : group) {
            int dport = Harness.freePort(h.loopback, 0, 0, taken);
            taken.add(dport);
            peers.add(n.id + "-" + Harness.hostPort(h.loopback, dport));
        }
        Map<String, Object> confs = new LinkedHashMap<>();
        for (Node n : group) {
            Map<String, String> c = brokerConfig(n);
            c.put("enableDLegerCommitLog", "true");
            c.put("dLegerGroup", BROKER);
            c.put("dLegerPeers", String.join(";", peers));
            c.put("dLegerSelfId", n.id);
            writeConfig(n, c);
            confs.put(n.id, c);
        }
        run.put("brokerConfigs", confs);
        run.put("dLegerPeers", String.join(";", peers));
        notes.put("maxOffset", "a DLedger broker's commitLogMaxOffset is its committed position "
            + "(DLedgerCommitLog.getMaxOffset = getCommittedPos): entries appended but not committed lie past it in "
            + "the data files, and the broker's reading (copies.json records) stops there");
        for (Node n : group) {
            launch(n);
        }
        for (Node n : group) {
            booted(n);
        }
        Node leader = waitLeader(group);
        story.put("firstLeader", leader.id);
        event("leader-" + leader.id, null);
        wl = new Workload(h, nsAddr, leader.addr, rnd);
        wl.admin = admin;
        Map<String, Integer> topics = Map.of("TopicRaft", 2);
        createTopics(leader, topics);
        h.mark("topicsCreated");
        List<Node> followers = new ArrayList<>(group);
        followers.remove(leader);

        // ---- D1: committed (a quorum of the three), on every node
        send("D1", "TopicRaft", 80, 600, 1400, leader);
        for (Node f : followers) {
            story.put(f.id + "CaughtUpAfterD1", waitCaughtUp(f, leader));
        }
        for (Node n : group) {
            copy(n, "in-sync", "hot", brokerView(n));
        }
        event("after-D1", null);

        // ---- D2: followers frozen; the sends fail, the entries reach the followers once they resume
        for (Node f : followers) {
            signal(f, "STOP");
        }
        story.put("d2SendStatuses", statuses(send("D2", "TopicRaft", 3, 600, 1400, true)));
        for (Node f : followers) {
            signal(f, "CONT");
        }
        for (Node f : followers) {
            story.put(f.id + "CaughtUpAfterD2", waitCaughtUp(f, leader));
        }
        story.put("leaderAfterD2", waitLeader(group).id);
        copy(leader, "after-failed-d2", "hot", brokerView(leader));
        event("after-D2", null);

        // ---- D3: followers dead; the leader appends alone, the sends fail; then the leader dies. The leader
        // steps down once its followers' heartbeats have been missing for a few seconds (DLedger's
        // maxHeartBeatLeak x heartBeatTimeIntervalMs), so the producer holds the route before they are killed.
        DefaultMQProducer d3 = startProducer("D3", "TopicRaft");
        for (Node f : followers) {
            story.put(f.id + "Killed", kill(f));
        }
        List<Map<String, Object>> d3Sends = send(d3, "D3", "TopicRaft", 6, 600, 1400, true);
        story.put("d3SendStatuses", statuses(d3Sends));
        reachedTheLeader(d3Sends, leader);
        Map<String, Object> oldLeaderLast = brokerView(leader);
        story.put("oldLeaderKilled", kill(leader));
        copy(leader, "old-leader-down", "after SIGKILL", oldLeaderLast);

        // ---- the followers come back without the old leader: a new term, D4 where D3 was
        for (Node f : followers) {
            launch(f);
        }
        for (Node f : followers) {
            booted(f);
        }
        Node next = waitLeader(followers);
        story.put("secondLeader", next.id);
        event("leader-" + next.id, null);
        createTopics(next, topics);
        send("D4", "TopicRaft", 40, 900, 1600, next);
        copy(next, "new-leader-d4", "hot", brokerView(next));

        // ---- the old leader rejoins as a follower: truncates D3, appends D4
        startBroker(leader);
        story.put("oldLeaderRejoined", waitCaughtUp(leader, next));
        event("old-leader-rejoined", null);
        for (Node n : group) {
            copy(n, "rejoined", "hot", brokerView(n));
        }
        List<String> needles = List.of("TRUNCATE", "to TRUNCATE", "[Push-" + leader.id + "]");
        story.put("oldLeaderTruncationLog", ControllerWorkload.grep(h.logs.resolve(leader.logName() + ".log"),
            needles));
        story.put("newLeaderPushLog", ControllerWorkload.grep(h.logs.resolve(next.logName() + ".log"), needles));
        story.put("fate", fate(group));
        h.mark("fateChecked");
    }

    static List<String> statuses(List<Map<String, Object>> sends) {
        List<String> out = new ArrayList<>();
        for (Map<String, Object> r : sends) {
            if (Boolean.TRUE.equals(r.get("acked"))) {
                throw new Harness.HarnessError(r.get("phase") + " send " + r.get("msgId")
                    + " was acked without a quorum");
            }
            out.add(r.get("sendStatus") + (r.get("error") == null ? "" : " " + r.get("error")));
        }
        return out;
    }

    /**
     * Every send reached {@code leader} while it still led: the producer found a master (it gave the message its
     * id only then) and the leader had not stepped down. Otherwise the phase appended nothing and the variant
     * would not hold what it is built to hold: a harness error, and the variant is built again.
     */
    void reachedTheLeader(List<Map<String, Object>> sends, Node leader) throws Exception {
        for (Map<String, Object> r : sends) {
            if (r.get("msgId") == null) {
                throw new Harness.HarnessError(r.get("phase") + " send never reached " + leader.id + ": "
                    + r.get("error"));
            }
        }
        String role = role(leader);
        if (role == null || !role.endsWith("MASTER")) {
            throw new Harness.HarnessError(leader.id + " stepped down (" + role + ") during the sends of "
                + sends.get(0).get("phase"));
        }
    }

    /** Waits until the name server routes broker-a's brokerId 0 to one of {@code candidates} and it says master. */
    Node waitLeader(List<Node> candidates) throws Exception {
        long start = System.currentTimeMillis();
        Object r = waitUntil("a DLedger leader among " + candidates.stream().map(n -> n.id).toList(), 90_000,
            () -> {
                Map<Long, String> addrs = Compat.brokerAddrs(admin, BROKER);
                for (Node n : candidates) {
                    alive(n);
                    if (addrs != null && n.addr.equals(addrs.get(0L)) && role(n).endsWith("MASTER")) {
                        return n;
                    }
                }
                return null;
            });
        Node n = (Node) r;
        h.mark(n.id + "Leader");
        story.put(n.id + "LeaderAfterMs", System.currentTimeMillis() - start);
        return n;
    }

    /** kill -STOP / -CONT of a broker's JVM. */
    void signal(Node n, String sig) throws Exception {
        Process k = new ProcessBuilder("kill", "-" + sig, String.valueOf(n.proc.pid())).inheritIO().start();
        if (!k.waitFor(10, TimeUnit.SECONDS) || k.exitValue() != 0) {
            throw new Harness.HarnessError("kill -" + sig + " " + n.id + " failed");
        }
        h.mark(n.id + sig);
    }

    // =================================================================== v5-reprovisioned

    void reprovisioned(Map<String, Object> run) throws Exception {
        startNamesrv(false, run);
        Node b = node("broker-a");
        writeConfig(b, brokerConfig(b));
        run.put("brokerConfigs", Map.of(b.id, b.config));

        // ---- life 1
        startBroker(b);
        waitRouted(b, 0L);
        wl = new Workload(h, nsAddr, b.addr, rnd);
        wl.admin = admin;
        createTopics(b, Map.of("TopicLife1", 4, "TopicShared", 2));
        send("P1", "TopicLife1", 90, 200, 2500, b);
        send("P1", "TopicShared", 30, 200, 2500, b);
        Map<String, Object> life1 = brokerView(b);
        story.put("life1Stopped", stopClean(b));
        copy(b, "first-life", "after SIGTERM", life1);

        // ---- the same broker name on an empty store: other topics, other queue counts, other messages
        Harness.deleteTree(b.store);
        story.put("storeDeleted", !Files.exists(b.store));
        startBroker(b);
        waitRouted(b, 0L);
        createTopics(b, Map.of("TopicLife2", 3, "TopicShared", 1));
        send("P2", "TopicShared", 25, 50, 900, b);
        send("P2", "TopicLife2", 55, 50, 900, b);
        copy(b, "second-life", "hot", brokerView(b));
        // past life 1's end: a reader resuming at life 1's max offset lands inside a life-2 record
        send("P3", "TopicLife2", 80, 1000, 3000, b);
        copy(b, "second-life-more", "hot", brokerView(b));
    }

    // =================================================================== processes

    Node node(String id) throws IOException {
        Set<Integer> taken = new HashSet<>();
        for (Node n : nodes.values()) {
            for (int p = n.port - 2; p <= n.port + 1; p++) {
                taken.add(p);
            }
        }
        for (String addr : new String[] {nsAddr, ctlAddr}) {
            if (addr != null) {
                taken.add(Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1)));
            }
        }
        int port = Harness.freePort(h.loopback, 2, 1, taken);
        Node n = new Node(id, port, Harness.hostPort(h.loopback, port), h.work.resolve("nodes/" + id + "/store"));
        nodes.put(id, n);
        return n;
    }

    Map<String, String> brokerConfig(Node n) {
        Map<String, String> c = h.brokerConfig(nsAddr, n.port);
        c.put("storePathRootDir", n.store.toString());
        c.put("storePathCommitLog", n.store.resolve("commitlog").toString());
        c.put("mappedFileSizeCommitLog", String.valueOf(fileSize));
        return c;
    }

    void writeConfig(Node n, Map<String, String> c) throws IOException {
        n.config = c;
        n.confFile = h.work.resolve(n.id + ".conf");
        Harness.writeProperties(n.confFile, c);
        Files.copy(n.confFile, h.logs.resolve("broker-" + n.id + ".conf"));
    }

    void startNamesrv(boolean controller, Map<String, Object> run) throws Exception {
        int nsPort = Harness.freePort(h.loopback, 0, 0);
        nsAddr = Harness.hostPort(h.loopback, nsPort);
        Map<String, String> c = new LinkedHashMap<>();
        c.put("listenPort", String.valueOf(nsPort));
        c.put("bindAddress", h.loopback);
        c.put("rocketmqHome", h.work.resolve("rmqhome").toString());
        c.put("kvConfigPath", h.work.resolve("namesrv/kvConfig.json").toString());
        c.put("configStorePath", h.work.resolve("namesrv/namesrv.properties").toString());
        c.put("scanAvailableNameSrv", "false");
        if (controller) {
            // the embedded DLedger controller, configured by the same file (as in ControllerWorkload)
            ctlAddr = Harness.hostPort(h.loopback, Harness.freePort(h.loopback, 0, 0, Set.of(nsPort)));
            c.put("enableControllerInNamesrv", "true");
            c.put("controllerType", "DLedger");
            c.put("controllerDLegerGroup", CONTROLLER_GROUP);
            c.put("controllerDLegerPeers", CONTROLLER_SELF_ID + "-" + ctlAddr);
            c.put("controllerDLegerSelfId", CONTROLLER_SELF_ID);
            c.put("controllerStorePath", h.work.resolve("controller-store").toString());
            c.put("mappedFileSize", String.valueOf(4 * 1024 * 1024));
            c.put("scanNotActiveBrokerInterval", "1000");
            c.put("scanInactiveMasterInterval", "2000");
            // a replica outside the SyncStateSet may be elected when no member of it is alive
            c.put("enableElectUncleanMaster", "true");
        }
        Path conf = h.work.resolve("namesrv.conf");
        Harness.writeProperties(conf, c);
        Files.copy(conf, h.logs.resolve("namesrv.conf"));
        run.put("namesrvConfig", c);
        run.put("namesrvAddr", nsAddr);
        run.put("controllerAddr", ctlAddr);
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_namesrv.xml"), h.logs.resolve("namesrv.log"));
        namesrv = h.startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "192m",
            List.of("-c", conf.toString()));
        h.addChild(namesrv);
        Path out = h.logs.resolve("namesrv.out");
        h.waitForLine("namesrv", namesrv, out, "The Name Server boot success", 60);
        if (controller) {
            h.waitForLine("namesrv", namesrv, out, "The ControllerManager boot success", 60);
        }
        h.mark("namesrvStarted");
        admin = new DefaultMQAdminExt("harness-admin-" + ProcessHandle.current().pid());
        admin.setNamesrvAddr(nsAddr);
        admin.setClientIP(h.loopback);
        admin.setVipChannelEnabled(false);
        admin.setInstanceName("harness-admin");
        admin.start();
        if (controller) {
            story.put("controllerLeader", waitUntil("the controller to become leader", 60_000, () -> {
                var m = admin.getControllerMetaData(ctlAddr);
                return m != null && m.isLeader() ? ControllerWorkload.metaData(m) : null;
            }));
            h.mark("controllerLeader");
        }
    }

    void startBroker(Node n) throws Exception {
        launch(n);
        booted(n);
    }

    void launch(Node n) throws Exception {
        n.starts++;
        String name = n.logName();
        Harness.writeLogback(h.work.resolve("rmqhome/conf/logback_" + name + ".xml"), h.logs.resolve(name + ".log"));
        n.proc = h.startJvm(name, "org.apache.rocketmq.broker.BrokerStartup", "384m",
            List.of("-c", n.confFile.toString()));
        h.addChild(n.proc);
    }

    void booted(Node n) throws Exception {
        String name = n.logName();
        h.waitForLine(name, n.proc, h.logs.resolve(name + ".out"), "boot success", 120);
        h.mark(n.id + "Started" + n.starts);
        event(n.id + "-started-" + n.starts, null);
    }

    Map<String, Object> kill(Node n) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        if (n.proc == null || !n.proc.isAlive()) {
            r.put("alreadyDead", true);
            return r;
        }
        r.put("signal", "SIGKILL");
        r.put("killAtMs", System.currentTimeMillis());
        n.proc.destroyForcibly();
        r.put("exited", n.proc.waitFor(30, TimeUnit.SECONDS));
        r.put("abortFilePresent", Files.exists(n.store.resolve("abort")));
        h.mark(n.id + "Killed" + n.starts);
        return r;
    }

    Map<String, Object> stopClean(Node n) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        long s = System.currentTimeMillis();
        n.proc.destroy();
        boolean exited = n.proc.waitFor(90, TimeUnit.SECONDS);
        r.put("signal", "SIGTERM");
        r.put("exited", exited);
        r.put("durationMs", System.currentTimeMillis() - s);
        if (!exited) {
            n.proc.destroyForcibly();
            throw new Harness.HarnessError(n.id + " did not exit within 90 s after SIGTERM");
        }
        r.put("exitCode", n.proc.exitValue());
        r.put("abortFilePresent", Files.exists(n.store.resolve("abort")));
        h.mark(n.id + "Stopped" + n.starts);
        return r;
    }

    void alive(Node n) {
        if (n.proc == null || !n.proc.isAlive()) {
            throw new Harness.HarnessError(n.id + " is not running (exit code "
                + (n.proc == null ? "none" : n.proc.exitValue()) + "); see logs/" + n.logName() + ".log");
        }
    }

    void waitRouted(Node n, long brokerId) throws Exception {
        waitUntil(n.id + " routed as brokerId " + brokerId, 90_000, () -> {
            alive(n);
            Map<Long, String> addrs = Compat.brokerAddrs(admin, BROKER);
            return addrs != null && n.addr.equals(addrs.get(brokerId)) ? true : null;
        });
        h.mark(n.id + "Routed" + n.starts);
    }

    /** Waits until the node's commitlog ends where the master's does (and it is not master itself). */
    Map<String, Object> waitCaughtUp(Node slave, Node master) throws Exception {
        long start = System.currentTimeMillis();
        Object r = waitUntil(slave.id + " to catch up with " + master.id, 90_000, () -> {
            alive(slave);
            alive(master);
            long s = maxOffset(slave);
            long m = maxOffset(master);
            return s == m && s > 0 && "SLAVE".equals(role(slave)) ? m : null;
        });
        h.mark(slave.id + "CaughtUp" + slave.starts);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("waitedMs", System.currentTimeMillis() - start);
        m.put("maxOffset", r);
        return m;
    }

    interface Check {
        Object get() throws Exception;
    }

    /** Polls {@code check} every 200 ms until it returns non-null; a {@link Harness.HarnessError} ends it at once. */
    Object waitUntil(String what, long ms, Check check) throws Exception {
        long end = System.currentTimeMillis() + ms;
        String last = "";
        while (System.currentTimeMillis() < end) {
            try {
                Object r = check.get();
                if (r != null) {
                    return r;
                }
            } catch (Harness.HarnessError e) {
                throw e;
            } catch (Exception e) {
                last = e.toString();
            }
            h.checkDeadline("waiting for " + what);
            Thread.sleep(200);
        }
        throw new Harness.HarnessError("timed out after " + ms / 1000 + " s waiting for " + what + " (" + last + ")");
    }

    // =================================================================== producing

    void createTopics(Node n, Map<String, Integer> topics) throws Exception {
        viewTopic = new TreeMap<>(topics).firstKey();
        for (Map.Entry<String, Integer> e : new TreeMap<>(topics).entrySet()) {
            TopicConfig tc = new TopicConfig(e.getKey());
            tc.setReadQueueNums(e.getValue());
            tc.setWriteQueueNums(e.getValue());
            tc.setPerm(6);
            admin.createAndUpdateTopicConfig(n.addr, tc);
        }
        for (String t : topics.keySet()) {
            waitUntil("a route for " + t + " on " + n.id, 30_000, () -> {
                var route = admin.examineTopicRouteInfo(t);
                return route.getBrokerDatas().stream().anyMatch(b -> n.addr.equals(b.getBrokerAddrs().get(0L)))
                    && route.getQueueDatas().stream().anyMatch(q -> q.getWriteQueueNums() == topics.get(t))
                    ? true : null;
            });
        }
    }

    /**
     * {@code count} sends of one phase with a fresh producer (it reads the current route), round robin over the
     * topic's queues; bodies of {@code minLen..maxLen} bytes of text (never compressed: below 4096), keys
     * {@code <phase>-<n>} and, on every third, {@code group-<n%7>}. Each record gets the node that stored it
     * (the store host of its offsetMsgId; {@code ackedBy} the same if the send was acked), its commitlog offset
     * and (controller mode) the SyncStateSet the controller listed before the phase: the nodes that had it when
     * it was acked ({@code allAckInSyncStateSet}). A send that is not acked is a harness error.
     */
    void send(String phase, String topic, int count, int minLen, int maxLen, Node expected) throws Exception {
        List<Map<String, Object>> rs = send(phase, topic, count, minLen, maxLen, false);
        long failed = rs.stream().filter(r -> !Boolean.TRUE.equals(r.get("acked"))).count();
        if (failed > 0) {
            throw new Harness.HarnessError(failed + " of " + count + " sends of " + phase + " to " + expected.id
                + " were not acked; first: " + rs.stream().filter(r -> !Boolean.TRUE.equals(r.get("acked")))
                .map(r -> r.get("sendStatus") + " " + r.get("error")).findFirst().orElse(null));
        }
    }

    /** The sends of {@link #send(String, String, int, int, int, Node)}, one after another or all at once. */
    List<Map<String, Object>> send(String phase, String topic, int count, int minLen, int maxLen, boolean concurrently)
        throws Exception {
        return send(startProducer(phase, topic), phase, topic, count, minLen, maxLen, concurrently);
    }

    /**
     * A started producer of the phase's group that already holds the topic's route: a phase whose sends must
     * leave the moment the cluster changes (D3, before the lone leader steps down) prepares it beforehand.
     */
    DefaultMQProducer startProducer(String phase, String topic) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("PG_" + phase.toUpperCase());
        wl.configureProducer(p, "producer-" + (++producerSeq));
        p.start();
        p.fetchPublishMessageQueues(topic);
        return p;
    }

    /** The sends of one phase through producer {@code p}, which is shut down after them. */
    List<Map<String, Object>> send(DefaultMQProducer p, String phase, String topic, int count, int minLen,
                                   int maxLen, boolean concurrently) throws Exception {
        wl.producer = p;
        Map<String, String> nodeByPort = new HashMap<>();
        for (Node n : nodes.values()) {
            nodeByPort.put(String.valueOf(n.port), n.id);
        }
        // controller mode: the nodes a send waits for (allAckInSyncStateSet), as the controller lists them
        List<String> syncStateSet = null;
        if (ctlAddr != null) {
            syncStateSet = new ArrayList<>();
            for (BrokerReplicasInfo.ReplicaIdentity r : replicasInfo().getInSyncReplicas()) {
                String a = r.getBrokerAddress();
                syncStateSet.add(nodeByPort.get(a.substring(a.lastIndexOf(':') + 1)));
            }
        }
        List<Map<String, Object>> records = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            int n = wl.seq.get();
            List<String> keys = new ArrayList<>(List.of(phase.toLowerCase() + "-" + i));
            if (i % 3 == 0) {
                keys.add("group-" + (i % 7));
            }
            Map<String, String> props = new LinkedHashMap<>();
            props.put("phase", phase);
            props.put("seqNo", String.valueOf(n));
            byte[] body = wl.text(minLen + rnd.nextInt(maxLen - minLen + 1));
            Message msg = wl.buildMessage(topic, "Tag" + phase, keys, props, body);
            Map<String, Object> r = wl.newRecord("normal", phase, topic, msg, body, "text", props, keys);
            records.add(r);
            if (concurrently) {
                Thread t = new Thread(() -> wl.sendSimple(r, msg, null, null), "send-" + phase + "-" + i);
                t.start();
                threads.add(t);
            } else {
                wl.sendSimple(r, msg, null, null);
            }
        }
        for (Thread t : threads) {
            t.join();
        }
        for (Map<String, Object> r : records) {
            String id = (String) r.get("offsetMsgId");
            String storedBy = id == null ? null : nodeByPort.get(String.valueOf(Long.parseLong(id.substring(8, 16), 16)));
            r.put("storedBy", storedBy);
            r.put("ackedBy", Boolean.TRUE.equals(r.get("acked")) ? storedBy : null);
            r.put("syncStateSetAtSend", syncStateSet);
            r.put("commitLogOffset", id == null ? null : Long.parseUnsignedLong(id.substring(id.length() - 16), 16));
        }
        p.shutdown();
        h.mark("sent" + phase + topic);
        return records;
    }

    List<Map<String, Object>> sends() {
        synchronized (wl.sent) {
            return new ArrayList<>(wl.sent);
        }
    }

    // =================================================================== reading a broker's store through it

    long maxOffset(Node n) throws Exception {
        return Long.parseLong(Compat.runtimeStats(admin, n.addr).get("commitLogMaxOffset").trim());
    }

    /** The node's current role as its effective config says (SLAVE, SYNC_MASTER, ASYNC_MASTER). */
    String role(Node n) throws Exception {
        return admin.getBrokerConfig(n.addr).getProperty("brokerRole");
    }

    MQClientAPIImpl api() {
        return admin.getDefaultMQAdminExtImpl().getMqClientInstance().getMQClientAPIImpl();
    }

    MessageExt view(String addr, String topic, long offset) {
        try {
            return api().viewMessage(addr, topic, offset, 5000);
        } catch (Throwable t) {
            return null;
        }
    }

    /**
     * The broker's own reading of its commitlog: min/max offset (runtime stats) and every record between them read
     * back by offset; a failed read where a file still has bytes left is that file's end BLANK (next: the next
     * file), a failed read in the last file the end of what the broker holds (a partial record if short of max).
     * Read twice; both readings must agree (nothing was being written).
     */
    Map<String, Object> brokerView(Node n) throws Exception {
        Map<String, Object> first = readStore(n);
        Map<String, Object> second = readStore(n);
        if (!first.get("maxOffset").equals(second.get("maxOffset"))
            || !first.get("records").equals(second.get("records"))) {
            throw new Harness.HarnessError(n.id + "'s commitlog changed while it was read twice: "
                + first.get("maxOffset") + " / " + second.get("maxOffset"));
        }
        Map<String, String> stats = Compat.runtimeStats(admin, n.addr);
        Map<String, Object> picked = new TreeMap<>();
        for (Map.Entry<String, String> e : stats.entrySet()) {
            String k = e.getKey().toLowerCase();
            if (k.contains("commitlog") || k.contains("role") || k.contains("brokerid") || k.contains("epoch")
                || k.contains("dispatch") || k.contains("ha")) {
                picked.put(e.getKey(), e.getValue());
            }
        }
        first.put("runtimeStats", picked);
        if (ctlAddr != null) {
            try {
                first.put("epochCache", ControllerWorkload.epochCache(admin.getBrokerEpochCache(n.addr)));
            } catch (Exception e) {
                first.put("epochCacheError", e.toString());
            }
            try {
                BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
                first.put("inSyncStateData", ri == null ? null : ControllerWorkload.replicas(ri));
                first.put("controllerMetaData", ControllerWorkload.metaData(admin.getControllerMetaData(ctlAddr)));
            } catch (Exception e) {
                first.put("controllerError", e.toString());
            }
        }
        return first;
    }

    Map<String, Object> readStore(Node n) throws Exception {
        alive(n);
        Map<String, String> stats = Compat.runtimeStats(admin, n.addr);
        long min = Long.parseLong(stats.get("commitLogMinOffset").trim());
        long max = Long.parseLong(stats.get("commitLogMaxOffset").trim());
        List<Map<String, Object>> records = new ArrayList<>();
        List<Long> blanks = new ArrayList<>();
        // DLedger: every record is the body of an entry with a header in front
        int header = DLEDGER.equals(variant) ? DLEDGER_ENTRY_HEADER : 0;
        long off = min;
        Long partialAt = null;
        while (off < max) {
            MessageExt m = view(n.addr, viewTopic, off + header);
            if (m != null && m.getCommitLogOffset() == off + header && m.getStoreSize() > 0) {
                records.add(record(m));
                off += header + m.getStoreSize();
                continue;
            }
            long next = (off / fileSize + 1) * fileSize;
            if (next < max) {
                blanks.add(off);
                off = next;
            } else {
                partialAt = off;
                break;
            }
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("node", n.id);
        r.put("addr", n.addr);
        r.put("atMs", System.currentTimeMillis());
        r.put("minOffset", min);
        r.put("maxOffset", max);
        r.put("lastRecordEnd", partialAt != null ? partialAt : off);
        r.put("partialRecordAt", partialAt);
        r.put("blankAt", blanks);
        r.put("recordCount", records.size());
        r.put("records", records);
        return r;
    }

    static Map<String, Object> record(MessageExt m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("storeSize", m.getStoreSize());
        r.put("msgId", MessageClientIDSetter.getUniqID(m));
        r.put("offsetMsgId", Workload.offsetMsgIdOf(m));
        r.put("topic", m.getTopic());
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("keys", m.getKeys());
        r.put("tags", m.getTags());
        r.put("storeHost", String.valueOf(m.getStoreHost()));
        r.put("bodyCrc", m.getBodyCRC());
        return r;
    }

    /**
     * Copies the node's store root to {@code copies/<node>/<NN-phase>/store} (StoreCopier, also for a stopped
     * broker) and records it with the broker's reading {@code view} (taken right before a stop for a stopped one).
     */
    Map<String, Object> copy(Node n, String phase, String how, Map<String, Object> view) throws Exception {
        String name = String.format("%02d-%s", ++copySeq, phase);
        String rel = "copies/" + n.id + "/" + name + "/store";
        Path dst = h.out.resolve(rel);
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("seq", copySeq);
        c.put("name", name);
        c.put("phase", phase);
        c.put("node", n.id);
        c.put("path", rel);
        c.put("how", how);
        c.put("brokerRunning", n.proc != null && n.proc.isAlive());
        c.put("brokerStart", n.starts);
        c.put("copy", new StoreCopier(n.store, dst).copy());
        for (String k : List.of("minOffset", "maxOffset", "lastRecordEnd", "partialRecordAt", "blankAt",
            "recordCount")) {
            c.put(k, view.get(k));
        }
        c.put("readAtMs", view.get("atMs"));
        Map<String, Map<String, Object>> sent = new HashMap<>();
        for (Map<String, Object> s : sends()) {
            if (Boolean.TRUE.equals(s.get("acked"))) {
                sent.put((String) s.get("msgId"), s);
            }
        }
        List<Map<String, Object>> acked = new ArrayList<>();
        for (Object o : (List<?>) view.get("records")) {
            @SuppressWarnings("unchecked")
            Map<String, Object> rec = (Map<String, Object>) o;
            Map<String, Object> s = sent.get(rec.get("msgId"));
            if (s != null) {
                acked.add(Map.of("msgId", rec.get("msgId"), "commitLogOffset", rec.get("commitLogOffset"),
                    "phase", s.get("phase"), "ackedBy", String.valueOf(s.get("ackedBy")),
                    "atItsAckedOffset", rec.get("commitLogOffset").equals(s.get("commitLogOffset"))));
            }
        }
        c.put("ackedHeld", acked);
        for (String f : List.of("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity")) {
            c.put(f, ControllerWorkload.fileText(dst.resolve(f)));
        }
        for (String k : List.of("epochCache", "inSyncStateData", "controllerMetaData", "runtimeStats")) {
            if (view.containsKey(k)) {
                c.put(k, view.get(k));
            }
        }
        c.put("records", view.get("records"));
        copies.add(c);
        h.mark("copy" + name + "-" + n.id);
        return c;
    }

    /** The admin API's view of every node and (controller mode) the controller, into events.jsonl. */
    void event(String tag, Map<String, Object> extra) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("tag", tag);
        e.put("atMs", System.currentTimeMillis());
        if (extra != null) {
            e.put("extra", extra);
        }
        if (ctlAddr != null) {
            try {
                BrokerReplicasInfo.ReplicasInfo ri = replicasInfo();
                e.put("inSyncStateData", ri == null ? null : ControllerWorkload.replicas(ri));
                e.put("controllerMetaData", ControllerWorkload.metaData(admin.getControllerMetaData(ctlAddr)));
            } catch (Exception ex) {
                e.put("controllerError", ex.toString());
            }
        }
        try {
            e.put("route", new TreeMap<>(Compat.brokerAddrs(admin, BROKER)));
        } catch (Exception ex) {
            e.put("routeError", ex.toString());
        }
        Map<String, Object> per = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            Map<String, Object> v = new LinkedHashMap<>();
            v.put("running", n.proc != null && n.proc.isAlive());
            if (n.proc != null && n.proc.isAlive()) {
                try {
                    Map<String, String> stats = Compat.runtimeStats(admin, n.addr);
                    v.put("commitLogMinOffset", stats.get("commitLogMinOffset"));
                    v.put("commitLogMaxOffset", stats.get("commitLogMaxOffset"));
                    v.put("brokerRole", role(n));
                    if (ctlAddr != null) {
                        v.put("epochCache", ControllerWorkload.epochCache(admin.getBrokerEpochCache(n.addr)));
                    }
                } catch (Exception ex) {
                    v.put("error", ex.toString());
                }
            }
            per.put(n.id, v);
        }
        e.put("nodes", per);
        events.add(e);
    }

    // =================================================================== truth

    @Override
    void writeTruth(Map<String, Object> run) throws Exception {
        List<Map<String, Object>> s = wl == null ? new ArrayList<>() : sends();
        s.sort(java.util.Comparator.comparingInt(r -> (Integer) r.get("seq")));
        Harness.writeJsonLines(h.truth.resolve("sends.jsonl"), s);
        Harness.writeJsonLines(h.truth.resolve("events.jsonl"), events);
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("fileSize", fileSize);
        c.put("copies", copies);
        Harness.writeJson(h.truth.resolve("copies.json"), c);
        Map<String, Object> nodeInfo = new LinkedHashMap<>();
        for (Node n : nodes.values()) {
            nodeInfo.put(n.id, Map.of("addr", n.addr, "port", n.port, "haPort", n.port + 1, "starts", n.starts));
        }
        story.put("nodes", nodeInfo);
        Harness.writeJson(h.truth.resolve(variant.substring(variant.indexOf('-') + 1) + ".json"), story);
        if (wl != null) {
            notes.putAll(wl.notes);
        }
        run.put("nodes", nodeInfo);
        run.put("notes", notes);
        run.put("timingsMs", h.timings);
        run.put("startedAtMs", h.t0);
        run.put("finishedAtMs", System.currentTimeMillis());
        run.put("durationMs", System.currentTimeMillis() - h.t0);
        Harness.writeJson(h.truth.resolve("run.json"), run);
    }

    // =================================================================== the valve

    /**
     * A TCP relay in front of the master's HA port: the slave's reports go through unchanged, the master's stream
     * only up to a byte budget ({@link #limit}); {@link #open} lifts it. One connection at a time is expected (a
     * restarted slave reconnects); bytes are counted over all of them.
     */
    static final class Valve implements AutoCloseable {
        final ServerSocket server;
        final int port;
        final String host;
        final int targetPort;
        final List<Map<String, Object>> connections = new ArrayList<>();
        final List<Socket> sockets = new ArrayList<>();
        long forwarded;
        long budget = Long.MAX_VALUE;
        volatile boolean closed;

        Valve(String host, int targetPort) throws IOException {
            this.host = host;
            this.targetPort = targetPort;
            this.server = new ServerSocket();
            this.server.bind(new InetSocketAddress(host, 0));
            this.port = server.getLocalPort();
            Thread t = new Thread(this::accept, "valve-accept");
            t.setDaemon(true);
            t.start();
        }

        synchronized void limit(long bytes) {
            budget = forwarded + bytes;
            notifyAll();
        }

        synchronized void open() {
            budget = Long.MAX_VALUE;
            notifyAll();
        }

        synchronized long forwarded() {
            return forwarded;
        }

        synchronized boolean exhausted() {
            return forwarded >= budget;
        }

        void accept() {
            while (!closed) {
                try {
                    Socket slave = server.accept();
                    Socket master = new Socket();
                    master.connect(new InetSocketAddress(host, targetPort), 5000);
                    synchronized (this) {
                        sockets.add(slave);
                        sockets.add(master);
                        connections.add(Map.of("acceptedAtMs", System.currentTimeMillis(), "slavePort",
                            slave.getPort(), "forwardedBefore", forwarded));
                    }
                    pump(slave.getInputStream(), master.getOutputStream(), false, slave, master);
                    pump(master.getInputStream(), slave.getOutputStream(), true, slave, master);
                } catch (IOException e) {
                    if (!closed) {
                        Harness.log("valve: " + e);
                    }
                }
            }
        }

        void pump(InputStream in, OutputStream out, boolean limited, Socket a, Socket b) {
            Thread t = new Thread(() -> {
                byte[] buf = new byte[16 * 1024];
                try {
                    while (!closed) {
                        int allowed = buf.length;
                        if (limited) {
                            synchronized (this) {
                                while (!closed && forwarded >= budget) {
                                    wait(200);
                                }
                                allowed = (int) Math.min(buf.length, budget - forwarded);
                            }
                        }
                        int n = in.read(buf, 0, allowed);
                        if (n < 0) {
                            break;
                        }
                        out.write(buf, 0, n);
                        out.flush();
                        if (limited) {
                            synchronized (this) {
                                forwarded += n;
                            }
                        }
                    }
                } catch (IOException | InterruptedException e) {
                    // a side closed: close both
                } finally {
                    closeQuietly(a);
                    closeQuietly(b);
                }
            }, limited ? "valve-down" : "valve-up");
            t.setDaemon(true);
            t.start();
        }

        static void closeQuietly(Socket s) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closing
            }
        }

        @Override
        public synchronized void close() {
            closed = true;
            notifyAll();
            try {
                server.close();
            } catch (IOException ignored) {
                // closing
            }
            for (Socket s : sockets) {
                closeQuietly(s);
            }
        }
    }
}
