package rmqharness;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Hot copy of a live broker store root, the way a nightly snapshot job would take it while the
 * broker keeps running. Order: {@code config/}, then the queue trees ({@code consumequeue/},
 * {@code batchconsumequeue/}, {@code consumequeue_ext/}) and {@code index/}, then {@code commitlog/},
 * then everything else ({@code timerlog/}, {@code timerwheel}, {@code compaction/}, {@code rocksdbstore/},
 * ...), then {@code checkpoint}, then the {@code abort}/{@code abort.bak}/{@code lock} markers as they are.
 * Copying the queues before the commitlog means every consume-queue unit of the copy points at bytes
 * the (later) commitlog copy holds.
 *
 * <p>Files are copied byte for byte in 64 KiB chunks; all-zero chunks are skipped with a seek, so the
 * copy is sparse where the source reads as zeros (preallocated commitlog tails, the 37 MiB
 * {@code timerwheel}) but has the same length and content. Modification times are copied. A file that
 * disappears between listing and copying (the broker rewrites config JSON via {@code .tmp} + rename)
 * is recorded in {@code vanished}; the config directory is copied again (up to 5 times) until the copy
 * holds no {@code *.tmp} and no {@code X.bak} without {@code X}.
 */
final class StoreCopier {
    static final List<String> QUEUE_DIRS = List.of("consumequeue", "batchconsumequeue", "consumequeue_ext", "index");
    static final List<String> MARKERS = List.of("abort", "abort.bak", "lock");
    static final String CHECKPOINT = "checkpoint";
    static final int CHUNK = 64 * 1024;
    static final int CONFIG_ATTEMPTS = 5;

    private final Path src;
    private final Path dst;
    private final ByteBuffer buf = ByteBuffer.allocate(CHUNK);
    private final List<Map<String, Object>> steps = new ArrayList<>();
    private final List<String> vanished = new ArrayList<>();
    private long files;
    private long bytes;
    private long dataBytes;

    StoreCopier(Path src, Path dst) {
        this.src = src;
        this.dst = dst;
    }

    /** Copies the store; returns timings (ms since epoch) per step, counts and anomalies. */
    Map<String, Object> copy() throws IOException {
        Files.createDirectories(dst);
        Map<String, Object> r = new LinkedHashMap<>();
        long start = System.currentTimeMillis();
        r.put("copyStartMs", start);

        int attempts = 0;
        long s = System.currentTimeMillis();
        while (true) {
            attempts++;
            Harness.deleteTree(dst.resolve("config"));
            copyEntry("config");
            String problem = configProblem(dst.resolve("config"));
            if (problem == null || attempts >= CONFIG_ATTEMPTS) {
                if (problem != null) {
                    r.put("configProblem", problem);
                }
                break;
            }
        }
        step("config", s, List.of("config"));
        r.put("configCopyAttempts", attempts);

        s = System.currentTimeMillis();
        List<String> queues = new ArrayList<>();
        for (String d : QUEUE_DIRS) {
            if (Files.exists(src.resolve(d))) {
                copyEntry(d);
                queues.add(d);
            }
        }
        step("queues+index", s, queues);

        s = System.currentTimeMillis();
        copyEntry("commitlog");
        step("commitlog", s, List.of("commitlog"));

        s = System.currentTimeMillis();
        Set<String> done = new TreeSet<>(queues);
        done.addAll(List.of("config", "commitlog", CHECKPOINT));
        done.addAll(MARKERS);
        List<String> rest = new ArrayList<>();
        for (String name : sortedNames(src)) {
            if (!done.contains(name)) {
                copyEntry(name);
                rest.add(name);
            }
        }
        step("other", s, rest);

        s = System.currentTimeMillis();
        copyEntry(CHECKPOINT);
        step("checkpoint", s, List.of(CHECKPOINT));

        s = System.currentTimeMillis();
        List<String> markers = new ArrayList<>();
        for (String m : MARKERS) {
            if (Files.exists(src.resolve(m), LinkOption.NOFOLLOW_LINKS)) {
                copyEntry(m);
                markers.add(m);
            }
        }
        step("markers", s, markers);

        r.put("copyEndMs", System.currentTimeMillis());
        r.put("steps", steps);
        r.put("files", files);
        r.put("bytes", bytes);
        r.put("nonZeroBytesWritten", dataBytes);
        r.put("vanished", vanished);
        return r;
    }

