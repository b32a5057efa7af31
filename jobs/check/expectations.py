"""Great Expectations suites generated from the data contracts, run per snapshot.

The contracts' ``quality`` rules are the single source of truth for data quality: each
rule becomes exactly one GX expectation (:func:`suite_for`), tagged with
``meta.rule = "<table>.<rule name>"`` so a failed expectation leads straight back to the
contract. Nothing here is written by hand per table.

:func:`run_expectations` validates one snapshot of one broker: a file-backed GX context
under ``gx_root``, one dataframe asset, batch definition, suite and validation definition
per table, and one Checkpoint that runs them all, keeps the results in the context's
validation results store and rebuilds the static Data Docs site.

The dataframes are the check engine's (``jobs.check.engines``): Spark's for a big snapshot,
pandas frames read with delta-rs for a small one, which GX validates in about a second
instead of twenty. GX runs contract SQL rules (UnexpectedRowsExpectation) only on SQL and
Spark engines; on pandas this module adds the two metrics behind it, running the rule's
Spark SQL in DuckDB (translated as the checks are).

GX 1.x hands every validation definition of a checkpoint the same batch parameters, while
a Spark dataframe asset's only batch parameter is the dataframe itself. The checkpoint
used here (:class:`SnapshotCheckpoint`) therefore takes ``{definition name: dataframe}``
and gives each definition its own table's rows, cached only while its suite runs.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import logging
import os
import re
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import great_expectations as gx
import great_expectations.expectations as gxe
import pyarrow as pa
from great_expectations.checkpoint import UpdateDataDocsAction
from great_expectations.checkpoint.actions import ActionContext
from great_expectations.checkpoint.checkpoint import CheckpointResult
from great_expectations.constants import MAX_RESULT_RECORDS
from great_expectations.core.freshness_diagnostics import CheckpointFreshnessDiagnostics
from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.data_context.types.resource_identifiers import (
    ExpectationSuiteIdentifier,
)
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.metadata_types import FailureSeverity
from great_expectations.expectations.metrics.metric_provider import metric_value
from great_expectations.expectations.metrics.query_metric_provider import QueryMetricProvider

from jobs.check.data_docs import DOCS_SITE, KEPT_RUNS, docs_index_page, keep_newest_runs
from jobs.check.engines import LOCAL, CheckEngine, SparkEngine, to_duckdb
from jobs.check.offline_docs import AssetsError, localize_site
from jobs.lakehouse.contracts import Contract, quote_identifier
from jobs.lakehouse.tables import LOAD_STATE, MAINTENANCE_RUNS, RETENTION_GAPS, TABLES, Registry

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    from great_expectations.core import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.data_context import AbstractDataContext

log = logging.getLogger(__name__)

DATASOURCES = {"spark": "rmq_lakehouse", LOCAL: "rmq_lakehouse_pandas"}
CHECKPOINT = "rmq_snapshot"
BATCH_DEFINITION = "snapshot_rows"
SUITE_PREFIX = "rmq."
DOCS_SITE_CONFIG = {
    "class_name": "SiteBuilder",
    "show_how_to_buttons": False,
    "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                      "base_directory": "uncommitted/data_docs/local_site/"},
    # The index lists the kept runs' results (jobs.check.data_docs: a week of nights),
    # each loaded once: a night's build reads one run's results whatever the history.
    "site_index_builder": {"module_name": "jobs.check.data_docs",
                           "class_name": "SummarizedSiteIndexBuilder",
                           "validation_results_limit": KEPT_RUNS * len(TABLES)},
}
SEVERITIES = {"error": FailureSeverity.CRITICAL, "warning": FailureSeverity.WARNING}
# The first pass over a suite: success only (see SnapshotCheckpoint).
PASS_FORMAT = {"result_format": "BOOLEAN_ONLY"}
ARROW_ROWS = "rmq_arrow_rows"  # a pandas batch's attrs key: the Arrow rows it was made from
# Keys of these tables span a broker's whole history (marks, gaps found by any snapshot),
# so their batch is every row of the broker, not one snapshot's. (load_runs is keyed by run,
# and a run loads one snapshot: its batch is the snapshot's runs, which keeps the night's
# check from growing with the audit log.)
BROKER_WIDE = frozenset({LOAD_STATE, RETENTION_GAPS})
# maintenance_runs has no snapshot: a maintenance follows the broker's check, so a night's
# check validates the broker's latest run (all its rows share a run_id), the night before's.
# Contract SQL rules count offending rows; GX wants the rows. This shape is rewritten to
# select the offending rows' keys, anything else is wrapped (see offending_rows_query).
_COUNT_WHERE = re.compile(
    r"\s*SELECT\s+COUNT\(\s*\*\s*\)\s+FROM\s+\{object\}\s+WHERE\s+(?P<condition>.+?)[\s;]*",
    re.IGNORECASE | re.DOTALL)
_NOT_A_ROW_FILTER = re.compile(r"\b(GROUP\s+BY|HAVING|UNION|LIMIT|ORDER\s+BY|FROM|JOIN)\b",
                               re.IGNORECASE)


class Failure(NamedTuple):
    """One failed expectation, named as the contract names its rule."""

    table: str
    rule: str
    severity: str
    description: str
    observed: str

    @property
    def ref(self) -> str:
        return f"{self.table}.{self.rule}"


@dataclass(frozen=True)
class ExpectationsSummary:
    """Outcome of one snapshot's checkpoint run.

    ``success`` means no error-severity rule failed; failed warning rules are listed in
    ``failures`` too but do not make the snapshot fail.
    """

    success: bool
    evaluated: int
    failures: list[Failure]
    data_docs_index: Path
    seconds: float

    def lines(self) -> list[str]:
        """Human-readable outcome, one line per failure."""
        verdict = "passed" if self.success else "FAILED"
        head = (f"expectations {verdict}: {self.evaluated} evaluated, {len(self.failures)} "
                f"failed, {self.seconds:.1f} s; Data Docs {self.data_docs_index}")
        return [head] + [f"  [{f.severity}] {f.ref}: {f.observed} ({f.description})"
                         for f in self.failures]


class UnsupportedRule(ValueError):
    """A contract quality rule has no GX counterpart here; the message names the rule."""


# --------------------------------------------------------------------------- suites


def suite_name(table: str) -> str:
    return f"{SUITE_PREFIX}{table}"


def suite_for(contract: Contract) -> gx.ExpectationSuite:
    """The table's expectation suite: exactly one expectation per contract quality rule.

    Built in one go and not saved: ``add_expectation`` on a suite whose name is already
    stored would write the whole suite back once per expectation.
    """
    return gx.ExpectationSuite(
        name=suite_name(contract.table),
        expectations=[expectation_for(contract, rule) for rule in contract.quality],
        meta={"contract": contract.path.name, "contract_version": contract.version})


def expectation_for(contract: Contract, rule: Mapping[str, Any]) -> gxe.Expectation:
    """One contract rule as a GX expectation carrying the rule's name and severity."""
    ref = f"{contract.table}.{rule['name']}"
    if rule.get("severity") not in SEVERITIES:
        raise UnsupportedRule(f"{ref}: severity {rule.get('severity')!r}")
    common = {
        "meta": {"rule": ref, "severity": rule["severity"],
                 "description": rule["description"]},
        # Shown in Data Docs; the rule name also keeps look-alike expectations distinct.
        "description": f"{ref}: {rule['description']}",
        "severity": SEVERITIES[rule["severity"]],
    }
    if rule.get("type") == "sql":
        _require_zero(rule, ref)
        query = offending_rows_query(rule["query"], contract.primary_key)
        return gxe.UnexpectedRowsExpectation(unexpected_rows_query=query, **common)
    return _library_expectation(contract, rule, ref, common)


