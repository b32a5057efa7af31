"""A snapshot on disk: where it lives, its id, and its manifest.

Layout: ``<root>/<broker>/<snapshot_id>/store/`` (the copy, read-only files) and
``<root>/<broker>/<snapshot_id>/manifest.json``. A snapshot is built in
``<root>/<broker>/.partial-<snapshot_id>/`` and renamed into place when its manifest is
written, so a snapshot directory that exists is complete.

The manifest lists every file with its size, data length, sha256 of its data (bytes
``[0, data_length)``; the rest is zeros), how it was obtained and how many bytes came from
the broker, plus notes on the broker's state (lock held, abort file present).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

MANIFEST = "manifest.json"
STORE_DIR = "store"
PARTIAL_PREFIX = ".partial-"
CHUNK = 4 * 2**20
ID_FORMAT = "%Y-%m-%dT%H%MZ"
LINKED, GROWN, COPIED = "linked", "grown", "copied"


def snapshot_id_for(moment: datetime) -> str:
    """One snapshot id per logical date: UTC, minute resolution, sorts by time."""
    return moment.astimezone(UTC).strftime(ID_FORMAT)


def snapshot_time(snapshot_id: str) -> datetime | None:
    """The time a DAG-made snapshot id stands for; None for ids made by hand."""
    try:
        return datetime.strptime(snapshot_id, ID_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


# --------------------------------------------------------------------------- manifest


@dataclass
class FileEntry:
    path: str               # relative to the store root
    kind: str
    size: int               # the source file's size (the copy has the same)
    data_length: int        # bytes up to the end of its data; the rest is zeros
    sha256: str             # of bytes [0, data_length)
    how: str                # linked | grown | copied
    from_broker: int        # bytes read from the broker for this file
    reused: int             # bytes taken from the previous snapshot
    finished: bool          # a later file of its queue has data: it will not change
    mtime_ns: int
    resume_at: int = 0      # where the next snapshot re-reads this file from the broker
    # A later write would change mtime_ns (sources.SourceFile.mtime_settled): only then may
    # the next snapshot take an equal mtime for "unchanged" without reading a byte.
    mtime_settled: bool = False
    # The broker rewrote this file below what the previous snapshot held: the first byte
    # where it differs from that copy (the file was then copied whole); None otherwise.
    rewritten_at: int | None = None
    # In a bucket (jobs.snapshot.bucket): the keys, relative to the broker's directory, of
    # the objects holding bytes [0, data_length) in order (chunks); empty on a local disk.
    objects: list[str] = field(default_factory=list)


@dataclass
class Manifest:
    broker: str
    snapshot_id: str
    source: str
    started_at: str
    finished_at: str = ""
    previous: str | None = None
    broker_running: bool = False
    abort_present: bool = False
    notes: list[str] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)
    seconds: float = 0.0
    # Bytes read from the broker only to confirm that earlier copies are still its bytes.
    confirm_bytes: int = 0
    # In a bucket (jobs.snapshot.bucket): the broker's directory there (FileEntry.objects
    # are relative to it), and the objects and bytes this snapshot uploaded.
    objects_root: str | None = None
    uploaded_objects: int = 0
    uploaded_bytes: int = 0
    existing: bool = False  # not written: True when this run found the snapshot made

    @property
    def from_broker(self) -> int:
        return sum(f.from_broker for f in self.files) + self.confirm_bytes

    @property
    def reused(self) -> int:
        return sum(f.reused for f in self.files)

    @property
    def data_bytes(self) -> int:
        return sum(f.data_length for f in self.files)

    @property
    def zero_tail_bytes(self) -> int:
        return sum(f.size - f.data_length for f in self.files)

    @property
    def rewritten(self) -> list[FileEntry]:
        """Files the broker rewrote since the previous snapshot (not grown: changed)."""
        return [f for f in self.files if f.rewritten_at is not None]

    def count(self, how: str) -> int:
        return sum(1 for f in self.files if f.how == how)

    def to_json(self) -> str:
        document = asdict(self)
        document.pop("existing")
        document["totals"] = {
            "files": len(self.files), "bytes": sum(f.size for f in self.files),
            "data_bytes": self.data_bytes, "zero_tail_bytes": self.zero_tail_bytes,
            "from_broker": self.from_broker, "reused": self.reused,
            "rewritten": len(self.rewritten),
            **{how: self.count(how) for how in (LINKED, GROWN, COPIED)},
        }
        return json.dumps(document, indent=1)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_text())

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        document = json.loads(text)
        document.pop("totals", None)
        files = [FileEntry(**entry) for entry in document.pop("files")]
        return cls(**document, files=files)

    def summary(self) -> str:
        """One line for the log and the run summary."""
        mib = 2**20
        rate = self.from_broker / mib / self.seconds if self.seconds else 0.0
        line = (f"{self.broker} snapshot {self.snapshot_id}: {len(self.files)} files, "
                f"{self.from_broker / mib:.1f} MiB read from the broker ({rate:.1f} MiB/s), "
                f"{self.reused / mib:.1f} MiB reused from {self.previous or 'no earlier snapshot'}"
                f" ({self.count(LINKED)} hard links, {self.count(GROWN)} grown), "
                f"{self.zero_tail_bytes / mib:.1f} MiB of zero tails not copied")
        if self.rewritten:
            line += (f"; {len(self.rewritten)} file(s) rewritten since then, copied whole: "
                     + ", ".join(f"{f.path} from byte {f.rewritten_at}"
                                 for f in self.rewritten[:3])
                     + (", ..." if len(self.rewritten) > 3 else ""))
        if self.uploaded_objects:
            line += (f"; {self.uploaded_objects} object(s), {self.uploaded_bytes / mib:.1f} MiB "
                     "uploaded")
        if self.existing:
            line += " (already taken: nothing copied)"
        return line


# --------------------------------------------------------------------------- layout


def broker_dir(root: Path, broker: str) -> Path:
    return Path(root) / broker


def snapshot_dir(root: Path, broker: str, snapshot_id: str) -> Path:
    return broker_dir(root, broker) / snapshot_id


def snapshot_store(root: Path, broker: str, snapshot_id: str) -> Path:
    return snapshot_dir(root, broker, snapshot_id) / STORE_DIR


def complete_snapshots(root: Path, broker: str) -> list[str]:
    """Ids of the broker's complete snapshots, oldest first."""
    directory = broker_dir(root, broker)
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if not p.name.startswith(".") and (p / MANIFEST).is_file())


# --------------------------------------------------------------------------- checking


def verify_snapshot(root: str | Path, broker: str, snapshot_id: str) -> list[str]:
    """Problems of a snapshot against its manifest (empty when it is intact)."""
    directory = snapshot_dir(Path(root), broker, snapshot_id)
    manifest = Manifest.load(directory / MANIFEST)
    problems = []
    for entry in manifest.files:
        path = directory / STORE_DIR / entry.path
        if not path.is_file() or path.stat().st_size != entry.size:
            problems.append(f"{entry.path}: missing or not {entry.size} bytes")
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            remaining = entry.data_length
            while remaining:
                chunk = handle.read(min(CHUNK, remaining))
                digest.update(chunk)
                remaining -= len(chunk)
            tail = handle.read()
        if digest.hexdigest() != entry.sha256:
            problems.append(f"{entry.path}: sha256 of its data differs from the manifest")
        if any(tail):
            problems.append(f"{entry.path}: non-zero bytes after its data length")
    return problems
