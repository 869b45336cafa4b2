"""The Resources page over generated ``sys`` rows (no Spark, no Kafka).

The rows are made the pipeline's way: progress events of the two queries through
``pipeline.sys_stats.sys_row`` (with the shared batch's figures), each committed per batch with
``pipeline.batch_sink.write_table`` under ``results/sys/<query>/``; each commit's file time is set
just after its batch's trigger, as the listener writes it. Two hours of batches every 10 s; and
three more hours, compacted by a real maintenance pass (``pipeline.retention``) as a user's
``[retention] compact_after_s = 0`` has it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from analytics.cost_model import DEFAULT_CONSTANTS, Workload
from analytics.explain import explain
from dashboard import data
from dashboard import data_resources as dr
from netmon.config import Config
from netmon.results import COMMITS, compactions, read_results, results_dir
from pipeline.batch_sink import write_table
from pipeline.publish import TIME_COLUMNS
from pipeline.retention import maintain
from pipeline.sys_stats import SYS_SCHEMA, BatchFigures, Knobs, sys_row, sys_table
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames

APP = REPO_ROOT / "dashboard" / "app.py"
PAGE = "pages/resources.py"
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
STEP_S, SPAN_S = 10, 7200
#: packets per Kafka message (`netmon replay` writes 1,000 records a message)
PER_MESSAGE = 1000


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _progress(query: str, batch_id: int, t: dt.datetime, messages: int) -> dict[str, Any]:
    """A progress event of ``query``'s batch at ``t``: ``messages`` read over the last 10 s."""
    end = 100 * batch_id
    return {
        "name": query,
        "batchId": batch_id,
        "timestamp": _iso(t),
        "numInputRows": messages,
        "inputRowsPerSecond": messages / STEP_S,
        "processedRowsPerSecond": messages / 2.0,
        "durationMs": {"addBatch": 300 + batch_id % 50, "triggerExecution": 400 + batch_id % 50},
        "stateOperators": ([{"numRowsTotal": 8, "memoryUsedBytes": 4096}] if query == "joins" else []),
        "sources": [{"endOffset": {"p": {"0": end}}, "latestOffset": {"p": {"0": end + batch_id % 3}}}],
        "observedMetrics": (
            {
                "join.handshake": {
                    "state_left": 40 + batch_id % 5,
                    "state_right": 2,
                    "x_left": 1.0,
                    "x_right": 1.0,
                    "max_ts_ns": round((t.timestamp() - 0.5) * 1e9),
                }
            }
            if query == "joins"
            else {}
        ),
    }


