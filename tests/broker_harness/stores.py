"""Real Apache RocketMQ broker stores with ground truth, generated on demand and cached.

Each variant is produced by the Java harness next to this file (``pom.xml``; modules ``v4``
and ``v5``): it starts a real name server and a real broker (published org.apache.rocketmq
jars) as child JVMs on 127.0.0.1, drives a workload through the real client and records what
happened. Layout of one variant under the cache directory::

    <cache>/<variant>/store/     the broker's storePathRootDir
    <cache>/<variant>/truth/     messages.jsonl, consumer_groups.jsonl, consumed.jsonl,
                                 topic_stats.jsonl, run.json
    <cache>/<variant>/logs/      name server / broker / driver logs and configs
    <cache>/<variant>/COMPLETE   written last: JSON with the harness fingerprint

The extra variant ``v5-growing`` (not part of ``VARIANTS``, see ``EXTRA_VARIANTS``) also has
``snapshots/s1|s2|s3/store`` (hot copies of the running broker's store) and
``truth/snapshots.json``. The extra variant ``v5-features`` (IPv6, BatchCQ, consume-queue ext, LMQ,
property CRC, zstd/lz4, timers, magic-v2 pop retries) adds ``truth/batches.jsonl``, ``lmq.jsonl``,
``timers.jsonl``, ``pops.jsonl``, ``queue_records.jsonl`` and ``runtime_stats.json``. The extra
variant ``v5-cluster`` (name server, broker-a master + its slave broker-a-s1, broker-b master)
has no ``store/``: ``s1/<broker>/store`` (hot copies, the slave frozen and lagging) and
``s2/<broker>/store`` (the store roots after every broker's clean shutdown), truth in
``truth/`` (brokers.json, snapshots.json, expected.json, per-snapshot admin views). The extra
variant ``v5-dledger`` (one broker with ``enableDLegerCommitLog``: ``store/dledger-n0/{data,index,
checkpoint,currterm}`` instead of ``store/commitlog/``) adds ``snapshots/s1/store`` (hot copy before
the last ~100 messages), ``truth/dledger.json`` and ``truth/snapshots.json``. The extra variant
``v5-traces`` (every client traced: ``RMQ_SYS_TRACE_TOPIC``; transactions checked and discarded)
adds ``snapshots/s1/store`` (hot copy while transactions were undecided) and ``truth/``
``consumed.jsonl``, ``transactions.jsonl``, ``trace_messages.jsonl``, ``traces.json``. The extra
variant ``v5-rocksdbstore`` (RocksDB trans and timer state in ``store/rocksdbstore``) adds
``truth/`` ``transactions.jsonl``, ``tx_calls.jsonl``, ``timers.jsonl``, ``deliveries.jsonl`` and
``rocksdbstore.json``.

Stdlib only; imports nothing from the project. Usage::

    python tests/broker_harness/stores.py [--variants v4-clean,v5-killed|all] [--cache DIR]
                                          [--force]

Library use: ``ensure_stores(variants=None, cache_dir=None) -> dict[str, pathlib.Path]``
(``None`` = the four main variants; ``ensure_stores(["v5-growing"])`` for the extra one).
The cache defaults to ``<repo>/.cache/stores``; the environment variable ``RMQ_STORE_CACHE``
overrides it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
REPO_ROOT = HARNESS_DIR.parent.parent
POM = HARNESS_DIR / "pom.xml"

#: The four main variants: what ``ensure_stores()`` and the ``broker_stores`` fixture build.
VARIANTS: tuple[str, ...] = ("v4-clean", "v4-killed", "v5-clean", "v5-killed")
#: Built only on request (``ensure_stores(["v5-growing"])``, ``--variants v5-growing|all``, the
#: ``growing_store`` fixture): successive hot copies of one running 5.5.0 broker, the last one
#: after the broker's own retention deleted the oldest commitlog files.
GROWING_VARIANT = "v5-growing"
#: Built only on request too: one 5.5.0 broker with every optional 5.x store feature switched on
#: (batch consume queues, consume-queue ext, LMQ, property CRC, zstd/lz4, timers, IPv6).
FEATURES_VARIANT = "v5-features"
#: Built only on request too: a 5.5.0 cluster (two masters, one slave of broker-a) with two
#: snapshots, the first one taken while the slave was frozen (SIGSTOP) and lagging behind.
CLUSTER_VARIANT = "v5-cluster"
#: Built only on request too: one 5.5.0 broker whose commitlog is a single-node DLedger (Raft) log
#: (``dledger-n0/data``, ``dledger-n0/index``), with a hot copy before the last ~100 messages.
DLEDGER_VARIANT = "v5-dledger"
#: Built only on request too: one 5.5.0 broker with ``storeType=defaultRocksDB`` (consume queues
#: and topics, groups and offsets in RocksDB), the same workload and hot copy as v5-dledger.
ROCKSDB_VARIANT = "v5-rocksdb"
#: Built only on request too: the v5-dledger scenario on the 4.9.7 line (its DLedger version).
DLEDGER4_VARIANT = "v4-dledger"
#: Built only on request too: v5-rocksdb with the two other RocksDB config layouts, one database
#: for every table (``useSingleRocksDBForAllConfigs``: ``config/metadata/``) and the v2 config
#: managers (``configManagerVersion=v2``: ``config/rdb/``).
ROCKSDB_SINGLE_VARIANT = "v5-rocksdb-single"
ROCKSDB_V2_VARIANT = "v5-rocksdb-v2"
ROCKSDB_VARIANTS = (ROCKSDB_VARIANT, ROCKSDB_SINGLE_VARIANT, ROCKSDB_V2_VARIANT)
#: Built only on request too: the same workload plus a 2-queue topic with
#: ``cleanup.policy=COMPACTION`` (``compaction/``), compacted twice while the broker ran.
COMPACTION_VARIANT = "v5-compaction"
#: Built only on request too: one 5.5.0 broker in controller mode (the name server's embedded
#: DLedger controller), stopped and restarted on the same store: ``epochFileCheckpoint`` with
#: two epochs (+ ``.bak``) and ``brokerIdentity`` (``ControllerWorkload.java``, own ``main``).
CONTROLLER_VARIANT = "v5-controller"
#: Built only on request too: one 5.5.0 broker whose store holds POP consumers' state (classic
#: POP: checkpoints and acks in the commitlog, messages left in flight) next to classic push and
#: pull groups (``PopWorkload.java``, own ``main``).
POP_VARIANT = "v5-pop"
#: Built only on request too: the v5-pop scenario with KV pop (popConsumerKVServiceEnable): the
#: in-flight messages are records of kvStore/ (RocksDB, column family popState), not commitlog
#: checkpoints.
POP_KV_VARIANT = "v5-pop-kv"
#: Built only on request too: stores that change under a reader (``ChangingWorkload.java``, own
#: ``main``, copies ``copies/<node>/<NN-phase>/store`` in time order): a controller-mode pair whose
#: old master's acked messages are truncated away after an unclean failover (``v5-failover``), a
#: classic slave rebuilt from an empty store, copied while behind (``v5-resync``), and one broker
#: name re-provisioned on an empty store with other messages (``v5-reprovisioned``).
FAILOVER_VARIANT = "v5-failover"
RESYNC_VARIANT = "v5-resync"
REPROVISIONED_VARIANT = "v5-reprovisioned"
#: ... and a DLedger group of three whose old leader, back as a follower, truncates the entries
#: it appended but could not commit (``v5-dledger-truncated``).
DLEDGER_TRUNCATED_VARIANT = "v5-dledger-truncated"
CHANGING_VARIANTS = (FAILOVER_VARIANT, RESYNC_VARIANT, REPROVISIONED_VARIANT,
                     DLEDGER_TRUNCATED_VARIANT)
#: Built only on request too: one 5.5.0 broker whose clients all trace (``RMQ_SYS_TRACE_TOPIC``:
#: Pub, SubBefore/SubAfter, EndTransaction contexts) next to transactions committed, rolled back,
#: resolved by the broker's checks and discarded after ``transactionCheckMax`` checks
#: (``TracesWorkload.java``, own ``main``; a hot copy while transactions were undecided).
TRACES_VARIANT = "v5-traces"
#: Built only on request too: one 5.5.0 broker with the 5.5.x RocksDB state store populated
#: (``<store>/rocksdbstore``: ``transRocksDBEnable`` with ``transWriteOriginTransHalfEnable=false``
#: fills the ``trans`` column family, ``timerRocksDBEnable`` the ``timer`` one), transactions
#: decided, dropped after ``transactionCheckMax`` checks and left pending, timers delivered and
#: pending (``RocksStoreWorkload.java``, own ``main``; clean shutdown, no hot copy).
ROCKSDBSTORE_VARIANT = "v5-rocksdbstore"
EXTRA_VARIANTS: tuple[str, ...] = (GROWING_VARIANT, FEATURES_VARIANT, CLUSTER_VARIANT,
                                   DLEDGER_VARIANT, *ROCKSDB_VARIANTS, DLEDGER4_VARIANT,
                                   COMPACTION_VARIANT, CONTROLLER_VARIANT, POP_VARIANT,
                                   POP_KV_VARIANT, *CHANGING_VARIANTS, TRACES_VARIANT,
                                   ROCKSDBSTORE_VARIANT)
ALL_VARIANTS: tuple[str, ...] = VARIANTS + EXTRA_VARIANTS
DEFAULT_VARIANT = "v5-clean"
CACHE_ENV = "RMQ_STORE_CACHE"
MARKER = "COMPLETE"

#: Bump when this file changes how stores are generated (the Java sources and poms are
#: fingerprinted automatically).
HARNESS_REVISION = "1"

#: Variants generated at once (``RMQ_STORE_PARALLEL``).
PARALLEL = int(os.environ.get("RMQ_STORE_PARALLEL", "3"))
#: Seconds one variant may take before the harness is killed.
VARIANT_TIMEOUT = 480
#: Seconds the Maven build may take (first build downloads the RocketMQ jars).
MAVEN_TIMEOUT = 540

DRIVER_JVM_OPTS = [
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "-Djava.net.preferIPv4Stack=true",
]
#: Variants whose processes talk over IPv6 (::1): their driver JVM must not prefer the IPv4 stack.
IPV6_VARIANTS: tuple[str, ...] = (FEATURES_VARIANT,)
#: Variants whose scenario class has its own ``main`` (everything else runs ``rmqharness.Harness``):
#: the deployment-mode variants live entirely in ``ModeWorkload.java``, so the shared
#: ``Harness.java`` (part of every variant's fingerprint) did not have to change for them.
MODE_VARIANTS = (DLEDGER_VARIANT, *ROCKSDB_VARIANTS, DLEDGER4_VARIANT, COMPACTION_VARIANT)
MAIN_CLASSES: dict[str, str] = dict.fromkeys(MODE_VARIANTS, "rmqharness.ModeWorkload")
MAIN_CLASSES[CONTROLLER_VARIANT] = "rmqharness.ControllerWorkload"
MAIN_CLASSES[POP_VARIANT] = MAIN_CLASSES[POP_KV_VARIANT] = "rmqharness.PopWorkload"
MAIN_CLASSES.update(dict.fromkeys(CHANGING_VARIANTS, "rmqharness.ChangingWorkload"))
MAIN_CLASSES[TRACES_VARIANT] = "rmqharness.TracesWorkload"
MAIN_CLASSES[ROCKSDBSTORE_VARIANT] = "rmqharness.RocksStoreWorkload"
#: Scenario classes that serve several variants (others serve the variant ``*-<scenario>``:
#: ``TracesWorkload.java`` counts for ``v5-traces`` alone).
SCENARIO_OF: dict[str, str] = dict.fromkeys(MODE_VARIANTS, "mode")
SCENARIO_OF[POP_KV_VARIANT] = "pop"
SCENARIO_OF.update(dict.fromkeys(CHANGING_VARIANTS, "changing"))
SCENARIO_OF[ROCKSDBSTORE_VARIANT] = "rocksstore"  # RocksStoreWorkload.java


def driver_jvm_opts(variant: str) -> list[str]:
    """JVM options of the driver for one variant (no ``preferIPv4Stack`` for the IPv6 ones)."""
    if variant in IPV6_VARIANTS:
        return [o for o in DRIVER_JVM_OPTS if not o.startswith("-Djava.net.preferIPv4Stack")]
    return list(DRIVER_JVM_OPTS)


class StoreGenerationError(RuntimeError):
    """Generating a store failed; ``str()`` is a one-line reason, ``details`` the log tail."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


