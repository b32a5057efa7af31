"""Which queue files a path given to ``rmq dump`` means.

A user points a dump at whatever they have at hand: one unit file, a queue directory
(``consumequeue/<topic>/<queueId>``), a topic directory, the root (``consumequeue/``,
``batchconsumequeue/``, ``consumequeue_ext/``) or the store root. Every level dumps every
queue file under it, in (topic, queue id, start offset) order; what is there but is no
queue file (loose RocksDB files, odd names) is listed as a ``skipped`` region, so a dump
of a directory never passes over a file in silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.cli.dump import Region
from rmqlib.common.numbers import is_decimal
from rmqlib.queues.consumequeue import SEGMENT_NAME, walk_queue_tree

CQ_ROOT, BATCH_ROOT, EXT_ROOT = "consumequeue", "batchconsumequeue", "consumequeue_ext"
QUEUE_ROOTS = (CQ_ROOT, BATCH_ROOT, EXT_ROOT)
SKIPPED = "skipped"


@dataclass
class QueueTargets:
    """Unit files to dump, and regions for what is not one."""

    files: list[Path] = field(default_factory=list)
    skipped: list[Region] = field(default_factory=list)

    def skip(self, path: Path, reason: str) -> None:
        size = path.stat().st_size if path.is_file() else 0
        self.skipped.append(Region(str(path), 0, size, SKIPPED, reason))


def queue_root_kind(path: Path) -> str:
    """The queue root a path lies under (nearest named ancestor); a store root or an
    unnamed place counts as ``consumequeue``."""
    for part in reversed(path.resolve().parts):
        if part in QUEUE_ROOTS:
            return part
    return CQ_ROOT


def queue_files(path: Path, root_name: str | None = None) -> QueueTargets:
    """Every unit file ``path`` stands for (see the module docstring)."""
    targets = QueueTargets()
    if path.is_file():
        targets.files.append(path)
        return targets
    root_name = root_name or queue_root_kind(path)
    if (path / root_name).is_dir():  # a store root
        path = path / root_name
    if _is_queue_dir(path):
        _add_queue_dir(targets, path)
    elif _is_topic_dir(path):
        for queue in sorted((p for p in path.iterdir()), key=_queue_order):
            if queue.is_dir() and is_decimal(queue.name):
                _add_queue_dir(targets, queue)
            else:
                targets.skip(queue, "not a queue directory in a topic directory")
    else:
        tree = walk_queue_tree(path)
        for queue in tree.queues:
            targets.files.extend(segment.path for segment in queue.segments)
        for loose in tree.loose_files:
            targets.skip(loose, "a file at topic level (RocksDB consume queue or stray)")
        for entry in tree.skipped:
            targets.skip(entry.path, entry.reason)
    return targets


def _queue_order(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if is_decimal(path.name) else (1 << 62, path.name)


def _is_queue_dir(path: Path) -> bool:
    return any(SEGMENT_NAME.match(p.name) and p.is_file() for p in path.iterdir())


def _is_topic_dir(path: Path) -> bool:
    queues = [p for p in path.iterdir() if p.is_dir() and is_decimal(p.name)]
    return bool(queues) and any(_is_queue_dir(q) for q in queues)


def _add_queue_dir(targets: QueueTargets, path: Path) -> None:
    for item in sorted(path.iterdir(), key=lambda p: p.name):
        if item.is_file() and SEGMENT_NAME.match(item.name):
            targets.files.append(item)
        else:
            targets.skip(item, "not a unit file (20-digit start offset)")
