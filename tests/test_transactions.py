"""Op message bodies (rmqlib.transactions): the half queue offsets the broker wrote, in
5.x's batched form (``"<offset>,"`` repeated) and 4.9.x's single one (``"<offset>"``),
decode exactly; damaged tokens are unreadable regions with their reason, the offsets
around them still found, and every byte is accounted for (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.transactions import decode_op_body

offsets = st.integers(0, 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(offsets, max_size=40))
def test_a_batched_op_body_gives_its_offsets(values: list[int]) -> None:
    body = "".join(f"{v}," for v in values).encode()  # deletePrepareMessage's batches
    decoded = decode_op_body(body)
    assert decoded.offsets == values
    assert decoded.account.decoded == len(body) and decoded.account.unreadable == []


@given(offsets)
def test_a_single_op_body_of_4_9_gives_its_offset(value: int) -> None:
    decoded = decode_op_body(str(value).encode())  # addRemoveTagInTransactionOp
    assert decoded.offsets == [value] and decoded.account.decoded == len(str(value))


tokens = st.one_of(
    offsets.map(lambda v: ("ok", f"{v},".encode())),
    st.sampled_from([b",", b"x,", b"-3,", b" 4,", b"1_000,", b"99999999999999999999,",
                     b"\xff\xfe,"]).map(lambda t: ("bad", t)),
    st.binary(max_size=8).filter(lambda b: b"," not in b and not b.isdigit()).map(
        lambda b: ("bad", b + b",")))


@settings(max_examples=300, deadline=None)
@given(st.lists(tokens, max_size=30), st.booleans())
def test_damaged_op_bodies_account_for_every_byte(parts: list, cut: bool) -> None:
    body = b"".join(token for _, token in parts)
    if cut and body:
        body = body[:-1]
    decoded = decode_op_body(body, "op message")
    account = decoded.account
    assert account.decoded + sum(r.length for r in account.unreadable) == len(body)
    assert all(r.reason.startswith("op body: ") for r in account.unreadable)
    # Cut short, the last offset lost only its separator: still an offset (4.9.x's form).
    assert decoded.offsets == [int(token[:-1]) for kind, token in parts if kind == "ok"]
