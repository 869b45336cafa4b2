"""The Kafka source and the wire-format decoder (``docs/wire-format.md``), native functions only.

``read_packets`` returns the decoded packet stream with the shared record columns, an event-time
watermark already declared on ``ts``. Watermark control messages take part in the watermark and
are dropped right after it; malformed lines and messages are counted (``observe``) and skipped.
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from netmon.config import Config
from netmon.kafka_security import spark_options
from netmon.records import SPARK_DDL, WIRE_FORMAT, WIRE_VERSION

__all__ = ["FIELD_COUNT", "decode_packets", "kafka_stream", "raw_messages", "read_packets"]

FIELD_COUNT = len(SPARK_DDL.split(","))

log = logging.getLogger(__name__)


def _header(name: str) -> Column:
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{name}'), 1).value").cast("string")


def kafka_stream(
    spark: SparkSession,
    cfg: Config,
    *,
    topic: str | None = None,
    min_partitions: int | None = None,
    max_offsets: int | None = None,
) -> DataFrame:
    """Raw Kafka records of the packets topic, from the earliest offset on a fresh checkpoint.

    ``[kafka]`` authentication and TLS become the source's ``kafka.*`` security options
    (:func:`netmon.kafka_security.spark_options`: the JAAS line with the password, which Spark
    redacts in its logs, and the PEM truststore).
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.kafka.bootstrap)
        .option("subscribe", topic or cfg.kafka.packets_topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        # Retention may delete data a stopped pipeline never read: report it, don't fail the job.
        .option("failOnDataLoss", "false")
    )
    for key, value in spark_options(cfg.kafka).items():
        reader = reader.option(key, value)
    if min_partitions:
        # A batch's offsets split into at least this many tasks: with one Kafka partition, one task
        # would leave all but one core idle.
        reader = reader.option("minPartitions", str(min_partitions))
    if max_offsets:
        # The shared query: its batch kinds hold the watermark at the slowest partition's pace
        # (pipeline.partials.merge_partials), so a cap lets no partition's records become late.
        reader = reader.option("maxOffsetsPerTrigger", max_offsets)
    elif cfg.spark.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", cfg.spark.max_offsets_per_trigger)
        if cfg.kafka.partitions > 1:
            # The watermark follows the newest event time over all partitions; a capped batch can
            # read one partition further into event time than another, whose records then arrive late.
            log.warning(
                "[spark] max_offsets_per_trigger with several Kafka partitions: records of a partition "
                "that lags in event time by more than [pipeline] watermark_s are dropped as late",
                extra={
                    "max_offsets_per_trigger": cfg.spark.max_offsets_per_trigger,
                    "partitions": cfg.kafka.partitions,
                    "watermark_s": cfg.pipeline.watermark_s,
                },
            )
    return reader.load()


def raw_messages(raw: DataFrame, max_future_s: float = 0.0) -> DataFrame:
    """Kafka records -> ``value, partition, offset, known, control, horizon_ns``: a row per message.

    ``known``: the message's ``netmon.format`` and ``netmon.version`` headers are this wire
    format's; ``control``: its ``netmon.control`` header (null on data messages); ``horizon_ns``
    (``max_future_s`` > 0): the event time, in ns, past which a record is from the future — the
    batch's wall-clock time (``current_timestamp()``, which Spark fixes per micro-batch and keeps
    for a rerun) plus ``max_future_s``. ``pipeline.partials.decode_messages`` decodes them with
    the rules :func:`decode_packets` applies in Spark.
    """
    known = _header("netmon.format").eqNullSafe(F.lit(WIRE_FORMAT)) & _header("netmon.version").eqNullSafe(
        F.lit(str(WIRE_VERSION))
    )
    if max_future_s > 0:
        horizon = (F.unix_micros(F.current_timestamp()) + F.lit(round(max_future_s * 1e6))) * 1000
    else:
        horizon = F.lit(None).cast("long")
    # The offset places each message for the intake drop box (pipeline.partials.decode_messages).
    offset = [F.col("offset")] if "offset" in raw.columns else []
    return raw.select(
        F.col("value"),
        F.col("partition"),
        *offset,
        known.alias("known"),
        _header("netmon.control").alias("control"),
        horizon.alias("horizon_ns"),
    )


