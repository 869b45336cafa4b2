"""Stage 1's distinct-count sketches (``pipeline.partials``) = the library's sketch of the same items.

The sketches are built from the items' coupons (``analytics.hll_coupons``) without a call per item:
coupon-mode ones byte for byte from their coupons, larger ones united from coupon-mode pieces.
The oracle: one DataSketches sketch per (sub-window, group) fed every item. Coupon-mode sketches
must hold the same coupons; every sketch must give the same settled estimate (how the distinct
counts read every estimate), and the same count of records.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datasketches import hll_sketch, hll_union

from analytics.distinct import HLL_TYPE, java_round
from analytics.sketch_windows import coupons_of
from pipeline.partials import DistinctSpec, partials_of

S = 1_000_000


def _settled(blob: bytes, lg_k: int) -> int:
    u = hll_union(lg_k)
    u.update(hll_sketch.deserialize(blob))
    u.update(u.get_result(HLL_TYPE))
    return java_round(u.get_estimate())


@pytest.mark.parametrize("lg_k", [4, 8, 12])
def test_stage1_sketches_are_the_librarys(lg_k: int) -> None:
    rng = np.random.default_rng(lg_k)
    n = 20_000
    # Groups from one item to thousands per sub-window (past coupon mode at every lg_k), with
    # repeats, some null groups and empty or null items (counted nowhere).
    group = rng.zipf(1.3, n) % 50
    item = rng.integers(0, 5000, n)
    rows = pa.table(
        {
            "ts": pa.array(np.sort(rng.integers(0, 10 * S, n)), pa.timestamp("us", tz="UTC")),
            "is_control": pa.array(np.zeros(n, bool)),
            "dst_ip": pa.array([None if g == 7 else f"10.0.0.{g}" for g in group], pa.string()),
            "src_ip": pa.array(
                [None if i % 101 == 0 else ("" if i % 103 == 0 else f"192.0.{i % 256}.{i}") for i in item],
                pa.string(),
            ),
        }
    )
    spec = DistinctSpec(name="d", group=("dst_ip",), item=("src_ip",), b_us=S, lg_k=lg_k, lo=-1)
    partials = partials_of(rows, [spec])
    held = partials.filter(pc.is_valid(partials["sketch"]))

    expected: dict[tuple[int, str], hll_sketch] = {}
    records: dict[tuple[int, str], int] = defaultdict(int)
    for r in rows.to_pylist():
        if r["dst_ip"] is None or not r["src_ip"]:
            continue
        key = (int(r["ts"].timestamp() * S) // S, r["dst_ip"])
        expected.setdefault(key, hll_sketch(lg_k, HLL_TYPE)).update(r["src_ip"])
        records[key] += 1
    got = {(r["sw"], r["key"]): (r["sketch"], r["records"]) for r in held.to_pylist()}
    assert set(got) == set(expected)
    modes = set()
    for key, (blob, count) in got.items():
        theirs = expected[key].serialize_compact()
        modes.add(theirs[7] & 3)
        assert count == records[key]
        assert _settled(blob, lg_k) == _settled(theirs, lg_k), key
        if theirs[7] & 3 != 2:  # coupon mode: the same coupons (their order is free)
            assert sorted(coupons_of(pa.array([blob]))[1]) == sorted(coupons_of(pa.array([theirs]))[1])
            assert blob[7] == theirs[7]
    assert 2 in modes and 0 in modes  # HLL and LIST sketches both occurred
