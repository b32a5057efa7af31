"""The store as a whole: what every file is (``inventory``), how each file grows while a
broker runs (``growth``, used by the snapshots), and the invariants across files
(``verify``).

Imports every file family below it; never ``rmqlib.cli``."""
