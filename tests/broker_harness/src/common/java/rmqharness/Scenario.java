package rmqharness;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiFunction;

/**
 * A scenario with its own {@code main} ({@link ModeWorkload}, {@code ControllerWorkload}, {@code PopWorkload}):
 * the command line stores.py gives it, the driver JVM's set-up (directories, client logging, user home), the
 * run (the scenario, then its truth, also after a failure), and the exit codes stores.py reads: 0 done, 2 a
 * harness error (a broker did not do what the scenario needs), 3 anything else, 64 a bad command line.
 *
 * <p>A {@link Harness} in its "-clean" mode serves the scenario's helpers (ports, child JVMs, logback files,
 * timings, deadline); {@code Harness.java}, which every variant's fingerprint covers, stays untouched.
 */
abstract class Scenario {
    final Harness h;

    Scenario(Harness h) {
        this.h = h;
    }

    /** The scenario; {@code run} collects what goes into {@code truth/run.json}. */
    abstract void runScenario(Map<String, Object> run) throws Exception;

    /** Writes {@code truth/}: called after the scenario, also when it failed (with what was recorded). */
    abstract void writeTruth(Map<String, Object> run) throws Exception;

    /** Usage: {@code java -cp ... rmqharness.<Class> --variant V --out DIR [--timeout SEC]}. */
    static void main(String[] args, String name, Set<String> variants,
        BiFunction<Harness, String, Scenario> scenario) {
        String variant = null;
        String out = null;
        int timeout = 300;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--variant":
                    variant = args[++i];
                    break;
                case "--out":
                    out = args[++i];
                    break;
                case "--timeout":
                    timeout = Integer.parseInt(args[++i]);
                    break;
                default:
                    System.err.println("HARNESS ERROR: unknown argument " + args[i]);
                    System.exit(64);
            }
        }
        if (!variants.contains(variant) || out == null) {
            System.err.println("HARNESS ERROR: usage: " + name + " --variant " + variants
                + " --out DIR [--timeout SEC]");
            System.exit(64);
        }
        Harness h = null;
        int rc;
        try {
            h = new Harness("v" + Compat.LINE + "-clean", Paths.get(out), timeout);
            scenario.apply(h, variant).run();
            rc = 0;
        } catch (Harness.HarnessError e) {
            System.err.println("HARNESS ERROR: " + e.getMessage());
            rc = 2;
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.println("HARNESS ERROR: " + t);
            rc = 3;
        } finally {
            if (h != null) {
                h.killChildren();
            }
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    /** An empty store directory, the output directories, the driver's client logging and home; then the run. */
    final void run() throws Exception {
        Runtime.getRuntime().addShutdownHook(new Thread(h::killChildren, "harness-kill-children"));
        if (Files.exists(h.store) && Files.list(h.store).findAny().isPresent()) {
            throw new Harness.HarnessError("store directory is not empty: " + h.store);
        }
        for (Path p : List.of(h.store, h.truth, h.logs, h.work, h.work.resolve("home"),
            h.work.resolve("rmqhome/conf"))) {
            Files.createDirectories(p);
        }
        h.mark("start");
        Path driverLogback = h.work.resolve("rmqhome/conf/logback_driver.xml");
        Harness.writeLogback(driverLogback, h.logs.resolve("driver-client.log"));
        System.setProperty("rmq.logback.configurationFile", driverLogback.toString());
        System.setProperty("logback.configurationFile", driverLogback.toString());
        System.setProperty("rocketmq.client.logRoot", h.logs.resolve("driver-client").toString());
        System.setProperty("user.home", h.work.resolve("home").toString());
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");

        Map<String, Object> run = new LinkedHashMap<>();
        try {
            runScenario(run);
        } finally {
            writeTruth(run);
        }
        h.killChildren();
        Harness.deleteTree(h.work);
    }
}
