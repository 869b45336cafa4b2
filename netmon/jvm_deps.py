"""Fetch netmon's JVM dependencies from Maven Central into a local cache, once.

Two jar sets, resolved by ``netmon/jvm/pom.xml`` (the one place their versions are pinned):

- ``broker``: the Apache Kafka broker (``org.apache.kafka:kafka_2.13``) with its runtime dependencies
  and a log4j2 backend, run by :mod:`netmon.broker`;
- ``spark-kafka``: Spark's Kafka connector ``spark-sql-kafka-0-10_2.13`` at exactly the installed
  PySpark version, and its dependencies, given to Spark through ``spark.jars``.

Each set lands in ``<cache_dir>/jars/<profile>-<key>/`` with a ``.complete`` marker, where the key
is a digest of the POM, the settings and the Spark version: a second run finds the marker and
does not start Maven at all (offline, instant). The sets stay in separate directories because the
broker and the connector need different ``kafka-clients`` versions.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["JarSet", "JvmDepsError", "ensure_jars", "installed_spark_version"]

log = logging.getLogger(__name__)

PROFILES = ("broker", "spark-kafka")


class JvmDepsError(RuntimeError):
    """The jars could not be fetched; the message says why and what to do."""


@dataclass(frozen=True)
class JarSet:
    profile: str
    directory: Path

    @property
    def jars(self) -> list[Path]:
        return sorted(self.directory.glob("*.jar"))

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in self.jars)


def installed_spark_version() -> str:
    from importlib.metadata import version

    return version("pyspark")


def _resource(name: str) -> Path:
    return Path(str(resources.files("netmon") / "jvm" / name))


def _settings_file() -> Path:
    override = os.environ.get("NETMON_MAVEN_SETTINGS")
    return Path(override) if override else _resource("maven-settings.xml")


def _key(profile: str, spark_version: str) -> str:
    digest = hashlib.sha256()
    for part in (_resource("pom.xml").read_bytes(), _settings_file().read_bytes(), spark_version.encode()):
        digest.update(part)
    return f"{profile}-{digest.hexdigest()[:12]}"


def ensure_jars(cache_dir: Path, profile: str, *, quiet: bool = True) -> JarSet:
    """The jar set for ``profile``, fetched with Maven if it is not in the cache yet."""
    if profile not in PROFILES:
        raise ValueError(f"profile: expected one of {PROFILES}, got {profile!r}")
    spark_version = installed_spark_version()
    target = Path(cache_dir) / "jars" / _key(profile, spark_version)
    if (target / ".complete").exists():
        return JarSet(profile, target)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmDepsError(
            "Maven ('mvn') not found on PATH: install Maven (e.g. apt-get install maven) so netmon can fetch "
            "the Kafka broker and Spark's Kafka connector from Maven Central"
        )
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-s",
        str(_settings_file()),
        "-f",
        str(_resource("pom.xml")),
        "-P",
        profile,
        f"-Dspark.version={spark_version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
    ]
    cmd += ["-DexcludeTransitive=true"] if profile == "spark-kafka" else ["-DincludeScope=runtime"]
    if quiet:
        cmd.insert(2, "-q")
    log.info("fetching jars", extra={"profile": profile, "target": str(target)})
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
        reason = errors[0] if errors else (proc.stdout + proc.stderr).strip()[-500:]
        raise JvmDepsError(f"Maven could not fetch the {profile} jars: {reason.replace('[ERROR] ', '')}")
    if not any(staging.glob("*.jar")):
        raise JvmDepsError(f"Maven fetched no jars for profile {profile} into {staging}")
    (staging / ".complete").write_text(f"spark={spark_version}\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return JarSet(profile, target)
