"""The resource manager plans with the Kafka backlog (issue 18): while the shared query is behind,
the rate it measures is the rate it processes; the backlog's growth says what arrives, and the
intake box falls at once to the fraction that rate needs instead of halving once per batch."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any, cast

from analytics.cost_model import DEFAULT_CONSTANTS, CostModel
from netmon.config import Config
from pipeline.job import SharedBatch
from pipeline.partials import INTAKE
from pipeline.resource_manager import DRAIN_S, ResourceManager, quantize
from pipeline.sys_stats import BatchFigures


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _manager(tmp_path: Path, clock: Clock, name: str = "rm") -> ResourceManager:
    cfg = Config().replace(paths={"data_dir": tmp_path / "data"})
    cfg = dataclasses.replace(cfg, resources=dataclasses.replace(cfg.resources, manage=True, intake_min=0.01))
    return ResourceManager(cfg, tmp_path / name, model=CostModel(DEFAULT_CONSTANTS, 5.0), clock=clock)


def _seconds(keep: dict[str, float]) -> float:
    """A batch of 200,000 records: 0.6 s of Kafka read and split whatever the fractions, 2.4 s of
    decode and the kinds for the records the intake box keeps."""
    return 0.6 + 2.4 * keep.get(INTAKE, 1.0)


def _behind(
    m: ResourceManager,
    clock: Clock,
    batches: int,
    *,
    arrival: float | None,
    decisions: list[dict[str, Any]] | None = None,
) -> list[dict[str, float]]:
    """Batches back to back, each reading as many records as ``maxOffsetsPerTrigger`` lets it
    (200,000; :func:`_seconds`): a query behind. ``arrival``: records/s produced meanwhile, the
    backlog growing by what is not read, told to the manager as Spark reports it (the lag when
    the previous batch was planned); None: not told (the manager before it knew of it).
    ``decisions``: filled with each decision and the rate the manager then planned for."""
    read, backlog, out, planned_at = 200_000, 1_000_000.0, [], 0.0
    told: list[tuple[float, float]] = []  # (backlog, instant) told, oldest first
    for i in range(batches):
        if arrival is not None and i:
            m.observe_backlog(i - 1, backlog, planned_at)
            told.append((backlog, planned_at))
        out.append(m.decide(i))
        if decisions is not None and i >= 2:
            # the rate to plan for, from the simulation's own figures: what the batch before read
            # per second, plus the backlog's growth per second between the two newest told, plus
            # the newest backlog over DRAIN_S
            (b0, t0), (b1, t1) = told[-2], told[-1]
            need = read / _seconds(out[-2]) + (b1 - b0) / (t1 - t0) + b1 / DRAIN_S
            decisions.append({**m.last, "need": need})
        planned_at, seconds = clock.t, _seconds(out[-1])
        clock.t += seconds
        m.observe(i, read, seconds)
        if arrival is not None:
            backlog = max(backlog + arrival * seconds - read, 0.0)
    return out


def _intakes(got: list[dict[str, float]]) -> list[float]:
    return [keep.get(INTAKE, 1.0) for keep in got]


def test_behind_the_intake_box_falls_at_once_to_what_the_arrival_rate_needs(tmp_path: Path) -> None:
    arrival = 3 * 200_000 / _seconds({})  # 3x what the query reads when exact
    plain = Clock()
    blind = _intakes(_behind(_manager(tmp_path, plain, "a"), plain, 30, arrival=None))
    clock = Clock()
    m = _manager(tmp_path, clock, "b")
    decisions: list[dict[str, Any]] = []
    got = _behind(m, clock, 30, arrival=arrival, decisions=decisions)
    planned = _intakes(got)
    # Reading faster than the arrival needs 0.6 + 2.4x < 1 s a batch: x <= 1/8 (a power of two).
    # With the backlog the box gets there in fewer batches than from the load alone.
    enough = 0.125
    assert any(x <= enough for x in blind), blind
    assert next(i for i, x in enumerate(planned) if x <= enough) < next(
        i for i, x in enumerate(blind) if x <= enough
    )
    # Each fall goes to the largest power of two whose corrected estimate at the rate to plan
    # for (what arrives and the backlog over DRAIN_S) fits the bound, or to the floor.
    falls = 0
    for before, d in zip(decisions, decisions[1:], strict=False):
        x, was = d["keep"].get(INTAKE, 1.0), before["keep"].get(INTAKE, 1.0)
        if x >= was:
            continue
        falls += 1
        queries = {n: q for n, q in d["keep"].items() if n != INTAKE}
        corr, need = d["correction"], d["need"]
        assert m._estimate(need * x, queries) * corr <= m.bound or x == m.intake_floor, d
        assert x == was or m._estimate(need * 2 * x, queries) * corr > m.bound, d
    assert falls, planned


def test_a_backlog_of_less_than_a_trigger_changes_nothing(tmp_path: Path) -> None:
    """Keeping up, the lag is what arrived during the batch, noisy: no plan changes by it."""
    told, plain = Clock(), Clock()
    m, n = _manager(tmp_path, told, "told"), _manager(tmp_path, plain, "plain")
    got_m, got_n, rate = [], [], 0.0
    for i in range(12):
        packets = 40_000 if i < 6 else 120_000  # light, then heavy enough to sample
        seconds = 0.3 if i < 6 else 1.6
        if i:
            # the lag of the batch before: under a trigger's worth of the rate it read, up and down
            m.observe_backlog(i - 1, (0.9 if i % 2 else 0.1) * rate * m.trigger_s, told.t - 1.0)
        got_m.append(m.decide(i))
        got_n.append(n.decide(i))
        for mgr, clock in ((m, told), (n, plain)):
            clock.t += max(seconds, mgr.trigger_s)
            mgr.observe(i, packets, seconds)
        rate = packets / max(seconds, m.trigger_s)
    assert got_m == got_n
    assert any(got_n), got_n  # the heavy part did sample: the comparison means something


def test_while_a_backlog_drains_the_box_rises_only_once_what_is_left_fits(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock)
    _behind(m, clock, 6, arrival=3 * 200_000 / 3.0)
    low = m.last["keep"].get(INTAKE, 1.0)
    assert low < 1
    # The load falls (batches of 0.3 s a trigger apart) but 5M records wait: the rate to plan for
    # is what arrives plus 5M / DRAIN_S, so the box stays; once the backlog is gone it rises.
    got = []
    for i in range(6, 20):
        backlog = 5_000_000.0 if i < 12 else 0.0
        m.observe_backlog(i - 1, backlog, clock.t - 1.0)
        got.append(m.decide(i))
        clock.t += m.trigger_s
        m.observe(i, 20_000, 0.3)
    intakes = _intakes(got)
    assert all(x <= low for x in intakes[:6]), intakes
    assert intakes[-1] > low, intakes


def test_the_shared_batch_tells_the_manager_the_backlog_in_records(tmp_path: Path) -> None:
    class Manager:
        def __init__(self) -> None:
            self.told: list[tuple[int, float, float]] = []

        def observe_backlog(self, batch_id: int, records: float, at_s: float) -> None:
            self.told.append((batch_id, records, at_s))

    class Progress(dict):  # PySpark 4's StreamingQueryProgress: a dict with its JSON
        @property
        def json(self) -> str:
            return json.dumps(dict(self))

    manager = Manager()
    batch = SharedBatch({}, manager=cast(Any, manager))
    batch._figures[7] = BatchFigures(packets=4_000, newest_ns=None)
    progress: dict[str, Any] = {
        "batchId": 7,
        "numInputRows": 4,  # 1,000 records a message
        "timestamp": "2026-11-27T17:00:00.000Z",
        "sources": [{"endOffset": {"t": {"0": 10, "1": 7}}, "latestOffset": '{"t": {"0": 25, "1": 7}}'}],
    }
    for shown in (progress, Progress(progress)):
        batch.progress = lambda shown=shown: shown
        batch._tell_backlog()
    stamp = dt.datetime(2026, 11, 27, 17, tzinfo=dt.UTC).timestamp()
    assert manager.told == [(7, 15_000.0, stamp)] * 2
    # nothing to tell: an idle trigger, another process's batch, no progress yet, a failing query
    for bad in ({**progress, "numInputRows": 0}, {**progress, "batchId": 6}, None):
        batch.progress = lambda bad=bad: bad
        batch._tell_backlog()

    def failing() -> None:
        raise RuntimeError("stopped")

    batch.progress = failing
    batch._tell_backlog()
    assert len(manager.told) == 2
    assert quantize(0.3, 0.01) == 0.25  # the powers of two the box moves by
