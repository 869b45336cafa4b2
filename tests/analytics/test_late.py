"""``analytics.late.LateRule``: the one meaning of late, against a record-by-record loop.

A record is late when its timestamp is more than the delay behind the newest one seen before it
(records, late ones included, and control times); the first is never late, nor one without a
timestamp. Random streams with backward jumps, cut into chunks anywhere, flag exactly what the
loop flags. ``run_join(late_after_s=d)`` joins the records the rule keeps.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from analytics.join_queries import HandshakeQuery, LinkQuery, analyze_join, run_join
from analytics.late import LateRule
from netmon.records import ARROW_SCHEMA

S = 10**9


def brute_force(events: list[tuple[str, int | None]], delay: int) -> list[bool]:
    """One flag per record (``("record", ts)``, ts None: no timestamp); ``("control", ts)`` moves
    the newest time only."""
    newest, flags = None, []
    for kind, ts in events:
        if kind == "record":
            flags.append(ts is not None and newest is not None and ts < newest - delay)
        if ts is not None:
            newest = ts if newest is None else max(newest, ts)
    return flags


def stream(rng: np.random.Generator, n: int) -> list[tuple[str, int | None]]:
    """Mostly increasing times with jitter, backward jumps of many sizes, gaps without timestamps
    and a few control times."""
    t, events = int(rng.integers(-(10**6), 10**6)), []
    for _ in range(n):
        r = rng.random()
        if r < 0.02:
            t -= int(rng.integers(0, 5_000))  # a backward jump (a clock step, a repeated capture)
        elif r < 0.04:
            t += int(rng.integers(0, 5_000))  # a forward one
        else:
            t += int(rng.integers(-40, 60))
        if r > 0.99:
            events.append(("control", t + int(rng.integers(-100, 300))))
        else:
            events.append(("record", None if rng.random() < 0.05 else t))
    return events


def feed(rule: LateRule, events: list[tuple[str, int | None]], cuts: list[int]) -> list[bool]:
    """The rule's flags, the records given in chunks between ``cuts`` (a control time is its own)."""
    flags: list[bool] = []
    chunk: list[int | None] = []

    def flush() -> None:
        if chunk:
            valid = np.array([t is not None for t in chunk])
            ts = np.array([0 if t is None else t for t in chunk], np.int64)
            got = rule.late_mask(ts, valid if not valid.all() else None)
            assert got.dtype == bool and got.shape == (len(chunk),)
            flags.extend(got.tolist())
            chunk.clear()

    for i, (kind, ts) in enumerate(events):
        if i in cuts:
            flush()
        if kind == "control":
            flush()
            assert ts is not None
            rule.advance(ts)
        else:
            chunk.append(ts)
    flush()
    return flags


@pytest.mark.parametrize("seed", range(8))
def test_the_rule_is_the_loop_whatever_the_chunks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    events = stream(rng, 3000)
    for delay in (0, 7, 100, 2_000, 10**9):
        expected = brute_force(events, delay)
        assert delay == 10**9 or sum(expected) > 0
        for cuts in ([], list(range(len(events))), sorted(rng.choice(len(events), 40, replace=False))):
            rule = LateRule(delay)
            got = feed(rule, events, [int(c) for c in cuts])
            assert got == expected, (delay, len(cuts))
            assert rule.late == sum(expected)
            times = [t for _, t in events if t is not None]
            assert rule.newest == max(times)


