"""Byte accounting: every byte of every file is decoded, blank, zero tail or unreadable.

Decoders report what they saw as a :class:`FileAccount`; ``FileAccount.check()``
proves the four parts add up to the file size, so no byte is silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UnreadableRegion:
    """A region of a file that could not be decoded, and why."""

    path: str
    offset: int
    length: int
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "offset": self.offset, "length": self.length,
                "reason": self.reason}


@dataclass
class FileAccount:
    """How the bytes of one file (or of a byte range of it) were classified.

    ``decoded``: bytes of valid records/units/headers; ``blank``: format-defined filler
    (commitlog BLANK records, consume-queue filler units, unused index slots);
    ``zero_tail``: the all-zero unwritten end of a pre-allocated file;
    ``unreadable``: everything else, each region listed with its reason.
    ``notes``: named states of decoded bytes that cost no byte (length 0), e.g. index
    entries beyond a header that lags them in a hot copy (``rmqlib.common.races``).
    """

    path: str
    size: int
    decoded: int = 0
    blank: int = 0
    zero_tail: int = 0
    unreadable: list[UnreadableRegion] = field(default_factory=list)
    notes: list[UnreadableRegion] = field(default_factory=list)

    @property
    def unreadable_bytes(self) -> int:
        return sum(region.length for region in self.unreadable)

    def add_unreadable(self, offset: int, length: int, reason: str) -> None:
        if length > 0:
            self.unreadable.append(UnreadableRegion(self.path, offset, length, reason))

    @property
    def balanced(self) -> bool:
        return self.decoded + self.blank + self.zero_tail + self.unreadable_bytes == self.size

    def check(self) -> FileAccount:
        """Raise ValueError if the four parts do not add up to the size; return self."""
        if not self.balanced:
            raise ValueError(
                f"byte accounting does not balance for {self.path}: decoded {self.decoded} "
                f"+ blank {self.blank} + zero tail {self.zero_tail} + unreadable "
                f"{self.unreadable_bytes} != size {self.size}"
            )
        return self

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "size": self.size,
            "decoded": self.decoded,
            "blank": self.blank,
            "zero_tail": self.zero_tail,
            "unreadable": [region.as_dict() for region in self.unreadable],
            **({"notes": [region.as_dict() for region in self.notes]} if self.notes else {}),
        }
