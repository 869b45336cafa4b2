"""Bounded reads (``dashboard.bounded``): a time range costs the files it can hold, not the history.

Hours of results are written the pipeline's way — per-batch kinds with
``pipeline.batch_sink.write_table`` (each commit's file time just after its batch), some hours
then compacted by a real maintenance pass (``pipeline.retention.maintain``); an older netmon's
joins in Spark's file-sink layout (part files named by ``_spark_metadata`` logs); today's joins
per batch, out of time order by up to the disorder their config allows
(``bounded.batch_disorder_s``) — and read over many ranges. The rows must be exactly those of
``read_results`` over everything, filtered to the range (the oracle), and the files whose data is
read exactly those whose rows' time bounds overlap the range; the footers opened beyond them grow
with the log of the history. No Spark, no Kafka.
"""

from __future__ import annotations

import datetime as dt
import itertools
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
from dashboard import data as dashboard_data
from netmon.config import Config, JoinQuery
from netmon.results import COMMITS, compactions, read_results, result_files, results_dir
from pipeline.batch_sink import write_table
from pipeline.joins_batch import RESULT_SCHEMA as JOINS_SCHEMA
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
    """An older netmon's joins, in Spark's file-sink layout: part files in no time order (a match
    is written when its second side arrives), each named by one ``_spark_metadata/<batch>`` log
    (v1); one file has several row groups; one logged file is gone (retention leaves Spark's log
    as it is)."""
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


# -- the joins per batch (``pipeline.joins_batch``): in time order only give or take a disorder ----

#: a handshake query and a link query (its windows both ways): S = 20 + watermark_s
JOIN_QUERIES = (
    JoinQuery(name="syn", window_s=3.0),
    JoinQuery(name="eth", query="link", left="iface=eth0", right="iface=eth1", key="src_ip", window_s=20.0),
)


def _join_row(query: JoinQuery, row: str, key: str, left: dt.datetime, right: dt.datetime | None) -> dict:
    return {
        "query": query.name,
        "kind": query.query,
        "row": row,
        "key": key,
        "left_ts": left,
        "right_ts": right,
        "delay_s": None if right is None else (right - left).total_seconds(),
        "left_src_ip": key,
        "right_src_ip": None if right is None else key,
    }


#: a batch's (oldest, newest) ``left_ts`` as written, None without rows; and whether it holds only
#: ``unmatched`` rows
JoinBatch = tuple[tuple[dt.datetime, dt.datetime] | None, bool]


def _joins_batches(sink: Path, rng: random.Random, batches: int, lateness_s: float) -> list[JoinBatch]:
    """Batches as ``pipeline.joins_batch`` commits them, from a simulated join: a clock (the newest
    event time) that moves on by a few seconds a batch; records at most ``lateness_s`` behind the
    clock before them (older ones are dropped as late); a match written when its second side
    arrives, its ``left_ts`` at most the query's window before the right side's time (a link
    query's both ways); an unanswered SYN once the clock passes ``left_ts + window_s +
    lateness_s``. Every 11th batch has no input (no file); every 17th is a jump of the clock past
    the SYNs' windows with no match: only old ``unmatched`` rows. Each batch as written."""
    syn, eth = JOIN_QUERIES
    clock = T0
    pending: list[tuple[dt.datetime, str]] = []  # SYNs not answered yet
    written: list[JoinBatch] = []
    for b in range(batches):
        rows: list[dict[str, Any]] = []
        if b % 11 == 5:
            pass  # no input: the clock stands, nothing expires
        elif b % 17 == 16:
            clock += (syn.window_s + lateness_s + rng.uniform(0.5, 8)) * S
        else:
            before, clock = clock, clock + rng.uniform(0, 8) * S

            def arrived(before: dt.datetime = before, clock: dt.datetime = clock) -> dt.datetime:
                """A record of this batch: after the clock before it, or up to the lateness behind."""
                return before + rng.uniform(-lateness_s, (clock - before).total_seconds()) * S

            for n in range(rng.choice([0, 1, 3, 6])):
                at = arrived()
                if rng.random() < 0.6:  # answered within the window: a match, at the SYN-ACK
                    rows.append(
                        _join_row(syn, "match", f"s{b}-{n}", at - rng.uniform(0, syn.window_s) * S, at)
                    )
                else:
                    pending.append((at, f"s{b}-{n}"))
            for n in range(rng.choice([0, 2, 5])):
                right = arrived()
                left = min(clock, right + rng.uniform(-eth.window_s, eth.window_s) * S)
                rows.append(_join_row(eth, "match", f"e{b}-{n}", left, right))
        gone = [p for p in pending if p[0] + (syn.window_s + lateness_s) * S < clock]
        pending = [p for p in pending if p not in gone]
        rows += [_join_row(syn, "unmatched", key, at, None) for at, key in gone]
        rng.shuffle(rows)  # no order inside a batch either
        times = [r["left_ts"] for r in rows]
        only_unmatched = bool(rows) and all(r["row"] == "unmatched" for r in rows)
        written.append(((min(times), max(times)) if times else None, only_unmatched))
        table = pa.Table.from_pylist(rows, schema=JOINS_SCHEMA)
        _commit(sink, b, table, clock + S)
        if b == 40 and table.num_rows > 2:  # one file of several row groups
            pq.write_table(table, sink / f"batch-{b:06d}" / "part-00000.parquet", row_group_size=2)
    return written


