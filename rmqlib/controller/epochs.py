"""``epochFileCheckpoint`` (+ ``.bak``): the master terms of a controller-mode broker (5.x).

A broker with ``enableControllerMode=true`` keeps, at its store root, the list of master
terms ("epochs") its commitlog was written in: entry ``(epoch, startOffset)`` says the
commitlog bytes from ``startOffset`` up to the next entry's ``startOffset`` (the last one: up
to the commitlog's end) were written while the broker set's master term was ``epoch``. The
epoch numbers come from the controller; they increase but have gaps (a failed election
raises them too). Text, written by ``CheckpointFile.write``::

    <N>\\n                  number of entries (decimal)
    <CRC>\\n                CRC32 & 0x7FFFFFFF of the entry lines, each with its "\\n"
    <epoch>-<startOffset>\\n N lines, ascending epoch

No end offset is stored: ``EpochFileCache.initEntries`` gives each entry the next entry's
start, and the last one ``Long.MAX_VALUE`` (open; here ``None``).

Which file the broker loads (``CheckpointFile.read``, mirrored by :func:`read_epoch_file`):
the main file, unless it is missing, holds no entries, or reading it throws an
``IOException`` (header count ≠ entry lines, CRC mismatch, invalid UTF-8): then
``epochFileCheckpoint.bak``, which ``MixAll.string2File`` fills with the previous content
before each (non-atomic, unsynced) rewrite. A header or entry field that is not a Java
integer throws ``NumberFormatException`` instead, which nothing catches: no fallback, the
store fails to start. :func:`read_epoch_file` raises :class:`CorruptDataError` there.

Java's own parsing rules are kept where they decide the outcome: lines end at ``\\n``,
``\\r`` or ``\\r\\n`` (``BufferedReader.readLine``); the CRC is over the lines as read, each
followed by ``\\n`` (so a missing final newline or ``\\r\\n`` endings still match); an entry
line is ``String.split("-")`` (trailing empty parts dropped) into exactly two parts, other
lines are skipped and only trip the count check; ``Integer.parseInt``/``Long.parseLong``
accept a sign and any BMP Unicode decimal digit, nothing else (no spaces).

Sources (apache/rocketmq 5.5.0): ``common/.../utils/CheckpointFile.java`` (format, read and
fallback, ``NOT_CHECK_CRC_MAGIC_CODE``), ``store/.../ha/autoswitch/EpochFileCache.java``
(``EpochEntrySerializer``, ``initEntries``, ``appendEntry``, truncation),
``common/.../UtilAll.java`` (``crc32``), ``common/.../MixAll.java`` (``string2File``),
``remoting/.../protocol/EpochEntry.java`` (``LAST_EPOCH_END_OFFSET``),
``store/.../config/MessageStoreConfig.java`` (``getStorePathEpochFile``),
``store/.../DefaultMessageStore.java`` (retention: ``truncateEpochFilePrefix(minPhyOffset - 1)``).
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import read_bytes
from rmqlib.errors import CorruptDataError, NotAStoreFileError

EPOCH_FILE = "epochFileCheckpoint"     # MessageStoreConfig.getStorePathEpochFile (store root)
BAK_SUFFIX = ".bak"                    # CheckpointFile.getBackFilePath; MixAll.string2File
LINE_SEPARATOR = b"\n"                 # System.lineSeparator() on Linux (CheckpointFile.write)
ENTRY_SEPARATOR = "-"                  # EpochEntrySerializer.toLine: String.format("%d-%d", ...)
HEADER_LINES = 2                       # count, CRC (CheckpointFile.read)
NOT_CHECK_CRC = 0                      # CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE
CRC_MASK = 0x7FFFFFFF                  # UtilAll.crc32: CRC32.getValue() & 0x7FFFFFFF
LAST_EPOCH_END_OFFSET = 2**63 - 1      # EpochEntry.LAST_EPOCH_END_OFFSET (Long.MAX_VALUE)
INT_BITS, LONG_BITS = 32, 64           # epoch: int (Integer.parseInt); startOffset: long
JAVA_READ_CHUNK = 8192                 # BufferedReader buffer: Java checks UTF-8 chunk by chunk

_LINE_END = re.compile(rb"\r\n|\r|\n")  # BufferedReader.readLine terminators

# Finding severities.
ERROR, WARNING, INFO = "error", "warning", "info"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Finding:
    """One thing a controller-mode file or epoch list says that a reader should know.

    ``code`` is stable (for checks and tests), ``message`` says why it matters.
    """

    code: str
    severity: str  # "error", "warning" or "info"
    message: str
    epoch: int | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class EpochEntry:
    """A master term and the commitlog range written in it.

    ``end_offset`` is the next entry's start as the broker derives it (``initEntries``:
    the next line of the file), ``None`` for an open entry (Java's ``Long.MAX_VALUE``).
    ``line`` (1-based) and ``position`` (byte) locate it in its file; 0 when built by hand.
    """

    epoch: int
    start_offset: int
    end_offset: int | None = None
    line: int = 0
    position: int = 0

    def contains(self, offset: int) -> bool:
        """``findEpochEntryByOffset``'s test: start <= offset < end (open end: no limit)."""
        return self.start_offset <= offset and (self.end_offset is None
                                                or offset < self.end_offset)


@dataclass(frozen=True)
class SkippedLine:
    """An entry line ``EpochEntrySerializer.fromLine`` ignores (not two ``-``-separated parts)."""

    line: int
    position: int
    length: int
    text: str


@dataclass
class EpochFileCopy:
    """One file (``epochFileCheckpoint`` or its ``.bak``) as ``CheckpointFile.read(path)`` sees it.

    ``rejected``: why reading it throws an ``IOException`` (the caller falls back to the
    ``.bak``); ``fatal``: the ``NumberFormatException`` it throws instead (nothing catches it).
    ``lines`` are the parsed entry lines in file order; ``entries`` what the broker's cache
    holds after loading them.
    """

    path: str
    size: int
    account: FileAccount
    header_count: int | None = None
    header_crc: int | None = None
    computed_crc: int | None = None
    lines: list[EpochEntry] = field(default_factory=list)
    skipped: list[SkippedLine] = field(default_factory=list)
    rejected: str | None = None
    fatal: CorruptDataError | None = None

    @property
    def accepted(self) -> bool:
        return self.rejected is None and self.fatal is None

    @property
    def crc_checked(self) -> bool:
        """False when the header CRC is 0 (``NOT_CHECK_CRC_MAGIC_CODE``) or unreadable."""
        return self.header_crc is not None and self.header_crc != NOT_CHECK_CRC

    @property
    def crc_matched(self) -> bool | None:
        """None when not checked, else whether the header CRC equals the lines' CRC."""
        if not self.crc_checked or self.computed_crc is None:
            return None
        return self.header_crc == self.computed_crc

    @property
    def entries(self) -> list[EpochEntry]:
        """``initEntries``: a TreeMap by epoch (a later line of the same epoch wins), each
        entry's end offset taken from the line after it in the file."""
        by_epoch = {entry.epoch: entry for entry in self.lines}
        return sorted(by_epoch.values(), key=lambda entry: entry.epoch)


@dataclass
class EpochFile:
    """The epoch history a broker loads from ``epochFileCheckpoint`` or its ``.bak``.

    ``source``: "main", "bak", or "none" (the broker starts with no entries); ``fallback``
    says why the main file was not used. The header fields and ``crc_matched`` are the used
    file's. ``main``/``bak`` are both files as decoded (None when absent).
    """

    path: str
    source: str
    used_path: str | None
    fallback: str | None
    entries: list[EpochEntry]
    header_count: int | None
    header_crc: int | None
    crc_matched: bool | None
    main: EpochFileCopy | None
    bak: EpochFileCopy | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def issues(self) -> list[str]:
        return [finding.message for finding in self.findings]

    @property
    def accounts(self) -> list[FileAccount]:
        """The byte account of each file present (main first)."""
        return [copy.account for copy in (self.main, self.bak) if copy is not None]


# --------------------------------------------------------------------------- Java parsing


def split_java(text: str, separator: str) -> list[str]:
    """``String.split(separator)`` for a one-character literal separator: the parts, with
    trailing empty parts removed when the separator occurs at all (``"5-".split("-")`` is
    ``["5"]``, ``"-"`` gives ``[]``, ``""`` gives ``[""]``)."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_java_int(text: str | None, bits: int = INT_BITS) -> int | None:
    """``Integer.parseInt`` (bits=32) / ``Long.parseLong`` (bits=64) in radix 10; None where
    Java throws ``NumberFormatException``: an optional ``+``/``-``, then one or more decimal
    digits of any script (``Character.digit``: category Nd, one UTF-16 unit, so BMP only),
    within the type's range. No whitespace, no underscores (unlike Python's ``int``)."""
    if not text:
        return None
    sign, digits = 1, text
    if text[0] in "+-":
        sign, digits = (-1 if text[0] == "-" else 1), text[1:]
    if not digits:
        return None
    value = 0
    for char in digits:
        if ord(char) > 0xFFFF or unicodedata.category(char) != "Nd":
            return None
        value = value * 10 + unicodedata.decimal(char)
    value *= sign
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def _java_lines(data: bytes) -> list[tuple[int, int, int]]:
    """(start, content end, next line start) of every line ``BufferedReader.readLine``
    returns; a last line without terminator counts, an empty tail does not."""
    lines = []
    start = 0
    for match in _LINE_END.finditer(data):
        lines.append((start, match.start(), match.end()))
        start = match.end()
    if start < len(data):
        lines.append((start, len(data), len(data)))
    return lines


def epoch_crc(lines: Sequence[bytes]) -> int:
    """``UtilAll.crc32`` over the entry lines, each followed by the line separator."""
    return zlib.crc32(b"".join(line + LINE_SEPARATOR for line in lines)) & CRC_MASK


def encode_epoch_file(entries: Sequence[tuple[int, int]]) -> bytes:
    """The bytes ``CheckpointFile.write`` produces for (epoch, startOffset) pairs on Linux
    (the broker never writes an empty list: it returns early)."""
    lines = [f"{epoch}{ENTRY_SEPARATOR}{start}".encode() for epoch, start in entries]
    head = f"{len(lines)}\n{epoch_crc(lines)}\n".encode()
    return head + b"".join(line + LINE_SEPARATOR for line in lines)


# --------------------------------------------------------------------------- one file


def _fatal(copy: EpochFileCopy, what: str, position: int, length: int) -> EpochFileCopy:
    copy.fatal = CorruptDataError(
        f"{what}: Java's parseInt/parseLong throws NumberFormatException, which "
        "CheckpointFile.read does not catch (no .bak fallback): the broker fails to start",
        path=copy.path, offset=position, length=length,
    )
    copy.account.add_unreadable(0, copy.size, f"not loadable: {what}")
    return copy


def _reject(copy: EpochFileCopy, reason: str) -> EpochFileCopy:
    copy.rejected = reason
    copy.account.add_unreadable(0, copy.size, f"rejected by CheckpointFile.read: {reason}")
    return copy


def _header(copy: EpochFileCopy, data: bytes, lines: list[tuple[int, int, int]],
            index: int, name: str) -> int | None:
    """Header line ``index`` as an int, or None after recording the fatal error."""
    if index >= len(lines):
        _fatal(copy, f"no {name} line (the file ends at byte {len(data)})", len(data), 0)
        return None
    start, end, _ = lines[index]
    value = parse_java_int(data[start:end].decode("utf-8"), INT_BITS)
    if value is None:
        _fatal(copy, f"{name} {data[start:end]!r} is not a Java int", start, end - start)
    return value


def _entry_lines(copy: EpochFileCopy, data: bytes,
                 lines: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]] | None:
    """(epoch, start offset, line number, position) of each parsed line; skipped lines are
    recorded; None after a fatal (non-integer) field."""
    parsed = []
    for number, (start, end, after) in enumerate(lines[HEADER_LINES:], HEADER_LINES + 1):
        text = data[start:end].decode("utf-8")
        parts = split_java(text, ENTRY_SEPARATOR)
        if len(parts) != 2:
            copy.skipped.append(SkippedLine(number, start, after - start, text))
            continue
        epoch = parse_java_int(parts[0], INT_BITS)
        offset = parse_java_int(parts[1], LONG_BITS)
        if epoch is None or offset is None:
            _fatal(copy, f"line {number} {text!r}: not <int epoch>-<long offset>",
                   start, end - start)
            return None
        parsed.append((epoch, offset, number, start))
    return parsed


def _with_ends(parsed: list[tuple[int, int, int, int]]) -> list[EpochEntry]:
    """Entries in file order, each ending where the next parsed line starts."""
    return [EpochEntry(epoch, start, parsed[i + 1][1] if i + 1 < len(parsed) else None,
                       number, position)
            for i, (epoch, start, number, position) in enumerate(parsed)]


def _account_accepted(copy: EpochFileCopy) -> None:
    copy.account.decoded = copy.size - sum(line.length for line in copy.skipped)
    for line in copy.skipped:
        copy.account.add_unreadable(line.position, line.length,
                                    "line skipped by EpochEntrySerializer.fromLine")


def _utf8_error(data: bytes) -> str | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        note = ("" if len(data) <= JAVA_READ_CHUNK else
                f"; the file is over {JAVA_READ_CHUNK} bytes, so Java meets it only when it "
                "reads that part (lines before it are parsed first)")
        return f"invalid UTF-8 at byte {exc.start} (MalformedInputException){note}"
    return None


def decode_epoch_bytes(data: bytes, path: str | Path = "<memory>") -> EpochFileCopy:
    """Decode one epoch checkpoint file the way ``CheckpointFile.read(path)`` reads it.

    Never raises: an ``IOException`` of the broker becomes ``rejected``, its uncaught
    ``NumberFormatException`` ``fatal`` (a :class:`CorruptDataError` with the position);
    both leave the whole file unreadable in the account.
    """
    copy = EpochFileCopy(str(path), len(data), FileAccount(str(path), len(data)))
    utf8 = _utf8_error(data)
    if utf8 is not None:
        return _reject(copy, utf8)
    lines = _java_lines(data)
    copy.header_count = _header(copy, data, lines, 0, "count")
    if copy.fatal is None:
        copy.header_crc = _header(copy, data, lines, 1, "CRC")
    if copy.fatal is not None:
        return copy
    parsed = _entry_lines(copy, data, lines)
    if parsed is None:
        return copy
    copy.lines = _with_ends(parsed)
    copy.computed_crc = epoch_crc([data[s:e] for s, e, _ in lines[HEADER_LINES:]])
    if len(parsed) != copy.header_count:
        return _reject(copy, f"header count {copy.header_count}, {len(parsed)} entry lines")
    if copy.crc_matched is False:
        return _reject(copy, f"header CRC {copy.header_crc}, lines' CRC {copy.computed_crc}")
    _account_accepted(copy)
    copy.account.check()
    return copy


# --------------------------------------------------------------------------- main + .bak


def _read_copy(path: Path) -> EpochFileCopy | None:
    """The decoded file, None when absent (a directory or unreadable file raises)."""
    if not path.exists():
        return None
    return decode_epoch_bytes(read_bytes(path), path)


def _copy_findings(copy: EpochFileCopy) -> list[Finding]:
    """What the used file itself says: skipped lines, an unchecked CRC, repeated epochs."""
    name = Path(copy.path).name
    found = [Finding("epoch_lines_skipped", WARNING,
                     f"{name} line {line.line} {line.text!r} is skipped by the broker "
                     "(EpochEntrySerializer.fromLine: not <epoch>-<offset>)")
             for line in copy.skipped]
    if copy.header_crc == NOT_CHECK_CRC:
        found.append(Finding("epoch_crc_unchecked", INFO,
                             f"{name} has CRC 0: the broker does not check it "
                             "(NOT_CHECK_CRC_MAGIC_CODE)"))
    seen: dict[int, int] = {}
    for entry in copy.lines:
        if entry.epoch in seen:
            found.append(Finding("epoch_duplicate", ERROR,
                                 f"{name} repeats epoch {entry.epoch} (lines {seen[entry.epoch]} "
                                 f"and {entry.line}): the broker keeps line {entry.line}",
                                 entry.epoch))
        seen[entry.epoch] = entry.line
    return found


def _is_run_of(short: list[tuple[int, int]], long: list[tuple[int, int]]) -> bool:
    """Whether ``short`` is a contiguous run of ``long``."""
    width = len(short)
    return any(long[i:i + width] == short for i in range(len(long) - width + 1))


def _bak_findings(main: EpochFileCopy, bak: EpochFileCopy | None) -> list[Finding]:
    """When the main file is used: is the .bak a usable, earlier version of it? Each write
    appends one entry or truncates a prefix or suffix, so one list is a run of the other."""
    if bak is None:
        return []
    name = Path(bak.path).name
    if not bak.accepted:
        why = bak.rejected or (bak.fatal.reason if bak.fatal else "")
        return [Finding("epoch_bak_unusable", WARNING,
                        f"{name} is not loadable ({why}): a torn rewrite of the main file "
                        "would leave no fallback")]
    pairs = [(e.epoch, e.start_offset) for e in main.entries]
    bak_pairs = [(e.epoch, e.start_offset) for e in bak.entries]
    short, long = sorted((pairs, bak_pairs), key=len)
    if _is_run_of(short, long):
        return []
    return [Finding("epoch_bak_unrelated", WARNING,
                    f"{name} {bak_pairs} is no earlier version of the main file's {pairs}")]


def _result(path: Path, source: str, used: EpochFileCopy | None, fallback: str | None,
            main: EpochFileCopy | None, bak: EpochFileCopy | None,
            findings: list[Finding]) -> EpochFile:
    return EpochFile(
        path=str(path), source=source, used_path=used.path if used else None,
        fallback=fallback, entries=used.entries if used else [],
        header_count=used.header_count if used else None,
        header_crc=used.header_crc if used else None,
        crc_matched=used.crc_matched if used else None,
        main=main, bak=bak,
        findings=findings + (_copy_findings(used) if used else []),
    )


def _from_bak(path: Path, fallback: str, main: EpochFileCopy | None,
              bak: EpochFileCopy | None) -> EpochFile:
    """The broker's second read: the .bak decides (its IOException leaves an empty cache,
    its NumberFormatException stops the broker)."""
    name = path.name
    if bak is None:
        empty = main is not None and main.accepted
        finding = Finding("epoch_file_empty" if empty else "epoch_file_unusable",
                          WARNING if empty else ERROR,
                          f"{name} {fallback} and there is no {name}{BAK_SUFFIX}: the broker "
                          "starts with no epoch entries")
        return _result(path, "none", None, fallback, main, bak, [finding])
    if bak.fatal is not None:
        raise CorruptDataError(f"{name} {fallback}; {name}{BAK_SUFFIX}: {bak.fatal.reason}",
                               path=bak.path, offset=bak.fatal.offset, length=bak.fatal.length)
    if bak.rejected is not None:
        finding = Finding("epoch_file_unusable", ERROR,
                          f"{name} {fallback} and {name}{BAK_SUFFIX} is rejected too "
                          f"({bak.rejected}): the broker starts with no epoch entries "
                          "(initCacheFromFile returns false) and loses this history")
        return _result(path, "none", None, fallback, main, bak, [finding])
    finding = Finding("epoch_file_fallback", WARNING,
                      f"{name} {fallback}: the broker loads {name}{BAK_SUFFIX}")
    return _result(path, "bak", bak, fallback, main, bak, [finding])


def read_epoch_file(path: str | Path) -> EpochFile:
    """The epoch entries a broker loads from ``path`` (``<store>/epochFileCheckpoint``) or
    ``path.bak``, with ``CheckpointFile.read``'s fallback.

    Raises NotAStoreFileError when neither file exists, CorruptDataError (with the
    position) where the broker's read throws ``NumberFormatException`` and so fails to start.
    """
    path = Path(path)
    main = _read_copy(path)
    bak = _read_copy(path.with_name(path.name + BAK_SUFFIX))
    if main is None and bak is None:
        raise NotAStoreFileError(f"neither {path.name} nor {path.name}{BAK_SUFFIX} exists",
                                 path=path)
    if main is None:
        return _from_bak(path, "is missing", main, bak)
    if main.fatal is not None:
        raise main.fatal
    if main.rejected is not None:
        return _from_bak(path, f"is rejected ({main.rejected})", main, bak)
    if not main.lines:
        return _from_bak(path, "holds no entries", main, bak)
    return _result(path, "main", main, None, main, bak, _bak_findings(main, bak))


# --------------------------------------------------------------------------- checks


def epoch_at(entries: Sequence[EpochEntry], offset: int) -> EpochEntry | None:
    """The entry whose [start, end) holds a commitlog offset (``findEpochEntryByOffset``)."""
    return next((entry for entry in entries if entry.contains(offset)), None)


def _order_findings(entries: Sequence[EpochEntry]) -> list[Finding]:
    """Epochs and start offsets strictly increasing (``appendEntry`` refuses anything
    else), file lines in epoch order, end offsets = next start (last open)."""
    found = []
    for before, entry in pairwise(entries):
        if entry.epoch <= before.epoch:
            found.append(Finding("epoch_not_increasing", ERROR,
                                 f"epoch {entry.epoch} follows epoch {before.epoch}", entry.epoch))
        if entry.start_offset <= before.start_offset:
            found.append(Finding("epoch_offset_not_increasing", ERROR,
                                 f"epoch {entry.epoch} starts at {entry.start_offset}, not "
                                 f"after epoch {before.epoch}'s start {before.start_offset}",
                                 entry.epoch))
        if before.line and entry.line and entry.line < before.line:
            found.append(Finding("epoch_line_order", ERROR,
                                 f"epoch {entry.epoch} (line {entry.line}) is written before epoch "
                                 f"{before.epoch} (line {before.line}): the broker sorts by epoch "
                                 "but takes end offsets from the file order", entry.epoch))
        if before.end_offset is not None and before.end_offset != entry.start_offset:
            found.append(Finding("epoch_end_mismatch", ERROR,
                                 f"epoch {before.epoch} ends at {before.end_offset}, the next "
                                 f"starts at {entry.start_offset}", before.epoch))
    last = entries[-1]
    if last.end_offset not in (None, LAST_EPOCH_END_OFFSET):
        found.append(Finding("epoch_end_mismatch", ERROR,
                             f"the last epoch {last.epoch} ends at {last.end_offset}: the broker "
                             "keeps it open (LAST_EPOCH_END_OFFSET)", last.epoch))
    return found


def _bounds_findings(entries: Sequence[EpochEntry], commitlog_min: int | None,
                     commitlog_max: int | None) -> list[Finding]:
    """The entries against the commitlog's [min, max): nothing past its end; before its
    start only what retention explains."""
    found = []
    first, last = entries[0], entries[-1]
    if commitlog_max is not None:
        found += [Finding("epoch_beyond_commitlog", ERROR,
                          f"epoch {entry.epoch} starts at {entry.start_offset}, beyond the "
                          f"commitlog's end {commitlog_max}: data written in it is gone",
                          entry.epoch)
                  for entry in entries if entry.start_offset > commitlog_max]
        if last.start_offset == commitlog_max:
            found.append(Finding("epoch_empty_term", INFO,
                                 f"the last term (epoch {last.epoch}) starts at the commitlog's "
                                 "end: nothing was written in it", last.epoch))
    if commitlog_min is None:
        return found
    if first.start_offset > commitlog_min:
        found.append(Finding("epoch_uncovered_prefix", WARNING,
                             f"commitlog bytes [{commitlog_min}, {first.start_offset}) belong to "
                             "no epoch: written before the broker ran in controller mode, or "
                             "the epoch history lost its first entries", first.epoch))
    elif first.start_offset < commitlog_min:
        found.append(Finding("epoch_retention_straddle", INFO,
                             f"epoch {first.epoch} starts at {first.start_offset}, below the "
                             f"commitlog's first offset {commitlog_min}: allowed after retention "
                             "(truncatePrefixByOffset keeps the entry that straddles it)",
                             first.epoch))
    found += [Finding("epoch_stale_prefix", WARNING,
                      f"epoch {entry.epoch} ends at {entry.end_offset}, below the commitlog's "
                      f"first offset {commitlog_min}: retention (truncateEpochFilePrefix) "
                      "removes such entries", entry.epoch)
              for entry in entries
              if entry.end_offset is not None and entry.end_offset < commitlog_min]
    return found


def _state_version_findings(entries: Sequence[EpochEntry],
                            state_version: int | None) -> list[Finding]:
    """``topics.json`` dataVersion.stateVersion = the epoch of the last role change
    (``ReplicasManager.changeToMaster``): at least the last epoch of the file."""
    if state_version is None or not entries:
        return []
    last = entries[-1].epoch
    if state_version < last:
        return [Finding("epoch_state_version", WARNING,
                        f"topics.json stateVersion {state_version} is below the last epoch "
                        f"{last}: the config was not persisted after that election", last)]
    if state_version > last:
        return [Finding("epoch_later_term_empty", INFO,
                        f"topics.json stateVersion {state_version} is above the last epoch "
                        f"{last}: a later term wrote nothing (appendEntry refuses an entry "
                        "whose start is not above the last one)", last)]
    return []


def check_epochs(epochs: EpochFile | Sequence[EpochEntry], commitlog_min: int | None = None,
                 commitlog_max: int | None = None, *,
                 state_version: int | None = None) -> list[Finding]:
    """Everything wrong or notable about an epoch history, without any file I/O.

    ``epochs``: an :class:`EpochFile` (its own findings, fallback and CRC included) or its
    entries. ``commitlog_min``/``commitlog_max``: the commitlog's first offset and logical
    end, None when unknown; ``state_version``: ``topics.json`` dataVersion.stateVersion.
    """
    if isinstance(epochs, EpochFile):
        found, entries = list(epochs.findings), list(epochs.entries)
    else:
        found, entries = [], list(epochs)
    if not entries:
        if commitlog_max is not None and commitlog_max > (commitlog_min or 0):
            found.append(Finding("epoch_no_entries", WARNING,
                                 f"no epoch entries for a commitlog holding "
                                 f"[{commitlog_min or 0}, {commitlog_max})"))
        return found
    found += [Finding("epoch_below_one", WARNING,
                      f"epoch {entry.epoch}: the controller's first term is 1", entry.epoch)
              for entry in entries if entry.epoch < 1]
    found += _order_findings(entries)
    found += _bounds_findings(entries, commitlog_min, commitlog_max)
    found += _state_version_findings(entries, state_version)
    return found
