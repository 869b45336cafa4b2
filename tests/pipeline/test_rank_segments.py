"""Stage 4 of the distinct counts on the driver: ranking segments equals ranking every window end."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.distinct import rank_segments


def _segments(seed: int) -> pa.Table:
    """Random segments: per (query, group), disjoint runs of window ends with one count each."""
    rng = np.random.default_rng(seed)
    rows = []
    for query in ("a", "b"):
        for g in range(int(rng.integers(1, 40))):
            i = int(rng.integers(0, 30))
            while i < 60:
                length = int(rng.integers(1, 12))
                if rng.random() < 0.7:
                    rows.append((query, f"g{g:02d}", i, i + length - 1, int(rng.integers(1, 6))))
                i += length + int(rng.integers(0, 4))
    query, group, start, stop, distinct = zip(*rows, strict=True)
    return pa.table(
        {
            "query": list(query),
            "group": list(group),
            "start": pa.array(start, pa.int64()),
            "stop": pa.array(stop, pa.int64()),
            "distinct": pa.array(distinct, pa.int64()),
        }
    )


def _brute(segments: pa.Table, tops: dict[str, int]) -> list[tuple]:
    per_end: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for r in segments.to_pylist():
        for i in range(r["start"], r["stop"] + 1):
            per_end.setdefault((r["query"], i), []).append((r["distinct"], r["group"]))
    out = []
    for (query, i), groups in per_end.items():
        ordered = sorted(groups, key=lambda x: (-x[0], x[1]))
        top = tops[query]
        for rank, (count, group) in enumerate(ordered[:top] if top > 0 else ordered, start=1):
            out.append((query, i, group, count, rank))
    return sorted(out)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("tops", [{"a": 3, "b": 1}, {"a": 0, "b": 5}])
def test_ranking_segments_equals_ranking_every_window_end(seed: int, tops: dict[str, int]) -> None:
    segments = _segments(seed)
    got = rank_segments(segments, tops)
    rows = sorted(
        zip(*(got[c].to_pylist() for c in ("query", "i", "group", "distinct", "rank")), strict=True)
    )
    assert rows == _brute(segments, tops)


def test_no_segments_no_rows() -> None:
    empty = _segments(0).slice(0, 0)
    assert rank_segments(empty, {"a": 3}).num_rows == 0
