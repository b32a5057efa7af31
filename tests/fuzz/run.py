"""Coverage-guided fuzzing of rmqlib's decoders with atheris (libFuzzer).

    python tests/fuzz/run.py TARGET [--seconds N] [--runs N]     # one target
    python tests/fuzz/run.py all --seconds N                     # every target, N s each
    python tests/fuzz/run.py combined --seconds N                # all targets in one process

The corpus of each target is seeded from the real-broker stores (``.cache/stores``, built
by the harness): prefixes of commitlog segments, consume-queue files, index files,
timer log files, checkpoints and config JSON (``tests/fuzz/corpus/<target>/``, ignored
by git). A crash, an exception other than rmqlib's ``StoreError``, a broken property
(``targets.py``), a hang (``-timeout``) or runaway memory (``-rss_limit_mb``) is written
by libFuzzer into
``tests/fuzz/regressions/<target>/``, which is committed: ``tests/test_fuzz.py`` replays
every file there on each test run. Each target runs in its own process (libFuzzer owns it).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(HERE), str(HERE.parent)]

STORES = ROOT / ".cache" / "stores"
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
SEED_BYTES = 64 * 1024  # prefixes: small inputs keep libFuzzer fast
INSTRUMENTED = [f"rmqlib.{name}" for name in (
    "common.accounting", "queues.batchconsumequeue", "checkpoint", "cli.main",
    "commitlog.records", "commitlog.arrow", "commitlog.layout", "commitlog.walk",
    "commitlog.compression", "config", "queues.consumequeue", "queues.consumequeue_ext",
    "cli.dump", "common.fileio", "indexfile", "commitlog.innerbatch", "commitlog.msgid",
    "commitlog.properties", "timers.timerlog", "timers.timerwheel", "dledger.entries",
    "dledger.arrow", "rocksdb.consume_queue", "rocksdb.config_store", "compaction.store",
    "controller.epochs")]


def _rocksdb_pairs(database: Path, families: tuple[str, ...] = ("offset", "default"),
                   count: int = 40) -> bytes:
    """A fuzz target's input from a real RocksDB database: up to ``count`` pairs of each
    family in turn (a consume queue: its bounds, then as many units), each as key length,
    value length, key, value (pairs over 255 bytes left out)."""
    from rmqlib.rocksdb.database import open_readonly

    pairs: list[tuple[bytes, bytes]] = []
    with open_readonly(database) as db:
        for family in families:
            pairs += [(k, v) for k, v in db.items(family)
                      if len(k) < 256 and len(v) < 256][:count]
            count = len(pairs)
    return b"".join(bytes([len(k), len(v)]) + k + v for k, v in pairs)


def _seeds(target: str) -> list[tuple[str, bytes]]:
    """(name, bytes) seeds for a target from every real-broker variant present."""
    seeds: list[tuple[str, bytes]] = []
    # complete variants only: a failed build (``<variant>.failed``) may lack directories
    for variant in sorted(p for p in STORES.glob("v*")
                          if (p / "store").is_dir() and (p / "COMPLETE").is_file()):
        store = variant / "store"

        def add(name: str, path: Path, limit: int | None = SEED_BYTES,
                prefix: str = variant.name) -> None:
            if path.is_file():
                data = path.read_bytes()
                seeds.append((f"{prefix}-{name}", data[:limit] if limit else data))

        if target.startswith(("commitlog", "dump")):
            if (store / "commitlog").is_dir():  # a DLedger store has none
                for segment in sorted((store / "commitlog").iterdir())[:2]:
                    add(f"commitlog-{segment.name}", segment)
        elif target in ("dledger", "dledger_arrow"):
            for segment in sorted(store.glob("dledger-*/data/[0-9]*"))[:2]:
                add(f"dledger-{segment.name}", segment)
        elif target == "rocksdb_consume_queue" and (store / "consumequeue" / "CURRENT").is_file():
            seeds.append((f"{variant.name}-rocksdb-cq", _rocksdb_pairs(store / "consumequeue")))
        elif target == "rocksdb_config_v2" and (store / "config" / "rdb" / "CURRENT").is_file():
            seeds.append((f"{variant.name}-rdb", _rocksdb_pairs(store / "config" / "rdb",
                                                                ("default",))))
        elif target == "compaction_queue":
            for queue in sorted(store.glob("compaction/compactionCq/*/*/[0-9]*"))[:2]:
                add(f"compaction-cq-{queue.parent.name}-{queue.name}", queue, None)
        elif target == "epoch_file":
            add("epoch-file", store / "epochFileCheckpoint", None)
            add("epoch-file-bak", store / "epochFileCheckpoint.bak", None)
        elif target == "consumequeue":
            for queue in sorted((store / "consumequeue").glob("*/*/*"))[:6]:
                add(f"cq-{queue.parent.parent.name}-{queue.parent.name}", queue)
        elif target == "indexfile":
            for index in sorted((store / "index").iterdir())[:2]:
                add(f"index-{index.name}", index, None)
        elif target == "checkpoint":
            add("checkpoint", store / "checkpoint", None)
            add("timercheck", store / "config" / "timercheck", None)
        elif target == "timerlog":
            for segment in sorted((store / "timerlog").glob("[0-9]*"))[:2]:
                add(f"timerlog-{segment.name}", segment)
        elif target == "config_json":
            for config in sorted((store / "config").glob("*.json")):
                add(f"config-{config.name}", config, None)
    if target == "innerbatch":
        from rmqlib.commitlog.innerbatch import encode_inner_batch

        seeds.append(("encoded", encode_inner_batch(
            [(i, bytes([i]) * (3 * i), {"TAGS": f"t{i}", "UNIQ_KEY": f"U{i}"})
             for i in range(4)])))
    if target == "rocksdb_config_v2":  # a topic, a group, an offset and a version, in order
        records = sorted([(b"\x01\x00\x03\x02\x00\x01T", b'\x01{"topicName":"T"}'),
                          (b"\x01\x00\x04\x02\x00\x01G", b'\x01{"groupName":"G"}'),
                          (b"\x01\x00\x01\x02\x00\x01G\x01\x00\x01T\x01\x00\x00\x00\x02",
                           (7).to_bytes(8, "big")),
                          (b"\x01\x00\x03\x01data_version", bytes(24))])
        seeds.append(("encoded", b"".join(bytes([len(k), len(v)]) + k + v
                                          for k, v in records)))
    if target == "epoch_file":  # two terms, as the broker writes them (CRC included)
        from rmqlib.controller import encode_epoch_file

        seeds.append(("encoded", encode_epoch_file([(1, 0), (5, 707447)])))
    if target == "compaction_queue":  # two units and the end unit of a rolled segment
        import struct

        unit = struct.Struct(">qiqqqhii")
        seeds.append(("encoded", unit.pack(0, 273, 7, 1_700_000_000_000, 70, 1, -1, 0)
                      + unit.pack(273, 258, 7, 1_700_000_000_001, 71, 1, -1, 0)
                      + unit.pack(-1, 0, 0, 0, 0, 0, -1, 0) + bytes(46)))
    if target == "batchconsumequeue" or target == "consumequeue_ext":
        from store_encoders import bcq_unit, cqx_unit

        if target == "batchconsumequeue":
            units = [bcq_unit(100 * i, 90, 7, 1_700_000_000_000 + i, 10 * i, 10)
                     for i in range(6)]
        else:
            units = [cqx_unit(5 + i, 1_700_000_000_000 + i, bytes([i] * (i % 3)))
                     for i in range(6)]
        seeds.append(("encoded", b"".join(units) + bytes(128)))
    return seeds


def seed_corpus(target: str) -> Path:
    """The target's seeds; for the combined target, every target's seeds behind the
    selector byte that routes them (``targets.COMBINED``)."""
    from targets import COMBINED, TARGETS

    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    if target == COMBINED:
        for number, name in enumerate(TARGETS):
            for seed, data in _seeds(name):
                (directory / f"{name}-{seed}").write_bytes(bytes([number]) + data)
    else:
        for name, data in _seeds(target):
            (directory / name).write_bytes(data)
    return directory


def fuzz_in_this_process(target: str, libfuzzer_args: list[str]) -> None:
    """The child: instrument rmqlib, hand the target to libFuzzer (which never returns)."""
    import atheris

    with atheris.instrument_imports(include=["rmqlib"]):
        for module in INSTRUMENTED:
            importlib.import_module(module)
    from targets import run_one

    atheris.Setup([sys.argv[0], *libfuzzer_args], lambda data: run_one(target, data))
    atheris.Fuzz()


def fuzz(target: str, seconds: int, runs: int | None) -> tuple[int, float]:
    """Run one target in a child process; returns (exit code, seconds)."""
    corpus = seed_corpus(target)
    regressions = REGRESSIONS / target
    regressions.mkdir(parents=True, exist_ok=True)
    args = [str(corpus), f"-artifact_prefix={regressions}/", "-timeout=20",
            "-rss_limit_mb=3072", "-max_len=131072", f"-max_total_time={seconds}",
            "-print_final_stats=1"]
    if runs is not None:
        args.append(f"-runs={runs}")
    started = time.monotonic()
    code = subprocess.call([sys.executable, __file__, "--child", target, *args])
    return code, time.monotonic() - started


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        fuzz_in_this_process(sys.argv[2], sys.argv[3:])
        return 0
    from targets import COMBINED, TARGETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", choices=[*TARGETS, COMBINED, "all"])
    parser.add_argument("--seconds", type=int, default=60, help="per target")
    parser.add_argument("--runs", type=int, help="stop after this many inputs per target")
    args = parser.parse_args()
    names = list(TARGETS) if args.target == "all" else [args.target]
    failed = []
    for name in names:
        code, took = fuzz(name, args.seconds, args.runs)
        print(f"fuzz {name}: exit {code} after {took:.0f} s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"crashes kept under {REGRESSIONS}/: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
