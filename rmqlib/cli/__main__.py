"""``python -m rmqlib.cli``: the ``rmq`` command (see :mod:`rmqlib.cli.main`)."""

import sys

from rmqlib.cli.main import main

sys.exit(main())
