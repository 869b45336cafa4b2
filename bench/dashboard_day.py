"""A day of results for the dashboard's render-time benchmark, written the pipeline's way.

Every kind a dashboard page reads, over 24 h of event time, in the layouts the pipeline leaves
(docs/results.md): ``traffic``, ``topk``, ``distinct``, ``shedding`` and ``sys`` committed per
micro-batch with ``pipeline.batch_sink.write_table`` (each commit's file time just after its
batch, as the pipeline writes it: the Resources and Pipeline pages search those times); the joins
in Spark's file-sink layout (part files named by ``_spark_metadata`` logs, compacted every ten
batches as Spark does); an alert outbox with a day of episodes (``alerts.outbox``, through the
real rule engine); and the pipeline's status file.

:data:`FULL` is the size of the replayed day of issue #21 — 86,400 one-second batches, 8.5M top-k
rows and 5.2M distinct rows (98 and 60 per second, over the default queries) — and takes minutes
and a few GB; :data:`PER_MINUTE` spans the same day with one batch and one report per minute
(about 1/60 of the rows), small enough for a test. The values follow simple deterministic
patterns: they only need to look like results to the pages, not to be the answers to a capture.
No Spark, no Kafka.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from alerts.outbox import Outbox, outbox_path
from alerts.rules import RuleEngine
from netmon.config import AlertRule, Config
from netmon.results import COMMITS, results_dir, status_file
from pipeline.batch_sink import write_table
from pipeline.shedding_controller import STATS_SCHEMA, SheddingRecord
from pipeline.sys_stats import BatchFigures, Knobs, sys_row, sys_table

__all__ = ["END", "FULL", "PER_MINUTE", "Day", "DaySize", "write_day"]

DAY_S = 86_400
#: where the generated day's event time ends (a replayed capture's: its results lie in the past)
END = dt.datetime(2024, 5, 2, 0, 0, 0, tzinfo=dt.UTC)
_US = pa.timestamp("us", tz="UTC")
_PROTOCOLS = (6, 17, 1)
#: packets per Kafka message (``netmon replay`` writes 1,000 records a message)
_PER_MESSAGE = 1000
#: Spark's file sink compacts its log every this many batches (``fileSink.log.compactInterval``)
_COMPACT_EVERY = 10
_JOIN_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("kind", pa.string()),
        ("row", pa.string()),
        ("key", pa.string()),
        ("left_ts", _US),
        ("right_ts", _US),
        ("delay_s", pa.float64()),
        ("left_src_ip", pa.string()),
        ("left_dst_ip", pa.string()),
        ("left_dst_port", pa.int32()),
        ("right_src_ip", pa.string()),
    ]
)
_DISTINCT_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("window_end", _US),
        ("group", pa.string()),
        ("distinct", pa.int64()),
        ("rank", pa.int32()),
    ]
)
_TOPK_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("window_end", _US),
        ("delta", pa.int64()),
        ("rank", pa.int32()),
        ("key", pa.string()),
        ("count", pa.int64()),
        ("total", pa.int64()),
    ]
)
_TRAFFIC_SCHEMA = pa.schema(
    [
        ("window_start", _US),
        ("window_end", _US),
        ("proto", pa.int16()),
        ("packets", pa.int64()),
        ("bytes", pa.int64()),
    ]
)


@dataclass(frozen=True)
class DaySize:
    """How much a day holds.

    ``batch_s``: a micro-batch (a commit of each per-batch kind, a ``sys`` row per query) every
    ``batch_s`` of event time; ``slide_s``: a traffic window, a top-k report and a distinct-count
    slide end every ``slide_s`` (a divisor of ``batch_s``); ``topk_rows`` and ``distinct_rows``:
    the rows per slide over all queries; ``joins_file_s``: a join output file every so often.
    """

    batch_s: int = 1
    slide_s: int = 1
    topk_rows: int = 98
    distinct_rows: int = 60
    joins_file_s: int = 60

    @property
    def batches(self) -> int:
        return DAY_S // self.batch_s


#: the replayed day of issue #21: 86,400 batches, 8.5M top-k rows, 5.2M distinct rows
FULL = DaySize()
#: the same day, a batch and a report per minute
PER_MINUTE = DaySize(batch_s=60, slide_s=60)


@dataclass(frozen=True)
class Day:
    """What :func:`write_day` wrote: where, the event time it spans, the rows per kind."""

    data_dir: Path
    state_dir: Path
    start: dt.datetime
    end: dt.datetime
    rows: dict[str, int]
    seconds: float


def _us(t: dt.datetime) -> int:
    return round(t.timestamp() * 1e6)


def _times(us: np.ndarray) -> pa.Array:
    return pa.array(us.astype("int64"), type=_US)


def _commit(sink: Path, batch_id: int, table: pa.Table, written_us: int) -> None:
    """``table`` committed as batch ``batch_id`` (the pipeline's writer), its commit file's time
    set to ``written_us`` (when the pipeline would have written it)."""
    write_table(table, sink, batch_id)
    written = written_us / 1e6
    os.utime(sink / COMMITS / f"{batch_id}.json", (written, written))


def _split(total: int, parts: int) -> list[int]:
    """``total`` rows over ``parts`` queries, as evenly as they go: ``[25, 25, 24, 24]``."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class _Writer:
    """The per-batch kinds: one call per batch writes every kind's commit for it."""

    def __init__(self, cfg: Config, size: DaySize, start: dt.datetime) -> None:
        self.cfg, self.size = cfg, size
        self.start_us = _us(start)
        self.topk = [q.name for q in cfg.queries.topk] or ["top-sources"]
        self.distinct = [q.name for q in cfg.queries.distinct] or ["ddos-sources-per-destination"]
        self.joins = [q.name for q in cfg.queries.join] or ["handshake"]
        self.knobs = Knobs.of(cfg)
        self.rows = dict.fromkeys(("traffic", "topk", "distinct", "shedding", "sys"), 0)
        self.sinks = {kind: results_dir(cfg, kind) for kind in ("traffic", "topk", "distinct", "shedding")}
        slides = size.batch_s // size.slide_s
        # The columns that are the same in every batch, built once.
        self.slide_offsets_us = (np.arange(1, slides + 1) * size.slide_s * 1_000_000).astype("int64")
        self.topk_cols = self._topk_template(slides)
        self.distinct_cols = self._distinct_template(slides)

    def _topk_template(self, slides: int) -> dict[str, Any]:
        query, rank, key, slide = [], [], [], []
        for qi, (name, n) in enumerate(
            zip(self.topk, _split(self.size.topk_rows, len(self.topk)), strict=True)
        ):
            for s in range(slides):
                for r in range(1, n + 1):
                    query.append(name)
                    rank.append(r)
                    key.append(f"10.{qi}.{r // 250}.{r % 250 + 1}")
                    slide.append(s)
        return {
            "query": pa.array(query, pa.string()),
            "rank": np.array(rank, dtype="int32"),
            "key": pa.array(key, pa.string()),
            "slide": np.array(slide, dtype="int64"),
        }

    def _distinct_template(self, slides: int) -> dict[str, Any]:
        query, rank, group, slide = [], [], [], []
        sizes = _split(self.size.distinct_rows, len(self.distinct))
        for qi, (name, n) in enumerate(zip(self.distinct, sizes, strict=True)):
            for s in range(slides):
                for r in range(1, n + 1):
                    query.append(name)
                    rank.append(r)
                    group.append(f"192.0.{qi}.{r}")
                    slide.append(s)
        return {
            "query": pa.array(query, pa.string()),
            "rank": np.array(rank, dtype="int32"),
            "group": pa.array(group, pa.string()),
            "slide": np.array(slide, dtype="int64"),
        }

    def batch(self, b: int) -> None:
        size = self.size
        base_us = self.start_us + b * size.batch_s * 1_000_000
        ends_us = base_us + self.slide_offsets_us
        written_us = int(ends_us[-1]) + 1_000_000  # the batch runs once its last slide closed
        self._traffic(b, ends_us, written_us)
        self._topk(b, ends_us, written_us)
        self._distinct(b, ends_us, written_us)
        self._shedding(b, written_us)
        self._sys(b, int(ends_us[-1]), written_us)

    def _wave(self, ends_us: np.ndarray, period_s: float) -> np.ndarray:
        """A slow daily swing between 0.5 and 1.5, so the charts have a shape."""
        t = (ends_us - self.start_us) / 1e6
        return np.asarray(1.0 + 0.5 * np.sin(2 * np.pi * t / period_s))

    def _traffic(self, b: int, ends_us: np.ndarray, written_us: int) -> None:
        n, protos = len(ends_us), len(_PROTOCOLS)
        ends = np.repeat(ends_us, protos)
        wave = np.repeat(self._wave(ends_us, DAY_S), protos)
        share = np.tile(np.array([0.7, 0.25, 0.05]), n)
        packets = (2000 * self.size.slide_s * wave * share).astype("int64")
        table = pa.table(
            {
                "window_start": _times(ends - self.size.slide_s * 1_000_000),
                "window_end": _times(ends),
                "proto": pa.array(np.tile(np.array(_PROTOCOLS, dtype="int16"), n)),
                "packets": pa.array(packets),
                "bytes": pa.array(packets * 600),
            },
            schema=_TRAFFIC_SCHEMA,
        )
        _commit(self.sinks["traffic"], b, table, written_us)
        self.rows["traffic"] += table.num_rows

    def _topk(self, b: int, ends_us: np.ndarray, written_us: int) -> None:
        cols = self.topk_cols
        ends = ends_us[cols["slide"]]
        wave = self._wave(ends, 3600.0)
        count = (5000 * wave / cols["rank"]).astype("int64") + 10
        # δ: the smallest count reported in the slide's report of that query (items above it)
        table = pa.table(
            {
                "query": cols["query"],
                "window_end": _times(ends),
                "delta": pa.array((count.min() - 5) * np.ones(len(count), dtype="int64")),
                "rank": pa.array(cols["rank"]),
                "key": cols["key"],
                "count": pa.array(count),
                "total": pa.array(np.full(len(count), 200_000, dtype="int64")),
            },
            schema=_TOPK_SCHEMA,
        )
        _commit(self.sinks["topk"], b, table, written_us)
        self.rows["topk"] += table.num_rows

    def _distinct(self, b: int, ends_us: np.ndarray, written_us: int) -> None:
        cols = self.distinct_cols
        ends = ends_us[cols["slide"]]
        distinct = (400 * self._wave(ends, 7200.0) / cols["rank"]).astype("int64") + 1
        table = pa.table(
            {
                "query": cols["query"],
                "window_end": _times(ends),
                "group": cols["group"],
                "distinct": pa.array(distinct),
                "rank": pa.array(cols["rank"]),
            },
            schema=_DISTINCT_SCHEMA,
        )
        _commit(self.sinks["distinct"], b, table, written_us)
        self.rows["distinct"] += table.num_rows

    def _shedding(self, b: int, written_us: int) -> None:
        batch_time = dt.datetime.fromtimestamp(written_us / 1e6, dt.UTC)
        event = batch_time - dt.timedelta(seconds=1)
        x = 1.0 if b % 600 < 450 else 0.8  # shedding a quarter of the time
        rows = []
        for name in self.joins:
            values: dict[str, Any] = {
                f.name: 0 if f.type in ("int", int) else 0.0 for f in fields(SheddingRecord)
            }
            values.update(
                query=name,
                batch_id=b,
                batch_time=batch_time,
                event_time=event,
                strategy="pni",
                cpu_budget=0.5,
                span_s=float(self.size.batch_s),
                n_left=400,
                n_right=390,
                lambda_left=400.0 / self.size.batch_s,
                lambda_right=390.0 / self.size.batch_s,
                selectivity=0.0025,
                x_left=x,
                x_right=x,
                optimum_x_left=x,
                optimum_x_right=x,
                next_x_left=x,
                next_x_right=x,
                results=int(390 * x),
                expected_results=390.0,
                utilisation=0.3 / x,
                batch_ms=300,
                batch_utilisation=0.3,
                batch_factor=1.2,
                state_left=1200,
                state_right=1170,
            )
            rows.append(values)
        table = pa.Table.from_pylist(rows, schema=STATS_SCHEMA)
        _commit(self.sinks["shedding"], b, table, written_us)
        self.rows["shedding"] += table.num_rows

    def _sys(self, b: int, newest_us: int, written_us: int) -> None:
        t = dt.datetime.fromtimestamp(written_us / 1e6, dt.UTC) - dt.timedelta(seconds=1)
        messages = 2 * self.size.batch_s + b % 3
        figures = BatchFigures(
            packets=messages * _PER_MESSAGE,
            newest_ns=newest_us * 1000,
            seconds={"stage1": 0.2, "traffic": 0.01, "topk": 0.05, "distinct": 0.03},
        )
        for query, extra in (("packets", figures), ("joins", None)):
            row = sys_row(_progress(query, b, t, messages, self.size.batch_s), self.knobs, extra)
            if row is None:
                continue
            _commit(results_dir(self.cfg, "sys") / query, b, sys_table([row]), written_us)
            self.rows["sys"] += 1


def _progress(query: str, batch_id: int, t: dt.datetime, messages: int, batch_s: int) -> dict[str, Any]:
    """A Spark progress event of ``query``'s batch at ``t`` that read ``messages`` (what
    ``pipeline.sys_stats`` turns into a ``sys`` row)."""
    end = 2 * batch_s * batch_id
    return {
        "name": query,
        "batchId": batch_id,
        "timestamp": t.isoformat().replace("+00:00", "Z"),
        "numInputRows": messages,
        "inputRowsPerSecond": messages / batch_s,
        "processedRowsPerSecond": messages / 0.4,
        "durationMs": {"addBatch": 300 + batch_id % 50, "triggerExecution": 400 + batch_id % 50},
        "stateOperators": [{"numRowsTotal": 2400, "memoryUsedBytes": 1 << 20}] if query == "joins" else [],
        "sources": [{"endOffset": {"p": {"0": end}}, "latestOffset": {"p": {"0": end + batch_id % 3}}}],
        "observedMetrics": {},
    }


def _joins(cfg: Config, size: DaySize, start: dt.datetime, names: Sequence[str]) -> int:
    """Handshakes in Spark's file-sink layout: a part file every ``joins_file_s``, a SYN every
    2 s (one in ten unanswered), its log compacted every ten files."""
    sink = results_dir(cfg, "joins")
    meta = sink / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    entries: list[str] = []
    rows = 0
    per_file = size.joins_file_s // 2
    for batch in range(DAY_S // size.joins_file_s):
        base_us = _us(start) + batch * size.joins_file_s * 1_000_000
        n = np.arange(per_file)
        syn = base_us + n * 2_000_000
        answered = n % 10 != 3
        rtt_us = 15_000 + (n % 7) * 2_000
        servers = [f"198.51.100.{i % 20 + 1}" for i in n]
        table = pa.table(
            {
                "query": pa.array([names[0]] * per_file, pa.string()),
                "kind": pa.array(["handshake"] * per_file, pa.string()),
                "row": pa.array(["match" if a else "unmatched" for a in answered], pa.string()),
                "key": pa.array([f"{batch}-{i}" for i in n], pa.string()),
                "left_ts": _times(syn),
                "right_ts": pa.array(np.where(answered, syn + rtt_us, 0), type=_US, mask=~answered),
                "delay_s": pa.array(np.where(answered, rtt_us / 1e6, 0.0), mask=~answered),
                "left_src_ip": pa.array([f"10.1.0.{i % 50 + 1}" for i in n], pa.string()),
                "left_dst_ip": pa.array(servers, pa.string()),
                "left_dst_port": pa.array(np.full(per_file, 443, dtype="int32")),
                "right_src_ip": pa.array(servers, pa.string()),
            },
            schema=_JOIN_SCHEMA,
        )
        path = sink / f"part-{batch:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(table, path)
        rows += table.num_rows
        entry = {"path": path.as_uri(), "size": path.stat().st_size, "isDir": False, "action": "add"}
        entries.append(json.dumps(entry))
        if batch % _COMPACT_EVERY == _COMPACT_EVERY - 1:
            # Spark's compaction: every entry so far in one log; the batch logs before it go.
            (meta / f"{batch}.compact").write_text("v1\n" + "\n".join(entries) + "\n")
            for old in meta.iterdir():
                if old.name.isdigit() or (old.name.endswith(".compact") and old.name != f"{batch}.compact"):
                    old.unlink()
        else:
            (meta / str(batch)).write_text("v1\n" + entries[-1] + "\n")
    return rows


#: the alert rule whose episodes fill the outbox (a destination with many sources)
_RULE = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", subject_label="victim"
)


def _alerts(state_dir: Path, start: dt.datetime) -> int:
    """A day of alert episodes through the real rule engine: every 20 min a destination goes over
    the threshold for 5 min, then resolves; deliveries to a webhook, some delivered, one dead."""
    engine = RuleEngine([_RULE])
    notes = []
    for minute in range(0, 24 * 60, 5):
        t = start + dt.timedelta(minutes=minute)
        victim = f"192.0.2.{(minute // 20) % 12 + 1}"
        over = minute % 20 == 0
        row = {
            "query": "ddos-sources-per-destination",
            "window_end": t.isoformat().replace("+00:00", "Z"),
            "group": victim,
            "distinct": 900 if over else 12,
            "rank": 1,
        }
        notes += engine.observe("distinct", row)
    with Outbox(outbox_path(state_dir)) as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={n.event_id: ["webhook"] for n in notes},
            records=engine.take_changes(),
            state=engine.snapshot(),
            offsets={},
        )
        for i, n in enumerate(notes[:-5]):
            outbox.record_attempt(n.event_id, "webhook", state="delivered", now=float(i), status=200)
        outbox.record_attempt(notes[-1].event_id, "webhook", state="dead", now=1.0, error="HTTP 503")
    return len(notes)


