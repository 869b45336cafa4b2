"""The shared query's resource manager (issue 18 item 5), without Spark: fed measured batches, it
places drop boxes by the cost model and the knapsack, reverses them when the load falls, and a
batch run again (or after a restart) gets the fractions it first ran with."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from analytics.cost_model import DEFAULT_CONSTANTS, CostModel, Workload, load_constants
from netmon.config import Config
from netmon.config.checks import ConfigError
from netmon.config.resources import ResourcesConfig
from pipeline.partials import INTAKE
from pipeline.resource_manager import (
    SHARED_KINDS,
    ResourceManager,
    admit,
    control_file,
    eligible_queries,
    in_force,
    quantize,
    read_overrides,
    write_overrides,
)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _manager(tmp_path: Path, clock: Clock, **resources: object) -> ResourceManager:
    cfg = Config().replace(paths={"data_dir": tmp_path / "data"})
    cfg = dataclasses.replace(cfg, resources=dataclasses.replace(cfg.resources, manage=True, **resources))
    return ResourceManager(cfg, tmp_path / "rm", model=CostModel(DEFAULT_CONSTANTS, 5.0), clock=clock)


def _run(m: ResourceManager, clock: Clock, batches: list[tuple[int, float]], first: int = 0) -> list[dict]:
    """Each (packets, seconds) batch: decide, then the batch takes its seconds (at least a trigger)."""
    out = []
    for i, (packets, seconds) in enumerate(batches, first):
        out.append(m.decide(i))
        clock.t += max(seconds, m.trigger_s)
        m.observe(i, packets, seconds)
    return out


def test_packet_weighted_top_k_and_distinct_queries_get_drop_boxes() -> None:
    cfg = Config()
    topk = tuple(q.name for q in cfg.queries.topk if q.weight == "packets")
    distinct = tuple(q.name for q in cfg.queries.distinct)
    assert eligible_queries(cfg) == topk + distinct
    assert "top-destinations-bytes" not in eligible_queries(cfg) and len(topk) == 3
    # only the kinds that run
    assert eligible_queries(cfg, kinds=("traffic", "topk", "sys")) == topk
    assert eligible_queries(cfg, kinds=("distinct",)) == distinct


def test_a_top_k_and_a_distinct_query_of_one_name_are_refused(tmp_path: Path) -> None:
    cfg = Config()
    twin = dataclasses.replace(cfg.queries.distinct[0], name=cfg.queries.topk[0].name)
    cfg = dataclasses.replace(
        cfg,
        queries=dataclasses.replace(cfg.queries, distinct=(twin, *cfg.queries.distinct[1:])),
        resources=dataclasses.replace(cfg.resources, manage=True),
    )
    with pytest.raises(ValueError, match="share the name 'top-sources'"):
        ResourceManager(cfg, tmp_path, model=CostModel(DEFAULT_CONSTANTS, 5.0))


def test_fractions_are_powers_of_two_not_below_keep_min() -> None:
    assert [quantize(x, 0.1) for x in (1.0, 0.99, 0.5, 0.26, 0.2, 0.05)] == [
        1.0,
        0.5,
        0.5,
        0.25,
        0.125,
        0.125,
    ]
    assert quantize(0.3, 0.5) == 0.5 and quantize(0.3, 1.0) == 1.0


def test_under_the_budget_every_answer_stays_exact(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock)
    assert _run(m, clock, [(20_000, 0.3)] * 6) == [{}] * 6
    assert m.last["load"] == pytest.approx(0.3)


def test_overload_samples_the_costliest_first_then_reverses_one_step_per_batch(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock)
    heavy = [(100_000, 0.5), (200_000, 2.0), (200_000, 2.0), (200_000, 1.5), (200_000, 1.5)]
    light = [(20_000, 0.1)] * 6
    got = _run(m, clock, heavy + light)
    assert got[0] == got[1] == {}  # no measurement over the bound yet
    sampled = [k for k in got[: len(heavy)] if k]
    assert sampled, got
    # The first fraction below 1 goes to the query whose sampling saves the most CPU per unit
    # of value: the largest secant slope of its cost between keep_min and 1 (the knapsack's a_k).
    model, w, low = m.model, Workload(rate_pps=100_000), m.resources.keep_min
    topk = {q.name: q for q in m._cfg.queries.topk}
    distinct = {q.name: q for q in m._cfg.queries.distinct}

    def cost(name: str, x: float) -> float:
        return (model.topk(w, topk[name], x) if name in topk else model.distinct(w, distinct[name], x)).cpu

    slopes = {name: (cost(name, 1.0) - cost(name, low)) / (1 - low) for name in m.names}
    assert set(sampled[0]) == {max(slopes, key=slopes.__getitem__)}
    for keep in got:
        assert set(keep) <= set(m.names)
        assert all(x in (0.5, 0.25, 0.125) for x in keep.values())
    # Once the load falls, each fraction doubles at most once per batch until all are exact.
    after = got[len(heavy) :]
    for a, b in zip(after, after[1:], strict=False):
        for name in m.names:
            assert a.get(name, 1.0) <= b.get(name, 1.0) <= 2 * a.get(name, 1.0)
    assert after[-1] == {}


def test_a_batch_run_again_or_after_a_restart_gets_its_first_fractions(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock)
    got = _run(m, clock, [(200_000, 2.0)] * 4)
    assert got[-1]
    # Spark runs batch 3 again in the same process: the same fractions, whatever was measured since.
    clock.t += 1
    m.observe(3, 10, 0.01)
    assert m.decide(3) == got[-1]
    # A new process (a restart) runs batch 3 again: the same; then batch 4 starts from them.
    again = _manager(tmp_path, Clock())
    assert again.decide(3) == got[-1]
    assert again.decide(4) == got[-1]  # nothing measured yet in this process: the last fractions
    assert again.last["correction"] == pytest.approx(m.last["correction"])


def test_manage_must_be_a_boolean() -> None:
    text: dict[str, Any] = {"manage": "yes"}  # as a TOML file could give it
    with pytest.raises(ConfigError, match=r"\[resources\] manage: expected true or false"):
        ResourcesConfig(**text)


def _responsive(m: ResourceManager, clock: Clock, batches: int, overload: float = 1.25) -> list[dict]:
    """Batches whose time follows the fractions: the model's estimate times ``overload`` (the model
    under-estimates by that factor), at the rate where the full estimate is the budget's bound."""
    lo, hi = 1.0, 1e7
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if m._estimate(mid, {}) < m.bound else (lo, mid)
    out = []
    for i in range(batches):
        keep = m.decide(i)
        out.append(keep)
        clock.t += 1.0
        m.observe(i, int(lo), m._estimate(lo, keep) * overload)
    return out


