"""The fuzz targets (tests/fuzz/targets.py) in the test suite: every input the fuzzer
ever found a problem with is replayed (tests/fuzz/regressions/, committed), and each
target gets a short coverage-guided atheris run seeded from the real-broker stores.
`make fuzz` runs the same targets for longer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent / "fuzz"
sys.path.insert(0, str(FUZZ))

import targets  # noqa: E402
from targets import TARGETS, commitlog_ranges, forged_frame_inside, run_one  # noqa: E402

REGRESSIONS = sorted(p for p in (FUZZ / "regressions").glob("*/*") if p.is_file())
BOUNDED_SECONDS = 20  # all targets together in `make test`; `make fuzz` runs minutes


@pytest.mark.parametrize("case", REGRESSIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_saved_fuzz_input_now_decodes_within_the_contract(case: Path) -> None:
    run_one(case.parent.name, case.read_bytes())


def test_every_target_holds_on_the_real_broker_seeds(broker_stores) -> None:  # type: ignore[no-untyped-def]
    """The seeds themselves (real files) pass every property, not only the mutations."""
    from run import _seeds

    for target in TARGETS:
        seeds = _seeds(target)
        assert seeds, f"no seeds for {target}"
        for _name, data in seeds:
            run_one(target, data)


@pytest.mark.broker
def test_a_bounded_fuzz_run_finds_nothing(broker_stores) -> None:  # type: ignore[no-untyped-def]
    """Coverage-guided fuzzing of every target in one process (a selector byte routes each
    input: one instrumented start instead of one per target); whatever it finds is kept
    in tests/fuzz/regressions/combined/ (and fails this test)."""
    run = subprocess.run([sys.executable, str(FUZZ / "run.py"), "combined",
                          "--seconds", str(BOUNDED_SECONDS)], capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "fuzz combined: exit 0" in run.stdout


def test_the_ranges_target_excuses_only_a_forged_frame_inside_a_body(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body holding a valid record image at its own offset fools a range that starts
    inside it (the documented limit of splitting): the commitlog_ranges target passes over
    exactly that case, and still fails on ranges that lose or invent records."""
    import rmq_encoder as E

    from rmqlib.commitlog.records import scan_segment

    placeholder = b"\xab" * 200
    outer = E.encode(E.Message(body=placeholder), 0)
    body_at = outer.index(placeholder)
    forged = E.encode(E.Message(topic="T", body=b"", properties=b""), body_at)
    body = forged + bytes(len(placeholder) - len(forged))
    data = E.encode(E.Message(body=body), 0) + bytes(64)  # small: ranges of ~10 bytes
    path = tmp_path / "00000000000000000000"
    path.write_bytes(data)
    whole = [(r.position, r.total_size) for r in scan_segment(path)]
    inside = [(r.position, r.total_size) for r in scan_segment(path, body_at, len(data))]
    assert inside == [(body_at, len(forged))]  # the range resynced onto the image
    assert forged_frame_inside(path, whole)
    commitlog_ranges(data)  # excused
    monkeypatch.setattr(targets, "forged_frame_inside", lambda *_: False)
    with pytest.raises(targets.PropertyViolation, match="records, whole file"):
        commitlog_ranges(data)  # what the target said before it knew the limit

    clean = E.encode(E.Message(body=placeholder), 0) + bytes(4096)
    clean_path = tmp_path / "clean" / "00000000000000000000"
    clean_path.parent.mkdir()
    clean_path.write_bytes(clean)
    assert not forged_frame_inside(clean_path, [(r.position, r.total_size)
                                                for r in scan_segment(clean_path)])
