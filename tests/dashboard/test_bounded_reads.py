"""Bounded reads (``dashboard.bounded``): a time range costs the files it can hold, not the history.

Hours of results are written the pipeline's way — per-batch kinds with
``pipeline.batch_sink.write_table`` (each commit's file time just after its batch), some hours
then compacted by a real maintenance pass (``pipeline.retention.maintain``); the joins in Spark's
file-sink layout (part files named by ``_spark_metadata`` logs) — and read over many ranges. The
rows must be exactly those of ``read_results`` over everything, filtered to the range (the oracle),
and the files whose data is read exactly those whose rows' time bounds overlap the range; the
footers opened beyond them grow with the log of the history. No Spark, no Kafka.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dashboard import bounded
from netmon.config import Config
from netmon.results import COMMITS, compactions, read_results, result_files, results_dir
from pipeline.batch_sink import write_table
from pipeline.publish import TIME_COLUMNS
from pipeline.retention import maintain
from pipeline.shedding_controller import STATS_SCHEMA
from pipeline.sys_stats import SYS_SCHEMA
from pipeline.topk import RESULT_SCHEMA as TOPK_SCHEMA
from pipeline.traffic import OUTPUT_SCHEMA as TRAFFIC_SCHEMA

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
STEP_S = 10  # a batch every 10 s of time
S = dt.timedelta(seconds=1)
JOIN_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("row", pa.string()),
        ("key", pa.string()),
        ("left_ts", pa.timestamp("us", tz="UTC")),
        ("right_ts", pa.timestamp("us", tz="UTC")),
    ]
)


def _commit(sink: Path, batch_id: int, table: pa.Table, written: dt.datetime) -> None:
    """``table`` committed as batch ``batch_id`` (the real writer), its commit written at ``written``."""
    write_table(table, sink, batch_id)
    os.utime(sink / COMMITS / f"{batch_id}.json", (written.timestamp(), written.timestamp()))


def _traffic(sink: Path, batches: int) -> None:
    """A batch every 10 s closing its ten 1 s windows of two protocols; every 7th batch closes none."""
    for b in range(batches):
        rows = []
        if b % 7 != 3:
            for i in range(STEP_S):
                start = T0 + (STEP_S * b + i) * S
                for proto in (6, 17):
                    rows.append(
                        {
                            "window_start": start,
                            "window_end": start + S,
                            "proto": proto,
                            "packets": b,
                            "bytes": i,
                        }
                    )
        _commit(sink, b, pa.Table.from_pylist(rows, schema=TRAFFIC_SCHEMA), T0 + STEP_S * (b + 1) * S)


def _topk(sink: Path, batches: int) -> None:
    """Two queries' reports (three ranks) for each of the batch's ten 1 s slides."""
    for b in range(batches):
        rows = [
            {
                "query": q,
                "window_end": T0 + (STEP_S * b + i + 1) * S,
                "delta": 5,
                "rank": r,
                "key": f"10.0.0.{r}",
                "count": 100 - r,
                "total": 1000,
            }
            for i in range(STEP_S)
            for q in ("flows", "ports")
            for r in (1, 2, 3)
        ]
        _commit(sink, b, pa.Table.from_pylist(rows, schema=TOPK_SCHEMA), T0 + STEP_S * (b + 1) * S)


def _shedding(sink: Path, batches: int) -> None:
    """The controller's rows: query ``a`` every batch, ``b`` every 5th, its event time 30 min behind
    (a replayed capture: a day before the batches)."""
    for b in range(batches):
        batch_time = T0 + STEP_S * b * S
        event_time = batch_time - dt.timedelta(days=1)
        rows = [
            {"query": "a", "batch_id": b, "batch_time": batch_time, "event_time": event_time, "results": b}
        ]
        if b % 5 == 0:
            rows.append(
                {
                    "query": "b",
                    "batch_id": b,
                    "batch_time": batch_time,
                    "event_time": event_time - dt.timedelta(minutes=30),
                    "results": -b,
                }
            )
        _commit(sink, b, pa.Table.from_pylist(rows, schema=STATS_SCHEMA), batch_time + S)


def _spark_sink(sink: Path, rng: random.Random, files: int) -> None:
    """Spark's file-sink layout: part files in no time order (a match is written when its second
    side arrives), each named by one ``_spark_metadata/<batch>`` log (v1); one file has several
    row groups; one logged file is gone (retention leaves Spark's log as it is)."""
    meta = sink / "_spark_metadata"
    meta.mkdir(parents=True)
    for batch in range(files):
        centre = T0 + 30 * batch * S
        rows = []
        for n in range(rng.randint(1, 20)):
            left = centre + rng.uniform(-90, 30) * S
            answered = rng.random() < 0.8
            rows.append(
                {
                    "query": sink.name,
                    "row": "match" if answered else "unmatched",
                    "key": f"k{batch}-{n}",
                    "left_ts": left,
                    "right_ts": left + 0.01 * S if answered else None,
                }
            )
        path = sink / f"part-{batch:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(
            pa.Table.from_pylist(rows, schema=JOIN_SCHEMA), path, row_group_size=4 if batch == 7 else None
        )
        entry = {
            "path": path.as_uri(),
            "size": path.stat().st_size,
            "isDir": False,
            "modificationTime": 0,
            "blockReplication": 1,
            "blockSize": 33554432,
            "action": "add",
        }
        (meta / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")
        if batch == 11:
            path.unlink()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Two hours of traffic (commits), three of top-k (two hours compacted), two of shedding
    (compacted by event time where a batch lies in one hour), joins of two queries."""
    data_dir = tmp_path_factory.mktemp("bounded") / "data"
    cfg = Config().replace(
        paths={"data_dir": data_dir},
        retention={"compact_after_s": 0.0},
        pipeline={"publish_results": False},  # no republisher's mark to wait for
    )
    _traffic(results_dir(cfg, "traffic"), 720)
    _topk(results_dir(cfg, "topk"), 1080)
    _shedding(results_dir(cfg, "shedding"), 720)
    rng = random.Random(7)
    for query in ("handshake", "web"):
        _spark_sink(results_dir(cfg, "joins") / query, rng, 150)
    report = maintain(cfg, ("topk", "shedding"), now=(T0 + dt.timedelta(hours=4)).timestamp())
    assert not report.errors
    assert sorted(compactions(results_dir(cfg, "topk"))) == ["20240501T12", "20240501T13"]
    assert compactions(results_dir(cfg, "shedding"))  # some event-time hours
    return cfg


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def _oracle(
    rows: list[dict[str, Any]], column: str, start: dt.datetime, end: dt.datetime
) -> Counter[tuple[Any, ...]]:
    """The rows of ``read_results`` (every committed row) in the range."""
    return Counter(_key(r) for r in rows if r[column] is not None and start <= r[column] <= end)


def _bounds(directory: Path, column: str) -> dict[Path, tuple[dt.datetime, dt.datetime] | None]:
    """Each committed file's time bounds, from its rows."""
    out: dict[Path, tuple[dt.datetime, dt.datetime] | None] = {}
    for path in result_files(directory):
        extremes = pc.min_max(pq.read_table(path, columns=[column]).column(0)).as_py()
        out[path] = None if extremes["min"] is None else (extremes["min"], extremes["max"])
    return out


class Opened:
    """The Parquet files ``dashboard.bounded`` opens from now on (every ``pyarrow.parquet``
    entry point it may use): ``reads``, the files whose rows it reads, and ``footers``, the other
    opens (statistics only)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.footers: list[Path] = []
        self.reads: list[Path] = []
        #: the opens made while reading rows: one per file read
        self.read_opens: list[Path] = []
        self._reading = False
        parquet_file, read_table, read_rows = pq.ParquetFile, pq.read_table, bounded._read

        def opening(source: Any, *args: Any, **kwargs: Any) -> Any:
            (self.read_opens if self._reading else self.footers).append(Path(source))
            return parquet_file(source, *args, **kwargs)

        def table(source: Any, *args: Any, **kwargs: Any) -> Any:
            (self.read_opens if self._reading else self.footers).append(Path(source))
            return read_table(source, *args, **kwargs)

        def reading(path: Path, *args: Any) -> pa.Table:
            self.reads.append(Path(path))
            self._reading = True
            try:
                return read_rows(path, *args)
            finally:
                self._reading = False

        monkeypatch.setattr(pq, "ParquetFile", opening)
        monkeypatch.setattr(pq, "read_table", table)
        monkeypatch.setattr(bounded, "_read", reading)

    def clear(self) -> None:
        self.footers.clear()
        self.reads.clear()
        self.read_opens.clear()


def _ranges(
    rng: random.Random, first: dt.datetime, last: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """Ranges over and around ``[first, last]``: random ones, and the edges."""
    span = (last - first).total_seconds()
    out = [
        (first, last),  # everything
        (first - dt.timedelta(hours=1), first - S),  # before every row
        (last + S, last + dt.timedelta(hours=1)),  # after every row
        (last - dt.timedelta(minutes=15), last),  # the default: the last 15 minutes
        (first + 600 * S, first + 600 * S),  # one instant, a window end exactly
    ]
    for _ in range(12):
        a = first + rng.uniform(-0.05, 1.0) * span * S
        out.append((a, a + rng.choice([1, 30, 300, 900, 3600]) * S))
    return out


KINDS = ("traffic", "topk", "shedding", "joins")


def test_time_columns_are_the_kinds_and_compactions() -> None:
    schemas = {
        "traffic": TRAFFIC_SCHEMA,
        "topk": TOPK_SCHEMA,
        "shedding": STATS_SCHEMA,
        "sys": SYS_SCHEMA,
        "joins": JOIN_SCHEMA,
    }
    for kind, schema in schemas.items():
        first = next(c for c in TIME_COLUMNS if c in schema.names)
        assert bounded.COMPACTION_COLUMNS[kind] == first, kind
        assert bounded.TIME_COLUMNS[kind] in schema.names
    # shedding and sys rows are batches: their range is the batches' trigger time
    assert bounded.TIME_COLUMNS["shedding"] == bounded.TIME_COLUMNS["sys"] == "batch_time"


@pytest.mark.parametrize("kind", KINDS)
def test_a_range_reads_exactly_its_rows_from_the_files_that_can_hold_them(
    history: Config, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = results_dir(history, kind)
    column, by = bounded.TIME_COLUMNS[kind], bounded.COMPACTION_COLUMNS[kind]
    files = _bounds(directory, column)
    times = [b for b in files.values() if b is not None]
    first, last = min(b[0] for b in times), max(b[1] for b in times)
    assert bounded.newest(directory, column, compacted_by=by, footers=bounded.Footers()) == last
    batches = max(
        len(os.listdir(s / COMMITS)) if (s / COMMITS).is_dir() else 0 for s in bounded.sinks(directory)
    )
    ranges = _ranges(random.Random(kind), first, last)
    everything = read_results(directory)
    assert everything is not None
    rows = everything.to_pylist()
    oracles = [_oracle(rows, column, start, end) for start, end in ranges]
    opened = Opened(monkeypatch)
    for (start, end), want in zip(ranges, oracles, strict=True):
        opened.clear()
        footers = bounded.Footers()
        table = bounded.read_range(directory, column, start, end, compacted_by=by, footers=footers)
        got = Counter(_key(r) for r in ([] if table is None else table.to_pylist()))
        assert got == want, (kind, start, end)
        # The data read: exactly the files whose rows' bounds overlap the range, each opened once.
        overlapping = {p for p, b in files.items() if b is not None and b[0] <= end and b[1] >= start}
        assert sorted(opened.reads) == sorted(overlapping) == sorted(opened.read_opens), (kind, start, end)
        # every other open is a footer read (statistics), each file once
        assert len(opened.footers) == footers.opened == len(set(opened.footers))
        if kind == "joins":
            # no time order between its files: every logged file's footer, once (then cached)
            assert len(opened.footers) == footers.opened == sum(1 for p in files if p.exists())
        elif kind == "shedding":
            # the compacted hours are event time's: every compacted file's footer, once, beside the
            # batches' binary search
            compacted = sum(1 for p in files if p.parent.name == "compacted")
            assert footers.opened <= len(overlapping) + compacted + 2 * math.ceil(math.log2(batches + 1)) + 4
        else:
            # the binary search's footers (log of the batches) and the batch that ends the walk
            assert footers.opened <= len(overlapping) + 2 * math.ceil(math.log2(batches + 1)) + 4, (
                kind,
                start,
                end,
                footers.opened,
                len(overlapping),
            )


def test_the_cost_follows_the_range_not_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last 15 minutes of 1 and of 6 hours of traffic: the same data files, and only the
    binary search's few more footers."""
    for hours in (1, 6):
        _traffic(tmp_path / f"h{hours}" / "traffic", hours * 360)
    opened = Opened(monkeypatch)
    costs = []
    for hours in (1, 6):
        sink = tmp_path / f"h{hours}" / "traffic"
        newest = bounded.newest(sink, "window_end", footers=bounded.Footers())
        last = max(b for b in range(hours * 360) if b % 7 != 3)  # the newest batch with windows
        assert newest == T0 + STEP_S * (last + 1) * S
        opened.clear()
        footers = bounded.Footers()
        table = bounded.read_range(sink, "window_end", newest - 900 * S, newest, footers=footers)
        assert table is not None
        costs.append((table.num_rows, len(opened.reads), footers.opened))
    (rows_short, reads_short, footers_short), (rows_long, reads_long, footers_long) = costs
    assert rows_short == rows_long and reads_short == reads_long < 2 * 90
    assert footers_long <= footers_short + 2 * (
        math.ceil(math.log2(16 * 360)) - math.floor(math.log2(2 * 360))
    )


def test_footers_are_read_once_and_a_new_file_only(history: Config, tmp_path: Path, monkeypatch) -> None:
    """A redraw opens no footer it read before; a file Spark's sink adds, its footer only."""
    import shutil

    directory = tmp_path / "joins"
    shutil.copytree(results_dir(history, "joins"), directory)
    newest = bounded.newest(directory, "left_ts", footers=bounded.Footers())
    assert newest is not None
    footers = bounded.Footers()
    start, end = newest - 900 * S, newest
    bounded.read_range(directory, "left_ts", start, end, footers=footers)
    before = footers.opened
    opened = Opened(monkeypatch)
    again = bounded.read_range(directory, "left_ts", start, end, footers=footers)
    assert footers.opened == before and opened.footers == []
    # a new batch of the sink
    sink = directory / "web"
    path = sink / "part-99999-new.c000.snappy.parquet"
    row = {"query": "web", "row": "match", "key": "new", "left_ts": newest, "right_ts": newest}
    pq.write_table(pa.Table.from_pylist([row], schema=JOIN_SCHEMA), path)
    entry = {"path": path.as_uri(), "size": path.stat().st_size, "isDir": False, "modificationTime": 0}
    (sink / "_spark_metadata" / "150").write_text("v1\n" + json.dumps({**entry, "action": "add"}) + "\n")
    table = bounded.read_range(directory, "left_ts", start, end, footers=footers)
    assert footers.opened == before + 1 and opened.footers == [path]
    assert table is not None and again is not None and table.num_rows == again.num_rows + 1


def test_a_batch_without_rows_or_a_missing_sink_reads_nothing(tmp_path: Path) -> None:
    sink = tmp_path / "traffic"
    _commit(sink, 0, TRAFFIC_SCHEMA.empty_table(), T0)
    assert bounded.newest(sink, "window_end") is None
    assert bounded.read_range(sink, "window_end", T0, T0 + S) is None
    assert bounded.read_range(tmp_path / "none", "window_end", T0, T0 + S) is None
    assert bounded.newest(tmp_path / "none", "window_end") is None
