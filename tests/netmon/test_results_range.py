"""The one reader of a result directory's committed rows in a time range (``netmon.results_range``)
against a brute-force oracle, through each of its callers' ways of finding the range's commits.

Random batches are committed the pipeline's way (``pipeline.batch_sink.write_table``, each
commit's file time just after its batch's rows, as the writers leave it): each batch's rows lie
at random times after the previous batch's, some batches have no rows, some a row without a time.
A real maintenance pass (``pipeline.retention.maintain``) then compacts the closed hours of the
batches committed before a random instant, and a random share of the commits it removed are put
back (the state a pass that died after its manifest leaves: the batch is in both places). Over
random ranges, every reader must return exactly the rows the oracle — every row written, filtered
by its time — has in the range, each once.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dashboard import bounded
from dashboard import data_resources as dr
from netmon.config import Config
from netmon.recent_results import newest_rows, newest_rows_by_sink
from netmon.results import COMMITS, compactions, results_dir
from netmon.results_range import CommitRows, first_reaching, read_rows, read_sink, sinks
from pipeline.batch_sink import write_table
from pipeline.retention import maintain

T0 = dt.datetime(2024, 5, 1, 11, 40, 0, tzinfo=dt.UTC)
US = dt.timedelta(microseconds=1)
SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("batch_id", pa.int64()),
        ("n", pa.int64()),
        ("batch_time", pa.timestamp("us", tz="UTC")),
    ]
)
QUERIES = ("joins", "packets")
Row = dict[str, Any]


def _key(row: Row) -> tuple[str, int, int]:
    return row["query"], row["batch_id"], row["n"]


def _write(sink: Path, rng: random.Random, batches: int) -> list[Row]:
    """``batches`` random batches committed to ``sink``; the rows written."""
    written: list[Row] = []
    t = T0 + rng.uniform(0, 60) * dt.timedelta(seconds=1)
    mtime = t
    for b in range(batches):
        nxt = t + rng.choice([0.0, rng.uniform(0, 120)]) * dt.timedelta(seconds=1)
        rows: list[Row] = []
        count = 0 if rng.random() < 0.1 and b < batches - 1 else rng.randint(1, 4)
        for n in range(count):
            at = t + rng.random() * (nxt - t)
            rows.append({"query": sink.name, "batch_id": b, "n": n, "batch_time": at})
        if count and rng.random() < 0.05:
            rows.append({"query": sink.name, "batch_id": b, "n": count, "batch_time": None})
        write_table(pa.Table.from_pylist(rows, schema=SCHEMA), sink, b)
        mtime = max(mtime, nxt + rng.uniform(0, 30) * dt.timedelta(seconds=1))
        os.utime(sink / COMMITS / f"{b}.json", (mtime.timestamp(), mtime.timestamp()))
        written += rows
        t = nxt
    return written


def _history(data_dir: Path, seed: int) -> list[Row]:
    """Random batches of two queries under ``results/sys/``, some hours compacted, some covered
    commits left behind; every row written."""
    rng = random.Random(seed)
    cfg = Config().replace(
        paths={"data_dir": data_dir},
        retention={"compact_after_s": 0.0},
        pipeline={"publish_results": False},  # no republisher's mark to wait for
    )
    rows: list[Row] = []
    for query in QUERIES:
        rows += _write(results_dir(cfg, "sys") / query, rng, rng.randint(200, 400))
    saved = data_dir.parent / f"saved-{seed}"
    shutil.copytree(results_dir(cfg, "sys"), saved)  # the commits as they were
    times = sorted(r["batch_time"] for r in rows if r["batch_time"] is not None)
    now = times[int(len(times) * rng.uniform(0.6, 0.95))]
    report = maintain(cfg, ("sys",), now=now.timestamp())
    assert not report.errors and report.compacted_files
    left = 0
    for query in QUERIES:
        sink = results_dir(cfg, "sys") / query
        for name in sorted(os.listdir(saved / query / COMMITS)):
            if not (sink / COMMITS / name).exists() and rng.random() < 0.3:
                # A pass that died after its manifest: the covered commit and its files are back.
                batch = f"batch-{int(name[:-5]):06d}"
                if (saved / query / batch).is_dir():
                    shutil.copytree(saved / query / batch, sink / batch)
                shutil.copy2(saved / query / COMMITS / name, sink / COMMITS / name)
                left += 1
    assert left and all(compactions(results_dir(cfg, "sys") / q) for q in QUERIES)
    return rows


@pytest.fixture(scope="module", params=[1, 2, 3])
def history(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Path, list[Row]]:
    data_dir = tmp_path_factory.mktemp(f"range-{request.param}") / "data"
    return data_dir / "results" / "sys", _history(data_dir, request.param)


def _oracle(rows: list[Row], start: dt.datetime, end: dt.datetime, query: str | None = None) -> Counter[Any]:
    """The rows written whose time is in ``[start, end]`` (of one query), by key."""
    return Counter(
        _key(r)
        for r in rows
        if r["batch_time"] is not None and start <= r["batch_time"] <= end and query in (None, r["query"])
    )


def _frame_keys(frame: Any) -> Counter[Any]:
    """The keys of the Resources page's frame (an empty one has no ``n`` column)."""
    if frame.empty:
        return Counter()
    return Counter(zip(frame["query"], frame["batch_id"], frame["n"], strict=True))


