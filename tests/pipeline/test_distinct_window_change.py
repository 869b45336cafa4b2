"""A distinct query's window changed while the pipeline runs (issue 18 item 4, seed 004 §4.2):
``netmon tune --window distinct/NAME=SECONDS`` writes the control file between micro-batches,
``SlidingDistinct`` applies the batch's windows at its boundary, and its rows equal the offline
algorithm (``distinct_reports(changes=...)``, ``SubWindowDistinct.resize``) changed at the same
instant — the first window end that batch closes — estimates and the span each window held
(``window_s``) alike: both unite the same sub-window sketches and read them settled. Through a
shrink, a growth and a return to its chain-mate's window of one query of a shared chain (its
carry parts from its chain-mate's and is one with it again), a growth and a shrink of a query of
another chain, a restart in the middle of a growth, and a batch that Spark runs again after the
control file changed once more (it keeps the windows it ran with). Once with stage 1 in pyarrow
(several cuts), once on real Spark.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from analytics.distinct_offline import distinct_reports
from netmon.config import DistinctQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query
from pipeline.partials import merge_partials, partials_of
from pipeline.window_knobs import write_windows
from tests.pipeline.test_batch_kinds import SCHEMA, S, control, cuts, records

#: "ports" and "protos" share a chain (6 s, 1 s, lg_k 4: HLL mode from 8 items); "short" has its own.
PORTS = DistinctQuery(
    name="ports", count="dst_port", group_by="src_ip", window_s=6, sub_window_s=1, lg_k=4, top=0
)
PROTOS = DistinctQuery(
    name="protos", count="src_ip", group_by="proto", window_s=6, sub_window_s=1, lg_k=4, top=0
)
SHORT = DistinctQuery(name="short", count="src_ip", group_by="", window_s=4, sub_window_s=2, lg_k=8, top=0)
QUERIES = (PORTS, PROTOS, SHORT)
DELAY_S = 5
NO_SPARK = None


def _kind(tmp: Path) -> SlidingDistinct:
    return SlidingDistinct(
        chains_of(QUERIES),
        tmp / "results",
        tmp / "checkpoint",
        watermark_ms=DELAY_S * 1000,
        windows=tmp / "w.json",
    )


def _pyarrow(kind: SlidingDistinct, rows: list[dict], batch_id: int) -> None:
    """One batch: stage 1 in pyarrow over three partitions, merged (as the shared batch does)."""
    kind.prepare(batch_id, NO_SPARK)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    size = max(1, -(-table.num_rows // 3))
    parts = [partials_of(b, kind.specs) for b in table.to_batches(max_chunksize=size)]
    counts, max_us = merge_partials(pa.concat_tables(parts) if parts else partials_of(table, kind.specs))
    kind.apply(counts, max_us, batch_id)


def _spark(spark):
    def apply(kind: SlidingDistinct, rows: list[dict], batch_id: int) -> None:
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        kind(spark.createDataFrame(table.to_pandas(), schema=_SPARK_SCHEMA), batch_id)

    return apply


_SPARK_SCHEMA = "ts timestamp, is_control boolean, proto short, src_ip string, dst_port int, wire_len int"


def _offline(data: list[dict], end_us: int, q: DistinctQuery, changes: dict[int, float]) -> list[tuple]:
    """The offline rows: every window the final watermark closes, resized before each change's
    sub-window (the first window end the batch closed)."""
    table = pa.table(
        {
            "ts": pa.array([r["ts"] * 1000 for r in data] + [end_us * 1000], pa.timestamp("ns", tz="UTC")),
            **{
                name: pa.array([r[name] for r in data] + [None], SCHEMA.field(name).type)
                for name in ("src_ip", "dst_port", "proto")
            },
        }
    )
    resized = {index: round(seconds * 1e9) for index, seconds in changes.items()}
    out = []
    for r in distinct_reports(
        [table], offline_query(q), lg_k=q.lg_k, watermark_ns=DELAY_S * 10**9, changes=resized
    ):
        out += [(r.end_ns // 1000, group, n, r.window_ns / 1e9) for group, n in r.groups]
    return sorted(out)


def _got(tmp: Path, query: str) -> list[tuple]:
    table = read_results(tmp / "results")
    assert table is not None
    rows = [r for r in table.to_pylist() if r["query"] == query]
    got = sorted(
        (int(r["window_end"].timestamp() * S), r["group"], r["distinct"], r["window_s"]) for r in rows
    )
    assert len(set(got)) == len(got), "a row committed twice"
    return got


def _scenario(tmp_path: Path, seed: int, apply, caplog: pytest.LogCaptureFixture) -> None:
    rows = records(seed, n=1500)
    batches = cuts(rows, seed)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    n = len(batches)
    shrink_at, grow_at, restart_at, meet_at = n // 4, n // 2, n // 2 + 1, 3 * n // 4
    assert shrink_at < grow_at < restart_at < meet_at < n - 1
    control_file = tmp_path / "w.json"
    kind = _kind(tmp_path)
    watermark = None  # the kind's watermark before each batch (us)
    instants: dict[str, dict[int, float]] = {q.name: {} for q in QUERIES}
    parts = []  # the queries of each carry after each batch
    with caplog.at_level(logging.INFO, logger="pipeline.distinct"):
        for batch_id, batch in enumerate(batches):
            if batch_id == shrink_at:
                # a shorter window for one query of the shared chain, a longer one for "short";
                # a top-k entry of the same file is the top-k kind's, left alone here
                write_windows(control_file, {"distinct/ports": 3, "distinct/short": 8, "ports": 2})
                instants["ports"][watermark // S] = 3
                instants["short"][watermark // (2 * S)] = 8
            if batch_id == grow_at:
                write_windows(control_file, {"distinct/ports": 9})  # short back to its 4 s
                instants["ports"][watermark // S] = 9
                instants["short"][watermark // (2 * S)] = 4
            if batch_id == restart_at:  # a new process in the middle of the growth
                kind = _kind(tmp_path)
            if batch_id == meet_at:  # back to its chain-mate's window: one carry again
                write_windows(control_file, {"distinct/ports": 6})
                instants["ports"][watermark // S] = 6
            apply(kind, batch, batch_id)
            if batch_id == restart_at:
                # Spark runs this batch again after the control file changed: the saved windows
                write_windows(control_file, {"distinct/ports": 2})
                apply(_kind(tmp_path), batch, batch_id)
                write_windows(control_file, {"distinct/ports": 9})
            parts.append(sorted(names for _, names in kind._carries))
            newest = max((r["ts"] for r in batch), default=None)
            if newest is not None:
                moved = (newest // 1000 - DELAY_S * 1000) * 1000
                watermark = moved if watermark is None else max(watermark, moved)
    data = [r for b in batches for r in b if not r["is_control"]]
    end = batches[-1][0]["ts"]
    for q in QUERIES:
        expected = _offline(data, end, q, instants[q.name])
        got = _got(tmp_path, q.name)
        assert got == expected, q.name
    spans = {q.name: {w for *_, w in _got(tmp_path, q.name)} for q in QUERIES}
    # the shrink in force at once, the growth from 3 to 9 s visible sub-window by sub-window
    assert spans["ports"] >= {3.0, 4.0, 5.0, 6.0, 8.0, 9.0}, spans["ports"]
    assert spans["protos"] == {6.0}
    assert spans["short"] >= {4.0, 6.0, 8.0}, spans["short"]
    # the chain's carry parts at the shrink and is one again once the windows and spans meet
    assert any(("ports",) in p and ("protos",) in p for p in parts[shrink_at:meet_at])
    assert parts[-1] == [("ports", "protos"), ("short",)]
    changes = [r for r in caplog.records if r.getMessage() == "window change"]
    assert {(r.query, r.to_s) for r in changes} >= {
        ("ports", 6.0),
        ("ports", 3.0),
        ("ports", 9.0),
        ("short", 8.0),
        ("short", 4.0),
    }


@pytest.mark.parametrize("seed", [3, 8, 11])
def test_a_window_changed_at_run_time_equals_the_offline_run_changed_at_the_same_instant(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    _scenario(tmp_path, seed, _pyarrow, caplog)


@pytest.mark.spark
def test_the_same_on_spark(spark, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _scenario(tmp_path, 5, _spark(spark), caplog)


def test_the_rows_say_the_span_held_and_a_restart_keeps_the_knobs(tmp_path: Path) -> None:
    """Seed 004's E1 protocol on the distinct kind, one batch per second of 1 s sub-windows (the
    batch with the record at t closes the window ending at t): 60 s, 30 s from the sub-window
    starting at t = 80 s, 60 s from the one at 150 s (a restart at 160 s, in the middle of the
    growth): the windows hold 30 s from their end at 81 s on, then 31, 32, ... s from 151 s on
    and 60 s again at 180 s, as ``test_topk_resize``'s."""
    q = DistinctQuery(name="d", count="src_ip", group_by="", window_s=60, sub_window_s=1, top=0)
    t0 = 1_700_000_000
    control_file = tmp_path / "w.json"

    def kind() -> SlidingDistinct:
        return SlidingDistinct(
            chains_of([q]),
            tmp_path / "results",
            tmp_path / "checkpoint",
            watermark_ms=0,
            windows=control_file,
        )

    current = kind()
    for second in range(241):
        if second == 81:  # before the batch closing the window [21, 81)
            write_windows(control_file, {"distinct/d": 30})
        if second == 151:
            write_windows(control_file, {"distinct/d": 60})
        if second == 161:
            current = kind()
        row = control(0) | {"ts": (t0 + second) * S, "is_control": False, "src_ip": f"10.0.0.{second % 250}"}
        _pyarrow(current, [row], second)
    table = read_results(tmp_path / "results")
    held = {
        int(r["window_end"].timestamp()) - t0: r["window_s"] for r in table.to_pylist()
    }  # the window ending at t holds the sub-windows before t
    assert held[60] == held[80] == 60 and held[81] == 30 and held[150] == 30
    assert [held[t] for t in (151, 165, 179, 180, 181, 240)] == [31, 45, 59, 60, 60, 60]
    counts = {int(r["window_end"].timestamp()) - t0: r["distinct"] for r in table.to_pylist()}
    assert all(counts[t] == held[t] for t in range(60, 241))  # one new item a second


def test_the_knobs_read_only_their_kinds_entries(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.window_knobs import WindowKnobs

    path = tmp_path / "w.json"
    write_windows(path, {"distinct/ports": 3, "distinct/nosuch": 2, "ports": 2, "distinct/short": 5})
    with caplog.at_level(logging.WARNING, logger="pipeline.window_knobs"):
        knobs = WindowKnobs(QUERIES, path, tmp_path / "knobs", kind="distinct")
        assert knobs.decide(0) == {"ports": 3 * 10**9, "protos": 6 * 10**9, "short": 4 * 10**9}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # the top-k entry "ports" is not the distinct kind's
    assert any("no distinct query 'nosuch' (distinct queries: ports, protos, short)" in m for m in messages)
    assert any(
        "distinct query 'short': window 5 s is not a multiple of sub_window_s = 2" in m for m in messages
    )
