"""The commitlog (``commitlog/``): record layout, framing of a segment (``walk``), records
one at a time (``records``) or as Arrow batches (``arrow``), and what a record holds:
properties, compressed bodies, 5.x inner batches, message ids.

Imports ``rmqlib.errors`` and ``rmqlib.common`` only."""