def _ranges(rng: random.Random, rows: list[Row]) -> list[tuple[dt.datetime, dt.datetime]]:
    """Ranges over and around the rows: from a row's time exactly or anywhere, of every length."""
    times = sorted(r["batch_time"] for r in rows if r["batch_time"] is not None)
    first, last = times[0], times[-1]
    out = [
        (first, last),
        (first - dt.timedelta(hours=1), first - US),
        (last + US, last + dt.timedelta(hours=1)),
    ]
    for _ in range(40):
        a = rng.choice(times) if rng.random() < 0.5 else first + rng.uniform(-0.05, 1.05) * (last - first)
        length = rng.choice([0.0, 1.0, 30.0, 300.0, 1800.0, 5400.0]) * rng.random()
        b = (
            rng.choice([t for t in times if t >= a] or [a])
            if rng.random() < 0.3
            else a + length * dt.timedelta(seconds=1)
        )
        out.append((a, b))
    return out


@pytest.mark.parametrize(
    ("slack_s", "backward"),
    [(None, False), (None, True), (dr.SLACK_S, False)],
    ids=["rows", "walk-back", "file-time"],
)
def test_read_rows_returns_the_range_each_row_once(history, slack_s: float | None, backward: bool) -> None:
    sys_dir, rows = history
    cache = CommitRows()  # shared by every range: a cached commit reads as a parsed one
    for start, end in _ranges(random.Random(str(slack_s) + str(backward)), rows):
        for sink in sinks(sys_dir):
            if backward:  # the walk back ends at the newest row: the range reaches it
                newest = max(
                    r["batch_time"] for r in rows if r["query"] == sink.name and r["batch_time"] is not None
                )
                end = max(end, newest)
            got = read_rows(
                sink, "batch_time", start, end, cache, slack_s=slack_s, to_newest=backward, backward=backward
            )
            assert Counter(_key(r) for r in got) == _oracle(rows, start, end, sink.name), (
                sink.name,
                start,
                end,
            )


def test_each_callers_read_returns_the_range_each_row_once(history) -> None:
    sys_dir, rows = history
    footers, cache = bounded.Footers(), CommitRows()
    for start, end in _ranges(random.Random(0), rows):
        want = _oracle(rows, start, end)
        table = bounded.read_range(sys_dir, "batch_time", start, end, footers=footers)
        assert Counter(_key(r) for r in ([] if table is None else table.to_pylist())) == want, (start, end)
        frame = dr.read_between(sys_dir, start, end, cache=cache)
        assert _frame_keys(frame) == want, (start, end)
    # The newest seconds: of each query up to its newest row (netmon explain), of every query
    # up to the newest of any (the Resources page).
    for seconds in (0.0, 10.0, 300.0, 2000.0, 20000.0):
        by_sink = newest_rows_by_sink(sys_dir, seconds)
        for query in QUERIES:
            mine = [r for r in rows if r["query"] == query and r["batch_time"] is not None]
            end = max(r["batch_time"] for r in mine)
            want = _oracle(mine, end - dt.timedelta(seconds=seconds), end)
            got = newest_rows(sys_dir / query, seconds)
            assert Counter(_key(r) for r in got) == want == Counter(_key(r) for r in by_sink[query]), (
                query,
                seconds,
            )
            assert [r["batch_time"] for r in got] == sorted(r["batch_time"] for r in got)
        end = max(r["batch_time"] for r in rows if r["batch_time"] is not None)
        frame = dr.read_recent(sys_dir, seconds, cache=cache)
        assert _frame_keys(frame) == _oracle(rows, end - dt.timedelta(seconds=seconds), end), seconds


def test_first_reaching_is_the_first_batch_reaching_the_start() -> None:
    rng = random.Random(5)
    for _ in range(500):
        count = rng.randint(0, 30)
        values: list[int | None] = []
        at = 0
        for _ in range(count):
            at += rng.randint(0, 3)
            values.append(None if rng.random() < 0.3 else at)
        start = rng.randint(-1, at + 2)
        reaching = [i for i, v in enumerate(values) if v is not None and v >= start]
        before = [i for i, v in enumerate(values) if v is not None and v < start]
        assert first_reaching(count, values.__getitem__, start) == (reaching[0] if reaching else count)
        assert first_reaching(count, values.__getitem__, start, backward=True) == (
            before[-1] + 1 if before else 0
        )


