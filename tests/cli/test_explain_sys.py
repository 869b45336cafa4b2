"""``netmon explain``'s measured values from the pipeline's statistics (``results/sys``).

The rows are written the pipeline's way: progress events of the two queries handed to the
``sys`` kind's own listener (``pipeline.sys_stats.SysListener.handle``, which builds each row with
``sys_row`` and commits it with ``pipeline.batch_sink.write_table``), with the shared batch's
figures. The report's values are checked against the same aggregates computed here by brute force
from the rows the listener wrote; then the reading bounded to the span, compacted hours
(``pipeline.retention``), a single batch, and the fallback to the status file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analytics.cost_model import CostConstants, Workload
from analytics.explain import explain, format_table, measured_from_sys
from cli.main import cli
from netmon.config import Config
from netmon.recent_results import newest_rows, newest_rows_by_sink
from netmon.results import COMMITS, compactions, results_dir
from pipeline.retention import maintain
from pipeline.sys_stats import BatchFigures, Knobs, SysListener

TRIGGER_S = 2.0


class _Figures:
    """The shared query's batch function: its figures per batch id."""

    def __init__(self) -> None:
        self.by_batch: dict[int, BatchFigures] = {}

    def figures(self, batch_id: int, /) -> BatchFigures | None:
        return self.by_batch.get(batch_id)


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _progress(query: str, batch_id: int, t: dt.datetime, messages: int) -> dict[str, Any]:
    """A progress event of ``query``'s batch ``batch_id`` triggered at ``t``."""
    end = 100 * batch_id
    joins = query == "joins"
    return {
        "name": query,
        "batchId": batch_id,
        "timestamp": _iso(t),
        "numInputRows": messages,
        "inputRowsPerSecond": messages / TRIGGER_S,
        "processedRowsPerSecond": messages / 0.5,
        "durationMs": {
            "addBatch": 200 + 13 * (batch_id % 7),
            "triggerExecution": (150 if joins else 300) + 17 * (batch_id % 9),
        },
        "stateOperators": [{"numRowsTotal": 10 + batch_id, "memoryUsedBytes": 4096 + 64 * batch_id}]
        if joins
        else [],
        "sources": [{"endOffset": {"p": {"0": end}}, "latestOffset": {"p": {"0": end + batch_id % 4}}}],
        "observedMetrics": (
            {
                "join.handshake": {
                    "state_left": 40 + batch_id % 5,
                    "state_right": 2 + batch_id % 3,
                    "x_left": 1.0,
                    "x_right": 1.0,
                    "max_ts_ns": round((t.timestamp() - 0.5) * 1e9),
                }
            }
            if joins
            else {}
        ),
    }


def _write(data_dir: Path, t0: dt.datetime, batches: int) -> dict[str, list[dict[str, Any]]]:
    """``batches`` triggers of both queries from ``t0`` every 2 s (every 7th idle: no row), committed
    by the sys listener, each commit's file time just after its trigger; the rows, by query."""
    cfg = Config().replace(paths={"data_dir": data_dir}, pipeline={"trigger_s": TRIGGER_S})
    listener = SysListener(results_dir(cfg, "sys"), Knobs.of(cfg))
    shared = _Figures()
    listener.follow("packets", shared)
    listener.follow("joins")
    rows: dict[str, list[dict[str, Any]]] = {"packets": [], "joins": []}
    batch_id = 0
    for i in range(batches):
        if i % 7 == 6:
            continue  # an idle trigger: no batch ran
        t = t0 + dt.timedelta(seconds=TRIGGER_S * i, milliseconds=37 * (i % 5))
        messages = 10 + i % 6
        shared.by_batch[batch_id] = BatchFigures(
            packets=messages * 1000 + i,
            newest_ns=round((t.timestamp() - 1.0) * 1e9),
            seconds={
                "stage1": 0.1 + 0.01 * (i % 3),
                "traffic": 0.02,
                "topk": 0.05 + 0.001 * i,
                "distinct": 0.03,
            },
        )
        for query, offset_ms in (("packets", 0), ("joins", 400)):
            at = t + dt.timedelta(milliseconds=offset_ms)
            row = listener.handle(
                _progress(query, batch_id, at, messages if query == "packets" else 3 + i % 2)
            )
            assert row is not None
            written = (at + dt.timedelta(seconds=1)).timestamp()
            os.utime(results_dir(cfg, "sys") / query / COMMITS / f"{batch_id}.json", (written, written))
            rows[query].append(row)
        batch_id += 1
    return rows


