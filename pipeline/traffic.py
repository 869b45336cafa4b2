"""Traffic per tumbling event-time window: packets and bytes (wire length) per IP protocol.

:class:`SlidingTraffic` runs on the shared micro-batch (``pipeline.job``): its stage 1 — packets
and bytes per (window, protocol) — is one of the counting queries ``pipeline.partials`` runs in
one pass for every counting kind; the batch's counts (a few thousand rows at most) are merged on
the driver into the open windows, which stay in a small state beside the checkpoint
(``pipeline.batch_state``). It
follows Spark's rules for a windowed aggregation in append mode, so the rows are those the
streaming aggregation (:func:`build_traffic`, kept for ``netmon bench``) writes: the batch moves
the watermark to its largest event time (ms) − the delay, never back; a window is written once,
when the watermark reaches its end; a row whose window the watermark had already reached before
the batch is late (counted, left out). A batch run again after a crash starts from the state
before it and rewrites the same rows.

Under the intake drop box (``[resources] manage``, docs/overload.md) the counts are
Horvitz–Thompson estimates, and each row says the fraction and the packets' interval.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.sampling import count_interval
from netmon.config import Config
from pipeline.batch_sink import write_table
from pipeline.batch_state import BatchState
from pipeline.partials import INTAKE, CountSpec

__all__ = ["OUTPUT_SCHEMA", "SlidingTraffic", "build_traffic", "build_traffic_batch"]

log = logging.getLogger(__name__)

#: The stage-1 query name of the traffic kind (``pipeline.partials``).
SPEC = "traffic/"

#: The rows of ``results/traffic/``.
OUTPUT_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("proto", pa.int16()),
        ("packets", pa.int64()),
        ("bytes", pa.int64()),
        # The precision (docs/overload.md): 1 and the count itself when exact; under the intake
        # drop box the smallest fraction the window's records were read at, and the packets'
        # 95 % interval (analytics.sampling.count_interval); bytes are scaled, without one.
        ("keep", pa.float64()),
        ("packets_low", pa.int64()),
        ("packets_high", pa.int64()),
    ]
)


def build_traffic(packets: DataFrame, window_s: float) -> DataFrame:
    """Spark's streaming form: ``window_start, window_end, proto, packets, bytes`` per closed window."""
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


