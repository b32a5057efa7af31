"""Snapshots in an object store: chunks of files by content, each snapshot one manifest.

A bucket has neither the hard links nor the rename the local copier builds on
(:mod:`jobs.snapshot.copier`). Under the root ``s3://bucket/prefix``::

    <broker>/objects/<path>/<offset>-<length>-<sha256>   one chunk of a file's data
    <broker>/<snapshot_id>/manifest.json                  the snapshot; each file's entry
                                                          names its chunks (FileEntry.objects)

A file's data, bytes [0, data_length), is cut into chunks of :data:`CHUNK_OBJECT_BYTES`
(16 MiB; the last one shorter); a chunk is named by where it starts, its length and its sha256,
so the same bytes are the same object night after night. A finished file is uploaded
once; a growing one uploads only its last chunk again and the chunks after it: a night
costs its new bytes plus at most one chunk per growing file, whatever the file's size.

* **Taking** one: the local copier takes the snapshot into this host's *mirror* of the
  root (:func:`mirror_root`), beside the previous snapshot (downloaded first when this
  host does not hold it), so a finished file is linked and a growing one extended exactly
  as on a disk, and the broker is read no more than there. Then every chunk the previous
  manifest does not name is uploaded, and last the manifest, with ``If-None-Match: *``: a
  snapshot exists when its manifest does (complete or absent, as the rename makes it on a
  disk), and of two hosts taking the same night exactly one publishes.
* **Reading** one: :meth:`BucketSnapshots.local_store` gives a local directory of it in
  this host's mirror, hard-linking the files the mirror already holds with the same
  content and downloading the others (checked against the manifest's sha256). A host
  reading the nights it took downloads nothing. Spark's executors read ranges of the
  chunks themselves (:class:`SnapshotObjects`).
* **Retention** deletes manifests first, then the objects no remaining manifest names
  that are older than :data:`ORPHAN_GRACE_S` (a snapshot still uploading keeps its new
  objects; an interrupted one's are collected a day later).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path

from jobs.lakehouse.locations import Location, local_companion
from jobs.snapshot.copier import (
    SnapshotError,
    ZeroAwareHash,
    refuse_past,
    take_snapshot,
    write_sparse,
)
from jobs.snapshot.manifest import (
    MANIFEST,
    STORE_DIR,
    FileEntry,
    Manifest,
    broker_dir,
    complete_snapshots,
    snapshot_dir,
)
from jobs.snapshot.retention import Cleanup, clean_up_snapshots, expired
from jobs.snapshot.sources import StoreSource

log = logging.getLogger(__name__)

OBJECTS = "objects"
MIRROR_ENV = "RMQ_SNAPSHOT_MIRROR"
MIRROR_PARTIAL = ".mirror-"
#: Objects no manifest names are deleted only this long after they were written: a
#: snapshot uploads its objects before its manifest names them.
ORPHAN_GRACE_S = 86_400.0
#: An object larger than this is a multipart upload of parts this big (obstore decides;
#: S3's smallest part is 5 MiB).
UPLOAD_PART_BYTES = 8 * 2**20

Progress = Callable[[str], None]


#: A file's data is stored in chunks of this size: the most a growing file uploads again
#: a night (bench/bucket_snapshots.py weighs 16 MiB against 64 MiB and whole files).
CHUNK_OBJECT_BYTES = 16 * 2**20


def chunk_spans(data_length: int) -> list[tuple[int, int]]:
    """(offset, length) of the chunks of ``data_length`` bytes of data (none for none)."""
    return [(offset, min(CHUNK_OBJECT_BYTES, data_length - offset))
            for offset in range(0, data_length, CHUNK_OBJECT_BYTES)]


def chunk_key(path: str, offset: int, data: bytes) -> str:
    """The object of one chunk, relative to the broker's directory."""
    return f"{OBJECTS}/{path}/{offset}-{len(data)}-{hashlib.sha256(data).hexdigest()}"


def chunk_offset(key: str) -> tuple[int, int]:
    """(offset, length) of a chunk from its key."""
    offset, length, _ = key.rsplit("/", 1)[1].split("-")
    return int(offset), int(length)


def content_key(entry: FileEntry) -> str:
    """A whole file's content, as a host caches it (SnapshotObjects.local_file)."""
    return f"{OBJECTS}/{entry.path}/{entry.data_length}-{entry.sha256}"


