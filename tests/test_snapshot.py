"""Snapshots of real-broker stores: byte-identical copies, reuse of finished files, sparse
zero tails, manifests, the broker's state, retention, and SFTP through a real sshd."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from changing_broker import ChangingBroker, rewrite_within_the_listings_tick
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.snapshot.copier import SnapshotInPastError, take_snapshot
from jobs.snapshot.manifest import (
    LINKED,
    MANIFEST,
    PARTIAL_PREFIX,
    Manifest,
    complete_snapshots,
    snapshot_dir,
    snapshot_store,
    verify_snapshot,
)
from jobs.snapshot.retention import clean_up_snapshots
from jobs.snapshot.sources import LocalSource, SftpSource, SourceError
from rmqlib.timers.timerlog import TL_UNIT_SIZE

IDS = ("2026-11-20T0200Z", "2026-11-21T0200Z", "2026-11-22T0200Z")


def files_of(root: Path) -> dict[str, Path]:
    """Every file under root, through symbolic links too."""
    paths = [Path(d) / n for d, _, names in os.walk(root, followlinks=True) for n in names]
    return {p.relative_to(root).as_posix(): p for p in sorted(paths) if p.is_file()}


def assert_identical(source: Path, copy: Path) -> None:
    """Same file names, same sizes, same bytes (holes read back as zeros)."""
    original, copied = files_of(source), files_of(copy)
    assert sorted(original) == sorted(copied)
    for name, path in original.items():
        assert path.read_bytes() == copied[name].read_bytes(), name


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """(size, mtime_ns, sha256) of every file: proof a source was not modified."""
    return {name: (p.stat().st_size, p.stat().st_mtime_ns,
                   hashlib.sha256(p.read_bytes()).hexdigest())
            for name, p in files_of(root).items()}


@pytest.fixture(scope="module")
def growing_snapshots(growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Snapshots s1, s2, s3 of the growing harness broker, taken in order as IDS."""
    root = tmp_path_factory.mktemp("snapshots")
    sources = [growing_store / "snapshots" / name / "store" for name in ("s1", "s2", "s3")]
    before = [fingerprint(source) for source in sources]
    manifests = [take_snapshot(LocalSource(source), root, "b", snapshot_id)
                 for source, snapshot_id in zip(sources, IDS, strict=True)]
    assert [fingerprint(source) for source in sources] == before  # sources untouched
    return root, sources, manifests


@pytest.mark.broker
def test_every_snapshot_reads_back_byte_identical_and_verifies(growing_snapshots):  # type: ignore[no-untyped-def]
    root, sources, manifests = growing_snapshots
    for source, manifest in zip(sources, manifests, strict=True):
        assert_identical(source, snapshot_store(root, "b", manifest.snapshot_id))
        assert verify_snapshot(root, "b", manifest.snapshot_id) == []
        assert manifest.abort_present and any("abort file" in n for n in manifest.notes)
    assert complete_snapshots(root, "b") == list(IDS)


@pytest.mark.broker
def test_finished_files_are_hard_linked_and_growing_files_read_only_new_bytes(
        growing_snapshots):  # type: ignore[no-untyped-def]
    root, _sources, (first, second, _third) = growing_snapshots
    before = {f.path: f for f in first.files}
    linked = [f for f in second.files if f.how == LINKED]
    # s1's full commitlog files (a later file had data) and full queue files
    assert {f.path for f in linked} >= {"commitlog/00000000000000000000",
                                        "commitlog/00000000000001048576"}
    for entry in linked:
        old = snapshot_store(root, "b", first.snapshot_id) / entry.path
        new = snapshot_store(root, "b", second.snapshot_id) / entry.path
        assert old.stat().st_ino == new.stat().st_ino and entry.from_broker == 0
    # The file being written in s1 is re-read from its last record's start only.
    active = next(f for f in second.files if f.path == "commitlog/00000000000002097152")
    assert active.how == "grown"
    assert active.reused == before[active.path].resume_at > 0
    assert active.from_broker == active.size - active.reused
    # Over the whole store, the broker was read for far less than the copy holds.
    commitlog = [f for f in second.files if f.kind == "commitlog"]
    assert sum(f.from_broker for f in commitlog) < sum(f.data_length for f in commitlog)


