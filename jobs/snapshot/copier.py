"""Take a dated snapshot of a broker store without touching the store.

A snapshot is built beside its final place and renamed there when its manifest is written
(layout and manifest: :mod:`jobs.snapshot.manifest`); taking a snapshot that exists
returns its manifest and copies nothing (re-runs and backfills are idempotent).

What is copied (``rmqlib.store.growth`` has the store facts behind each rule):

* in phases: config, then consume queues and index, then commitlog, then checkpoint, then
  the markers, so that a hot copy stays consistent for the checks;
* a *finished* file (a later file of its queue has data) that the previous snapshot also
  held finished, with the same size, is hard-linked from it: no byte is read;
* a growing file (append-only, in the previous snapshot but not finished there) keeps
  the previous snapshot's bytes up to a little below that snapshot's data end and reads
  only the rest from the broker;
* preallocated zero tails are not read past a zero run longer than any run inside data,
  and not written: the copy is a sparse file of the source's size that reads back
  byte-identical (holes read as zeros).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from jobs.lakehouse.disk_space import (
    DiskFullError,
    human,
    is_disk_full,
    space_of,
    written_path,
)
from jobs.snapshot.manifest import (
    CHUNK,
    COPIED,
    GROWN,
    LINKED,
    MANIFEST,
    PARTIAL_PREFIX,
    STORE_DIR,
    FileEntry,
    Manifest,
    broker_dir,
    complete_snapshots,
    snapshot_dir,
    snapshot_store,
)
from jobs.snapshot.sources import FileReader, SourceFile, StoreSource
from rmqlib.common.fileio import map_read_only
from rmqlib.errors import StoreError
from rmqlib.rocksdb.database import CURRENT as ROCKSDB_CURRENT
from rmqlib.rocksdb.database import INCONSISTENT_COPY, open_readonly
from rmqlib.store.growth import CONFIRM_HEAD, CopyPhase, Growth, data_end, growth_of
from rmqlib.store.inventory import ROCKSDB_KINDS, FileKind, classify

log = logging.getLogger(__name__)

SPARSE_BLOCK = 64 * 1024
PROGRESS_EVERY_S = 5.0


#: Room the copy needs beyond its files' data: the manifest, directories, partial blocks.
METADATA_ROOM = 1 << 20


class SnapshotError(RuntimeError):
    """A snapshot cannot be taken; the message names the broker, the file and why."""


class SnapshotInPastError(SnapshotError):
    """The logical date is older than a snapshot already taken: the store's past is gone."""


# --------------------------------------------------------------------------- taking one


Progress = Callable[[str], None]


def take_snapshot(source: StoreSource, root: str | Path, broker: str, snapshot_id: str,
                  *, progress: Progress | None = None,
                  make_room: Callable[[], object] | None = None) -> Manifest:
    """Snapshot ``source`` as ``<root>/<broker>/<snapshot_id>``; see the module docstring.
    ``make_room``: what frees space when the disk lacks what the copy needs (the broker's
    snapshot retention, run before the copy instead of after the night)."""
    root = Path(root)
    final = snapshot_dir(root, broker, snapshot_id)
    if (final / MANIFEST).is_file():
        manifest = Manifest.load(final / MANIFEST)
        manifest.existing = True
        return manifest
    refuse_past(broker, snapshot_id, [s for s in complete_snapshots(root, broker)
                                      if s > snapshot_id])
    earlier = [s for s in complete_snapshots(root, broker) if s < snapshot_id]
    previous = earlier[-1] if earlier else None
    partial = broker_dir(root, broker) / f"{PARTIAL_PREFIX}{snapshot_id}"
    if partial.exists():
        shutil.rmtree(partial)  # an interrupted attempt: start over
    (partial / STORE_DIR).mkdir(parents=True)
    copier = _Copier(source, broker, snapshot_id, partial / STORE_DIR,
                     snapshot_store(root, broker, previous) if previous else None,
                     Manifest.load(snapshot_dir(root, broker, previous) / MANIFEST)
                     if previous else None, progress or log.info, make_room)
    try:
        manifest = copier.run()
        manifest.previous = previous
        (partial / MANIFEST).write_text(manifest.to_json())
    except Exception as error:
        if not is_disk_full(error):
            raise
        shutil.rmtree(partial, ignore_errors=True)  # its space, for the other brokers
        if isinstance(error, DiskFullError):
            raise
        raise DiskFullError(f"{broker}: snapshot {snapshot_id}", written_path(error, root),
                            copier.needed) from error
    os.rename(partial, final)
    return manifest


