"""The jar fetcher: Spark's connector at exactly the installed PySpark version; second run offline."""

from __future__ import annotations

import pytest

from netmon import jvm_deps
from netmon.config import load_config


@pytest.fixture(scope="module")
def cache_dir():
    return load_config().paths.cache_dir


def test_spark_connector_matches_installed_pyspark(cache_dir) -> None:
    names = {p.name for p in jvm_deps.ensure_jars(cache_dir, "spark-kafka").jars}
    version = jvm_deps.installed_spark_version()
    assert f"spark-sql-kafka-0-10_2.13-{version}.jar" in names
    assert any(n.startswith("kafka-clients-3.") for n in names)
    assert any(n.startswith("commons-pool2-") for n in names)
    assert any(n.startswith("spark-token-provider-kafka-0-10_2.13-") for n in names)
    # Nothing PySpark already bundles (a second copy could shadow it).
    assert not any(n.startswith(("lz4", "snappy", "zstd", "slf4j", "scala-library")) for n in names)


def test_broker_jars_are_kafka_4_with_a_log4j2_backend(cache_dir) -> None:
    names = {p.name for p in jvm_deps.ensure_jars(cache_dir, "broker").jars}
    assert any(n.startswith("kafka_2.13-4.") for n in names)
    assert any(n.startswith("log4j-core-") for n in names)


def test_second_run_needs_neither_maven_nor_network(cache_dir, monkeypatch) -> None:
    jvm_deps.ensure_jars(cache_dir, "broker")
    monkeypatch.setattr(jvm_deps.shutil, "which", lambda name: None)
    assert jvm_deps.ensure_jars(cache_dir, "broker").jars


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(jvm_deps.shutil, "which", lambda name: None)
    with pytest.raises(jvm_deps.JvmDepsError, match=r"Maven \('mvn'\) not found on PATH"):
        jvm_deps.ensure_jars(tmp_path, "spark-kafka")


def test_unknown_profile() -> None:
    with pytest.raises(ValueError, match="profile"):
        jvm_deps.ensure_jars(None, "nope")  # type: ignore[arg-type]
