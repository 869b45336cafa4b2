"""Result rows leave for Kafka in event-time order, whatever the order of a batch's files."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from pipeline.publish import _in_time_order


def _t(s: int) -> dt.datetime:
    return dt.datetime(2024, 5, 1, 12, 0, s, tzinfo=dt.UTC)


def test_rows_of_several_files_are_sorted_by_their_time_column_stably() -> None:
    # two partitions' files of one micro-batch, each in its own order; a late partition's row first
    a = pa.table({"query": ["hs", "hs", "hs"], "left_ts": [_t(9), _t(2), _t(5)], "n": [1, 2, 3]})
    b = pa.table({"query": ["hs", "hs"], "left_ts": [_t(5), None], "n": [4, 5]})
    rows = _in_time_order([a, pa.table({"query": pa.array([], pa.string())}), b])
    assert [r["n"] for r in rows] == [2, 3, 4, 1, 5]  # ties keep file order; no time goes last


def test_window_end_wins_over_other_time_columns_and_rows_without_time_keep_their_order() -> None:
    t = pa.table({"window_start": [_t(0), _t(5)], "window_end": [_t(9), _t(3)], "n": [1, 2]})
    assert [r["n"] for r in _in_time_order([t])] == [2, 1]
    plain = pa.table({"n": [3, 1, 2]})
    assert [r["n"] for r in _in_time_order([plain])] == [3, 1, 2]
    assert _in_time_order([]) == []