def refuse_past(broker: str, snapshot_id: str, later: list[str]) -> None:
    """SnapshotInPastError when a snapshot newer than ``snapshot_id`` was taken."""
    if later:
        raise SnapshotInPastError(
            f"{broker}: no snapshot {snapshot_id} can be taken now: snapshot {later[-1]} is "
            f"newer, and the store's state at {snapshot_id} is gone")


class _Copier:
    """One snapshot being taken."""

    def __init__(self, source: StoreSource, broker: str, snapshot_id: str, target: Path,
                 previous_store: Path | None, previous: Manifest | None,
                 progress: Progress, make_room: Callable[[], object] | None = None) -> None:
        self.source = source
        self.make_room = make_room
        self.needed: int | None = None  # bytes the copy takes on disk, once estimated
        self.broker = broker
        self.target = target
        self.previous_store = previous_store
        self.previous = {f.path: f for f in previous.files} if previous else {}
        self.manifest_previous = previous.snapshot_id if previous else None
        self.progress = progress
        self.manifest = Manifest(broker, snapshot_id, source.label,
                                 started_at=datetime.now(UTC).isoformat())
        self.rate = _Rate(progress, broker)
        self.kinds: dict[str, FileKind] = {}  # every listed file's kind, classified once

    def run(self) -> Manifest:
        started = time.monotonic()
        files = self.source.list_files()
        self.manifest.notes += self.source.skipped
        self.kinds = {f.relative: classify(PurePosixPath(f.relative), f.size).kind
                      for f in files}
        self._note_broker_state(files)
        finished = self._finished_files(files)
        self._ensure_room(files, finished)
        phases: dict[int, list[SourceFile]] = {}
        for file in files:
            phases.setdefault(growth_of(self.kinds[file.relative]).phase, []).append(file)
        for phase in sorted(phases):
            batch = sorted(phases[phase], key=_copy_order)
            self.progress(f"{self.broker}: copying {CopyPhase(phase).name.lower()}: "
                          f"{len(batch)} files ({_phase_name(batch)})")
            for file in batch:
                self._copy(file, file.relative in finished)
        for database in rocksdb_databases(files):
            self._settle_rocksdb(database, [f for f in files
                                            if PurePosixPath(f.relative).parent == database])
        self.manifest.seconds = time.monotonic() - started
        self.manifest.finished_at = datetime.now(UTC).isoformat()
        return self.manifest

    # ----------------------------------------------------------------- disk space

    def _ensure_room(self, files: list[SourceFile], finished: set[str]) -> None:
        """What the copier checks before it copies a byte: the free space of the snapshot
        root against the bytes the copy will take (every file but those it links from the
        previous snapshot, by the space the broker's file takes: a mapped file's zero tail
        takes none there or in the copy). Short of it, ``make_room`` (the broker's snapshot
        retention) runs first; still short, and the estimate exact (a local store: every
        file's allocated size known), the snapshot is refused before it writes anything."""
        needed, exact = self._space_needed(files, finished)
        self.needed = needed
        free, _ = space_of(self.target)
        if free >= needed:
            return
        if self.make_room is not None:
            self.progress(f"{self.broker}: {human(needed)} to copy, {human(free)} free: "
                          "expired snapshots removed first")
            self.make_room()
            free, _ = space_of(self.target)
        if free < needed and exact:
            raise DiskFullError(f"{self.broker}: snapshot {self.manifest.snapshot_id}",
                                self.target.parent.parent, needed)

    def _space_needed(self, files: list[SourceFile], finished: set[str]) -> tuple[int, bool]:
        """(bytes the copy will write, whether every file's size on disk was known)."""
        needed, exact = METADATA_ROOM, True
        for file in files:
            before = self.previous.get(file.relative)
            if before and _unchanged_since(before, file, self.kinds[file.relative],
                                           file.relative in finished):
                continue  # linked: no new space
            exact = exact and file.allocated is not None
            needed += file.size if file.allocated is None else min(file.size, file.allocated)
        return needed, exact

    # ----------------------------------------------------------------- RocksDB

    def _settle_rocksdb(self, database: PurePosixPath, copied: list[SourceFile]) -> None:
        """Make the copy of a RocksDB database consistent, or say it is not.

        A running broker's database changes while it is copied: a flush writes a new table
        and MANIFEST edit and drops a WAL, a compaction replaces tables. Files never change
        once written (a MANIFEST or WAL only grows), and the copy takes tables first, then
        MANIFEST and CURRENT, then the WALs (``_copy_order``), each up to its listed size.
        So the copy is a state the database passed through unless a listed file vanished
        before it was copied (a WAL dropped by a flush would leave a hole in the keys), or
        CURRENT names a MANIFEST the copy lacks: then it does not open. Files that appear
        after the listing only hold newer states. A copy that lost a file or does not open
        (:func:`rmqlib.rocksdb.database.open_readonly`, on a clone) is taken again from a
        fresh listing, up to ``ROCKSDB_ATTEMPTS`` times."""
        for attempt in range(1, ROCKSDB_ATTEMPTS + 1):
            lost = [f.relative for f in copied if not (self.target / f.relative).exists()]
            problem = f"{len(lost)} file(s) deleted while it was copied" if lost else None
            if problem is None:
                try:
                    with open_readonly(self.target / database):
                        pass
                except StoreError as error:
                    problem = error.reason
            if problem is None:
                if attempt > 1:
                    self.manifest.notes.append(f"{database}: RocksDB database copied "
                                               f"consistently at attempt {attempt}")
                return
            if attempt == ROCKSDB_ATTEMPTS:
                reason = (f"not copied consistently in {ROCKSDB_ATTEMPTS} attempts "
                          f"({problem})")
                (self.target / database / INCONSISTENT_COPY).write_text(reason + "\n")
                self.manifest.notes.append(f"{database}: RocksDB database {reason}; the copy "
                                           f"is marked {INCONSISTENT_COPY}: readers refuse it")
                return
            copied = [f for f in self.source.list_files()
                      if PurePosixPath(f.relative).parent == database]
            self._recopy(database, copied)

    def _recopy(self, database: PurePosixPath, files: list[SourceFile]) -> None:
        prefix = f"{database}/"
        self.manifest.files = [f for f in self.manifest.files if not f.path.startswith(prefix)]
        shutil.rmtree(self.target / database, ignore_errors=True)
        for file in sorted(files, key=_copy_order):
            self.kinds.setdefault(file.relative,
                                  classify(PurePosixPath(file.relative), file.size).kind)
            self._copy(file, False)

    # ----------------------------------------------------------------- broker state

    def _note_broker_state(self, files: list[SourceFile]) -> None:
        names = {f.relative for f in files}
        holder = self.source.lock_holder()
        notes = self.manifest.notes
        if holder:
            self.manifest.broker_running = True
            notes.append(f"broker running: the store's lock is held ({holder}); "
                         "this is a hot copy, its newest records may be torn")
        if "abort" in names:
            self.manifest.abort_present = True
            notes.append("abort file present: the broker is running, or it stopped without "
                         "a clean shutdown (killed or crashed)")
        for note in notes:
            log.warning("%s: %s", self.broker, note)

    def _finished_files(self, files: list[SourceFile]) -> set[str]:
        """Append-only files followed by a file of the same queue that has data."""
        groups: dict[str, list[SourceFile]] = {}
        for file in files:
            if growth_of(self.kinds[file.relative]).append_only:
                groups.setdefault(str(PurePosixPath(file.relative).parent), []).append(file)
        finished: set[str] = set()
        for group in groups.values():
            later_has_data = False
            for file in sorted(group, key=lambda f: f.relative, reverse=True):
                if later_has_data:
                    finished.add(file.relative)
                elif self._has_data(file):
                    later_has_data = True
        return finished

    def _has_data(self, file: SourceFile) -> bool:
        head = growth_of(self.kinds[file.relative]).head
        if file.size == 0 or head == 0:
            return file.size > 0
        reader = self._open(file)
        try:
            return any(reader.read_at(0, head))
        finally:
            reader.close()

    # ----------------------------------------------------------------- one file

    def _copy(self, file: SourceFile, finished: bool) -> None:
        kind = self.kinds[file.relative]
        growth = growth_of(kind)
        before = self.previous.get(file.relative)
        entry: FileEntry | None = None
        differs = False
        if before and _unchanged_since(before, file, kind, finished):
            differs = not self._confirmed(file, growth, before, before.data_length)
            if not differs:
                entry = self._link(file, kind, before)
        elif before and growth.append_only and growth.zero_run and before.size == file.size:
            differs = not self._confirmed(file, growth, before, before.resume_at)
            if not differs:
                entry = self._write(file, kind, growth, finished, before.resume_at,
                                    before.resume_at)
                if entry is not None:
                    entry.how = GROWN
        if entry is None:
            entry = self._write(file, kind, growth, finished, 0, 0)
            if entry is not None and differs and before is not None:
                self._note_rewritten(entry, before)
        if entry is not None:
            self.manifest.files.append(entry)

    def _confirmed(self, file: SourceFile, growth: Growth, before: FileEntry,
                   reuse: int) -> bool:
        """Whether ``[0, reuse)`` of the previous snapshot's copy is still the broker's.

        A file unchanged since (same size and mtime, an mtime the previous listing saw
        settled: ``SourceFile.mtime_settled``) is not read at all. Otherwise its first
        bytes and the window just below ``reuse`` are read from the broker and compared:
        an append-only file that was truncated and written again (a failover's truncation,
        a reset or re-provisioned store, a restored backup) differs there, and is then
        copied whole instead. Bytes between the two probes are not compared (see
        docs/nightly-dag.md, "Stores that change")."""
        if (before.mtime_ns == file.mtime_ns and before.mtime_settled) or reuse <= 0:
            return True
        assert self.previous_store is not None
        probes = _probe_ranges(reuse, growth.confirm_window)
        try:
            reader = self._open(file)
        except FileNotFoundError:
            return True  # vanished since the listing: _write notes it
        try:
            with open(self.previous_store / file.relative, "rb") as old:
                for begin, end in probes:
                    theirs = reader.read_at(begin, end - begin)
                    self.manifest.confirm_bytes += len(theirs)
                    self.rate.add(len(theirs), file.relative)
                    old.seek(begin)
                    if theirs != old.read(end - begin):
                        return False
        finally:
            reader.close()
        return True

    def _note_rewritten(self, entry: FileEntry, before: FileEntry) -> None:
        """Name a file the broker rewrote below what the previous snapshot held: where its
        new copy first differs from that snapshot's (both local copies now)."""
        assert self.previous_store is not None
        entry.rewritten_at = _first_difference(self.previous_store / entry.path,
                                               self.target / entry.path, before.data_length)
        self.manifest.notes.append(
            f"{entry.path}: rewritten since snapshot {self.manifest_previous}: differs from "
            f"that copy at byte {entry.rewritten_at} (previous data length "
            f"{before.data_length}, now {entry.data_length}); copied whole")
        log.warning("%s: %s", self.broker, self.manifest.notes[-1])

    def _link(self, file: SourceFile, kind: FileKind, before: FileEntry) -> FileEntry:
        assert self.previous_store is not None
        destination = self.target / file.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.link(self.previous_store / file.relative, destination)
        return FileEntry(file.relative, kind.value, file.size, before.data_length,
                         before.sha256, LINKED, 0, before.data_length, True, file.mtime_ns,
                         mtime_settled=file.mtime_settled)

    def _write(self, file: SourceFile, kind: FileKind, growth: Growth, finished: bool,
               reuse: int, walked_to: int) -> FileEntry | None:
        """Copy one file, taking ``[0, reuse)`` from the previous snapshot; None when it
        vanished since the listing (retention deleted it)."""
        destination = self.target / file.relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            reader = self._open(file)
        except FileNotFoundError:
            self.manifest.notes.append(f"{file.relative}: deleted while the snapshot was "
                                       "taken (retention), not copied")
            return None
        digest = ZeroAwareHash()
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if reuse:
                assert self.previous_store is not None
                with open(self.previous_store / file.relative, "rb") as old:
                    _copy_local(old, fd, reuse, digest)
            end, read = self._copy_from_broker(file, reader, fd, growth, reuse, digest)
            os.ftruncate(fd, file.size)
        finally:
            os.close(fd)
            reader.close()
        os.utime(destination, ns=(file.mtime_ns, file.mtime_ns))
        os.chmod(destination, 0o444)
        return FileEntry(file.relative, kind.value, file.size, end, digest.finish(end),
                         COPIED, read, reuse, finished, file.mtime_ns,
                         _resume_at(destination, growth, walked_to, end),
                         mtime_settled=file.mtime_settled)

    def _copy_from_broker(self, file: SourceFile, reader: FileReader, fd: int,
                          growth: Growth, start: int, digest: ZeroAwareHash) -> tuple[int, int]:
        """Copy ``[start, data end)``; returns (data end, bytes read from the broker)."""
        position, last_nonzero_end = start, start
        # Reads no bigger than the zero run that ends a file's data: a queue's zero tail
        # costs 64 KiB, not a whole chunk.
        step = min(CHUNK, growth.zero_run) if growth.zero_run else CHUNK
        while position < file.size:
            try:
                chunk = reader.read_at(position, min(step, file.size - position))
            except OSError as error:
                raise SnapshotError(f"{self.broker}: {self.source.label}/{file.relative}: "
                                    f"read at byte {position} failed: {error}") from error
            if not chunk:
                self.manifest.notes.append(
                    f"{file.relative}: shrank while copied, {file.size} -> {position} bytes "
                    "(deleted by retention or truncated)")
                break
            data = _put(fd, chunk, position, digest)
            if data:
                last_nonzero_end = position + data
            position += len(chunk)
            self.rate.add(len(chunk), file.relative)
            if growth.zero_run and position - last_nonzero_end >= growth.zero_run:
                break
        end = (data_end(last_nonzero_end, growth.unit, file.size) if growth.zero_run
               else position)
        return end, position - start

    def _open(self, file: SourceFile) -> FileReader:
        try:
            return self.source.open(file.relative)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise SnapshotError(f"{self.broker}: {self.source.label}/{file.relative}: "
                                f"cannot open: {error}") from error