# --------------------------------------------------------------------------- paths, fingerprint


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser().resolve() if env else REPO_ROOT / ".cache" / "stores"


def _fingerprinted_files() -> list[Path]:
    files = [POM, HARNESS_DIR / "v4" / "pom.xml", HARNESS_DIR / "v5" / "pom.xml"]
    for root in (HARNESS_DIR / "src", HARNESS_DIR / "v4" / "src", HARNESS_DIR / "v5" / "src"):
        if root.is_dir():
            files.extend(p for p in root.rglob("*") if p.is_file())
    return sorted(set(files))


def _scenario_of(source: Path) -> str | None:
    """``GrowingWorkload.java`` -> ``growing``: a scenario's own workload class (None = shared)."""
    name = source.name
    if name.endswith("Workload.java") and name != "Workload.java":
        return name[: -len("Workload.java")].lower()
    return None


def fingerprint(variant: str | None = None) -> str:
    """sha256 over the harness sources and poms (plus HARNESS_REVISION).

    A scenario's own workload class (``<Scenario>Workload.java``) counts only for the variant
    ending in ``-<scenario>`` (or the variants ``SCENARIO_OF`` gives it), so editing one scenario
    does not regenerate every other store.
    """
    scenario = (SCENARIO_OF.get(variant, variant.rsplit("-", 1)[-1]) if variant
                else None)
    h = hashlib.sha256()
    h.update(f"revision={HARNESS_REVISION}\n".encode())
    for f in _fingerprinted_files():
        own = _scenario_of(f)
        if own is not None and variant is not None and own != scenario:
            continue
        rel = f.relative_to(HARNESS_DIR).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def is_complete(variant_dir: Path, fp: str) -> bool:
    marker = variant_dir / MARKER
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("fingerprint") == fp and (variant_dir / "truth" / "run.json").is_file()


