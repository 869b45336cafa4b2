"""The SparkSession netmon builds (``pipeline.session.build_session``): its driver's log settings."""

from __future__ import annotations

from typing import Any


def test_driver_reads_netmons_log4j2_file_and_quiets_per_run_warnings(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    assert str(jvm.java.lang.System.getProperty("log4j2.configurationFile")).endswith(
        "/netmon/jvm/spark-log4j2.properties"
    )

    def level(name: str) -> str:
        return str(jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel())

    # Warned on every streaming query by design: quiet unless an error.
    assert level("org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream") == "ERROR"
    assert level("org.apache.spark.scheduler.DAGScheduler") == "ERROR"
    # Everything else keeps the root level ([spark] log_level, WARN by default).
    assert level("org.apache.spark.sql.execution.streaming.state.RocksDB") == "WARN"


def test_driver_jvm_runs_with_the_configured_java_options(spark: Any, netmon_config: Any) -> None:
    # [spark] java_options reaches the driver JVM's own arguments (the default stops the JIT at C1).
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = [str(a) for a in runtime.getInputArguments()]
    options = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert netmon_config.spark.java_options == options
    assert {"-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"} <= set(arguments)
    assert spark.conf.get("spark.executor.defaultJavaOptions") == options
    # Each streaming query runs its jobs in its own FAIR pool (pipeline.job starts them so).
    assert spark.conf.get("spark.scheduler.mode") == "FAIR"


def test_a_started_query_runs_its_jobs_in_its_own_pool(spark: Any, netmon_config: Any) -> None:
    from pipeline.job import POOL, _starter

    counted: list[int] = []

    def count(df: Any, batch_id: int) -> None:
        counted.append(df.count())  # a job, on the query's thread

    def writer() -> Any:
        source = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
        return source.writeStream.foreachBatch(count).queryName("pool-probe")

    scheduler = spark.sparkContext._jsc.sc()
    assert not scheduler.getPoolForName("pool-probe").isDefined()
    query = _starter(writer, netmon_config, True, None, "pool-probe")()
    query.awaitTermination(60)
    assert counted
    assert spark.sparkContext.getLocalProperty(POOL) is None  # the caller's thread is left as it was
    # Spark made the pool when the query's first job named it (an unlisted pool: made on the fly).
    assert scheduler.getPoolForName("pool-probe").isDefined()
    # netmon's two queries have their pools from the allocation file.
    assert scheduler.getPoolForName("packets").isDefined() and scheduler.getPoolForName("joins").isDefined()
