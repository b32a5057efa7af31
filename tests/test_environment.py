"""The pinned stack is what is installed: one full pyspark, matching Delta jars."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

import pyspark
import pytest

from jobs.lakehouse.jars import check_python_agrees, pom_versions

REPO_ROOT = Path(__file__).resolve().parent.parent


def locked_versions() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, _, pinned = line.strip().partition("==")
            pins[name.lower()] = pinned
    return pins


def test_exactly_one_full_pyspark_is_installed() -> None:
    names = [dist.metadata["Name"].lower() for dist in distributions()]
    assert names.count("pyspark") == 1
    # pyspark-client (pulled in by the Airflow Spark provider) would overwrite the
    # pyspark package with a client-only one that has no JVM jars.
    with pytest.raises(PackageNotFoundError):
        version("pyspark-client")
    jars = Path(pyspark.__file__).parent / "jars"
    assert any(jar.name.startswith("spark-core_2.13-") for jar in jars.glob("*.jar"))


@pytest.mark.parametrize(
    "package",
    ["pyspark", "delta-spark", "apache-airflow", "great-expectations", "pandas", "pyarrow"],
)
def test_installed_version_equals_lock(package: str) -> None:
    assert version(package) == locked_versions()[package]


def test_delta_jars_agree_with_python_packages() -> None:
    versions = pom_versions()
    check_python_agrees(versions)
    assert versions.delta == version("delta-spark")
    assert pyspark.__version__.startswith(versions.spark_binary + ".")
