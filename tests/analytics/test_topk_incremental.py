"""The incremental report of ``SubWindowTopK`` and ``TopKMerge`` against a brute-force oracle.

A report reads only what changed since the last one: counters are scanned (short windows) or
kept sorted and patched (long windows), the last items are reused while no list with items
enters or leaves, and the merge keeps a running window total. The oracle below recomputes every
report from the raw sub-windows (sort the window's summed top-k counts), with no code shared with
the classes under test, on random streams with ties, zero counts, empty and skipped sub-windows,
keys leaving the window, and varied ``k`` and ``N/b`` — in every mode of the report.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.topk import SubWindowTopK
from analytics.topk_merge import QueryParams, TopKMerge

B_NS = 10**9

Counts = dict[str, int]


# -- brute force -------------------------------------------------------------------------------------


def brute_top(counts: Counts, k: int) -> tuple[list[tuple[str, int]], int]:
    """A sub-window's top-k list (count descending, key ascending; no zeros) and k-th count."""
    ranked = sorted(((key, c) for key, c in counts.items() if c > 0), key=lambda kv: (-kv[1], kv[0]))[:k]
    return ranked, (ranked[-1][1] if len(ranked) == k else 0)


def brute_reports(subs: dict[int, tuple[Counts, int]], n_sub: int, k: int, last: int) -> list[tuple]:
    """Every report up to sub-window ``last`` as ``(closing, delta, items, window total)``.

    The stream starts at its first sub-window; a window is reported once it spans ``n_sub``
    sub-windows and (time-based) one of them holds a nonzero count.
    """
    first = min(subs)
    out = []
    for e in range(first + n_sub - 1, last + 1):
        window = [subs.get(i, ({}, 0)) for i in range(e - n_sub + 1, e + 1)]
        if not any(c for counts, _ in window for c in counts.values()):
            continue
        delta, total = 0, 0
        summed: Counts = {}
        for counts, sub_total in window:
            top, kth = brute_top(counts, k)
            delta += kth
            total += sub_total
            for key, c in top:
                summed[key] = summed.get(key, 0) + c
        items = sorted(((key, c) for key, c in summed.items() if c > delta), key=lambda kv: (-kv[1], kv[0]))
        out.append((e, delta, items, total))
    return out


def brute_rows(reports: list[tuple]) -> list[tuple]:
    """The merge's output rows of those reports: one per item, or one rank-0 row."""
    rows = []
    for e, delta, items, total in reports:
        end_ns = (e + 1) * B_NS
        rows += [(end_ns, delta, rank, key, c, total) for rank, (key, c) in enumerate(items, 1)]
        rows += [] if items else [(end_ns, delta, 0, None, None, total)]
    return rows


# -- the report's modes ------------------------------------------------------------------------------


class AlwaysSorted(SubWindowTopK):
    """Keeps the counters sorted and patches them from the first report on."""

    _SCAN_RATIO = 0


class Switching(SubWindowTopK):
    """Switches between scanning, re-sorting and patching as the number of changes moves."""

    _SCAN_RATIO = 1


MODES = {"default": SubWindowTopK, "sorted": AlwaysSorted, "switching": Switching}

# Sub-windows: (gap before it, its counts, extra traffic beyond the counts). Eight keys, small
# counts (ties are common), zeros, empty sub-windows, gaps of one to many sub-windows.
sub_windows = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 1, 2, 3, 12]),
        st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 6), max_size=6),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=60,
)


def stream(spec: list[tuple[int, Counts, int]]) -> dict[int, tuple[Counts, int]]:
    """Sub-window index -> (counts, total), indexes from 1000 with the drawn gaps."""
    subs, index = {}, 1000
    for gap, counts, extra in spec:
        index += gap
        subs[index] = (counts, sum(counts.values()) + extra)
    return subs


@pytest.mark.parametrize("mode", sorted(MODES))
@settings(max_examples=120, deadline=None)
@given(spec=sub_windows, n_sub=st.integers(1, 8), k=st.integers(1, 4), cut=st.integers(0, 60))
def test_merge_rows_equal_brute_force_in_every_mode(mode: str, spec, n_sub: int, k: int, cut: int) -> None:
    subs = stream(spec)
    params = QueryParams(N=n_sub * B_NS, b=B_NS, k=k)
    merge = TopKMerge(params, MODES[mode](params.N, params.b, k, time_based=True))
    rows = []
    for j, (index, (counts, total)) in enumerate(sorted(subs.items())):
        if j == cut:  # a restart from the state's bytes: the counters are re-sorted from scratch
            merge = TopKMerge.from_bytes(merge.to_bytes(), params)
        rows += merge.add_subwindow(counts, index, total)
    assert [row[:6] for row in rows] == brute_rows(brute_reports(subs, n_sub, k, max(subs)))
    assert {row[6] for row in rows} <= {n_sub * B_NS}  # every window holds its N


