"""Where a 5.x broker keeps its compacted topics, and the layout of their queue units.

Every fact is RocketMQ 5.5.0's (``store/.../kv/CompactionStore``, ``CompactionLog``,
``CompactionPositionMgr``, ``queue/SparseConsumeQueue``, ``queue/BatchConsumeQueue``);
docs/compaction.md names the method behind each.

A compacted topic is stored twice: as every topic, in ``commitlog/`` and
``consumequeue/<topic>/<queue>/`` (everything ever sent, subject to retention), and once more
per queue under ``compaction/``: a *compaction log* of commitlog-format records (copied byte
for byte, PHYSICALOFFSET rewritten to the record's own position in that queue's log) and a
*sparse queue* of 46-byte BatchConsumeQueue units pointing into it. Consumers of the topic
are served from ``compaction/`` only.
"""

from __future__ import annotations

import re

from rmqlib.queues.batchconsumequeue import BCQ_UNIT_DTYPE, BCQ_UNIT_SIZE

COMPACTION_DIR = "compaction"            # CompactionStore.COMPACTION_DIR
LOG_DIR = "compactionLog"                # CompactionStore.COMPACTION_LOG_DIR
CQ_DIR = "compactionCq"                  # CompactionStore.COMPACTION_CQ_DIR
CHECKPOINT_FILE = "position-checkpoint"  # CompactionPositionMgr: {"queueOffsetMap": ...}
# A run's output (compacting/) and a slave's first copy (replicating/): transient, read by
# nobody until the broker moves them into place.
TRANSIENT_DIRS = frozenset(("compacting", "replicating"))
# An old segment a run renamed before deleting it (CompactionLog.replaceFiles).
REPLACED_SUFFIX = ".delete"
# Both files of a segment are named by the segment's start position in that queue's log
# (20 digits, UtilAll.offset2FileName); the queue file carries its log segment's name.
SEGMENT_NAME = re.compile(r"^\d{20}$")

UNIT_SIZE = BCQ_UNIT_SIZE                # BatchConsumeQueue.CQ_STORE_UNIT_SIZE
UNIT_DTYPE = BCQ_UNIT_DTYPE              # position, size, tags code, store time, queue offset,
#                                          batch (1), compacted offset (-1), reserved (0)
# SparseConsumeQueue.putEndPositionInfo: the unit written when the log segment rolls.
END_POSITION = -1


def checkpoint_key(topic: str, queue_id: int) -> str:
    """The queue's key in position-checkpoint's ``queueOffsetMap`` (CompactionPositionMgr)."""
    return f"{topic}_{queue_id}"