# --------------------------------------------------------------------------- build


_BUILT: dict[str, bool] = {}


def _which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None and tool == "java" and os.environ.get("JAVA_HOME"):
        cand = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        path = str(cand) if cand.is_file() else None
    if path is None:
        raise StoreGenerationError(
            f"{tool} not found on PATH (the broker harness needs Java 17 and Maven)")
    return path


def build_harness() -> None:
    """``mvn -q -B -f tests/broker_harness/pom.xml package``, at most once per process."""
    if _BUILT.get(str(POM)):
        return
    mvn = _which("mvn")
    _which("java")
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "package"]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=MAVEN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StoreGenerationError(f"Maven build timed out after {MAVEN_TIMEOUT} s") from exc
    if proc.returncode != 0:
        out = proc.stdout.decode("utf-8", "replace")
        errors = [ln for ln in out.splitlines() if "ERROR" in ln]
        first = errors[0].strip() if errors else f"exit code {proc.returncode}"
        raise StoreGenerationError(f"Maven build of the broker harness failed: {first}",
                                   _tail(out.splitlines(), 25))
    for line in ("v4", "v5"):
        if not (HARNESS_DIR / line / "target" / "classpath.txt").is_file():
            raise StoreGenerationError(f"Maven build did not produce {line}/target/classpath.txt")
    _BUILT[str(POM)] = True


