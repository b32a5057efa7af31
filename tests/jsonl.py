"""JSON Lines as the ``rmq`` command prints them (``--json``).

Split at ``\\n`` only: ``str.splitlines`` also splits at U+0085, U+2028 and other
separators that a JSON string may hold unescaped (``rmq`` prints text as it is, with
``ensure_ascii=False``), so a record whose properties decode to one would look like two
broken lines.
"""

from __future__ import annotations

import json
from typing import Any


def json_lines(text: str) -> list[Any]:
    """Every non-empty line of ``text``, parsed."""
    return [json.loads(line) for line in text.split("\n") if line]
