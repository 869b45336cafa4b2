"""The Resources page over generated ``sys`` rows (no Spark, no Kafka).

The rows are made the pipeline's way: progress events of the two queries through
``pipeline.sys_stats.sys_row`` (with the shared batch's figures), each committed per batch with
``pipeline.batch_sink.write_table`` under ``results/sys/<query>/``; each commit's file time is set
just after its batch's trigger, as the listener writes it. Two hours of batches every 10 s.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from analytics.cost_model import DEFAULT_CONSTANTS, Workload
from analytics.explain import explain
from dashboard import data
from dashboard import data_resources as dr
from netmon.config import Config
from netmon.results import COMMITS, read_results, results_dir
from pipeline.batch_sink import write_table
from pipeline.sys_stats import BatchFigures, Knobs, sys_row, sys_table
from tests.conftest import REPO_ROOT

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


def _write(data_dir: Path) -> list[dict[str, Any]]:
    """Two hours of sys rows of both queries, committed; the rows, as written."""
    cfg = Config().replace(paths={"data_dir": data_dir})
    knobs = Knobs.of(cfg)
    rows = []
    for batch_id in range(SPAN_S // STEP_S):
        t = T0 + dt.timedelta(seconds=STEP_S * batch_id)
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
    for query, kinds in (("packets", {"traffic", "topk", "distinct"}), ("joins", {"joins"})):
        row = df[df["query"] == query].iloc[-1]
        # packets: 2,000-2,600 packets/s measured; joins: its messages/s at the shared query's 1,000 a message
        assert row["rate_pps"] == pytest.approx(row["input_messages_per_s"] * PER_MESSAGE)
        report = explain(cfg, Workload(rate_pps=row["rate_pps"]), DEFAULT_CONSTANTS)
        mine = [q for q in report["queries"] if q["kind"] in kinds]
        assert mine
        assert row["est_cpu"] == pytest.approx(sum(q["cpu"] for q in mine))
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


def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path, state_dir: Path) -> AppTest:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(data_dir))
    monkeypatch.setenv("NETMON_STATE_DIR", str(state_dir))
    data.config.clear()  # the dashboard's configuration is cached per process
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at.switch_page(PAGE).run()


def _titles(at: AppTest) -> list[str]:
    return [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]


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
    cpu = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert {t["name"] for t in cpu["data"]} == {"batch_utilisation", "est_cpu"}
    assert cpu["layout"]["shapes"][0]["y0"] == pytest.approx(0.8)  # the [resources] bound
    # The joins query: the join's state and shedding fractions, its own budget line.
    at.selectbox[0].select("joins").run()
    assert not at.exception, at.exception
    titles = _titles(at)
    assert "Seconds per batch: the shared pass and each kind" not in titles
    assert "State rows: measured vs estimated" in titles
    cpu = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [s["y0"] for s in cpu["layout"]["shapes"]] == [pytest.approx(0.8), pytest.approx(0.8)]
    table = at.dataframe[0].value
    assert isinstance(table, pd.DataFrame) and len(table) == 50
    assert table["shed_fractions"].iloc[-1] == '{"handshake":[1.0,1.0]}'
    # A longer range: more batches.
    at.segmented_control[0].set_value("last 1 h").run()
    assert not at.exception, at.exception
    assert {m.label: m.value for m in at.metric}["Batches"] == f"{3600 // STEP_S + 1:,}"