@pytest.mark.parametrize("mode", sorted(MODES))
@settings(max_examples=120, deadline=None)
@given(spec=sub_windows, n_sub=st.integers(1, 8), k=st.integers(1, 4))
def test_unframed_framed_and_repeated_reports_agree(mode: str, spec, n_sub: int, k: int) -> None:
    subs = stream(spec)
    unframed = MODES[mode](n_sub * B_NS, B_NS, k, time_based=True)
    framed = MODES[mode](n_sub * B_NS, B_NS, k, time_based=True)
    got = []
    for index, (counts, _) in sorted(subs.items()):
        top = unframed.add_subwindow_top(counts, index)
        reports = framed.add_subwindow_indexed(counts, index)
        assert [(i, r["delta"], [(x["key"], x["count"]) for x in r["items"]]) for i, r in reports] == top
        got += top
        # Reading again, and changing what was read, leaves the next reads alone.
        before = unframed.top()
        unframed.top().append(("z", 99))
        assert unframed.top() == before
        if unframed.report() is not None:
            assert unframed.report() == framed.report() == reports[-1][1] if reports else True
    assert got == [(e, delta, items) for e, delta, items, _ in brute_reports(subs, n_sub, k, max(subs))]


@pytest.mark.parametrize("n_sub", [100, 300])
def test_long_windows_keep_the_counters_sorted_and_agree_with_brute_force(n_sub: int) -> None:
    # Many distinct keys in a long window (k·N/b counters, over 40 times the 2k a slide changes):
    # the default mode switches to patching a sorted order.
    import random

    rng = random.Random(n_sub)
    k = 3
    subs = {}
    for i in range(3 * n_sub):
        keys = rng.sample(range(2000), 5)
        counts = {f"h{x}": rng.choice([1, 1, 2, 3, 40]) for x in keys}
        subs[i] = (counts, sum(counts.values()))
    alg = SubWindowTopK(n_sub * B_NS, B_NS, k, time_based=True)
    got = []
    for index, (counts, _) in sorted(subs.items()):
        got += alg.add_subwindow_top(counts, index)
    assert alg._moved is not None, "the counters were not kept sorted in a long window"
    assert got == [(e, delta, items) for e, delta, items, _ in brute_reports(subs, n_sub, k, max(subs))]


# -- the state's bytes -------------------------------------------------------------------------------


def pack_state(subs: dict[int, tuple[Counts, int]], n_sub: int, k: int, last: int) -> bytes:
    """``TopKMerge.to_bytes()`` after ``last``, packed from the documented layout (version 1)."""
    first = min(subs)
    indexes = range(max(first, last - n_sub + 1), last + 1)
    topk = [struct.pack("<BBqqIBqI", 1, 1, n_sub * B_NS, B_NS, k, 1, last + 1, len(indexes))]
    for i in indexes:
        top, kth = brute_top(subs.get(i, ({}, 0))[0], k)
        topk.append(struct.pack("<qI", kth, len(top)))
        topk += [struct.pack("<I", len(key.encode())) + key.encode() + struct.pack("<q", c) for key, c in top]
    topk.append(struct.pack("<qI", 0, 0))  # the open sub-window: empty
    body = b"".join(topk)
    totals = [(i, subs[i][1]) for i in indexes if i in subs]
    return (
        struct.pack("<BI", 1, len(body))
        + body
        + struct.pack("<I", len(totals))
        + b"".join(struct.pack("<qq", i, t) for i, t in totals)
    )


@settings(max_examples=80, deadline=None)
@given(spec=sub_windows, n_sub=st.integers(1, 6), k=st.integers(1, 4))
def test_state_bytes_keep_the_documented_layout(spec, n_sub: int, k: int) -> None:
    subs = stream(spec)
    params = QueryParams(N=n_sub * B_NS, b=B_NS, k=k)
    merge = TopKMerge(params)
    for index, (counts, total) in sorted(subs.items()):
        merge.add_subwindow(counts, index, total)
    data = merge.to_bytes()
    assert data == pack_state(subs, n_sub, k, max(subs))
    assert TopKMerge.from_bytes(data, params).to_bytes() == data