def _probe_ranges(reuse: int, window: int) -> list[tuple[int, int]]:
    """The byte ranges compared before ``[0, reuse)`` is reused: the head and the window
    below ``reuse`` (one range when they meet)."""
    head_end = min(CONFIRM_HEAD, reuse)
    window_start = max(head_end, reuse - window)
    if window_start <= head_end:
        return [(0, reuse)]
    return [(0, head_end), (window_start, reuse)]


def _first_difference(old: Path, new: Path, length: int) -> int:
    """The first byte position below ``length`` where two local files differ (``length``
    itself when ``[0, length)`` is equal: the new copy is shorter or grew past it)."""
    position = 0
    with open(old, "rb") as a, open(new, "rb") as b:
        while position < length:
            step = min(CHUNK, length - position)
            left, right = a.read(step), b.read(step)
            if left != right:
                common = min(len(left), len(right))
                for index in range(common):
                    if left[index] != right[index]:
                        return position + index
                return position + common
            if not left:
                return position
            position += step
    return length


def _resume_at(copy: Path, growth: Growth, walked_to: int, end: int) -> int:
    """Where the next snapshot re-reads this file from (see ``rmqlib.store.growth``)."""
    if growth.last_frame_start is not None:
        if end <= walked_to:
            return walked_to
        with open(copy, "rb") as handle, map_read_only(handle) as data:
            return growth.last_frame_start(data, walked_to, end)
    return max(0, end - growth.reread) // growth.unit * growth.unit