def test_a_feasible_cut_samples_only_what_it_must_and_importance_keeps_a_query_whole(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path / "a", clock)
    got = _responsive(m, clock, 10)
    assert m.last["feasible"] and got[-1]
    # the load settles under the bound, with some queries left whole
    assert m.last["load"] <= m.bound * 1.05
    assert set(m.names) - set(got[-1])
    name = sorted(got[-1])[0]
    clock = Clock()
    weighted = _manager(
        tmp_path / "b", clock, importance={name: 1000.0}, keep_min_by_query={"top-sources": 1.0}
    )
    again = _responsive(weighted, clock, 10)
    assert weighted.last["feasible"] and again[-1]
    assert all(name not in k for k in again)  # worth so much that it stays whole
    assert all("top-sources" not in k for k in again)  # exempt: its floor is 1


def test_knobs_changed_at_run_time_apply_at_the_next_batch(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock)
    got = _run(m, clock, [(200_000, 2.0)] * 4)
    assert got[-1]
    sampled = sorted(got[-1])
    # Raise a sampled query's floor to 1 and the budget far above the load: at once it is exact,
    # and the others climb back one step per batch.
    write_overrides(control_file(m.cfg), {"cpu_budget": 1000.0, "keep_min_by_query": {sampled[0]: 1.0}})
    after = _run(m, clock, [(200_000, 2.0)] * 6, first=4)
    assert sampled[0] not in after[0]
    assert after[-1] == {}
    assert m.resources.cpu_budget == 1000.0 and m.last["cpu_budget"] == 1000.0
    # A broken control file is ignored (the configuration's values), said in the log.
    control_file(m.cfg).write_text("{not json")
    _run(m, clock, [(200_000, 2.0)], first=10)
    assert m.resources == m.cfg.resources