def _library_expectation(contract: Contract, rule: Mapping[str, Any], ref: str,
                         common: dict[str, Any]) -> gxe.Expectation:
    """ODCS library metrics -> the GX expectation measuring the same thing."""
    metric, column = rule.get("metric"), rule.get("property")
    arguments = rule.get("arguments") or {}
    if metric == "rowCount":
        return gxe.ExpectTableRowCountToBeBetween(**_row_count_bounds(rule, ref), **common)
    _require_zero(rule, ref)
    if metric == "duplicateValues":
        columns = list(arguments.get("properties") or [column])
        if len(columns) == 1:
            return gxe.ExpectColumnValuesToBeUnique(column=columns[0], **common)
        # "never": a key with nulls (load_state's commitlog row) is still a key.
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=columns, ignore_row_if="never",
                                                   **common)
    if column is None:
        raise UnsupportedRule(f"{ref}: {metric} needs a column")
    if metric == "nullValues":
        return gxe.ExpectColumnValuesToNotBeNull(column=column, **common)
    if metric == "invalidValues" and set(arguments) == {"validValues"}:
        return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=arguments["validValues"],
                                               **common)
    if metric == "invalidValues" and set(arguments) == {"pattern"}:
        return gxe.ExpectColumnValuesToMatchRegex(column=column, regex=arguments["pattern"],
                                                  **common)
    raise UnsupportedRule(f"{ref}: metric {metric!r} with arguments {sorted(arguments)}")


