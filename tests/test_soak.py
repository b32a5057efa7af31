"""The chaos soak, short (issue 39): two nights of a fleet of four real brokers (a growing
one and a cluster of two masters and a slave),
every step a process of its own, attempts SIGKILLed at seeded moments and the whole
deployment killed once; then every table equals an undisturbed serial run of the same
nights, every snapshot an undisturbed snapshot of its store, every alert reached both
channels (twice only after a killed delivery), and nothing is left behind.
tests/chaos.py has the engine; bench/soak.py runs it long, with random seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chaos import Faults, SoakBroker, soak, summary, verify

pytestmark = [pytest.mark.broker]

NIGHTS = ["2026-11-20T0200Z", "2026-11-21T0200Z"]
SEED = 39


def soak_fleet(growing_store: Path, cluster_store: Path,
               features_store: Path | None = None) -> list[SoakBroker]:
    """The fleet of the soak: the growing store's nights s1, s2; the cluster's three
    brokers at s1 and s2; with ``features_store``, a fifth broker whose store is the same
    both nights (quiet, with every 5.x store feature; its check is the longest)."""
    fleet = [SoakBroker("g", tuple(growing_store / "snapshots" / n / "store"
                                   for n in ("s1", "s2")))]
    if features_store is not None:
        fleet.append(SoakBroker("f", (features_store / "store",)))
    for broker in json.loads((cluster_store / "truth" / "brokers.json").read_text()):
        fleet.append(SoakBroker(
            broker["name"], tuple(cluster_store / n / broker["name"] / "store"
                                  for n in ("s1", "s2")),
            broker["cluster"], broker["role"], broker["master"]))
    return fleet


def test_a_fleets_nights_under_kills_equal_the_undisturbed_serial_nights(  # type: ignore[no-untyped-def]
        growing_store, cluster_store, tmp_path: Path) -> None:
    fleet = soak_fleet(growing_store, cluster_store)
    faults = Faults(seed=SEED, kill_chance=0.25, deployment_kill_chance=1.0,
                    deployment_window_s=30.0)
    run = soak(tmp_path, fleet, NIGHTS, faults)
    verdict = verify(run)
    report = summary(verdict)
    print(report)
    assert verdict.kills >= 3, report  # the seed kills; a soak that killed nothing proves nothing
    assert verdict.alerts > 0, report
    assert verdict.failed_attempts == [], report
    assert verdict.table_differences == {}, report
    assert verdict.snapshot_differences == [], report
    assert verdict.undelivered == [] and verdict.unexplained_duplicates == [], report
    assert verdict.leftovers == [], report
    assert verdict.rows_compared > 0

