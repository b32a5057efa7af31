"""Stores that change under a reader: the ``v5-failover``, ``v5-resync``, ``v5-reprovisioned`` and
``v5-dledger-truncated`` real-broker variants (tests/broker_harness, ``ChangingWorkload.java``).

Each variant keeps copies of its brokers' store roots in time order
(``copies/<node>/<NN-phase>/store``) and, in ``truth/copies.json``, the broker's own reading of
each copy's commitlog at that moment: every record from ``commitLogMinOffset`` to
``commitLogMaxOffset`` read back by offset through the admin API. The tests hold rmqlib's scan
of every copy to that reading, then check what changed between copies: acked messages
truncated away after a failover, a rebuilt slave behind its first life, one broker name with
two unrelated commitlogs, a DLedger follower truncating what its new leader does not have.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from rmqlib.commitlog.records import scan_store
from rmqlib.dledger.records import scan_dledger
from rmqlib.store.commitlog_source import commitlog_source

pytestmark = pytest.mark.broker


def truth(variant_dir: Path, name: str) -> dict:
    return json.loads((variant_dir / "truth" / name).read_text(encoding="utf-8"))


def sends(variant_dir: Path) -> list[dict]:
    lines = (variant_dir / "truth" / "sends.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def copies(variant_dir: Path) -> dict[str, dict]:
    """{"<node>/<NN-phase>": copy} in time order."""
    return {f"{c['node']}/{c['name']}": c for c in truth(variant_dir, "copies.json")["copies"]}


@cache
def scanned(store: Path) -> tuple[dict[int, tuple[str | None, str, str | None]], int | None, int]:
    """{offset: (UNIQ_KEY, topic, KEYS)} of every record rmqlib finds in a copy, its logical
    end (DLedger: the end of the last entry) and the start of its first commitlog file."""
    source = commitlog_source(store)
    first = min(int(p.name) for p in source.directory.iterdir() if p.name.isdigit())
    if source.dledger:
        pairs = list(scan_dledger(source.directory))
        end = max(entry.pos + entry.size for entry, _ in pairs)
        found = [record for _, record in pairs]
    else:
        scan = scan_store(source.directory)
        found = list(scan)
        end = scan.logical_end
    records = {r.physical_offset: (r.properties.get("UNIQ_KEY"), r.topic, r.properties.get("KEYS"))
               for r in found}
    return records, end, first


def read_copy(variant_dir: Path, copy: dict):  # type: ignore[no-untyped-def]
    return scanned(variant_dir / copy["path"])


def expected(copy: dict) -> dict[int, tuple[str | None, str, str | None]]:
    return {r["commitLogOffset"]: (r["msgId"], r["topic"], r["keys"]) for r in copy["records"]}


def test_every_copy_holds_what_its_broker_read_back(changing_store: Path) -> None:
    """For every copy: exactly the records (offset, msgId, topic, keys) the broker served from
    that store, ending where its last complete record ended; a copy taken mid-record (the
    rebuilt slave) has the broker's max offset past that end. A DLedger broker serves up to
    its committed position: what lies past it are entries of sends that were not acked."""
    all_copies = copies(changing_store)
    assert all_copies and [c["seq"] for c in all_copies.values()] == list(
        range(1, len(all_copies) + 1))
    unacked = {s["msgId"] for s in sends(changing_store) if not s["acked"]}
    for key, copy in all_copies.items():
        found, logical_end, first = read_copy(changing_store, copy)
        records = {o: r for o, r in found.items() if o < copy["maxOffset"]}
        beyond = {o: r for o, r in found.items() if o >= copy["maxOffset"]}
        assert records == expected(copy), key
        assert copy["recordCount"] == len(records) > 0, key
        assert first == copy["minOffset"] <= min(records), key
        if beyond:
            assert changing_store.name == "v5-dledger-truncated", key
            assert {r[0] for r in beyond.values()} <= unacked, key
            continue
        assert logical_end == copy["lastRecordEnd"], key
        if copy["partialRecordAt"] is None:
            assert copy["maxOffset"] == copy["lastRecordEnd"], key
        else:
            assert copy["partialRecordAt"] == logical_end < copy["maxOffset"], key


def test_every_acked_send_is_where_its_broker_said(changing_store: Path) -> None:
    """Each copy's acked messages sit at the offsets their send results gave (offsetMsgId)."""
    by_id = {s["msgId"]: s for s in sends(changing_store) if s["acked"]}
    assert by_id
    for key, copy in copies(changing_store).items():
        records, _, _ = read_copy(changing_store, copy)
        held = {r["msgId"]: r["commitLogOffset"] for r in copy["ackedHeld"]}
        stored = {uniq: offset for offset, (uniq, _, _) in records.items() if uniq in by_id}
        assert held == stored, key
        for msg_id, offset in held.items():
            assert by_id[msg_id]["commitLogOffset"] == offset, (key, msg_id)


