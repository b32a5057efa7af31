"""``brokerIdentity`` (+ ``brokerIdentity-temp``): a controller-mode broker's replica id (5.x).

On its first registration with the controller a broker asks for the next free replica id
of its broker set (the first broker gets ``MixAll.FIRST_BROKER_CONTROLLER_ID`` = 1, later
ones 2, 3, ...), writes it with a register check code to ``brokerIdentity-temp``, applies
it at the controller, then writes ``brokerIdentity`` and deletes the temp file
(``ReplicasManager.register``). Later starts read ``brokerIdentity`` and reuse the id: the
file binds the store to one (cluster, broker name, replica id). The id is not the broker.conf
``brokerId``: a master reports brokerId 0 to the name server (``changeToMaster``).

Text, no trailing newline, no ``.bak`` (``MetadataFile.writeToFile`` deletes the file first,
so ``MixAll.string2File`` has no previous content to keep)::

    brokerIdentity       <clusterName>#<brokerName>#<brokerId>
    brokerIdentity-temp  <clusterName>#<brokerName>#<brokerId>#<brokerAddr>;<currentTimeMillis>

A temp file that survives means the broker stopped between getNextBrokerId and
applyBrokerId; its next start applies that id with that check code.

How the broker reads it (mirrored by :func:`decode_identity_bytes`): ``MixAll.file2String``
(UTF-8, malformed bytes become U+FFFD), ``split("#")`` (trailing empty parts dropped, extra
parts ignored), ``Long.valueOf`` for the id. Any exception is logged and the file counts
as absent, as does an empty cluster or broker name (``isLoaded``): the broker then
registers anew and gets a new id. :class:`CorruptDataError` says which of these happened.
Even a trailing newline makes ``Long.valueOf`` fail.

Sources (apache/rocketmq 5.5.0): ``store/.../ha/autoswitch/BrokerMetadata.java``,
``TempBrokerMetadata.java``, ``MetadataFile.java``; ``broker/.../controller/ReplicasManager.java``
(paths, ``createTempMetadataFile``, ``confirmNowRegisteringState``, ``checkMetadataValid``);
``store/.../config/MessageStoreConfig.java`` (``getStorePathBrokerIdentity``);
``common/.../MixAll.java`` (``FIRST_BROKER_CONTROLLER_ID``, ``file2String``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import read_bytes
from rmqlib.controller.epochs import ERROR, LONG_BITS, WARNING, Finding, parse_java_int
from rmqlib.errors import CorruptDataError

IDENTITY_FILE = "brokerIdentity"        # MessageStoreConfig.getStorePathBrokerIdentity (store root)
TEMP_SUFFIX = "-temp"                   # ReplicasManager: getStorePathBrokerIdentity() + "-temp"
TEMP_IDENTITY_FILE = IDENTITY_FILE + TEMP_SUFFIX
FIELD_SEPARATOR = "#"                   # BrokerMetadata.encodeToStr / decodeFromStr
CHECK_CODE_SEPARATOR = ";"              # ReplicasManager.createTempMetadataFile: addr;millis
FIRST_BROKER_CONTROLLER_ID = 1          # MixAll.FIRST_BROKER_CONTROLLER_ID
FIELDS, TEMP_FIELDS = 3, 4              # decodeFromStr reads dataArr[0..2] / [0..3]


@dataclass
class BrokerIdentity:
    """A decoded ``brokerIdentity`` (``temp`` False) or ``brokerIdentity-temp`` (True)."""

    path: str
    temp: bool
    cluster: str
    broker_name: str
    broker_id: int
    register_check_code: str | None
    account: FileAccount
    issues: list[str] = field(default_factory=list)

    @property
    def register_address(self) -> str | None:
        """The broker address of the check code (``ip:port``), None without one."""
        if not self.register_check_code or CHECK_CODE_SEPARATOR not in self.register_check_code:
            return None
        return self.register_check_code.rsplit(CHECK_CODE_SEPARATOR, 1)[0]

    @property
    def register_time_ms(self) -> int | None:
        """When the temp file was written (the check code's millis), None if unreadable."""
        if not self.register_check_code or CHECK_CODE_SEPARATOR not in self.register_check_code:
            return None
        return parse_java_int(self.register_check_code.rsplit(CHECK_CODE_SEPARATOR, 1)[1],
                              LONG_BITS)


def _fields(data: bytes) -> list[tuple[str, int, int]]:
    """``new String(bytes, UTF-8).split("#")`` as (text, byte position, byte length). The
    separator is ASCII, so splitting the bytes first decodes each part as Java would."""
    raw = data.split(FIELD_SEPARATOR.encode())
    parts, position = [], 0
    for chunk in raw:
        parts.append((chunk.decode("utf-8", errors="replace"), position, len(chunk)))
        position += len(chunk) + 1
    if len(raw) > 1:
        while parts and parts[-1][0] == "":
            parts.pop()
    return parts


def _ignored(path: str, reason: str, offset: int, length: int) -> CorruptDataError:
    return CorruptDataError(
        f"{reason}: the broker ignores this file (readFromFile fails or isLoaded is false) "
        "and registers anew, under a new replica id",
        path=path, offset=offset, length=length,
    )


def _issues(data: bytes, parts: list[tuple[str, int, int]], wanted: int) -> list[str]:
    issues = []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        issues.append(f"invalid UTF-8 at byte {exc.start}: the broker reads U+FFFD, and "
                      "checkMetadataValid then refuses a name that differs from broker.conf")
    if len(parts) > wanted:
        issues.append(f"{len(parts) - wanted} extra '#' field(s) after field {wanted}: "
                      "ignored by the broker")
    return issues


def decode_identity_bytes(data: bytes, path: str | Path = "<memory>", *,
                          temp: bool = False) -> BrokerIdentity:
    """Decode ``brokerIdentity`` (or, with ``temp``, ``brokerIdentity-temp``) bytes.

    Raises CorruptDataError (with the field's position) wherever the broker would not load
    the file: too few fields, an id that is not a Java long, an empty cluster, broker name
    or check code.
    """
    path = str(path)
    parts = _fields(data)
    wanted = TEMP_FIELDS if temp else FIELDS
    if len(parts) < wanted:
        raise _ignored(path, f"{len(parts)} '#'-separated field(s), needs {wanted}", 0, len(data))
    (cluster, _, _), (name, name_at, _), (id_text, id_at, id_len) = parts[:FIELDS]
    broker_id = parse_java_int(id_text, LONG_BITS)
    if broker_id is None:
        raise _ignored(path, f"broker id {id_text!r} is not a Java long", id_at, id_len)
    if not cluster or not name:
        which = "cluster" if not cluster else "broker"
        raise _ignored(path, f"empty {which} name", 0 if not cluster else name_at, 0)
    code = parts[FIELDS][0] if temp else None
    if temp and not code:
        raise _ignored(path, "empty register check code", parts[FIELDS][1], 0)
    account = FileAccount(path, len(data), decoded=len(data)).check()
    return BrokerIdentity(path, temp, cluster, name, broker_id, code, account,
                          _issues(data, parts, wanted))


def read_broker_identity(path: str | Path, *, temp: bool | None = None) -> BrokerIdentity:
    """Decode ``<store>/brokerIdentity`` or ``<store>/brokerIdentity-temp`` (``temp`` None:
    told by the ``-temp`` suffix of the name). Missing file: NotAStoreFileError."""
    path = Path(path)
    if temp is None:
        temp = path.name.endswith(TEMP_SUFFIX)
    return decode_identity_bytes(read_bytes(path), path, temp=temp)


def check_identity(identity: BrokerIdentity, *, cluster: str | None = None,
                   broker_name: str | None = None) -> list[Finding]:
    """The identity against the broker's configured names (``checkMetadataValid``: a
    mismatch stops registration, so the broker never becomes master or slave)."""
    found = [Finding("identity_issue", WARNING, issue) for issue in identity.issues]
    if identity.temp:
        found.append(Finding("identity_registration_pending", WARNING,
                             f"{TEMP_IDENTITY_FILE} holds replica id {identity.broker_id}: the "
                             "broker stopped before applyBrokerId; its next start applies it"))
    if identity.broker_id < FIRST_BROKER_CONTROLLER_ID:
        found.append(Finding("identity_id_below_one", WARNING,
                             f"replica id {identity.broker_id}: the controller assigns ids from "
                             f"{FIRST_BROKER_CONTROLLER_ID}"))
    for what, have, want in (("cluster", identity.cluster, cluster),
                             ("broker name", identity.broker_name, broker_name)):
        if want is not None and have != want:
            found.append(Finding("identity_mismatch", ERROR,
                                 f"{Path(identity.path).name} {what} {have!r} differs from "
                                 f"{want!r}: checkMetadataValid refuses to register"))
    return found
