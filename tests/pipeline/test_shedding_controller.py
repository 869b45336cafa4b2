"""The shedding controller against hand-computed cases, fed progress JSON as Spark's listener sees it.

The reference case is the worked example of ``docs/joins.md`` §3: λ_L = 100/s, λ_R = 200/s,
T_L = 2 s, T_R = 1 s, f = 0.01, C_u = C_p = 1 ms. Unshed it costs (100 + 200)·1e-3 + 600·1e-3 = 0.9
CPU s per second of event time; at a budget of 0.45 the optima are PNI (0.9, 0), CF (0.93596,
0.46798) and INP (0.25, 0.25).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.shedding_controller import (
    STATS_SCHEMA,
    ControlledQuery,
    SheddingController,
    SheddingRecord,
    read_control,
    read_control_state,
    records_table,
    write_control,
)

#: A progress event of the joins query as ``json.loads(event.progress.json)`` gives it: one batch
#: covering 1 s of event time, the reference case unshed (the operator's sums in observedMetrics).
PROGRESS = """
{
  "id": "3f1c2b7e-8a60-4a0e-9d51-6f1f0c2f7a10",
  "runId": "9a6d1d0e-2f4b-4e57-8d8e-0b9a2c1e4f33",
  "name": "joins",
  "timestamp": "2026-11-22T04:00:01.000Z",
  "batchId": 7,
  "batchDuration": 1800,
  "numInputRows": 300,
  "inputRowsPerSecond": 300.0,
  "processedRowsPerSecond": 166.7,
  "durationMs": {"addBatch": 1500, "getBatch": 0, "latestOffset": 3, "queryPlanning": 40,
                 "triggerExecution": 1800, "walCommit": 60},
  "eventTime": {"avg": "2026-11-22T03:59:59.500Z", "max": "2026-11-22T04:00:00.000Z",
                "min": "2026-11-22T03:59:59.000Z", "watermark": "2026-11-22T03:59:54.000Z"},
  "stateOperators": [{"operatorName": "transformWithStateInPandasExec", "numRowsTotal": 8,
                      "numRowsUpdated": 8, "numRowsDroppedByWatermark": 0}],
  "sources": [{"description": "KafkaV2[Subscribe[netmon.packets]]", "numInputRows": 300}],
  "sink": {"description": "FileSink[/data/results/joins]", "numOutputRows": 600},
  "observedMetrics": {
    "join.link": {"n_left": 100, "n_right": 200, "inserted_left": 100, "inserted_right": 200,
                  "probed_left": 100, "probed_right": 200, "expired_left": 90, "expired_right": 190,
                  "late": 0, "results": 600, "state_left": 200, "state_right": 100,
                  "unshed_estimate": 600.0, "update_s": 0.3, "probe_s": 0.6, "shed_s": 0.001,
                  "total_s": 0.9, "busy_s": 0.9, "x_left": 1.0, "x_right": 1.0,
                  "min_ts_ns": 1795319999000000000, "max_ts_ns": 1795320000000000000, "buckets": 8}
  }
}
"""

LINK = ControlledQuery("link", 2.0, 1.0, "pni")


def progress(batch: int = 7, name: str = "link", **metrics: Any) -> dict[str, Any]:
    body = json.loads(PROGRESS)
    body["batchId"] = batch
    m = body["observedMetrics"].pop("join.link")
    m.update(metrics)
    body["observedMetrics"][f"join.{name}"] = m
    return body


def controller(*queries: ControlledQuery, budget: float = 0.45, **kw: Any) -> SheddingController:
    # The operator's budget by default: the fixture's batch (1.8 s) is its own test's subject.
    kw = {"smoothing": 1.0, "max_step": 1.0, "budget_scope": "operator", **kw}
    return SheddingController(queries or (LINK,), cpu_budget=budget, trigger_s=kw.pop("trigger_s", 1.0), **kw)


@pytest.mark.parametrize(
    ("strategy", "x"), [("pni", (0.9, 0.0)), ("cf", (0.93596218, 0.46798109)), ("inp", (0.25, 0.25))]
)
def test_optimum_of_the_reference_case(strategy: str, x: tuple[float, float]) -> None:
    c = controller(ControlledQuery("link", 2.0, 1.0, strategy))
    [r] = c.update(progress())
    assert (r.lambda_left, r.lambda_right, r.span_s) == (100.0, 200.0, 1.0)
    assert r.selectivity == pytest.approx(0.01)  # 600 results / (100·200·3)
    assert (r.cu_s, r.cp_s) == (pytest.approx(1e-3), pytest.approx(1e-3))  # 0.3/300, 0.6/600
    assert (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(x[0]), pytest.approx(x[1]))
    assert c.fractions["link"] == (pytest.approx(x[0]), pytest.approx(x[1]))  # smoothing 1
    assert r.utilisation == pytest.approx(0.9) and r.batch_utilisation == pytest.approx(1.8)
    assert (r.x_left, r.x_right, r.results, r.batch_id) == (1.0, 1.0, 600, 7)
    assert r.event_time == "2026-11-22T04:00:00Z"


def test_increases_are_smoothed_and_bounded_an_overrun_drops_at_once() -> None:
    # Budget 0.95 > the unshed 0.9: the optimum is (1, 1). From (0.2, 0.2): 0.2 + min(0.25,
    # 0.5·0.8) = 0.45, then 0.45 + min(0.25, 0.5·0.55) = 0.7.
    c = controller(budget=0.95, smoothing=0.5, max_step=0.25, x_left=0.2, x_right=0.2)
    [r] = c.update(progress())
    assert (r.optimum_x_left, r.optimum_x_right) == (1.0, 1.0)
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.45), pytest.approx(0.45))
    hi = 1795320000000000000
    [r] = c.update(progress(8, min_ts_ns=hi, max_ts_ns=hi + 10**9, x_left=0.45, x_right=0.45))
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.7), pytest.approx(0.7))
    assert r.span_s == 1.0  # the advance of the clock since the previous batch
    # Budget 0.45: the operator's 0.9 s overran it (> 1.25 × 0.45), so the fractions drop to the
    # optimum at once.
    c = controller(smoothing=0.5, max_step=0.25)
    [r] = c.update(progress())
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.9), 0.0)
    # Budget 0.8: 0.9 s is within a quarter over it, so the decrease toward the optimum (1, 0.75:
    # the left side costs 0.5, the right 0.4) is smoothed: 1 + 0.5·(0.75 − 1).
    [r] = controller(budget=0.8, smoothing=0.5, max_step=0.25).update(progress())
    assert (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(1.0), pytest.approx(0.75))
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(1.0), pytest.approx(0.875))


def test_costs_are_smoothed_with_ewma() -> None:
    c = controller(smoothing=0.5)
    c.update(progress())
    hi = 1795320000000000000
    # Twice as slow: C_u = C_p = 2 ms measured, 1.5 ms smoothed.
    [r] = c.update(progress(8, min_ts_ns=hi, max_ts_ns=hi + 10**9, update_s=0.6, probe_s=1.2, busy_s=1.8))
    assert (r.cu_s, r.cp_s) == (pytest.approx(1.5e-3), pytest.approx(1.5e-3))


def test_faster_than_real_time_the_budget_is_per_trigger_interval() -> None:
    # Replay at 2× speed: 2 s of event time per 1 s batch. The batch may use 0.45 CPU s, i.e.
    # 0.225 per event second. PNI fills the left side first (400 results per unit of weight 0.5,
    # against 200 per 0.4 on the right): x_L = 0.225 / 0.5 = 0.45.
    lo = 1795319998000000000
    c = controller()
    doubled = {"n_left": 200, "n_right": 400, "inserted_left": 200, "inserted_right": 400, "results": 1200}
    times = {"update_s": 0.6, "probe_s": 1.2, "busy_s": 1.8}
    [r] = c.update(progress(**doubled, **times, unshed_estimate=1200.0, min_ts_ns=lo))
    assert (r.lambda_left, r.lambda_right, r.span_s) == (100.0, 200.0, 2.0)
    assert (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(0.45), 0.0)
    assert r.expected_results == pytest.approx(180.0 * 2)


def test_operator_overhead_is_charged_to_the_costs() -> None:
    # busy_s = 2 × (update_s + probe_s): the costs double (2 ms each), the unshed cost is 1.8,
    # and PNI's x_L halves to 0.45.
    [r] = controller().update(progress(busy_s=1.8))
    assert (r.cu_s, r.cp_s) == (pytest.approx(2e-3), pytest.approx(2e-3))
    assert (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(0.45), 0.0)


def _batch(batch: int, ms: int, **metrics: Any) -> dict[str, Any]:
    """Batch ``batch`` (≥ 8) of the reference case, one second after batch 7, taking ``ms``."""
    hi = 1795320000000000000 + (batch - 8) * 10**9
    body = progress(batch=batch, min_ts_ns=hi, max_ts_ns=hi + 10**9, **metrics)
    body["durationMs"]["triggerExecution"] = ms
    return body


def test_batch_scope_budgets_the_whole_micro_batch() -> None:
    # A 1.8 s batch for 0.9 s of operator time: ρ = 2, so the operator gets 0.45 / 2 = 0.225 CPU s
    # of the 1 s trigger and PNI's x_L = 0.225 / 0.5 = 0.45.
    batch = controller(budget_scope="batch", smoothing=0.5)
    operator = controller(budget_scope="operator", smoothing=0.5)
    # The first batch carries start-up: a batch within the budget (0.4 s) is not used for ρ, and
    # without an overrun a decrease is smoothed: x ← x + 0.5·(x* − x).
    first = progress()
    first["durationMs"]["triggerExecution"] = 400
    [r] = batch.update(first)
    assert math.isnan(r.batch_factor) and (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(0.9), 0.0)
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.95), pytest.approx(0.5))
    [r] = batch.update(_batch(8, 1800))
    assert r.batch_factor == pytest.approx(2.0) and r.batch_utilisation == pytest.approx(1.8)
    assert (r.optimum_x_left, r.optimum_x_right) == (pytest.approx(0.45), 0.0)
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.45), 0.0)  # overran: at once
    # The operator scope ignores the batch's duration.
    operator.update(first)
    [o] = operator.update(_batch(8, 1800))
    assert math.isnan(o.batch_factor) and (o.optimum_x_left, o.optimum_x_right) == (pytest.approx(0.9), 0.0)


def test_an_overrunning_first_batch_gives_a_provisional_batch_factor() -> None:
    c = controller(budget_scope="batch", smoothing=0.5)
    [r] = c.update(progress())  # 1.8 s > 0.45 s: ρ = 2 at once, and x drops to the optimum
    assert r.batch_factor == pytest.approx(2.0)
    assert (r.next_x_left, r.next_x_right) == (pytest.approx(0.45), 0.0)
    # The next measurement replaces it (ρ = 1, not the average 1.5): x_L* = 0.9, approached by
    # 0.45 + 0.5·0.45; after that ρ is an EWMA: 1 + 0.5·(2 − 1) = 1.5, x_L* = 0.3 / 0.5 = 0.6.
    [r] = c.update(_batch(8, 900))
    assert r.batch_factor == pytest.approx(1.0) and r.optimum_x_left == pytest.approx(0.9)
    assert r.next_x_left == pytest.approx(0.675)
    [r] = c.update(_batch(9, 1800))
    assert r.batch_factor == pytest.approx(1.5) and r.next_x_left == pytest.approx(0.6)


def test_two_cores_give_the_operator_more_than_the_interval() -> None:
    # A 0.6 s batch for 0.9 s of operator time (ρ = 2/3) leaves the operator 0.675 s: all of the
    # left side (0.5) and 0.175 / 0.4 of the right.
    c = controller(budget_scope="batch")
    c.update(progress())
    [r] = c.update(_batch(8, 600))
    assert r.batch_factor == pytest.approx(2 / 3)
    assert r.optimum_x_left == pytest.approx(1.0) and r.optimum_x_right == pytest.approx(0.175 / 0.4)
    # ρ is part of the saved state: a restarted controller starts from it.
    again = SheddingController([LINK], cpu_budget=0.45, trigger_s=1.0, initial=c.state())
    assert again._rho == pytest.approx(2 / 3)


def test_feasible_join_keeps_everything() -> None:
    c = controller(budget=0.95)
    [r] = c.update(progress())
    assert (r.optimum_x_left, r.optimum_x_right, r.next_x_left, r.next_x_right) == (1.0, 1.0, 1.0, 1.0)
    assert r.expected_results == pytest.approx(600.0)


def test_queries_share_the_budget_in_proportion_to_their_cost() -> None:
    # Two identical joins, each 0.9: the 0.9 budget gives each 0.45, so each gets PNI (0.9, 0).
    a, b = ControlledQuery("a", 2.0, 1.0, "pni"), ControlledQuery("b", 2.0, 1.0, "pni")
    body = progress(name="a")
    body["observedMetrics"]["join.b"] = body["observedMetrics"]["join.a"]
    records = controller(a, b, budget=0.9).update(body)
    assert [(r.query, r.optimum_x_left, r.optimum_x_right) for r in records] == [
        ("a", pytest.approx(0.9), 0.0),
        ("b", pytest.approx(0.9), 0.0),
    ]


def test_fixed_shares_and_the_rest_in_proportion() -> None:
    # Three identical joins, each 0.9 unshed, budget 0.9: "a" has a fixed half (0.45: PNI 0.9, 0);
    # "b" and "c" share the other 0.45 equally (0.225 each: x_L = 0.45).
    a = ControlledQuery("a", 2.0, 1.0, "pni", share=0.5)
    b, c = ControlledQuery("b", 2.0, 1.0, "pni"), ControlledQuery("c", 2.0, 1.0, "pni")
    body = progress(name="a")
    for name in ("b", "c"):
        body["observedMetrics"][f"join.{name}"] = body["observedMetrics"]["join.a"]
    records = controller(a, b, c, budget=0.9).update(body)
    assert [(r.query, r.optimum_x_left, r.optimum_x_right) for r in records] == [
        ("a", pytest.approx(0.9), 0.0),
        ("b", pytest.approx(0.45), 0.0),
        ("c", pytest.approx(0.45), 0.0),
    ]
    for shares in ((0.6, 0.5), (0.0,), (1.5,)):
        queries = [ControlledQuery(f"q{i}", 1.0, 1.0, "pni", share=v) for i, v in enumerate(shares)]
        with pytest.raises(ValueError, match="share: expected fractions"):
            controller(*queries)


def test_none_is_measured_but_never_shed_and_stale_batches_are_ignored() -> None:
    c = controller(ControlledQuery("link", 2.0, 1.0, "none"), ControlledQuery("idle", 1.0, 1.0, "pni"))
    [r] = c.update(progress())  # "idle" had no input: no record
    assert (r.query, r.next_x_left, r.next_x_right, r.optimum_x_left) == ("link", 1.0, 1.0, 1.0)
    assert r.utilisation == pytest.approx(0.9)
    assert c.update(progress()) == [] and c.update(progress(batch=3)) == []
    assert c.update({"batchId": 9, "observedMetrics": {}}) == []


def test_first_batch_without_results_uses_the_update_cost_only() -> None:
    # No result yet: f = 0, C_p unknown but irrelevant; the update cost 0.3 fits the budget.
    [r] = controller().update(progress(results=0, unshed_estimate=0.0, probe_s=0.0, busy_s=0.3))
    assert r.selectivity == 0.0 and math.isnan(r.cp_s)
    assert (r.next_x_left, r.next_x_right) == (1.0, 1.0)


def test_state_round_trips_through_the_control_file(tmp_path: Path) -> None:
    # operator scope: in batch scope a restarted controller treats its first batch as start-up
    c = controller(smoothing=0.5, max_step=0.25, budget_scope="operator")
    c.update(progress())
    path = tmp_path / "control" / "fractions.json"
    write_control(path, c.state(), batch_id=7)
    assert read_control(path) == {"link": (pytest.approx(0.9), 0.0)}
    saved = read_control_state(path)
    again = controller(smoothing=0.5, max_step=0.25, budget_scope="operator", initial=saved)
    assert again.fractions == c.fractions and again.state() == c.state()
    hi = 1795320000000000000
    nxt = progress(8, min_ts_ns=hi, max_ts_ns=hi + 10**9, x_left=0.9, x_right=0.0)
    assert again.update(nxt) == c.update(nxt)
    assert not list(path.parent.glob(".*")), "no temporary file left behind"


def test_control_file_is_clamped_and_tolerates_garbage(tmp_path: Path) -> None:
    path = tmp_path / "fractions.json"
    path.write_text(json.dumps({"version": 1, "queries": {"q": {"x_left": 3, "x_right": -1}}}))
    assert read_control(path) == {"q": (1.0, 0.0)}
    for text in ("{", "[]", json.dumps({"version": 99, "queries": {}}), json.dumps({"version": 1})):
        path.write_text(text)
        assert read_control(path) == {} and read_control_state(path) == {}


def test_parameters_are_validated() -> None:
    for kw, name in (
        ({"cpu_budget": 0}, "cpu_budget"),
        ({"trigger_s": -1}, "trigger_s"),
        ({"smoothing": 0}, "smoothing"),
        ({"max_step": 1.5}, "max_step"),
        ({"x_left": 2}, "x_left"),
    ):
        args: dict[str, Any] = {"cpu_budget": 0.5, "trigger_s": 1.0, **kw}
        with pytest.raises(ValueError, match=name):
            SheddingController([LINK], **args)


def test_records_become_rows_of_the_stats_schema() -> None:
    [r] = controller().update(progress(results=0, unshed_estimate=0.0, probe_s=0.0))
    table = records_table([r])
    assert table.schema == STATS_SCHEMA
    assert table.column_names == list(SheddingRecord.__dataclass_fields__)
    [row] = table.to_pylist()
    assert row["cp_s"] is None and row["batch_factor"] is None  # NaN -> null
    assert row["batch_time"] == dt.datetime(2026, 11, 22, 4, 0, 1, tzinfo=dt.UTC)  # the progress's
    assert row["event_time"] == dt.datetime(2026, 11, 22, 4, 0, 0, tzinfo=dt.UTC)  # the batch's newest
    fields = dataclasses.asdict(r)
    expected = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in fields.items()}
    assert row == expected | {"batch_time": row["batch_time"], "event_time": row["event_time"]}


def _event(body: dict[str, Any] | str) -> SimpleNamespace:
    """A progress event as the listener receives it."""
    text = body if isinstance(body, str) else json.dumps(body)
    return SimpleNamespace(progress=SimpleNamespace(json=text))


class _SharedFigures:
    """The shared query's batch function as the listener sees it: ``figures(batch_id)``."""

    def __init__(self) -> None:
        self.by_batch: dict[int, Any] = {}

    def figures(self, batch_id: int) -> Any:
        return self.by_batch.get(batch_id)


