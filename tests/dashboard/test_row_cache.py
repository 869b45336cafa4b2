"""The rows of committed files, kept between reads (``dashboard.bounded.Rows``): a read after new
commits reads only the new files, and what it returns is always exactly the committed rows of the
range (a brute-force ``read_results`` of every committed file, filtered): after new commits, after
a batch is written again, and after compaction and retention removed files whose rows were kept.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dashboard import bounded
from netmon.config import Config
from netmon.results import COMMITS, compactions, read_results, result_files, results_dir
from pipeline.batch_sink import write_table
from pipeline.retention import maintain
from pipeline.shedding_controller import STATS_SCHEMA
from pipeline.traffic import OUTPUT_SCHEMA as TRAFFIC_SCHEMA

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
STEP_S = 60  # a batch a minute


def _traffic_batch(b: int, packets: int = 0) -> pa.Table:
    rows = [
        {
            "window_start": T0 + (STEP_S * b + i) * S,
            "window_end": T0 + (STEP_S * b + i + 10) * S,
            "proto": proto,
            "packets": b * 100 + i + packets,
            "bytes": i,
        }
        for i in range(0, STEP_S, 10)
        for proto in (6, 17)
    ]
    return pa.Table.from_pylist(rows, schema=TRAFFIC_SCHEMA)


def _shedding_batch(b: int) -> pa.Table:
    batch_time = T0 + STEP_S * b * S
    rows = [{"query": "a", "batch_id": b, "batch_time": batch_time, "event_time": batch_time, "results": b}]
    return pa.Table.from_pylist(rows, schema=STATS_SCHEMA)


MAKERS = {"traffic": _traffic_batch, "shedding": _shedding_batch}


def _commit(sink: Path, b: int, table: pa.Table) -> None:
    write_table(table, sink, b)
    written = (T0 + STEP_S * (b + 1) * S).timestamp()
    os.utime(sink / COMMITS / f"{b}.json", (written, written))


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def _oracle(directory: Path, column: str, start: dt.datetime, end: dt.datetime) -> Counter[tuple[Any, ...]]:
    """Every committed row (``read_results``) whose time lies in the range."""
    table = read_results(directory)
    rows = [] if table is None else table.to_pylist()
    return Counter(_key(r) for r in rows if r[column] is not None and start <= r[column] <= end)


def _read(
    directory: Path, kind: str, start: dt.datetime, end: dt.datetime, footers: bounded.Footers
) -> Counter:
    table = bounded.read_range(
        directory,
        bounded.TIME_COLUMNS[kind],
        start,
        end,
        compacted_by=bounded.COMPACTION_COLUMNS[kind],
        footers=footers,
    )
    return Counter(_key(r) for r in ([] if table is None else table.to_pylist()))


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_kept_rows_follow_new_commits_rewrites_compaction_and_retention(tmp_path: Path, kind: str) -> None:
    cfg = Config().replace(
        paths={"data_dir": tmp_path / "data"},
        # retention keeps the last hour before the newest row; compaction takes every batch
        retention={"compact_after_s": 0.0, "results_days": 1 / 24},
        pipeline={"publish_results": False},  # no republisher's mark to wait for
    )
    directory = results_dir(cfg, kind)
    column = bounded.TIME_COLUMNS[kind]
    make = MAKERS[kind]
    for b in range(180):  # three hours
        _commit(directory, b, make(b))
    footers = bounded.Footers()
    everything = (T0 - dt.timedelta(hours=1), T0 + dt.timedelta(hours=5))
    ranges = [everything, (T0 + 30 * STEP_S * S, T0 + 150 * STEP_S * S + 5 * S)]

    # the first read reads every file of the range; a second one none: the rows are kept
    for start, end in ranges:
        want = _oracle(directory, column, start, end)
        assert want and _read(directory, kind, start, end, footers) == want
    assert footers.rows.read == 180
    for start, end in ranges:
        assert _read(directory, kind, start, end, footers) == _oracle(directory, column, start, end)
    assert footers.rows.read == 180

    # new commits: only their files are read, and their rows are there
    for b in range(180, 190):
        _commit(directory, b, make(b))
    for start, end in ranges:
        assert _read(directory, kind, start, end, footers) == _oracle(directory, column, start, end)
    assert footers.rows.read == 190

    # a batch written again (a batch run again replaces its files): its new rows, not the kept ones
    if kind == "traffic":
        _commit(directory, 185, _traffic_batch(185, packets=7))
        want = _oracle(directory, column, *everything)
        assert _read(directory, kind, *everything, footers) == want
        assert any(dict(k)["packets"] == 185 * 100 + 7 for k in want)

    # compaction into hours and retention: files whose rows were kept are gone; the rows read are
    # still exactly the committed ones, none twice, none of a removed file
    before = _oracle(directory, column, *everything)
    report = maintain(cfg, (kind,), now=(T0 + dt.timedelta(days=1)).timestamp())
    assert not report.errors
    assert compactions(directory)
    for start, end in ranges:
        assert _read(directory, kind, start, end, footers) == _oracle(directory, column, start, end)
    after = _oracle(directory, column, *everything)
    assert sum(after.values()) < sum(before.values())  # retention removed the oldest rows
    assert report.expired_files and report.compacted_files


def test_the_kept_rows_are_bounded_by_their_size(tmp_path: Path) -> None:
    directory = tmp_path / "traffic"
    for b in range(20):
        _commit(directory, b, _traffic_batch(b))
    # counted as the memory a table holds: its buffers and each column's objects
    one = bounded.table_cost(bounded.Footers().rows.table(next(iter(result_files(directory))), None))
    footers = bounded.Footers(max_row_bytes=5 * one)
    start, end = T0, T0 + dt.timedelta(hours=1)
    assert _read(directory, "traffic", start, end, footers) == _oracle(directory, "window_end", start, end)
    assert footers.rows.bytes <= 5 * one and len(footers.rows._tables) == 5
    assert footers.rows.evicted == 15
    # the newest five files are kept: reading the last 5 minutes opens none
    read = footers.rows.read
    newest = T0 + (STEP_S * 19 + 10) * S
    want = _oracle(directory, "window_end", newest - 4 * STEP_S * S, newest)
    assert _read(directory, "traffic", newest - 4 * STEP_S * S, newest, footers) == want
    assert footers.rows.read == read
