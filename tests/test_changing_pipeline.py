"""Real 5.5.0 stores that changed under us, night after night through the DAG's own steps.

The harness (``tests/broker_harness``, ``ChangingWorkload``) drove real brokers into what
production meets: a controller-mode master that rejoined as a slave and truncated the
messages its slave never received (``v5-failover``), a broker re-provisioned under the same
name (``v5-reprovisioned``), a slave rebuilt from an empty store (``v5-resync``). Each copy
of a node's store is one night. The oracle is the copies themselves (every record a
scan finds) and the truth the harness recorded from the clients and the admin API.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pipeline_nights import (
    _no_spark,
    assert_bounds_are_historys,
    rows,
    write_config,
    write_pipeline_config,
)

from jobs import pipeline
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_arrow
from jobs.lakehouse.history import superseded_mask
from jobs.load import rewrites
from jobs.pipeline_config import load_config
from jobs.snapshot.manifest import snapshot_store
from rmqlib.commitlog.records import scan_store
from rmqlib.dledger.records import scan_dledger
from rmqlib.store.commitlog_source import commitlog_source

pytestmark = pytest.mark.broker
NIGHTS = [f"2026-11-{day:02d}T0200Z" for day in range(1, 29)]


def copies(store: Path) -> dict[str, dict[str, Any]]:
    """The variant's copies by '<node>/<name>', with their truth."""
    truth = json.loads((store / "truth" / "copies.json").read_text())
    return {f"{c['node']}/{c['name']}": c for c in truth["copies"]}


def records(store: Path) -> dict[int, str]:
    """{physical offset: UNIQ_KEY} of every record of a store copy."""
    return {r.physical_offset: r.properties.get("UNIQ_KEY", "")
            for r in scan_store(store / "commitlog")}


