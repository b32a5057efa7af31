"""Consume queues: ``consumequeue/`` (20-byte units), ``batchconsumequeue/`` (5.x BatchCQ,
46-byte units) and ``consumequeue_ext/`` (tags codes, store times, filter bitmaps).

Imports ``rmqlib.errors`` and ``rmqlib.common`` only."""