def mirror_root(root: Location) -> Path:
    """This host's local mirror of the snapshots under ``root``:
    ``$RMQ_SNAPSHOT_MIRROR/<bucket>/<prefix>``, by default under ``.cache/snapshot-mirror``
    of this checkout. It holds what a host took or read, hard-linked across nights as a
    local snapshot root does; retention trims it with the bucket."""
    return local_companion(root, "snapshot-mirror", os.environ.get(MIRROR_ENV))


@dataclass(frozen=True)
class BucketSnapshots:
    """The snapshots of the brokers under an object-store root."""

    root: Location

    @property
    def mirror(self) -> Path:
        return mirror_root(self.root)

    # ----------------------------------------------------------------- reading the bucket

    def ids(self, broker: str) -> list[str]:
        """The broker's published snapshots, oldest first (one delimited LIST)."""
        return [name for name in (self.root / broker).directories()
                if name != OBJECTS and not name.startswith(".")]

    def manifest(self, broker: str, snapshot_id: str) -> Manifest | None:
        try:
            return Manifest.from_json((self.root / broker / snapshot_id / MANIFEST).read_text())
        except FileNotFoundError:
            return None

    def describe(self, broker: str, snapshot_id: str) -> str:
        return str(self.root / broker / snapshot_id)

    # ----------------------------------------------------------------- taking

    def take(self, source: StoreSource, broker: str, snapshot_id: str, *,
             progress: Progress | None = None,
             make_room: Callable[[], object] | None = None) -> Manifest:
        """Take ``snapshot_id`` of ``source`` and publish it (see the module docstring);
        a published snapshot is returned as it is (``existing``). ``make_room``: as
        :func:`~jobs.snapshot.copier.take_snapshot`'s, for this host's mirror."""
        with _bucket_errors(f"{broker}: snapshot {snapshot_id} to {self.root / broker}"):
            return self._take(source, broker, snapshot_id, progress or log.info, make_room)

    def _take(self, source: StoreSource, broker: str, snapshot_id: str,
              say: Progress, make_room: Callable[[], object] | None) -> Manifest:
        found = self.manifest(broker, snapshot_id)
        if found is not None:
            found.existing = True
            return found
        published = self.ids(broker)
        refuse_past(broker, snapshot_id, [s for s in published if s > snapshot_id])
        earlier = [s for s in published if s < snapshot_id]
        previous = self.manifest(broker, earlier[-1]) if earlier else None
        self._forget_unpublished(broker, published)
        if previous is not None:
            self.local_copy(broker, previous, say)
        manifest = take_snapshot(source, self.mirror, broker, snapshot_id, progress=say,
                                 make_room=make_room)
        self._upload_new_objects(broker, manifest, previous, say)
        text = manifest.to_json()
        if not (self.root / broker / snapshot_id / MANIFEST).create_bytes(text.encode()):
            # Another host published this night first: theirs is the snapshot.
            shutil.rmtree(snapshot_dir(self.mirror, broker, snapshot_id))
            theirs = self.manifest(broker, snapshot_id)
            if theirs is None:
                raise SnapshotError(f"{broker}: snapshot {snapshot_id}: its manifest exists "
                                    "in the bucket and cannot be read")
            theirs.existing = True
            return theirs
        (snapshot_dir(self.mirror, broker, snapshot_id) / MANIFEST).write_text(text)
        return manifest

    def _upload_new_objects(self, broker: str, manifest: Manifest,
                            previous: Manifest | None, say: Progress) -> None:
        """Name each file's chunks and upload those the previous manifest does not name
        (retention keeps every object a manifest names). A file whose content the
        previous snapshot had keeps its chunks unread."""
        before = {_content(f): f.objects for f in previous.files} if previous else {}
        known = {key for f in previous.files for key in f.objects} if previous else set()
        store = snapshot_dir(self.mirror, broker, manifest.snapshot_id) / STORE_DIR
        uploaded, uploaded_bytes = 0, 0
        say(f"{broker}: uploading what is new of {len(manifest.files)} file(s) to "
            f"{self.root / broker}")
        for entry in manifest.files:
            if _content(entry) in before:
                entry.objects = list(before[_content(entry)])
                continue
            entry.objects = []
            with open(store / entry.path, "rb") as handle:
                for offset, length in chunk_spans(entry.data_length):
                    handle.seek(offset)
                    data = handle.read(length)
                    key = chunk_key(entry.path, offset, data)
                    entry.objects.append(key)
                    if key not in known:
                        self._upload(broker, key, data)
                        known.add(key)
                        uploaded, uploaded_bytes = uploaded + 1, uploaded_bytes + len(data)
        manifest.objects_root = str(self.root / broker)
        manifest.uploaded_objects = uploaded
        manifest.uploaded_bytes = uploaded_bytes

    def _upload(self, broker: str, key: str, data: bytes) -> None:
        import obstore

        store, path = (self.root / broker / key).store_and_key()
        obstore.put(store, path, data, chunk_size=UPLOAD_PART_BYTES)

    # ----------------------------------------------------------------- the local mirror

    def local_store(self, broker: str, snapshot_id: str, *,
                    progress: Progress | None = None) -> Path:
        """A local directory holding the published snapshot (its ``store``), from this
        host's mirror; what the mirror lacks is downloaded and checked first."""
        with _bucket_errors(f"{broker}: snapshot {snapshot_id} from {self.root / broker}"):
            return self._local_store(broker, snapshot_id, progress or log.info)

    def _local_store(self, broker: str, snapshot_id: str, say: Progress) -> Path:
        manifest = self.manifest(broker, snapshot_id)
        if manifest is None:
            raise SnapshotError(f"{broker}: no snapshot {snapshot_id} in {self.root / broker}")
        return self.local_copy(broker, manifest, say)

    def local_copy(self, broker: str, manifest: Manifest, say: Progress) -> Path:
        """The snapshot ``manifest`` names, in this host's mirror (see local_store)."""
        snapshot_id = manifest.snapshot_id
        final = snapshot_dir(self.mirror, broker, snapshot_id)
        if _same_files(final / MANIFEST, manifest):
            return final / STORE_DIR
        shutil.rmtree(final, ignore_errors=True)  # another attempt's copy, never published
        partial = broker_dir(self.mirror, broker) / f"{MIRROR_PARTIAL}{snapshot_id}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        (partial / STORE_DIR).mkdir(parents=True)
        held, chunks = self._held(broker)
        missing = [f for f in manifest.files if _content(f) not in held]
        fetched = [key for f in missing for key in f.objects if key not in chunks]
        say(f"{broker}: snapshot {snapshot_id} to this host's mirror: {len(fetched)} "
            f"object(s) downloaded ({sum(chunk_offset(k)[1] for k in fetched) / 2**20:.1f} "
            f"MiB) for {len(missing)} of {len(manifest.files)} file(s), the rest linked")
        for entry in manifest.files:
            destination = partial / STORE_DIR / entry.path
            destination.parent.mkdir(parents=True, exist_ok=True)
            if _content(entry) in held:
                os.link(held[_content(entry)], destination)
            else:
                download(self.root / broker, entry, destination, broker, chunks)
        (partial / MANIFEST).write_text(manifest.to_json())
        try:
            os.rename(partial, final)
        except OSError:  # another process of this host mirrored it meanwhile
            shutil.rmtree(partial)
            if not _same_files(final / MANIFEST, manifest):
                raise
        return final / STORE_DIR

    def _held(self, broker: str) -> tuple[dict[tuple, Path], dict[str, Path]]:
        """The files the mirror's complete snapshots hold, by content, and the local file
        holding each object they name (a grown file's unchanged chunks are copied from
        its earlier version, not downloaded)."""
        held: dict[tuple, Path] = {}
        chunks: dict[str, Path] = {}
        for snapshot_id in complete_snapshots(self.mirror, broker):
            directory = snapshot_dir(self.mirror, broker, snapshot_id)
            for entry in Manifest.load(directory / MANIFEST).files:
                held.setdefault(_content(entry), directory / STORE_DIR / entry.path)
                for key in entry.objects:
                    chunks.setdefault(key, directory / STORE_DIR / entry.path)
        return held, chunks

    def _forget_unpublished(self, broker: str, published: list[str]) -> None:
        """Drop the mirror's snapshots the bucket does not hold (an attempt that never
        published, or one retention deleted): they are no snapshot to build on."""
        for snapshot_id in complete_snapshots(self.mirror, broker):
            if snapshot_id not in published:
                shutil.rmtree(snapshot_dir(self.mirror, broker, snapshot_id))

    # ----------------------------------------------------------------- retention

    def clean_up(self, broker: str, current: str, retention_days: float, *,
                 grace_s: float = ORPHAN_GRACE_S) -> Cleanup:
        """Retention in the bucket (manifests, then unnamed objects) and in the mirror."""
        removed, kept = expired(self.ids(broker), current, retention_days)
        for snapshot_id in removed:
            (self.root / broker / snapshot_id / MANIFEST).delete()
        kept_files = [entry for snapshot_id in kept
                      for entry in (self.manifest(broker, snapshot_id) or _NO_FILES).files]
        named = {key for entry in kept_files for key in entry.objects}
        cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
        objects = self.root / broker / OBJECTS
        orphans = [f"{OBJECTS}/{f.relative}" for f in objects.files()
                   if f"{OBJECTS}/{f.relative}" not in named and f.modified < cutoff]
        (self.root / broker).delete_files(orphans)
        mirror = clean_up_snapshots(self.mirror, broker, current, retention_days)
        self._forget_unpublished(broker, kept)
        _trim_object_cache(self.mirror / broker / OBJECTS, {content_key(e) for e in kept_files})
        _remove_stale_partials(broker_dir(self.mirror, broker), grace_s)
        return Cleanup(removed, kept, mirror.partials_removed, objects_removed=len(orphans))