def _status(cfg: Config, writer: _Writer) -> None:
    """The pipeline's status file, as a pipeline that ran the day leaves it."""
    batches = writer.size.batches
    queries = {
        kind: {
            "active": True,
            "batches": batches,
            "input_rows": 2 * DAY_S,
            "packets": 2000 * DAY_S,
            "malformed": 0,
            "future": 0,
            "late_dropped": 0,
            "last_batch_ms": 420,
            "state_rows": 0,
        }
        for kind in ("traffic", "topk", "distinct")
    }
    path = status_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"updated": time.time(), "queries": queries}))


def write_day(
    data_dir: Path,
    state_dir: Path,
    *,
    size: DaySize = PER_MINUTE,
    end: dt.datetime = END,
    cfg: Config | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Day:
    """Write 24 h of every kind's results ending at ``end`` into ``data_dir`` (and the alert
    outbox into ``state_dir``); ``progress(done, batches)`` is called every 1,000 batches.

    ``cfg``: the queries (names) to write for; the default configuration's otherwise.
    """
    if size.batch_s % size.slide_s or DAY_S % size.batch_s or DAY_S % size.joins_file_s:
        raise ValueError(f"{size}: slide_s must divide batch_s, and batch_s and joins_file_s a day")
    began = time.monotonic()
    cfg = (cfg or Config()).replace(paths={"data_dir": Path(data_dir), "state_dir": Path(state_dir)})
    start = end - dt.timedelta(seconds=DAY_S)
    writer = _Writer(cfg, size, start)
    for b in range(size.batches):
        writer.batch(b)
        if progress is not None and (b + 1) % 1000 == 0:
            progress(b + 1, size.batches)
    rows = dict(writer.rows)
    rows["joins"] = _joins(cfg, size, start, writer.joins)
    rows["alerts"] = _alerts(Path(state_dir), start)
    _status(cfg, writer)
    return Day(Path(data_dir), Path(state_dir), start, end, rows, time.monotonic() - began)