@pytest.mark.broker
def test_zero_tails_are_holes_not_copied_bytes(growing_snapshots):  # type: ignore[no-untyped-def]
    root, _sources, (_first, second, _third) = growing_snapshots
    empty = next(f for f in second.files if f.path == "commitlog/00000000000005242880")
    assert empty.data_length == 0 and empty.size == 1 << 20  # preallocated, all zeros
    copy = snapshot_store(root, "b", second.snapshot_id) / empty.path
    assert copy.stat().st_size == 1 << 20 and copy.stat().st_blocks == 0
    assert second.zero_tail_bytes == sum(f.size - f.data_length for f in second.files) > 0


@pytest.mark.broker
def test_taking_a_snapshot_again_changes_nothing_and_the_past_is_refused(
        growing_snapshots, growing_store):  # type: ignore[no-untyped-def]
    root, sources, manifests = growing_snapshots
    manifest_file = snapshot_dir(root, "b", IDS[1]) / MANIFEST
    written = manifest_file.stat().st_mtime_ns
    again = take_snapshot(LocalSource(sources[1]), root, "b", IDS[1])
    assert again.existing and manifest_file.stat().st_mtime_ns == written
    assert again.files == manifests[1].files
    with pytest.raises(SnapshotInPastError, match="2026-11-22T0200Z is newer"):
        take_snapshot(LocalSource(sources[0]), root, "b", "2026-11-19T0200Z")


