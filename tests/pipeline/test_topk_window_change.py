"""A top-k window changed while the pipeline runs (issue 18 item 4, seed 004 §4.2), without Spark:
``netmon tune --window`` writes the control file between micro-batches, the kind resizes at the
next batch boundary, and its rows equal the offline algorithm (``TopKMerge`` over the exact
counts of every sub-window) resized at the same instant — the first sub-window that batch
closes — through a shrink, a growth, a restart in the middle of the growth, and a batch that
Spark runs again after the control file changed once more (it keeps the windows it ran with).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest

from analytics.topk import top_k
from analytics.topk_merge import QueryParams, TopKMerge
from netmon.config import TopKQuery
from netmon.results import read_results
from pipeline.topk import SlidingTopK
from pipeline.window_knobs import WindowKnobs, write_windows
from tests.pipeline.test_batch_kinds import S, apply_one, control, cuts, records

QUERY = TopKQuery(name="src", key="src_ip", window_s=6.0, sub_window_s=1.0, k=3)
OTHER = TopKQuery(name="ports", key="dst_port", window_s=4.0, sub_window_s=2.0, k=2)
DELAY_S = 5


def _kind(tmp: Path) -> SlidingTopK:
    return SlidingTopK(
        (QUERY, OTHER),
        tmp / "results",
        tmp / "checkpoint",
        watermark_ms=DELAY_S * 1000,
        windows=tmp / "w.json",
    )


def _oracle(rows: list[dict], q: TopKQuery, changes: dict[int, float], end_us: int) -> list[tuple]:
    """The offline rows: exact counts per sub-window, every closed one (end ≤ the last watermark)
    merged in order, resized before the first sub-window at or after each change's instant."""
    b_us = round(q.sub_window_s * S)
    subs: dict[int, Counter[str]] = {}
    for r in rows:
        key = r[q.key]
        if key is not None:
            subs.setdefault(r["ts"] // b_us, Counter())[str(key)] += 1
    merge = TopKMerge(QueryParams(N=round(q.window_s * 1e9), b=b_us * 1000, k=q.k))
    pending = sorted(changes.items())
    out = []
    for index in sorted(subs):
        if (index + 1) * b_us > end_us - DELAY_S * S:
            break  # still open at the end
        while pending and index >= pending[0][0]:
            merge.resize(round(pending.pop(0)[1] * 1e9))
        items, _ = top_k(subs[index], q.k)
        out += merge.add_subwindow(dict(items), index, sum(subs[index].values()))
    return sorted(
        (end // 1000, delta, rank, key, count, total, window / 1e9)
        for end, delta, rank, key, count, total, window in out
    )


def _got(tmp: Path, query: str) -> list[tuple]:
    table = read_results(tmp / "results")
    assert table is not None
    rows = [r for r in table.to_pylist() if r["query"] == query]
    return sorted(
        (
            int(r["window_end"].timestamp() * S),
            r["delta"],
            r["rank"],
            r["key"],
            r["count"],
            r["total"],
            r["window_s"],
        )
        for r in rows
    )


@pytest.mark.parametrize("seed", [3, 8])
def test_a_window_changed_at_run_time_equals_the_offline_run_changed_at_the_same_instant(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    rows = records(seed)
    batches = cuts(rows, seed)
    batches[-1] = [control(rows[-1]["ts"] + DELAY_S * S)]
    n = len(batches)
    shrink_at, grow_at, restart_at = n // 4, n // 2, n // 2 + 1
    control_file = tmp_path / "w.json"
    kind = _kind(tmp_path)
    watermark = None  # the kind's watermark before each batch (us)
    instants: dict[str, dict[int, float]] = {"src": {}, "ports": {}}
    with caplog.at_level(logging.INFO, logger="pipeline.topk"):
        for batch_id, batch in enumerate(batches):
            if batch_id == shrink_at:
                write_windows(control_file, {"src": 3, "ports": 8})  # a shorter and a longer one
                instants["src"][watermark // S] = 3
                instants["ports"][watermark // (2 * S)] = 8
            if batch_id == grow_at:
                write_windows(control_file, {"src": 9})  # ports back to its configured 4 s
                instants["src"][watermark // S] = 9
                instants["ports"][watermark // (2 * S)] = 4
            if batch_id == restart_at:  # a new process in the middle of the growth
                kind = _kind(tmp_path)
            apply_one(kind, batch, batch_id)
            if batch_id == restart_at:
                # Spark runs this batch again after the control file changed: the saved windows
                write_windows(control_file, {"src": 2})
                _kind(tmp_path).knobs.decide(batch_id)  # a stale process reading the new file
                apply_one(_kind(tmp_path), batch, batch_id, split=2)
                write_windows(control_file, {"src": 9})
            newest = max((r["ts"] for r in batch), default=None)
            if newest is not None:
                moved = newest - DELAY_S * S
                watermark = moved if watermark is None else max(watermark, moved)
    end = batches[-1][0]["ts"]
    data = [r for b in batches for r in b if not r["is_control"]]
    for q in (QUERY, OTHER):
        expected = _oracle(data, q, instants[q.name], end)
        got = _got(tmp_path, q.name)
        assert got == expected, q.name
        assert {w for *_, w in got} >= ({3.0, 6.0, 9.0} if q is QUERY else {4.0, 8.0})
    # the growth from 3 to 9 s is visible: windows of 4..8 s between
    assert {w for *_, w in _got(tmp_path, "src")} >= {4.0, 5.0, 8.0}
    changes = [r for r in caplog.records if r.getMessage() == "window change"]
    assert {(r.query, r.to_s) for r in changes} >= {
        ("src", 3.0),
        ("src", 9.0),
        ("ports", 8.0),
        ("ports", 4.0),
    }


def test_a_bad_control_file_or_entry_is_logged_once_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "w.json"
    knobs = WindowKnobs((QUERY, OTHER), path, tmp_path / "knobs")
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="pipeline.window_knobs"):
        assert knobs.decide(0) == {"src": 6 * 10**9, "ports": 4 * 10**9}
        assert knobs.decide(1) == {"src": 6 * 10**9, "ports": 4 * 10**9}
        write_windows(path, {"src": 2.5, "ports": 6, "nosuch": 3})
        assert knobs.decide(2) == {"src": 6 * 10**9, "ports": 6 * 10**9}
        assert knobs.decide(3) == {"src": 6 * 10**9, "ports": 6 * 10**9}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages  # once per problem, not once per batch
    assert any("not a JSON object of windows" in m for m in messages)
    assert any("window 2.5 s is not a multiple of sub_window_s = 1" in m for m in messages)
    assert any("no top-k query 'nosuch'" in m for m in messages)
