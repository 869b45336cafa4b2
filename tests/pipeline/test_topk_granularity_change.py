"""A top-k sub-window changed while the pipeline runs (seed 004's granularity knob, CKSV; issue 18),
without Spark (the pattern of ``test_topk_window_change``): ``netmon tune --granularity`` writes
the control file between micro-batches and the kind's granularity operator Γ sums the fine
sub-windows of stage 1 into coarser ones from the first instant, at or after the batch's first
open sub-window, that is a multiple of both sizes. Its rows equal the offline twin
(``OfflineTopK(granularity=...)``) given the same schedule — through a coarsening, a restart
while it is still pending, a change back to finer and a batch that Spark runs again after the
control file changed once more (it keeps the sub-windows it ran with).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pyarrow as pa
import pytest

from analytics.granularity import FROM_START
from analytics.topk_offline import OfflineTopK
from netmon.config import TopKQuery
from netmon.results import read_results
from pipeline.topk import SlidingTopK
from pipeline.window_knobs import GranularityKnobs, write_windows
from tests.pipeline.test_batch_kinds import SCHEMA, S, _reports, apply_one, control, cuts, records

QUERY = TopKQuery(name="src", key="src_ip", window_s=6.0, sub_window_s=1.0, k=3)
OTHER = TopKQuery(name="ports", key="dst_port", window_s=4.0, sub_window_s=2.0, k=2)
DELAY_S = 5


def _kind(tmp: Path) -> SlidingTopK:
    return SlidingTopK(
        (QUERY, OTHER),
        tmp / "results",
        tmp / "checkpoint",
        watermark_ms=DELAY_S * 1000,
        granularity=tmp / "g.json",
    )


def _ask(schedule: list[tuple[int, int]], watermark_us: int, q: TopKQuery, m: int) -> None:
    """The instant the rule gives (written out here, not taken from the code under test)."""
    b_us = round(q.sub_window_s * S)
    first_open = watermark_us // b_us
    step = math.lcm(schedule[-1][1], m)
    at = -(-max(first_open, schedule[-1][0]) // step) * step
    if m != schedule[-1][1]:
        schedule[:] = [e for e in schedule if e[0] < at] + [(at, m)]


@pytest.mark.parametrize("seed", [3, 8])
def test_a_sub_window_changed_at_run_time_equals_the_offline_twin_changed_at_the_same_instant(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    rows = records(seed)
    batches = cuts(rows, seed)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    # the watermark before each batch (us): the coarse step once reports of 6 s windows were
    # made, the change back some 15 s later, both before the end
    marks = [
        max(r["ts"] for b in batches[:j] for r in b) - DELAY_S * S if j else 0 for j in range(len(batches))
    ]
    coarse_at = next(j for j, w in enumerate(marks) if w >= rows[0]["ts"] + 10 * S)
    fine_at = next(j for j, w in enumerate(marks) if w >= marks[coarse_at] + 15 * S) + 1
    assert fine_at < len(batches) - 2
    batches.insert(coarse_at, [])  # no records: the watermark stays, the change stays pending
    restart_at, rerun_at = coarse_at + 1, fine_at + 1
    control_file = tmp_path / "g.json"
    kind = _kind(tmp_path)
    watermark = None  # the kind's watermark before each batch (us)
    plans: dict[str, list[tuple[int, int]]] = {"src": [(FROM_START, 1)], "ports": [(FROM_START, 1)]}
    with caplog.at_level(logging.INFO, logger="pipeline.topk"):
        for batch_id, batch in enumerate(batches):
            if batch_id == coarse_at:
                write_windows(control_file, {"src": 2, "ports": 4})
                _ask(plans["src"], watermark, QUERY, 2)
                _ask(plans["ports"], watermark, OTHER, 2)
            if batch_id == fine_at:
                write_windows(control_file, {"src": 3})  # ports back to its configured 2 s
                _ask(plans["src"], watermark, QUERY, 3)
                _ask(plans["ports"], watermark, OTHER, 1)
            if batch_id == restart_at:  # a new process while the coarser size is still pending
                saved = kind.state.load(batch_id)
                assert saved is not None
                at = plans["src"][-1][0]
                assert [m for start, m in saved["schedules"]["src"] if start <= at][-1] == 2
                assert (at + 2) * S > watermark  # no sub-window of 2 s has closed yet
                so_far = read_results(tmp_path / "results")
                assert so_far is not None and set(so_far.column("sub_window_s").to_pylist()) == {1.0, 2.0}
                assert {r["sub_window_s"] for r in so_far.to_pylist() if r["query"] == "src"} == {1.0}
                kind = _kind(tmp_path)
            apply_one(kind, batch, batch_id)
            if batch_id == rerun_at:
                # Spark runs this batch again after the control file changed: the saved sub-windows
                write_windows(control_file, {"src": 1, "ports": 2})
                _kind(tmp_path).grains.decide(batch_id, {"src": 6 * 10**9, "ports": 4 * 10**9})
                apply_one(_kind(tmp_path), batch, batch_id, split=2)
                write_windows(control_file, {"src": 3})
            newest = max((r["ts"] for r in batch), default=None)
            if newest is not None:
                moved = newest - DELAY_S * S
                watermark = moved if watermark is None else max(watermark, moved)
    table = pa.Table.from_pylist(rows, schema=SCHEMA).drop(["is_control"])
    ns_table = table.cast(table.schema.set(0, pa.field("ts", pa.timestamp("ns", tz="UTC"))))
    result = read_results(tmp_path / "results")
    assert result is not None
    got_rows = result.to_pylist()
    for q in (QUERY, OTHER):
        offline = OfflineTopK(
            q.key, N=round(q.window_s * 1e9), b=round(q.sub_window_s * 1e9), k=q.k, time_based=True,
            watermark=DELAY_S * 10**9, granularity=plans[q.name],
        )  # fmt: skip
        expected = list(offline.run([ns_table], close_after=0))
        mine = [r for r in got_rows if r["query"] == q.name]
        assert _reports(mine) == expected, q.name
        assert len(plans[q.name]) == 3  # both changes were made
        # each row says the sub-window its closing one had: the schedule's at its end
        for r in mine:
            last = round(r["window_end"].timestamp() * S) // round(q.sub_window_s * S) - 1
            m = [x for start, x in plans[q.name] if start <= last][-1]
            assert r["sub_window_s"] == m * q.sub_window_s
    assert {r["sub_window_s"] for r in got_rows if r["query"] == "src"} == {1.0, 2.0, 3.0}
    assert {r["sub_window_s"] for r in got_rows if r["query"] == "ports"} == {2.0, 4.0}
    changes = [r for r in caplog.records if r.getMessage() == "granularity change"]
    assert {(r.query, r.to_s) for r in changes} == {
        ("src", 2.0),
        ("src", 3.0),
        ("ports", 4.0),
        ("ports", 2.0),
    }


def test_a_bad_granularity_is_logged_once_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "g.json"
    knobs = GranularityKnobs((QUERY, OTHER), path, tmp_path / "knobs", max_factor=4)
    windows = {"src": 6 * 10**9, "ports": 4 * 10**9}
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="pipeline.window_knobs"):
        assert knobs.decide(0, windows) == {"src": 1, "ports": 1}
        assert knobs.decide(1, windows) == {"src": 1, "ports": 1}
        write_windows(path, {"src": 1.5, "ports": 4, "nosuch": 3})
        assert knobs.decide(2, windows) == {"src": 1, "ports": 2}
        write_windows(path, {"src": 4, "ports": 10})
        assert knobs.decide(3, windows) == {"src": 1, "ports": 1}
        assert knobs.decide(4, windows) == {"src": 1, "ports": 1}
        assert knobs.decide(5, {"src": 8 * 10**9, "ports": 4 * 10**9}) == {"src": 4, "ports": 1}
        knobs.floors = {"ports": 2, "src": 8}  # the manager's floor: taken when it can be
        assert knobs.decide(6, {"src": 8 * 10**9, "ports": 4 * 10**9}) == {"src": 4, "ports": 2}
    knobs.floors = {}
    write_windows(path, {})
    assert knobs.decide(6, {"src": 8 * 10**9, "ports": 4 * 10**9}) == {"src": 4, "ports": 2}  # a rerun
    assert knobs.decide(7, {"src": 8 * 10**9, "ports": 4 * 10**9}) == {"src": 1, "ports": 1}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5, messages  # once per problem, not once per batch
    assert any("not a JSON object of windows" in m for m in messages)
    assert any("sub-window 1.5 s is not a whole multiple of sub_window_s = 1" in m for m in messages)
    assert any("no top-k query 'nosuch'" in m for m in messages)
    assert any("sub-window 4 s: the window 6 s is not a multiple of it" in m for m in messages)
    assert any("sub-window 10 s is more than sub_window_max_factor = 4 times" in m for m in messages)


def test_a_state_from_before_the_knob_goes_on_at_the_finest_sub_window(tmp_path: Path) -> None:
    """A checkpoint saved without schedules (before Γ) is read as every sub-window one b so far:
    a coarser sub-window asked then starts at the next even second, as the offline twin's."""
    rows = records(5)
    batches = cuts(rows, 5)
    kind = _kind(tmp_path)
    for batch_id, batch in enumerate(batches[:4]):
        apply_one(kind, batch, batch_id)
    for path in (tmp_path / "checkpoint" / "state").glob("batch-*.json"):  # strip what Γ added
        path.write_text(path.read_text().replace('"schedules"', '"unused"'))
    kind = _kind(tmp_path)
    saved = kind.state.load(4)
    assert saved is not None and "schedules" not in saved
    write_windows(tmp_path / "g.json", {"src": 2})
    for batch_id, batch in enumerate(batches[4:-1], 4):
        apply_one(kind, batch, batch_id)
    first_open = saved["watermark_ms"] // 1000  # the first second not yet closed
    at = -(-first_open // 2) * 2  # the first even one from there
    table = pa.Table.from_pylist([r for b in batches[:-1] for r in b], schema=SCHEMA).drop(["is_control"])
    ns_table = table.cast(table.schema.set(0, pa.field("ts", pa.timestamp("ns", tz="UTC"))))
    offline = OfflineTopK(
        "src_ip", N=6 * 10**9, b=10**9, k=3, time_based=True, watermark=DELAY_S * 10**9,
        granularity=[(FROM_START, 1), (at, 2)],
    )  # fmt: skip
    result = read_results(tmp_path / "results")
    assert result is not None
    mine = [r for r in result.to_pylist() if r["query"] == "src"]
    assert _reports(mine) == list(offline.run([ns_table]))
    assert {r["sub_window_s"] for r in mine} == {1.0, 2.0}


def test_a_sub_window_asked_before_the_first_batch_holds_from_the_start(tmp_path: Path) -> None:
    rows = records(9, n=1500)
    batches = cuts(rows, 9)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    write_windows(tmp_path / "g.json", {"src": 3, "ports": 4})
    kind = _kind(tmp_path)
    for batch_id, batch in enumerate(batches):
        apply_one(kind, batch, batch_id)
    table = pa.Table.from_pylist(rows, schema=SCHEMA).drop(["is_control"])
    ns_table = table.cast(table.schema.set(0, pa.field("ts", pa.timestamp("ns", tz="UTC"))))
    result = read_results(tmp_path / "results")
    assert result is not None
    for q, m in ((QUERY, 3), (OTHER, 2)):
        offline = OfflineTopK(
            q.key, N=round(q.window_s * 1e9), b=round(q.sub_window_s * 1e9), k=q.k, time_based=True,
            watermark=DELAY_S * 10**9, granularity=m,
        )  # fmt: skip
        mine = [r for r in result.to_pylist() if r["query"] == q.name]
        assert _reports(mine) == list(offline.run([ns_table], close_after=0)), q.name
        assert {r["sub_window_s"] for r in mine} == {m * q.sub_window_s}
