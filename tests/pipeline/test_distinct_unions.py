"""Stage 3 of the Spark distinct counts: two running unions per window = the union of its N/b sketches.

``pipeline.distinct.sliding_unions`` answers each window from a chunk's prefix and the previous
chunk's suffix union. The reference here is the thesis' definition computed the plain way, in
Python with DataSketches: per group and window end, unite the group's sketches of the last N/b
sub-windows and read the union settled. Sketches are built offline, so Spark's side only unites.
"""

from __future__ import annotations

import random

import pytest
from datasketches import hll_sketch, hll_union

from analytics.distinct import HLL_TYPE, java_round
from pipeline.distinct import sliding_unions

pytestmark = pytest.mark.spark

LG_K = 12


def _sketch(items: list[str]) -> bytes:
    sk = hll_sketch(LG_K, HLL_TYPE)
    for item in items:
        sk.update(item)
    return sk.serialize_updatable()


def _traffic(seed: int, k: int, span: int) -> list[tuple[str, str, int, bytes]]:
    """``(query, group, idx, sketch)``: sparse, bursty and dense groups, gaps, two queries."""
    rng = random.Random(seed)
    rows = []
    for query, groups in (("a", 40), ("b", 5)):
        for g in range(groups):
            # Most groups show up in a sub-window or two; a few in most (dense, past coupon mode).
            density = rng.choice([0.01, 0.03, 0.1, 0.5, 0.95])
            size = rng.choice([1, 3, 20, 700]) if density > 0.4 else rng.choice([1, 2, 5])
            for idx in range(-k, span):
                if rng.random() < density:
                    items = [f"10.{g}.{rng.randrange(8)}.{rng.randrange(size * 4)}" for _ in range(size)]
                    rows.append((query, f"g{g}", idx, _sketch(items)))
    rows.append(("a", "lonely", span // 2, _sketch(["x"])))  # one sketch in the whole stream
    rows.append(("a", "edge", 3 * k - 1, _sketch(["y", "z"])))  # the last sub-window of a chunk
    rows.append(("a", "edge", 3 * k, _sketch(["z"])))  # the first of the next
    return rows


def _expected(rows: list[tuple[str, str, int, bytes]], k: int, lo: int, hi: int) -> dict:
    by_group: dict[tuple[str, str], dict[int, bytes]] = {}
    for query, group, idx, sk in rows:
        by_group.setdefault((query, group), {})[idx] = sk
    out = {}
    for (query, group), sketches in by_group.items():
        for i in range(lo + 1, hi + 1):
            held = [sketches[j] for j in range(i - k + 1, i + 1) if j in sketches]
            if held:
                u = hll_union(LG_K)
                for sk in held:
                    u.update(hll_sketch.deserialize(sk))
                u.update(u.get_result(HLL_TYPE))  # settled, as both engines read it
                out[(query, group, i)] = java_round(u.get_estimate())
    return out


@pytest.mark.parametrize("k", [1, 4, 60])
def test_running_unions_equal_the_union_of_each_windows_sketches(spark, k):
    span = 4 * k + 7
    rows = _traffic(seed=k, k=k, span=span)
    df = spark.createDataFrame(rows, "query string, group string, idx long, sketch binary").repartition(3)
    # Every window from before the first sketch to past the last, in one call and in slices
    # cut anywhere (a micro-batch's range need not start at a chunk).
    lo, hi = -2 * k, span + k
    expected = _expected(rows, k, lo, hi)
    assert any(n > 2**LG_K // 8 for n in expected.values())  # some unions in HLL mode
    got = {(r.query, r.group, r.i): r.distinct for r in sliding_unions(df, k, lo, hi).collect()}
    assert got == expected
    cuts = sorted({lo, hi, *random.Random(k).sample(range(lo + 1, hi), 3)})
    sliced = {}
    for a, b in zip(cuts, cuts[1:], strict=False):
        for r in sliding_unions(df, k, a, b).collect():
            assert (r.query, r.group, r.i) not in sliced
            sliced[(r.query, r.group, r.i)] = r.distinct
    assert sliced == expected


def test_sketches_older_than_the_window_are_not_needed(spark):
    # A batch reads only the sub-windows its windows can hold: idx > lo - k.
    k, lo, hi = 5, 20, 27
    rows = _traffic(seed=7, k=k, span=40)
    kept = [r for r in rows if lo - k < r[2] <= hi]
    schema = "query string, group string, idx long, sketch binary"
    full = sliding_unions(spark.createDataFrame(rows, schema), k, lo, hi).collect()
    cut = sliding_unions(spark.createDataFrame(kept, schema), k, lo, hi).collect()
    assert sorted(full) == sorted(cut) and full
    assert {r.i for r in full} <= set(range(lo + 1, hi + 1))