def _classpath(line: str) -> str:
    target = HARNESS_DIR / line / "target"
    deps = (target / "classpath.txt").read_text(encoding="utf-8").strip()
    return os.pathsep.join([str(target / "classes"), deps])


# --------------------------------------------------------------------------- generation


def _tail(lines: list[str], n: int) -> str:
    return "\n".join(lines[-n:])


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _failure_details(tmp: Path) -> tuple[str, str]:
    """(one-line reason, multi-line log tail) from a failed harness run."""
    driver = _read_lines(tmp / "logs" / "driver.out")
    reason = next((ln[len("HARNESS ERROR: "):] for ln in reversed(driver)
                   if ln.startswith("HARNESS ERROR: ")), "")
    parts = []
    # multi-broker variants (v5-cluster) log per broker: broker-a.out, broker-a.log, ...
    per_broker = sorted(p.name for p in (tmp / "logs").glob("broker-*.out"))
    per_broker += sorted(p.name for p in (tmp / "logs").glob("broker-*.log"))
    for name in ("broker.out", "broker.log", *per_broker, "namesrv.out"):
        lines = _read_lines(tmp / "logs" / name)
        if name.startswith("broker") and name.endswith(".log"):
            lines = [ln for ln in lines if " ERROR " in ln or " WARN " in ln or "Exception" in ln]
        if lines:
            parts.append(f"--- tail of logs/{name}\n" + _tail(lines, 12))
    parts.append("--- tail of logs/driver.out\n" + _tail(driver, 12))
    return reason, "\n".join(parts)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def generate_variant(variant: str, cache: Path, fp: str) -> Path:
    """Runs the harness for one variant into a temp dir, then renames it into place."""
    if variant not in ALL_VARIANTS:
        raise StoreGenerationError(
            f"unknown variant {variant!r} (known: {', '.join(ALL_VARIANTS)})")
    build_harness()
    line = variant.split("-", 1)[0]
    final = cache / variant
    tmp = cache / f".tmp-{variant}-{os.getpid()}-{int(time.time())}"
    _rmtree(tmp)
    (tmp / "logs").mkdir(parents=True)
    cmd = [_which("java"), *driver_jvm_opts(variant), f"-Duser.home={tmp / 'work' / 'home'}",
           "-cp", _classpath(line), MAIN_CLASSES.get(variant, "rmqharness.Harness"),
           "--variant", variant, "--out", str(tmp), "--timeout", str(VARIANT_TIMEOUT - 60)]
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "JAVA_TOOL_OPTIONS")}
    started = time.time()
    with open(tmp / "logs" / "driver.out", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=VARIANT_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            # the driver's process group holds the name server and broker JVMs too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    duration = time.time() - started
    if rc != 0 or not (tmp / "truth" / "run.json").is_file():
        reason, details = _failure_details(tmp)
        failed = cache / f"{variant}.failed"
        _rmtree(failed)
        with contextlib.suppress(OSError):
            os.rename(tmp, failed)
        if rc is None:
            reason = f"timed out after {VARIANT_TIMEOUT} s" + (f" ({reason})" if reason else "")
        raise StoreGenerationError(
            f"generating {variant} failed: {reason or f'harness exit code {rc}'} "
            f"(logs in {failed}/logs)",
            details)
    _rmtree(tmp / "work")
    marker = {"fingerprint": fp, "variant": variant, "harnessRevision": HARNESS_REVISION,
              "generatedAt": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "durationSec": round(duration, 1)}
    (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    if final.exists():
        trash = cache / f".trash-{variant}-{os.getpid()}-{int(time.time())}"
        os.rename(final, trash)
        _rmtree(trash)
    os.rename(tmp, final)
    return final


@contextlib.contextmanager
def _cache_lock(cache: Path):
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_stores(variants=None, cache_dir=None, *, force: bool = False,
                  log=None) -> dict[str, Path]:
    """Returns {variant: variant dir}, generating missing or stale variants first.

    A variant is reused when its ``COMPLETE`` marker records the current harness fingerprint.
    Generation writes into ``<cache>/.tmp-*`` and renames into place, so an interrupted run never
    leaves a directory that looks complete. Raises StoreGenerationError on failure.
    """
    names = list(VARIANTS if variants is None else variants)
    for v in names:
        if v not in ALL_VARIANTS:
            raise StoreGenerationError(
                f"unknown variant {v!r} (known: {', '.join(ALL_VARIANTS)})")
    cache = Path(cache_dir).expanduser().resolve() if cache_dir else default_cache_dir()
    result: dict[str, Path] = {}
    with _cache_lock(cache):
        # leftovers of interrupted runs (never complete: they were not renamed into place)
        for stale in list(cache.glob(".tmp-*")) + list(cache.glob(".trash-*")):
            _rmtree(stale)
        todo = []
        for v in names:
            vdir = cache / v
            if not force and is_complete(vdir, fingerprint(v)):
                result[v] = vdir
            else:
                todo.append(v)
        if todo:
            build_harness()
        result.update(_generate_all(todo, cache, log))
    return {v: result[v] for v in names}


def _generate_all(todo: list[str], cache: Path, log) -> dict[str, Path]:
    """Generate variants, up to PARALLEL at once: a run is mostly waiting (broker start,
    delivery, shutdown hooks, the 60 s retention timer), so runs overlap well even on two
    cores. Every run finishes before the first failure is raised."""
    def one(v: str) -> Path:
        if log:
            log(f"generating {v} into {cache / v} ...")
        t = time.time()
        path = generate_variant(v, cache, fingerprint(v))
        if log:
            log(f"generated {v} in {time.time() - t:.0f} s")
        return path

    done: dict[str, Path] = {}
    failed: dict[str, StoreGenerationError] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(todo)))) as pool:
        futures = {v: pool.submit(one, v) for v in todo}
        for v, future in futures.items():
            try:
                done[v] = future.result()
            except StoreGenerationError as error:
                failed[v] = error
    # A scenario waits on a real broker and real consumers against deadlines; three at
    # once on two cores once left a consumer 50 messages short of one. A variant that
    # failed is run once more, alone, before its failure is raised.
    for v, error in failed.items():
        if log:
            log(f"retrying {v} alone after: {error}")
        done[v] = one(v)
    return done


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate (or reuse) real RocketMQ broker stores.")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated subset of {','.join(ALL_VARIANTS)}, or 'all' "
                         f"(default: the four main variants)")
    ap.add_argument("--cache", default=None,
                    help=f"cache directory (default ${CACHE_ENV} or .cache/stores)")
    ap.add_argument("--force", action="store_true",
                    help="regenerate even if a complete store exists")
    ap.add_argument("--build-only", action="store_true",
                    help="only build the harness with Maven (make test runs it beside the "
                         "Python install: it downloads the RocketMQ jars)")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if variants == ["all"]:
        variants = list(ALL_VARIANTS)

    def log(msg: str) -> None:
        print(f"stores.py: {msg}", file=sys.stderr, flush=True)

    try:
        if args.build_only:
            build_harness()
            return 0
        paths = ensure_stores(variants, args.cache, force=args.force, log=log)
    except StoreGenerationError as exc:
        print(f"stores.py: error: {exc}", file=sys.stderr)
        if exc.details:
            print("\n".join("  | " + ln for ln in exc.details.splitlines()), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stores.py: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"stores.py: error: {exc}", file=sys.stderr)
        return 1
    for v, p in paths.items():
        print(f"{v}\t{p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