@pytest.fixture(scope="module")
def joins_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, list[JoinBatch]]:
    """About two hours of joins committed per batch, some hours then compacted; the batches as
    written."""
    data_dir = tmp_path_factory.mktemp("joins") / "data"
    cfg = Config().replace(
        paths={"data_dir": data_dir},
        retention={"compact_after_s": 0.0},
        pipeline={"publish_results": False},
        queries={"join": JOIN_QUERIES},
    )
    written = _joins_batches(results_dir(cfg, "joins"), random.Random(11), 1500, cfg.pipeline.watermark_s)
    report = maintain(cfg, ("joins",), now=(T0 + dt.timedelta(hours=4)).timestamp())
    assert not report.errors and report.compacted_files
    return cfg, written


def test_the_joins_disorder_is_their_longest_window_and_the_watermark() -> None:
    cfg = Config().replace(queries={"join": JOIN_QUERIES}, pipeline={"watermark_s": 7.5})
    assert bounded.batch_disorder_s(cfg, "joins") == 20.0 + 7.5
    assert bounded.batch_disorder_s(cfg.replace(queries={"join": ()}), "joins") == 7.5
    for kind in ("traffic", "topk", "distinct", "shedding", "sys"):
        assert bounded.batch_disorder_s(cfg, kind) == 0.0


