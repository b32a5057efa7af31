"""Open a RocksDB directory of a store read-only, without touching it.

Even a read-only open writes into the database directory (RocksDB's info LOG; the binding
its own ``rocksdict-config.json``), and a live broker's directory must never be opened at
all. So every open works on a *clone*: a temporary directory whose files are hard links to
the database's (a copy when links are impossible, e.g. across filesystems). RocksDB never
modifies a file it wrote (SST, MANIFEST, WAL and OPTIONS files are written once and
appended to, CURRENT is replaced by rename), so links are safe: the original stays
byte-identical.

The binding is ``rocksdict`` (a prebuilt wheel with LZ4 and ZSTD, which RocketMQ's queue
column family uses); keys and values are bytes (``raw_mode``).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqlib.errors import CorruptDataError, NotAStoreFileError

# What makes a directory a RocksDB database: the file naming the live MANIFEST.
CURRENT = "CURRENT"
# Left in a snapshot's copy of a database by the snapshot copier when it could not copy it
# consistently (the database kept changing under it); holds the reason. Opening such a copy
# raises instead of reading a state the database never was in.
INCONSISTENT_COPY = "RMQ_INCONSISTENT_COPY"


def is_database(path: str | Path) -> bool:
    return (Path(path) / CURRENT).is_file()


@dataclass
class Database:
    """An open read-only database: its column families by name."""

    path: Path
    families: dict[str, Any]

    def items(self, family: str = "default", start: bytes | None = None
              ) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of a column family in key order, from the first key not
        below ``start`` when given ([] when the family does not exist)."""
        handle = self.families.get(family)
        if handle is None:
            return iter(())
        return iter(handle.items() if start is None else handle.items(from_key=start))

    def get(self, family: str, key: bytes) -> bytes | None:
        handle = self.families.get(family)
        return None if handle is None else handle.get(key)


@contextmanager
def open_readonly(path: str | Path) -> Iterator[Database]:
    """The database at ``path``, opened read-only on a clone (see the module doc).

    NotAStoreFileError when ``path`` is no database; CorruptDataError when RocksDB refuses
    it (a missing SST the MANIFEST lists, a damaged file): the reason is RocksDB's own.
    """
    from rocksdict import AccessType, Options, Rdict

    source = Path(path)
    if not is_database(source):
        raise NotAStoreFileError("not a RocksDB database (no CURRENT file)", path=source)
    if (source / INCONSISTENT_COPY).is_file():
        reason = (source / INCONSISTENT_COPY).read_text(encoding="utf-8").strip()
        raise CorruptDataError(f"this copy of the database is not consistent: {reason}",
                               path=source)
    with tempfile.TemporaryDirectory(prefix="rmq-rocksdb-") as scratch:
        clone = Path(scratch) / "db"
        _clone(source, clone)
        try:
            names = Rdict.list_cf(str(clone))
            options = {name: Options(raw_mode=True) for name in names if name != "default"}
            db = Rdict(str(clone), options=Options(raw_mode=True),
                       access_type=AccessType.read_only(), column_families=options)
        except Exception as error:  # the binding raises plain Exceptions with RocksDB's text
            raise CorruptDataError(f"RocksDB cannot open this database: {error}",
                                   path=source) from None
        try:
            families = {name: db if name == "default" else db.get_column_family(name)
                        for name in names}
            yield Database(source, families)
        finally:
            db.close()


def _clone(source: Path, clone: Path) -> None:
    """Hard links to every file of ``source`` (copies across filesystems) in ``clone``."""
    clone.mkdir()
    for entry in sorted(source.iterdir()):
        if not entry.is_file() or entry.name in ("LOCK", INCONSISTENT_COPY) \
                or entry.name.startswith("LOG"):
            continue  # the broker's lock and info logs: not part of the data, and an open
            #           renames LOG aside
        target = clone / entry.name
        try:
            os.link(entry, target)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            shutil.copy2(entry, target)