def _disordered_spans(rng: random.Random, count: int, disorder: int) -> list[tuple[int, int] | None]:
    """Batch spans out of time order by up to ``disorder``: each batch's oldest is at most that
    much older than an earlier batch's newest (the joins' batches); some batches have none."""
    spans: list[tuple[int, int] | None] = []
    clock, newest = 0, None
    for _ in range(count):
        clock += rng.choice([0, 1, 2, 5])
        if rng.random() < 0.2:
            spans.append(None)
            continue
        floor = clock - disorder if newest is None else max(newest - disorder, clock - 3 * disorder)
        low = rng.randint(min(floor, clock), clock)
        high = rng.randint(low, clock)
        spans.append((low, high))
        newest = high if newest is None else max(newest, high)
    return spans


class _Spans:
    """``Batches`` over spans held in memory: a batch's rows are its id."""

    def __init__(self, spans: list[tuple[int, int] | None]) -> None:
        self.spans = spans

    def span(self, sink: Path, batch_id: int) -> tuple[int, int] | None:
        return self.spans[batch_id]

    def rows(self, sink: Path, batch_id: int) -> list[int]:
        return [batch_id]

    def compacted(self, path: Path) -> list[int]:
        raise AssertionError("no compacted hour")


def test_read_sink_with_disorder_reads_every_batch_overlapping_the_range(tmp_path: Path) -> None:
    """Batches out of order by up to D: searched from ``start - D`` and read up to the first that
    starts after ``end + D`` (forward, or walking back), every batch holding a row in range is
    read (``read_sink``'s argument); without D some range misses one."""
    rng = random.Random(9)
    missed = 0
    for trial in range(60):
        disorder = rng.choice([1, 4, 10])
        spans = _disordered_spans(rng, rng.randint(1, 80), disorder)
        sink = tmp_path / f"s{trial}"
        (sink / COMMITS).mkdir(parents=True)
        for batch_id in range(len(spans)):
            (sink / COMMITS / f"{batch_id}.json").write_text("{}")  # only the names are listed
        highs = [s[1] for s in spans if s is not None] or [0]
        for _ in range(30):
            start = rng.randint(-disorder, max(highs) + disorder)
            end = start + rng.choice([0, 0, 1, 3, 10, 40])
            for backward in (False, True):
                if backward:  # the walk back reads up to the newest batch: the range reaches it
                    end = max(end, max(highs))
                want = {i for i, s in enumerate(spans) if s is not None and s[0] <= end and s[1] >= start}
                kwargs: dict[str, Any] = {"to_newest": backward, "backward": backward}
                got = read_sink(sink, _Spans(spans), start, end, disorder_us=disorder, **kwargs)
                assert want <= set(got), (trial, start, end, backward)
                without = read_sink(sink, _Spans(spans), start, end, **kwargs)
                missed += not want <= set(without)
    assert missed
    with pytest.raises(ValueError, match="disorder_us"):
        read_sink(tmp_path / "s0", _Spans([]), 0, 1, disorder_us=-1)


def test_read_rows_with_disorder_returns_the_range_each_row_once(tmp_path: Path) -> None:
    """The row reader's ``disorder_s`` (not its ``slack_s``): committed batches out of time order
    by up to it read exactly the oracle's rows, searched forward or walking back."""
    rng = random.Random(4)
    sink = tmp_path / "joins"
    disorder_s = 30.0
    written: list[Row] = []
    for b, span in enumerate(_disordered_spans(rng, 400, round(disorder_s))):
        rows: list[Row] = []
        if span is not None:
            low, high = span
            times = [low, high] + [rng.randint(low, high) for _ in range(rng.randint(0, 3))]
            rows = [
                {"query": "joins", "batch_id": b, "n": n, "batch_time": T0 + t * dt.timedelta(seconds=1)}
                for n, t in enumerate(times)
            ]
        write_table(pa.Table.from_pylist(rows, schema=SCHEMA), sink, b)
        written += rows
    cache = CommitRows()
    missed = 0
    for start, end in _ranges(random.Random(1), written):
        for backward in (False, True):
            if backward:
                end = max(end, max(r["batch_time"] for r in written))
            kwargs: dict[str, Any] = {"to_newest": backward, "backward": backward}
            got = read_rows(sink, "batch_time", start, end, cache, disorder_s=disorder_s, **kwargs)
            assert Counter(_key(r) for r in got) == _oracle(written, start, end), (start, end, backward)
            without = read_rows(sink, "batch_time", start, end, cache, **kwargs)
            missed += Counter(_key(r) for r in without) != _oracle(written, start, end)
    assert missed
