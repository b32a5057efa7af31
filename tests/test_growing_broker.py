"""The years bench's store (bench/growing_broker.py) against rmqlib and the broker's rules.

bench/years.py measures what history costs on stores this generator writes, so they must
be what a broker keeps: a store that verifies clean, whose index finds every record it
still holds by each of its keys, and whose retention deletes the commitlog, consume-queue
and index files of old nights together (so it stays the size of three nights however
many were written).
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench")]

from growing_broker import GrowingBroker  # noqa: E402

from rmqlib.commitlog.records import scan_store  # noqa: E402
from rmqlib.indexfile import IndexFile  # noqa: E402
from rmqlib.store.verify import verify_store  # noqa: E402

NIGHTS, PER_NIGHT = 6, 3000


def test_a_grown_store_is_clean_indexed_and_three_nights_big(tmp_path: Path) -> None:
    broker = GrowingBroker(tmp_path, PER_NIGHT)
    sizes = []
    for _ in range(NIGHTS):
        broker.grow()
        sizes.append(broker.disk_bytes())
    store = broker.store

    report = verify_store(store)
    assert [f.as_dict() for f in report.findings] == []

    first_segment = min(int(p.name) for p in (store / "commitlog").iterdir())
    assert first_segment > 0  # retention did delete segments
    index_files = sorted((store / "index").iterdir())
    for old in index_files[:-1]:  # IndexService.deleteExpiredFile keeps the last file
        end_phy_offset = struct.unpack(">q", old.read_bytes()[24:32])[0]
        assert end_phy_offset >= first_segment, old.name
    for queue in (store / "consumequeue").glob("*/*"):
        files = sorted(queue.iterdir())  # ConsumeQueue.deleteExpiredFile keeps the last
        assert files
        for old in files[:-1]:
            assert struct.unpack(">q", old.read_bytes()[-20:-12])[0] >= first_segment

    # bounded: once retention runs (night 4 on), the store stops growing (a store that
    # kept every night would add a fifth of its size each night here)
    assert max(sizes[3:]) <= 1.15 * min(sizes[3:]), sizes

    records = [r for r in scan_store(store / "commitlog") if r.physical_offset >= first_segment]
    assert len(records) >= 2 * PER_NIGHT
    indexes = [IndexFile.open(path) for path in index_files]
    try:
        for record in random.Random(7).sample(records, 200):
            for key in (record.uniq_key, *record.keys):
                found = {offset for index in indexes
                         for offset in index.lookup_key(record.topic, key).offsets}
                assert record.physical_offset in found, (record.physical_offset, key)
    finally:
        for index in indexes:
            index.close()