def test_overrides_are_checked_as_the_configuration_is(tmp_path: Path) -> None:
    cfg = Config()
    path = tmp_path / "resources.json"
    path.write_text('{"cpu_budget": 2, "speed": 1}')
    with pytest.raises(ConfigError, match="unknown key 'speed'"):
        read_overrides(path)
    with pytest.raises(ConfigError, match=r"\[resources\] reserve: expected a fraction in \[0, 1\), got 1.5"):
        in_force(cfg, {"reserve": 1.5})
    with pytest.raises(ConfigError, match="importance: expected an object"):
        in_force(cfg, {"importance": 3})
    assert read_overrides(tmp_path / "missing.json") == {}
    assert in_force(cfg, {"keep_min_by_query": {"top-pairs": 0.5}}).keep_min_of("top-pairs") == 0.5


def test_admission_refuses_what_does_not_fit_naming_the_estimate_and_the_budget(tmp_path: Path) -> None:
    cfg = Config()
    assert admit(cfg) == (cfg, {})  # no admission rate: everything runs
    model = CostModel.for_config(cfg, load_constants(cfg.paths.state_dir))
    rate = 100_000.0
    estimates = model.estimates(cfg, Workload(rate_pps=rate))
    # A budget that holds traffic and about half of the rest, in order.
    total = sum(e.cpu for e in estimates)
    budget = total / 2 / (1 - cfg.resources.reserve)
    tight = dataclasses.replace(
        cfg, resources=dataclasses.replace(cfg.resources, admission_rate_pps=rate, cpu_budget=budget)
    )
    admitted, refused = admit(tight)
    # The oracle: admit in order while the running total fits.
    running, expected = 0.0, []
    for e in estimates:
        if running + e.cpu <= tight.resources.cpu_bound * (1 + 1e-12):
            running += e.cpu
        else:
            expected.append(e.query)
    assert sorted(refused) == sorted(expected) and refused
    left = {q.name for q in (*admitted.queries.topk, *admitted.queries.distinct, *admitted.queries.join)}
    always = {"traffic", "features"}  # kinds, not queries: never refused
    assert left.isdisjoint(refused) and left | set(refused) == {e.query for e in estimates} - always
    for name, line in refused.items():
        assert "\n" not in line and line.startswith(f"query {name!r} refused: estimated CPU ")
        assert f"budget {tight.resources.cpu_bound:.3g} s/s" in line and "at 100000 packets/s" in line


