"""The 5.x timer store: ``timerlog/`` units, the ``timerwheel`` slots, and the store as a
whole (``timer_store``: which timer messages are pending, and its checks).

Imports ``rmqlib.errors``, ``rmqlib.common``, the commitlog and queue families and
``rmqlib.checkpoint`` (which also decodes ``config/timercheck``)."""
