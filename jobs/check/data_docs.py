"""A broker's Data Docs at a cost that does not grow with the nights behind them.

Every check run adds one validation result per table to the broker's GX project, and GX
keeps them all: at night 100 its site builder walked 2,600 results (10,000 directories)
and its index builder loaded the newest 600 in full (JSON through marshmallow), every
night, to show each one's success, asset and batch. Two things keep a night's cost flat:

* **Retention** (:func:`keep_newest_runs`): before a run, the results of all but the
  newest ``KEPT_RUNS - 1`` earlier runs are removed from the validations store; the
  index build of the run then removes their pages (GX's ``skip_and_clean_missing``),
  and the next night's retention their emptied directories.
  The durable record of a night's checks is the lakehouse (``check_results``, the
  ``alerts`` table with every failed rule) and the nightly report; Data Docs show the
  newest week in full detail.
* **Summaries** (:class:`SummarizedSiteIndexBuilder`, selected by
  :data:`jobs.check.expectations.DOCS_SITE_CONFIG`): the three things the index shows of
  a result are kept in ``uncommitted/rmq_docs_index.json`` of the project, so a build
  loads only the results that file does not know yet: one run's. The page is GX's own
  (same renderer, same rows).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from great_expectations.core import ExpectationSuiteValidationResult
from great_expectations.data_context.types.resource_identifiers import (
    ValidationResultIdentifier,
)
from great_expectations.render.renderer.site_builder import (
    DefaultSiteIndexBuilder,
    _resolve_asset_name,
)

if TYPE_CHECKING:
    from great_expectations.data_context import AbstractDataContext

log = logging.getLogger(__name__)

DOCS_SITE = "local_site"  # the site GX scaffolds (expectations.DOCS_SITE_CONFIG changes it)
SUMMARIES_FILE = "rmq_docs_index.json"
KEPT_RUNS = 7  # check runs (nights) whose results and pages a broker's Data Docs keep


def keep_newest_runs(context: AbstractDataContext, runs: int = KEPT_RUNS - 1) -> int:
    """Remove the validation results of all but the newest ``runs`` check runs from the
    project's validations store; returns how many were removed. (Their Data Docs pages go
    at the next index build, which drops pages whose result is gone.)"""
    store = context.validation_results_store
    keys = store.list_keys()
    newest = sorted({key.run_id.to_tuple() for key in keys}, key=lambda run: run[1],
                    reverse=True)[:runs]
    kept = set(newest)
    removed = 0
    for key in keys:
        if key.run_id.to_tuple() not in kept:
            store.remove_key(key)
            removed += 1
    if removed:
        log.info("Data Docs: %d validation result(s) of runs older than the newest %d "
                 "removed", removed, runs)
    # GX's own clean-up of a removed result's directories never runs (its TupleFilesystem
    # backend tests ``not Path.iterdir()``, a generator, which is never false), so the
    # directories of every result and page ever written would pile up (3,500 at night 33)
    # and every later listing walk them: remove the empty ones, results and pages alike.
    for directory in (Path(store.store_backend.full_base_directory),
                      _site_validations(context)):
        remove_empty_directories(directory)
    return removed


def docs_index_page(context: AbstractDataContext) -> Path:
    """The site's index page on disk."""
    url = context.get_docs_sites_urls(site_name=DOCS_SITE)[0]["site_url"]
    return Path(unquote(urlparse(url).path))


def _site_validations(context: AbstractDataContext) -> Path:
    """The site's folder of validation result pages."""
    return docs_index_page(context).parent / "validations"


def remove_empty_directories(root: Path) -> None:
    """Remove every empty directory below ``root`` (deepest first; ``root`` is kept)."""
    if not root.is_dir():
        return
    for directory, subdirectories, files in os.walk(root, topdown=False):
        if directory != str(root) and not files and not any(
                (Path(directory) / sub).exists() for sub in subdirectories):
            with contextlib.suppress(OSError):  # a file appeared meanwhile: keep it
                os.rmdir(directory)


class SummarizedSiteIndexBuilder(DefaultSiteIndexBuilder):
    """GX's index builder, reading each listed validation result once in its life."""

    def _add_validations_to_index_links(  # type: ignore[override]
        self, index_links_dict: OrderedDict,
        validation_and_profiling_result_site_keys: list[ValidationResultIdentifier],
    ) -> None:
        keys = sorted(validation_and_profiling_result_site_keys,
                      key=lambda key: key.run_id.run_time, reverse=True)
        if self.validation_results_limit:
            keys = keys[:self.validation_results_limit]
        known = self._load_summaries()
        listed: dict[str, dict[str, Any]] = {}
        for key in keys:
            name = json.dumps(key.to_tuple())
            summary = known.get(name) or self._summary(key)
            if summary is None:
                continue
            listed[name] = summary
            self.add_resource_info_to_index_links_dict(
                index_links_dict=index_links_dict,
                expectation_suite_name=key.expectation_suite_identifier.name,
                section_name="validations", batch_identifier=key.batch_identifier,
                run_id=key.run_id, validation_success=summary["success"],
                run_time=key.run_id.run_time, run_name=key.run_id.run_name,
                asset_name=summary["asset_name"], batch_kwargs=summary["batch_kwargs"],
                batch_spec=summary["batch_spec"])
        self._save_summaries(listed)  # only what the page lists: the file stays small

    def _summary(self, key: ValidationResultIdentifier) -> dict[str, Any] | None:
        """What the index shows of one result, read from the validations store."""
        result = self.data_context.get_validation_result(
            batch_identifier=key.batch_identifier,
            expectation_suite_name=key.expectation_suite_identifier.name,
            run_id=key.run_id,
            validation_results_store_name=self.source_stores.get("validations"))
        if not isinstance(result, ExpectationSuiteValidationResult):
            log.warning("Data Docs index: validation result %s not found, skipped",
                        key.to_tuple())
            return None
        # through JSON, as a summary read back from the file would be
        return json.loads(json.dumps({
            "success": result.success, "asset_name": _resolve_asset_name(result),
            "batch_kwargs": result.meta.get("batch_kwargs", {}),
            "batch_spec": result.meta.get("batch_spec", {})}, default=str))

    def _summaries_path(self) -> Path:
        return Path(self.data_context.root_directory) / "uncommitted" / SUMMARIES_FILE

    def _load_summaries(self) -> dict[str, dict[str, Any]]:
        try:
            return json.loads(self._summaries_path().read_text())
        except (OSError, ValueError):  # none yet, or torn: every listed result is read
            return {}

    def _save_summaries(self, summaries: dict[str, dict[str, Any]]) -> None:
        path = self._summaries_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(summaries))
        partial.replace(path)
