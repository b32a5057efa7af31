"""Snapshots in a bucket of the local S3 server (jobs.snapshot.bucket): the nights of the
growing harness broker published as objects and manifests, read back byte-identical on
another host (a mirror directory of its own), only new bytes moved, two hosts racing one
night, the store going away during a snapshot, and retention in the bucket.

The oracle is the broker's own store (the bytes each night must read back as) and the
local copier's snapshots of the same nights (the same files, lengths and hashes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from s3_server import serving_bucket
from s3_throttle import faulty_proxy
from test_snapshot import assert_identical

from jobs.lakehouse import tables as T
from jobs.lakehouse.contracts import load_contract
from jobs.lakehouse.locations import Location
from jobs.load.decode_tasks import (
    BATCHCONSUMEQUEUE,
    COMMITLOG,
    CONSUMEQUEUE,
    INDEX,
    DecodeContext,
    read_report,
    run_task,
)
from jobs.load.plan import plan_load
from jobs.snapshot import bucket as bucket_module
from jobs.snapshot.bucket import (
    MIRROR_ENV,
    OBJECTS,
    BucketSnapshots,
    SnapshotObjects,
    chunk_key,
    chunk_offset,
    content_key,
)
from jobs.snapshot.copier import SnapshotError, SnapshotInPastError, take_snapshot
from jobs.snapshot.manifest import GROWN, FileEntry, Manifest
from jobs.snapshot.sources import LocalSource

pytestmark = [pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
IDS = ("2026-11-20T0200Z", "2026-11-21T0200Z", "2026-11-22T0200Z")
ROOT = "s3://snaps/fleet"
CHUNK = 64 * 1024  # the nights' chunk size: the 1 MiB segments span several
TAKE_ONE = """
import json, sys
from jobs.snapshot.roots import snapshots_at
from jobs.snapshot.sources import LocalSource
root, broker, snapshot_id, store = sys.argv[1:]
manifest = snapshots_at(root).take(LocalSource(store), broker, snapshot_id)
print(json.dumps({"existing": manifest.existing, "uploaded": manifest.uploaded_objects}))
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory):  # type: ignore[no-untyped-def]
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "snaps") as server:
        yield server


def on_host(monkeypatch: pytest.MonkeyPatch, mirror: Path) -> BucketSnapshots:
    """The bucket's snapshots as seen from a host whose mirror is ``mirror``."""
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    return BucketSnapshots(Location(ROOT))


def content_of(entry: FileEntry) -> tuple[str, int, int, str]:
    return entry.path, entry.size, entry.data_length, entry.sha256


def content(manifest: Manifest) -> list[tuple[str, int, int, str]]:
    return sorted(map(content_of, manifest.files))


def keys(*manifests: Manifest) -> set[str]:
    """The objects the manifests name."""
    return {key for manifest in manifests for entry in manifest.files for key in entry.objects}