# --------------------------------------------------------------------------- v5-failover


def phase_sends(variant_dir: Path, phase: str) -> dict[str, int]:
    return {s["msgId"]: s["commitLogOffset"] for s in sends(variant_dir)
            if s["acked"] and s["phase"] == phase}


def test_failover_truncated_the_old_masters_acked_m2(failover_store: Path) -> None:
    """M2 was acked by the old master n1 alone (the SyncStateSet was {n1}); after the unclean
    election of n2 and M3, n1 rejoined, truncated its commitlog to the end of M1 and took M3
    at the offsets M2 had: its copies before hold every M2 record, its copy after none."""
    all_copies = copies(failover_store)
    m1, m2, m3 = (phase_sends(failover_store, p) for p in ("M1", "M2", "M3"))
    assert all(s["ackedBy"] == "n1" and s["syncStateSetAtSend"] == ["n1"]
               for s in sends(failover_store) if s["phase"] == "M2")
    m1_end = min(m2.values())
    assert min(m3.values()) == m1_end  # M3 took the offsets M2 had

    def held(key: str) -> dict[str, int]:
        records, _, _ = read_copy(failover_store, all_copies[key])
        return {uniq: offset for offset, (uniq, _, _) in records.items()}

    before, down, rejoined = held("n1/01-in-sync"), held("n1/05-old-master-down"), \
        held("n1/07-rejoined")
    assert before == m1
    assert down == m1 | m2
    assert rejoined == m1 | m3 == held("n2/08-rejoined")
    assert not set(m2) & set(rejoined)
    records, _, _ = read_copy(failover_store, all_copies["n1/07-rejoined"])
    for msg_id, offset in m2.items():
        at = records.get(offset)
        assert at is None or at[0] in m3, msg_id  # an M3 record or inside one

    # the truncation point is the consistent point of the two epoch caches: the end of epoch 1
    epochs = all_copies["n1/07-rejoined"]["epochCache"]["epochList"]
    assert (epochs[0]["epoch"], epochs[0]["startOffset"]) == (1, 0)
    assert epochs[1]["startOffset"] == m1_end == epochs[0]["endOffset"]
    assert all_copies["n1/05-old-master-down"]["epochFileCheckpoint"]["text"].endswith("\n1-0\n")
    story = truth(failover_store, "failover.json")
    assert any(f"truncateOffset is {m1_end}" in line for line in story["n1TruncationLog"])
    # the cluster lost exactly the messages acked by n1 alone
    assert set(story["fate"]["goneAckedMsgIds"]) == set(m2)


# --------------------------------------------------------------------------- v5-resync


