"""The messages inside a 5.x inner-batch record (spec §2.6).

A batch sent to a ``queue.type=BatchCQ`` topic is stored as ONE commitlog record (sysflag
``NEED_UNWRAP | INNER_BATCH``, properties ``INNER_NUM`` and ``INNER_BASE``) whose body is
the client's batch encoding, one member after another::

    i32 size | i32 magic (0) | i32 body CRC (0) | i32 flag | i32 body length | body
    | i16 properties length | properties

``size`` is the member's whole length (20 + body + 2 + properties). Consumers never see
the outer record: the client unwraps it (``MessageDecoder.decodeMessage(MessageExt,
List)``) and hands out each member with its own flag, properties (keys, tags, UNIQ_KEY)
and body, and everything else -- topic, queue, hosts, times, sysflag, commitlog offset --
from the outer record; member ``i`` gets queue offset ``QUEUEOFFSET + i`` (QUEUEOFFSET is
the batch's base, which the broker also writes as ``INNER_BASE``).

A body that does not split exactly into members raises :class:`CorruptDataError` naming
the member and the byte position in the body: no member is guessed.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from rmqlib.commitlog import properties as props
from rmqlib.common.numbers import decimal_or_none
from rmqlib.errors import CorruptDataError, TruncatedDataError

MEMBER_HEADER = struct.Struct(">iiiii")  # size, magic, body CRC, flag, body length
PROPERTIES_LENGTH = struct.Struct(">h")
#: Fixed bytes of a member: the header plus the properties length.
MEMBER_OVERHEAD = MEMBER_HEADER.size + PROPERTIES_LENGTH.size


@dataclass(frozen=True, slots=True)
class InnerMessage(props.PropertyAccess):
    """One member of an inner batch: what a consumer receives, minus the outer fields."""

    index: int              # position in the batch, 0-based
    body_position: int      # where the member starts inside the outer record's body
    size: int               # the member's size field (= its length in the body)
    flag: int
    body: bytes
    raw_properties: bytes
    properties: Mapping[str, str]
    queue_offset: int       # base queue offset + index


def split_inner_batch(body: bytes, base_offset: int, *, expected: int | None = None,
                      path: str | None = None, offset: int | None = None
                      ) -> list[InnerMessage]:
    """The members of an inner-batch body, in order.

    ``expected`` is the record's ``INNER_NUM``: a body cut at a member boundary still
    splits cleanly, only the count gives it away. ``path``/``offset`` name the outer
    record for errors; the error's ``length`` is the part of the body from the bad
    member on.
    """
    members: list[InnerMessage] = []
    position = 0
    while position < len(body):
        member = _member(body, position, len(members), base_offset, path, offset)
        members.append(member)
        position += member.size
    if not members:
        raise CorruptDataError("inner batch with an empty body", path=path, offset=offset,
                               length=0)
    if expected is not None and expected != len(members):
        raise CorruptDataError(f"INNER_NUM is {expected} but the body holds {len(members)} "
                               "members", path=path, offset=offset, length=len(body))
    return members


def inner_num(properties: Mapping[str, str]) -> int | None:
    """``INNER_NUM`` as a number; None when absent or not a number."""
    return decimal_or_none(properties.get(props.INNER_NUM))


def _member(body: bytes, position: int, index: int, base_offset: int, path: str | None,
            offset: int | None) -> InnerMessage:
    def fail(problem: str, error: type[CorruptDataError] = CorruptDataError) -> CorruptDataError:
        return error(f"inner batch member {index} at body byte {position}: {problem}",
                     path=path, offset=offset, length=len(body) - position)

    if len(body) - position < MEMBER_OVERHEAD:
        raise fail(f"{len(body) - position} bytes left, a member needs at least "
                   f"{MEMBER_OVERHEAD}", TruncatedDataError)
    size, _magic, _crc, flag, body_length = MEMBER_HEADER.unpack_from(body, position)
    if body_length < 0:
        raise fail(f"negative body length {body_length}")
    properties_at = position + MEMBER_HEADER.size + body_length
    if properties_at + PROPERTIES_LENGTH.size > len(body):
        raise fail(f"body of {body_length} bytes runs past the batch", TruncatedDataError)
    (properties_length,) = PROPERTIES_LENGTH.unpack_from(body, properties_at)
    if properties_length < 0:
        raise fail(f"negative properties length {properties_length}")
    end = properties_at + PROPERTIES_LENGTH.size + properties_length
    if end > len(body):
        raise fail(f"properties of {properties_length} bytes run past the batch",
                   TruncatedDataError)
    if size != end - position:
        raise fail(f"size field {size} but the member's fields take {end - position} bytes")
    raw = body[properties_at + PROPERTIES_LENGTH.size:end]
    return InnerMessage(index=index, body_position=position, size=size, flag=flag,
                        body=body[position + MEMBER_HEADER.size:properties_at],
                        raw_properties=raw, properties=props.parse_properties(raw),
                        queue_offset=base_offset + index)


def encode_inner_batch(members: list[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """The client's batch encoding of (flag, body, properties) members (tests, fuzz seeds)."""
    out = bytearray()
    for flag, body, properties in members:
        raw = props.encode_properties(dict(properties))
        size = MEMBER_OVERHEAD + len(body) + len(raw)
        out += MEMBER_HEADER.pack(size, 0, 0, flag, len(body)) + body
        out += PROPERTIES_LENGTH.pack(len(raw)) + raw
    return bytes(out)
