"""Great Expectations suites from the data contracts, run on a real-broker store.

One v5-clean load is shared by the module. The clean run must pass every error-severity
rule; a copy of the warehouse is then damaged through Spark (a duplicate key, an invalid
enum value, a negative count, plus bad rows of another broker that must not count) and the
matching rules, and only those, must fail. The clean run validates on pandas batches in
process (the engine of every night up to ``local_load_up_to_mib``); the damaged one on both
check engines (pandas, then Spark), requiring the same outcome rule by rule. Data Docs are
opened in headless Chromium.
"""

from __future__ import annotations

import copy
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest
from great_expectations.core import ExpectationValidationResult
from lakehouse import load
from pyspark.sql import functions as F

from jobs.check.data_docs import SUMMARIES_FILE, keep_newest_runs
from jobs.check.engines import DuckDbEngine, SparkEngine
from jobs.check.expectations import (
    DOCS_SITE,
    DOCS_SITE_CONFIG,
    ExpectationsSummary,
    docs_index_page,
    gx_context,
    observed_detail,
    offending_rows_query,
    run_expectations,
    snapshot_rows,
    suite_for,
    suite_name,
)
from jobs.check.offline_docs import external_references
from jobs.lakehouse.contracts import load_contracts
from jobs.lakehouse.tables import CONSUMER_OFFSETS, TOPICS, Registry

pytestmark = [pytest.mark.spark, pytest.mark.broker]

BROKER, SNAPSHOT = "b", "s1"
# What the damage below breaks, as the contracts name the rules.
BROKEN_RULES = {"consumer_offsets.pk_unique", "topics.queue_type_valid",
                "topics.queue_nums_non_negative"}


@dataclass(frozen=True)
class Run:
    registry: Registry
    gx_root: Path
    summary: ExpectationsSummary


@pytest.fixture(scope="module")
def clean(spark, broker_stores, tmp_path_factory) -> Run:  # type: ignore[no-untyped-def]
    warehouse = tmp_path_factory.mktemp("expectations") / "wh"
    registry, _ = load(spark, warehouse, BROKER, SNAPSHOT, broker_stores["v5-clean"] / "store")
    gx_root = warehouse / "_gx"
    summary = run_expectations(DuckDbEngine(warehouse), registry, BROKER, SNAPSHOT, gx_root)
    print(f"run_expectations on v5-clean: {summary.seconds:.1f} s")
    return Run(registry, gx_root, summary)


def run_on_both_engines(spark, registry: Registry, gx_root: Path) -> ExpectationsSummary:  # type: ignore[no-untyped-def]
    """The snapshot validated on pandas batches, then on Spark: the same rules evaluated,
    the same ones failed with the same counts; Spark's summary is returned."""
    local = run_expectations(DuckDbEngine(Path(registry.warehouse)), registry, BROKER, SNAPSHOT,
                             gx_root)
    on_spark = run_expectations(SparkEngine(spark, registry), registry, BROKER, SNAPSHOT,
                                gx_root)
    print(f"expectations: local {local.seconds:.1f} s, spark {on_spark.seconds:.1f} s")
    assert (local.success, local.evaluated) == (on_spark.success, on_spark.evaluated)
    assert sorted(local.failures) == sorted(on_spark.failures)
    return on_spark


@pytest.fixture(scope="module")
def damaged(spark, clean, tmp_path_factory) -> Run:  # type: ignore[no-untyped-def]
    """A copy of the clean warehouse (GX project included) with broken rows appended."""
    warehouse = tmp_path_factory.mktemp("damaged") / "wh"
    shutil.copytree(clean.registry.warehouse, warehouse)
    registry = Registry(spark, warehouse)
    offsets = registry.read(CONSUMER_OFFSETS).where(F.col("snapshot_id") == SNAPSHOT).limit(1)
    _append(registry, CONSUMER_OFFSETS, offsets)  # the same key twice
    topic = registry.read(TOPICS).where(F.col("snapshot_id") == SNAPSHOT).limit(1)
    _append(registry, TOPICS, topic.withColumns({
        "topic": F.lit("damaged-topic"), "queue_type": F.lit("NoSuchCQ"),
        "read_queue_nums": F.lit(-1)}))
    # Another broker's bad rows are outside the batch: they must not count.
    _append(registry, TOPICS, topic.withColumns({
        "broker": F.lit("other"), "queue_type": F.lit("OtherBrokerCQ")}))
    summary = run_on_both_engines(spark, registry, warehouse / "_gx")
    return Run(registry, warehouse / "_gx", summary)


def _append(registry: Registry, table: str, rows) -> None:  # type: ignore[no-untyped-def]
    rows.write.format("delta").mode("append").save(registry[table].location)


def test_every_contract_rule_is_exactly_one_expectation(clean: Run) -> None:
    contracts = load_contracts()
    context = gx_context(clean.gx_root)
    for name in clean.registry.tables:
        contract = contracts[name]
        expected = sorted(f"{name}.{rule['name']}" for rule in contract.quality)
        for suite in (suite_for(contract), context.suites.get(suite_name(name))):
            assert sorted(e.meta["rule"] for e in suite.expectations) == expected, name
    total = sum(len(contracts[name].quality) for name in clean.registry.tables)
    assert clean.summary.evaluated == total > 200