def test_the_intake_box_is_the_last_resort_and_the_first_knob_reversed(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock, intake_min=0.05)
    # A load no drop box after the decode can bring under the bound: batches of 3 s back to back
    # (load 1, measured over the time since the previous batch began), whatever the fractions.
    # long enough for every query's box to reach its floor, then the intake box its own
    heavy = [(200_000, 3.0)] * 30
    light = [(20_000, 0.05)] * 20
    got = _run(m, clock, heavy + light)
    floor = m.intake_floor
    assert floor == 0.0625
    first = next(i for i, keep in enumerate(got) if INTAKE in keep)
    # only once every query's box is at its floor
    assert all(got[first].get(n) == m.lower(n) for n in m.names), got[first]
    for keep in got:
        assert set(keep) <= {*m.names, INTAKE}
        assert keep.get(INTAKE, 1.0) in (1.0, 0.5, 0.25, 0.125, 0.0625)
    # the load never fell: it only falls (to the largest power of two whose estimate fits,
    # tests/pipeline/test_manager_backlog.py) down to its floor, never below
    intakes = [keep.get(INTAKE, 1.0) for keep in got[: len(heavy)]]
    assert all(b <= a for a, b in zip(intakes, intakes[1:], strict=False))
    assert intakes[-1] == floor
    # Once the load falls it rises one step per batch, and the queries' boxes stay where they are
    # until it is back at 1.
    after = got[len(heavy) :]
    for a, b in zip(after, after[1:], strict=False):
        x, y = a.get(INTAKE, 1.0), b.get(INTAKE, 1.0)
        assert y in (x, min(2 * x, 1.0)), (a, b)
        if x < 1:
            assert {n: b.get(n, 1.0) for n in m.names} == {n: a.get(n, 1.0) for n in m.names}
    assert any(INTAKE not in keep and keep for keep in after)  # queries reversed after the intake
    assert after[-1] == {}


def test_intake_min_of_one_never_samples_before_the_decode(tmp_path: Path) -> None:
    clock = Clock()
    m = _manager(tmp_path, clock, intake_min=1.0)
    got = _run(m, clock, [(200_000, 3.0)] * 6)
    assert all(INTAKE not in keep for keep in got) and got[-1]


def test_window_reduction_under_the_memory_budget_and_back(tmp_path: Path) -> None:
    from analytics.window_plan import plan_windows
    from netmon.config import TopKQuery

    ranged = TopKQuery(
        name="top-sources", key="src_ip", window_s=60.0, sub_window_s=1.0, k=50, window_range_s=(5.0, 60.0)
    )
    cfg = Config().replace(
        paths={"data_dir": tmp_path / "data"},
        queries={"topk": (ranged, TopKQuery(name="top-pairs", key="src_ip,dst_ip"))},
    )
    model = CostModel(DEFAULT_CONSTANTS, 5.0)
    # the kinds the manager estimates: those of the shared query it manages
    shared = dataclasses.replace(cfg.pipeline, kinds=SHARED_KINDS)

    def at(rate: float, window: float) -> float:
        q = dataclasses.replace(ranged, window_s=window)
        c = dataclasses.replace(cfg, queries=dataclasses.replace(cfg.queries, topk=(q, cfg.queries.topk[1])))
        c = dataclasses.replace(c, pipeline=shared)
        return sum(e.memory_bytes for e in model.estimates(c, Workload(rate_pps=rate)))

    # a budget the full window at 40k packets/s does not fit, a 20-s window does (no reserve)
    budget = int((at(40_000, 20.0) + at(40_000, 21.0)) / 2)
    cfg = dataclasses.replace(
        cfg,
        resources=dataclasses.replace(
            # the fine step alone (the coarse step: test_the_coarse_step_...)
            cfg.resources,
            manage=True,
            memory_budget=str(budget),
            reserve=0.0,
            granularity_steps=0,
            cpu_budget=64.0,  # light on CPU: only the memory bound acts
        ),
    )
    clock = Clock()
    m = ResourceManager(cfg, tmp_path / "rm", model=model, clock=clock)
    windows = []
    for i, packets in enumerate([1_000, 40_000, 40_000, 1_000, 1_000]):
        m.decide(i)
        windows.append(m.windows)
        if i == 2:  # Spark runs the batch again: the same windows, whatever was measured since
            m.observe(i, 1_000, 0.1)
            assert m.decide(i) == {} and m.windows == windows[-1]
        clock.t += 1.0
        m.observe(i, packets, 0.1)  # light on CPU: no drop box, only the memory bound acts
    assert windows[0] == windows[1] == {}  # nothing measured over the bound yet
    # the largest window in the range whose estimate fits: 20 s, as the plan and the brute force say
    assert windows[2] == {"top-sources": 20.0}
    plan = plan_windows(model, m._cfg, Workload(rate_pps=40_000), m.resources.memory_bound)
    assert plan.windows == windows[2]
    assert at(40_000, 20.0) <= m.resources.memory_bound < at(40_000, 21.0)
    # the load falls: the window goes back to the configured one
    assert windows[3] == {"top-sources": 20.0} and windows[4] == {}