def _require_zero(rule: Mapping[str, Any], ref: str) -> None:
    """Counting rules here must allow no offending row at all (``mustBe: 0``)."""
    bounds = {key: value for key, value in rule.items() if key.startswith("must")}
    if bounds != {"mustBe": 0} or rule.get("unit", "rows") != "rows":
        raise UnsupportedRule(f"{ref}: only mustBe: 0 (rows) is supported, not {bounds}")


def _row_count_bounds(rule: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """ODCS ``mustBe*`` on a row count -> ExpectTableRowCountToBeBetween's bounds."""
    bounds = {key: value for key, value in rule.items() if key.startswith("must")}
    if len(bounds) != 1:
        raise UnsupportedRule(f"{ref}: expected one mustBe* bound, found {sorted(bounds)}")
    (key, value), = bounds.items()
    if key == "mustBe":
        return {"min_value": value, "max_value": value}
    if key == "mustBeBetween":
        return {"min_value": value[0], "max_value": value[1]}
    options = {
        "mustBeGreaterThan": {"min_value": value, "strict_min": True},
        "mustBeGreaterOrEqualTo": {"min_value": value},
        "mustBeLessThan": {"max_value": value, "strict_max": True},
        "mustBeLessOrEqualTo": {"max_value": value},
    }
    if key not in options:
        raise UnsupportedRule(f"{ref}: {key} is not supported for rowCount")
    return options[key]


def offending_rows_query(query: str, key: Iterable[str]) -> str:
    """A contract SQL rule (counts offending rows in ``{object}``) as the query
    UnexpectedRowsExpectation runs (returns offending rows from ``{batch}``).

    ``SELECT COUNT(*) FROM {object} WHERE c`` becomes ``SELECT <key> FROM {batch} WHERE c``,
    so GX reports the number of offending rows and, on request, their keys. Any other
    shape keeps its count and yields one row when the count is not 0. Literal braces are
    doubled because GX substitutes ``{batch}`` with ``str.format``.
    """
    match = _COUNT_WHERE.fullmatch(query)
    if match and not _NOT_A_ROW_FILTER.search(match["condition"]):
        columns = ", ".join(map(quote_identifier, key)) or "*"
        return f"SELECT {columns} FROM {{batch}} WHERE {_escape(match['condition'])}"
    counted = _escape(query.strip().rstrip(";"))
    return f"SELECT offending FROM ({counted}) AS counted(offending) WHERE offending <> 0"


def _escape(sql: str) -> str:
    return sql.replace("{", "{{").replace("}", "}}").replace("{{object}}", "{batch}")


# --------------------------------------------------------------------------- batches


def batch_filter(registry: Registry, table: str, broker: str,
                 snapshot_id: str) -> dict[str, str]:
    """``{column: value}`` selecting the rows of ``table`` that belong to one broker snapshot.

    Facts are appended once, by the snapshot that first saw them (``first_snapshot_id``);
    state tables carry ``snapshot_id``; the BROKER_WIDE bookkeeping is keyed across
    snapshots, so its batch is the whole broker; maintenance_runs' is the broker's latest
    run.
    """
    columns = {column.name for column in registry[table].contract.columns}
    equal: dict[str, Any] = {"broker": broker} if "broker" in columns else {}
    if table == MAINTENANCE_RUNS:
        equal["run_id"] = latest_maintenance_run(registry, broker)
    elif table not in BROKER_WIDE:
        # superseded rows belong to the snapshot that superseded them
        snapshot_column = next((c for c in ("superseded_in_snapshot_id", "first_snapshot_id",
                                            "snapshot_id") if c in columns), None)
        if snapshot_column:
            equal[snapshot_column] = snapshot_id
    return equal


def latest_maintenance_run(registry: Registry, broker: str) -> str | None:
    """The run_id of the broker's latest maintenance (None before its first). Reads two
    columns of the broker's runs: the batch GX validates stays one run's rows, whatever
    the audit log's length (it grows by a row per table per night)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from jobs.lakehouse.driver_rows import arrow_dataset, exists

    location = registry[MAINTENANCE_RUNS].location
    if not exists(location):
        return None
    runs = arrow_dataset(location).to_table(columns=["run_id", "started_at"],
                                            filter=ds.field("broker") == broker)
    if not runs.num_rows:
        return None
    return runs.column("run_id")[pc.index(runs.column("started_at"),
                                          pc.max(runs.column("started_at")))].as_py()


def snapshot_rows(engine: CheckEngine, registry: Registry, table: str, broker: str,
                  snapshot_id: str) -> Any:
    """The batch of ``table`` for one broker snapshot: a Spark dataframe on Spark, a pandas
    frame (read with delta-rs) on the local engine."""
    equal = batch_filter(registry, table, broker, snapshot_id)
    if isinstance(engine, SparkEngine):
        frame = engine.registry.read(table)
        for column, value in equal.items():
            frame = frame.where(frame[column] == value)
        return frame
    rows = registry.read_arrow(table, **equal)
    frame = rows.to_pandas()
    # The typed rows, for the SQL rules (offending_rows): pandas loses the types of an
    # empty or all-null column, and DuckDB cannot bind a function on an untyped null.
    frame.attrs[ARROW_ROWS] = SharedRows(rows)
    return frame


class SharedRows:
    """The Arrow rows of a pandas batch, as its ``attrs`` hold them.

    pandas deep-copies ``attrs`` into every frame and series an operation returns
    (``NDFrame.__finalize__``), and a pyarrow Table deep-copies by pickling all its
    buffers: every column GX touched copied the whole batch, a third of a night's check
    and more with each night of the broker-wide tables' history. The rows are immutable,
    so every copy shares them.
    """

    __slots__ = ("table",)

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __copy__(self) -> SharedRows:
        return self

    def __deepcopy__(self, memo: dict) -> SharedRows:
        return self


# --------------------------------------------------------------------------- checkpoint


class SnapshotCheckpoint(gx.Checkpoint):
    """A Checkpoint whose validation definitions each validate their own dataframe.

    ``run(batch_parameters=...)`` takes ``{validation definition name: DataFrame}``
    instead of GX's one parameter set for all definitions (which would give every table
    the same dataframe). Each dataframe is cached while its suite runs: GX computes its
    metrics in several Spark jobs over the same rows.

    A suite first runs with ``BOOLEAN_ONLY`` results: GX then computes only what decides
    success, not the sample of unexpected values of every expectation (a Spark job each,
    about a fifth of the jobs of a night whose rules all pass). A suite with a failed rule
    runs again with the checkpoint's ``result_format``, so what failed is reported and kept
    in the results store and Data Docs with its counts and sample values.
    """

    def is_fresh(self) -> CheckpointFreshnessDiagnostics:
        """Fresh by construction: build_checkpoint stored this checkpoint, its definitions
        and their suites just before it runs. GX's own test re-reads and compares them all
        from the stores (a tenth of a check's GX time); each definition still checks its
        own suite and batch definition when it runs."""
        return CheckpointFreshnessDiagnostics(errors=[])

    def _run_validation_definitions(  # type: ignore[override]
        self, batch_parameters: dict[str, Any], expectation_parameters: Any,
        result_format: Any, run_id: RunIdentifier,
    ) -> dict[Any, ExpectationSuiteValidationResult]:
        results = {}
        for definition in self.validation_definitions:
            frame = batch_parameters[definition.name]
            spark_frame = hasattr(frame, "unpersist")
            if spark_frame:
                frame = frame.cache()
            validate = functools.partial(
                definition.run, checkpoint_id=self.id, batch_parameters={"dataframe": frame},
                expectation_parameters=expectation_parameters, run_id=run_id)
            try:
                result = validate(result_format=PASS_FORMAT)
                if not result.success:
                    result = validate(result_format=result_format)
            finally:
                if spark_frame:
                    frame.unpersist()
            key = self._build_result_key(validation_definition=definition, run_id=run_id,
                                         batch_identifier=result.batch_id)
            results[key] = result
        return results


class UpdateDataDocsOnce(UpdateDataDocsAction):
    """UpdateDataDocsAction that renders all results of a run in one site build.

    GX's action builds the site once per validation result, and every build also rebuilds
    the index, which re-reads each result it lists: with one result per table that was
    most of the Data Docs time. Same pages, one index build. (A new action ``type``: GX
    registers action classes by type, so reading the stored checkpoint needs this module.)
    """

    type: Literal["rmq_update_data_docs"] = "rmq_update_data_docs"

    def run(self, checkpoint_result: CheckpointResult,
            action_context: ActionContext | None = None) -> dict:
        keys = list(checkpoint_result.run_results)
        suites = {ExpectationSuiteIdentifier(name=result.suite_name)
                  for result in checkpoint_result.run_results.values()}
        self._build_data_docs(site_names=self.site_names,
                              resource_identifiers=[*keys, *sorted(suites, key=str)])
        return {key: {site["site_name"]: site["site_url"] for site in self._get_docs_sites_urls(
                    resource_identifier=key, site_names=self.site_names)}
                for key in keys}


def gx_context(gx_root: Path) -> AbstractDataContext:
    """The file-backed GX project under ``gx_root`` (created on first use)."""
    gx_root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=gx_root)
    _stop_reading_config_variables(context)
    if context.list_data_docs_sites().get(DOCS_SITE) != DOCS_SITE_CONFIG:
        context.update_data_docs_site(DOCS_SITE, copy.deepcopy(DOCS_SITE_CONFIG))
    bars = context.variables.progress_bars
    if not isinstance(bars, ProgressBarsConfig) or bars.globally:
        # A progress bar per suite only clutters job logs.
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        context.variables.save()
    return context


def _stop_reading_config_variables(context: AbstractDataContext) -> None:
    """Point the project at no ``config_variables.yml``. GX reads and parses that file again
    on every lookup of its own config, ~1,200 times a check (3 of a small check's 17 CPU-s),
    and ours only ever held GX's scaffolded comments and an analytics instance id (GX keeps
    one in memory without it). The project's config takes no ``${...}`` substitution then;
    the file goes too, so that this process, whose GX already looks for it, finds none."""
    relative = context.variables.config_variables_file_path
    if relative is not None:
        context.variables.config_variables_file_path = None
        context.variables.save()
        (Path(context.root_directory) / relative).unlink(missing_ok=True)


def _datasource(context: AbstractDataContext, engine: str, tables: Iterable[str]) -> Any:
    """The engine's datasource. A new one is added with every table's dataframe asset and
    batch definition at once: added one by one, GX rewrites ``great_expectations.yml`` for
    each (58 rewrites of a growing file, ~1 CPU-s of a new project's first check)."""
    name = DATASOURCES[engine]
    try:
        return context.data_sources.get(name)
    except KeyError:
        assets = [{"type": "dataframe", "name": table,
                   "batch_definitions": [{"name": BATCH_DEFINITION}]} for table in tables]
        if engine == LOCAL:
            return context.data_sources.add_pandas(name, assets=assets)
        # GX would persist every batch for good; SnapshotCheckpoint caches each one only
        # while its suite runs.
        return context.data_sources.add_spark(name, persist=False, assets=assets)


def _batch_definition(datasource: Any, table: str) -> Any:
    """The table's dataframe asset and its whole-dataframe batch definition (kept)."""
    try:
        asset = datasource.get_asset(table)
    except LookupError:
        asset = datasource.add_dataframe_asset(table)
    try:
        return asset.get_batch_definition(BATCH_DEFINITION)
    except KeyError:
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def build_checkpoint(context: AbstractDataContext, registry: Registry,
                     engine: str) -> SnapshotCheckpoint:
    """Suites, validation definitions (on ``engine``'s datasource) and the checkpoint,
    regenerated from the contracts (add_or_update: re-running replaces them, never
    duplicates them). The checkpoint's add_or_update adds or updates each definition and
    its suite first."""
    datasource = _datasource(context, engine, registry.tables)
    definitions = [gx.ValidationDefinition(name=name, data=_batch_definition(datasource, name),
                                           suite=suite_for(table.contract))
                   for name, table in registry.tables.items()]
    checkpoint = SnapshotCheckpoint(
        name=CHECKPOINT, validation_definitions=definitions,
        actions=[UpdateDataDocsOnce(name="update_data_docs", site_names=[DOCS_SITE])],
        # BASIC: counts and a sample of unexpected values; SUMMARY costs more Spark jobs.
        result_format={"result_format": "BASIC"})
    # The store hands back a plain Checkpoint on first add: keep ours, with the stored id.
    checkpoint.id = context.checkpoints.add_or_update(checkpoint).id
    return checkpoint


def run_expectations(engine: CheckEngine, registry: Registry, broker: str, snapshot_id: str,
                     gx_root: Path) -> ExpectationsSummary:
    """Validate one broker snapshot against every table's contract rules with GX.

    Results go to the GX context at ``gx_root`` and its Data Docs; the summary names
    every failed rule as ``<table>.<rule name>``.
    """
    started = time.monotonic()
    context = gx_context(gx_root)
    checkpoint = build_checkpoint(context, registry, engine.name)
    frames = {name: snapshot_rows(engine, registry, name, broker, snapshot_id)
              for name in registry.tables}
    run_id = RunIdentifier(run_name=_run_name(broker, snapshot_id),
                           run_time=dt.datetime.now(dt.UTC))
    built_since = time.time() - 2  # page times of a coarse-grained file system included
    keep_newest_runs(context)  # this run's index build then drops the removed runs' pages
    result = checkpoint.run(batch_parameters=frames, run_id=run_id)
    index = docs_index_page(context)
    _open_offline(index.parent, built_since)
    return _summarize(result.run_results.values(), index, time.monotonic() - started)


def _open_offline(site: Path, built_since: float) -> None:
    """Rewrite the site's CDN scripts and styles to local copies (jobs.check.offline_docs).
    Without the assets (never fetched, no registry reachable) the pages keep their CDN
    links and still open where there is network: a warning, not a failed check."""
    try:
        localize_site(site, built_since=built_since)
    except AssetsError as error:
        log.warning("Data Docs keep their CDN links (they need network to render): %s", error)


def _run_name(broker: str, snapshot_id: str) -> str:
    """Run names become directory names and Data Docs links: keep them path- and URL-safe."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{broker}.{snapshot_id}")



# --------------------------------------------------------------------------- results


def _summarize(results: Iterable[ExpectationSuiteValidationResult], index: Path,
               seconds: float) -> ExpectationsSummary:
    evaluated, failures = 0, []
    for suite_result in results:
        for result in suite_result.results:
            evaluated += 1
            if not result.success:
                failures.append(_failure(result))
    success = not any(f.severity == "error" for f in failures)
    return ExpectationsSummary(success, evaluated, failures, index, seconds)


def _failure(result: ExpectationValidationResult) -> Failure:
    meta = result.expectation_config.meta or {}
    table, _, rule = str(meta.get("rule", "?.?")).partition(".")
    return Failure(table, rule, str(meta.get("severity", "error")),
                   str(meta.get("description", "")), observed_detail(result))


def observed_detail(result: ExpectationValidationResult) -> str:
    """What GX saw, in one line: an error, a count of unexpected rows, or a value."""
    error = _exception_message(result.exception_info or {})
    if error:
        return f"error: {error}"
    found = result.result or {}
    if "unexpected_count" in found:
        sample = found.get("partial_unexpected_list") or []
        example = f", e.g. {sample[:5]!r}" if sample else ""
        count = f"{found['unexpected_count']} of {found.get('element_count')} rows unexpected"
        return count + example
    return f"observed {found.get('observed_value')!r}"


def _exception_message(info: Mapping[str, Any]) -> str | None:
    """The first line of the error that made GX give up on an expectation, if any.

    GX reports an expectation that raised flat, and a metric that raised (a broken query,
    a missing column) as ``{metric id: info}``; either way the rule counts as failed.
    """
    for candidate in (info, *(v for v in info.values() if isinstance(v, Mapping))):
        if candidate.get("raised_exception"):
            lines = str(candidate.get("exception_message") or "").strip().splitlines()
            return (lines[0] if lines else "unknown error")[:300]
    return None


# --------------------------------------------------------------------------- pandas SQL rules


class UnexpectedRowsOnPandas(QueryMetricProvider):
    """UnexpectedRowsExpectation's offending rows on a pandas batch (GX has none there)."""

    metric_name = "unexpected_rows_query.table"
    value_keys = ("unexpected_rows_query",)
    query_param_name = "unexpected_rows_query"

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine: PandasExecutionEngine, metric_domain_kwargs: dict,
                metric_value_kwargs: dict, metrics: dict, runtime_configuration: dict,
                ) -> list[dict]:
        return offending_rows(cls, execution_engine, metric_domain_kwargs,
                              metric_value_kwargs).to_pylist()[:MAX_RESULT_RECORDS]


class UnexpectedRowCountOnPandas(QueryMetricProvider):
    """UnexpectedRowsExpectation's count of offending rows on a pandas batch."""

    metric_name = "unexpected_rows_query.row_count"
    value_keys = ("unexpected_rows_query",)
    query_param_name = "unexpected_rows_query"

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine: PandasExecutionEngine, metric_domain_kwargs: dict,
                metric_value_kwargs: dict, metrics: dict, runtime_configuration: dict) -> int:
        return offending_rows(cls, execution_engine, metric_domain_kwargs,
                              metric_value_kwargs).num_rows


