"""The false-negative bound of Algorithm 6 (issue 18): a key missing from a report had at most 2·δ.

Every report is checked against a brute-force oracle: the exact counts of the report's window,
summed straight from the stream's records (no sub-window lists, no shared code with
``analytics.topk``). For every report: each key whose exact count exceeds ``2·delta`` is reported
(and every unreported key is within ``unreported_bound``, which is ``delta`` when ``k = 1`` or
``N = b``), and each reported count ``c`` satisfies ``c ≤ exact ≤ c + delta``. Constructed streams
show the bound is needed and tight: an unreported key above ``delta``, and one at exactly ``2·delta``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.topk import ExactSlidingTopK, SubWindowTopK, unreported_bound
from ingest import read_records
from tests.analytics.test_topk import B_NS, run_count_based, time_records, zipf_records
from tests.analytics.test_topk_offline import records_of

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "mixed-small.pcap"


def check_report(report: dict, exact: Counter[str], k: int, n_sub: int) -> list[tuple[int, int]]:
    """Assert the bound on one report; the (exact count, delta) of its unreported keys above delta."""
    delta = report["delta"]
    got = {item["key"]: item["count"] for item in report["items"]}
    for key, c in got.items():
        assert c <= exact[key] <= c + delta, (report, key, exact[key])
    assert {key for key, t in exact.items() if t > 2 * delta} <= got.keys(), report  # the bound
    assert not (k == 1 and got)  # with k = 1 a summed count is a sum of k-th counts: never above δ
    missed = {key: t for key, t in exact.items() if key not in got and t}
    for key, t in missed.items():
        assert t <= unreported_bound(delta, k, n_sub), (report, key, t)
        assert t <= exact.total() - sum(got.values())  # the pipeline rows' total minus their counts
    return [(t, delta) for t in missed.values() if t > delta]


def time_based_reports(records: list[tuple[int, str, int]], n_sub: int, b_ns: int, k: int):
    """Feed ``(ts_ns, key, weight)`` per sub-window (the Spark operator's path, empty ones skipped).

    Yields each report with the exact counts of its window, summed from ``records`` directly.
    """
    per_sub: dict[int, Counter[str]] = {}
    for ts, key, w in records:
        per_sub.setdefault(ts // b_ns, Counter())[key] += w
    alg = SubWindowTopK(n_sub * b_ns, b_ns, k, time_based=True)
    for index in sorted(per_sub):
        for closing, report in alg.add_subwindow_indexed(per_sub[index], index):
            lo = (closing - n_sub + 1) * b_ns  # the window is [lo, (closing + 1)·b)
            exact: Counter[str] = Counter()
            for ts, key, w in records:
                if lo <= ts < (closing + 1) * b_ns:
                    exact[key] += w
            empty = sum(i not in per_sub for i in range(closing - n_sub + 1, closing + 1))
            yield report, exact, empty


def count_based_reports(records: list[tuple[str, int]], N: int, b: int, k: int):
    """Algorithm 6 fed record by record; each report with the exact counts of its window."""
    for report in run_count_based(SubWindowTopK, records, N, b, k, "update_many"):
        exact: Counter[str] = Counter()
        for key, w in records[report["end"] - N : report["end"]]:
            exact[key] += w
        yield report, exact


# -- random streams -----------------------------------------------------------------------------------

COUNT_CONFIGS = [(40, 10, 1), (40, 10, 2), (60, 20, 3), (50, 5, 4), (100, 10, 2), (120, 8, 5), (30, 30, 2)]


@pytest.mark.parametrize("bytes_weight", [False, True])
@pytest.mark.parametrize("n_keys", [12, 60])
@pytest.mark.parametrize(("N", "b", "k"), COUNT_CONFIGS)
def test_count_based_random_streams(N: int, b: int, k: int, n_keys: int, bytes_weight: bool) -> None:
    reports = 0
    for seed in range(4):
        records = zipf_records(600, n_keys, seed=1000 * seed + N + b + k, bytes_weight=bytes_weight)
        for report, exact in count_based_reports(records, N, b, k):
            check_report(report, exact, k, N // b)
            reports += 1
    assert reports == 4 * (600 // b - N // b + 1)


def bursty_time_records(seed: int, n: int = 1500, n_keys: int = 40) -> list[tuple[int, str, int]]:
    """(ts_ns, key, bytes) with Zipf keys, bursts and gaps of several empty sub-windows."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(B_NS / 50, size=n).astype(np.int64)
    long = rng.random(n) < 0.01
    gaps[long] += rng.integers(2 * B_NS, 8 * B_NS, size=int(long.sum()))
    ts = 1_700_000_000 * B_NS + np.cumsum(gaps)
    p = 1 / np.arange(1, n_keys + 1) ** 1.2
    keys = rng.choice(n_keys, size=n, p=p / p.sum())
    sizes = rng.integers(60, 1514, size=n)
    return [(int(t), f"10.1.0.{int(x)}", int(s)) for t, x, s in zip(ts, keys, sizes, strict=True)]


@pytest.mark.parametrize(("n_sub", "k"), [(1, 2), (3, 1), (3, 2), (5, 3), (10, 4), (4, 6)])
def test_time_based_random_streams_with_empty_subwindows(n_sub: int, k: int) -> None:
    reports = with_empty = 0
    for seed in range(3):
        for records in (time_records(seed + 10, n=600), bursty_time_records(seed)):
            for report, exact, empty in time_based_reports(records, n_sub, B_NS, k):
                check_report(report, exact, k, n_sub)
                reports += 1
                with_empty += empty > 0
    # Windows holding empty sub-windows were reported (with N = b, a window with no data is not).
    assert reports > 100 and (with_empty > 10 or n_sub == 1)


def test_random_streams_do_miss_keys_above_delta() -> None:
    """The bound is not vacuous: keys above δ (so truly in the exact answer) do go unreported."""
    missed: list[tuple[int, int]] = []
    for seed in range(4):
        records = zipf_records(600, 60, seed=seed, bytes_weight=True)
        for report, exact in count_based_reports(records, 100, 10, 3):
            missed += check_report(report, exact, 3, 10)
    assert missed and all(delta < t <= 2 * delta for t, delta in missed)


@settings(max_examples=300, deadline=None)
@given(
    subs=st.lists(
        st.dictionaries(st.sampled_from("abcwxyz"), st.integers(0, 9), max_size=5), min_size=1, max_size=12
    ),
    n_sub=st.integers(1, 4),
    k=st.integers(1, 4),
)
def test_adversarial_subwindow_counts(subs: list[dict[str, int]], n_sub: int, k: int) -> None:
    """Any per-sub-window counts, empty sub-windows and ties included (time-based, 1 s sub-windows)."""
    records = [(i * B_NS, key, c) for i, counts in enumerate(subs) for key, c in counts.items() if c]
    if not records:
        return
    for report, exact, _ in time_based_reports(records, n_sub, B_NS, k):
        check_report(report, exact, k, n_sub)


# -- a real capture -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def capture() -> list[tuple[int, str, int]]:
    """(ts_ns, src_ip, wire_len) of every record of ``samples/mixed-small.pcap``, in file order."""
    return records_of(pa.Table.from_batches(list(read_records(SAMPLE))), ("src_ip",), "bytes")


@pytest.mark.parametrize("weight", ["packets", "bytes"])
@pytest.mark.parametrize(("N", "b", "k"), [(1000, 100, 3), (2000, 200, 1), (500, 50, 5), (1000, 1000, 2)])
def test_real_capture_count_based(capture, weight: str, N: int, b: int, k: int) -> None:
    records = [(key, 1 if weight == "packets" else w) for _, key, w in capture]
    assert len(records) == 10_000
    n = 0
    for report, exact in count_based_reports(records, N, b, k):
        check_report(report, exact, k, N // b)
        n += 1
    assert n == len(records) // b - N // b + 1


@pytest.mark.parametrize("weight", ["packets", "bytes"])
@pytest.mark.parametrize(("n_sub", "b_ms", "k"), [(10, 1000, 3), (10, 500, 2), (5, 1000, 1), (6, 250, 4)])
def test_real_capture_time_based(capture, weight: str, n_sub: int, b_ms: int, k: int) -> None:
    records = [(ts, key, 1 if weight == "packets" else w) for ts, key, w in capture]
    n = 0
    for report, exact, _ in time_based_reports(records, n_sub, b_ms * 1_000_000, k):
        check_report(report, exact, k, n_sub)
        n += 1
    assert n > 50


# -- constructed streams: the bound is needed, and attained -------------------------------------------


def test_an_unreported_key_above_delta_count_based_packets() -> None:
    """δ alone is no bound: x has 5 packets in the window, δ = 4, and is not reported."""
    # Sub-window 1: x 3, y 2, z 1 -> top-2 x:3, y:2, k-th 2. Sub-window 2: a 2, b 2, x 2 -> top-2
    # a, b (key text), k-th 2. δ = 4; summed counts x 3, y 2, a 2, b 2: none above 4.
    stream = [(key, 1) for key in "xxxyyz" + "aabbxx"]
    [(report, exact)] = count_based_reports(stream, 12, 6, 2)
    assert report == {"end": 12, "delta": 4, "items": []}
    assert exact["x"] == 5 > report["delta"]
    assert check_report(report, exact, 2, 2) == [(5, 4)]
    # The exact oracle, same δ, does report x.
    oracle = ExactSlidingTopK(12, 6, 2)
    oracle.update_many([key for key, _ in stream[:6]]).slide()
    assert oracle.update_many([key for key, _ in stream[6:]]).slide().report()["items"] == [
        {"key": "x", "count": 5}
    ]


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("c", [1, 5, 1000])
def test_two_delta_is_attained(k: int, c: int) -> None:
    """x alone in second 0 (fewer than k keys: k-th count 0), then k keys before it tie with it."""
    others = [f"a{j}" for j in range(k)]  # all sort before "x"
    records = [(0, "x", c)] + [(B_NS, key, c) for key in [*others, "x"]]
    [(report, exact, _)] = list(time_based_reports(records, 2, B_NS, k))
    assert report["delta"] == c and report["items"] == []
    assert exact["x"] == 2 * c == 2 * report["delta"] == unreported_bound(c, k, 2)
    check_report(report, exact, k, 2)


def test_delta_is_attained_when_k_is_one_or_one_subwindow() -> None:
    # k = 1: x first in second 0, tied with a (which sorts first) in second 1: δ = 10, x has 10.
    [(report, exact, _)] = list(time_based_reports([(0, "x", 5), (B_NS, "a", 5), (B_NS, "x", 5)], 2, B_NS, 1))
    assert report["delta"] == 10 and report["items"] == [] and exact["x"] == 10 == unreported_bound(10, 1, 2)
    # N = b: x third of three tied keys with k = 2: δ = 5, x has 5 and is not reported.
    [(report, exact, _)] = list(time_based_reports([(0, key, 5) for key in "abx"], 1, B_NS, 2))
    assert report["delta"] == 5 and report["items"] == []
    assert exact["x"] == 5 == unreported_bound(5, 2, 1)


def test_unreported_bound() -> None:
    assert unreported_bound(0, 3, 4) == 0
    assert [unreported_bound(7, k, n) for k, n in [(1, 1), (1, 9), (2, 1), (2, 2), (9, 9)]] == [
        7,
        7,
        7,
        14,
        14,
    ]
