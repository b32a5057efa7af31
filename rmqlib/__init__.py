"""rmqlib: read every file of an Apache RocketMQ broker store, offline, in pure Python.

The public API is this module's ``__all__``: import it from here, not from the
submodules, which are free to move (``from rmqlib import scan_store, verify_store``).
Names resolve on first use (PEP 562), so ``import rmqlib`` stays cheap and the ``rmq``
command starts without pyarrow or numpy.

The folders follow the store's file families, lower ones never importing higher ones
(``tests/test_layering.py`` holds the rule): ``errors`` <- ``common/`` (byte accounting,
mapped-file queues, fixed-unit reads, Java hashes) <- ``commitlog/``, ``queues/``,
``indexfile``, ``config``, ``checkpoint``, ``markers`` <- ``timers/`` <- ``store/``
(inventory, growth, verify) <- ``cli/`` (the ``rmq`` command). Nothing here imports
Spark, Airflow or ``jobs``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# public name -> the module that defines it
_HOMES = {
    # the commitlog, one record at a time (rmqlib.commitlog.records)
    "CommitLogRecord": "rmqlib.commitlog.records",
    "scan_segment": "rmqlib.commitlog.records",
    "scan_store": "rmqlib.commitlog.records",
    "read_record_at": "rmqlib.commitlog.records",
    "split_ranges": "rmqlib.commitlog.records",
    # the commitlog as Arrow RecordBatches (imports pyarrow)
    "scan_segment_arrow": "rmqlib.commitlog.arrow",
    "unwrap_inner_batches": "rmqlib.commitlog.arrow",
    # consume queues
    "walk_queue_tree": "rmqlib.queues.consumequeue",
    "decode_queue": "rmqlib.queues.consumequeue",
    "queue_bounds": "rmqlib.queues.consumequeue",
    # index files, config, timers
    "IndexFile": "rmqlib.indexfile",
    "list_index_files": "rmqlib.indexfile",
    "load_config_dir": "rmqlib.config",
    "read_timer_store": "rmqlib.timers.timer_store",
    # message traces (the trace topic's bodies)
    "decode_trace_body": "rmqlib.traces",
    # transactional messages: the op messages' bodies
    "decode_op_body": "rmqlib.transactions",
    # byte sources: a path or any object with name, size and read_at
    "ByteSource": "rmqlib.common.bytesource",
    "FileObjectSource": "rmqlib.common.bytesource",
    # the store as a whole
    "take_inventory": "rmqlib.store.inventory",
    "verify_store": "rmqlib.store.verify",
    # the errors every decoder raises for bad input
    "StoreError": "rmqlib.errors",
    "NotAStoreFileError": "rmqlib.errors",
    "CorruptDataError": "rmqlib.errors",
    "TruncatedDataError": "rmqlib.errors",
    "ConfigError": "rmqlib.errors",
    "UnsupportedFormatError": "rmqlib.errors",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """Import the defining module on first use of a public name, then cache the name."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rmqlib' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
