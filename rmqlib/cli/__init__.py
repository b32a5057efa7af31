"""The ``rmq`` command (``main``): inspect, dump, get and verify a store offline; what a
dump prints (``dump``) and which queue files a dumped path means (``queue_paths``).

The top of rmqlib: imports any of it; nothing in rmqlib imports this folder."""
