"""Where the warehouse and the snapshots may live: local directories, or a shared
filesystem mounted at the same path on every host (docs/spark-cluster.md).

Object storage (``s3://``, ``gs://``, ``abfss://``, ...) is not supported yet. A URI must
never be taken for a path: ``Path("s3://rmq/wh")`` is the relative directory
``s3:/rmq/wh``, so a load told to write to a bucket would exit 0 with every table on the
local disk. Every place a location enters (``--warehouse``, ``RMQ_WAREHOUSE``,
``warehouse`` and ``snapshot_root`` in config/pipeline.yaml) goes through
:func:`local_directory`, which refuses a URI in one line; a ``file://`` URI is its path.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

#: A URI's scheme, also as ``Path`` leaves it (``s3:/bucket``: one slash).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")


class UnsupportedLocationError(ValueError):
    """A location given as the URI of a store the product cannot write."""


def local_directory(location: str | Path, what: str) -> Path:
    """``location`` as a local path; ``what`` names where it was given, for the error."""
    text = str(location)
    scheme = _SCHEME.match(text)
    if scheme is None:
        return Path(text)
    parsed = urlparse(text)
    if scheme.group(1).lower() == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    raise UnsupportedLocationError(
        f"{what} {text!r}: {scheme.group(1)}:// locations are not supported yet; give a "
        "local directory (or a shared filesystem mounted at the same path on every host)")
