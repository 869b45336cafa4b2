"""Stage 3 carried across batches = stage 3 over every sketch at once = the union of each window.

``analytics.sketch_carry.SlidingCoupons`` closes windows batch by batch from the batch's own
sketches and what it carried; the oracles are ``window_segments`` over all the sketches (itself
checked against plain unions in ``test_sketch_windows``) and, on one case, the plain unions.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from analytics.sketch_carry import GroupIds, SlidingCoupons
from analytics.sketch_windows import window_segments
from tests.analytics.test_sketch_windows import _expected, _sketch, _traffic


def _expand(segments) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for g, start, stop, n in zip(*segments, strict=True):
        assert start <= stop
        for i in range(int(start), int(stop) + 1):
            assert (int(g), i) not in out, "two segments of one group cover a window end"
            out[(int(g), i)] = int(n)
    return out


def _arrays(rows):
    return (
        np.array([r[0] for r in rows], np.int64),
        np.array([r[1] for r in rows], np.int64),
        pa.array([r[2] for r in rows], pa.binary()),
    )


def _carried(rows, k, lg_k, cuts, *, rebuild_at=(), arrive_early=True) -> dict:
    """Close ``cuts[1:]`` in turn; sketches arrive up to two cuts before their windows close."""
    lo = cuts[0]
    carry = SlidingCoupons(k, lg_k, lo)
    out: dict = {}
    fed: set[int] = set()
    for n, hi in enumerate(cuts[1:], start=1):
        ahead = cuts[min(n + 1, len(cuts) - 1)] if arrive_early else hi
        batch = [j for j, r in enumerate(rows) if j not in fed and r[1] <= ahead and r[1] > carry.lo]
        fed |= set(batch)
        if batch:
            carry.update(*_arrays([rows[j] for j in batch]))
        part = _expand(carry.seek(hi))
        assert not set(part) & set(out)
        out |= part
        if hi in rebuild_at:
            # A restart: the state rebuilt from the closed sub-windows' sketches alone, and the
            # sketches already given for later sub-windows given again.
            fresh = SlidingCoupons(k, lg_k, hi - k)
            closed = [r for r in rows if hi - k < r[1] <= hi]
            if closed:
                fresh.update(*_arrays(closed))
            assert fresh.seek(hi, answers=False)[0].size == 0
            pending = [rows[j] for j in fed if rows[j][1] > hi]
            if pending:
                fresh.update(*_arrays(pending))
            assert fresh.lo == carry.lo == hi
            np.testing.assert_array_equal(fresh.keys, carry.keys)
            np.testing.assert_array_equal(fresh.last, carry.last)
            carry = fresh
    return out


@pytest.mark.parametrize(("k", "lg_k"), [(1, 12), (4, 12), (60, 12), (7, 8), (5, 4)])
def test_batches_give_every_window_of_the_whole_stream(k, lg_k):
    span = 4 * k + 7
    rows = _traffic(seed=k * 100 + lg_k, k=k, span=span, lg_k=lg_k)
    lo, hi = -2 * k, span + k
    whole = _expand(window_segments(*_arrays(rows), k=k, lo=lo, hi=hi, lg_k=lg_k))
    rng = random.Random(k + lg_k)
    for _ in range(3):
        cuts = sorted({lo, hi, *rng.sample(range(lo + 1, hi), min(hi - lo - 1, rng.choice([1, 3, 12])))})
        rebuild = {c for c in cuts[1:-1] if rng.random() < 0.3}
        assert _carried(rows, k, lg_k, cuts, rebuild_at=rebuild) == whole
    # One sub-window per batch, as a paced stream closes them.
    assert _carried(rows, k, lg_k, list(range(lo, hi + 1)), arrive_early=False) == whole


def test_equal_to_the_union_of_each_windows_sketches():
    k, lg_k = 4, 8
    rows = _traffic(seed=11, k=k, span=30, lg_k=lg_k)
    cuts = [-2 * k, -3, 0, 1, 2, 9, 10, 17, 30 + k]
    assert _carried(rows, k, lg_k, cuts) == _expected(rows, k, cuts[0], cuts[-1], lg_k)


def test_a_group_leaving_coupon_mode_only_across_batches():
    # Each sketch holds 300 coupons (coupon mode at lg_k 12); two neighbouring ones (600) do not:
    # the second batch unites the group from a carried coupon set and a new sketch.
    k, lg_k = 3, 12
    rows = [
        (0, 0, _sketch([f"a{n}" for n in range(300)], lg_k, True)),
        (0, 1, _sketch([f"a{n}" for n in range(150)] + [f"b{n}" for n in range(300)], lg_k, True)),
        (0, 2, _sketch(["b1"], lg_k, False)),
        (1, 1, _sketch(["c"], lg_k, True)),
    ]
    cuts = [-5, 0, 1, 2, 3, 10]
    assert _carried(rows, k, lg_k, cuts, arrive_early=False) == _expected(rows, k, -5, 10, lg_k)


def test_the_carry_holds_the_live_coupons_only():
    k, lg_k = 3, 12
    rows = [(g, i, _sketch([f"x{g}.{i % 2}"], lg_k, True)) for g in range(3) for i in range(10)]
    carry = SlidingCoupons(k, lg_k, -1)
    for hi in range(10):
        carry.update(*_arrays([r for r in rows if r[1] == hi])).seek(hi)
        # Two items per group alternate: each coupon's latest sub-window, at most one per item.
        assert len(carry.keys) == 3 * min(2, hi + 1)
        assert (carry.last > hi - k).all() and (carry.last <= hi).all()
    assert carry.groups.tolist() == [0, 1, 2]


def test_renumbered_groups_keep_their_answers():
    k, lg_k = 4, 8
    rows = _traffic(seed=5, k=k, span=20, lg_k=lg_k)
    lo, hi = -2 * k, 20 + k
    whole = _expand(window_segments(*_arrays(rows), k=k, lo=lo, hi=hi, lg_k=lg_k))
    ids = GroupIds()
    labels = [f"g{g}" for g, _, _ in rows]
    gid = ids.ids(pa.array(labels), pa.table({"label": labels}))
    carry = SlidingCoupons(k, lg_k, lo)
    out: dict = {}
    fed = lo + 2  # sketches are given two sub-windows ahead: pending ones are renumbered too
    first = np.flatnonzero(np.array([r[1] for r in rows]) <= fed)
    carry.update(
        gid[first], np.array([rows[j][1] for j in first]), pa.array([rows[j][2] for j in first], pa.binary())
    )
    for at in range(lo + 1, hi + 1):
        batch = np.flatnonzero(np.array([r[1] for r in rows]) == at + 2)
        if len(batch):
            carry.update(
                gid[batch], np.full(len(batch), at + 2), pa.array([rows[j][2] for j in batch], pa.binary())
            )
        g, start, stop, n = carry.seek(at)
        names = ids.labels_of(g)["label"].to_pylist()
        for name, a, b, c in zip(names, start, stop, n, strict=True):
            for i in range(int(a), int(b) + 1):
                out[(int(name[1:]), i)] = int(c)
        kept = carry.groups
        carry.renumber(kept)
        ids.keep(kept)
        gid = ids.ids(pa.array(labels), pa.table({"label": labels}))  # ids of the renumbered table
    assert out == whole
    assert len(ids) < len({g for g, _, _ in rows}) + 1


def test_closed_sub_windows_are_refused():
    carry = SlidingCoupons(3, 12, 5)
    with pytest.raises(ValueError, match="already closed"):
        carry.update(np.array([0]), np.array([5]), pa.array([_sketch(["a"], 12, True)], pa.binary()))
