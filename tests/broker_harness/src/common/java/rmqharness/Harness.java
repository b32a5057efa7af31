package rmqharness;

import java.io.BufferedWriter;
import java.io.File;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * Entry point of the broker harness (the "workload driver" process).
 *
 * <p>Starts a real name server and a real broker as two separate child JVMs (published
 * org.apache.rocketmq jars, same classpath as this process), runs the workload through the
 * real client in this JVM, records ground truth, then either shuts the broker down cleanly
 * (SIGTERM: the broker's own shutdown hook persists config JSON and deletes {@code abort})
 * or SIGKILLs it while producers are still sending. Variants ending in {@code -growing} run
 * {@link GrowingWorkload} instead: hot copies of the live store taken between production phases
 * and after the broker's own retention deleted old commitlog files (DIR also gets
 * {@code snapshots/s1..s3/store}). Variants ending in {@code -features} run the 5.x-only
 * {@code FeaturesWorkload} (loaded by reflection through {@link Scenario}, the v4 module does not
 * have it): every optional store feature switched on, possibly over IPv6 ({@link #loopback}).
 * Variants ending in {@code -cluster} run the 5.x-only {@code ClusterWorkload} ({@link ClusterScenario}):
 * one name server and several brokers (two masters, one slave), each its own child JVM registered
 * through {@link #addChild}; their store roots live in {@code DIR/s2/<broker>/store} and hot copies go
 * to {@code DIR/s1/<broker>/store} (DIR gets no {@code store/}).
 *
 * <p>Usage: {@code java -cp ... rmqharness.Harness --variant v5-clean --out DIR [--timeout SEC]}.
 * DIR gets {@code store/} (storePathRootDir), {@code truth/}, {@code logs/}. Exit code 0 on
 * success; otherwise the last stderr line starts with {@code HARNESS ERROR:}.
 */
public final class Harness {
    /** JVM options every child JVM gets; Java 17 + RocketMQ need these modules opened. */
    static final List<String> ADD_OPENS = List.of(
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
        "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/java.net=ALL-UNNAMED",
        "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED");

    /** Custom delay levels: 18 levels, all short so delayed and retry flows finish quickly. */
    static final String DELAY_LEVELS = "1s 2s 3s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s";

    static final String CLUSTER = "HarnessCluster";
    static final String BROKER_NAME = "broker-a";

    final String variant;
    final boolean killedMode;
    final boolean growingMode;
    final boolean featuresMode;
    final boolean clusterMode;
    /** The address every process binds to, advertises and connects to: 127.0.0.1, or ::1 if the scenario says so. */
    String loopback = "127.0.0.1";
    /** A line-specific scenario class (-features), null otherwise. */
    Scenario scenario;
    final Path out;
    final Path store;
    final Path truth;
    final Path logs;
    final Path work;
    final long deadline;
    final Map<String, Object> timings = new LinkedHashMap<>();
    final long t0 = System.currentTimeMillis();

    private Process namesrv;
    private Process broker;
    /** Further child JVMs of multi-broker scenarios (-cluster), killed with the others. */
    private final List<Process> extraChildren = new ArrayList<>();

    Harness(String variant, Path out, int timeoutSec) {
        this.variant = variant;
        this.killedMode = variant.endsWith("-killed");
        this.growingMode = variant.endsWith("-growing");
        this.featuresMode = variant.endsWith("-features");
        this.clusterMode = variant.endsWith("-cluster");
        if (!killedMode && !growingMode && !featuresMode && !clusterMode && !variant.endsWith("-clean")) {
            throw new HarnessError("variant must end with -clean, -killed, -growing, -features or -cluster: "
                + variant);
        }
        String line = variant.substring(0, variant.indexOf('-'));
        if (!line.equals("v" + Compat.LINE)) {
            throw new HarnessError("variant " + variant + " cannot run on the RocketMQ " + Compat.LINE
                + ".x classpath");
        }
        this.out = out.toAbsolutePath();
        this.store = this.out.resolve("store");
        this.truth = this.out.resolve("truth");
        this.logs = this.out.resolve("logs");
        this.work = this.out.resolve("work");
        this.deadline = System.currentTimeMillis() + timeoutSec * 1000L;
    }

    public static void main(String[] args) {
        StandaloneScenario.launch(args, "Harness", variant -> true, variant -> variant, (h, variant) -> h.run());
    }

    void mark(String phase) {
        timings.put(phase, System.currentTimeMillis() - t0);
        log("phase " + phase + " at +" + (System.currentTimeMillis() - t0) + " ms");
    }

    static void log(String msg) {
        System.out.println("[harness " + java.time.LocalTime.now() + "] " + msg);
        System.out.flush();
    }

    void checkDeadline(String what) {
        if (System.currentTimeMillis() > deadline) {
            throw new HarnessError("timed out while " + what);
        }
    }

    void run() throws Exception {
        Runtime.getRuntime().addShutdownHook(new Thread(this::killChildren, "harness-kill-children"));
        if (Files.exists(store) && Files.list(store).findAny().isPresent()) {
            throw new HarnessError("store directory is not empty: " + store);
        }
        for (Path p : List.of(store, truth, logs, work, work.resolve("home"), work.resolve("rmqhome/conf"))) {
            Files.createDirectories(p);
        }
        mark("start");
        // Logging of this (driver) JVM: 4.9 client logger root, 5.x shaded logback config.
        writeLogback(work.resolve("rmqhome/conf/logback_driver.xml"), logs.resolve("driver-client.log"));
        System.setProperty("rmq.logback.configurationFile", work.resolve("rmqhome/conf/logback_driver.xml").toString());
        System.setProperty("logback.configurationFile", work.resolve("rmqhome/conf/logback_driver.xml").toString());
        System.setProperty("rocketmq.client.logRoot", logs.resolve("driver-client").toString());
        System.setProperty("user.home", work.resolve("home").toString());
        // Rebalance every second instead of every 20 s (new %RETRY% routes are picked up quickly).
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");

        if (clusterMode) {
            // several brokers: the scenario starts the name server and the brokers itself (their store
            // roots are DIR/s2/<broker>/store), so the single-broker store/ dir is not used
            Files.deleteIfExists(store);
            ClusterScenario cs = (ClusterScenario) Class.forName("rmqharness.ClusterWorkload")
                .getDeclaredConstructor(Harness.class).newInstance(this);
            Map<String, Object> run = new LinkedHashMap<>();
            try {
                cs.run(run);
            } finally {
                cs.writeTruth(run);
            }
            killChildren();
            deleteTree(work);
            return;
        }

        if (featuresMode) {
            scenario = (Scenario) Class.forName("rmqharness.FeaturesWorkload").getDeclaredConstructor(Harness.class)
                .newInstance(this);
            loopback = scenario.loopback();
        }

        // ---- ports (loopback; the broker also uses listenPort-2 (fast/VIP) and listenPort+1 (HA))
        int nsPort = freePort(loopback, 0, 0);
        int brokerPort = freePort(loopback, 2, 1);
        String nsAddr = hostPort(loopback, nsPort);
        String brokerAddr = hostPort(loopback, brokerPort);

        // ---- configs
        Map<String, String> nsConf = new LinkedHashMap<>();
        nsConf.put("listenPort", String.valueOf(nsPort));
        nsConf.put("bindAddress", loopback);
        nsConf.put("rocketmqHome", work.resolve("rmqhome").toString());
        nsConf.put("kvConfigPath", work.resolve("namesrv/kvConfig.json").toString());
        nsConf.put("configStorePath", work.resolve("namesrv/namesrv.properties").toString());
        // 5.x name servers otherwise probe their own non-loopback address (NetworkUtil.getLocalAddress)
        nsConf.put("scanAvailableNameSrv", "false");

        Map<String, String> brokerConf = brokerConfig(nsAddr, brokerPort);
        if (scenario != null) {
            scenario.configure(nsConf, brokerConf);
        }
        Path nsConfFile = work.resolve("namesrv.conf");
        Path brokerConfFile = work.resolve("broker.conf");
        writeProperties(nsConfFile, nsConf);
        writeProperties(brokerConfFile, brokerConf);
        // keep copies of the configs with the logs
        Files.copy(nsConfFile, logs.resolve("namesrv.conf"));
        Files.copy(brokerConfFile, logs.resolve("broker.conf"));
        writeLogback(work.resolve("rmqhome/conf/logback_namesrv.xml"), logs.resolve("namesrv.log"));
        writeLogback(work.resolve("rmqhome/conf/logback_broker.xml"), logs.resolve("broker.log"));

        // ---- name server and broker: separate JVMs
        namesrv = startJvm("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "128m",
            List.of("-c", nsConfFile.toString()));
        waitForLine("namesrv", namesrv, logs.resolve("namesrv.out"), "boot success", 60);
        mark("namesrvStarted");
        broker = startJvm("broker", "org.apache.rocketmq.broker.BrokerStartup", "512m",
            List.of("-c", brokerConfFile.toString()));
        waitForLine("broker", broker, logs.resolve("broker.out"), "boot success", 90);
        mark("brokerStarted");

        Map<String, Object> run = new LinkedHashMap<>();
        run.put("variant", variant);
        run.put("brokerLine", Compat.LINE);
        run.put("rocketmqVersion", rocketmqJarVersion());
        run.put("mqVersionDesc", org.apache.rocketmq.common.MQVersion.getVersionDesc(
            org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        run.put("shutdownMode", killedMode ? "killed" : "clean");
        run.put("scenario", growingMode ? "growing" : featuresMode ? "features" : killedMode ? "killed" : "clean");
        run.put("javaVersion", System.getProperty("java.version"));
        Map<String, Object> ports = new LinkedHashMap<>();
        ports.put("namesrv", nsPort);
        ports.put("broker", brokerPort);
        ports.put("brokerFast", brokerPort - 2);
        ports.put("brokerHa", brokerPort + 1);
        run.put("ports", ports);
        run.put("namesrvAddr", nsAddr);
        run.put("brokerAddr", brokerAddr);
        run.put("brokerName", BROKER_NAME);
        run.put("clusterName", CLUSTER);
        run.put("brokerConfig", brokerConf);
        run.put("namesrvConfig", nsConf);
        run.put("childJvmOptions", ADD_OPENS);
        run.put("storePathAtGeneration", store.toString());

        Workload wl = new Workload(this, nsAddr, brokerAddr, new Random(20240611L));
        if (scenario != null) {
            try {
                scenario.run(wl, run);
            } finally {
                scenario.writeTruth(run);
            }
        } else if (growingMode) {
            GrowingWorkload g = new GrowingWorkload(this, wl);
            try {
                g.run(run);
            } finally {
                g.writeTruth(run);
            }
        } else {
            try {
                wl.run(run);
            } finally {
                wl.writeTruth(run);
            }
        }
        killChildren();
        deleteTree(work);
    }

    static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (var walk = Files.walk(root)) {
            for (Path p : (Iterable<Path>) walk.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(p);
            }
        }
    }

    Map<String, String> brokerConfig(String nsAddr, int brokerPort) {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("brokerClusterName", CLUSTER);
        c.put("brokerName", BROKER_NAME);
        c.put("brokerId", "0");
        c.put("brokerRole", "ASYNC_MASTER");
        c.put("flushDiskType", "ASYNC_FLUSH");
        c.put("namesrvAddr", nsAddr);
        c.put("brokerIP1", loopback);
        c.put("brokerIP2", loopback);
        c.put("bindAddress", loopback);
        c.put("listenPort", String.valueOf(brokerPort));
        c.put("haListenPort", String.valueOf(brokerPort + 1));
        c.put("rocketmqHome", work.resolve("rmqhome").toString());
        c.put("storePathRootDir", store.toString());
        c.put("storePathCommitLog", store.resolve("commitlog").toString());
        c.put("mappedFileSizeCommitLog", String.valueOf(1024 * 1024));
        c.put("mappedFileSizeConsumeQueue", String.valueOf(300 * 20));
        c.put("maxHashSlotNum", "500");
        c.put("maxIndexNum", "2000");
        c.put("messageDelayLevel", DELAY_LEVELS);
        c.put("mappedFileSizeTimerLog", String.valueOf(1024 * 1024));
        c.put("transactionCheckInterval", "2000");
        c.put("transactionTimeOut", "2000");
        // 5.x batches transaction op records; flush them well before the next check round.
        c.put("transactionOpBatchInterval", "500");
        // 5.5.0's TransactionMetricsFlushService spins until its first interval has passed
        // (default 10 s: ~3 CPU-s a broker); 1 s ends that sooner (the file is persisted more often).
        c.put("transactionMetricFlushInterval", "1000");
        c.put("flushConsumerOffsetInterval", "5000");
        c.put("flushDelayOffsetInterval", "10000");
        c.put("diskMaxUsedSpaceRatio", "95");
        c.put("diskSpaceWarningLevelRatio", "98");
        c.put("diskSpaceCleanForciblyRatio", "97");
        c.put("fileReservedTime", "720");
        c.put("waitTimeMillsInSendQueue", "5000");
        c.put("osPageCacheBusyTimeOutMills", "5000");
        c.put("autoCreateTopicEnable", "true");
        c.put("autoCreateSubscriptionGroup", "true");
        c.put("fetchNamesrvAddrByAddressServer", "false");
        c.put("traceTopicEnable", "false");
        c.put("metricsExporterType", "DISABLE");
        c.put("enableControllerMode", "false");
        if (growingMode) {
            // The retention services (CleanCommitLogService; CQ + index cleanup) first run 60 s after the
            // store started, then every cleanResourceInterval ms (default 10 000). 2 s lets the CQ cleanup
            // follow the commitlog deletion quickly; retention itself is switched on at run time.
            c.put("cleanResourceInterval", String.valueOf(GrowingWorkload.CLEAN_RESOURCE_INTERVAL_MS));
        }
        // NB: not scanAvailableNameSrv=false here: 5.x brokers register only with name servers
        // the scan found available (their list is loopback only anyway).
        return c;
    }

    // ------------------------------------------------------------------ child JVMs

    Process startJvm(String name, String mainClass, String heap, List<String> args) throws IOException {
        String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
        List<String> cmd = new ArrayList<>();
        cmd.add(java);
        cmd.add("-Xms" + heap);
        cmd.add("-Xmx" + heap);
        cmd.add("-XX:+UseSerialGC");
        if (!mainClass.endsWith("BrokerStartup")) {
            cmd.add("-XX:TieredStopAtLevel=1");  // short-lived: C2 would cost more than it saves
        } else {
            // A 5.x broker's TimerFlushService compares its whole 38 MB timer wheel byte by byte
            // every second (TimerWheel.flush): in C1 code that was ~45% of a broker's CPU. C2
            // compiles that loop (on-stack, at the default back-edge threshold); raised call
            // thresholds keep C2 off the rest. The store build: 1,002 -> 787 CPU-s.
            cmd.add("-XX:Tier4InvocationThreshold=2000000");
            cmd.add("-XX:Tier4MinInvocationThreshold=200000");
            cmd.add("-XX:Tier4CompileThreshold=5000000");
        }
        cmd.add("-XX:-OmitStackTraceInFastThrow");
        cmd.addAll(ADD_OPENS);
        if (!loopback.contains(":")) {
            cmd.add("-Djava.net.preferIPv4Stack=true");
        }
        cmd.add("-Duser.home=" + work.resolve("home"));
        cmd.add("-Drmq.logback.configurationFile=" + work.resolve("rmqhome/conf/logback_" + name + ".xml"));
        cmd.add("-Drocketmq.client.logRoot=" + logs.resolve(name + "-client"));
        cmd.add("-Drocketmq.broker.diskSpaceWarningLevelRatio=0.98");
        cmd.add("-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.97");
        cmd.add("-Dio.netty.tryReflectionSetAccessible=true");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass);
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().put("ROCKETMQ_HOME", work.resolve("rmqhome").toString());
        pb.environment().remove("NAMESRV_ADDR");
        pb.environment().remove("JAVA_OPT_EXT");
        pb.directory(work.toFile());
        File outFile = logs.resolve(name + ".out").toFile();
        pb.redirectErrorStream(true);
        pb.redirectOutput(ProcessBuilder.Redirect.appendTo(outFile));
        Files.writeString(logs.resolve(name + ".cmdline"), String.join(" ", cmd) + "\n");
        log("starting " + name + ": " + mainClass + " " + String.join(" ", args));
        return pb.start();
    }

    void waitForLine(String name, Process p, Path file, String needle, int seconds) throws Exception {
        long end = System.currentTimeMillis() + seconds * 1000L;
        while (System.currentTimeMillis() < end) {
            if (Files.exists(file) && Files.readString(file, StandardCharsets.ISO_8859_1).contains(needle)) {
                return;
            }
            if (!p.isAlive()) {
                throw new HarnessError(name + " exited with code " + p.exitValue() + " during start-up; see "
                    + file + " and " + logs.resolve(name + ".log"));
            }
            Thread.sleep(100);
        }
        throw new HarnessError(name + " did not report '" + needle + "' within " + seconds + " s; see " + file);
    }

    /** SIGTERM (clean): the broker's shutdown hook persists config JSON and removes the abort file. */
    Map<String, Object> shutdownBrokerCleanly() throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        long s = System.currentTimeMillis();
        broker.destroy();
        boolean exited = broker.waitFor(90, TimeUnit.SECONDS);
        r.put("signal", "SIGTERM");
        r.put("exited", exited);
        r.put("durationMs", System.currentTimeMillis() - s);
        if (!exited) {
            broker.destroyForcibly();
            throw new HarnessError("broker did not exit within 90 s after SIGTERM");
        }
        r.put("exitCode", broker.exitValue());
        r.put("abortFilePresent", Files.exists(store.resolve("abort")));
        stopNamesrv();
        return r;
    }

    /** SIGKILL: no shutdown hook runs; abort file stays, config JSON is whatever was last persisted. */
    Map<String, Object> killBroker() throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("signal", "SIGKILL");
        r.put("brokerPid", broker.pid());
        r.put("killAtMs", System.currentTimeMillis());
        broker.destroyForcibly();
        boolean exited = broker.waitFor(30, TimeUnit.SECONDS);
        r.put("exited", exited);
        r.put("exitCode", exited ? broker.exitValue() : null);
        r.put("deadAtMs", System.currentTimeMillis());
        return r;
    }

    Map<String, Object> afterKill() throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("abortFilePresent", Files.exists(store.resolve("abort")));
        stopNamesrv();
        return r;
    }

    void stopNamesrv() throws InterruptedException {
        if (namesrv != null && namesrv.isAlive() && growingMode) {
            // nothing of the name server is kept; its SIGTERM hook alone takes ~4 s on 5.5.0
            namesrv.destroyForcibly();
            namesrv.waitFor(30, TimeUnit.SECONDS);
        }
        if (namesrv != null && namesrv.isAlive()) {
            namesrv.destroy();
            if (!namesrv.waitFor(30, TimeUnit.SECONDS)) {
                namesrv.destroyForcibly();
            }
        }
    }

    /** Registers a child JVM started by a scenario, so that {@link #killChildren} kills it too. */
    synchronized void addChild(Process p) {
        extraChildren.add(p);
    }

    synchronized void killChildren() {
        List<Process> all = new ArrayList<>(Arrays.asList(broker, namesrv));
        all.addAll(extraChildren);
        for (Process p : all) {
            if (p != null && p.isAlive()) {
                p.destroyForcibly();
                try {
                    p.waitFor(10, TimeUnit.SECONDS);
                } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    // ------------------------------------------------------------------ helpers

    /** "host:port"; an IPv6 host in brackets ("[::1]:9876", RocketMQ splits at the last ':'). */
    /**
     * Calls a broker's runtime-info request until the broker has taken its first statistics sample. The store's
     * StoreStatsService samples its put/get counters once a second and answers GET_BROKER_RUNTIME_INFO with
     * {@code putTimesList.getLast()}: until the first sample, a just-started broker fails the request with
     * NoSuchElementException (seen in CI on a restarted broker). Any other failure is thrown at once.
     */
    static <T> T afterFirstStatsSample(java.util.concurrent.Callable<T> request) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (true) {
            try {
                return request.call();
            } catch (Exception e) {
                boolean unsampled = String.valueOf(e.getMessage()).contains("NoSuchElementException");
                if (!unsampled || System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    static String hostPort(String host, int port) {
        return (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
    }

    /** A free port p on host such that p-below .. p+above are free too (broker uses p-2 and p+1). */
    static int freePort(String host, int below, int above) throws IOException {
        return freePort(host, below, above, java.util.Collections.emptySet());
    }

    /**
     * Like {@link #freePort(String, int, int)}, and none of p-below .. p+above is in {@code taken}
     * (ports already handed to another process of the same run, not yet bound).
     */
    static int freePort(String host, int below, int above, java.util.Set<Integer> taken) throws IOException {
        for (int attempt = 0; attempt < 200; attempt++) {
            int p;
            try (ServerSocket s = new ServerSocket()) {
                s.bind(new InetSocketAddress(host, 0));
                p = s.getLocalPort();
            }
            if (p - below < 1024 || p + above > 65535) {
                continue;
            }
            boolean ok = true;
            for (int q = p - below; q <= p + above && ok; q++) {
                ok = !taken.contains(q) && canBind(q);
            }
            if (ok) {
                return p;
            }
        }
        throw new HarnessError("could not find free loopback ports");
    }

    private static boolean canBind(int port) {
        // RocketMQ 4.9 binds the wildcard address, so test that (it also covers 127.0.0.1).
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress(port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    static void writeProperties(Path file, Map<String, String> props) throws IOException {
        StringBuilder sb = new StringBuilder("# written by rmqharness.Harness\n");
        for (Map.Entry<String, String> e : props.entrySet()) {
            sb.append(e.getKey()).append('=').append(e.getValue().replace("\\", "\\\\")).append('\n');
        }
        Files.writeString(file, sb.toString(), StandardCharsets.ISO_8859_1);
    }

    /** Our own minimal logback config: everything at INFO into one file inside logs/. */
    static void writeLogback(Path file, Path logFile) throws IOException {
        String xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            + "<configuration>\n"
            + "  <appender name=\"FILE\" class=\"ch.qos.logback.core.FileAppender\">\n"
            + "    <file>" + logFile + "</file>\n"
            + "    <append>true</append>\n"
            + "    <encoder>\n"
            + "      <pattern>%d{yyyy-MM-dd HH:mm:ss.SSS} %-5level [%thread] %logger{0} - %msg%n</pattern>\n"
            + "      <charset>UTF-8</charset>\n"
            + "    </encoder>\n"
            + "  </appender>\n"
            + "  <root level=\"INFO\">\n"
            + "    <appender-ref ref=\"FILE\"/>\n"
            + "  </root>\n"
            + "</configuration>\n";
        Files.writeString(file, xml, StandardCharsets.UTF_8);
    }

    static String rocketmqJarVersion() {
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            String n = Paths.get(e).getFileName().toString();
            if (n.startsWith("rocketmq-broker-") && n.endsWith(".jar")) {
                return n.substring("rocketmq-broker-".length(), n.length() - ".jar".length());
            }
        }
        return "unknown";
    }

    static void writeJsonLines(Path file, Collection<? extends Map<String, Object>> rows) throws IOException {
        try (BufferedWriter w = new BufferedWriter(new OutputStreamWriter(Files.newOutputStream(file),
            StandardCharsets.UTF_8))) {
            for (Map<String, Object> r : rows) {
                w.write(Json.write(r));
                w.write('\n');
            }
        }
    }

    static void writeJson(Path file, Object value) throws IOException {
        Files.writeString(file, Json.write(value) + "\n", StandardCharsets.UTF_8);
    }

    /**
     * A scenario with its own workload class that only one line has (loaded by name, e.g.
     * {@code rmqharness.FeaturesWorkload}, constructor {@code (Harness)}).
     */
    interface Scenario {
        /** The address for every process: "127.0.0.1" or "::1". */
        default String loopback() {
            return "127.0.0.1";
        }

        /** Adds or overrides name server and broker settings before the configs are written. */
        default void configure(Map<String, String> namesrv, Map<String, String> broker) {
        }

        void run(Workload wl, Map<String, Object> run) throws Exception;

        void writeTruth(Map<String, Object> run) throws Exception;
    }

    /**
     * A multi-broker scenario (loaded by name, constructor {@code (Harness)}): starts its own name server
     * and brokers (registered with {@link #addChild}) and writes everything under {@code truth/}.
     */
    interface ClusterScenario {
        void run(Map<String, Object> run) throws Exception;

        void writeTruth(Map<String, Object> run) throws Exception;
    }

    static final class HarnessError extends RuntimeException {
        HarnessError(String msg) {
            super(msg);
        }
    }
}
