"""A window change at run time (``SubWindowTopK.resize``, ``TopKMerge.resize``; seed 004 §4.2)
against a brute-force oracle: random streams, resized to random sizes at random instants, in every
mode of the report, across a save and restore in the middle of the adaptation.

The rule the oracle spells out, sub-window by sub-window: after a change to ``n'`` sub-windows,
a window holds ``min(n', what it held)`` at once (a shorter window is in force at the change) and
grows by one sub-window per closing up to ``n'`` (a longer one is complete ``n' − n`` sub-windows
later); a window is reported once it holds the fewest sub-windows any report has held since the
start (``N/b`` without a change) and one of them has data. Each report is then the brute-force
report of exactly the sub-windows it holds.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.topk import SubWindowTopK
from analytics.topk_merge import QueryParams, TopKMerge
from tests.analytics.test_topk_incremental import B_NS, MODES, Counts, brute_top, stream, sub_windows


def brute_resized(
    subs: dict[int, tuple[Counts, int]], n_sub: int, k: int, changes: dict[int, int]
) -> list[tuple]:
    """Every merge row, ``changes``: sub-window index -> the window (in sub-windows) from it on."""
    first, last = min(subs), max(subs)
    held, fewest = 0, n_sub
    rows = []
    for e in range(first, last + 1):
        if e in changes:
            n_sub = changes[e]
            held, fewest = min(held, n_sub), min(fewest, n_sub)
        held = min(held + 1, n_sub)
        window = [subs.get(i, ({}, 0)) for i in range(e - held + 1, e + 1)]
        if held < fewest or not any(c for counts, _ in window for c in counts.values()):
            continue
        delta, total, summed = 0, 0, {}
        for counts, sub_total in window:
            top, kth = brute_top(counts, k)
            delta += kth
            total += sub_total
            for key, c in top:
                summed[key] = summed.get(key, 0) + c
        items = sorted(((key, c) for key, c in summed.items() if c > delta), key=lambda kv: (-kv[1], kv[0]))
        end_ns, span = (e + 1) * B_NS, held * B_NS
        rows += [(end_ns, delta, rank, key, c, total, span) for rank, (key, c) in enumerate(items, 1)]
        rows += [] if items else [(end_ns, delta, 0, None, None, total, span)]
    return rows


@pytest.mark.parametrize("mode", sorted(MODES))
@settings(max_examples=150, deadline=None)
@given(
    spec=sub_windows,
    n_sub=st.integers(1, 8),
    k=st.integers(1, 4),
    resizes=st.lists(st.tuples(st.integers(0, 59), st.integers(1, 10)), max_size=4),
    saved_at=st.integers(0, 60),
)
def test_resized_merge_rows_equal_brute_force(mode, spec, n_sub, k, resizes, saved_at) -> None:
    subs = stream(spec)
    indexes = sorted(subs)
    # A change comes before a sub-window the stream adds, as the pipeline changes at a batch
    # boundary, before the batch's first closed sub-window.
    changes = {indexes[j % len(indexes)]: size for j, size in resizes}
    params = QueryParams(N=n_sub * B_NS, b=B_NS, k=k)
    merge = TopKMerge(params, MODES[mode](params.N, params.b, k, time_based=True))
    rows = []
    oracle_changes: dict[int, int] = {}
    for j, index in enumerate(indexes):
        counts, total = subs[index]
        if j and j == saved_at:  # a restart in the middle of the stream, maybe of an adaptation
            merge = TopKMerge.from_bytes(merge.to_bytes(), params)
        if index in changes:
            # in force from the first sub-window closed after it: the open one, the previous + 1
            # (the empty ones skipped before `index` close under the new window)
            oracle_changes[indexes[j - 1] + 1 if j else index] = changes[index]
            merge.resize(changes[index] * B_NS)
        rows += merge.add_subwindow(counts, index, total)
    assert rows == brute_resized(subs, n_sub, k, oracle_changes)


def test_a_shrink_is_in_force_at_once_and_a_growth_completes_later() -> None:
    """Seed 004's E1 protocol on our operator, in sub-windows of 1 s: 60 s, 30 s from t = 80 s,
    60 s again from t = 150 s. The state holds 30 lists from 80 s on; after 150 s the window
    grows one sub-window per second and holds 60 again at 180 s (150 + 60 − 30)."""
    topk = SubWindowTopK(60 * B_NS, B_NS, 3, time_based=True)
    held = {}
    for second in range(240):
        if second == 80:
            topk.resize(30 * B_NS)
        if second == 150:
            topk.resize(60 * B_NS)
        topk.add_subwindow({"a": 2, f"x{second}": 1}, second)
        held[second + 1] = topk.window_held_units // B_NS  # at the window's end
    assert held[60] == 60 and held[80] == 60 and held[81] == 30 and held[150] == 30
    assert [held[t] for t in (151, 165, 179, 180, 181, 240)] == [31, 45, 59, 60, 60, 60]
    assert len(topk._summaries) == 60


def test_a_resize_must_be_a_multiple_of_the_sub_window() -> None:
    topk = SubWindowTopK(4 * B_NS, B_NS, 2, time_based=True)
    with pytest.raises(ValueError, match="multiple of b"):
        topk.resize(B_NS * 5 // 2)