def _write(data_dir: Path, t0: dt.datetime = T0, span_s: int = SPAN_S) -> list[dict[str, Any]]:
    """``span_s`` of sys rows of both queries from ``t0``, committed; the rows, as written."""
    cfg = Config().replace(paths={"data_dir": data_dir})
    knobs = Knobs.of(cfg)
    rows = []
    for batch_id in range(span_s // STEP_S):
        t = t0 + dt.timedelta(seconds=STEP_S * batch_id)
        messages = 20 + batch_id % 7  # 20-26 messages per 10 s: 2,000-2,600 packets/s
        figures = BatchFigures(
            packets=messages * PER_MESSAGE,
            newest_ns=round((t.timestamp() - 1.0) * 1e9),
            seconds={"stage1": 0.2, "traffic": 0.01, "topk": 0.05, "distinct": 0.03},
        )
        for query, extra in (("packets", figures), ("joins", None)):
            row = sys_row(_progress(query, batch_id, t, messages), knobs, extra)
            assert row is not None
            sink = results_dir(cfg, "sys") / query
            write_table(sys_table([row]), sink, batch_id)
            written = (t + dt.timedelta(seconds=1)).timestamp()
            os.utime(sink / COMMITS / f"{batch_id}.json", (written, written))
            rows.append(row)
    return rows


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    data_dir = tmp_path_factory.mktemp("resources") / "data"
    return data_dir, _write(data_dir)


def test_reads_only_the_range_and_each_commit_once(generated) -> None:
    data_dir, rows = generated
    sys_dir = data_dir / "results" / "sys"
    whole = read_results(sys_dir)
    assert whole is not None and whole.num_rows == len(rows) == 2 * SPAN_S // STEP_S
    cache = dr._Rows()
    got = dr.read_recent(sys_dir, 900, cache=cache)
    # The oracle: every row of the last 15 min of batch time, up to the newest batch.
    newest = max(r["batch_time"] for r in rows)
    want = sorted(
        ((r["query"], r["batch_id"]) for r in rows if r["batch_time"] >= newest - dt.timedelta(seconds=900)),
    )
    assert list(zip(got["query"], got["batch_id"], strict=True)) == want
    assert len(want) == 2 * (900 // STEP_S + 1)
    # Bounded: only the commits written within the range plus the slack were parsed ...
    slack = (900 + dr.SLACK_S) // STEP_S + 1
    assert cache.parsed == 2 * slack < len(rows)
    # ... once: a redraw parses nothing again, a new batch only itself.
    dr.read_recent(sys_dir, 900, cache=cache)
    assert cache.parsed == 2 * slack
    # A batch outside the range whose file is now unreadable is never opened.
    old = sys_dir / "packets" / "batch-000003" / "part-00000.parquet"
    old.write_bytes(b"not parquet")
    assert list(dr.read_recent(sys_dir, 900, cache=dr._Rows())["batch_id"]) == list(got["batch_id"])
    # The values are the rows as written.
    first = got[got["query"] == "joins"].iloc[0].to_dict()
    written = next(r for r in rows if (r["query"], r["batch_id"]) == ("joins", first["batch_id"]))
    assert (
        first["join_state_rows"] == written["join_state_rows"] and first["lag_s"] == written["lag_s"] == 0.5
    )


def test_estimates_are_the_cost_models_at_the_measured_rate(generated, tmp_path: Path) -> None:
    data_dir, _ = generated
    cfg = Config().replace(paths={"data_dir": data_dir, "state_dir": tmp_path / "state"})
    df = dr.with_estimates(
        dr.read_recent(data_dir / "results" / "sys", 300, cache=dr._Rows()), cfg, DEFAULT_CONSTANTS
    )
    for query in ("packets", "joins"):
        row = df[df["query"] == query].iloc[-1]
        # packets: 2,000-2,600 packets/s measured; joins (an older netmon's query): its messages/s
        # at the shared query's 1,000 a message
        assert row["rate_pps"] == pytest.approx(row["input_messages_per_s"] * PER_MESSAGE)
        # the estimates' rate is the measured one to three significant digits
        report = explain(cfg, Workload(rate_pps=float(f"{row['rate_pps']:.3g}")), DEFAULT_CONSTANTS)
        # every kind runs on the shared query now, the joins included: an older joins query's
        # rows get no estimate of their own
        mine = [q for q in report["queries"] if q["kind"] in dr.BATCH_KINDS]
        assert {q["kind"] for q in mine} >= {"traffic", "topk", "distinct", "joins"}
        if query == "joins":
            assert math.isnan(row["est_cpu"]) and math.isnan(row["est_state_rows"])
            continue
        # the whole batch: the queries, the shared read and decode, the per-batch costs
        assert row["est_cpu"] == pytest.approx(sum(p["cpu"] for p in report["parts"].values()))
        assert row["est_cpu"] > sum(q["cpu"] for q in mine)
        assert row["est_state_rows"] == pytest.approx(sum(q["state_rows"] for q in mine))
        assert row["est_memory_bytes"] == pytest.approx(sum(q["memory_bytes"] for q in mine))
    assert dr.budgets(cfg)["cpu_bound"] == pytest.approx(0.8)
    knobs = dr.knobs_over_time(df[df["query"] == "joins"])
    assert set(knobs["knob"]) == {
        "trigger_s",
        "watermark_s",
        "max_batch_messages",
        "shed_x_left",
        "shed_x_right",
    }


#: the compacted data: 12:20 to 15:19:50, so hours 12, 13 and 14 are closed and compacted
T0_COMPACTED = dt.datetime(2024, 5, 1, 12, 20, 0, tzinfo=dt.UTC)
SPAN_COMPACTED_S = 3 * 3600


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Three hours of sys rows, then one maintenance pass that compacts every closed hour."""
    data_dir = tmp_path_factory.mktemp("compacted") / "data"
    rows = _write(data_dir, T0_COMPACTED, SPAN_COMPACTED_S)
    cfg = Config().replace(
        paths={"data_dir": data_dir},
        retention={"compact_after_s": 0.0},
        pipeline={"publish_results": False},  # no republisher's mark to wait for
    )
    newest = max(r["batch_time"] for r in rows)
    report = maintain(cfg, ("sys",), now=newest.timestamp() + 60)
    assert not report.errors
    assert report.compacted_files == 2 * 3  # hours 12, 13, 14 of both queries
    return data_dir, rows


def _in(rows: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> list[tuple[str, int]]:
    """The oracle: the (query, batch id) of the rows written with a batch time in [start, end]."""
    return sorted((r["query"], r["batch_id"]) for r in rows if start <= r["batch_time"] <= end)


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The compacted files ``pyarrow.parquet.read_table`` opens from now on (as ``<hour>-<gen>``)."""
    opened: list[str] = []
    read_table = pq.read_table

    def recording(source: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(source).parent.name == "compacted":
            opened.append(f"{Path(source).parent.parent.name}/{Path(source).stem}")
        return read_table(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", recording)
    return opened


def test_compaction_groups_sys_rows_by_batch_time(compacted) -> None:
    data_dir, _ = compacted
    # the column the manifests' bounds are in is the one the page's range is in
    assert next(c for c in TIME_COLUMNS if c in SYS_SCHEMA.names) == dr.TIME_COLUMN == "batch_time"
    for query in ("joins", "packets"):
        manifests = compactions(data_dir / "results" / "sys" / query)
        assert sorted(manifests) == ["20240501T12", "20240501T13", "20240501T14"]
        assert {m["column"] for m in manifests.values()} == {"batch_time"}


def test_reads_compacted_and_committed_batches_in_range_once(compacted, monkeypatch) -> None:
    data_dir, rows = compacted
    sys_dir = data_dir / "results" / "sys"
    opened = _opened(monkeypatch)
    cache = dr._Rows()
    got = dr.read_recent(sys_dir, 3600, cache=cache)
    newest = max(r["batch_time"] for r in rows)
    start = newest - dt.timedelta(seconds=3600)  # 14:19:50: compacted hour 14, then commits
    want = _in(rows, start, newest)
    assert list(zip(got["query"], got["batch_id"], strict=True)) == want
    assert len(want) == 2 * (3600 // STEP_S + 1)
    # Only the compacted hour the range overlaps was opened, once per query.
    assert sorted(opened) == ["joins/20240501T14-0000", "packets/20240501T14-0000"]
    # The commits left (hour 15's) were parsed; hour 14's went with the compaction.
    assert cache.parsed == sum(
        1 for r in rows if r["batch_time"] >= dt.datetime(2024, 5, 1, 15, tzinfo=dt.UTC)
    )
    # The values are the rows as written, from the compacted file and from the commits alike.
    by_key = {(r["query"], r["batch_id"]): r for r in rows}
    for column in ("batch_time", "batch_utilisation", "lag_messages", "join_state_rows", "shed_fractions"):
        written = [by_key[k][column] for k in want]
        assert [None if pd.isna(v) else v for v in got[column]] == written, column
    # The last 5 min: commits only, no compacted file opened.
    opened.clear()
    assert len(dr.read_recent(sys_dir, 300, cache=cache)) == 2 * (300 // STEP_S + 1)
    assert opened == []


def test_a_range_in_compacted_hours_only(compacted, monkeypatch) -> None:
    data_dir, rows = compacted
    sys_dir = data_dir / "results" / "sys"
    opened = _opened(monkeypatch)
    cache = dr._Rows()
    start = dt.datetime(2024, 5, 1, 12, 40, 5, tzinfo=dt.UTC)
    end = dt.datetime(2024, 5, 1, 13, 30, tzinfo=dt.UTC)
    got = dr.read_between(sys_dir, start, end, cache=cache)
    assert list(zip(got["query"], got["batch_id"], strict=True)) == _in(rows, start, end)
    assert got["batch_time"].min() == pd.Timestamp("2024-05-01 12:40:10Z")
    assert sorted(opened) == [f"{q}/20240501T{h}-0000" for q in ("joins", "packets") for h in (12, 13)]
    assert cache.parsed == 0  # their commits are gone: none is in the range's file times
    # Within one hour: that hour's files only.
    opened.clear()
    end = dt.datetime(2024, 5, 1, 13, 59, 50, tzinfo=dt.UTC)
    start = end - dt.timedelta(seconds=300)
    got = dr.read_between(sys_dir, start, end, cache=cache)
    assert list(zip(got["query"], got["batch_id"], strict=True)) == _in(rows, start, end)
    assert sorted(opened) == ["joins/20240501T13-0000", "packets/20240501T13-0000"]


def test_a_covered_commit_left_behind_is_not_counted_twice(compacted, tmp_path: Path) -> None:
    """A pass that died after its manifest leaves the commits it covers: the batch is read from
    the compacted file only (the next pass removes the commit)."""
    data_dir, rows = compacted
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    newest = max(r["batch_time"] for r in rows)
    start = newest - dt.timedelta(seconds=3600)
    left = [r for r in rows if r["query"] == "packets" and start <= r["batch_time"]][:5]
    sink = copy / "results" / "sys" / "packets"
    for row in left:  # hour 14's first batches in range, committed again
        write_table(sys_table([row]), sink, row["batch_id"])
        written = (row["batch_time"] + dt.timedelta(seconds=1)).timestamp()
        os.utime(sink / COMMITS / f"{row['batch_id']}.json", (written, written))
    got = dr.read_recent(copy / "results" / "sys", 3600, cache=dr._Rows())
    assert list(zip(got["query"], got["batch_id"], strict=True)) == _in(rows, start, newest)


@pytest.fixture(autouse=True)
def _no_cached_config() -> Iterator[None]:
    """Leave no cached configuration (this test's data directory) to a later app test."""
    yield
    data.config.clear()


def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path, state_dir: Path) -> AppTest:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(data_dir))
    monkeypatch.setenv("NETMON_STATE_DIR", str(state_dir))
    data.config.clear()  # the dashboard's configuration is cached per process
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at.switch_page(PAGE).run()


def _titles(at: AppTest) -> list[str]:
    return [chart_frames.title(c) for c in chart_frames.charts(at)]


def test_page_without_statistics_says_so(monkeypatch, tmp_path) -> None:
    at = _app(monkeypatch, tmp_path / "empty", tmp_path / "state")
    assert not at.exception, at.exception
    assert at.title[0].value == "Resources"
    assert "No pipeline statistics yet" in at.info[0].value


def test_page_shows_each_query_measured_beside_estimated(monkeypatch, generated, tmp_path) -> None:
    data_dir, rows = generated
    at = _app(monkeypatch, data_dir, tmp_path / "state")
    assert not at.exception, at.exception
    assert at.selectbox[0].options == ["joins", "packets"]
    at.selectbox[0].select("packets").run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    last = max((r for r in rows if r["query"] == "packets"), key=lambda r: r["batch_id"])
    assert metrics["CPU share (last batch)"] == f"{last['batch_utilisation']:.0%}"
    assert metrics["Kafka lag"] == f"{last['lag_messages']:,} msg"
    assert metrics["Batches"] == f"{900 // STEP_S + 1:,}"  # the default range: the last 15 min
    assert metrics["CPU budget"] == "80% of 1 s/s"
    titles = _titles(at)
    assert titles[:2] == [
        "CPU: measured share of the trigger interval vs the cost model's estimate",
        "Seconds per batch: the shared pass and each kind",
    ]
    assert "Knobs in force over time" in titles
    cpu = chart_frames.charts(at)[0]
    assert set(chart_frames.names(cpu)) == {"batch_utilisation", "est_cpu"}
    assert chart_frames.lines(cpu)[0] == pytest.approx(0.8)  # the [resources] bound
    # The joins query: the join's state and shedding fractions, its own budget line.
    at.selectbox[0].select("joins").run()
    assert not at.exception, at.exception
    titles = _titles(at)
    assert "Seconds per batch: the shared pass and each kind" not in titles
    assert "State rows: measured vs estimated" in titles
    cpu = chart_frames.charts(at)[0]
    assert chart_frames.lines(cpu) == [pytest.approx(0.8), pytest.approx(0.8)]
    table = chart_frames.tables(at)[0]
    assert isinstance(table, pd.DataFrame) and len(table) == 50
    assert table["shed_fractions"].iloc[-1] == '{"handshake":[1.0,1.0]}'
    # A longer range (the sidebar's picker, every page's): more batches.
    at.radio[0].set_value("last 1 h").run()
    assert not at.exception, at.exception
    assert {m.label: m.value for m in at.metric}["Batches"] == f"{3600 // STEP_S + 1:,}"