def offending_rows(provider: type[QueryMetricProvider], execution_engine: PandasExecutionEngine,
                   metric_domain_kwargs: dict, metric_value_kwargs: dict) -> pa.Table:
    """A contract SQL rule's rows on the batch, in DuckDB: the Spark SQL translated, the
    batch given as the columns the rule names (Arrow from the pandas frame)."""
    frame, _, _ = execution_engine.get_compute_domain(metric_domain_kwargs,
                                                      domain_type=MetricDomainTypes.TABLE)
    query = to_duckdb(provider._format_query(
        provider._get_query_from_metric_value_kwargs(metric_value_kwargs), batch="batch"))
    # GX asks for a rule's row count and its rows as two metrics: run the query once.
    answered = _answers_of(frame)
    if query not in answered:
        answered[query] = _rule_rows(frame, query)
    return answered[query]


# {id(frame): {query: rows}} of the frames alive; a frame's entry goes when the frame does,
# so an id is never taken for another frame's (a frame GX derives gets its own).
_ANSWERS: dict[int, dict[str, pa.Table]] = {}


def _answers_of(frame: pd.DataFrame) -> dict[str, pa.Table]:
    key = id(frame)
    if key not in _ANSWERS:
        _ANSWERS[key] = {}
        weakref.finalize(frame, _ANSWERS.pop, key, None)
    return _ANSWERS[key]