def test_the_top_k_kind_takes_the_managers_window_at_the_batch_boundary(tmp_path: Path) -> None:
    from netmon.config import TopKQuery
    from pipeline.window_knobs import WindowKnobs

    q = TopKQuery(name="t", window_s=30.0, sub_window_s=2.0, window_range_s=(4.0, 30.0))
    knobs = WindowKnobs((q,), None, tmp_path / "w")
    assert knobs.decide(0) == {"t": 30_000_000_000}
    knobs.limits = {"t": 10.0}
    assert knobs.decide(1) == {"t": 10_000_000_000}
    knobs.limits = {"t": 3.0}  # outside the range: left out, the configured window stays
    assert knobs.decide(2) == {"t": 30_000_000_000}
    knobs.limits = {}
    assert knobs.decide(1) == {"t": 10_000_000_000}  # a rerun: the saved decision


def test_measured_state_corrects_the_memory_estimate(tmp_path: Path) -> None:
    from analytics.window_plan import estimated, plan_windows
    from netmon.config import TopKQuery
    from pipeline.resource_manager import ALPHA

    # a long window of long lists: its state is mostly the window's lists, which shrink with it
    # (a short window's is mostly the open sub-windows' partial counts, which do not)
    ranged = TopKQuery(
        name="top-sources", window_s=600.0, sub_window_s=1.0, k=200, window_range_s=(60.0, 600.0)
    )
    # top-k's state the most of it (no distinct query), so the windows can make it fit
    cfg = Config().replace(paths={"data_dir": tmp_path / "data"}, queries={"topk": (ranged,), "distinct": ()})
    model = CostModel(DEFAULT_CONSTANTS, 5.0)
    shared = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=SHARED_KINDS))
    w = Workload(rate_pps=40_000)
    _, full, _ = estimated(model, shared, w, {}, {})
    cfg = dataclasses.replace(
        cfg,
        resources=dataclasses.replace(
            cfg.resources, manage=True, memory_budget=str(int(full * 1.05)), reserve=0.0, granularity_steps=0
        ),
    )
    clock = Clock()
    m = ResourceManager(cfg, tmp_path / "rm", model=model, clock=clock)
    # the kinds hold twice the rows the model says for the windows in force, then as many
    factors = [2.0, 2.0, 1.0, 1.0, 1.0]
    corrections, windows = [], []
    for i, factor in enumerate(factors):
        m.decide(i)
        corrections.append(m.last.get("state_correction"))
        windows.append(m.windows)
        clock.t += 1.0
        rows, _, _ = estimated(model, shared, w, m.windows, {})
        m.observe(i, 40_000, 0.1, int(factor * rows))
    c3 = ALPHA * 1.0 + (1 - ALPHA) * 2.0  # smoothed as the CPU correction
    assert corrections[0] is None
    assert corrections[1:] == pytest.approx([2.0, 2.0, c3, ALPHA * 1.0 + (1 - ALPHA) * c3], rel=1e-3)
    # before any measurement the model alone: it fits (5 % room)
    assert windows[0] == {}
    for c, got in zip(corrections[1:], windows[1:], strict=True):
        # the windows are the plan's at the bound over the correction
        want = plan_windows(model, m._cfg, w, m.resources.memory_bound / c).windows
        assert got == {n: x for n, x in want.items() if x < 600.0}
    assert windows[1]["top-sources"] < windows[3]["top-sources"] < windows[4]["top-sources"]