def _shared(body: dict[str, Any] | str, source: _SharedFigures, shared_ms: int = 950) -> dict[str, Any]:
    """A joins progress as the shared query now reports it: the join statistics and the joins
    kind's seconds in the batch function's figures; the progress itself is the whole shared
    batch's (``shared_ms``: by default within the 1 s trigger, so the budget is a share of it)."""
    from netmon.results import SHARED_QUERY
    from pipeline.sys_stats import BatchFigures

    body = json.loads(body) if isinstance(body, str) else dict(body)
    observed = body.pop("observedMetrics")
    joins_s = body["durationMs"]["triggerExecution"] / 1000
    body.update(name=SHARED_QUERY, durationMs={"triggerExecution": shared_ms, "addBatch": shared_ms - 50})
    source.by_batch[body["batchId"]] = BatchFigures(
        packets=1000, newest_ns=None, seconds={"joins": joins_s}, observed=observed
    )
    return body


def test_listener_writes_fractions_and_commits_one_batch_per_joins_batch(tmp_path: Path) -> None:
    """The ``shedding`` kind: each batch's rows committed under its batch id, once, from the joins
    kind's statistics in the shared query's figures."""
    from netmon.results import COMMITS, SHARED_QUERY, read_results, result_files
    from pipeline.joins import SheddingListener

    control, results = tmp_path / "fractions.json", tmp_path / "results" / "shedding"
    listener = SheddingListener(control, results, controller())
    source = _SharedFigures()
    listener.follow(SHARED_QUERY, source)
    first = _shared(PROGRESS, source)
    listener.onQueryProgress(_event(first))
    assert read_control(control) == {"link": (pytest.approx(0.9), 0.0)}

    def committed() -> list[tuple[str, int]]:
        table = read_results(results)
        assert table is not None and table.schema == STATS_SCHEMA
        return sorted(zip(table["query"].to_pylist(), table["batch_id"].to_pylist(), strict=True))

    assert committed() == [("link", 7)]
    assert [p.name for p in (results / COMMITS).iterdir()] == ["7.json"]
    table = read_results(results)
    assert table is not None
    [row] = table.to_pylist()
    assert row["next_x_left"] == pytest.approx(0.9)
    # the batch's duration is the joins kind's own seconds, not the whole shared batch's
    assert row["batch_utilisation"] == pytest.approx(1.8) and row["batch_ms"] == 1800
    # The same progress handed over again: ignored, still one commit.
    listener.onQueryProgress(_event(first))
    assert committed() == [("link", 7)]
    # Handled again by a new controller (a restarted driver): the commit is rewritten, not added to.
    listener.renew(controller())
    listener.onQueryProgress(_event(first))
    assert committed() == [("link", 7)]
    assert [f.relative_to(results).as_posix() for f in result_files(results)] == [
        "batch-000007/part-00000.parquet"
    ]
    # The next batch: its own commit; the counts the pipeline's status shows.
    later = _shared(progress(8, min_ts_ns=1795320000000000000, max_ts_ns=1795320001000000000), source)
    assert [r.batch_id for r in listener.handle(later)] == [8]
    assert committed() == [("link", 7), ("link", 8)]
    assert (listener.commits, listener.rows, listener.last_batch_id) == (2, 2, 8)
    assert read_control_state(control)["link"]["clock_ns"] == 1795320001000000000
    # Another query's progress, a batch without join statistics (none kept, or none in it) and a
    # malformed event: ignored, never raised.
    other = {**json.loads(PROGRESS), "name": "other", "batchId": 9}
    listener.onQueryProgress(_event(other))
    no_figures = {**first, "batchId": 10}
    listener.onQueryProgress(_event(no_figures))
    idle = _shared({**json.loads(PROGRESS), "batchId": 11, "observedMetrics": {}}, source)
    listener.onQueryProgress(_event(idle))
    listener.onQueryProgress(_event("{"))
    assert committed() == [("link", 7), ("link", 8)]
    # No statistics files beside the control file: the rows are only in results/shedding.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fractions.json", "results"]


