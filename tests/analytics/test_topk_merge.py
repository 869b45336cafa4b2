"""The streaming top-k's merge state (``analytics.topk_merge``), without Spark."""

from __future__ import annotations

import pytest

from analytics.topk_merge import QueryParams, TopKMerge


def test_merge_state_round_trips_and_guards_its_parameters() -> None:
    merge = TopKMerge(QueryParams(N=4_000, b=1_000, k=2))
    rows = [merge.add(i, {"a": i, "b": 1}, i + 5) for i in (3, 4, 6, 7)]  # 5 is empty
    again = TopKMerge.from_bytes(merge.to_bytes(), merge.params)
    assert again.to_bytes() == merge.to_bytes()
    assert again.add(9, {"c": 9}, 9) == merge.add(9, {"c": 9}, 9)
    # Window {4, 5, 6, 7}: delta = 1 + 0 + 1 + 1; "a" = 4 + 6 + 7; total = 9 + 0 + 11 + 12.
    assert rows[-1] == [(8_000, 3, 1, "a", 17, 32)]
    with pytest.raises(ValueError, match="delete the top-k checkpoint"):
        TopKMerge.from_bytes(merge.to_bytes(), QueryParams(N=4_000, b=1_000, k=3))
