"""The one place a SparkSession is built: jars, state store, Python workers, quiet logs.

Spark gets the Kafka connector through ``spark.jars`` (local paths from netmon's jar cache), so it
never needs the network at run time; on a standalone cluster the driver serves those jars to the
executors. Python workers run the driver's own interpreter (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

from netmon.config import Config
from netmon.jvm_deps import ensure_jars

__all__ = ["build_session"]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def build_session(
    cfg: Config, app_name: str = "netmon", *, master: str | None = None, ui: bool = True
) -> SparkSession:
    """A SparkSession for netmon's jobs (``master`` overrides ``[spark] master``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark binds its driver (and UI) to this address: loopback unless the user says otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars = ensure_jars(cfg.paths.cache_dir, "spark-kafka").jars
    # Read when the driver JVM starts: quiets Spark's per-run warnings about what netmon chose.
    # A default, not extraJavaOptions: a user's own driver options still apply after it.
    log4j = Path(str(resources.files("netmon") / "jvm" / "spark-log4j2.properties"))
    pools = Path(str(resources.files("netmon") / "jvm" / "fair-scheduler.xml"))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or cfg.spark.master)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        # Commit a changelog per batch instead of a RocksDB snapshot: ~1 s less per stateful
        # operator and batch here (docs/performance.md, "Top-k in Spark").
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.driver.memory", cfg.spark.driver_memory)
        .config(
            "spark.driver.defaultJavaOptions",
            f"-Dlog4j2.configurationFile={log4j.as_uri()} {cfg.spark.java_options}".strip(),
        )
        .config("spark.executor.defaultJavaOptions", cfg.spark.java_options)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", str(ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        # One pool per streaming query (pipeline.job starts each in its own): the shared query's
        # tasks are not queued behind the join query's whole job, nor the other way round.
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", pools.as_uri())
        .config("spark.sql.streaming.metricsEnabled", "true")
        # Parquet timestamps as INT64 micros: pyarrow reads them without INT96 conversion.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(cfg.spark.log_level)
    return spark