def _brute(rows: list[dict[str, Any]], span_s: float) -> dict[str, Any]:
    """The aggregates ``netmon explain`` reports, computed straight from the rows written."""
    end = max(r["batch_time"] for r in rows)
    sel = sorted(
        (r for r in rows if r["batch_time"] >= end - dt.timedelta(seconds=span_s)),
        key=lambda r: r["batch_time"],
    )
    elapsed = (sel[-1]["batch_time"] - sel[0]["batch_time"]).total_seconds()
    out: dict[str, Any] = {
        "batches": len(sel),
        "first_batch_id": sel[0]["batch_id"],
        "last_batch_id": sel[-1]["batch_id"],
        "seconds": elapsed,
        "input_messages_per_s": sum(r["input_messages"] for r in sel[1:]) / elapsed,
        "cpu": sum(r["batch_ms"] for r in sel[:-1]) / 1000 / elapsed,
        "utilisation": sum(r["batch_ms"] for r in sel) / 1000 / sum(r["trigger_s"] for r in sel),
        "state_rows": sel[-1]["state_rows"],
        "state_bytes": sel[-1]["state_bytes"],
        "join_state_rows": sel[-1]["join_state_rows"],
        "lag_messages": sel[-1]["lag_messages"],
        "backlog_s": sel[-1]["backlog_s"],
    }
    if sel[0]["packets"] is not None:
        out["packets_per_s"] = sum(r["packets"] for r in sel[1:]) / elapsed
        out["parts_cpu"] = {
            p: sum(r[f"{p}_s"] for r in sel[:-1]) / elapsed for p in ("stage1", "traffic", "topk", "distinct")
        }
    else:
        out["packets_per_s"] = None
        out["parts_cpu"] = {}
    return out


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    cfg = tmp_path / "netmon.toml"
    cfg.write_text(f"[pipeline]\ntrigger_s = {TRIGGER_S}\n")
    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    result = CliRunner().invoke(cli, ["--config", str(cfg), *args], env=env)
    return result.exit_code, result.output


