"""The streaming top-k's merge state (``analytics.topk_merge``), without Spark."""

from __future__ import annotations

import pytest

from analytics.topk_merge import QueryParams, TopKMerge


def test_merge_state_round_trips_and_guards_its_parameters() -> None:
    merge = TopKMerge(QueryParams(N=4_000, b=1_000, k=2))
    rows = [merge.add_subwindow({"a": i, "b": 1}, i, i + 5) for i in (3, 4, 6, 7)]  # 5 is empty
    again = TopKMerge.from_bytes(merge.to_bytes(), merge.params)
    assert again.to_bytes() == merge.to_bytes()
    assert again.add_subwindow({"c": 9}, 9, 9) == merge.add_subwindow({"c": 9}, 9, 9)
    # Window {4, 5, 6, 7}: delta = 1 + 0 + 1 + 1; "a" = 4 + 6 + 7; total = 9 + 0 + 11 + 12.
    assert rows[-1] == [(8_000, 3, 1, "a", 17, 32, 4_000)]
    with pytest.raises(ValueError, match="delete the top-k checkpoint"):
        TopKMerge.from_bytes(merge.to_bytes(), QueryParams(N=4_000, b=1_000, k=3))


def test_a_gap_of_years_gives_each_report_its_own_window_end_and_total() -> None:
    # N/b = 2 sub-windows of 1 s; data at 3 and 4, then ten years later at G and G + 1.
    merge = TopKMerge(QueryParams(N=2 * 10**9, b=10**9, k=1))
    W = 2 * 10**9  # every window holds its N
    gap = 10 * 365 * 86_400
    rows = [merge.add_subwindow(top, i, total) for i, top, total in [(3, {"a": 5}, 7), (4, {"b": 2}, 3)]]
    rows.append(merge.add_subwindow({"c": 4}, 3 + gap, 4))
    rows.append(merge.add_subwindow({"c": 1}, 4 + gap, 1))
    # Window {3, 4} ends at 5 s; {4, 5} at 6 s (only "b"'s sub-window holds data); the empty
    # windows of the gap are not reported; {gap+3, gap+4} ends at gap+5 s with total 4 + 1.
    assert rows == [
        [],
        [(5 * 10**9, 7, 0, None, None, 10, W)],
        [(6 * 10**9, 2, 0, None, None, 3, W), ((3 + gap) * 10**9 + 10**9, 4, 0, None, None, 4, W)],
        [((5 + gap) * 10**9, 5, 0, None, None, 5, W)],
    ]