def test_clean_load_passes_every_error_rule(clean: Run) -> None:
    errors = [f for f in clean.summary.failures if f.severity == "error"]
    assert errors == [], "\n".join(clean.summary.lines())
    assert clean.summary.success
    assert clean.summary.data_docs_index.is_file()


def test_damage_fails_exactly_the_matching_rules(clean: Run, damaged: Run) -> None:
    summary = damaged.summary
    before = {f.ref for f in clean.summary.failures}
    failed = {f.ref: f for f in summary.failures}
    assert set(failed) - before == BROKEN_RULES, "\n".join(summary.lines())
    assert not summary.success
    assert all(failed[ref].severity == "error" and failed[ref].description
               for ref in BROKEN_RULES)
    # Observed details: counts of the snapshot's rows only, the bad value as an example.
    assert failed["topics.queue_type_valid"].observed.startswith("1 of")
    assert "NoSuchCQ" in failed["topics.queue_type_valid"].observed
    assert "OtherBrokerCQ" not in failed["topics.queue_type_valid"].observed
    assert failed["topics.queue_nums_non_negative"].observed == "observed 1"
    assert failed["consumer_offsets.pk_unique"].observed.startswith("2 of")


def test_rerun_updates_the_gx_project_instead_of_duplicating_it(clean: Run,
                                                                damaged: Run) -> None:
    """The damaged copy holds the clean run's project: a second run for the same snapshot."""
    context = gx_context(damaged.gx_root)
    tables = len(damaged.registry.tables)
    assert len(context.suites.all()) == tables
    assert len(context.validation_definitions.all()) == tables
    assert [c.name for c in context.checkpoints.all()] == ["rmq_snapshot"]
    results = context.validation_results_store.list_keys()
    # Both runs kept, the damaged one validated on both engines (three result sets, one
    # definition each).
    assert len(results) == 3 * tables


def test_data_docs_open_offline(damaged: Run, browser_page) -> None:  # type: ignore[no-untyped-def]
    """Every request but file:// is refused. The index's tables are drawn by
    bootstrap-table from data in the page: the suite names are visible text only when its
    scripts ran (a script's source is not text). Then a result page of the damaged run."""
    index = damaged.summary.data_docs_index
    assert external_references(index.parent) == {}
    refused = []

    def files_only(route) -> None:  # type: ignore[no-untyped-def]
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            refused.append((route.request.resource_type, route.request.url))
            route.abort()

    browser_page.route("**/*", files_only)
    browser_page.goto(index.as_uri())
    browser_page.wait_for_load_state("load")
    text = browser_page.inner_text("body")
    for table in ("messages", "consumer_offsets"):
        assert suite_name(table) in text
    html = browser_page.content()
    links = re.findall(r"'_table_row_link_path': '(validations/[^']+)'", html)
    assert len(links) == 3 * len(damaged.registry.tables)  # clean once, damaged twice
    # The newest consumer_offsets result: the damaged run, which failed pk_unique.
    link = max(x for x in links if x.startswith(f"validations/{suite_name('consumer_offsets')}"
                                                .replace(".", "/")))
    browser_page.goto((index.parent / unquote(link)).as_uri())
    browser_page.wait_for_load_state("load")
    text = browser_page.inner_text("body")
    assert suite_name(CONSUMER_OFFSETS) in text
    assert "Failed" in text
    assert "consumer_offsets.pk_unique" in text
    assert "consumer_offsets.consumer_offset_min" in text
    # only GX's logo image (a hosted picture, nothing the pages need) asked for the network
    assert {kind for kind, _ in refused} <= {"image"}, refused