def test_listener_knows_when_a_query_run_has_been_handled(tmp_path: Path) -> None:
    """Events come in order: once a run's end is seen, every progress of it has been handled."""
    from pipeline.joins import SheddingListener

    listener = SheddingListener(tmp_path / "f.json", tmp_path / "r", controller())
    run = uuid.uuid4()
    assert not listener.drained(str(run), 0.0)
    listener.onQueryTerminated(SimpleNamespace(id=uuid.uuid4(), runId=run, exception=None))
    assert listener.drained(str(run), 0.0)
    assert not listener.drained(str(uuid.uuid4()), 0.0)


def test_a_join_in_a_long_shared_batch_is_held_to_its_share_of_it(tmp_path: Path) -> None:
    """The budget is a share of the trigger interval or of the shared batch when it took longer:
    the same join statistics that shed within a 1 s batch (0.45 s allowed, 1.8 s used) do not
    shed in a 10 s batch made long by the other kinds (4.5 s allowed); the utilisation is over
    that interval."""
    from netmon.results import SHARED_QUERY, read_results
    from pipeline.joins import SheddingListener

    runs = {}
    for shared_ms in (950, 10_000):
        results = tmp_path / str(shared_ms)
        listener = SheddingListener(results / "fractions.json", results / "rows", controller())
        source = _SharedFigures()
        listener.follow(SHARED_QUERY, source)
        listener.handle(_shared(PROGRESS, source, shared_ms=shared_ms))
        table = read_results(results / "rows")
        assert table is not None
        [runs[shared_ms]] = table.to_pylist()
    short, long = runs[950], runs[10_000]
    assert (short["next_x_left"], short["next_x_right"]) == (pytest.approx(0.9), 0.0)
    assert (long["next_x_left"], long["next_x_right"]) == (1.0, 1.0)
    assert short["utilisation"] == pytest.approx(long["utilisation"] * 10)