ROCKSDB_ATTEMPTS = 5


def rocksdb_databases(files: Iterable[SourceFile]) -> list[PurePosixPath]:
    """The directories of the listing that are RocksDB databases (they hold CURRENT)."""
    return sorted({PurePosixPath(f.relative).parent for f in files
                   if PurePosixPath(f.relative).name == ROCKSDB_CURRENT})


def _unchanged_since(before: FileEntry, file: SourceFile, kind: FileKind,
                     finished: bool) -> bool:
    """The previous snapshot's copy is this file's: a finished queue file then and now
    with the same size, or a RocksDB table file (written once, never changed, deleted
    when compacted away) with the same name, size and mtime."""
    if before.finished and finished and before.size == file.size:
        return True
    return (kind in ROCKSDB_KINDS and file.relative.endswith((".sst", ".blob"))
            and (before.size, before.mtime_ns) == (file.size, file.mtime_ns))


def _copy_order(file: SourceFile) -> tuple[int, str]:
    """Files in listing order, except inside a RocksDB database: immutable tables first,
    then the MANIFEST and OPTIONS naming them, then CURRENT naming the MANIFEST, then the
    write-ahead logs holding what no table holds yet (RocksDB's own checkpoint order)."""
    path = PurePosixPath(file.relative)
    name = path.name
    rank = (0 if name.endswith((".sst", ".blob")) else
            1 if name.startswith(("MANIFEST-", "OPTIONS-")) else
            2 if name == ROCKSDB_CURRENT else
            3 if name.endswith(".log") and name[:-4].isdigit() else 0)
    return (0, file.relative) if rank == 0 else (rank, file.relative)