def test_a_rebuilt_slave_starts_at_its_masters_last_file_and_lags(resync_store: Path) -> None:
    """The slave's store was deleted and rebuilt: a classic master streams an empty slave its
    last commitlog file only, so the rebuilt commitlog starts past 0; the copy taken while the
    stream was held ends before the first life's copy did (mid-record), and everything it holds
    is the master's bytes at the same offsets."""
    all_copies = copies(resync_store)
    first, partial, caught_up = (all_copies[f"slave/{n}"] for n in
                                 ("01-synced", "02-resyncing", "03-caught-up"))
    master = all_copies["master/04-caught-up"]
    plan = truth(resync_store, "resync.json")["resyncPlan"]
    assert first["minOffset"] == 0
    assert partial["minOffset"] == caught_up["minOffset"] == plan["masterLastFileStart"] > 0
    assert partial["maxOffset"] < first["maxOffset"] < partial["masterMaxOffset"]
    assert partial["maxOffsetAfterCopy"] == partial["maxOffset"]
    assert partial["partialRecordAt"] is not None
    master_records, _, _ = read_copy(resync_store, master)
    for copy in (first, partial, caught_up):
        records, _, _ = read_copy(resync_store, copy)
        assert all(master_records[offset] == record for offset, record in records.items())
    caught, _, _ = read_copy(resync_store, caught_up)
    assert caught == {o: r for o, r in master_records.items() if o >= caught_up["minOffset"]}


# --------------------------------------------------------------------------- v5-reprovisioned


def test_one_broker_name_two_unrelated_commitlogs(reprovisioned_store: Path) -> None:
    """broker-a re-provisioned on an empty store: offset 0 and everything after it hold other
    messages than in its first life; the later copy of the second life extends the earlier."""
    all_copies = copies(reprovisioned_store)
    life1, life2, more = (read_copy(reprovisioned_store, all_copies[f"broker-a/{n}"])[0]
                          for n in ("01-first-life", "02-second-life", "03-second-life-more"))
    assert 0 in life1 and 0 in life2 and life1[0] != life2[0]
    assert not {r[0] for r in life1.values()} & {r[0] for r in more.values()}
    assert life2.items() <= more.items()
    first_end = all_copies["broker-a/01-first-life"]["maxOffset"]
    assert max(more) > first_end  # the second life grew past the first life's end
    phases = {s["msgId"]: s["phase"] for s in sends(reprovisioned_store)}
    assert {phases[r[0]] for r in life1.values()} == {"P1"}
    assert {phases[r[0]] for r in more.values()} == {"P2", "P3"}


# --------------------------------------------------------------------------- v5-dledger-truncated


def test_the_old_dledger_leader_truncated_its_uncommitted_entries(dledger_truncated_store: Path
                                                                  ) -> None:
    """D3 was appended by the leader alone (followers dead), its sends failed, the leader was
    killed: its data files hold D3 past its committed position. The new leader's term wrote D4
    at the same positions; the old leader, back as a follower, truncated D3 and holds D4. D2's
    sends failed too, but its entries reached the frozen followers and were committed."""
    all_copies = copies(dledger_truncated_store)
    story = truth(dledger_truncated_store, "dledger-truncated.json")
    old, new = story["firstLeader"], story["secondLeader"]  # whichever won the elections
    assert old != new
    phase_ids = {p: {s["msgId"] for s in sends(dledger_truncated_store) if s["phase"] == p}
                 for p in ("D1", "D2", "D3", "D4")}
    down = all_copies[f"{old}/05-old-leader-down"]
    found, end, _ = read_copy(dledger_truncated_store, down)
    tail = {o: r[0] for o, r in found.items() if o >= down["maxOffset"]}
    assert set(tail.values()) == phase_ids["D3"] and end > down["maxOffset"]
    rejoined_copy = next(c for c in all_copies.values()
                         if c["node"] == old and c["phase"] == "rejoined")
    rejoined, _, _ = read_copy(dledger_truncated_store, rejoined_copy)
    ids = {r[0] for r in rejoined.values()}
    assert not ids & phase_ids["D3"]
    assert ids == phase_ids["D1"] | phase_ids["D2"] | phase_ids["D4"]
    d4 = {o for o, r in rejoined.items() if r[0] in phase_ids["D4"]}
    assert min(d4) == min(tail)  # D4 starts where D3 did (one entry header in)
    new_leader, _, _ = read_copy(dledger_truncated_store, all_copies[f"{new}/06-new-leader-d4"])
    assert rejoined == new_leader
    assert any("TRUNCATE" in line for line in story["oldLeaderTruncationLog"])
    assert story["fate"]["goneAckedMsgIds"] == []
    assert set(story["fate"]["storedUnackedMsgIds"]) == phase_ids["D2"]
