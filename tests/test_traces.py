"""Trace bodies (rmqlib.traces): contexts encoded as RocketMQ's
``TraceDataEncoder.encoderFromContextBean`` writes them decode field for field, however
many a body holds; damaged bodies lose only the damaged contexts, each an unreadable
region with its reason, and every byte is accounted for (hypothesis)."""

from __future__ import annotations

from dataclasses import asdict, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.traces import (
    END_TRANSACTION,
    MESSAGE_TYPES,
    PUB,
    RECALL,
    SUB_AFTER,
    SUB_BEFORE,
    TRANSACTION_STATES,
    TraceRecord,
    decode_trace_body,
)
from rmqlib.traces_arrow import decode_trace_bodies

C, F = "\x01", "\x02"


def java(value: object) -> str:
    """What StringBuilder.append writes for a field: ``null``, ``true``/``false``, the
    number or the text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode(record: TraceRecord, cloud: bool = False) -> str:
    """One context as TraceDataEncoder.encoderFromContextBean (client 5.x, 4.9.x) writes
    it; ``cloud``: a SubAfter on the cloud access channel (no time and group)."""
    r = record
    if r.trace_type == PUB:
        fields = [PUB, r.timestamp_ms, r.region_id, r.group, r.topic, r.msg_id, r.tags,
                  r.keys, r.store_host, r.body_length, r.cost_ms,
                  MESSAGE_TYPES.index(r.msg_type), r.offset_msg_id, r.success]
    elif r.trace_type == SUB_BEFORE:
        fields = [SUB_BEFORE, r.timestamp_ms, r.region_id, r.group, r.request_id, r.msg_id,
                  r.retry_times, r.keys]
    elif r.trace_type == SUB_AFTER:
        text = C.join(java(v) for v in [SUB_AFTER, r.request_id, r.msg_id, r.cost_ms,
                                         r.success, r.keys, r.context_code]) + C
        if not cloud:
            text += java(r.timestamp_ms) + C + java(r.group)
        return text + F
    elif r.trace_type == END_TRANSACTION:
        fields = [END_TRANSACTION, r.timestamp_ms, r.region_id, r.group, r.topic, r.msg_id,
                  r.tags, r.keys, r.store_host, MESSAGE_TYPES.index(r.msg_type),
                  r.transaction_id, r.transaction_state, r.from_transaction_check]
    else:
        fields = [RECALL, r.timestamp_ms, r.region_id, r.group, r.topic, r.msg_id, r.success]
    return C.join(java(v) for v in fields) + F


# Text a client may put in a field: anything but the two separators, and not the empty
# string at a context's end (Java's split drops it) nor "null" (that is Java's null).
text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02",
                                      blacklist_categories=("Cs",)), min_size=1, max_size=12
               ).filter(lambda t: t != "null")
optional_text = st.one_of(st.none(), text)
int32 = st.integers(-2**31, 2**31 - 1)
millis = st.integers(0, 2**63 - 1)


def records() -> st.SearchStrategy[TraceRecord]:
    common = {"position": st.just(0), "length": st.just(0)}
    pub = st.builds(TraceRecord, trace_type=st.just(PUB), timestamp_ms=millis,
                    region_id=optional_text, group=optional_text, topic=optional_text,
                    msg_id=optional_text, tags=optional_text, keys=optional_text,
                    store_host=optional_text, body_length=int32, cost_ms=int32,
                    msg_type=st.sampled_from(MESSAGE_TYPES), offset_msg_id=optional_text,
                    success=st.booleans(), **common)
    before = st.builds(TraceRecord, trace_type=st.just(SUB_BEFORE), timestamp_ms=millis,
                       region_id=optional_text, group=optional_text,
                       request_id=optional_text, msg_id=optional_text, retry_times=int32,
                       keys=optional_text, **common)
    after = st.builds(TraceRecord, trace_type=st.just(SUB_AFTER), request_id=optional_text,
                      msg_id=optional_text, cost_ms=int32, success=st.booleans(),
                      keys=optional_text, context_code=int32, timestamp_ms=millis,
                      group=optional_text, **common)
    end = st.builds(TraceRecord, trace_type=st.just(END_TRANSACTION), timestamp_ms=millis,
                    region_id=optional_text, group=optional_text, topic=optional_text,
                    msg_id=optional_text, tags=optional_text, keys=optional_text,
                    store_host=optional_text, msg_type=st.sampled_from(MESSAGE_TYPES),
                    transaction_id=optional_text,
                    transaction_state=st.sampled_from(TRANSACTION_STATES),
                    from_transaction_check=st.booleans(), **common)
    recall = st.builds(TraceRecord, trace_type=st.just(RECALL), timestamp_ms=millis,
                       region_id=optional_text, group=optional_text, topic=optional_text,
                       msg_id=optional_text, success=st.booleans(), **common)
    return st.one_of(pub, before, after, end, recall)


def placed(records_: list[TraceRecord], encoded: list[bytes]) -> list[TraceRecord]:
    """The records with the positions and lengths they have in the joined body."""
    out, position = [], 0
    for record, data in zip(records_, encoded, strict=True):
        out.append(replace(record, position=position, length=len(data)))
        position += len(data)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), max_size=12))
def test_encoded_contexts_decode_field_for_field(contexts: list[TraceRecord]) -> None:
    encoded = [encode(r).encode("utf-8") for r in contexts]
    decoded = decode_trace_body(b"".join(encoded))
    assert decoded.records == placed(contexts, encoded)
    assert decoded.account.decoded == sum(map(len, encoded))
    assert decoded.account.unreadable == []


def test_the_layouts_java_reads_with_fewer_fields() -> None:
    """A Pub of 13 fields (no offsetMsgId), of 15 (a client host); a SubAfter of the cloud
    channel (no time and group) and of 6 fields (no context code)."""
    body = (f"Pub{C}1{C}r{C}g{C}t{C}id{C}tag{C}k{C}h:1{C}5{C}2{C}0{C}true{F}"
            f"Pub{C}1{C}r{C}g{C}t{C}id{C}tag{C}k{C}h:1{C}5{C}2{C}4{C}off{C}false{C}c:9{F}"
            f"SubAfter{C}req{C}id{C}3{C}true{C}k{C}0{C}{F}"
            f"SubAfter{C}req{C}id{C}3{C}TRUE{C}null{F}").encode()
    first, second, cloud, old = decode_trace_body(body).records
    assert (first.offset_msg_id, first.success, first.client_host, first.msg_type) == \
        (None, True, None, "Normal_Msg")
    assert (second.offset_msg_id, second.success, second.client_host, second.msg_type) == \
        ("off", False, "c:9", "Order_Msg")
    assert (cloud.context_code, cloud.timestamp_ms, cloud.group) == (0, None, None)
    assert (old.context_code, old.success, old.keys) == (None, True, None)


damage = st.one_of(
    st.binary(min_size=1, max_size=30),                          # bytes of anything
    st.sampled_from([b"Pub\x01notanumber\x02", b"Sub\x01x\x02", b"\xff\xfe\x02",
                     b"SubBefore\x011\x02", b"Pub\x011\x01r\x01g\x01t\x01i\x01t\x01k\x01h"
                     b"\x011\x012\x019\x01x\x01true\x02", b"EndTransaction\x011\x01r\x01g"
                     b"\x01t\x01i\x01t\x01k\x01h\x010\x01x\x01MAYBE\x01true\x02",
                     b"SubAfter\x01r\x01i\x01 3\x01true\x01k\x010\x02"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(records().map(lambda r: ("ok", r)), damage.map(lambda d: ("bad", d))),
                max_size=10),
       st.booleans())
def test_damaged_bodies_lose_only_what_is_damaged_and_account_for_every_byte(
        parts: list, cut: bool) -> None:
    """Garbage between contexts, contexts with a bad number, an unknown type or state, an
    out-of-range message type, not UTF-8, and a body cut short: each is an unreadable
    region; the contexts around them decode as if alone, and decoded + unreadable bytes
    are the body's."""
    chunks = [encode(p).encode() if kind == "ok" else p for kind, p in parts]
    body = b"".join(chunks)
    if cut and body:
        body = body[:-1]
    decoded = decode_trace_body(body, "trace body")
    account = decoded.account
    assert account.decoded + sum(r.length for r in account.unreadable) == len(body)
    assert all(r.reason.startswith("trace context: ") for r in account.unreadable)
    # Every context still whole in the body, after a separator (or at its start), decodes.
    intact = []
    position = 0
    for (kind, part), data in zip(parts, chunks, strict=True):
        whole = position + len(data) <= len(body)
        after_separator = position == 0 or body[position - 1:position] == b"\x02"
        if kind == "ok" and whole and after_separator:
            intact.append(replace(part, position=position, length=len(data)))
        position += len(data)
    found = {asdict(r)["position"]: r for r in decoded.records}
    for record in intact:
        assert found.get(record.position) == record


def reference_rows(bodies: list[bytes]) -> tuple[list[dict], list[tuple]]:
    """What decode_trace_body says of each body, as the columnar path's rows."""
    rows, bad = [], []
    for index, body in enumerate(bodies):
        decoded = decode_trace_body(body)
        rows += [{"body_index": index, **asdict(r)} for r in decoded.records]
        bad += [(index, r.offset, r.length, r.reason) for r in decoded.account.unreadable]
    return rows, bad


bodies_strategy = st.lists(
    st.lists(st.one_of(records().map(lambda r: encode(r).encode()), damage), max_size=8)
    .map(b"".join).flatmap(lambda body: st.sampled_from([body, body[:-1]]) if body
                           else st.just(body)),
    max_size=6)


@settings(max_examples=300, deadline=None)
@given(bodies_strategy)
def test_the_columnar_decoder_gives_the_references_rows_and_regions(bodies: list[bytes]) -> None:
    batch = decode_trace_bodies(bodies)
    rows, bad = reference_rows(bodies)
    got = batch.records.to_pylist()
    assert [{k: r[k] for k in rows[0]} for r in got] == rows if rows else got == []
    assert [tuple(u.values()) for u in batch.unreadable.to_pylist()] == bad
