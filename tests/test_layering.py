"""The folder tree is the architecture: data flows one way, and imports follow it.

Every import in ``rmqlib/`` and ``jobs/`` (module level, inside functions, under
``TYPE_CHECKING``: all of them) is checked against two rules:

* rmqlib imports nothing of Spark, Delta, Great Expectations, Airflow, ``jobs`` or
  ``dags``; jobs imports nothing of Airflow or ``dags``;
* within each package, a folder imports only itself and folders of a lower rank below
  (a store-file family never imports the whole-store code, a pipeline stage never a
  later stage). A new folder fails here until it is given its place.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "rmqlib": {"pyspark", "py4j", "delta", "deltalake", "great_expectations", "airflow",
               "jobs", "dags"},
    "jobs": {"airflow", "dags"},
}

# unit (a folder, or a module directly in the package) -> rank; "" = the package's
# top-level modules that orchestrate (jobs) or re-export the public API (rmqlib).
RANKS = {
    "rmqlib": {
        "errors": 0,
        "common": 1,
        "rocksdb": 2,
        "commitlog": 3, "queues": 3, "indexfile": 3, "config": 3, "checkpoint": 3,
        "markers": 3, "controller": 3, "pop": 3,
        "timers": 4, "dledger": 4, "compaction": 4,
        "store": 5,
        "cli": 6,
        "": 7,
    },
    "jobs": {
        "lakehouse": 0,
        "snapshot": 1,
        "load": 2,
        "check": 3,
        "alerts": 4,
        "report": 5,
        "maintain": 1,  # reads and compacts tables; needs only the lakehouse layer
        "query": 1,  # SQL over the tables; needs only the lakehouse layer
        "": 6,  # pipeline, pipeline_config, check_job, run_summary, cli, __main__
    },
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import; ``from pkg import name`` names pkg.name when that is
    a module of this tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"line {node.lineno}: relative import"
            base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((node.lineno, full if is_module(full) else base))
    return found


def unit_of(package: str, dotted: str) -> str:
    """The folder (or top-level module) of the package a module belongs to."""
    parts = dotted.split(".")
    if len(parts) == 1:  # the package itself
        return ""
    if len(parts) == 2 and not (ROOT / package / parts[1]).is_dir():
        return parts[1] if parts[1] in RANKS[package] else ""
    return parts[1]


def violations(importer: str, source: str) -> list[str]:
    """Every import of ``importer`` (a dotted module name) that breaks a rule."""
    package = importer.split(".")[0]
    own = unit_of(package, importer)
    ranks = RANKS[package]
    if own not in ranks:
        return [f"{importer}: folder {own!r} has no rank in tests/test_layering.py"]
    found = []
    for line, target in imported_modules(ast.parse(source)):
        top = target.split(".")[0]
        if top in FORBIDDEN[package]:
            found.append(f"{importer}:{line} imports {target} ({package} must not)")
        elif top == package:
            unit = unit_of(package, target)
            if unit not in ranks:
                found.append(f"{importer}:{line} imports {target}: unknown folder {unit!r}")
            elif unit != own and ranks[unit] >= ranks[own]:
                found.append(f"{importer}:{line} imports {target}: {unit or 'top'} "
                             f"(rank {ranks[unit]}) is not below {own or 'top'} "
                             f"(rank {ranks[own]})")
    return found


def package_modules() -> list[Path]:
    return sorted(p for package in RANKS for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path) -> None:
    assert violations(module_name(path), path.read_text()) == []


def test_every_folder_has_a_rank_and_a_docstring() -> None:
    for package in RANKS:
        folders = {p.name for p in (ROOT / package).iterdir()
                   if (p / "__init__.py").is_file()}
        assert folders <= set(RANKS[package]), f"{package}: folders without a rank"
        for folder in folders | {""}:
            init = ROOT / package / folder / "__init__.py"
            assert ast.get_docstring(ast.parse(init.read_text())), f"{init}: no docstring"


@pytest.mark.parametrize(("importer", "source", "complaint"), [
    ("rmqlib.commitlog.records", "import pyspark.sql", "rmqlib must not"),
    ("rmqlib.queues.consumequeue", "def f():\n    from airflow.sdk import dag", "must not"),
    ("rmqlib.commitlog.walk", "from rmqlib.store import verify", "is not below"),
    ("rmqlib.queues.consumequeue", "from rmqlib.commitlog.records import scan_segment",
     "is not below"),  # sibling families stay apart
    ("rmqlib.cli.main", "from rmqlib import scan_store", "is not below"),  # the API is top
    ("jobs.load.plan", "from jobs.report.pages import write_report", "is not below"),
    ("jobs.lakehouse.tables", "from jobs import pipeline", "is not below"),
    ("jobs.check.lag", "import dags.notifiers", "jobs must not"),
    ("jobs.newstage.thing", "import os", "has no rank"),
])
def test_the_rules_catch_what_they_forbid(importer: str, source: str, complaint: str) -> None:
    found = violations(importer, source)
    assert found and complaint in found[0]


@pytest.mark.parametrize(("importer", "source"), [
    ("rmqlib.store.verify", "from rmqlib.commitlog import records\nimport pyarrow"),
    ("rmqlib.commitlog.arrow", "from rmqlib.commitlog import layout as L"),
    ("jobs.check_job", "from jobs.report.pages import write_report"),
    ("jobs.alerts.evaluation", "from jobs.check.consumer_status import judge_snapshot"),
])
def test_the_rules_allow_what_flows_down(importer: str, source: str) -> None:
    assert violations(importer, source) == []


def test_every_public_name_resolves_to_its_home() -> None:
    """``from rmqlib import X`` for each name of ``rmqlib.__all__`` gives the object its
    module defines (the names resolve lazily, so nothing else would notice a typo)."""
    import importlib

    import rmqlib

    for name in rmqlib.__all__:
        home = importlib.import_module(rmqlib._HOMES[name])
        assert getattr(rmqlib, name) is getattr(home, name), name


#: SQL that makes Spark commit to a Delta table.
SPARK_DELTA_WRITE = re.compile(
    r"\b(INSERT\s+INTO|MERGE\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|CREATE\s+OR\s+REPLACE"
    r"\s+TABLE|ALTER\s+TABLE|OPTIMIZE|VACUUM)\b", re.IGNORECASE)


def spark_delta_writes(source: str) -> list[str]:
    """The calls in ``source`` that would make Spark commit to a Delta table."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        text, attr = ast.unparse(node), node.func.attr
        writer = attr == "writeTo" or (attr in ("save", "saveAsTable", "insertInto")
                                       and ".write" in ast.unparse(node.func.value))
        if writer or (attr == "sql" and SPARK_DELTA_WRITE.search(text)):
            found.append(f"line {node.lineno}: {text[:120]}")
    return found