@pytest.fixture(scope="module")
def nights(s3, growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The three nights of the growing broker taken into the bucket by host A, and into a
    local directory by the local copier (the oracle)."""
    work = tmp_path_factory.mktemp("nights")
    sources = [growing_store / "snapshots" / name / "store" for name in ("s1", "s2", "s3")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bucket_module, "CHUNK_OBJECT_BYTES", CHUNK)
        bucket = on_host(patch, work / "host-a")
        taken = [bucket.take(LocalSource(source), "b", snapshot_id)
                 for source, snapshot_id in zip(sources, IDS, strict=True)]
    local = [take_snapshot(LocalSource(source), work / "local", "b", snapshot_id)
             for source, snapshot_id in zip(sources, IDS, strict=True)]
    return work, sources, taken, local


def test_nights_in_a_bucket_read_back_identical_on_another_host(
        nights, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _work, sources, taken, local = nights
    bucket = on_host(monkeypatch, tmp_path / "host-b")
    assert bucket.ids("b") == list(IDS)
    for source, mine, oracle in zip(sources, taken, local, strict=True):
        assert content(mine) == content(oracle)  # the same files, lengths and hashes
        assert content(bucket.manifest("b", mine.snapshot_id)) == content(oracle)
        assert_identical(source, bucket.local_store("b", mine.snapshot_id))
    # Nothing is in the bucket but manifests and the objects they name.
    objects = {f"{OBJECTS}/{f.relative}" for f in (Location(ROOT) / "b" / OBJECTS).files()}
    assert objects == keys(*taken)


def test_a_night_uploads_and_another_host_downloads_only_new_bytes(
        nights, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    work, _sources, (first, second, _third), _local = nights
    held = set(content(first))
    changed = [f for f in second.files if content_of(f) not in held]
    new = keys(second) - keys(first)
    new_bytes = sum(chunk_offset(key)[1] for key in new)
    # Only the chunks that changed: a grown file uploads its last chunk and what follows.
    assert second.uploaded_objects == len(new) and second.uploaded_bytes == new_bytes
    assert new_bytes < sum(f.data_length for f in changed) < second.data_bytes
    before = {f.path: f for f in first.files}
    grown = [f for f in changed if f.how == GROWN and before[f.path].data_length >= CHUNK]
    # A grown file's full chunks of the night before are the same objects.
    assert grown and all(f.objects[:before[f.path].data_length // CHUNK]
                         == before[f.path].objects[:before[f.path].data_length // CHUNK]
                         for f in grown)
    for entry in second.files:  # each chunk is named by the bytes it holds
        data = (work / "local" / "b" / IDS[1] / "store" / entry.path).read_bytes()[
            :entry.data_length]
        assert entry.objects == [chunk_key(entry.path, offset, data[offset:offset + CHUNK])
                                 for offset in range(0, entry.data_length, CHUNK)]
    bucket = on_host(monkeypatch, tmp_path / "host-c")
    lines: list[str] = []
    old = bucket.local_store("b", IDS[0])
    fresh = bucket.local_store("b", IDS[1], progress=lines.append)
    assert lines == [f"b: snapshot {IDS[1]} to this host's mirror: {len(new)} object(s) "
                     f"downloaded ({new_bytes / 2**20:.1f} MiB) for {len(changed)} of "
                     f"{len(second.files)} file(s), the rest linked"]
    for entry in second.files:  # what the host held is linked, not fetched again
        same = (fresh / entry.path).stat().st_ino == (old / entry.path).stat().st_ino \
            if (old / entry.path).exists() else False
        assert same == (content_of(entry) in held), entry.path
    # A host reading what it holds downloads nothing.
    lines.clear()
    assert bucket.local_store("b", IDS[1], progress=lines.append) == fresh and lines == []


def test_taking_a_night_again_changes_nothing_and_the_past_is_refused(
        nights, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _work, sources, taken, _local = nights
    bucket = on_host(monkeypatch, tmp_path / "host-d")
    manifest = Location(ROOT) / "b" / IDS[1] / "manifest.json"
    written = manifest.head()
    again = bucket.take(LocalSource(sources[1]), "b", IDS[1])
    assert again.existing and content(again) == content(taken[1])
    assert manifest.head() == written
    with pytest.raises(SnapshotInPastError, match=f"{IDS[2]} is newer"):
        bucket.take(LocalSource(sources[0]), "b", "2026-11-19T0200Z")


def test_two_hosts_taking_one_night_at_once_publish_exactly_one_snapshot(
        s3, growing_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "take_one.py"
    script.write_text(TAKE_ONE)
    source = growing_store / "snapshots" / "s3" / "store"
    hosts = [tmp_path / f"host-{n}" for n in range(3)]
    running = [subprocess.Popen(
        [sys.executable, str(script), ROOT, "raced", IDS[0], str(source)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), MIRROR_ENV: str(host)})
        for host in hosts]
    results = []
    for process in running:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["existing"] for r in results) == [False, True, True], results
    bucket = BucketSnapshots(Location(ROOT))
    assert bucket.ids("raced") == [IDS[0]]
    for host in hosts:  # every host reads the one published snapshot as the store
        os.environ[MIRROR_ENV] = str(host)
        try:
            assert_identical(source, bucket.local_store("raced", IDS[0]))
        finally:
            del os.environ[MIRROR_ENV]


def test_the_store_going_away_during_a_snapshot_publishes_nothing_and_the_rerun_does(
        s3, growing_store, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = growing_store / "snapshots" / "s2" / "store"
    bucket = on_host(monkeypatch, tmp_path / "host")
    monkeypatch.setenv("RMQ_S3_RETRY_SECONDS", "2")
    with faulty_proxy(s3.port, tmp_path, down_at=r"PUT [^ ]*/objects/commitlog/") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(SnapshotError) as failed:
            bucket.take(LocalSource(source), "away", IDS[0])
        message = str(failed.value)
        assert "\n" not in message and message.startswith(
            f"away: snapshot {IDS[0]} to {ROOT}/away: "), message
        proxy.restore()
        assert bucket.ids("away") == []  # no manifest: no snapshot
        published = bucket.take(LocalSource(source), "away", IDS[0])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.environment()["AWS_ENDPOINT_URL"])
    assert not published.existing and bucket.ids("away") == [IDS[0]]
    assert proxy.counts.dropped > 0
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "reader"))
    assert_identical(source, bucket.local_store("away", IDS[0]))


def test_retention_deletes_manifests_then_the_objects_no_kept_snapshot_names(
        s3, growing_store, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sources = [growing_store / "snapshots" / name / "store" for name in ("s1", "s2", "s3")]
    bucket = on_host(monkeypatch, tmp_path / "host")
    taken = [bucket.take(LocalSource(source), "kept", snapshot_id)
             for source, snapshot_id in zip(sources, IDS, strict=True)]
    stray = Location(ROOT) / "kept" / OBJECTS / "commitlog" / "interrupted-upload"
    stray.write_bytes(b"an upload no manifest names yet")
    objects = Location(ROOT) / "kept" / OBJECTS

    def stored() -> set[str]:
        return {f"{OBJECTS}/{f.relative}" for f in objects.files()}

    result = bucket.clean_up("kept", IDS[2], retention_days=1.5)  # keeps IDS[1:]
    assert (result.removed, result.kept) == ([IDS[0]], list(IDS[1:]))
    named = keys(*taken[1:])
    unnamed = keys(taken[0]) - named | {
        f"{OBJECTS}/commitlog/interrupted-upload"}
    # Objects no manifest names are kept for a day (an upload may be in flight) ...
    assert result.objects_removed == 0 and stored() == named | unnamed
    # ... then deleted: the stray one and those only the first night named.
    assert bucket.clean_up("kept", IDS[2], 1.5, grace_s=0).objects_removed == len(unnamed)
    assert stored() == named and bucket.ids("kept") == list(IDS[1:])
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "reader"))
    for source, snapshot_id in zip(sources[1:], IDS[1:], strict=True):
        assert_identical(source, bucket.local_store("kept", snapshot_id))


TABLE_OF_KIND = {COMMITLOG: T.MESSAGES, CONSUMEQUEUE: T.QUEUE_ENTRIES,
                 BATCHCONSUMEQUEUE: T.QUEUE_ENTRIES, INDEX: T.INDEX_ENTRIES}


def test_an_executor_reading_the_objects_decodes_what_the_mirror_holds(
        s3, features_store, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every task of a whole-store plan, decoded as Spark's executors do (from the bucket:
    ranged GETs, an index file cached on the host) and as the driver would (its mirror):
    the same batches and the same reports."""
    source = features_store / "store"
    monkeypatch.setattr(bucket_module, "CHUNK_OBJECT_BYTES", CHUNK)  # reads span chunks
    bucket = on_host(monkeypatch, tmp_path / "driver")
    bucket.take(LocalSource(source), "exec", IDS[0])
    mirror = bucket.local_store("exec", IDS[0])
    objects = SnapshotObjects.beside(mirror)
    assert objects is not None and objects.uri == f"{ROOT}/exec/{IDS[0]}"
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "executor"))
    tasks = [t for t in plan_load(mirror, []).tasks if t.kind in TABLE_OF_KIND]
    assert {t.kind for t in tasks} == set(TABLE_OF_KIND)
    for task in tasks:
        outputs = []
        for read_objects in (False, True):
            reports = tmp_path / f"reports-{read_objects}"
            context = DecodeContext("exec", IDS[0], str(reports),
                                    load_contract(TABLE_OF_KIND[task.kind]).arrow_schema(),
                                    objects=objects, read_objects=read_objects)
            batches = list(run_task(task, context))
            report = read_report(str(reports), task.task_id)
            assert report is not None
            report.pop("seconds")
            outputs.append((pa.Table.from_batches(batches, context.output_schema), report))
        (local, local_report), (remote, remote_report) = outputs
        assert remote.equals(local) and remote_report == local_report, task.task_id
    # The index files were fetched once each into the executor host's object cache; the
    # queues with ext addresses needed consumequeue_ext/ beside them: the host's mirror.
    host = tmp_path / "executor" / "snaps" / "fleet" / "exec"
    cached = {p.relative_to(host).as_posix() for p in (host / OBJECTS).rglob("*")
              if p.is_file()}
    assert cached == {content_key(objects.entry(t.rel_path)) for t in tasks if t.kind == INDEX}
    assert sorted(p.name for p in host.iterdir()) == [IDS[0], OBJECTS]
    assert (host / IDS[0] / "store" / "consumequeue_ext").is_dir()
