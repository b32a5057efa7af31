"""The local S3 server honours the conditional writes the lakehouse depends on.

Delta commits on object storage are safe only if creating ``_delta_log/N.json`` fails for
every writer but one (``If-None-Match: *``), and a lease can be renewed or taken over only
by the writer that read its current version (``If-Match``). Each round races concurrent
requests for one key and requires exactly one winner; then real processes append to one
Delta table through delta-rs at once and every batch must be in the table.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import obstore
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store
from s3_server import running_s3, s3_environment

RACERS = 8
ROUNDS = 60


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with running_s3(tmp_path_factory.mktemp("s3") / "root") as server:
        server.bucket("race")
        yield server


def _store(server) -> S3Store:
    env = server.environment()
    return S3Store("race", endpoint=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"],
                   access_key_id=env["AWS_ACCESS_KEY_ID"],
                   secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                   client_options={"allow_http": True})


def _race(store: S3Store, key: str, bodies: list[bytes], mode) -> list[bool]:
    """Send a put of each body to ``key`` at once; True for each that succeeded."""
    async def puts():
        return await asyncio.gather(*(obstore.put_async(store, key, body, mode=mode)
                                      for body in bodies), return_exceptions=True)

    results = asyncio.run(puts())
    for result in results:
        if isinstance(result, BaseException) and not isinstance(
                result, AlreadyExistsError | PreconditionError):
            raise result
    return [not isinstance(r, BaseException) for r in results]


def test_if_none_match_has_one_winner_per_key(s3):
    store = _store(s3)
    for round_ in range(ROUNDS):
        key = f"create/{round_}.json"
        won = _race(store, key, [f"writer {i}".encode() for i in range(RACERS)], "create")
        assert won.count(True) == 1, f"round {round_}: {won.count(True)} writers created {key}"
        winner = won.index(True)
        assert bytes(obstore.get(store, key).bytes()) == f"writer {winner}".encode()


def test_if_match_has_one_winner_per_version(s3):
    store = _store(s3)
    first = obstore.put(store, "lease", b"0", mode="create")
    for round_ in range(ROUNDS):
        current = obstore.head(store, "lease")["e_tag"]
        won = _race(store, "lease", [f"{round_}-{i}".encode() for i in range(RACERS)],
                    {"e_tag": current})
        assert won.count(True) == 1, f"round {round_}: {won.count(True)} writers replaced it"
        assert bytes(obstore.get(store, "lease").bytes()) == f"{round_}-{won.index(True)}".encode()
    with pytest.raises(PreconditionError):
        obstore.put(store, "lease", b"stale", mode={"e_tag": first["e_tag"]})


_APPENDER = textwrap.dedent("""
    import sys, pyarrow as pa
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError
    table, writer, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for batch in range(batches):
        write_deltalake(table, pa.table({"writer": [writer], "batch": [batch]}), mode="append")
""")


def test_concurrent_delta_rs_appends_lose_nothing(s3):
    """Four processes append five one-row batches each to one table at once: all 20 rows
    are there, each once (delta-rs retries a commit whose version another writer took)."""
    table = "s3://race/delta/appends"
    with s3_environment(s3):
        write_deltalake(table, pa.table({"writer": pa.array([], pa.int64()),
                                         "batch": pa.array([], pa.int64())}))
        env = {**os.environ, **s3.environment()}
        writers = [subprocess.Popen([sys.executable, "-c", _APPENDER, table, str(w), "5"],
                                    env=env, stderr=subprocess.PIPE) for w in range(4)]
        errors = [w.communicate(timeout=120)[1].decode() for w in writers]
        assert [w.returncode for w in writers] == [0] * 4, json.dumps(errors)
        rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["batch"]) for r in rows) == \
        [(w, b) for w in range(4) for b in range(5)]