def test_joins_out_of_order_within_their_disorder_read_exactly_their_range(
    joins_history: tuple[Config, list[JoinBatch]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows older than an earlier batch's newest by up to S: the read with S is the oracle's over
    every range, the files read exactly those overlapping it; without S some range misses rows."""
    cfg, written = joins_history
    directory = results_dir(cfg, "joins")
    disorder_s = bounded.batch_disorder_s(cfg, "joins")
    assert disorder_s == 20.0 + 5.0
    # The batches as written are as out of order as the join makes them: by more than half of S,
    # never by more; some hold only unmatched SYNs, all older than an earlier batch's newest; some
    # hold no row.
    spans = [(span, only) for span, only in written if span is not None]
    newest_before = list(itertools.accumulate((span[1] for span, _ in spans[:-1]), max))
    behind = [
        (high - span[0]).total_seconds() for high, (span, _) in zip(newest_before, spans[1:], strict=True)
    ]
    assert disorder_s / 2 < max(behind) <= disorder_s
    assert any(only and span[1] < high for high, (span, only) in zip(newest_before, spans[1:], strict=True))
    assert len(written) - len(spans) > 50
    assert compactions(directory)  # some hours read from compacted files, the others' commits left
    assert len(os.listdir(directory / COMMITS)) > 300

    column, by = bounded.TIME_COLUMNS["joins"], bounded.COMPACTION_COLUMNS["joins"]
    files = _bounds(directory, column)
    everything = read_results(directory)
    assert everything is not None
    rows = everything.to_pylist()
    times = sorted(r[column] for r in rows)
    rng = random.Random("joins")
    ranges = _ranges(rng, times[0], times[-1])
    ranges += [(t, t + rng.choice([0, 1, 5]) * S) for t in rng.sample(times, 60)]  # from a row exactly
    unmatched = [r[column] for r in rows if r["row"] == "unmatched"]
    ranges += [(t - rng.choice([0, 2]) * S, t) for t in rng.sample(unmatched, 40)]  # to an old SYN
    ranges += [(start, start + 10 * dt.timedelta(microseconds=1)) for start, _ in ranges[5:25]]
    batches = len(os.listdir(directory / COMMITS))
    disorder = dt.timedelta(seconds=disorder_s)
    opened = Opened(monkeypatch)
    missed = []
    for start, end in ranges:
        want = _oracle(rows, column, start, end)
        opened.clear()
        footers = bounded.Footers()
        table = bounded.read_range(
            directory, column, start, end, compacted_by=by, footers=footers, disorder_s=disorder_s
        )
        got = Counter(_key(r) for r in ([] if table is None else table.to_pylist()))
        assert got == want, (start, end)
        overlapping = {p for p, b in files.items() if b is not None and b[0] <= end and b[1] >= start}
        assert sorted(opened.reads) == sorted(overlapping) == sorted(opened.read_opens), (start, end)
        # the footers: the binary search's, and those of the batches near the range (within 2 S
        # before it: between the batch the search lands on and the first reaching the start)
        near = sum(
            1
            for b in files.values()
            if b is not None and b[0] <= end + disorder and b[1] >= start - 2 * disorder
        )
        assert footers.opened <= near + 2 * math.ceil(math.log2(batches + 1)) + 4, (start, end)
        # Without the disorder, the search takes the batches for ordered: some range misses rows.
        table = bounded.read_range(directory, column, start, end, compacted_by=by, footers=footers)
        without = Counter(_key(r) for r in ([] if table is None else table.to_pylist()))
        assert not without - want  # the rows it has are the range's
        if without != want:
            missed.append((start, end))
    assert missed, "every range was read right without the disorder: the test shows nothing"

    # The dashboard's read passes its config's disorder: the ranges missed without it are right.
    monkeypatch.setattr(dashboard_data, "config", lambda: cfg)
    names = ["query", "row", "key", column]  # a row's identity (its key is unique)
    for start, end in missed + ranges[:5]:
        frame = dashboard_data.read_range(str(cfg.paths.data_dir), "joins", start, end)
        got = Counter() if frame is None else Counter(zip(*(frame[c] for c in names), strict=True))
        want = _oracle(rows, column, start, end)
        assert got == Counter(tuple(dict(k)[c] for c in names) for k in want.elements()), (start, end)


def test_the_newest_joins_row_is_found_past_batches_of_old_unanswered_syns(
    joins_history: tuple[Config, list[JoinBatch]], tmp_path: Path
) -> None:
    """Where a relative range ends: the newest ``left_ts`` of all committed rows (the oracle:
    every row read), even when the newest batches hold only older unanswered SYNs. Without the
    disorder the walk stops at the newest batch with rows and ends the range early."""
    syn, eth = JOIN_QUERIES
    sink = tmp_path / "joins"
    cfg = Config().replace(queries={"join": JOIN_QUERIES})
    disorder_s = bounded.batch_disorder_s(cfg, "joins")
    top = T0 + 100 * S
    _commit(sink, 0, pa.Table.from_pylist([_join_row(eth, "match", "a", top, top)], schema=JOINS_SCHEMA), top)
    # two later batches: only SYNs that expired, older than the match by up to the disorder
    for b, back_s in ((1, 6.0), (2, 9.0)):
        old = [_join_row(syn, "unmatched", f"s{b}", top - back_s * S, None)]
        _commit(sink, b, pa.Table.from_pylist(old, schema=JOINS_SCHEMA), top + b * S)
    everything = read_results(sink)
    assert everything is not None
    oracle = max(everything["left_ts"].to_pylist())
    assert oracle == top
    assert bounded.newest(sink, "left_ts", footers=bounded.Footers(), disorder_s=disorder_s) == oracle
    assert bounded.newest(sink, "left_ts", footers=bounded.Footers()) == top - 9 * S  # early
    # and over the long history: the newest of every row
    cfg, _ = joins_history
    directory = results_dir(cfg, "joins")
    rows = read_results(directory)
    assert rows is not None
    found = bounded.newest(
        directory, "left_ts", footers=bounded.Footers(), disorder_s=bounded.batch_disorder_s(cfg, "joins")
    )
    assert found == max(rows["left_ts"].to_pylist())


def test_one_querys_rows_and_the_queries_in_a_range(history: Config) -> None:
    """``data.read_range(query=...)`` (the Heavy hitters and Distinct counts pages read one query's
    rows, chosen in Arrow) gives exactly that query's rows of the range; ``data.queries`` the
    queries with rows in it."""
    from dashboard import data

    directory = results_dir(history, "topk")
    everything = read_results(directory)
    assert everything is not None
    rows = everything.to_pylist()
    times = sorted(r["window_end"] for r in rows)
    for start, end in _ranges(random.Random(3), times[0], times[-1]):
        want = [r for r in rows if start <= r["window_end"] <= end]
        names = sorted({r["query"] for r in want})
        assert data.queries.__wrapped__(str(history.paths.data_dir), "topk", start, end) == names
        for q in names:
            got = data.read_range(str(history.paths.data_dir), "topk", start, end, query=q)
            assert got is not None
            plain = [
                {k: None if v is None or v != v else v for k, v in r.items()} for r in got.to_dict("records")
            ]
            assert Counter(map(_key, plain)) == Counter(_key(r) for r in want if r["query"] == q), (
                q,
                start,
                end,
            )
        assert data.read_range(str(history.paths.data_dir), "topk", start, end, query="nope") is None
