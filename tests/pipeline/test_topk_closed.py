"""The top-k kind's hand-over of closed sub-windows (``pipeline.topk._closed_top_k``), without Spark.

Sub-windows, ranks and totals are found in numpy, and only the top-k rows become Python objects;
this checks them against a brute force over the rows: per (query, sub-window) in order, its rows
ranked by count descending then key text (``docs/topk.md`` convention 1), cut at the query's k,
and the sum of all its counts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.topk import _closed_top_k


def brute(rows: list[tuple[int, int, str, int]], k: list[int]) -> list[tuple[int, int, list, int]]:
    groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for code, sw, key, count in rows:
        groups.setdefault((code, sw), []).append((key, count))
    out = []
    for (code, sw), pairs in sorted(groups.items()):
        ranked = sorted(pairs, key=lambda kv: (-kv[1], kv[0]))
        out.append((code, sw, ranked[: k[code]], sum(c for _, c in pairs)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_closed_top_k_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = [int(x) for x in rng.integers(1, 5, size=3)]
    # Unique (code, sw, key) rows, shuffled; small counts so that ties are common, some zeros.
    seen = set()
    rows = []
    for _ in range(int(rng.integers(1, 400))):
        code, sw, key = int(rng.integers(0, 3)), int(rng.integers(0, 30)), f"k{int(rng.integers(0, 12))}"
        if (code, sw, key) not in seen:
            seen.add((code, sw, key))
            rows.append((code, sw, key, int(rng.integers(0, 4))))
    table = pa.table(
        {
            "code": pa.array([r[0] for r in rows], pa.int64()),
            "sw": pa.array([r[1] for r in rows], pa.int64()),
            "key": pa.array([r[2] for r in rows], pa.string()),
            "count": pa.array([r[3] for r in rows], pa.int64()),
        }
    )
    # Several chunks, as a concatenation of batches hands them over.
    table = pa.concat_tables([table.slice(0, len(rows) // 2), table.slice(len(rows) // 2)])
    got = [(c, sw, list(top.items()), total) for c, sw, top, total in _closed_top_k(table, np.array(k))]
    assert got == brute(rows, k)
    assert all(type(total) is int and type(sw) is int for _, sw, _, total in got)


def test_no_closed_rows_makes_no_sub_windows() -> None:
    empty = pa.table(
        {
            "code": pa.array([], pa.int64()),
            "sw": pa.array([], pa.int64()),
            "key": pa.array([], pa.string()),
            "count": pa.array([], pa.int64()),
        }
    )
    assert list(_closed_top_k(empty, np.array([3]))) == []