def test_the_index_lists_what_gx_lists_reading_each_result_once(  # type: ignore[no-untyped-def]
        damaged: Run, tmp_path, monkeypatch) -> None:
    """The Data Docs index of jobs.check.data_docs holds exactly the rows GX's own index
    builder gives (same limit), and once its summaries are kept, a build loads no result."""
    from great_expectations.data_context.data_context.abstract_data_context import (
        AbstractDataContext,
    )
    from great_expectations.data_context.util import instantiate_class_from_config

    project = tmp_path / "gx"
    shutil.copytree(damaged.gx_root, project)
    context = gx_context(project)
    (Path(context.root_directory) / "uncommitted" / SUMMARIES_FILE).unlink(missing_ok=True)
    loads = []
    original = AbstractDataContext.get_validation_result

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        loads.append(kwargs.get("run_id"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AbstractDataContext, "get_validation_result", counted)

    def index_links(index_builder: dict) -> dict:
        config = {**copy.deepcopy(DOCS_SITE_CONFIG), "site_index_builder": index_builder}
        site = instantiate_class_from_config(
            config=config, runtime_environment={"data_context": context,
                                                "root_directory": context.root_directory},
            config_defaults={"module_name": "great_expectations.render.renderer.site_builder"})
        return site.site_index_builder.build()[1]

    ours = DOCS_SITE_CONFIG["site_index_builder"]
    expected = index_links({"class_name": "DefaultSiteIndexBuilder",
                            "validation_results_limit": ours["validation_results_limit"]})
    listed = len(expected["validations_links"])
    assert listed == 3 * len(damaged.registry.tables)
    loads.clear()
    assert index_links(ours) == expected
    assert len(loads) == listed  # first build: every listed result, once
    loads.clear()
    assert index_links(ours) == expected
    assert loads == []  # then none: a night's build reads only its own run's results


def test_data_docs_keep_the_newest_runs_and_only_their_pages(damaged: Run,  # type: ignore[no-untyped-def]
                                                              tmp_path) -> None:
    """Retention: of the project's three runs, the two newest are kept; the next site
    build leaves exactly their result pages, and the index lists exactly those."""
    project = tmp_path / "gx"
    shutil.copytree(damaged.gx_root, project)
    context = gx_context(project)
    tables = len(damaged.registry.tables)
    runs = sorted({k.run_id.to_tuple() for k in context.validation_results_store.list_keys()},
                  key=lambda run: run[1])
    assert len(runs) == 3
    assert keep_newest_runs(context, runs=2) == tables
    kept = {k.run_id.to_tuple() for k in context.validation_results_store.list_keys()}
    assert kept == set(runs[1:])
    context.build_data_docs(site_names=[DOCS_SITE])
    site = docs_index_page(context).parent
    pages = {page.relative_to(site / "validations").parts for page in
             (site / "validations").rglob("*.html")}
    assert len(pages) == 2 * tables
    assert {(parts[-3], parts[-2]) for parts in pages} == {
        (name, time) for name, time in kept}
    index = docs_index_page(context).read_text()
    assert sum(index.count(f"/{name}/{time}/") for name, time in runs[1:]) >= 2 * tables
    assert not any(f"/{time}/" in index for _, time in runs[:1])
    # no directory of a removed result or page is left behind (the next retention pass
    # clears what the site build emptied)
    assert keep_newest_runs(context, runs=2) == 0
    results = Path(context.validation_results_store.store_backend.full_base_directory)
    for root in (results, site / "validations"):
        empty = [d for d in root.rglob("*") if d.is_dir() and not any(d.iterdir())]
        assert empty == [], root
    run_directories = {d.name for d in results.rglob("*") if d.is_dir()}
    assert not any(time in run_directories for _, time in runs[:1])


def test_sql_rules_become_queries_over_the_batch() -> None:
    key = ["broker", "offset"]
    assert (offending_rows_query("SELECT COUNT(*) FROM {object}\nWHERE x < 0 AND y = '{'\n",
                                 key)
            == "SELECT `broker`, `offset` FROM {batch} WHERE x < 0 AND y = '{{'")
    assert (offending_rows_query("SELECT COUNT(*) FROM {object} GROUP BY a", key)
            == "SELECT offending FROM (SELECT COUNT(*) FROM {batch} GROUP BY a) "
               "AS counted(offending) WHERE offending <> 0")


def test_a_rule_that_cannot_run_is_reported_with_its_error() -> None:
    """GX records a metric that raised (broken query, missing column) per metric id."""
    info = {"MetricConfigurationID(...)": {"raised_exception": True, "exception_traceback": "",
                                           "exception_message": "[UNRESOLVED_COLUMN] x\nmore"}}
    result = ExpectationValidationResult(success=False, exception_info=info)
    assert observed_detail(result) == "error: [UNRESOLVED_COLUMN] x"
    counted = ExpectationValidationResult(success=False, result={
        "unexpected_count": 2, "element_count": 9, "partial_unexpected_list": ["a", "b"]})
    assert observed_detail(counted) == "2 of 9 rows unexpected, e.g. ['a', 'b']"


def test_the_maintenance_batch_is_the_brokers_latest_run(clean: Run, tmp_path: Path) -> None:
    """maintenance_runs has no snapshot: a night's check validates the broker's latest
    maintenance run (the night before's), not the audit log's whole history."""
    from jobs.lakehouse.tables import MAINTENANCE_RUNS
    from jobs.maintain.maintenance import maintain_tables

    warehouse = tmp_path / "wh"
    shutil.copytree(clean.registry.warehouse, warehouse, ignore=shutil.ignore_patterns("_gx"))
    registry = Registry(None, warehouse)
    engine = DuckDbEngine(warehouse)
    assert len(snapshot_rows(engine, registry, MAINTENANCE_RUNS, BROKER, SNAPSHOT)) == 0
    runs = [maintain_tables(warehouse, BROKER) for _ in range(2)]
    maintain_tables(warehouse, "another-broker")

    batch = snapshot_rows(engine, registry, MAINTENANCE_RUNS, BROKER, SNAPSHOT)
    latest = {row["run_id"] for row in runs[-1]}
    assert len(latest) == 1
    assert set(batch["run_id"]) == latest and set(batch["broker"]) == {BROKER}
    assert sorted(batch["table_name"]) == sorted(row["table_name"] for row in runs[-1])
    assert len(registry.read_arrow(MAINTENANCE_RUNS)) == 3 * len(batch)
