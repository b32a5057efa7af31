"""Stage 2, load: plan the new bytes of a snapshot on the driver (``plan``), decode them on
the executors (``decode_tasks``), build the small per-snapshot rows (``state_rows``) and
write everything to Delta idempotently (``job``), then summarise it (``summary``).

Imports ``jobs.lakehouse``, ``jobs.snapshot`` and rmqlib."""