def _phase_name(files: Iterable[SourceFile]) -> str:
    tops = sorted({PurePosixPath(f.relative).parts[0] for f in files})
    return ", ".join(tops[:4]) + (", ..." if len(tops) > 4 else "")


def _copy_local(old, fd: int, length: int, digest: ZeroAwareHash) -> None:  # type: ignore[no-untyped-def]
    position = 0
    while position < length:
        chunk = old.read(min(CHUNK, length - position))
        if not chunk:
            raise SnapshotError(f"{old.name}: the previous snapshot's copy is shorter than "
                                "its manifest says")
        _put(fd, chunk, position, digest)
        position += len(chunk)


def _put(fd: int, chunk: bytes, position: int, digest: ZeroAwareHash) -> int:
    """Hash and write ``chunk`` (file bytes at ``position``) up to its last non-zero byte;
    returns that length (the trailing zeros are left as holes and hashed later)."""
    data = len(chunk.rstrip(b"\0"))
    if data:
        digest.update(position, chunk[:data])
        write_sparse(fd, chunk[:data], position)
    return data


def write_sparse(fd: int, data: bytes, position: int) -> None:
    """Write ``data`` at ``position``, leaving all-zero blocks as holes."""
    view = memoryview(data)
    zero = bytes(SPARSE_BLOCK)
    for begin in range(0, len(view), SPARSE_BLOCK):
        block = view[begin:begin + SPARSE_BLOCK]
        if block != zero[:len(block)]:
            os.pwrite(fd, block, position + begin)


class ZeroAwareHash:
    """sha256 of a file fed only its non-zero stretches, in order: the gaps are zeros."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.position = 0

    def update(self, position: int, data: bytes) -> None:
        self._zeros(position - self.position)
        self.hash.update(data)
        self.position = position + len(data)

    def finish(self, end: int) -> str:
        self._zeros(end - self.position)
        return self.hash.hexdigest()

    def _zeros(self, count: int) -> None:
        while count > 0:
            step = min(count, CHUNK)
            self.hash.update(bytes(step))
            count -= step


class _Rate:
    """Logs bytes read from the broker and the rate, at most every few seconds."""

    def __init__(self, progress: Progress, broker: str) -> None:
        self.progress = progress
        self.broker = broker
        self.started = time.monotonic()
        self.last = self.started
        self.bytes = 0

    def add(self, count: int, current: str) -> None:
        self.bytes += count
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            rate = self.bytes / 2**20 / (now - self.started)
            self.progress(f"{self.broker}: {self.bytes / 2**20:.1f} MiB read from the broker "
                          f"({rate:.1f} MiB/s), now {current}")
