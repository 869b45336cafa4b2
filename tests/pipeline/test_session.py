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
    assert netmon_config.spark.java_options == "-XX:TieredStopAtLevel=1"
    assert "-XX:TieredStopAtLevel=1" in arguments
    assert spark.conf.get("spark.executor.defaultJavaOptions") == "-XX:TieredStopAtLevel=1"
