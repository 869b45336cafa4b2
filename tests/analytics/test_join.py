"""The symmetric hash join against the brute-force oracle (seed 003 §2.1-2.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import analytics.join as join_module
from analytics.join import BatchStats, ExactWindowJoin, SymmetricHashJoin, combine_stats
from analytics.shedding import LoadShedder

S = 1_000_000_000  # ns per second


def brute_force_pairs(tl, kl, tr, kr, t_left_s, t_right_s) -> set[tuple[int, int]]:
    """Every (left index, right index) with equal keys and t_l - T_R ≤ t_r ≤ t_l + T_L: a double loop."""
    out = set()
    for i, (a, ka) in enumerate(zip(tl, kl, strict=True)):
        for j, (b, kb) in enumerate(zip(tr, kr, strict=True)):
            if ka == kb and a - t_right_s * S <= b <= a + t_left_s * S:
                out.add((i, j))
    return out


def random_streams(rng, n_left, n_right, span_s, n_keys, *, tick_ns=S // 10, strings=False):
    """Timestamps on a coarse grid (so equal timestamps and exact window boundaries occur)."""
    tl = np.sort(rng.integers(0, span_s * S // tick_ns, n_left)) * tick_ns
    tr = np.sort(rng.integers(0, span_s * S // tick_ns, n_right)) * tick_ns
    kl, kr = rng.integers(0, n_keys, n_left), rng.integers(0, n_keys, n_right)
    if strings:
        kl = np.array([f"10.0.0.{k}" for k in kl], dtype=object)
        kr = np.array([f"10.0.0.{k}" for k in kr], dtype=object)
    return tl, kl, tr, kr


def run_batches(join, tl, kl, tr, kr, cuts_ns, *, verbs=False, **kw):
    """Feed the streams cut at the given times; returns the per-batch outputs.

    ``verbs``: ``update(...)`` then ``report()`` instead of the batch form ``process_batch(...)``.
    """
    outs = []
    bounds = [-np.inf, *cuts_ns, np.inf]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        ml = (tl >= lo) & (tl < hi)
        mr = (tr >= lo) & (tr < hi)
        args = (tl[ml], kl[ml], tr[mr], kr[mr])
        kw |= {"left_ids": np.flatnonzero(ml), "right_ids": np.flatnonzero(mr)}
        if verbs:
            assert join.update(*args, **kw) is join
            outs.append(join.report())
        else:
            outs.append(join.process_batch(*args, **kw))
    return outs


def pair_set(frame: pd.DataFrame) -> set[tuple[int, int]]:
    return set(zip(frame["left_id"].tolist(), frame["right_id"].tolist(), strict=True))


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize(("t_left", "t_right"), [(1.5, 0.5), (1.0, 1.0), (0.0, 2.0), (0.3, 0.0)])
def test_matches_brute_force_and_oracle_per_batch(strings, t_left, t_right):
    rng = np.random.default_rng(7)
    tl, kl, tr, kr = random_streams(rng, 400, 300, 20, 12, strings=strings)
    cuts = np.sort(rng.choice(np.arange(1, 20) * S, 8, replace=False))
    got = run_batches(SymmetricHashJoin(t_left, t_right), tl, kl, tr, kr, cuts)
    exact = run_batches(ExactWindowJoin(t_left, t_right), tl, kl, tr, kr, cuts)
    for g, e in zip(got, exact, strict=True):  # same rows, same order, batch by batch
        pd.testing.assert_frame_equal(g.reset_index(drop=True), e.reset_index(drop=True), check_dtype=False)
    everything = pd.concat(got)
    assert len(everything) == len(pair_set(everything))  # no pair twice
    assert pair_set(everything) == brute_force_pairs(tl, kl, tr, kr, t_left, t_right)


@pytest.mark.parametrize("cls", [SymmetricHashJoin, ExactWindowJoin])
def test_update_then_report_is_the_batch_form(cls):
    rng = np.random.default_rng(11)
    tl, kl, tr, kr = random_streams(rng, 200, 150, 10, 6, strings=True)
    cuts = np.arange(1, 10) * S
    batch_form = run_batches(cls(1.0, 0.5), tl, kl, tr, kr, cuts)
    join = cls(1.0, 0.5)
    by_verbs = run_batches(join, tl, kl, tr, kr, cuts, verbs=True)
    for a, b in zip(batch_form, by_verbs, strict=True):
        pd.testing.assert_frame_equal(a, b)
    assert sum(map(len, by_verbs)) > 0
    pd.testing.assert_frame_equal(join.report(), by_verbs[-1])  # reading again: the same rows
    fresh = cls(1.0, 0.5).report()  # before the first batch: no rows, the output's columns
    assert len(fresh) == 0 and list(fresh.columns) == ["left_id", "left_ts", "right_id", "right_ts", "key"]


def test_results_are_output_not_state():
    j = SymmetricHashJoin(1, 1).update([0], ["a"], [0], ["a"])
    assert len(j.report()) == 1
    assert len(SymmetricHashJoin.from_bytes(j.to_bytes()).report()) == 0


def test_window_boundaries_are_inclusive():
    # T_L = 2 s, T_R = 1 s. Left tuple at 10 s. A right tuple joins iff 9 s ≤ t_r ≤ 12 s.
    right_ts = np.array([9 * S - 1, 9 * S, 12 * S, 12 * S + 1])
    j = SymmetricHashJoin(2, 1)
    out = j.process_batch(np.array([10 * S]), ["k"], right_ts, ["k"] * 4)
    assert out["right_id"].tolist() == [1, 2]
    # The same across batches, each tuple in its own batch, in time order.
    j2 = SymmetricHashJoin(2, 1)
    found = []
    for t, side in sorted([(10 * S, "L"), *[(int(t), "R") for t in right_ts]]):
        if side == "L":
            found.append(j2.process_batch([t], ["k"], [], []))
        else:
            found.append(
                j2.process_batch([], [], [t], ["k"], right_ids=[int(np.flatnonzero(right_ts == t)[0])])
            )
    assert sorted(pd.concat(found)["right_id"].tolist()) == [1, 2]


def test_equal_timestamps_join_once_whatever_the_batching():
    t = 5 * S
    # Same batch: left first in processing order, the right tuple finds it.
    out = SymmetricHashJoin(0, 0).process_batch([t, t], ["a", "a"], [t], ["a"])
    assert pair_set(out) == {(0, 0), (1, 0)}
    # Left in one batch, right at the same instant in the next one.
    j = SymmetricHashJoin(0, 0)
    first = j.process_batch([t], ["a"], [], [])
    second = j.process_batch([], [], [t], ["a"])
    assert len(first) == 0 and pair_set(second) == {(0, 0)}
    # Right first, then left at the same instant.
    j = SymmetricHashJoin(0, 0)
    j.process_batch([], [], [t], ["a"])
    assert pair_set(j.process_batch([t], ["a"], [], [])) == {(0, 0)}


def test_expiry_keeps_exactly_the_live_window():
    rng = np.random.default_rng(3)
    tl, kl, tr, kr = random_streams(rng, 300, 300, 30, 5)
    j = SymmetricHashJoin(2.0, 0.5)
    bounds = [-np.inf, *(np.arange(1, 30) * S), np.inf]
    clock = None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        ml, mr = (tl >= lo) & (tl < hi), (tr >= lo) & (tr < hi)
        j.process_batch(tl[ml], kl[ml], tr[mr], kr[mr])
        seen = np.concatenate([tl[tl < hi], tr[tr < hi]])
        if len(seen):
            clock = seen.max()
        if clock is None:
            continue
        # Brute force: a left tuple is alive while a future right tuple (t ≥ clock) could still
        # reach it: t_l ≥ clock - T_L; a right tuple while t_r ≥ clock - T_R.
        alive_l = int(np.sum((tl < hi) & (tl >= clock - 2 * S)))
        alive_r = int(np.sum((tr < hi) & (tr >= clock - S // 2)))
        assert j.state_size() == (alive_l, alive_r)
        assert j.last_stats is not None and j.last_stats.state_left == alive_l


def test_late_tuples_within_lateness_join_exactly():
    rng = np.random.default_rng(11)
    tl, kl, tr, kr = random_streams(rng, 300, 300, 20, 6)
    # Deliver in arrival order = timestamp + a delay of up to 0.8 s, in batches of 1 s of arrival time.
    delay_l = rng.integers(0, 8, len(tl)) * (S // 10)
    delay_r = rng.integers(0, 8, len(tr)) * (S // 10)
    j = SymmetricHashJoin(1.0, 1.0, lateness_s=0.8)
    outs = []
    for b in range(22):
        ml = ((tl + delay_l) // S) == b
        mr = ((tr + delay_r) // S) == b
        outs.append(
            j.process_batch(
                tl[ml], kl[ml], tr[mr], kr[mr], left_ids=np.flatnonzero(ml), right_ids=np.flatnonzero(mr)
            )
        )
    got = pd.concat(outs)
    assert len(got) == len(pair_set(got))
    assert pair_set(got) == brute_force_pairs(tl, kl, tr, kr, 1.0, 1.0)
    # Without the lateness allowance, the same delivery loses pairs and counts late tuples.
    j0 = SymmetricHashJoin(1.0, 1.0)
    lost, late = [], 0
    for b in range(22):
        ml = ((tl + delay_l) // S) == b
        mr = ((tr + delay_r) // S) == b
        lost.append(
            j0.process_batch(
                tl[ml], kl[ml], tr[mr], kr[mr], left_ids=np.flatnonzero(ml), right_ids=np.flatnonzero(mr)
            )
        )
        late += j0.last_stats.late
    assert pair_set(pd.concat(lost)) < pair_set(got)
    assert late > 0


def test_hash_collisions_are_filtered(monkeypatch):
    """Every string key hashed to the same code: the key comparison must still separate them."""
    monkeypatch.setattr(
        join_module.pd.util, "hash_array", lambda arr, categorize=True: np.zeros(len(arr), np.uint64)
    )
    rng = np.random.default_rng(5)
    tl, kl, tr, kr = random_streams(rng, 200, 200, 10, 8, strings=True)
    got = pd.concat(run_batches(SymmetricHashJoin(1, 1), tl, kl, tr, kr, np.arange(1, 10) * S))
    assert pair_set(got) == brute_force_pairs(tl, kl, tr, kr, 1, 1)


def test_payload_and_output_layout():
    j = SymmetricHashJoin(1, 1)
    out = j.process_batch(
        pa.array([0, S], pa.timestamp("ns", tz="UTC")),
        pa.array(["x", "y"]),
        np.array([S // 2], dtype="datetime64[ns]"),
        pd.Series(["y"]),
        left_payload={"port": [80, 443]},
        right_payload={"host": pa.array(["h1"])},
    )
    assert list(out.columns) == [
        "left_id",
        "left_ts",
        "right_id",
        "right_ts",
        "key",
        "left_port",
        "right_host",
    ]
    assert out.iloc[0].to_dict() == {
        "left_id": 1,
        "left_ts": pd.Timestamp(S, tz="UTC"),
        "right_id": 0,
        "right_ts": pd.Timestamp(S // 2, tz="UTC"),
        "key": "y",
        "left_port": 443,
        "right_host": "h1",
    }
    # The payload travels with stored tuples too.
    out2 = j.process_batch([], [], [S], ["x"], right_payload={"host": ["h2"]})  # 1 s after x: inclusive
    assert out2[["left_id", "left_port", "right_host"]].values.tolist() == [[0, 80, "h2"]]
    with pytest.raises(ValueError, match="right_payload"):
        j.process_batch([], [], [2 * S], ["x"], right_payload={"other": ["h3"]})


def test_track_unmatched_reports_tuples_that_expire_alone():
    rng = np.random.default_rng(9)
    tl, kl, tr, kr = random_streams(rng, 200, 100, 20, 40)
    j = SymmetricHashJoin(1.0, 0.0, track_unmatched=True)
    outs = run_batches(j, tl, kl, tr, kr, np.arange(1, 20) * S)
    gone = j.expired_unmatched()
    matched_l = {a for a, _ in pair_set(pd.concat(outs))}
    clock = max(tl.max(), tr.max())
    expected = {i for i in range(len(tl)) if i not in matched_l and tl[i] < clock - S}
    assert set(gone.loc[gone["side"] == "left", "id"]) == expected
    assert len(j.expired_unmatched()) == 0  # cleared


def test_advance_expires_as_a_later_tuple_would():
    """Moving the clock without tuples expires exactly what a later tuple of another key expires
    (the oracle: the same join fed one more right tuple at that time), unmatched rows included."""
    rng = np.random.default_rng(11)
    tl, kl, tr, kr = random_streams(rng, 300, 150, 30, 40)
    quiet, fed = (SymmetricHashJoin(2.0, 1.0, lateness_s=0.5, track_unmatched=True) for _ in range(2))
    for j in (quiet, fed):
        run_batches(j, tl, kl, tr, kr, np.arange(1, 20) * S)
        j.expired_unmatched()  # what expired on the way: the same for both
    later = int(max(tl.max(), tr.max())) + 3 * S
    assert quiet.advance(later) > 0
    fed.update([], [], [later], [-1])
    fed_left, fed_right = fed.state_size()
    assert quiet.state_size() == (fed_left, fed_right - 1)  # all but the tuple fed
    gone, expected = quiet.expired_unmatched(), fed.expired_unmatched()
    assert sorted(zip(gone["side"], gone["id"], strict=True)) == sorted(
        zip(expected["side"], expected["id"], strict=True)
    )
    assert len(gone) > 0
    # never back, and a later tuple is judged late against the moved clock
    assert quiet.advance(later - S) == 0
    quiet.update([later - S], [1], [], [])
    assert quiet.last_stats is not None and quiet.last_stats.late == 1


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(2)
    tl, kl, tr, kr = random_streams(rng, 300, 300, 20, 10, strings=True)
    cuts = np.arange(1, 20) * S

    def feed(j, lo, hi):
        outs = []
        for c0, c1 in zip(cuts[lo:hi], cuts[lo + 1 : hi + 1], strict=True):
            ml, mr = (tl >= c0) & (tl < c1), (tr >= c0) & (tr < c1)
            outs.append(
                j.process_batch(
                    tl[ml],
                    kl[ml],
                    tr[mr],
                    kr[mr],
                    left_ids=np.flatnonzero(ml),
                    right_ids=np.flatnonzero(mr),
                    left_payload={"t": tl[ml]},
                )  # fmt: skip
            )
        return outs

    one = SymmetricHashJoin(1.0, 0.5, shedder=LoadShedder("pni", 0.6, 0.4, seed=3))
    whole = pd.concat(feed(one, 0, 18))
    two = SymmetricHashJoin(1.0, 0.5, shedder=LoadShedder("pni", 0.6, 0.4, seed=3))
    first = feed(two, 0, 9)
    restored = SymmetricHashJoin.from_bytes(
        two.to_bytes(), shedder=LoadShedder.from_bytes(two.shedder.to_bytes())
    )
    assert restored.state_size() == two.state_size()
    assert repr(restored) == repr(two)
    rest = feed(restored, 9, 18)
    pd.testing.assert_frame_equal(
        pd.concat(first + rest).reset_index(drop=True), whole.reset_index(drop=True)
    )
    with pytest.raises(ValueError, match="version"):
        SymmetricHashJoin.from_bytes(b"\x09")


def test_statistics_of_a_batch():
    rng = np.random.default_rng(4)
    tl, kl, tr, kr = random_streams(rng, 2000, 2000, 10, 20, tick_ns=1000)
    j = SymmetricHashJoin(0.5, 0.5)
    stats: list[BatchStats] = []
    total = 0
    for b in range(10):
        ml, mr = (tl // S) == b, (tr // S) == b
        total += len(j.process_batch(tl[ml], kl[ml], tr[mr], kr[mr]))
        stats.append(j.last_stats)
    run = combine_stats(stats)
    assert (run.n_left, run.n_right, run.results) == (2000, 2000, total)
    assert run.unshed_estimate == total  # no shedding: every result has weight 1
    assert run.span_s == pytest.approx((max(tl.max(), tr.max()) - min(tl.min(), tr.min())) / S)
    assert run.lambda_left == pytest.approx(2000 / run.span_s)
    # Uniform keys over 20 values: f = 1/20, estimated from the output (eq. 9).
    assert run.selectivity == pytest.approx(1 / 20, rel=0.1)
    assert run.cu_s > 0 and run.cp_s > 0
    assert run.cost() == pytest.approx((4000 * run.cu_s + total * run.cp_s) / run.span_s)
    assert run.as_dict()["insert_fraction_left"] == 1.0
    assert run.expired_left + run.state_left == 2000


def test_validation_errors_name_the_parameter():
    with pytest.raises(ValueError, match="window_left_s"):
        SymmetricHashJoin(-1, 1)
    with pytest.raises(ValueError, match="lateness_s"):
        SymmetricHashJoin(1, 1, lateness_s=float("nan"))
    with pytest.raises(ValueError, match="shedder"):
        SymmetricHashJoin(1, 1, shedder="pni")  # type: ignore[arg-type]
    j = SymmetricHashJoin(1, 1)
    with pytest.raises(ValueError, match="left_ts"):
        j.process_batch(np.array([0.5]), ["a"], [], [])
    with pytest.raises(ValueError, match="right_keys"):
        j.process_batch([], [], [0, 1], ["a"])
    with pytest.raises(ValueError, match="left_keys"):
        j.process_batch([0], pa.array([None], pa.string()), [], [])
    j.process_batch([0], ["a"], [], [])
    with pytest.raises(ValueError, match="right_keys"):
        j.process_batch([], [], [1], [7])  # integer keys after string keys
    with pytest.raises(ValueError, match="window_right_s"):
        ExactWindowJoin(1, -2)


def test_repr_and_clone():
    j = SymmetricHashJoin(2.0, 1.0, shedder=LoadShedder("cf", 0.5, 0.5, seed=1))
    assert repr(j) == (
        "SymmetricHashJoin(window_left_s=2.0, window_right_s=1.0, shedder=LoadShedder(strategy='cf', "
        "x_left=0.5, x_right=0.5, seed=1), lateness_s=0.0, track_unmatched=False)"
    )
    j.process_batch([0], [1], [0], [1])
    assert j.clone().state_size() == (0, 0)
    assert repr(ExactWindowJoin(1, 2)) == "ExactWindowJoin(window_left_s=1.0, window_right_s=2.0)"