def test_edges() -> None:
    rule = LateRule(5)
    assert rule.late_mask(np.array([], np.int64)).tolist() == [] and rule.newest is None
    # Without timestamps: never late, and the newest time does not move.
    assert rule.late_mask(np.array([100, 0]), np.array([False, False])).tolist() == [False, False]
    assert rule.newest is None
    assert rule.late_mask(np.array([-(10**18)])).tolist() == [False]  # the first record: never late
    assert rule.late_mask(np.array([-(10**18) - 5, -(10**18) - 6])).tolist() == [False, True]
    rule.advance(0)
    assert rule.late_mask(np.array([-5, -6])).tolist() == [False, True] and rule.late == 2
    assert repr(rule) == "LateRule(delay_ns=5)"
    bad_delays: list[Any] = [-1, 1.5, True, "5"]
    for bad in bad_delays:
        with pytest.raises(ValueError, match="delay_ns"):
            LateRule(bad)
    with pytest.raises(ValueError, match="valid"):
        rule.late_mask(np.array([1, 2]), np.array([True]))
    with pytest.raises(ValueError, match="ts_ns"):
        rule.late_mask(np.zeros((2, 2), np.int64))


def _capture(times_s: list[float]) -> pa.Table:
    """Link traffic: host ``10.0.0.<i % 3>`` to port 443 at even steps, to port 80 at odd ones."""
    n = len(times_s)
    columns = {f.name: pa.nulls(n, f.type) for f in ARROW_SCHEMA}
    columns["ts"] = pa.array([round(t * S) for t in times_s], ARROW_SCHEMA.field("ts").type)
    columns["src_ip"] = pa.array([f"10.0.0.{i % 3}" for i in range(n)], pa.string())
    columns["dst_port"] = pa.array([443 if i % 2 == 0 else 80 for i in range(n)], pa.int32())
    columns["proto"] = pa.array([6] * n, pa.int16())
    return pa.table(columns, schema=ARROW_SCHEMA)


def test_run_join_drops_the_late_records_before_the_join() -> None:
    # 0 .. 29.5 s every 0.5 s, then back to 10 s: a backward jump of 19.5 s.
    times = [i / 2 for i in range(60)] + [10 + i / 2 for i in range(40)]
    table = _capture(times)
    query = LinkQuery("dst_port=443", "dst_port=80", window_s=1.0)
    ts = [round(t * S) for t in times]
    for d in (0.0, 4.0, 30.0):
        flags = brute_force([("record", t) for t in ts], round(d * S))
        run = run_join(query, table, late_after_s=d)
        assert run.late_dropped == sum(flags)
        # The join of the records kept, with their row numbers as ids.
        kept = np.flatnonzero(~np.array(flags))
        expected = run_join(query, table.take(pa.array(kept))).results
        got = run.results
        assert Counter(zip(got["left_id"], got["right_id"], strict=True)) == Counter(
            zip(kept[expected["left_id"]], kept[expected["right_id"]], strict=True)
        )
        assert not set(run.left.ids) & set(np.flatnonzero(flags))
    assert run_join(query, table, late_after_s=4.0).late_dropped == 31  # 10 .. 25 s are > 4 s behind
    # Without the rule the jump is sorted back into the event-time batches and joined.
    assert len(run_join(query, table).results) > len(run_join(query, table, late_after_s=4.0).results)
    assert run_join(query, table).late_dropped == 0
    with pytest.raises(ValueError, match="late_after_s"):
        run_join(query, query.sides(table), late_after_s=1.0)
    with pytest.raises(ValueError, match="late_after_s"):
        run_join(query, table, late_after_s=-1.0)
    # analyze_join: the same records dropped, before the measuring run too.
    run, model = analyze_join(
        query, table, strategy="pni", budget=1e-3, cu_s=1e-6, cp_s=1e-6, late_after_s=4.0
    )
    assert run.late_dropped == 31 and model is not None
    assert len(run.left) + len(run.right) == 100 - 31


def test_a_record_without_a_timestamp_is_kept_and_does_not_move_the_newest_time() -> None:
    table = _capture([0.0, 0.5, 100.0, 1.0, 0.2])
    table = table.set_column(0, "ts", pa.array([0, S // 2, None, S, S // 5], table["ts"].type))
    # Only the record at 0.2 s is late (behind 1 s); the one without a time is not, nor after it.
    assert run_join(HandshakeQuery(3.0), table, late_after_s=0.0).late_dropped == 1
    assert run_join(HandshakeQuery(3.0), table, late_after_s=0.8).late_dropped == 0
