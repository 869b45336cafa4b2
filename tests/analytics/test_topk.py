"""Algorithm 6 (``analytics.topk``) and its baseline against brute-force recomputation.

The brute force below re-derives every report from the raw records of the window, straight from
the conventions of issue 4 (no shared code with the classes under test).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.topk import ExactSlidingTopK, SubWindowTopK, format_end, top_k
from analytics.topk_baselines import FrequentItemsTopK, capacity_lg

Record = tuple[str, int]  # (key, weight)


# -- brute force -------------------------------------------------------------------------------------


def brute_window(subwindows: list[list[Record]], k: int) -> tuple[int, dict[str, int], Counter[str]]:
    """(delta, summed top-k counts, true counts) of a window given as its sub-windows' records."""
    delta, summed, true = 0, Counter(), Counter()
    for records in subwindows:
        counts: Counter[str] = Counter()
        for key, w in records:
            counts[key] += w
        true.update(counts)
        ranked = sorted((kv for kv in counts.items() if kv[1] > 0), key=lambda kv: (-kv[1], kv[0]))
        top = ranked[:k]
        delta += top[-1][1] if len(top) == k else 0
        for key, c in top:
            summed[key] += c
    return delta, dict(summed), true


def brute_reports(
    subwindows: list[list[Record]], n_sub: int, k: int, end, *, exact: bool = False, skip_empty: bool = False
) -> list[dict]:
    """A report at every closed sub-window i >= n_sub - 1 (``end(i)`` gives its end).

    ``skip_empty`` (time-based): no report for a window whose records all weigh nothing (or none).
    """
    out = []
    for i in range(n_sub - 1, len(subwindows)):
        window = subwindows[i - n_sub + 1 : i + 1]
        if skip_empty and not any(w for sub in window for _, w in sub):
            continue
        delta, summed, true = brute_window(window, k)
        counts = true if exact else summed
        items = sorted(((key, c) for key, c in counts.items() if c > delta), key=lambda kv: (-kv[1], kv[0]))
        out.append({"end": end(i), "delta": delta, "items": [{"key": key, "count": c} for key, c in items]})
    return out


def zipf_records(n: int, n_keys: int, seed: int, *, bytes_weight: bool = False) -> list[Record]:
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, n_keys + 1)
    keys = rng.choice(n_keys, size=n, p=p / p.sum())
    weights = rng.integers(40, 1500, size=n) if bytes_weight else np.ones(n, int)
    return [(f"10.0.0.{int(x)}", int(w)) for x, w in zip(keys, weights, strict=True)]


