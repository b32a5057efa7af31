"""The daemon that forks Spark's Python workers: pyspark's own, minus a cost per task.

Before every task a Python worker calls ``importlib.invalidate_caches()`` (pyspark's
``setup_spark_files``, so that files added to the job become importable). On Python 3.11
that makes every zip importer in ``sys.path_importer_cache`` read its archive's whole
directory again, and a worker holds one per package it imported from Spark's own archives:
``pyspark.zip`` (1,328 entries) for ``pyspark``, ``pyspark/sql``, ``pyspark/sql/pandas``
..., the py4j zip, and the ``spark-core`` jar Spark also puts on the workers' path (5,362
entries). Measured: 0.13 CPU-s a task, 2.8 of the 14 CPU-s the workers spent on a 1 GiB
load of 16 tasks (bench/README.md).

The archives do not change while a worker lives, so each task here starts with those
importers dropped from the cache: ``invalidate_caches`` then has none to re-read, and an
import that needs one makes it again from zipimport's own cache of directories (no read).
Modules already imported are untouched; a file the job adds is a new path entry and gets a
new importer as before. Spark runs this module in place of ``pyspark.daemon`` by the
setting ``spark.python.daemon.module`` (jobs.lakehouse.spark_session), the hook Spark
offers for such workarounds (SPARK-22959); it needs nothing the executors' tasks do not
(they import ``jobs`` already).

Spark also puts its archives first on the workers' path, so they import pyspark from
``pyspark.zip``, compiling every module from source in every application (zipimport keeps
no bytecode; ``get_filename`` compiles once more): 0.67 CPU-s an application. When the
interpreter has the same pyspark release installed (the project's environment: its modules
compiled at install), the archives go to the end of the path before pyspark is imported.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
import zipimport
from importlib import metadata
from typing import IO

#: The entries Spark puts first on a Python worker's path (PythonUtils.sparkPythonPath).
SPARK_ARCHIVES = re.compile(r"(pyspark\.zip|py4j-[\w.]+-src\.zip|spark-core_[\w.-]+\.jar)$")


def prefer_installed_pyspark() -> None:
    """Move Spark's archives behind the installed packages on ``sys.path`` when the
    installed pyspark is the release ``pyspark.zip`` holds."""
    archives = [entry for entry in sys.path if SPARK_ARCHIVES.search(os.path.basename(entry))]
    shipped = next((entry for entry in archives if entry.endswith("pyspark.zip")), None)
    try:
        installed = metadata.version("pyspark")
        with zipfile.ZipFile(shipped or "") as archive:
            version = archive.read("pyspark/version.py").decode()
    except (metadata.PackageNotFoundError, OSError, KeyError):
        return
    if re.search(rf"__version__[^=]*=\s*['\"]{re.escape(installed)}['\"]", version):
        for entry in archives:
            sys.path.remove(entry)
            sys.path.append(entry)


prefer_installed_pyspark()

from pyspark import daemon  # noqa: E402  (after the path is settled)


def forget_archive_importers() -> None:
    """Drop the zip importers from ``sys.path_importer_cache``."""
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]


_run_task = daemon.worker_main


def _run_task_without_archive_importers(infile: IO, outfile: IO) -> None:
    forget_archive_importers()
    _run_task(infile, outfile)


daemon.worker_main = _run_task_without_archive_importers

if __name__ == "__main__":
    daemon.manager()
