"""A distinct query's sub-window changed while the pipeline runs (seed 004's granularity knob, CKSV;
the top-k kind's Γ, ``test_topk_granularity_change``, on the distinct kind), without Spark (the
pattern of ``test_distinct_window_change``): ``netmon tune --granularity distinct/NAME=SECONDS``
writes the control file between micro-batches and the kind's stage 3 unites the fine sub-window
sketches of stage 1 into coarser ones from the first instant, at or after the batch's first open
sub-window, that is a multiple of both sizes. Its rows equal the offline twin
(``distinct_reports(granularity=...)``) given the same schedule — estimates, the span each window
held (``window_s``) and the closing sub-window (``sub_window_s``) — through a coarsening of one
query of a shared chain (its chain-mate stays fine) and of a query of another chain, a restart
while the change is still pending, a change back to finer and a batch that Spark runs again
after the control file changed once more (it keeps the sub-windows it ran with).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pyarrow as pa
import pytest

from analytics.distinct_offline import distinct_reports
from analytics.granularity import FROM_START
from netmon.config import DistinctQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query
from pipeline.window_knobs import GranularityKnobs, write_windows
from tests.pipeline.test_batch_kinds import SCHEMA, S, control, cuts, records
from tests.pipeline.test_distinct_window_change import DELAY_S, PORTS, PROTOS, QUERIES, SHORT, _pyarrow


def _kind(tmp: Path) -> SlidingDistinct:
    return SlidingDistinct(
        chains_of(QUERIES),
        tmp / "results",
        tmp / "checkpoint",
        watermark_ms=DELAY_S * 1000,
        granularity=tmp / "g.json",
    )


def _ask(schedule: list[tuple[int, int]], watermark_us: int, q: DistinctQuery, m: int) -> None:
    """The instant the rule gives (written out here, not taken from the code under test)."""
    b_us = round(q.sub_window_s * S)
    first_open = watermark_us // b_us
    step = math.lcm(schedule[-1][1], m)
    at = -(-max(first_open, schedule[-1][0]) // step) * step
    if m != schedule[-1][1]:
        schedule[:] = [e for e in schedule if e[0] < at] + [(at, m)]


def _offline(
    data: list[dict], end_us: int, q: DistinctQuery, schedule: list[tuple[int, int]], delay_s: int = DELAY_S
) -> list[tuple]:
    """The offline twin's rows over every window the final watermark closes."""
    table = pa.table(
        {
            "ts": pa.array([r["ts"] * 1000 for r in data] + [end_us * 1000], pa.timestamp("ns", tz="UTC")),
            **{
                name: pa.array([r[name] for r in data] + [None], SCHEMA.field(name).type)
                for name in ("src_ip", "dst_port", "proto")
            },
        }
    )
    out = []
    for r in distinct_reports(
        [table], offline_query(q), lg_k=q.lg_k, watermark_ns=delay_s * 10**9, granularity=schedule
    ):
        sub = (r.sub_window_ns or round(q.sub_window_s * 1e9)) / 1e9
        out += [(r.end_ns // 1000, group, n, r.window_ns / 1e9, sub) for group, n in r.groups]
    return sorted(out)


def _got(tmp: Path, query: str) -> list[tuple]:
    table = read_results(tmp / "results")
    assert table is not None
    rows = [r for r in table.to_pylist() if r["query"] == query]
    got = sorted(
        (int(r["window_end"].timestamp() * S), r["group"], r["distinct"], r["window_s"], r["sub_window_s"])
        for r in rows
    )
    assert len(set(got)) == len(got), "a row committed twice"
    return got


@pytest.mark.parametrize("seed", [3, 8, 11])
def test_a_sub_window_changed_at_run_time_equals_the_offline_twin_changed_at_the_same_instant(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    rows = records(seed, n=1500)
    batches = cuts(rows, seed)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    # the watermark before each batch (us): the coarser step once windows were reported, the
    # change back some 15 s later, both before the end
    marks = [
        max(r["ts"] for b in batches[:j] for r in b) - DELAY_S * S if j else 0 for j in range(len(batches))
    ]
    coarse_at = next(j for j, w in enumerate(marks) if w >= rows[0]["ts"] + 10 * S)
    fine_at = next(j for j, w in enumerate(marks) if w >= marks[coarse_at] + 15 * S) + 1
    assert fine_at < len(batches) - 2
    batches.insert(coarse_at, [])  # no records: the watermark stays, the change stays pending
    restart_at, rerun_at = coarse_at + 1, fine_at + 1
    coarse_restart_at = (restart_at + fine_at) // 2  # another, while the 3-s sub-windows are in force
    assert restart_at < coarse_restart_at < fine_at
    control_file = tmp_path / "g.json"
    kind = _kind(tmp_path)
    watermark = None  # the kind's watermark before each batch (us)
    plans: dict[str, list[tuple[int, int]]] = {q.name: [(FROM_START, 1)] for q in QUERIES}
    with caplog.at_level(logging.INFO, logger="pipeline.distinct"):
        for batch_id, batch in enumerate(batches):
            if batch_id == coarse_at:
                # one query of the shared chain coarser (its chain-mate stays fine), and "short";
                # a top-k entry of the same file is the top-k kind's, left alone here
                write_windows(control_file, {"distinct/ports": 3, "distinct/short": 4, "ports": 2})
                _ask(plans["ports"], watermark, PORTS, 3)
                _ask(plans["short"], watermark, SHORT, 2)
            if batch_id == fine_at:
                write_windows(control_file, {"distinct/ports": 2})  # short back to its 2 s
                _ask(plans["ports"], watermark, PORTS, 2)
                _ask(plans["short"], watermark, SHORT, 1)
            if batch_id == restart_at:  # a new process while the coarser size is still pending
                marker = kind._stored(batch_id - 1)[batch_id - 1]
                at = plans["ports"][-1][0]
                assert [m for start, m in marker["schedules"]["ports"] if start <= at][-1] == 3
                assert (at + 3) * S > watermark  # no sub-window of 3 s has closed yet
                so_far = read_results(tmp_path / "results")
                assert so_far is not None and set(so_far.column("sub_window_s").to_pylist()) == {1.0, 2.0}
                kind = _kind(tmp_path)
            if batch_id == coarse_restart_at:
                kind = _kind(tmp_path)  # rebuilt from the stored fine sketches, united again
            _pyarrow(kind, batch, batch_id)
            if batch_id == rerun_at:
                # Spark runs this batch again after the control file changed: the saved sub-windows
                write_windows(control_file, {"distinct/ports": 1, "distinct/short": 2})
                _pyarrow(_kind(tmp_path), batch, batch_id)
                write_windows(control_file, {"distinct/ports": 2})
            newest = max((r["ts"] for r in batch), default=None)
            if newest is not None:
                moved = (newest // 1000 - DELAY_S * 1000) * 1000
                watermark = moved if watermark is None else max(watermark, moved)
    data = [r for b in batches for r in b if not r["is_control"]]
    end = batches[-1][0]["ts"]
    for q in QUERIES:
        expected = _offline(data, end, q, plans[q.name])
        got = _got(tmp_path, q.name)
        assert got == expected, q.name
    assert len(plans["ports"]) == len(plans["short"]) == 3  # both changes were made
    subs = {q.name: {r[-1] for r in _got(tmp_path, q.name)} for q in QUERIES}
    assert subs == {"ports": {1.0, 3.0, 2.0}, "protos": {1.0}, "short": {2.0, 4.0}}
    # just after the change to a finer sub-window a window holds a little more than N (the
    # coarse sub-window straddling its start ends in it): the distinct kind's departure
    spans = {r[3] for r in _got(tmp_path, "ports")}
    assert {6.0, 8.0} <= spans <= {6.0, 7.0, 8.0}, spans  # 3 s -> 2 s: 8, 7, then 6 s
    changes = [r for r in caplog.records if r.getMessage() == "granularity change"]
    assert {(r.query, r.to_s) for r in changes} == {
        ("ports", 3.0),
        ("ports", 2.0),
        ("short", 4.0),
        ("short", 2.0),
    }


def test_a_state_from_before_the_knob_goes_on_at_the_finest_sub_window(tmp_path: Path) -> None:
    """Store markers written without schedules (before Γ) are read as every sub-window one b so
    far: a coarser sub-window asked then starts at the next multiple, as the offline twin's."""
    rows = records(5, n=1500)
    batches = cuts(rows, 5)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    kind = _kind(tmp_path)
    for batch_id, batch in enumerate(batches[:4]):
        _pyarrow(kind, batch, batch_id)
    for path in (tmp_path / "checkpoint" / "sketches").glob("batch-*.json"):  # strip what Γ added
        path.write_text(path.read_text().replace('"schedules"', '"unused"'))
    kind = _kind(tmp_path)
    kind.prepare(4, None)
    assert kind._watermark_ms is not None
    first_open = kind._watermark_ms // 1000  # the first second not yet closed
    write_windows(tmp_path / "g.json", {"distinct/protos": 2})
    for batch_id, batch in enumerate(batches[4:], 4):
        _pyarrow(kind, batch, batch_id)
    at = -(-first_open // 2) * 2  # the first even one from there
    data = [r for b in batches for r in b if not r["is_control"]]
    expected = _offline(data, batches[-1][0]["ts"], PROTOS, [(FROM_START, 1), (at, 2)])
    got = _got(tmp_path, "protos")
    assert got == expected
    assert {r[-1] for r in got} == {1.0, 2.0}


def test_a_bad_granularity_is_logged_once_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The distinct kind reads only its ``distinct/NAME`` entries: the top-k ones are the top-k
    kind's; the others logged once each and left out."""
    path = tmp_path / "g.json"
    knobs = GranularityKnobs(QUERIES, path, tmp_path / "knobs", max_factor=4, kind="distinct")
    windows = {"ports": 6 * 10**9, "protos": 6 * 10**9, "short": 4 * 10**9}
    write_windows(path, {"ports": 2, "distinct/ports": 1.5, "distinct/short": 4, "distinct/nosuch": 2})
    with caplog.at_level(logging.WARNING, logger="pipeline.window_knobs"):
        assert knobs.decide(0, windows) == {"ports": 1, "protos": 1, "short": 2}
        assert knobs.decide(1, windows) == {"ports": 1, "protos": 1, "short": 2}
        write_windows(path, {"distinct/protos": 4, "distinct/short": 10})
        assert knobs.decide(2, windows) == {"ports": 1, "protos": 1, "short": 1}
        knobs.floor({"distinct/ports": 3, "ports": 2, "short": 4})  # the manager's, keyed as the file
        assert knobs.decide(3, windows) == {"ports": 3, "protos": 1, "short": 1}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4, messages  # once per problem, not once per batch
    assert any("distinct query 'ports': sub-window 1.5 s is not a whole multiple" in m for m in messages)
    assert any("no distinct query 'nosuch' (distinct queries: ports, protos, short)" in m for m in messages)
    assert any(
        "distinct query 'protos': sub-window 4 s: the window 6 s is not a multiple of it" in m
        for m in messages
    )
    assert any(
        "distinct query 'short': sub-window 10 s is more than sub_window_max_factor = 4" in m
        for m in messages
    )


def test_the_rows_say_the_span_held_through_a_coarser_and_a_finer_change_and_a_restart(
    tmp_path: Path,
) -> None:
    """One batch per second of 1-s sub-windows (the batch with the record at t closes the window
    ending at t), one new item a second, a 6-s window: 3-s sub-windows asked at 20 s, 1-s ones at
    60 s, and a new process right after the finer change, when the window about to close still
    holds a 3-s sub-window straddling its start whose first second lies before the span held (a
    rebuilt carry must read that far back). The windows end every 3 s while the 3-s sub-windows
    are in force, then every second again, holding 7 s, 8 s, then 6 s (the straddling one ends out
    of them); each count is the span held; the rows equal the offline twin's."""
    q = DistinctQuery(name="d", count="src_ip", group_by="", window_s=6, sub_window_s=1, top=0)
    t0 = 1_700_000_000
    control_file = tmp_path / "g.json"

    def kind() -> SlidingDistinct:
        return SlidingDistinct(
            chains_of([q]),
            tmp_path / "results",
            tmp_path / "checkpoint",
            watermark_ms=0,
            granularity=control_file,
        )

    at1 = -(-(t0 + 19) // 3) * 3  # asked before the batch of second 20: the first open second is 19
    at2 = -(-(t0 + 59) // 3) * 3
    restart = at2 - t0 + 2  # the batch whose last closed second before it is at2
    current = kind()
    data = []
    for second in range(100):
        if second == 20:
            write_windows(control_file, {"distinct/d": 3})
        if second == 60:
            write_windows(control_file, {"distinct/d": 1})
        if second == restart:
            current = kind()
        row = control(0) | {"ts": (t0 + second) * S, "is_control": False, "src_ip": f"10.0.0.{second % 250}"}
        data.append(row)
        _pyarrow(current, [row], second)
    got = _got(tmp_path, "d")
    held = {end // S - t0: (n, span, sub) for end, _, n, span, sub in got}
    bad = {e: v for e, v in held.items() if e >= 6 and v[0] != v[1]}
    assert not bad, bad  # one new item a second: the count is the span held
    # each 3-s sub-window straddling the start stays until it ends out of the window: 7, 8, 6 s
    assert [held[at2 + k - t0][1] for k in range(1, 8)] == [7.0, 8.0, 6.0, 7.0, 8.0, 6.0, 6.0]
    coarse = [e for e in held if at1 - t0 < e <= at2 - t0]
    assert coarse and all((e + t0) % 3 == 0 and held[e][2] == 3.0 for e in coarse)
    assert len(coarse) == (at2 - at1) // 3
    assert {held[e][2] for e in held if e > at2 - t0 or e <= at1 - t0} == {1.0}
    assert got == _offline(data[:-1], data[-1]["ts"], q, [(FROM_START, 1), (at1, 3), (at2, 1)], delay_s=0)
