"""Op message bodies (rmqlib.transactions): the half queue offsets the broker wrote, in
5.x's batched form (``"<offset>,"`` repeated) and 4.9.x's single one (``"<offset>"``),
decode exactly; damaged tokens are unreadable regions with their reason, the offsets
around them still found, and every byte is accounted for (hypothesis). And the fold of
transaction records into states: night by night as the load does it, or all at once, the
same states, each the one its transaction's plan reached (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.transactions import (
    COMMIT_COPY,
    COMMITTED,
    DISCARD,
    DISCARDED,
    HALF,
    HALF_TOPIC,
    OP,
    OP_HALF_TOPIC,
    PENDING,
    ROLLED_BACK,
    Transaction,
    TransactionRecord,
    decode_op_body,
    fold_transactions,
)

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


# --------------------------------------------------------------------------- the fold

OUTCOMES = ("commit", "rollback", "discard", "open")
EXPECTED_STATE = {"commit": COMMITTED, "rollback": ROLLED_BACK, "discard": DISCARDED,
                  "open": PENDING}


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[TransactionRecord], dict[str, tuple[str, int]]]:
    """A broker's transaction records in log order, as the broker writes them: per
    transaction its half message, each check's re-put (TRANSACTION_CHECK_TIMES counting),
    then its outcome: the committed copy and an op naming one of its copies (commit), an
    op alone (rollback), the discarded copy (discard), or nothing yet (open); the
    transactions' records interleaved in any order that keeps each one's own. Returns the
    records and each msgId's (outcome, checks)."""
    plans = draw(st.lists(st.tuples(st.sampled_from(OUTCOMES), st.integers(0, 3)),
                          min_size=1, max_size=12))
    steps: list[list[tuple[str, int]]] = []
    for number, (outcome, checks) in enumerate(plans):
        own = [("half", 0), *(("half", check) for check in range(1, checks + 1))]
        own += {"commit": [("commit", 0), ("op", 0)], "rollback": [("op", 0)],
                "discard": [("discard", 0)], "open": []}[outcome]
        steps.append([(kind, number, value) for kind, value in own])  # type: ignore[misc]
    records: list[TransactionRecord] = []
    copies: dict[int, list[int]] = {n: [] for n in range(len(plans))}
    half_offset = 0
    while any(steps):
        number = draw(st.sampled_from([n for n, s in enumerate(steps) if s]))
        kind, _, check = steps[number].pop(0)
        at = 1000 + 100 * len(records)
        msg_id = f"M{number:03d}"
        if kind == "half":
            props = {"PGROUP": "PG", "REAL_TOPIC": "T", "REAL_QID": "1"}
            if check:
                props["TRANSACTION_CHECK_TIMES"] = str(check)
            records.append(TransactionRecord(HALF, at, at, msg_id, 0, half_offset, HALF_TOPIC,
                                             at - 5, props))
            copies[number].append(half_offset)
            half_offset += 1
        elif kind == "op":
            named = draw(st.sampled_from(copies[number]))
            records.append(TransactionRecord(OP, at, at, None, 0, 0, OP_HALF_TOPIC,
                                             op_offsets=(named,)))
        else:
            records.append(TransactionRecord(COMMIT_COPY if kind == "commit" else DISCARD, at,
                                             at, msg_id, 1, len(records), "T"))
    return records, {f"M{n:03d}": plan for n, plan in enumerate(plans)}


@settings(max_examples=300, deadline=None)
@given(histories(), st.lists(st.integers(0, 60), max_size=5))
def test_folding_night_by_night_gives_the_states_of_the_whole_history(
        history: tuple[list[TransactionRecord], dict[str, tuple[str, int]]],
        cuts: list[int]) -> None:
    """Snapshots cut the log anywhere: folding each night's records onto the previous
    night's pending transactions ends where the whole log folded at once does, and each
    transaction's latest row is what its plan did; a night's rows are exactly the
    transactions its records touched and those still pending."""
    records, plans = history
    bounds = sorted({min(c, len(records)) for c in cuts} | {len(records)})
    latest: dict[str, Transaction] = {}
    carried: list[Transaction] = []
    start = 0
    for end in bounds:
        night = records[start:end]
        pending_before = {t.msg_id for t in carried}
        rows = fold_transactions(carried, night, continued=start > 0)  # as the load does
        touched = {r.msg_id for r in night if r.msg_id} | {
            t.msg_id for t in rows if t.changed}
        assert {t.msg_id for t in rows} == pending_before | (touched & set(plans))
        latest.update({t.msg_id: t for t in rows})
        carried = [t for t in rows if t.state == PENDING]
        start = end
    whole = {t.msg_id: t for t in fold_transactions([], records)}
    assert set(latest) == set(whole) == set(plans)
    for msg_id, (outcome, checks) in plans.items():
        t = latest[msg_id]
        assert (t.state, t.checks) == (EXPECTED_STATE[outcome], checks)
        assert (t.state, t.checks, t.decided_ms, t.committed_offset, t.half_queue_offsets) == (
            whole[msg_id].state, whole[msg_id].checks, whole[msg_id].decided_ms,
            whole[msg_id].committed_offset, whole[msg_id].half_queue_offsets)
        assert (t.decided_ms is None) == (t.state == PENDING)


def test_a_check_that_raced_a_decision_of_an_earlier_night_changes_nothing() -> None:
    """A check run that read the op queue before the commit's op was stored re-puts the half
    message and asks again; the producer answers COMMIT again and the broker commits a second
    copy (real 5.5.0 brokers under load do). Loaded on a night after the one that held the
    decision, that re-put is no transaction of its own, and the decided one does not change."""
    props = {"PGROUP": "PG", "REAL_TOPIC": "T", "REAL_QID": "1"}
    night1 = [TransactionRecord(HALF, 100, 1000, "M", 0, 0, HALF_TOPIC, 995, props),
              TransactionRecord(COMMIT_COPY, 200, 1100, "M", 1, 0, "T"),
              TransactionRecord(OP, 300, 1110, None, 0, 0, OP_HALF_TOPIC, op_offsets=(0,))]
    [decided] = fold_transactions([], night1)
    assert (decided.state, decided.checks, decided.committed_offset) == (COMMITTED, 0, 200)
    recheck = {**props, "TRANSACTION_CHECK_TIMES": "1"}
    night2 = [TransactionRecord(HALF, 400, 2000, "M", 0, 1, HALF_TOPIC, 995, recheck),
              TransactionRecord(COMMIT_COPY, 500, 2100, "M", 1, 1, "T", 995, recheck),
              TransactionRecord(OP, 600, 2110, None, 0, 0, OP_HALF_TOPIC, op_offsets=(1,))]
    assert fold_transactions([], night2, continued=True) == []
    # a store's first night (no earlier snapshot): a re-put whose half is gone is all there is
    [opened] = fold_transactions([], night2)
    assert (opened.half_offset, opened.checks, opened.state) == (400, 1, COMMITTED)
    # a brand-new half (no TRANSACTION_CHECK_TIMES) on a later night is a transaction
    [new] = fold_transactions([], [TransactionRecord(HALF, 700, 3000, "N", 0, 2, HALF_TOPIC,
                                                     2995, props)], continued=True)
    assert (new.msg_id, new.state) == ("N", PENDING)