def _rule_rows(frame: pd.DataFrame, query: str) -> pa.Table:
    import sqlglot
    from sqlglot import exp

    named = {column.name for column in sqlglot.parse_one(query, read="duckdb")
             .find_all(exp.Column)}
    shared = frame.attrs.get(ARROW_ROWS)
    rows = shared.table if shared is not None else None
    if rows is not None and rows.num_rows == len(frame):
        batch = rows.select([c for c in rows.column_names if c in named])
    else:  # a frame GX derived from the batch: its own columns
        batch = pa.Table.from_pandas(frame[[c for c in frame.columns if c in named]],
                                     preserve_index=False)
    with _rules_database().cursor() as connection:
        connection.register("batch", batch)
        return connection.sql(query).to_arrow_table()


def _rules_database() -> duckdb.DuckDBPyConnection:
    """This process's in-memory DuckDB (UTC) for the rules' queries, each on a cursor of its
    own (its own ``batch`` view). Opening a database costs ~25 ms of CPU, a cursor next to
    nothing: a database per query was 1.2 of a small check's ~13 CPU-s (48 queries)."""
    return _database_of(os.getpid())


@functools.cache
def _database_of(pid: int) -> duckdb.DuckDBPyConnection:
    """Keyed by process id: a forked child never uses its parent's database."""
    import duckdb

    database = duckdb.connect()
    database.execute("SET GLOBAL TimeZone = 'UTC'").fetchall()  # every cursor's too
    return database
