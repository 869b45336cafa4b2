"""Traffic per tumbling event-time window: packets and bytes (wire length) per IP protocol.

Append mode: a window is written once, when the watermark passes its end, so each Parquet row is
final and a restart from the checkpoint neither loses nor repeats one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from netmon.config import Config

__all__ = ["build_traffic", "build_traffic_outputs"]


def build_traffic(packets: DataFrame, window_s: float) -> DataFrame:
    """``window_start, window_end, proto, packets, bytes`` per closed window and protocol."""
    windowed = packets.groupBy(F.window("ts", f"{int(window_s * 1000)} milliseconds"), "proto").agg(
        F.count(F.lit(1)).alias("packets"),
        F.sum("wire_len").alias("bytes"),
    )
    return windowed.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "proto",
        "packets",
        "bytes",
    )


def build_traffic_outputs(packets: DataFrame, cfg: Config) -> dict[str, DataFrame]:
    return {"traffic": build_traffic(packets, cfg.pipeline.traffic_window_s)}
