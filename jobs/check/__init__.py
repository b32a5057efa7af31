"""Stage 3, check: one loaded snapshot as Spark views (``views``), the consistency checks
and consumer lag (``reconcile``, ``checks``, ``lag``), consumer status over a window of
snapshots, and Great Expectations from the data contracts.

Imports the stages below (lakehouse, snapshot, load) and rmqlib."""
