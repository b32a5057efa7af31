"""Stage 1, snapshot: copy a broker store, local or over SFTP (``sources``), into a dated
snapshot directory without touching the store (``copier``); the snapshot's layout, id and
manifest (``manifest``); deleting old snapshots (``retention``); snapshots kept in a bucket
instead (``bucket``), and the one interface over both (``roots``).

Imports ``jobs.lakehouse`` and rmqlib."""