def sha256_of_every_file(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


class BrokerNights:
    """One broker name fed, night after night, with the copies of one node's store."""

    def __init__(self, work: Path, broker: str) -> None:
        self.broker = broker
        self.config_path = write_config(work, broker, work / "none")
        self.config = load_config(self.config_path)
        self.warehouse = Path(self.config.warehouse)
        self.night = 0
        self.bounds_from_previous: list[bool] = []

    def run(self, store: Path) -> str:
        """The DAG's snapshot, load and check of ``store``; the night's snapshot id."""
        snapshot_id = NIGHTS[self.night]
        self.night += 1
        source = replace(self.config.brokers[0], store=str(store))
        taken = pipeline.snapshot_broker(self.config, source, snapshot_id)
        loaded = pipeline.load_broker(_no_spark, self.config, taken)
        pipeline.check_broker(_no_spark, self.config, loaded, self.config.alerts_config)
        self.bounds_from_previous.append(
            assert_bounds_are_historys(self.warehouse, self.broker, snapshot_id))
        # the snapshot is the broker's store byte for byte (not the manifest's word for it)
        copy = snapshot_store(Path(self.config.snapshot_root), self.broker, snapshot_id)
        assert sha256_of_every_file(copy) == sha256_of_every_file(store), snapshot_id
        return snapshot_id

    def current_messages(self) -> dict[int, str]:
        table = read_arrow(T.table_location(self.warehouse, T.MESSAGES), broker=self.broker)
        table = table.filter(pc.equal(table.column("inner_index"), 0))
        history = rows(self.warehouse, T.HISTORY_REWRITES, broker=self.broker)
        current = table.filter(pc.invert(superseded_mask(table, history, "physical_offset")))
        offsets = current.column("physical_offset").to_pylist()
        assert len(offsets) == len(set(offsets))  # one record per offset, never two
        return dict(zip(offsets, current.column("msg_id").to_pylist(), strict=True))

    def findings(self, snapshot_id: str) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for row in rows(self.warehouse, T.CHECK_RESULTS, broker=self.broker,
                        snapshot_id=snapshot_id):
            found.setdefault(row["check_name"], []).append(row)
        return found

    def history(self, snapshot_id: str) -> list[dict]:
        return [r for r in rows(self.warehouse, T.HISTORY_REWRITES, broker=self.broker,
                                snapshot_id=snapshot_id) if r["kind"] != rewrites.FILE]


def test_a_failover_truncation_is_loaded_and_its_lost_messages_are_named(
        failover_store: Path, tmp_path: Path) -> None:
    """The old master (n1), night after night: in sync, M2 acked (its slave stopped), down,
    rejoined as a slave of n2 (truncated to the epochs' consistent point, M3 received)."""
    truth = copies(failover_store)
    gone = set(json.loads((failover_store / "truth" / "failover.json").read_text())
               ["fate"]["goneAckedMsgIds"])
    assert gone  # the scenario lost acked messages, or it tests nothing
    nights = BrokerNights(tmp_path, "broker-a")
    for name in ("01-in-sync", "04-m2-acked", "05-old-master-down", "07-rejoined"):
        store = failover_store / truth[f"n1/{name}"]["path"]
        snapshot_id = nights.run(store)
        assert nights.current_messages() == records(store), name
    (rewrite,) = nights.history(snapshot_id)
    assert rewrite["kind"] == rewrites.REWRITTEN
    superseded = rows(nights.warehouse, T.SUPERSEDED_MESSAGES, broker="broker-a")
    assert {r["msg_id"] for r in superseded} - set(nights.current_messages().values()) == gone
    findings = nights.findings(snapshot_id)
    (lost,) = findings["messages_lost_in_rewrite"]
    assert (lost["severity"], lost["affected"]) == ("error", len(gone))
    # the night's one error: queues and index follow the new history
    assert {name for name, found in findings.items()
            if any(f["severity"] == "error" for f in found)} == {"messages_lost_in_rewrite"}
    # the first superseded offset is where n2's epoch began (the consistent point)
    epochs = json.loads((failover_store / "truth" / "failover.json").read_text())
    new_epoch = epochs["n2Elected"]["epochCache"]["epochList"][-1]["startOffset"]
    assert rewrite["from_offset"] == new_epoch
    # the next night (the same store, nothing rewritten since) is clean
    again = nights.run(store)
    assert nights.history(again) == []
    assert not [f for found in nights.findings(again).values() for f in found
                if f["severity"] == "error"]
    assert nights.current_messages() == records(store)
    # each night's queue bounds start from the night before's, but on the night of the
    # rewrite (which superseded units the night before counted) and the first
    assert nights.bounds_from_previous == [False, True, True, False, True]


def test_a_re_provisioned_broker_is_a_new_incarnation(reprovisioned_store: Path,
                                                      tmp_path: Path) -> None:
    truth = copies(reprovisioned_store)
    nights = BrokerNights(tmp_path, "broker-a")
    names = sorted(truth)
    first = records(reprovisioned_store / truth[names[0]]["path"])
    for name in names:
        store = reprovisioned_store / truth[name]["path"]
        snapshot_id = nights.run(store)
        assert nights.current_messages() == records(store), name
        if name == names[1]:
            (reset,) = nights.history(snapshot_id)
            assert (reset["kind"], reset["incarnation"]) == (rewrites.RESET, 2)
            assert "history_rewritten" in nights.findings(snapshot_id)
    assert nights.history(snapshot_id) == []  # the night after the reset is ordinary
    superseded = rows(nights.warehouse, T.SUPERSEDED_MESSAGES, broker="broker-a")
    assert {(r["physical_offset"], r["msg_id"]) for r in superseded} == set(first.items())


def test_a_slave_rebuilt_from_empty_is_compared_as_it_is(resync_store: Path,
                                                        tmp_path: Path) -> None:
    """Its store is behind the previous night's copy of it: the snapshot is that store,
    not the previous copy completed, so replica_status has the slave's real position."""
    truth = copies(resync_store)
    master = resync_store / truth["master/04-caught-up"]["path"]
    brokers = [{"name": "broker-a", "cluster": "c", "store": str(master)},
               {"name": "broker-a-s", "cluster": "c", "role": "slave", "master": "broker-a",
                "store": "none"}]
    config = load_config(write_pipeline_config(tmp_path, brokers, {}))
    for night, name in enumerate(("01-synced", "02-resyncing", "03-caught-up")):
        snapshot_id = NIGHTS[night]
        slave_store = resync_store / truth[f"slave/{name}"]["path"]
        for broker in config.brokers:
            store = slave_store if broker.is_slave else master
            taken = pipeline.snapshot_broker(config, replace(broker, store=str(store)),
                                             snapshot_id)
            copy = snapshot_store(Path(config.snapshot_root), broker.name, snapshot_id)
            assert sha256_of_every_file(copy) == sha256_of_every_file(store)
            loaded = pipeline.load_broker(_no_spark, config, taken)
            pipeline.check_broker(_no_spark, config, loaded, config.alerts_config)
        pipeline.check_cluster(config, "c", [b.as_dict() for b in config.brokers], snapshot_id)
        (status,) = rows(Path(config.warehouse), T.REPLICA_STATUS, broker="broker-a-s",
                         snapshot_id=snapshot_id)
        # what the slave received, as the broker counts it (a record cut mid-way included)
        assert status["replica_write_offset"] == truth[f"slave/{name}"]["maxOffset"], name


def dledger_records(store: Path) -> dict[int, str]:
    """{physical offset: UNIQ_KEY} of every record in a DLedger copy's entries."""
    source = commitlog_source(store)
    return {r.physical_offset: r.properties.get("UNIQ_KEY", "")
            for _, r in scan_dledger(source.directory)}


def test_a_dledger_leader_truncated_as_a_follower_is_loaded_as_it_is_now(
        dledger_truncated_store: Path, tmp_path: Path) -> None:
    """The first leader, night after night: in sync, leader with entries its followers
    never got, down, back as a follower that truncated them and took the new leader's."""
    truth = copies(dledger_truncated_store)
    old_leader = next(key.split("/")[0] for key in truth if key.endswith("05-old-leader-down"))
    names = [key for key in truth if key.startswith(f"{old_leader}/")]
    nights = BrokerNights(tmp_path, "broker-d")
    seen: list[dict[int, str]] = []
    for key in names:
        store = dledger_truncated_store / truth[key]["path"]
        snapshot_id = nights.run(store)
        seen.append(dledger_records(store))
        assert nights.current_messages() == seen[-1], key
    (rewrite,) = nights.history(snapshot_id)
    assert rewrite["kind"] == rewrites.REWRITTEN
    gone = {(o, m) for o, m in seen[-2].items()} - set(seen[-1].items())
    superseded = rows(nights.warehouse, T.SUPERSEDED_MESSAGES, broker="broker-d")
    assert {(r["physical_offset"], r["msg_id"]) for r in superseded} == gone
    assert rewrite["from_offset"] == min(offset for offset, _ in gone)
    # the superseded entries were never committed: no producer was told they were stored
    # (the truth: every acked send is still in the cluster), so none is reported lost
    fate = json.loads((dledger_truncated_store / "truth" / "dledger-truncated.json")
                      .read_text())["fate"]
    assert fate["goneAckedMsgIds"] == []
    assert {r["acknowledged"] for r in superseded} == {False}
    assert "messages_lost_in_rewrite" not in nights.findings(snapshot_id)