def test_a_leftover_partial_snapshot_is_replaced(broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    source = broker_stores["v4-clean"] / "store"
    partial = tmp_path / "b" / f"{PARTIAL_PREFIX}{IDS[0]}"
    (partial / "store" / "commitlog").mkdir(parents=True)
    (partial / "store" / "commitlog" / "junk").write_bytes(b"half a copy")
    manifest = take_snapshot(LocalSource(source), tmp_path, "b", IDS[0])
    assert not partial.exists() and not manifest.broker_running
    assert_identical(source, snapshot_store(tmp_path, "b", IDS[0]))


def test_a_held_store_lock_is_noted_as_a_running_broker(broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """Another process holds an fcntl write lock on ``lock``, as the broker's
    FileChannel.tryLock does; the snapshot notes it without taking any lock itself."""
    store = tmp_path / "store"
    shutil.copytree(broker_stores["v5-clean"] / "store", store)
    (store / "lock").touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'r+b'); "
         "fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
         str(store / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        manifest = take_snapshot(LocalSource(store), tmp_path / "snapshots", "b", IDS[0])
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert manifest.broker_running
    assert any(f"pid {holder.pid}" in note for note in manifest.notes)
    assert LocalSource(store).lock_holder() is None  # released with its process


def test_retention_keeps_the_newest_and_recent_snapshots(broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    source = LocalSource(broker_stores["v4-clean"] / "store")
    ids = ["2026-11-01T0200Z", "2026-11-05T0200Z", "2026-11-10T0200Z", "2026-11-12T0200Z"]
    for snapshot_id in ids:
        take_snapshot(source, tmp_path, "b", snapshot_id)
    (tmp_path / "b" / f"{PARTIAL_PREFIX}2026-11-11T0200Z").mkdir()
    result = clean_up_snapshots(tmp_path, "b", ids[-1], retention_days=6)
    assert result.removed == ids[:2] and result.kept == ids[2:]
    assert result.partials_removed == [f"{PARTIAL_PREFIX}2026-11-11T0200Z"]
    assert complete_snapshots(tmp_path, "b") == ids[2:]
    for snapshot_id in ids[2:]:  # hard links into removed snapshots still read back
        assert verify_snapshot(tmp_path, "b", snapshot_id) == []
    # Even past its retention, the newest snapshot stays: the next one reuses its files.
    assert clean_up_snapshots(tmp_path, "b", "2026-12-31T0200Z", 1).kept == [ids[-1]]


def test_a_linked_commitlog_directory_is_copied_and_odd_files_are_noted(
        broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """A commitlog on another disk behind a symbolic link (common) is followed, not
    silently left out; a file that cannot be copied (a FIFO) is named in the notes."""
    store = tmp_path / "store"
    shutil.copytree(broker_stores["v4-clean"] / "store", store)
    shutil.move(store / "commitlog", tmp_path / "other-disk")
    (store / "commitlog").symlink_to(tmp_path / "other-disk")
    os.mkfifo(store / "config" / "a-fifo")
    manifest = take_snapshot(LocalSource(store), tmp_path / "snapshots", "b", IDS[0])
    copy = snapshot_store(tmp_path / "snapshots", "b", IDS[0])
    assert not (copy / "commitlog").is_symlink()
    assert sum(1 for f in manifest.files if f.kind == "commitlog") == len(
        list((tmp_path / "other-disk").iterdir())) > 0
    assert any("config/a-fifo: not a regular file" in note for note in manifest.notes)
    (store / "config" / "a-fifo").unlink()
    assert_identical(store, copy)


def test_a_missing_store_is_a_clear_error(tmp_path):  # type: ignore[no-untyped-def]
    with pytest.raises(SourceError, match="not a directory"):
        take_snapshot(LocalSource(tmp_path / "nowhere"), tmp_path, "b", IDS[0])
    assert complete_snapshots(tmp_path, "b") == []


SEGMENT = "commitlog/00000000000000000000"


@pytest.mark.broker
def test_a_growing_timer_log_is_read_from_its_last_page_not_whole(features_store, tmp_path):  # type: ignore[no-untyped-def]
    """Timer log files grow like queue files (52-byte units from the start, zeros after,
    spec §6.4): a later snapshot reuses what the previous one held and reads the broker
    only from a page below its data end, instead of copying the file whole."""
    source = tmp_path / "broker"
    shutil.copytree(features_store / "store", source)
    log = source / "timerlog" / f"{0:020d}"
    original = log.read_bytes()
    held = -(-len(original.rstrip(b"\0")) // TL_UNIT_SIZE) * TL_UNIT_SIZE
    units = original[:held]  # the real broker's units, repeated to grow the file

    def write_log(copies: int) -> bytes:
        content = (units * copies).ljust(len(original), b"\0")
        log.write_bytes(content)
        return content

    write_log(6)
    first = take_snapshot(LocalSource(source), tmp_path / "snap", "b", IDS[0])
    grown = write_log(12)
    second = take_snapshot(LocalSource(source), tmp_path / "snap", "b", IDS[1])
    before = next(f for f in first.files if f.kind == "timer_log")
    after = next(f for f in second.files if f.kind == "timer_log")
    assert before.data_length == 6 * held and after.data_length == 12 * held
    assert before.resume_at == (6 * held - 4096) // TL_UNIT_SIZE * TL_UNIT_SIZE > 0
    assert (after.how, after.reused) == ("grown", before.resume_at)
    # read: the new units, then zeros only until a zero run longer than any inside data
    assert after.data_length - after.reused <= after.from_broker < after.size // 4
    assert (snapshot_store(tmp_path / "snap", "b", IDS[1]) / after.path).read_bytes() == grown


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.one_of(st.binary(min_size=1, max_size=3000),
                                 st.integers(1, 200_000).map(bytes)), max_size=12),
       tail=st.integers(0, 300_000))
def test_any_bytes_copy_back_identical_with_the_sha256_of_their_data(
        tmp_path_factory, pieces, tail):  # type: ignore[no-untyped-def]
    """Runs of data and zeros of any length (and a zero tail): the copy reads back equal,
    its data ends after its last non-zero byte and the manifest's sha256 is of that data."""
    work = tmp_path_factory.mktemp("any")
    content = b"".join(pieces) + bytes(tail)
    (work / "store" / "commitlog").mkdir(parents=True)
    (work / "store" / SEGMENT).write_bytes(content)
    manifest = take_snapshot(LocalSource(work / "store"), work / "snap", "b", IDS[0])
    entry = manifest.files[0]
    data_length = len(content.rstrip(b"\0"))
    assert (entry.size, entry.data_length) == (len(content), data_length)
    assert entry.sha256 == hashlib.sha256(content[:data_length]).hexdigest()
    assert (snapshot_store(work / "snap", "b", IDS[0]) / SEGMENT).read_bytes() == content


# --------------------------------------------------------------------------- SFTP


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):  # type: ignore[no-untyped-def]
    from sshd import running_sshd

    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def sftp_source(server, monkeypatch, store: Path) -> SftpSource:  # type: ignore[no-untyped-def]
    """An SFTP source through Airflow's SSHHook and a connection pinning the host key."""
    from airflow.providers.ssh.hooks.ssh import SSHHook

    monkeypatch.setenv("AIRFLOW_CONN_RMQ_TEST_SSH", server.airflow_connection())
    client = SSHHook(ssh_conn_id="rmq_test_ssh").get_conn()
    return SftpSource(client.open_sftp(), str(store), f"ssh://rmq_test_ssh{store}")


@pytest.mark.broker
def test_sftp_snapshots_equal_local_ones(sshd, growing_snapshots, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    _root, sources, local = growing_snapshots
    remote = [take_snapshot(sftp_source(sshd, monkeypatch, source), tmp_path, "b", snapshot_id)
              for source, snapshot_id in zip(sources[:2], IDS[:2], strict=True)]
    for manifest, expected, source in zip(remote, local[:2], sources[:2], strict=True):
        assert manifest.source.startswith("ssh://rmq_test_ssh/")
        assert_identical(source, snapshot_store(tmp_path, "b", manifest.snapshot_id))
        assert ({f.path: (f.sha256, f.data_length, f.how) for f in manifest.files}
                == {f.path: (f.sha256, f.data_length, f.how) for f in expected.files})
        # the same bytes copied; which reused files are probed first depends on the mtimes
        # each listing could trust (whole seconds over SFTP): test_snapshot_changes
        assert (sum(f.from_broker for f in manifest.files)
                == sum(f.from_broker for f in expected.files))
    assert remote[1].count(LINKED) > 0


def test_a_rewrite_in_the_second_of_an_sftp_listing_is_not_hidden_by_its_mtime(
        sshd, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    broker = ChangingBroker(tmp_path / "store", file_size=1024 * 1024)
    manifest = rewrite_within_the_listings_tick(
        broker, broker.clock_ns, lambda root: sftp_source(sshd, monkeypatch, root),
        tmp_path / "snap", IDS[:2])
    assert_identical(broker.root, snapshot_store(tmp_path / "snap", "b", IDS[1]))
    assert f"commitlog/{0:020d}" in {f.path for f in manifest.rewritten}


def test_sftp_refuses_a_host_whose_key_is_not_the_pinned_one(sshd, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    from airflow.providers.ssh.hooks.ssh import SSHHook

    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)],
                   check=True)
    connection = json.loads(sshd.airflow_connection())
    connection["extra"]["host_key"] = " ".join(
        other_key.with_suffix(".pub").read_text().split()[:2])
    monkeypatch.setenv("AIRFLOW_CONN_RMQ_TEST_SSH", json.dumps(connection))
    with pytest.raises(Exception, match=r"(?i)host key|not found in known_hosts|rejected"):
        SSHHook(ssh_conn_id="rmq_test_ssh").get_conn()


def test_manifest_round_trips(broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    manifest = take_snapshot(LocalSource(broker_stores["v4-clean"] / "store"), tmp_path, "b",
                             IDS[0])
    document = json.loads((snapshot_dir(tmp_path, "b", IDS[0]) / MANIFEST).read_text())
    assert document["totals"]["files"] == len(manifest.files)
    assert document["totals"]["from_broker"] == manifest.from_broker
    loaded = Manifest.load(snapshot_dir(tmp_path, "b", IDS[0]) / MANIFEST)
    assert loaded.files == manifest.files
    checkpoint = snapshot_store(tmp_path, "b", IDS[0]) / "checkpoint"
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o444  # snapshots are read-only