@pytest.mark.parametrize("path", [p for p in package_modules()
                                  if module_name(p).startswith("jobs.")],
                         ids=lambda p: module_name(p))
def test_spark_never_commits_to_a_delta_table(path: Path) -> None:
    """Every Delta commit of the jobs is delta-rs' (conditional writes, safe with writers
    on other hosts and in a bucket); Spark's writer commits to S3 with an unconditional
    PUT (docs/object-storage.md). No code in ``jobs`` may call Spark's writers
    (``save``, ``saveAsTable``, ``insertInto``, ``writeTo``) or send it SQL that writes."""
    assert spark_delta_writes(path.read_text()) == []


@pytest.mark.parametrize("source", [
    'df.write.format("delta").mode("append").save(location)',
    'df.write.saveAsTable("rmq.t")',
    'df.writeTo("rmq.t").append()',
    'spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (\'a\' = \'b\')")',
    'spark.sql("CREATE OR REPLACE TABLE rmq.t (a INT) USING DELTA")',
    'spark.sql("DELETE FROM rmq.t WHERE broker = \'b\'")',
])
def test_the_spark_writer_rule_catches_each_writer(source: str) -> None:
    assert len(spark_delta_writes(source)) == 1


def test_the_spark_writer_rule_lets_reads_and_names_through() -> None:
    assert spark_delta_writes(
        'spark.read.format("delta").load(p)\n'
        'spark.sql("CREATE TABLE rmq.t USING DELTA LOCATION \'/w/t\'")\n'
        'spark.sql("SELECT * FROM rmq.t")\ncontext.variables.save()') == []