class SlidingTraffic:
    """The traffic kind on each micro-batch (decoded packets with their control rows).

    Parameters
    ----------
    results, checkpoint
        ``results/traffic/`` and the kind's checkpoint directory (its state goes in ``state/``).
    window_s
        The tumbling window, ``[pipeline] traffic_window_s``.
    watermark_ms
        The watermark delay, ``[pipeline] watermark_s`` in milliseconds.
    """

    def __init__(self, results: Path, checkpoint: Path, *, window_s: float, watermark_ms: int) -> None:
        self.results = Path(results)
        self.state = BatchState(Path(checkpoint) / "state")
        self.window_us = round(window_s * 1_000_000)
        self.delay_ms = watermark_ms
        #: late rows skipped by this process's batches
        self.late_rows = 0
        #: rows of state after the last batch, the open (window, protocol) counts (the ``sys``
        #: rows' ``traffic_state_rows``); None before the first
        self.state_rows: int | None = None
        #: the intake drop box's fraction in force for the next batch (:meth:`sample`)
        self.intake = 1.0

    def sample(self, keep: dict[str, float]) -> None:
        """The drop boxes' fractions of the next batch: traffic reads only the intake box's."""
        self.intake = float(keep.get(INTAKE, 1.0))

    @property
    def specs(self) -> tuple[CountSpec, ...]:
        """Stage 1: packets (records) and bytes (weight) per (window, protocol)."""
        return (CountSpec(SPEC, ("proto",), "bytes", self.window_us, keep_null_key=True, intake=self.intake),)

    def apply(self, counts: pa.Table, max_us: int | None, batch_id: int) -> None:
        """Merge the batch's counts (``pipeline.partials``) into the open windows; commit the closed."""
        before = self.state.load(batch_id) or {"watermark_ms": None, "open": []}
        w = self.window_us
        watermark_ms = before["watermark_ms"]
        closed_before = None if watermark_ms is None else watermark_ms * 1000
        keeps = [(int(lo), int(hi), float(x)) for lo, hi, x in before.get("keeps", [])]
        if self.intake < 1 and max_us is not None:
            # Every window this batch's records could reach was read at the fraction: from the
            # first one open before it (or its oldest record's) to its newest record's.
            hi = max_us // w * w
            if closed_before is not None:
                lo = closed_before // w * w
            else:
                starts = [sw * w for sw in counts["sw"].to_pylist()]
                lo = min(starts, default=hi)
            keeps.append((lo, hi, self.intake))
        open_windows: dict[tuple[int, int | None], list[int]] = {
            (s, p): [n, b] for s, p, n, b in before["open"]
        }
        late = 0
        for sw, key, packets, size in zip(
            counts["sw"].to_pylist(),
            counts["key"].to_pylist(),
            counts["records"].to_pylist(),
            counts["weight"].to_pylist(),
            strict=True,
        ):
            start = sw * w
            if closed_before is not None and start + w <= closed_before:
                late += packets
                continue
            total = open_windows.setdefault((start, None if key is None else int(key)), [0, 0])
            total[0] += packets
            total[1] += size
        if max_us is not None:
            moved = max_us // 1000 - self.delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
        closing = None if watermark_ms is None else watermark_ms * 1000
        done = sorted(
            (key for key in open_windows if closing is not None and key[0] + w <= closing),
            key=lambda k: (k[0], -1 if k[1] is None else k[1]),
        )
        write_table(_rows(done, open_windows, w, keeps), self.results, batch_id)
        for key in done:
            del open_windows[key]
        if closing is not None:  # a range matters while a window it reached may still close
            keeps = [r for r in keeps if r[1] + w > closing]
        saved: dict[str, Any] = {
            "watermark_ms": watermark_ms,
            "open": [[s, p, n, b] for (s, p), (n, b) in open_windows.items()],
        }
        if keeps:
            saved["keeps"] = [list(r) for r in keeps]
        self.state.save(batch_id, saved)
        self.late_rows += late
        self.state_rows = len(open_windows)
        log.debug(
            "traffic batch",
            extra={"batch": batch_id, "closed": len(done), "open": len(open_windows), "late": late},
        )


def _rows(
    keys: list[tuple[int, Any]],
    counts: dict[tuple[int, Any], list[int]],
    w: int,
    keeps: list[tuple[int, int, float]] = [],  # noqa: B006 (read only)
) -> pa.Table:
    starts = [s for s, _ in keys]
    fractions = [min((x for lo, hi, x in keeps if lo <= s <= hi), default=1.0) for s in starts]
    packets = [counts[k][0] for k in keys]
    bounds = [count_interval(n, x) for n, x in zip(packets, fractions, strict=True)]
    return pa.table(
        {
            "window_start": pa.array(starts, pa.timestamp("us", tz="UTC")),
            "window_end": pa.array([s + w for s in starts], pa.timestamp("us", tz="UTC")),
            "proto": pa.array([p for _, p in keys], pa.int16()),
            "packets": pa.array(packets, pa.int64()),
            "bytes": pa.array([counts[k][1] for k in keys], pa.int64()),
            "keep": pa.array(fractions, pa.float64()),
            "packets_low": pa.array([math.floor(low) for low, _ in bounds], pa.int64()),
            "packets_high": pa.array([math.ceil(high) for _, high in bounds], pa.int64()),
        },
        schema=OUTPUT_SCHEMA,
    )


def build_traffic_batch(cfg: Config, results: Path, checkpoint: Path) -> SlidingTraffic:
    """The traffic kind's function on the shared micro-batch."""
    return SlidingTraffic(
        results,
        checkpoint,
        window_s=cfg.pipeline.traffic_window_s,
        watermark_ms=round(cfg.pipeline.watermark_s * 1000),
    )