_NO_FILES = Manifest("", "", "", "")


# --------------------------------------------------------------------------- executors


class ObjectSource:
    """A snapshot file read straight from its chunks, as an rmqlib ByteSource: each
    ``read_at`` one ranged GET per chunk it spans (retried as every request is); the
    zeros past the data are the file's preallocated tail."""

    def __init__(self, directory: Location, entry: FileEntry, name: str) -> None:
        self.directory, self.name = directory, name
        self.size, self.data_length = entry.size, entry.data_length
        self.chunks = [(*chunk_offset(key), key) for key in entry.objects]

    def read_at(self, position: int, length: int) -> bytes:
        import obstore

        end = min(position + max(length, 0), self.size)
        data_end = min(end, self.data_length)
        parts = []
        for offset, size, key in self.chunks:
            begin, stop = max(position, offset), min(data_end, offset + size)
            if begin < stop:
                store, path = (self.directory / key).store_and_key()
                parts.append(bytes(obstore.get_range(store, path, start=begin - offset,
                                                     end=stop - offset)))
        return b"".join(parts) + bytes(max(0, end - max(position, data_end)))

    def close(self) -> None:
        """Nothing is held open between reads."""


@dataclass(frozen=True)
class SnapshotObjects:
    """Where a published snapshot's files are in the bucket: what a Spark executor on any
    host reads instead of the driver's mirror (``jobs.load.decode_tasks``)."""

    root: str            # the snapshots' root URI
    manifest: Manifest   # as published (its entries name the objects)

    @classmethod
    def beside(cls, store: Path) -> SnapshotObjects | None:
        """The objects of the snapshot whose mirrored ``store`` directory this is; None for
        a snapshot (or store) that is not in a bucket."""
        manifest_path = Path(store).parent / MANIFEST
        if not manifest_path.is_file():
            return None
        manifest = Manifest.load(manifest_path)
        if not manifest.objects_root:
            return None
        return cls(Location(manifest.objects_root).parent.uri, manifest)

    @property
    def broker(self) -> str:
        return self.manifest.broker

    @property
    def snapshot_id(self) -> str:
        return self.manifest.snapshot_id

    @property
    def uri(self) -> str:
        """The snapshot's own URI (``<root>/<broker>/<snapshot_id>``)."""
        return f"{self.root}/{self.broker}/{self.snapshot_id}"

    @cached_property
    def _by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.manifest.files}

    def entry(self, rel_path: str) -> FileEntry:
        found = self._by_path.get(rel_path)
        if found is None or (found.data_length and not found.objects):
            raise SnapshotError(f"{self.broker}: snapshot {self.snapshot_id} has no file "
                                f"{rel_path} in {self.root}")
        return found

    def source(self, rel_path: str) -> ObjectSource:
        """The file's bytes, read by ranges from its object."""
        return ObjectSource(Location(self.root) / self.broker, self.entry(rel_path),
                            f"{self.uri}/{STORE_DIR}/{rel_path}")

    def local_store(self) -> Path:
        """The whole snapshot in this host's mirror (for readers that need a directory:
        DLedger's index beside its data, a RocksDB database, consume-queue ext files),
        from the manifest in hand: no request when the host holds it already."""
        with _bucket_errors(f"{self.broker}: snapshot {self.snapshot_id} from {self.root}"):
            return BucketSnapshots(Location(self.root)).local_copy(self.broker,
                                                                   self.manifest, log.info)

    def local_file(self, rel_path: str) -> Path:
        """One file in this host's object cache (``<mirror>/<broker>/objects/...``),
        downloaded once per content: for readers that map a whole file (index files)."""
        entry = self.entry(rel_path)
        cached = mirror_root(Location(self.root)) / self.broker / content_key(entry)
        if cached.is_file():
            return cached
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{cached.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        with _bucket_errors(f"{self.broker}: {rel_path} from {self.root}"):
            download(Location(self.root) / self.broker, entry, partial, self.broker)
        os.replace(partial, cached)
        return cached


@contextmanager
def _bucket_errors(what: str) -> Iterator[None]:
    """An object-store request that failed past its retries as one SnapshotError line."""
    from obstore.exceptions import BaseError

    try:
        yield
    except BaseError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SnapshotError(f"{what}: {first}") from error


def download(directory: Location, entry: FileEntry, destination: Path, broker: str,
             local_chunks: dict[str, Path] | None = None) -> None:
    """A file of the broker's ``directory`` in the bucket as the local file
    ``destination``: its chunks in order (read from ``local_chunks``' files where this
    host holds them), then zeros to its size (holes), checked against the entry's sha256,
    read-only."""
    digest, position = ZeroAwareHash(), 0
    fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for key in entry.objects:
            for data in _chunk_bytes(directory, key, (local_chunks or {}).get(key), broker,
                                     entry.path):
                digest.update(position, data)
                write_sparse(fd, data, position)
                position += len(data)
        os.ftruncate(fd, entry.size)
    finally:
        os.close(fd)
    if position != entry.data_length or digest.finish(position) != entry.sha256:
        raise SnapshotError(f"{broker}: {entry.path}: its objects in {directory} hold "
                            f"{position} bytes whose sha256 is not the manifest's")
    os.utime(destination, ns=(entry.mtime_ns, entry.mtime_ns))
    os.chmod(destination, 0o444)


def _chunk_bytes(directory: Location, key: str, local: Path | None, broker: str,
                 path: str) -> Iterator[bytes]:
    """One chunk's bytes: from a local file holding it, else streamed from its object."""
    import obstore

    offset, length = chunk_offset(key)
    if local is not None:
        with open(local, "rb") as handle:
            handle.seek(offset)
            yield handle.read(length)
        return
    store, object_path = (directory / key).store_and_key()
    try:
        for chunk in obstore.get(store, object_path).stream():
            yield bytes(chunk)
    except FileNotFoundError as error:  # obstore's answer to a 404
        raise SnapshotError(f"{broker}: {path}: object {directory / key} is missing "
                            "(deleted while a manifest names it)") from error


def _content(entry: FileEntry) -> tuple[str, int, int, str]:
    return entry.path, entry.size, entry.data_length, entry.sha256


def _same_files(manifest_path: Path, manifest: Manifest) -> bool:
    """Whether a local snapshot's manifest names the same bytes as ``manifest``."""
    if not manifest_path.is_file():
        return False
    local = Manifest.load(manifest_path)
    return sorted(map(_content, local.files)) == sorted(map(_content, manifest.files))


def _trim_object_cache(cache: Path, named: set[str]) -> None:
    """Delete the objects a host cached (SnapshotObjects.local_file) that no kept
    snapshot names."""
    if not cache.is_dir():
        return
    for path in [p for p in cache.rglob("*") if p.is_file()]:
        if f"{OBJECTS}/{path.relative_to(cache).as_posix()}" not in named:
            path.unlink()


def _remove_stale_partials(directory: Path, older_than_s: float) -> None:
    """Mirror downloads left by killed readers (a running one is younger)."""
    if not directory.is_dir():
        return
    for partial in directory.glob(f"{MIRROR_PARTIAL}*"):
        if time.time() - partial.stat().st_mtime > older_than_s:
            shutil.rmtree(partial, ignore_errors=True)
