"""The JVM jars Spark needs besides its own (Delta Lake, S3A), fetched once from Maven Central.

``jvm/pom.xml`` names the artifacts; ``mvn dependency:copy-dependencies`` copies them and
their runtime dependencies (minus what pyspark already ships) into a cache folder keyed
by the Delta version and the pom's content, so a changed pom fetches again. Later calls
find the folder complete and touch no network, so a SparkSession with Delta works
offline after the first run.

We use Maven rather than Spark's own ``spark.jars.packages`` (Ivy) resolution because
Ivy re-resolves against remote repositories at every session start, which is slow and
fails offline.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib.metadata import version as installed_version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
POM = REPO_ROOT / "jvm" / "pom.xml"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "jars"
COMPLETE_MARKER = ".complete"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


class JarSetupError(RuntimeError):
    """The Delta jars are missing and could not be fetched, or versions disagree."""


@dataclass(frozen=True)
class JvmVersions:
    """The versions jvm/pom.xml pins; they must agree with the installed Python packages."""

    delta: str
    spark_binary: str
    scala_binary: str

    @property
    def delta_artifact(self) -> str:
        return f"io.delta:delta-spark_{self.spark_binary}_{self.scala_binary}:{self.delta}"


def pom_versions(pom: Path = POM) -> JvmVersions:
    """Read the pinned versions from the pom's <properties>."""
    properties = ET.parse(pom).getroot().find("m:properties", _POM_NS)
    if properties is None:
        raise JarSetupError(f"{pom} has no <properties> section")

    def prop(name: str) -> str:
        element = properties.find(f"m:{name}", _POM_NS)
        if element is None or not (element.text or "").strip():
            raise JarSetupError(f"{pom} does not set <{name}>")
        return element.text.strip()

    return JvmVersions(prop("delta.version"), prop("spark.binary.version"),
                       prop("scala.binary.version"))


def check_python_agrees(versions: JvmVersions) -> None:
    """Fail early when pip-installed pyspark / delta-spark do not match the jars."""
    pyspark_version = installed_version("pyspark")
    delta_version = installed_version("delta-spark")
    if ".".join(pyspark_version.split(".")[:2]) != versions.spark_binary:
        raise JarSetupError(
            f"pyspark {pyspark_version} does not match the Delta jars built for Spark "
            f"{versions.spark_binary} (jvm/pom.xml)"
        )
    if delta_version != versions.delta:
        raise JarSetupError(
            f"delta-spark {delta_version} (Python) does not match Delta jars "
            f"{versions.delta} (jvm/pom.xml)"
        )


def jar_dir(cache: Path | None = None, versions: JvmVersions | None = None) -> Path:
    versions = versions or pom_versions()
    cache = cache or Path(os.environ.get("RMQ_JARS_CACHE", DEFAULT_CACHE))
    pom_digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:8]
    return cache / f"delta-{versions.delta}-spark{versions.spark_binary}-{pom_digest}"


def ensure_delta_jars(cache: Path | None = None) -> list[Path]:
    """Return the Delta jar paths, running Maven once to fetch them if needed."""
    versions = pom_versions()
    target = jar_dir(cache, versions)
    if not (target / COMPLETE_MARKER).exists():
        _fetch_with_maven(target, versions)
    jars = sorted(target.glob("*.jar"))
    for expected in ("delta-spark_", "hadoop-aws-"):
        if not any(jar.name.startswith(expected) for jar in jars):
            raise JarSetupError(f"{target} holds no {expected}* jar; delete it and retry")
    return jars


def _fetch_with_maven(target: Path, versions: JvmVersions) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarSetupError("Maven (mvn) is not on PATH; it is needed once to fetch Delta jars")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    command = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise JarSetupError(f"Maven could not fetch the Delta jars:\n{tail}")
    (staging / COMPLETE_MARKER).write_text(versions.delta_artifact + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def main() -> int:
    """``python -m jobs.lakehouse.jars``: fetch the jars (if needed) and list them."""
    try:
        check_python_agrees(pom_versions())
        for jar in ensure_delta_jars():
            print(jar)
    except JarSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