def test_distinct_windows_are_reduced_with_the_top_k_ones_and_the_distinct_kind_takes_them(
    tmp_path: Path,
) -> None:
    """Window reduction over a ranged distinct query too (issue 18 item 4): its window in the plan
    as ``distinct/<name>`` (the manager refuses a top-k and a distinct query of one name, the
    control file does not); the distinct kind takes its entry at the batch boundary and leaves a
    top-k entry of the same name alone; back when the load falls."""
    from analytics.window_plan import plan_windows
    from netmon.config import DistinctQuery, TopKQuery
    from pipeline.distinct import SlidingDistinct, chains_of

    ranged = DistinctQuery(name="ddos", window_s=120.0, sub_window_s=1.0, window_range_s=(10.0, 120.0))
    fixed = TopKQuery(name="top-dst", key="dst_ip", window_s=10.0)  # no range: never reduced
    cfg = Config().replace(
        paths={"data_dir": tmp_path / "data"}, queries={"topk": (fixed,), "distinct": (ranged,)}
    )
    model = CostModel(DEFAULT_CONSTANTS, 5.0)
    shared = dataclasses.replace(cfg.pipeline, kinds=SHARED_KINDS)

    def at(rate: float, window: float) -> float:
        q = dataclasses.replace(ranged, window_s=window)
        c = dataclasses.replace(cfg, queries=dataclasses.replace(cfg.queries, distinct=(q,)), pipeline=shared)
        return sum(e.memory_bytes for e in model.estimates(c, Workload(rate_pps=rate)))

    budget = int((at(40_000, 40.0) + at(40_000, 41.0)) / 2)  # 40 s fits, 41 s does not
    cfg = dataclasses.replace(
        cfg,
        resources=dataclasses.replace(
            # the fine step alone (the coarse step: test_the_coarse_step_...)
            cfg.resources,
            manage=True,
            memory_budget=str(budget),
            reserve=0.0,
            granularity_steps=0,
            cpu_budget=64.0,  # light on CPU: only the memory bound acts
        ),
    )
    clock = Clock()
    m = ResourceManager(cfg, tmp_path / "rm", model=model, clock=clock)
    windows = []
    for i, packets in enumerate([1_000, 40_000, 40_000, 1_000, 1_000]):
        m.decide(i)
        windows.append(m.windows)
        clock.t += 1.0
        m.observe(i, packets, 0.1)
    assert windows[2] == {"distinct/ddos": 40.0}
    assert plan_windows(model, m._cfg, Workload(rate_pps=40_000), m.resources.memory_bound).windows == {
        "distinct/ddos": 40.0
    }
    assert windows[0] == windows[1] == {} and windows[4] == {}
    kind = SlidingDistinct(chains_of([ranged]), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=0)
    kind.limit_windows({"ddos": 4.0, **windows[2]})  # "ddos": a top-k query's entry
    assert kind.knobs.decide(0) == {"ddos": 40 * 10**9}
    kind.limit_windows({"distinct/ddos": 5.0})  # outside the range: left out
    assert kind.knobs.decide(1) == {"ddos": 120 * 10**9}