    private void step(String name, long startMs, List<String> entries) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("step", name);
        m.put("entries", entries);
        m.put("startMs", startMs);
        m.put("endMs", System.currentTimeMillis());
        steps.add(m);
    }

    /** Why a copied config dir looks torn (a rewrite caught between its steps), or null. */
    static String configProblem(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return null;
        }
        Set<String> names = new TreeSet<>(sortedNames(dir));
        for (String n : names) {
            if (n.endsWith(".tmp")) {
                return "temporary file " + n;
            }
            if (n.endsWith(".bak") && !names.contains(n.substring(0, n.length() - 4))) {
                return n + " without " + n.substring(0, n.length() - 4);
            }
        }
        return null;
    }

    static List<String> sortedNames(Path dir) throws IOException {
        List<String> names = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path p : ds) {
                names.add(p.getFileName().toString());
            }
        } catch (NoSuchFileException e) {
            return names;
        }
        names.sort(null);
        return names;
    }

    private void copyEntry(String rel) throws IOException {
        Path from = src.resolve(rel);
        Path to = dst.resolve(rel);
        if (Files.isDirectory(from, LinkOption.NOFOLLOW_LINKS)) {
            Files.createDirectories(to);
            for (String name : sortedNames(from)) {
                copyEntry(rel + "/" + name);
            }
            return;
        }
        try {
            copyFile(from, to);
        } catch (NoSuchFileException e) {
            vanished.add(rel);
            Files.deleteIfExists(to);
        }
    }

    private void copyFile(Path from, Path to) throws IOException {
        Files.createDirectories(to.getParent());
        long pos = 0;
        try (FileChannel in = FileChannel.open(from, StandardOpenOption.READ);
             FileChannel out = FileChannel.open(to, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            while (true) {
                buf.clear();
                int n = in.read(buf, pos);
                if (n < 0) {
                    break;
                }
                buf.flip();
                if (!allZero(buf)) {
                    long at = pos;
                    while (buf.hasRemaining()) {
                        at += out.write(buf, at);
                    }
                    dataBytes += n;
                }
                pos += n;
            }
            if (out.size() < pos) {
                // trailing zeros were skipped: one zero byte at the end gives the file its full length
                out.write(ByteBuffer.wrap(new byte[1]), pos - 1);
            }
        }
        Files.setLastModifiedTime(to, Files.getLastModifiedTime(from));
        files++;
        bytes += pos;
    }

    private static boolean allZero(ByteBuffer b) {
        byte[] a = b.array();
        int end = b.limit();
        for (int i = 0; i < end; i++) {
            if (a[i] != 0) {
                return false;
            }
        }
        return true;
    }

    /**
     * Relative paths and sizes of every regular file under {@code root}, sorted. The broker may delete
     * files while the tree is walked; such files are left out, and a walk that trips over a vanished
     * directory is repeated.
     */
    static Map<String, Long> listFiles(Path root) throws IOException {
        for (int attempt = 0; ; attempt++) {
            Map<String, Long> out = new java.util.TreeMap<>();
            if (!Files.isDirectory(root)) {
                return out;
            }
            try (var walk = Files.walk(root)) {
                for (Path p : (Iterable<Path>) walk::iterator) {
                    try {
                        if (Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) {
                            out.put(root.relativize(p).toString().replace('\\', '/'), Files.size(p));
                        }
                    } catch (NoSuchFileException ignored) {
                        // deleted while listing
                    }
                }
                return out;
            } catch (java.io.UncheckedIOException e) {
                if (!(e.getCause() instanceof NoSuchFileException) || attempt >= 4) {
                    throw e;
                }
            }
        }
    }
}