def run_count_based(cls, records: list[Record], N: int, b: int, k: int, mode: str) -> list[dict]:
    alg = cls(N, b, k)
    reports = []
    for i in range(len(records) // b):
        chunk = records[i * b : (i + 1) * b]
        if mode == "update":
            for key, w in chunk:
                alg.update(key, w)
            out = alg.slide().report()
            reports += [out] if out is not None else []
        elif mode == "update_many":
            out = alg.update_many([key for key, _ in chunk], [w for _, w in chunk]).slide().report()
            reports += [out] if out is not None else []
        else:
            counts: Counter[str] = Counter()
            for key, w in chunk:
                counts[key] += w
            if mode == "topk_rows":  # what the Spark operator passes: only the top-k rows
                counts = Counter(dict(top_k(counts, k)[0]))
            reports += alg.add_subwindow(counts, i)
    return reports


# -- count-based conventions -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["update", "update_many", "add_subwindow", "topk_rows"])
@pytest.mark.parametrize(("N", "b", "k"), [(40, 10, 3), (60, 20, 1), (50, 5, 4), (12, 4, 5), (30, 30, 2)])
@pytest.mark.parametrize("bytes_weight", [False, True])
def test_count_based_equals_brute_force(mode: str, N: int, b: int, k: int, bytes_weight: bool) -> None:
    records = zipf_records(300, 12, seed=N * 7 + b + k, bytes_weight=bytes_weight)
    subwindows = [records[i * b : (i + 1) * b] for i in range(len(records) // b)]
    got = run_count_based(SubWindowTopK, records, N, b, k, mode)
    assert got == brute_reports(subwindows, N // b, k, lambda i: (i + 1) * b)
    assert len(got) == len(records) // b - N // b + 1  # the first report at the end of sub-window N/b
    exact = run_count_based(ExactSlidingTopK, records, N, b, k, mode if mode != "topk_rows" else "update")
    assert exact == brute_reports(subwindows, N // b, k, lambda i: (i + 1) * b, exact=True)


def test_ties_are_broken_by_key_text() -> None:
    # Sub-window 1: b, c, a all twice; top-2 is a, b (text order), the k-th count 2.
    # Sub-window 2: c three times, z once; top-2 c:3, z:1.
    alg = SubWindowTopK(N=12, b=6, k=2)
    assert alg.update_many(["b", "c", "a", "c", "a", "b"]).slide().report() is None
    assert alg.estimate("a") == 2 and alg.estimate("b") == 2 and alg.estimate("c") == 0
    report = alg.update_many(["c", "c", "c", "z", "y", "y"]).slide().report()
    # delta = 2 + 2 (y:2 beats z:1), summed: a 2, b 2, c 3, y 2 -> nothing above 4.
    assert report == {"end": 12, "delta": 4, "items": []}
    assert (
        report
        == brute_reports([[(x, 1) for x in "bcacab"], [(x, 1) for x in "ccczyy"]], 2, 2, lambda i: 12)[0]
    )
    # Ties in the report are ordered by key text too.
    alg = SubWindowTopK(N=4, b=4, k=3)
    assert alg.update_many(["m", "m", "d", "d"]).slide().report() == {
        "end": 4,
        "delta": 0,
        "items": [{"key": "d", "count": 2}, {"key": "m", "count": 2}],
    }


def test_fewer_than_k_items_means_kth_count_zero() -> None:
    assert top_k({"a": 3}, 3) == ((("a", 3),), 0)
    assert top_k({"a": 3, "b": 1, "c": 1}, 3) == ((("a", 3), ("b", 1), ("c", 1)), 1)
    alg = SubWindowTopK(N=6, b=3, k=2)
    alg.update_many(["a", "a", "a"]).slide()
    report = alg.update_many(["a", "b", "b"]).slide().report()
    # delta = 0 (one key in sub-window 1) + 1 (a:1 is second in sub-window 2): a 4 and b 2 exceed it.
    assert report == {"end": 6, "delta": 1, "items": [{"key": "a", "count": 4}, {"key": "b", "count": 2}]}


def test_report_only_when_window_full_and_expiry() -> None:
    alg = SubWindowTopK(N=9, b=3, k=1)
    assert alg.report() is None
    assert [alg.update_many(["a"] * 3).slide().report() for _ in range(2)] == [None, None]
    assert alg.update_many(["a"] * 3).slide().report() == {"end": 9, "delta": 9, "items": []}
    # After three more sub-windows of "b" the "a" lists have expired completely.
    for _ in range(3):
        alg.update_many(["b"] * 3).slide()
    assert alg.estimate("a") == 0 and alg.estimate("b") == 9 and alg.delta == 9
    assert alg.report() == {"end": 18, "delta": 9, "items": []}


# -- time-based conventions --------------------------------------------------------------------------

B_NS = 1_000_000_000


def time_records(seed: int, n: int = 400) -> list[tuple[int, str, int]]:
    """(ts_ns, key, weight) in event-time order, with gaps of several empty sub-windows."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice(
        [0, 0, 0, 1, 10**7, 3 * B_NS, 7 * B_NS], size=n, p=[0.3, 0.2, 0.2, 0.1, 0.1, 0.07, 0.03]
    )
    ts = 1_700_000_000 * B_NS + 123 + np.cumsum(gaps + rng.integers(0, B_NS // 3, size=n))
    keys = rng.choice(6, size=n, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
    return [(int(t), f"h{int(x)}", int(rng.integers(1, 5))) for t, x in zip(ts, keys, strict=True)]


def brute_time_reports(records, N_ns: int, b_ns: int, k: int, *, exact: bool = False) -> list[dict]:
    first, last = records[0][0] // b_ns, records[-1][0] // b_ns
    subwindows = [[] for _ in range(first, last)]  # the last sub-window stays open
    for ts, key, w in records:
        if ts // b_ns < last:
            subwindows[ts // b_ns - first].append((key, w))
    return brute_reports(
        subwindows,
        N_ns // b_ns,
        k,
        lambda i: format_end((first + i + 1) * b_ns),
        exact=exact,
        skip_empty=True,
    )


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize(("n_sub", "k", "seed"), [(3, 2, 1), (5, 1, 2), (4, 3, 3), (1, 2, 4)])
def test_time_based_equals_brute_force_with_empty_subwindows(
    n_sub: int, k: int, seed: int, exact: bool
) -> None:
    records = time_records(seed)
    cls = ExactSlidingTopK if exact else SubWindowTopK
    # Per record: seek the record's sub-window, then count it.
    alg = cls(timedelta(seconds=n_sub), timedelta(seconds=1), k, time_based=True)
    got = []
    for ts, key, w in records:
        got += alg.seek(ts // B_NS)
        alg.update(key, w)
    expected = brute_time_reports(records, n_sub * B_NS, B_NS, k, exact=exact)
    assert got == expected
    # Per sub-window, skipping the empty ones (as the Spark operator sees them), N and b in ns.
    alg = cls(n_sub * B_NS, B_NS, k, time_based=True)
    per_sub: dict[int, Counter[str]] = {}
    for ts, key, w in records:
        per_sub.setdefault(ts // B_NS, Counter())[key] += w
    got = []
    for index in sorted(per_sub)[:-1]:
        got += alg.add_subwindow(per_sub[index], index)
    got += alg.seek(max(per_sub))  # the last record's arrival closes the empty sub-windows before it
    assert got == expected
    # Empty sub-windows were really there and counted toward N/b; windows holding none of the
    # records were skipped (not reported), so some report ends are more than a slide apart.
    indexes = sorted(per_sub)
    assert any(b - a > n_sub for a, b in zip(indexes, indexes[1:], strict=False))
    assert {"delta": 0, "items": []} not in [{"delta": r["delta"], "items": r["items"]} for r in expected]
    ends = [datetime.fromisoformat(r["end"]).timestamp() for r in expected]
    assert any(b - a > 1 for a, b in zip(ends, ends[1:], strict=False))


def test_time_based_end_is_iso_utc_of_window_end() -> None:
    alg = SubWindowTopK(timedelta(milliseconds=1500), timedelta(milliseconds=500), 1, time_based=True)
    t0 = int(datetime(2024, 5, 1, 12, 0, 9, tzinfo=UTC).timestamp()) * B_NS
    index = t0 // (500 * 10**6)
    reports = alg.add_subwindow({"a": 1}, index) + alg.add_subwindow({"a": 2}, index + 2)
    # sub-windows index, index+1 (empty), index+2: one report, at the end of index+2 = 12:00:10.500.
    assert reports == [{"end": "2024-05-01T12:00:10.500Z", "delta": 3, "items": []}]


@pytest.mark.parametrize(
    "ns", [0, 1, 999, 1_000, 1_500_000, 10**9, 1_700_000_010_500_000_000, 1_700_000_000_000_000_007]
)
def test_format_end_round_trips(ns: int) -> None:
    import pandas as pd

    text = format_end(ns)
    assert text.endswith("Z") and pd.Timestamp(text).value == ns
    frac = text[20:-1]
    assert len(frac) in (0, 3, 6, 9)


# -- properties --------------------------------------------------------------------------------------

streams = st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(1, 9)), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(records=streams, n_sub=st.integers(1, 6), b=st.integers(1, 7), k=st.integers(1, 5))
def test_no_false_positives_and_counts_never_exceed_true_counts(records, n_sub, b, k) -> None:
    alg, exact = SubWindowTopK(n_sub * b, b, k), ExactSlidingTopK(n_sub * b, b, k)
    for i in range(len(records) // b):
        chunk = records[i * b : (i + 1) * b]
        keys, weights = [x for x, _ in chunk], [w for _, w in chunk]
        got, truth = (
            alg.update_many(keys, weights).slide().report(),
            exact.update_many(keys, weights).slide().report(),
        )
        assert (got is None) == (truth is None)
        if got is None:
            continue
        assert got["delta"] == truth["delta"]
        true_above = {item["key"]: item["count"] for item in truth["items"]}
        for item in got["items"]:
            assert item["key"] in true_above  # truly above delta
            assert item["count"] <= exact.estimate(item["key"])  # never more than the true count
        # Memory O(k·N/b): at most k pairs per list plus as many global counters.
        assert alg.space <= 2 * k * n_sub


@settings(max_examples=60, deadline=None)
@given(
    records=streams,
    n_sub=st.integers(1, 5),
    b=st.integers(1, 6),
    k=st.integers(1, 4),
    cut=st.integers(0, 200),
)
def test_bytes_round_trip_resumes_exactly(records, n_sub, b, k, cut) -> None:
    full = SubWindowTopK(n_sub * b, b, k)
    out_full, out_resumed = [], []
    resumed = SubWindowTopK(n_sub * b, b, k)
    for i, (key, w) in enumerate(records):
        for alg, out in ((full, out_full), (resumed, out_resumed)):
            alg.update(key, w)
            if (i + 1) % b == 0:
                out.append(alg.slide().report())
        if i == cut:
            data = resumed.to_bytes()
            assert data[0] == 1  # version byte
            resumed = SubWindowTopK.from_bytes(data)
            assert resumed.to_bytes() == data
    assert out_resumed == out_full
    assert resumed.report() == full.report() and resumed.space == full.space


def test_bytes_round_trip_time_based() -> None:
    alg = SubWindowTopK(3 * B_NS, B_NS, 2, time_based=True)
    assert SubWindowTopK.from_bytes(alg.to_bytes()).index is None
    reports = alg.add_subwindow({"a": 3, "b": 1}, 10) + alg.add_subwindow({"é": 2}, 12)
    copy = SubWindowTopK.from_bytes(alg.to_bytes())
    assert copy.time_based and copy.index == 13 and copy.report() == alg.report() == reports[-1]
    assert copy.add_subwindow({"a": 5}, 15) == alg.add_subwindow({"a": 5}, 15)


def test_from_bytes_rejects_bad_data() -> None:
    alg = SubWindowTopK(4, 2, 1)
    alg.update("a").update("b").slide()
    data = alg.update("c").to_bytes()
    with pytest.raises(ValueError, match="version 9"):
        SubWindowTopK.from_bytes(b"\x09" + data[1:])
    with pytest.raises(ValueError, match="trailing"):
        SubWindowTopK.from_bytes(data + b"\x00")


# -- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"N": 10, "b": 3, "k": 1}, r"^N: must be a multiple of b"),
        ({"N": 10, "b": 5, "k": 0}, r"^k: must be an integer >= 1"),
        ({"N": 10, "b": 5, "k": 2.0}, r"^k: must be an integer >= 1"),
        ({"N": 10, "b": 5, "k": True}, r"^k: must be an integer >= 1"),
        ({"N": 10, "b": 0, "k": 1}, r"^b: must be positive"),
        ({"N": -10, "b": 5, "k": 1}, r"^N: must be positive"),
        ({"N": "10", "b": 5, "k": 1}, r"^N: expected an integer"),
        ({"N": timedelta(seconds=10), "b": 5, "k": 1}, r"^N: a duration needs time_based=True"),
        ({"N": 10, "b": 5, "k": 1, "time_based": 1}, r"^time_based: expected True or False"),
        (
            {"N": timedelta(seconds=1), "b": timedelta(milliseconds=300), "k": 1, "time_based": True},
            r"^N: must be a mul",
        ),
    ],
)
@pytest.mark.parametrize("cls", [SubWindowTopK, ExactSlidingTopK, FrequentItemsTopK])
def test_parameter_errors_name_the_parameter(cls, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_usage_errors_name_the_parameter() -> None:
    alg = SubWindowTopK(4, 2, 1)
    with pytest.raises(ValueError, match=r"^b: the open sub-window would hold 3 records"):
        alg.update_many(["a", "b", "c"])
    with pytest.raises(ValueError, match=r"^b: the open sub-window holds 1 records, not b=2"):
        alg.update("a").slide()
    with pytest.raises(ValueError, match=r"^weight: must be >= 0"):
        alg.update("a", -1)
    with pytest.raises(ValueError, match=r"^counts: the open sub-window already has"):
        alg.add_subwindow({"a": 1})
    with pytest.raises(ValueError, match=r"^index: seek\(\) is for time-based"):
        alg.seek(3)
    fresh = SubWindowTopK(4, 2, 1)
    with pytest.raises(ValueError, match=r"^index: expected the next sub-window 0, got 5"):
        fresh.add_subwindow({"a": 1}, 5)
    with pytest.raises(ValueError, match=r"^counts: must be >= 0"):
        fresh.add_subwindow({"a": -1})
    timed = SubWindowTopK(4 * B_NS, B_NS, 1, time_based=True)
    with pytest.raises(ValueError, match=r"^index: no open sub-window yet"):
        timed.update("a")
    with pytest.raises(ValueError, match=r"^index: required for time-based"):
        timed.add_subwindow({"a": 1})
    timed.add_subwindow({"a": 1}, 7)
    with pytest.raises(ValueError, match=r"^index: sub-window 6 is before the open sub-window 8"):
        timed.add_subwindow({"a": 1}, 6)


def test_repr_and_clone() -> None:
    alg = SubWindowTopK(timedelta(seconds=10), timedelta(seconds=1), 5, time_based=True)
    assert repr(alg) == (
        "SubWindowTopK(N=datetime.timedelta(seconds=10), b=datetime.timedelta(seconds=1), k=5, "
        "time_based=True)"
    )
    assert repr(ExactSlidingTopK(100, 20, 3)) == "ExactSlidingTopK(N=100, b=20, k=3, time_based=False)"
    alg.add_subwindow({"a": 1}, 3)
    twin = alg.clone()
    assert repr(twin) == repr(alg) and twin.index is None and twin.space == 0


# -- the DataSketches baseline -----------------------------------------------------------------------


def test_capacity_lg() -> None:
    for counters in range(1, 3000, 37):
        lg = capacity_lg(counters)
        assert 0.75 * 2**lg >= counters and (lg == 3 or 0.75 * 2 ** (lg - 1) < counters)


def test_baseline_is_exact_when_nothing_is_purged() -> None:
    # Sub-windows of 5 records with 4 keys: a 6-counter sketch never purges, so delta is 0 and every
    # key of the window is reported with its true count.
    records = zipf_records(200, 4, seed=5, bytes_weight=True)
    base, exact = FrequentItemsTopK(20, 5, 3), ExactSlidingTopK(20, 5, 1)
    for i in range(len(records) // 5):
        chunk = records[i * 5 : (i + 1) * 5]
        got = base.update_many([x for x, _ in chunk], [w for _, w in chunk]).slide().report()
        truth = exact.update_many([x for x, _ in chunk], [w for _, w in chunk]).slide().report()
        if got is not None:
            assert got["delta"] == 0
            assert {it["key"]: it["count"] for it in got["items"]} == {
                key: exact.estimate(key)
                for key in "10.0.0.0 10.0.0.1 10.0.0.2 10.0.0.3".split()
                if exact.estimate(key)
            }
            assert truth is not None


@settings(max_examples=60, deadline=None)
@given(records=streams, n_sub=st.integers(1, 5), b=st.integers(1, 30))
def test_baseline_no_false_positives_and_lower_bounds(records, n_sub, b) -> None:
    base, exact = FrequentItemsTopK(n_sub * b, b, 1), ExactSlidingTopK(n_sub * b, b, 1)
    for i in range(len(records) // b):
        chunk = records[i * b : (i + 1) * b]
        got = base.update_many([x for x, _ in chunk], [w for _, w in chunk]).slide().report()
        exact.update_many([x for x, _ in chunk], [w for _, w in chunk]).slide()
        if got is None:
            continue
        for item in got["items"]:
            assert got["delta"] < item["count"] <= exact.estimate(item["key"])
        # Every key's true count lies between its lower bound and lower bound + delta.
        for key in "abcdefgh":
            assert base.estimate(key) <= exact.estimate(key) <= base.estimate(key) + got["delta"]


def test_baseline_time_based_and_add_subwindow() -> None:
    base = FrequentItemsTopK(2 * B_NS, B_NS, 2, time_based=True)
    reports = base.add_subwindow({"a": 4, "b": 1}, 5) + base.add_subwindow({"a": 2}, 7)
    # Sub-windows 5, 6 (empty), 7: reports at the end of 6 and 7.
    assert [r["end"] for r in reports] == [format_end(7 * B_NS), format_end(8 * B_NS)]
    assert reports[-1]["items"] == [{"key": "a", "count": 2}]
    with pytest.raises(ValueError, match=r"^lg_max_map_size: must be an integer in 3..26"):
        FrequentItemsTopK(10, 5, 1, lg_max_map_size=2)


# -- gaps in event time (faults issue, item 9) ----------------------------------------------------

YEAR_S = 365 * 86_400


class _CountingTopK(SubWindowTopK):
    """Fails as soon as more sub-windows are closed than ``limit``: a gap must cost O(N/b)."""

    limit = 0

    def _push(self, index, counts) -> None:
        self.pushes = getattr(self, "pushes", 0) + 1
        if self.pushes > self.limit:
            raise AssertionError(f"closed {self.pushes} sub-windows; a gap must not cost its length")
        super()._push(index, counts)


def brute_sparse_reports(
    per_sub: dict[int, Counter[str]], n_sub: int, k: int, b_ns: int, last: int
) -> list[dict]:
    """Brute force over the windows that hold data: window ends ``d .. d + n_sub - 1`` of every
    sub-window ``d`` with records, closed before ``last`` (the open sub-window), and full: the
    stream starts at its first record's sub-window."""
    first = min(per_sub)
    ends = sorted({e for d in per_sub for e in range(d, d + n_sub) if first + n_sub - 1 <= e < last})
    out = []
    for e in ends:
        window = [list(per_sub.get(i, Counter()).items()) for i in range(e - n_sub + 1, e + 1)]
        delta, summed, _ = brute_window(window, k)
        items = sorted(((key, c) for key, c in summed.items() if c > delta), key=lambda kv: (-kv[1], kv[0]))
        out.append(
            {
                "end": format_end((e + 1) * b_ns),
                "delta": delta,
                "items": [{"key": key, "count": c} for key, c in items],
            }
        )
    return out


@pytest.mark.parametrize(("n_sub", "gap_years"), [(10, 10), (60, 12), (3, 1)])
def test_a_gap_of_years_costs_one_window_and_reports_only_windows_with_data(
    n_sub: int, gap_years: int
) -> None:
    # A capture from 2002 then one from 2014 (or live capture after a replay): 1 s sub-windows.
    t2002, t2014 = 1_010_000_000, 1_010_000_000 + gap_years * YEAR_S
    rng = np.random.default_rng(n_sub)
    per_sub: dict[int, Counter[str]] = {}
    for start in (t2002, t2014):
        for second in range(start, start + 3 * n_sub):
            if rng.random() < 0.8:  # short gaps inside each capture too
                per_sub[second] = Counter({f"h{int(x)}": 1 + int(x) for x in rng.integers(0, 5, size=4)})
    data = sorted(per_sub)
    alg = _CountingTopK(n_sub * B_NS, B_NS, 2, time_based=True)
    # Every data sub-window and at most N/b empty ones on each side of the gap: not ~3e8 closings.
    alg.limit = len(data) + 4 * n_sub
    got = []
    for index in data[:-1]:
        got += alg.add_subwindow(per_sub[index], index)
    got += alg.seek(data[-1])
    assert got == brute_sparse_reports(per_sub, n_sub, 2, B_NS, data[-1])
    # The last window with 2002's data is the last report before 2014's first.
    ends = [r["end"] for r in got]
    last_2002 = max(i for i in data if i < t2014)
    assert format_end((last_2002 + n_sub) * B_NS) in ends
    assert not [
        e for e in ends if format_end((last_2002 + n_sub) * B_NS) < e < format_end((t2014 + 1) * B_NS)
    ]
    # The state survives its bytes across the gap, and the exact oracle agrees (same driver).
    again = SubWindowTopK.from_bytes(alg.to_bytes())
    assert again.to_bytes() == alg.to_bytes() and again.report() == alg.report()
    exact = ExactSlidingTopK(n_sub * B_NS, B_NS, 2, time_based=True)
    exact_got = [r for i in data[:-1] for r in exact.add_subwindow(per_sub[i], i)] + exact.seek(data[-1])
    assert [r["end"] for r in exact_got] == ends


def test_a_gap_right_after_the_first_subwindow_and_per_record_seek() -> None:
    # The window is not yet full when the gap starts; the per-record path (seek/update) too.
    alg = _CountingTopK(5 * B_NS, B_NS, 2, time_based=True)
    alg.limit = 12
    alg.seek(100)
    alg.update("a", 3)
    later = 100 + 10 * YEAR_S
    reports = alg.seek(later)
    # Sub-window 100 then four empty ones: the only full window holding "a" ends at 105.
    assert reports == [{"end": format_end(105 * B_NS), "delta": 0, "items": [{"key": "a", "count": 3}]}]
    assert alg.report() is None  # the window before `later` holds nothing
    alg.update("b", 2)
    after = {"end": format_end((later + 1) * B_NS), "delta": 0, "items": [{"key": "b", "count": 2}]}
    assert alg.seek(later + 1) == [after] and alg.report() == after
    assert alg.pushes == 6 + 5 + 1  # 100..105, the last window's four empties and `later`