def test_the_coarse_step_fixes_the_finest_granularity_that_fits_then_reduces_windows_and_back(
    tmp_path: Path,
) -> None:
    """Seed 004 §4.3 with p = 2 (CK-F7): f = 1, ½, 0 set every ranged top-k query's sub-window
    (the allowed factor closest to coarsest + f·(finest − coarsest)) and window; the first f whose
    estimate fits fixes the sub-windows, then the bisection sets the windows (multiples of them).
    Checked against a brute force over the model's estimates; a rerun gets the same decision, the
    top-k kind takes the factor as its granularity floor, and both go back when the load falls."""
    from analytics.window_plan import estimated
    from netmon.config import TopKQuery
    from pipeline.topk import SlidingTopK

    ranged = TopKQuery(
        name="top-sources", window_s=600.0, sub_window_s=1.0, k=200, window_range_s=(60.0, 600.0)
    )
    cfg = Config().replace(paths={"data_dir": tmp_path / "data"}, queries={"topk": (ranged,), "distinct": ()})
    model = CostModel(DEFAULT_CONSTANTS, 5.0)
    shared = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=SHARED_KINDS))
    w = Workload(rate_pps=40_000)

    def memory(m: int, window: float) -> float:
        return estimated(model, shared, w, {"top-sources": window}, {}, {"top-sources": m})[1]

    # 2-s lists are smaller here; at 4 s the open fine counts (growing with m) outweigh the
    # 600 s of lists they save (CostModel.topk)
    assert memory(1, 600) > memory(2, 600) and memory(4, 600) > memory(2, 600)
    budget = int(memory(2, 400) + (memory(2, 402) - memory(2, 400)) / 2)
    cfg = dataclasses.replace(
        cfg,
        resources=dataclasses.replace(
            cfg.resources, manage=True, memory_budget=str(budget), reserve=0.0, granularity_steps=2
        ),
    )
    m = ResourceManager(cfg, tmp_path / "rm", model=model, clock=Clock())
    bound = m.resources.memory_bound
    # brute force: f = (p - j)/p; factors allowed (dividing 600 and 60, at most 4): 1, 2, 3, 4;
    # closest to 4 + f·(1 - 4): f = 1 -> 1, f = ½ -> 2.5 -> 2 (the finer on a tie), f = 0 -> 4
    steps = [(1.0, 1), (0.5, 2), (0.0, 4)]
    fits = [memory(g, 60 + (f * 540) // (g * 1.0) * g) <= bound for f, g in steps]
    assert fits[:2] == [False, True]
    # then the largest window, a multiple of 2 s in [60, 600], whose estimate fits: 400 s
    best = max(x for x in range(60, 601, 2) if memory(2, x) <= bound)
    assert best == 400
    clock = m.clock
    decided = []
    for i, packets in enumerate([40_000, 40_000, 40_000, 1_000, 1_000]):
        m.decide(i)
        decided.append((m.granularity, m.windows))
        if i == 2:  # Spark runs the batch again: the same decision, whatever was measured since
            m.observe(i, 1_000, 0.1)
            m.decide(i)
            assert (m.granularity, m.windows) == decided[-1]
        clock.t += 1.0
        m.observe(i, packets, 0.1)  # light on CPU: only the memory bound acts
    assert decided[0] == ({}, {})  # nothing measured yet
    assert decided[1] == decided[2] == decided[3] == ({"top-sources": 2}, {"top-sources": float(best)})
    assert memory(2, best) <= bound < memory(1, 600)
    assert decided[4] == ({}, {})  # the load fell: the configured sub-window and window again
    # the top-k kind takes the coarse step as the floor of its granularity operator
    kind = SlidingTopK((ranged,), tmp_path / "results", tmp_path / "ck", watermark_ms=5000)
    kind.coarsen(decided[1][0])
    assert kind.grains.decide(0, {"top-sources": 400 * 10**9}) == {"top-sources": 2}
    kind.coarsen(decided[4][0])
    assert kind.grains.decide(1, {"top-sources": 600 * 10**9}) == {"top-sources": 1}


def test_the_coarse_step_turns_the_distinct_queries_by_the_top_k_queries_shared_f_and_back(
    tmp_path: Path,
) -> None:
    """Seed 004 §4.3's coarse step over a ranged distinct query beside a ranged top-k one, one
    shared f (p = 2): f = 1, ½, 0 set both sub-windows (the allowed factor closest to coarsest +
    f·(finest − coarsest): 1, 2, 4 of 1 s, dividing 600 and 60) and windows; the first f whose
    estimate fits fixes them, the distinct query's keyed ``distinct/<name>`` and estimated with
    ``N/(m·b)`` sketches per group (``CostModel.distinct(m=)``). Checked against a brute force over
    the model; the estimate with the plan is within the bound; a rerun gets the same decision;
    the distinct kind takes its factor as its granularity floor (not the top-k one of the same
    name); both go back when the load falls."""
    from analytics.window_plan import estimated
    from netmon.config import DistinctQuery, TopKQuery
    from pipeline.distinct import SlidingDistinct, chains_of

    top = TopKQuery(name="top-sources", window_s=600.0, sub_window_s=1.0, k=200, window_range_s=(60.0, 600.0))
    ranged = DistinctQuery(
        name="ddos",
        count="src_ip",
        group_by="dst_ip",
        window_s=600.0,
        sub_window_s=1.0,
        window_range_s=(60.0, 600.0),
    )
    cfg = Config().replace(
        paths={"data_dir": tmp_path / "data"}, queries={"topk": (top,), "distinct": (ranged,)}
    )
    model = CostModel(DEFAULT_CONSTANTS, 5.0)
    shared = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=SHARED_KINDS))
    w = Workload(rate_pps=40_000)

    def memory(m: int, window: float, *, only_distinct: bool = False) -> float:
        grain = {"distinct/ddos": m} if only_distinct else {"top-sources": m, "distinct/ddos": m}
        windows = (
            {"distinct/ddos": window} if only_distinct else {"top-sources": window, "distinct/ddos": window}
        )
        return estimated(model, shared, w, windows, {}, grain)[1]

    # Γ does not save the distinct query's state: stage 1 keeps sketching per b, and the store
    # holds those sketches (a little longer: (m − 1)·b); the top-k lists are what it shrinks
    assert memory(2, 600, only_distinct=True) >= memory(1, 600, only_distinct=True)
    assert memory(2, 600) < memory(1, 600)
    budget = int(0.9 * memory(2, 600))
    assert memory(1, 600) > budget  # the finest does not fit
    cfg = dataclasses.replace(
        cfg,
        resources=dataclasses.replace(
            cfg.resources, manage=True, memory_budget=str(budget), reserve=0.0, granularity_steps=2
        ),
    )
    m = ResourceManager(cfg, tmp_path / "rm", model=model, clock=Clock())
    bound = m.resources.memory_bound
    # brute force: f = (p - j)/p -> (factor, window at f as a multiple of it)
    steps = [(1.0, 1), (0.5, 2), (0.0, 4)]
    fits = [memory(g, 60 + (f * 540) // g * g) <= bound for f, g in steps]
    first = fits.index(True)
    g = steps[first][1]
    assert g > 1
    best = max(x for x in range(60, 601, g) if memory(g, x) <= bound)
    decided = []
    clock = m.clock
    for i, packets in enumerate([40_000, 40_000, 40_000, 1_000, 1_000]):
        m.decide(i)
        decided.append((m.granularity, m.windows))
        if i == 2:  # Spark runs the batch again: the same decision, whatever was measured since
            m.observe(i, 1_000, 0.1)
            m.decide(i)
            assert (m.granularity, m.windows) == decided[-1]
        clock.t += 1.0
        m.observe(i, packets, 0.1)  # light on CPU: only the memory bound acts
    assert decided[0] == ({}, {})  # nothing measured yet
    grain = {"top-sources": g, "distinct/ddos": g}
    assert decided[1] == decided[2] == decided[3]
    assert decided[1][0] == grain
    windows = decided[1][1]
    assert abs(max(windows.values()) - best) <= g and set(windows) <= {"top-sources", "distinct/ddos"}
    assert estimated(model, shared, w, windows, {}, grain)[1] <= bound  # the plan fits
    assert decided[4] == ({}, {})  # the load fell: the configured sub-windows and windows again
    # the distinct kind takes the coarse step as the floor of its granularity operator
    kind = SlidingDistinct(chains_of([ranged]), tmp_path / "results", tmp_path / "ck", watermark_ms=5000)
    kind.coarsen({**decided[1][0], "ddos": 4})  # "ddos": a top-k entry of the same name
    assert kind.grains.decide(0, {"ddos": 600 * 10**9}) == {"ddos": g}
    kind.coarsen(decided[4][0])
    assert kind.grains.decide(1, {"ddos": 600 * 10**9}) == {"ddos": 1}
