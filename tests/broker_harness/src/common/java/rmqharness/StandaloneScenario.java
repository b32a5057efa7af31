package rmqharness;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.function.Predicate;

/**
 * A scenario with its own {@code main} ({@link ModeWorkload}, {@code ControllerWorkload}, {@code PopWorkload}):
 * the command line stores.py gives it, the driver JVM's set-up (directories, client logging, user home), the
 * run (the scenario, then its truth, also after a failure), and the exit codes stores.py reads: 0 done, 2 a
 * harness error (a broker did not do what the scenario needs), 3 anything else, 64 a bad command line.
 *
 * <p>A {@link Harness} in its "-clean" mode serves the scenario's helpers (ports, child JVMs, logback files,
 * timings, deadline). {@link #launch} is also {@link Harness}'s own {@code main}. (Not to be confused with
 * {@code Harness.Scenario}, the scenarios {@link Harness} itself runs: features, cluster.)
 */
abstract class StandaloneScenario {
    final Harness h;

    StandaloneScenario(Harness h) {
        this.h = h;
    }

    /** The scenario; {@code run} collects what goes into {@code truth/run.json}. */
    abstract void runScenario(Map<String, Object> run) throws Exception;

    /** Writes {@code truth/}: called after the scenario, also when it failed (with what was recorded). */
    abstract void writeTruth(Map<String, Object> run) throws Exception;

    /** Usage: {@code java -cp ... rmqharness.<Class> --variant V --out DIR [--timeout SEC]}. */
    static void main(String[] args, String name, Set<String> variants,
        BiFunction<Harness, String, StandaloneScenario> scenario) {
        launch(args, name, variants::contains, variant -> "v" + Compat.LINE + "-clean",
            (h, variant) -> scenario.apply(h, variant).run());
    }

    /** What a {@code main} runs once its {@link Harness} exists. */
    @FunctionalInterface
    interface Body {
        void run(Harness h, String variant) throws Exception;
    }

    /**
     * The command line of every harness {@code main} ({@code --variant V --out DIR [--timeout SEC]}), the
     * {@link Harness} (in the mode {@code harnessMode} gives the variant), the body, and the exit: 0 done, 2 a
     * harness error, 3 anything else, 64 a bad command line; children are always killed, and the JVM halts
     * (client libraries leave non-daemon threads behind).
     */
    static void launch(String[] args, String name, Predicate<String> known,
        Function<String, String> harnessMode, Body body) {
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
        if (variant == null || !known.test(variant) || out == null) {
            System.err.println("HARNESS ERROR: usage: " + name + " --variant NAME --out DIR [--timeout SEC]");
            System.exit(64);
        }
        Harness h = null;
        int rc;
        try {
            h = new Harness(harnessMode.apply(variant), Paths.get(out), timeout);
            body.run(h, variant);
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
