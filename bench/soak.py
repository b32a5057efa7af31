"""The chaos soak, long (issue 39): rounds of a fleet's nights under seeded kills, each
round with a fresh warehouse and a random seed, each verified against an undisturbed
serial run of the same nights (tests/chaos.py; tests/test_soak.py is the short form).

A round is the real-broker fleet of the short form (a growing broker, a cluster of two
masters and a slave) and a fifth, quiet broker with every 5.x store feature, over two
nights; what changes from round to round is
where the kills land. Rounds run until ``--minutes`` have passed or ``--rounds`` are done.
A round that is not clean stops the soak and keeps its directory for a look.
With ``--disk-squeeze`` (as root) each round's snapshots, warehouse and reports live on a
tmpfs of their own, which half of the nights fill for 8 s at a random moment: the steps
that meet the full disk fail in one line and are retried once it has room again.

Usage: python bench/soak.py [--minutes 120] [--rounds N] [--seed S] [--kill-chance 0.3]
                            [--disk-squeeze [--disk-mib 1024]]
Results: one line per round on stdout, every round's verdict in
.cache/bench/soak_results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "broker_harness")]

from chaos import Faults, soak, summary, verify  # noqa: E402
from test_soak import NIGHTS, soak_fleet  # noqa: E402
from tmpfs import mounted_tmpfs  # noqa: E402

RESULTS = ROOT / ".cache" / "bench" / "soak_results.json"


def fleet_stores() -> tuple[Path, Path, Path]:
    """The growing, cluster and features variants, generated if missing."""
    import stores

    built = stores.ensure_stores([stores.GROWING_VARIANT, stores.CLUSTER_VARIANT,
                                  stores.FEATURES_VARIANT])
    return (built[stores.GROWING_VARIANT], built[stores.CLUSTER_VARIANT],
            built[stores.FEATURES_VARIANT])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=0, help="0: until --minutes")
    parser.add_argument("--seed", type=int, default=None, help="of the first round")
    parser.add_argument("--kill-chance", type=float, default=0.3)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--disk-squeeze", action="store_true",
                        help="the data on a tmpfs filled now and then (root)")
    parser.add_argument("--disk-mib", type=int, default=1024)
    args = parser.parse_args()
    if args.disk_squeeze and os.geteuid() != 0:
        parser.error("--disk-squeeze mounts a tmpfs: run as root")
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="rmq-soak-airflow-"))
    fleet = soak_fleet(*fleet_stores())
    work = args.work or Path(tempfile.mkdtemp(prefix="rmq-soak-"))
    seeds = random.Random(args.seed)
    deadline = time.monotonic() + args.minutes * 60
    verdicts = []
    round_no = 0
    while (not args.rounds or round_no < args.rounds) and time.monotonic() < deadline:
        round_no += 1
        seed = args.seed if round_no == 1 and args.seed is not None else seeds.randrange(10**6)
        faults = Faults(seed=seed, kill_chance=args.kill_chance,
                        disk_squeeze_chance=0.5 if args.disk_squeeze else 0.0)
        round_dir = work / f"round-{round_no}"
        with own_filesystem(round_dir / "data", args.disk_mib if args.disk_squeeze else 0):
            verdict = verify(soak(round_dir, fleet, NIGHTS, faults, data=round_dir / "data"))
            if args.disk_squeeze and not verdict.clean():  # keep it past the unmount
                shutil.copytree(round_dir / "data", round_dir / "data-kept", symlinks=True)
        verdicts.append({"round": round_no, "seed": seed, **verdict.as_dict()})
        print(f"round {round_no} seed {seed}: {'clean' if verdict.clean() else 'NOT CLEAN'}")
        print(summary(verdict), flush=True)
        _save(verdicts)
        if not verdict.clean():
            print(f"kept for a look: {round_dir}")
            return 1
        shutil.rmtree(round_dir)
    _report(verdicts)
    return 0


@contextmanager
def own_filesystem(directory: Path, mib: int) -> Iterator[None]:
    """``directory`` as a tmpfs of ``mib`` MiB for the block (0: a plain directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not mib:
        yield
        return
    with mounted_tmpfs(directory, mib):
        yield


def _save(verdicts: list[dict[str, object]]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(verdicts, indent=1, default=str))


def _report(verdicts: list[dict[str, object]]) -> None:
    kills: Counter[str] = Counter()
    for verdict in verdicts:
        kills.update(verdict["kills_by_step"])  # type: ignore[arg-type]
    total = {key: sum(int(v[key]) for v in verdicts)  # type: ignore[call-overload]
             for key in ("nights", "attempts", "kills", "rows_compared", "alerts",
                         "duplicates_after_kills")}
    deployment = sum(len(v["deployment_kills"]) for v in verdicts)  # type: ignore[arg-type]
    squeezes = sum(len(v["disk_squeezes"]) for v in verdicts)  # type: ignore[arg-type]
    disk_full = sum(int(v["disk_full_failures"]) for v in verdicts)  # type: ignore[call-overload]
    print(f"\n{len(verdicts)} rounds, {total['nights']} nights, {total['attempts']} attempts, "
          f"{total['kills']} kills {dict(kills)}, {deployment} deployment kills, "
          f"{squeezes} disk-full events ({disk_full} attempts failed by them), "
          f"{total['rows_compared']:,} rows compared, 0 differences, {total['alerts']} alerts "
          f"delivered ({total['duplicates_after_kills']} again after a killed delivery)")


if __name__ == "__main__":
    sys.exit(main())