def decode_packets(
    raw: DataFrame,
    watermark_s: float,
    *,
    keep_control: bool = False,
    keep_malformed: bool = False,
    max_future_s: float = 0.0,
) -> DataFrame:
    """Kafka records -> one row per packet (``ts``, ``ts_ns`` and the record columns), watermarked.

    ``keep_control``: control rows stay, flagged ``is_control`` (their record columns null).
    ``keep_malformed`` (with ``keep_control``): malformed lines stay too, flagged ``is_malformed``,
    for a ``foreachBatch`` consumer that counts them itself (Spark does not report the
    ``observe`` metrics of a plan a ``foreachBatch`` function runs).
    ``max_future_s`` (> 0): a record or control message whose event time is more than this ahead of
    the batch's wall-clock time (``current_timestamp()``, fixed per batch, so a rerun decides the
    same) is from a broken clock or a hostile writer — years 2242 from a wrapped pcapng offset —
    and would make every later record late: it is counted (``future``) and dropped, and never
    moves the watermark. With ``keep_malformed`` such rows stay, flagged ``is_future``.
    """
    # Messages: known format and version, or counted as malformed.
    known = _header("netmon.format").eqNullSafe(F.lit(WIRE_FORMAT)) & _header("netmon.version").eqNullSafe(
        F.lit(str(WIRE_VERSION))
    )
    messages = raw.select(
        F.col("value").cast("string").alias("value"),
        known.alias("known"),
        _header("netmon.control").alias("control"),
    )
    # Lines: one per packet record; a control message is one line holding its event time.
    lines = messages.select("known", "control", F.explode(F.split(F.col("value"), "\n")).alias("line")).where(
        F.col("line") != ""
    )
    # Records: CSV fields parsed natively; a record must have exactly the format's field count.
    parsed = lines.select(
        "known",
        "control",
        (F.size(F.split("line", ",", -1)) == FIELD_COUNT).alias("complete"),
        F.from_csv("line", SPARK_DDL, {"mode": "PERMISSIVE"}).alias("r"),
        F.when(F.col("control") == "watermark", F.col("line")).alias("control_ts"),
    )
    rows = parsed.select(
        "*",
        F.coalesce(F.col("r.ts_ns"), F.expr("try_cast(control_ts AS BIGINT)")).alias("event_ns"),
    )
    # Both flags are never null, so every line is exactly one of packet, control or malformed.
    is_packet = F.col("known") & F.col("control").isNull() & F.col("complete") & F.col("r.ts_ns").isNotNull()
    is_control = (
        F.col("known")
        & F.coalesce(F.col("control") == "watermark", F.lit(False))
        & F.col("event_ns").isNotNull()
    )
    if max_future_s > 0:
        horizon_ns = (F.unix_micros(F.current_timestamp()) + F.lit(round(max_future_s * 1e6))) * 1000
        is_future = (is_packet | is_control) & F.coalesce(F.col("event_ns") > horizon_ns, F.lit(False))
    else:
        is_future = F.lit(False)
    counted = rows.observe(
        "decode",
        F.count(F.lit(1)).alias("lines"),
        F.sum((is_packet & ~is_future).cast("long")).alias("packets"),
        F.sum((is_control & ~is_future).cast("long")).alias("control"),
        F.sum((~(is_packet | is_control)).cast("long")).alias("malformed"),
        F.sum(is_future.cast("long")).alias("future"),
    )
    # Event time: Spark timestamps are microseconds; ts_ns keeps the exact value.
    kept = counted if keep_malformed else counted.where((is_packet | is_control) & ~is_future)
    flags = [(~(is_packet | is_control)).alias("is_malformed"), is_future.alias("is_future")]
    timed = kept.select(
        F.timestamp_micros(F.expr("event_ns div 1000")).alias("ts"),
        is_control.alias("is_control"),
        *(flags if keep_malformed else []),
        "r.*",
    )
    # Declared once, on the decoded stream; control rows advance it and are dropped after it.
    watermarked = timed.withWatermark("ts", f"{int(watermark_s * 1000)} milliseconds")
    if keep_control:
        return watermarked
    # The optimizer pushes a filter below the watermark unless it references the event-time
    # column; pushed down, it would hide control rows from the watermark. `ts` is never null here.
    return watermarked.where(~F.col("is_control") | F.col("ts").isNull()).drop("is_control")


def read_packets(
    spark: SparkSession,
    cfg: Config,
    *,
    topic: str | None = None,
    keep_control: bool = False,
    keep_malformed: bool = False,
) -> DataFrame:
    """The decoded, watermarked packet stream of the configured topic.

    ``keep_control``: keep watermark control rows, flagged by a boolean ``is_control`` column,
    for a consumer that tracks event time itself (the shared micro-batch of ``pipeline.job``);
    ``keep_malformed``: keep malformed lines too, flagged ``is_malformed``.
    """
    return decode_packets(
        kafka_stream(spark, cfg, topic=topic),
        cfg.pipeline.watermark_s,
        keep_control=keep_control,
        keep_malformed=keep_malformed,
        max_future_s=cfg.pipeline.max_future_s,
    )
