"""Where the warehouse and the snapshots live: local directories or an S3 bucket.

A :class:`Location` is a directory or file of the warehouse, either a local path (or a
shared filesystem mounted at the same path on every host, docs/spark-cluster.md) or a key
prefix in an S3-compatible bucket (``s3://bucket/prefix``). Delta tables are read and
written there by delta-rs, which takes the location's URI as it is; the few other files
the product keeps beside its tables (task reports, leases, scratch files of a merge) go
through the small API here, so every caller works on both.

Object stores are reached the way the ecosystem passes them: the standard ``AWS_*``
environment variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``), which delta-rs, pyarrow
and obstore read alike. Nothing here writes a credential anywhere.

A URI must never be taken for a path: ``Path("s3://rmq/wh")`` is the relative directory
``s3:/rmq/wh``, so a load told to write to a bucket would exit 0 with every table on the
local disk. Every place a location enters goes through :func:`warehouse_location` or
:func:`local_directory`, which refuse what they cannot write in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

#: A URI's scheme, also as ``Path`` leaves it (``s3:/bucket``: one slash).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")
#: Object stores the warehouse may live in.
OBJECT_SCHEMES = ("s3",)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
#: The environment variables an S3 client is configured by (the store cache's key).
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP")
#: How long an object store request is retried: :func:`retry_seconds`.
RETRY_SECONDS_ENV = "RMQ_S3_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 120.0
#: Retries are bounded by time (:func:`retry_seconds`), not by count: a count high enough
#: never to be the limit first (backoff is capped at 10 s).
MAX_RETRIES = 1000


class UnsupportedLocationError(ValueError):
    """A location given as the URI of a store the product cannot write."""


def is_uri(text: str) -> bool:
    """Whether ``text`` names a scheme (``s3://``, ``file:/``, also ``s3:/`` as ``Path``
    leaves a URI), rather than being a path."""
    return _SCHEME.match(text) is not None


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
        f"{what} {text!r}: {scheme.group(1)}:// locations are not supported here; give a "
        "local directory (or a shared filesystem mounted at the same path on every host)")


def warehouse_location(location: str | Path | Location, what: str) -> Location:
    """The warehouse given as ``location``: an ``s3://bucket[/prefix]`` URI or a local
    directory (made absolute); any other URI is refused in one line naming ``what``."""
    if isinstance(location, Location):
        return location
    text = str(location)
    scheme = _SCHEME.match(text)
    if scheme is not None and scheme.group(1).lower() in OBJECT_SCHEMES:
        parsed = urlparse(text)
        if not text.lower().startswith(f"{scheme.group(1).lower()}://"):
            raise UnsupportedLocationError(
                f"{what} {text!r}: not an object store URI; give s3://bucket/prefix")
        if not _BUCKET.match(parsed.netloc):
            raise UnsupportedLocationError(
                f"{what} {text!r}: {parsed.netloc!r} is not a bucket name (3 to 63 lowercase "
                "letters, digits, dots and hyphens)")
        return Location(f"s3://{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/"))
    try:
        return Location(str(local_directory(text, what).resolve()))
    except UnsupportedLocationError:
        raise UnsupportedLocationError(
            f"{what} {text!r}: {scheme.group(1) if scheme else ''}:// locations are not "
            f"supported; give a local directory or {' or '.join(OBJECT_SCHEMES)}://bucket/"
            "prefix") from None


def checks_directory(warehouse: Location) -> Path:
    """Where the checks write their Data Docs and HTML reports unless told: beside the
    tables (``<warehouse>/_checks``) on a local warehouse; for a warehouse in an object
    store, the local directory ``.cache/checks/<bucket>/<prefix>`` of this checkout."""
    if warehouse.is_local:
        return warehouse.path / "_checks"
    return local_companion(warehouse, "checks")


def local_companion(warehouse: Location, kind: str, base: str | Path | None = None) -> Path:
    """A local directory, ``<base>/<bucket>/<prefix>`` (``base`` by default
    ``.cache/<kind>`` of this checkout), for what belongs to a location in an object store
    but must live on a disk (the checks' HTML, Spark's Derby catalog, a snapshot mirror)."""
    from jobs.lakehouse.jars import REPO_ROOT

    parsed = urlparse(warehouse.uri)
    return Path(base or REPO_ROOT / ".cache" / kind) / parsed.netloc / parsed.path.strip("/")


@dataclass(frozen=True)
class StoredFile:
    """One file found under a location: its path relative to it, size and mtime."""

    relative: str
    size: int
    modified: datetime


@dataclass(frozen=True)
class Location:
    """A directory or file: an absolute local path or ``s3://bucket/key``.

    ``str(location)`` is what delta-rs, pyarrow and DuckDB are given."""

    uri: str

    def __str__(self) -> str:
        return self.uri

    def __truediv__(self, part: str) -> Location:
        return Location(f"{self.uri.rstrip('/')}/{str(part).strip('/')}")

    @property
    def is_local(self) -> bool:
        return not self.uri.startswith(tuple(f"{s}://" for s in OBJECT_SCHEMES))

    @property
    def path(self) -> Path:
        """The local path; an object-store location has none (a bug to ask)."""
        if not self.is_local:
            raise TypeError(f"{self.uri} is in an object store, not a local path")
        return Path(self.uri)

    def native(self) -> Path | Location:
        """A local location as its ``Path``, an object-store one as itself: the warehouse as
        configuration and commands hand it on (both have ``/`` and ``str``)."""
        return self.path if self.is_local else self

    def as_uri(self) -> str:
        """``file:///...`` for a local path, the URI itself otherwise."""
        return self.path.as_uri() if self.is_local else self.uri

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.uri.rstrip("/").rsplit("/", 1)[0])

    # -- object-store plumbing ---------------------------------------------------------

    def store_and_key(self) -> tuple[Any, str]:
        """The obstore client of an object-store location's bucket, and its key (for
        conditional writes: jobs.lakehouse.leases)."""
        parsed = urlparse(self.uri)
        store = _bucket_store(parsed.netloc, _aws_settings(), retry_seconds())
        return store, parsed.path.strip("/")

    def arrow_filesystem(self) -> tuple[Any, str]:
        """pyarrow's own (C++) filesystem for this location, and the path in it: local, or
        S3 configured from the ``AWS_*`` environment with the client's standard retries."""
        from pyarrow import fs

        if self.is_local:
            return fs.LocalFileSystem(), str(self.path.resolve())
        parsed = urlparse(self.uri)
        return _arrow_s3(_aws_settings()), f"{parsed.netloc}/{parsed.path.strip('/')}"

    # -- reading ------------------------------------------------------------------------

    def exists(self) -> bool:
        """A file here, or a directory with anything in it."""
        return self.is_file() or self.is_dir()

    def is_file(self) -> bool:
        return self.path.is_file() if self.is_local else self.head() is not None

    def is_dir(self) -> bool:
        """A directory with anything in it (in an object store: one LIST of a key)."""
        return self.path.is_dir() if self.is_local else bool(self._list(limit_one=True))

    def head(self) -> dict[str, Any] | None:
        """An object's metadata (``e_tag``, ``last_modified``, ``size``); None when there
        is none. Object stores only (the leases' conditional writes)."""
        import obstore

        store, key = self.store_and_key()
        try:
            return obstore.head(store, key)
        except FileNotFoundError:
            return None

    def read_bytes(self) -> bytes:
        """The file's bytes; FileNotFoundError when there is none."""
        if self.is_local:
            return self.path.read_bytes()
        import obstore

        store, key = self.store_and_key()
        return bytes(obstore.get(store, key).bytes())

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def files(self) -> list[StoredFile]:
        """Every file below this directory (recursively), paths relative to it."""
        if self.is_local:
            if not self.path.is_dir():
                return []
            found = []
            for path in self.path.rglob("*"):
                if path.is_file():
                    stat = path.stat()
                    found.append(StoredFile(path.relative_to(self.path).as_posix(), stat.st_size,
                                            datetime.fromtimestamp(stat.st_mtime, UTC)))
            return found
        return self._list()

    def directories(self) -> list[str]:
        """Names of the directories right below this one (in an object store: the common
        prefixes of one delimited LIST, not a walk of everything below)."""
        if self.is_local:
            return sorted(p.name for p in self.path.iterdir() if p.is_dir()) \
                if self.path.is_dir() else []
        import obstore

        store, key = self.store_and_key()
        result = obstore.list_with_delimiter(store, f"{key}/" if key else None)
        return sorted(prefix.rstrip("/").rsplit("/", 1)[-1]
                      for prefix in result["common_prefixes"])

    def _list(self, limit_one: bool = False) -> list[StoredFile]:
        import obstore

        store, key = self.store_and_key()
        prefix = f"{key}/" if key else ""
        found = []
        for chunk in obstore.list(store, prefix or None, chunk_size=1 if limit_one else 1000):
            for meta in chunk:
                found.append(StoredFile(meta["path"][len(prefix):], meta["size"],
                                        meta["last_modified"]))
            if limit_one and found:
                break
        return found

    # -- writing ------------------------------------------------------------------------

    def write_bytes(self, data: bytes) -> None:
        """Replace the file with ``data`` at once: a reader sees the old or the new."""
        if self.is_local:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, self.path)
            return
        import obstore

        store, key = self.store_and_key()
        obstore.put(store, key, data)  # one PUT: atomic on every S3 store

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def create_bytes(self, data: bytes) -> bool:
        """Create the file with ``data`` unless it exists (then nothing changes): True when
        this call created it. Of many writers exactly one creates it: an object store's
        ``If-None-Match: *`` PUT, a hard link of a finished temporary file on a disk."""
        if self.is_local:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(data)
            try:
                os.link(temporary, self.path)
                return True
            except FileExistsError:
                return False
            finally:
                temporary.unlink()
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        store, key = self.store_and_key()
        try:
            obstore.put(store, key, data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            return False

    def put_file(self, local: Path) -> None:
        """Move the local file ``local`` here (a rename on a local disk, an upload to an
        object store, where the local file is then removed)."""
        if self.is_local:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, self.path)
            return
        import obstore

        store, key = self.store_and_key()
        obstore.put(store, key, local)  # multipart past obstore's chunk size
        local.unlink()

    def get_file(self, local: Path) -> None:
        """Copy this file to the local path ``local`` (a download, in one GET, from an
        object store; retried as every obstore request is)."""
        local.parent.mkdir(parents=True, exist_ok=True)
        if self.is_local:
            shutil.copyfile(self.path, local)
            return
        import obstore

        store, key = self.store_and_key()
        with local.open("wb") as out:
            for chunk in obstore.get(store, key).stream():
                out.write(chunk)

    def move_to(self, target: Location) -> None:
        """Move this file to ``target`` in the same store: a rename on a local disk; a
        server-side copy then a delete in an object store (no byte passes through here).
        A copy whose source is gone (a move done before) is FileNotFoundError."""
        if self.is_local:
            target.path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.path, target.path)
            return
        import obstore

        store, key = self.store_and_key()
        _, target_key = target.store_and_key()
        obstore.copy(store, key, target_key)
        obstore.delete(store, key)

    def delete(self) -> None:
        """Remove the file, if it is there."""
        if self.is_local:
            self.path.unlink(missing_ok=True)
            return
        import obstore

        store, key = self.store_and_key()
        obstore.delete(store, key)  # S3 deletes are idempotent

    def delete_tree(self) -> None:
        """Remove this directory and everything below it, if there is anything."""
        if self.is_local:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        self.delete_files([f.relative for f in self._list()])

    def delete_files(self, relatives: list[str]) -> None:
        """Remove these files below this directory (in an object store: deletes of up to
        1,000 keys a request)."""
        if self.is_local:
            for relative in relatives:
                (self.path / relative).unlink(missing_ok=True)
            return
        import obstore

        store, key = self.store_and_key()
        paths = [f"{key}/{relative}" for relative in relatives]
        for start in range(0, len(paths), 1000):
            obstore.delete(store, paths[start:start + 1000])

    def scratch_directory(self, name: str) -> Path:
        """A local working directory for files on their way here: beside this location on
        a local disk (so :meth:`put_file` is a rename), a temporary one otherwise."""
        if self.is_local:
            directory = self.path / name
            directory.mkdir(parents=True)
            return directory
        return Path(tempfile.mkdtemp(prefix=f"{name}-"))


