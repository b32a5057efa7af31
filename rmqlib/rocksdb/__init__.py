"""RocksDB databases a 5.x broker keeps in its store (``storeType=defaultRocksDB``).

:mod:`.database` opens one read-only, never where it lies (a hard-linked clone: opening a
RocksDB directory writes into it); :mod:`.consume_queue` decodes the consume queue kept in
``consumequeue/``; :mod:`.config_store` the topics, subscription groups and consumer
offsets kept in ``config/<name>/``. Layouts and their sources: ``docs/rocksdb.md``.
"""
