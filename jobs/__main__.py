"""``python -m jobs``: see :mod:`jobs.cli`."""

import sys

from jobs.cli import main

sys.exit(main())