def _now_t0(batches: int) -> dt.datetime:
    """A start such that the newest batch is a few seconds old."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return now - dt.timedelta(seconds=TRIGGER_S * batches + 3)


@pytest.mark.parametrize("span_s", [60.0, 17.0])
def test_json_holds_the_brute_force_aggregates_of_the_newest_batches(tmp_path: Path, span_s: float) -> None:
    rows = _write(tmp_path / "data", _now_t0(100), 100)
    # A stale status file is there too: the sys rows win, and the report says so.
    (tmp_path / "data" / "status").mkdir(parents=True)
    (tmp_path / "data" / "status" / "pipeline.json").write_text(json.dumps({"updated": 0, "queries": {}}))
    code, out = _run(tmp_path, "explain", "--rate", "1000", "--span", f"{span_s:g}", "--format", "json")
    assert code == 0, out
    m = json.loads(out)["measured"]
    assert m["available"] is True and m["source"] == "sys" and m["span_s"] == span_s
    assert m["stale"] is False and 0 <= m["age_s"] < 60
    for query in ("packets", "joins"):
        want = _brute(rows[query], span_s)
        got = m["queries"][query]
        assert got["basis"] == "span"
        for name, value in want.items():
            if isinstance(value, dict):
                assert got[name] == pytest.approx(value, rel=1e-12), (query, name)
            elif value is None:
                assert got[name] is None, (query, name)
            else:
                assert got[name] == pytest.approx(value, rel=1e-12), (query, name)
    packets, joins = _brute(rows["packets"], span_s), _brute(rows["joins"], span_s)
    assert list(m["kinds"]) == ["stage1", "traffic", "topk", "distinct", "joins"]
    for part in ("stage1", "traffic", "topk", "distinct"):
        assert m["kinds"][part]["cpu"] == pytest.approx(packets["parts_cpu"][part], rel=1e-12)
        assert m["kinds"][part]["state_rows"] is None  # the batch kinds' state is not in sys
    assert m["kinds"]["joins"]["cpu"] == pytest.approx(joins["cpu"], rel=1e-12)
    assert m["kinds"]["joins"]["state_rows"] == joins["join_state_rows"]


def test_table_names_the_source_and_prints_the_aggregates(tmp_path: Path) -> None:
    rows = _write(tmp_path / "data", _now_t0(60), 60)
    code, out = _run(tmp_path, "explain", "--rate", "1000")
    assert code == 0, out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("measured ("))
    assert lines[head].startswith("measured (source: results/sys, the batches of the last 60 s; newest ")
    assert "stale" not in lines[head]
    packets, joins = _brute(rows["packets"], 60), _brute(rows["joins"], 60)
    p_row = lines[head + 2].split()
    assert p_row[:2] == ["packets", str(packets["batches"])]
    assert p_row[7:9] == ["-", "-"]  # no state store: the batch kinds keep their state in their own files
    for text, name in zip(
        p_row[2:10],
        ["seconds", "input_messages_per_s", "packets_per_s", "cpu", "utilisation", None, None, "backlog_s"],
        strict=True,
    ):
        if name is not None:
            _shown(text, packets[name])
    j_row = lines[head + 3].split()
    assert j_row[0] == "joins" and j_row[4] == "-"
    _shown(j_row[5], joins["cpu"])
    assert j_row[7:9] == [str(joins["join_state_rows"]), str(joins["state_bytes"])]
    kinds = {line.split()[0]: line.split() for line in lines[head + 6 :]}
    assert list(kinds) == ["stage1", "traffic", "topk", "distinct", "joins"]
    # part, estimated CPU, measured CPU, ratio, estimated rows, state rows
    code, report = _run(tmp_path, "explain", "--rate", "1000", "--format", "json")
    estimated = json.loads(report)["parts"]
    assert estimated["stage1"]["cpu"] > 0  # the shared read and decode and the queries' stage 1
    for part in ("stage1", "traffic", "topk", "distinct", "joins"):
        _shown(kinds[part][1], estimated[part]["cpu"])
    for part in ("stage1", "traffic", "topk", "distinct"):
        _shown(kinds[part][2], packets["parts_cpu"][part])
        _shown(kinds[part][3], packets["parts_cpu"][part] / estimated[part]["cpu"])
        assert kinds[part][5] == "-"
    _shown(kinds["joins"][2], joins["cpu"])
    assert kinds["joins"][5] == str(joins["join_state_rows"])


def _shown(text: str, value: float) -> None:
    """``text`` is ``value`` rounded to the decimals ``text`` shows."""
    decimals = len(text.partition(".")[2])
    assert abs(float(text) - value) <= 0.5 * 10**-decimals * (1 + 1e-9), (text, value)


def test_the_read_stops_at_the_span(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
    rows = _write(tmp_path / "data", t0, 400)
    sink = tmp_path / "data" / "results" / "sys" / "packets"
    opened: list[str] = []
    read_table, parquet_file = pq.read_table, pq.ParquetFile

    def recording(source: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(source))
        return read_table(source, *args, **kwargs)

    class Recording(parquet_file):  # a commit is read through its own reader (pq.ParquetFile)
        def __init__(self, source: Any, *args: Any, **kwargs: Any) -> None:
            opened.append(str(source))
            super().__init__(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", recording)
    monkeypatch.setattr(pq, "ParquetFile", Recording)
    got = newest_rows(sink, 20.0)
    end = rows["packets"][-1]["batch_time"]
    want = [r for r in rows["packets"] if r["batch_time"] >= end - dt.timedelta(seconds=20)]
    assert got == want and 8 <= len(got) <= 11
    assert len(opened) == len(got) + 1  # the span's commits and the one before that ends the walk
    # Old rows: stale, and said so.
    report = explain(Config(), Workload(rate_pps=1000), CostConstants(), sys_rows={"packets": got})
    assert report["measured"]["stale"] is True
    head = next(line for line in format_table(report) if line.startswith("measured ("))
    assert head.endswith("(stale: the pipeline is probably not running):")


def test_compacted_hours_are_read_once(tmp_path: Path) -> None:
    # 11:56:00 to 12:02:38: hour 11 is closed and compacted, hour 12 keeps its commits
    t0 = dt.datetime(2024, 5, 1, 11, 56, 0, tzinfo=dt.UTC)
    data_dir = tmp_path / "data"
    rows = _write(data_dir, t0, 200)
    sys_dir = data_dir / "results" / "sys"
    before = newest_rows_by_sink(sys_dir, 300.0)
    cfg = Config().replace(
        paths={"data_dir": data_dir}, retention={"compact_after_s": 0.0}, pipeline={"publish_results": False}
    )
    newest = max(r["batch_time"] for r in rows["packets"] + rows["joins"])
    report = maintain(cfg, ("sys",), now=newest.timestamp() + 60)
    assert not report.errors and report.compacted_files == 2
    assert set(compactions(sys_dir / "packets")) == {"20240501T11"}
    after = newest_rows_by_sink(sys_dir, 300.0)
    assert after == before
    for query in ("packets", "joins"):
        end = rows[query][-1]["batch_time"]
        want = [r for r in rows[query] if r["batch_time"] >= end - dt.timedelta(seconds=300)]
        assert after[query] == want and want[0]["batch_time"].hour == 11
    # No commit left at all: the span ends at the compacted hour's newest row.
    only = tmp_path / "only" / "packets"
    (only / "compacted").mkdir(parents=True)
    manifest = json.loads((sys_dir / "packets" / "_compacted" / "20240501T11.json").read_text())
    (only / "_compacted").mkdir()
    (only / "_compacted" / "20240501T11.json").write_text(json.dumps(manifest))
    for name in manifest["files"]:
        (only / name).parent.mkdir(parents=True, exist_ok=True)
        (only / name).write_bytes((sys_dir / "packets" / name).read_bytes())
    hour11 = [r for r in rows["packets"] if r["batch_time"].hour == 11]
    end = hour11[-1]["batch_time"]
    assert newest_rows(only, 30.0) == [r for r in hour11 if r["batch_time"] >= end - dt.timedelta(seconds=30)]


def test_one_batch_gives_its_own_rates_and_share_of_the_trigger() -> None:
    t = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
    row = {
        "query": "packets",
        "batch_id": 4,
        "batch_time": t,
        "input_messages": 8,
        "input_messages_per_s": 4.0,
        "packets": 8000,
        "packets_per_s": 4000.0,
        "batch_ms": 500,
        "batch_utilisation": 0.25,
        "trigger_s": 2.0,
        "stage1_s": 0.2,
        "traffic_s": 0.1,
        "topk_s": None,
        "distinct_s": None,
        "state_rows": None,
    }
    m = measured_from_sys({"packets": [row]}, 60.0, now=t.timestamp() + 5)
    q = m["queries"]["packets"]
    assert q["basis"] == "batch" and q["seconds"] == 0 and m["age_s"] == 5 and m["stale"] is False
    assert (q["input_messages_per_s"], q["packets_per_s"], q["cpu"], q["utilisation"]) == (
        4.0,
        4000.0,
        0.25,
        0.25,
    )
    assert m["kinds"] == {
        "stage1": {"cpu": 0.1, "state_rows": None, "query": "packets"},
        "traffic": {"cpu": 0.05, "state_rows": None, "query": "packets"},
    }
    assert measured_from_sys({}, 60.0) == {"available": False, "source": "sys", "kinds": {}}
    # a kind's state: its own column of the newest row (an older netmon's rows have none)
    newer = {**row, "batch_id": 5, "batch_time": t + dt.timedelta(seconds=2), "traffic_state_rows": 14}
    kinds = measured_from_sys({"packets": [row, newer]}, 60.0, now=t.timestamp() + 5)["kinds"]
    assert kinds["traffic"]["state_rows"] == 14 and kinds["stage1"]["state_rows"] is None


def test_without_sys_rows_the_status_file_is_the_source(tmp_path: Path) -> None:
    status = {
        "updated": time.time(),
        "queries": {"joins": {"kind_ms": 300, "last_batch_ms": 400, "state_rows": 77, "batches": 3}},
    }
    (tmp_path / "data" / "status").mkdir(parents=True)
    (tmp_path / "data" / "status" / "pipeline.json").write_text(json.dumps(status))
    (tmp_path / "data" / "results" / "sys").mkdir(parents=True)  # there, but no rows yet
    code, out = _run(tmp_path, "explain", "--rate", "1000")
    assert code == 0, out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("measured ("))
    assert lines[head].startswith("measured (source: pipeline status file, no results/sys rows; ")
    row = lines[head + 2].split()
    assert row[0] == "joins" and row[2] == f"{300 / 1000 / TRIGGER_S:.4f}" and row[5] == "77"
    code, out = _run(tmp_path, "explain", "--rate", "1000", "--format", "json")
    measured = json.loads(out)["measured"]
    assert measured["source"] == "status" and measured["kinds"]["joins"]["state_rows"] == 77
    (tmp_path / "data" / "status" / "pipeline.json").unlink()
    code, out = _run(tmp_path, "explain", "--format", "json")
    assert json.loads(out)["measured"] == {"available": False, "kinds": {}, "source": None}
    assert not math.isnan(json.loads(out)["total"]["cpu"])


def test_span_must_be_positive(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "explain", "--span", "0")
    assert code == 2 and "--span" in out


def test_part_fits_recover_a_fixed_and_a_per_packet_cost_and_refuse_one_size() -> None:
    from analytics.explain import part_fits

    rng = np.random.default_rng(3)
    packets = rng.integers(1_000, 200_000, 40)
    rows = [
        {"packets": int(n), "stage1_s": 0.3 + 4e-6 * n + rng.normal(0, 1e-3), "topk_s": 0.02 + 1e-7 * n}
        for n in packets
    ]
    fits = part_fits(rows)
    assert fits["stage1"]["fixed_s"] == pytest.approx(0.3, abs=0.005)
    assert fits["stage1"]["per_packet_s"] == pytest.approx(4e-6, rel=0.02)
    assert fits["topk"]["fixed_s"] == pytest.approx(0.02) and fits["topk"]["batches"] == 40
    # batches of one size (a paced run): no line through them
    same = [{"packets": 50_000 + i, "stage1_s": 0.7 + 0.01 * i} for i in range(10)]
    assert part_fits(same) == {}
