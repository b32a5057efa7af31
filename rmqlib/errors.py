"""The one small hierarchy of errors rmqlib raises for bad input.

Every decoder turns malformed bytes into one of these (never a raw ``struct.error``,
``IndexError`` or ``UnicodeDecodeError``), carrying where the problem is so a caller
can quarantine exactly that region: ``path``, ``offset`` (byte position inside the
file) and ``length`` (how many bytes the problem covers, when known).
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base class: something in a broker store is not what the format says."""

    def __init__(
        self,
        reason: str,
        *,
        path: str | Path | None = None,
        offset: int | None = None,
        length: int | None = None,
    ) -> None:
        self.reason = reason
        self.path = str(path) if path is not None else None
        self.offset = offset
        self.length = length
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.length is not None:
            where.append(f"length {self.length}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason


class NotAStoreFileError(StoreError):
    """A path is missing, or is not the kind of file it claims to be (name, size, shape)."""


class CorruptDataError(StoreError):
    """Bytes that violate the format: bad magic, length rule, CRC, impossible field."""


class TruncatedDataError(CorruptDataError):
    """A structure runs past the end of the bytes available (torn or cut file)."""


class ConfigError(StoreError):
    """A config JSON file (and its .bak) cannot be parsed."""


class UnsupportedFormatError(StoreError):
    """Present in the store but not decoded by rmqlib (e.g. RocksDB-backed metadata)."""