def aws_environment(access_key: str | None, secret_key: str | None,
                    extra: dict[str, Any]) -> dict[str, str]:
    """The ``AWS_*`` variables an Airflow ``aws`` connection stands for: login and password
    are the keys; ``endpoint_url``, ``region_name`` and ``aws_session_token`` in its extra
    (the amazon provider's names); plain HTTP allowed when the endpoint says http://."""
    endpoint = extra.get("endpoint_url") or \
        (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    variables = {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key,
                 "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
                 "AWS_REGION": extra.get("region_name"), "AWS_ENDPOINT_URL": endpoint,
                 "AWS_ALLOW_HTTP": "true" if str(endpoint or "").startswith("http://") else None}
    return {k: str(v) for k, v in variables.items() if v}


def retry_seconds() -> float:
    """How long a request to an object store is retried before the step fails:
    ``RMQ_S3_RETRY_SECONDS``, 120 by default. Every client the product configures keeps
    to it (delta-rs through its storage options, obstore through its retry config), so a
    store that throttles or restarts within it costs a night only time; one that stays
    away fails the step after it, with one line naming the request."""
    text = os.environ.get(RETRY_SECONDS_ENV, "")
    if not text:
        return DEFAULT_RETRY_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise UnsupportedLocationError(
            f"{RETRY_SECONDS_ENV}={text!r}: give the seconds an object store request is "
            "retried for, a number > 0")
    return seconds


def delta_storage_options(location: str | Path | Location) -> dict[str, str] | None:
    """delta-rs' storage options for a table at ``location``: None on a local disk; in a
    bucket, object_store's retry settings (exponential backoff from 100 ms to 10 s,
    retried for :func:`retry_seconds`). The credentials and endpoint are not here: delta-rs
    reads them from the ``AWS_*`` environment. Without these options delta-rs gives up on
    a store that does not answer after about 1.7 s (measured, deltalake 1.6.6)."""
    if Location(str(location)).is_local:
        return None
    return {"max_retries": str(MAX_RETRIES),
            "retry_timeout": f"{round(retry_seconds() * 1000)}ms",
            "backoff_config.init_backoff": "100ms", "backoff_config.max_backoff": "10s",
            "backoff_config.base": "2"}


def open_delta_table(location: str | Path | Location) -> Any:
    """delta-rs' handle of the table at ``location``, with :func:`delta_storage_options`:
    every delta-rs table the jobs open comes from here.

    Inside :func:`shared_table_handles` a thread opens each table once and is given the
    same handle again, brought up to date with the commits made since
    (``update_incremental``: only the log entries after its version are read). Opening a
    table reads its last checkpoint (``_last_checkpoint``, then the checkpoint's Parquet
    in ranged GETs): in a bucket, most of a night's requests were such re-openings
    (bench/README.md, "Object storage")."""
    from deltalake import DeltaTable

    shared = getattr(_handles, "tables", None)
    key = str(location)
    if shared is not None and key in shared:
        table = shared[key]
        table.update_incremental()
        return table
    table = DeltaTable(key, storage_options=delta_storage_options(location))
    if shared is not None:
        shared[key] = table
    return table


_handles = threading.local()


@contextmanager
def shared_table_handles() -> Iterator[None]:
    """Within the block, :func:`open_delta_table` gives this thread one handle per table
    (a load, a check, a maintenance: units of work in which no table is dropped and made
    again). Nested blocks share the outer one's handles."""
    outer = getattr(_handles, "tables", None)
    if outer is None:
        _handles.tables = {}
    try:
        yield
    finally:
        if outer is None:
            _handles.tables = None


def _aws_settings() -> tuple[tuple[str, str], ...]:
    return tuple((k, os.environ[k]) for k in AWS_VARIABLES if k in os.environ)


@lru_cache(maxsize=16)
def _bucket_store(bucket: str, settings: tuple[tuple[str, str], ...],
                  retry_for: float) -> Any:
    """One obstore client per bucket and configuration, configured from the ``AWS_*``
    environment (``settings`` is only the cache's key). Throttling and server errors are
    retried with exponential backoff for ``retry_for`` seconds by the client (obstore's
    retry configuration), as delta-rs' are (:func:`delta_storage_options`)."""
    from datetime import timedelta

    from obstore.store import S3Store

    return S3Store(bucket, retry_config={
        "max_retries": MAX_RETRIES, "retry_timeout": timedelta(seconds=retry_for),
        "backoff": {"init_backoff": timedelta(milliseconds=100),
                    "max_backoff": timedelta(seconds=10), "base": 2}})


@lru_cache(maxsize=4)
def _arrow_s3(settings: tuple[tuple[str, str], ...]) -> Any:
    """pyarrow's S3 filesystem as the ``AWS_*`` environment configures it."""
    from pyarrow import fs

    variables = dict(settings)
    endpoint = variables.get("AWS_ENDPOINT_URL")
    return fs.S3FileSystem(
        endpoint_override=endpoint, region=variables.get("AWS_REGION") or
        variables.get("AWS_DEFAULT_REGION"), allow_bucket_creation=False,
        scheme=urlparse(endpoint).scheme if endpoint else "https",
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=8))


__all__ = [
    "OBJECT_SCHEMES",
    "Location",
    "StoredFile",
    "UnsupportedLocationError",
    "checks_directory",
    "delta_storage_options",
    "is_uri",
    "local_directory",
    "open_delta_table",
    "retry_seconds",
    "warehouse_location",
]
