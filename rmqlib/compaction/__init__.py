"""Compacted topics (5.x, topic attribute ``cleanup.policy=COMPACTION``): ``compaction/``.

:mod:`.layout` holds the directory and unit layout, :mod:`.store` reads one queue's
compaction log and its sparse queue and cross-checks them (docs/compaction.md).
"""
