"""Snapshots in an object store: objects by content, each snapshot one manifest.

A bucket has neither the hard links nor the rename the local copier builds on
(:mod:`jobs.snapshot.copier`). Under the root ``s3://bucket/prefix``::

    <broker>/objects/<path>/<data_length>-<sha256>   bytes [0, data_length) of one file
    <broker>/<snapshot_id>/manifest.json             the snapshot; each file's entry
                                                     names its object (FileEntry.object)

* **Taking** one: the local copier takes the snapshot into this host's *mirror* of the
  root (:func:`mirror_root`), beside the previous snapshot (downloaded first when this
  host does not hold it), so a finished file is linked and a growing one extended exactly
  as on a disk, and the broker is read no more than there. Then every object the previous
  manifest does not name is uploaded, and last the manifest, with ``If-None-Match: *``: a
  snapshot exists when its manifest does (complete or absent, as the rename makes it on a
  disk), and of two hosts taking the same night exactly one publishes.
* **Reading** one: :meth:`BucketSnapshots.local_store` gives a local directory of it in
  this host's mirror, hard-linking the files the mirror already holds with the same
  content and downloading the others (checked against the manifest's sha256). A host
  reading the nights it took downloads nothing.
* **Retention** deletes manifests first, then the objects no remaining manifest names
  that are older than :data:`ORPHAN_GRACE_S` (a snapshot still uploading keeps its new
  objects; an interrupted one's are collected a day later).

A growing file is a new object each night, uploaded whole ([0, data_length)): the
measured cost against ranged uploads is in docs/object-storage.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

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
#: Up to this size an object is one PUT; larger ones are multipart uploads of parts this
#: big (S3's smallest part is 5 MiB).
SINGLE_PUT_BYTES = 16 * 2**20
UPLOAD_PART_BYTES = 8 * 2**20

Progress = Callable[[str], None]


def object_key(entry: FileEntry) -> str:
    """The object of a file's bytes, relative to the broker's directory: its path, data
    length and the sha256 of its data, so equal bytes are one object."""
    return f"{OBJECTS}/{entry.path}/{entry.data_length}-{entry.sha256}"


def mirror_root(root: Location) -> Path:
    """This host's local mirror of the snapshots under ``root``:
    ``$RMQ_SNAPSHOT_MIRROR/<bucket>/<prefix>``, by default under ``.cache/snapshot-mirror``
    of this checkout. It holds what a host took or read, hard-linked across nights as a
    local snapshot root does; retention trims it with the bucket."""
    base = os.environ.get(MIRROR_ENV)
    if not base:
        return local_companion(root, "snapshot-mirror")
    parsed = urlparse(root.uri)
    return Path(base) / parsed.netloc / parsed.path.strip("/")


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
             progress: Progress | None = None) -> Manifest:
        """Take ``snapshot_id`` of ``source`` and publish it (see the module docstring);
        a published snapshot is returned as it is (``existing``)."""
        with _bucket_errors(f"{broker}: snapshot {snapshot_id} to {self.root / broker}"):
            return self._take(source, broker, snapshot_id, progress or log.info)

    def _take(self, source: StoreSource, broker: str, snapshot_id: str,
              say: Progress) -> Manifest:
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
            self.local_store(broker, previous.snapshot_id, progress=say)
        manifest = take_snapshot(source, self.mirror, broker, snapshot_id, progress=say)
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
        """Name each file's object and upload those the previous manifest does not name
        (retention keeps every object a manifest names)."""
        known = {f.object for f in previous.files} if previous else set()
        store = snapshot_dir(self.mirror, broker, manifest.snapshot_id) / STORE_DIR
        new = []
        for entry in manifest.files:
            entry.object = object_key(entry)
            if entry.object not in known:
                new.append(entry)
                known.add(entry.object)
        say(f"{broker}: uploading {len(new)} object(s), "
            f"{sum(e.data_length for e in new) / 2**20:.1f} MiB, to {self.root / broker}")
        for entry in new:
            self._upload(broker, entry, store / entry.path)
        manifest.objects_root = str(self.root / broker)
        manifest.uploaded_objects = len(new)
        manifest.uploaded_bytes = sum(e.data_length for e in new)

    def _upload(self, broker: str, entry: FileEntry, local: Path) -> None:
        import obstore

        assert entry.object is not None
        store, key = (self.root / broker / entry.object).store_and_key()
        if entry.data_length <= SINGLE_PUT_BYTES:
            with open(local, "rb") as handle:
                obstore.put(store, key, handle.read(entry.data_length))
        else:
            obstore.put(store, key, _chunks(local, entry.data_length),
                        chunk_size=UPLOAD_PART_BYTES)

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
        final = snapshot_dir(self.mirror, broker, snapshot_id)
        if _same_files(final / MANIFEST, manifest):
            return final / STORE_DIR
        shutil.rmtree(final, ignore_errors=True)  # another attempt's copy, never published
        partial = broker_dir(self.mirror, broker) / f"{MIRROR_PARTIAL}{snapshot_id}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        (partial / STORE_DIR).mkdir(parents=True)
        held = self._held(broker)
        missing = [f for f in manifest.files if _content(f) not in held]
        say(f"{broker}: snapshot {snapshot_id} to this host's mirror: {len(missing)} of "
            f"{len(manifest.files)} file(s) downloaded "
            f"({sum(f.data_length for f in missing) / 2**20:.1f} MiB), the rest linked")
        for entry in manifest.files:
            destination = partial / STORE_DIR / entry.path
            destination.parent.mkdir(parents=True, exist_ok=True)
            if _content(entry) in held:
                os.link(held[_content(entry)], destination)
            else:
                self._download(broker, entry, destination)
        (partial / MANIFEST).write_text(manifest.to_json())
        try:
            os.rename(partial, final)
        except OSError:  # another process of this host mirrored it meanwhile
            shutil.rmtree(partial)
            if not _same_files(final / MANIFEST, manifest):
                raise
        return final / STORE_DIR

    def _held(self, broker: str) -> dict[tuple, Path]:
        """The files the mirror's complete snapshots hold, by content."""
        held: dict[tuple, Path] = {}
        for snapshot_id in complete_snapshots(self.mirror, broker):
            directory = snapshot_dir(self.mirror, broker, snapshot_id)
            for entry in Manifest.load(directory / MANIFEST).files:
                held.setdefault(_content(entry), directory / STORE_DIR / entry.path)
        return held

    def _download(self, broker: str, entry: FileEntry, destination: Path) -> None:
        assert entry.object is not None
        download(self.root / broker / entry.object, entry, destination, broker)

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
        named = {entry.object for snapshot_id in kept
                 for entry in (self.manifest(broker, snapshot_id) or _NO_FILES).files}
        cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
        objects = self.root / broker / OBJECTS
        orphans = [f"{OBJECTS}/{f.relative}" for f in objects.files()
                   if f"{OBJECTS}/{f.relative}" not in named and f.modified < cutoff]
        _delete_keys(self.root / broker, orphans)
        mirror = clean_up_snapshots(self.mirror, broker, current, retention_days)
        self._forget_unpublished(broker, kept)
        _trim_object_cache(self.mirror / broker / OBJECTS, named)
        _remove_stale_partials(broker_dir(self.mirror, broker), grace_s)
        return Cleanup(removed, kept, mirror.partials_removed, objects_removed=len(orphans))


