"""``python -m jobs``: see :mod:`jobs.cli`."""

from jobs.cli import run_and_exit

run_and_exit()