_NO_FILES = Manifest("", "", "", "")


# --------------------------------------------------------------------------- executors


class ObjectSource:
    """A snapshot file read straight from its object, as an rmqlib ByteSource: each
    ``read_at`` one ranged GET (retried as every request is); the zeros past the data
    the object holds are the file's preallocated tail."""

    def __init__(self, location: Location, name: str, size: int, data_length: int) -> None:
        self.location, self.name = location, name
        self.size, self.data_length = size, data_length
        self.requests = 0

    def read_at(self, position: int, length: int) -> bytes:
        import obstore

        end = min(position + max(length, 0), self.size)
        data_end = min(end, self.data_length)
        data = b""
        if position < data_end:
            store, key = self.location.store_and_key()
            data = bytes(obstore.get_range(store, key, start=position, end=data_end))
            self.requests += 1
        return data + bytes(max(0, end - max(position, data_end)))

    def close(self) -> None:
        """Nothing is held open between reads."""


@dataclass(frozen=True)
class SnapshotObjects:
    """Where a published snapshot's files are in the bucket: what a Spark executor on any
    host reads instead of the driver's mirror (``jobs.load.decode_tasks``)."""

    root: str            # the snapshots' root URI
    broker: str
    snapshot_id: str
    files: tuple[FileEntry, ...]

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
        root = Location(manifest.objects_root).parent
        return cls(root.uri, manifest.broker, manifest.snapshot_id, tuple(manifest.files))

    @property
    def uri(self) -> str:
        """The snapshot's own URI (``<root>/<broker>/<snapshot_id>``)."""
        return f"{self.root}/{self.broker}/{self.snapshot_id}"

    def entry(self, rel_path: str) -> FileEntry:
        found = next((f for f in self.files if f.path == rel_path), None)
        if found is None or found.object is None:
            raise SnapshotError(f"{self.broker}: snapshot {self.snapshot_id} has no file "
                                f"{rel_path} in {self.root}")
        return found

    def source(self, rel_path: str) -> ObjectSource:
        """The file's bytes, read by ranges from its object."""
        entry = self.entry(rel_path)
        assert entry.object is not None
        return ObjectSource(Location(self.root) / self.broker / entry.object,
                            f"{self.uri}/{STORE_DIR}/{rel_path}", entry.size,
                            entry.data_length)

    def local_store(self) -> Path:
        """The whole snapshot in this host's mirror (for readers that need a directory:
        DLedger's index beside its data, a RocksDB database, consume-queue ext files)."""
        return BucketSnapshots(Location(self.root)).local_store(self.broker, self.snapshot_id)

    def local_file(self, rel_path: str) -> Path:
        """One file in this host's object cache (``<mirror>/<broker>/objects/...``),
        downloaded once per content: for readers that map a whole file (index files)."""
        entry = self.entry(rel_path)
        assert entry.object is not None
        cached = mirror_root(Location(self.root)) / self.broker / entry.object
        if cached.is_file():
            return cached
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{cached.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        with _bucket_errors(f"{self.broker}: {rel_path} from {self.root}"):
            download(Location(self.root) / self.broker / entry.object, entry, partial,
                     self.broker)
        os.replace(partial, cached)
        return cached


def _not_found() -> tuple[type[BaseException], ...]:
    from obstore.exceptions import NotFoundError

    return FileNotFoundError, NotFoundError


_NOT_FOUND = _not_found()


@contextmanager
def _bucket_errors(what: str) -> Iterator[None]:
    """An object-store request that failed past its retries as one SnapshotError line."""
    from obstore.exceptions import BaseError

    try:
        yield
    except BaseError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SnapshotError(f"{what}: {first}") from error


def download(location: Location, entry: FileEntry, destination: Path, broker: str) -> None:
    """The object ``location`` as the local file ``destination``: its bytes, then zeros
    to the file's size (holes), checked against the entry's sha256, read-only."""
    import obstore

    digest, position = ZeroAwareHash(), 0
    fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if entry.data_length:
            store, key = location.store_and_key()
            for chunk in obstore.get(store, key).stream():
                data = bytes(chunk)
                digest.update(position, data)
                write_sparse(fd, data, position)
                position += len(data)
        os.ftruncate(fd, entry.size)
    except _NOT_FOUND as error:
        raise SnapshotError(f"{broker}: {entry.path}: object {location} is missing "
                            "(deleted while the manifest names it)") from error
    finally:
        os.close(fd)
    if position != entry.data_length or digest.finish(position) != entry.sha256:
        raise SnapshotError(f"{broker}: {entry.path}: object {location} holds "
                            f"{position} bytes whose sha256 is not the manifest's")
    os.utime(destination, ns=(entry.mtime_ns, entry.mtime_ns))
    os.chmod(destination, 0o444)


def _content(entry: FileEntry) -> tuple[str, int, int, str]:
    return entry.path, entry.size, entry.data_length, entry.sha256


def _same_files(manifest_path: Path, manifest: Manifest) -> bool:
    """Whether a local snapshot's manifest names the same bytes as ``manifest``."""
    if not manifest_path.is_file():
        return False
    local = Manifest.load(manifest_path)
    return sorted(map(_content, local.files)) == sorted(map(_content, manifest.files))


def _chunks(local: Path, length: int) -> Iterator[bytes]:
    with open(local, "rb") as handle:
        remaining = length
        while remaining:
            chunk = handle.read(min(UPLOAD_PART_BYTES, remaining))
            if not chunk:
                raise SnapshotError(f"{local}: shorter than its manifest's data length")
            remaining -= len(chunk)
            yield chunk


def _delete_keys(directory: Location, relatives: list[str]) -> None:
    import obstore

    if not relatives:
        return
    store, key = directory.store_and_key()
    paths = [f"{key}/{relative}" for relative in relatives]
    for start in range(0, len(paths), 1000):
        obstore.delete(store, paths[start:start + 1000])


def _trim_object_cache(cache: Path, named: set[str | None]) -> None:
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
