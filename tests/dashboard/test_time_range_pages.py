"""The time range every page reads (``dashboard.time_range``): one picker, kept across pages.

An hour of results of every kind, written the pipeline's way (``pipeline.batch_sink.write_table``
per batch; the joins in Spark's file-sink layout): the results of a replayed capture, whose event
times are a year and a half before the batches that computed them (the ``sys`` and ``shedding``
rows' batch times). Each page's relative range ends at its own kind's newest row; the choice, and
an absolute range, stay as the user moves between pages. AppTest, no Spark, no Kafka.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data, time_range
from netmon.config import Config
from netmon.results import read_results, results_dir
from pipeline.batch_sink import write_table
from tests.conftest import REPO_ROOT
from tests.dashboard.test_bounded_reads import T0, S, _shedding, _topk, _traffic
from tests.dashboard.test_resources_page import _write as write_sys

APP = REPO_ROOT / "dashboard" / "app.py"
#: the batches that computed the replayed results: a year and a half later
BATCHES_T0 = dt.datetime(2025, 11, 1, 8, 0, 0, tzinfo=dt.UTC)
DISTINCT_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("group", pa.string()),
        ("distinct", pa.int64()),
        ("rank", pa.int32()),
    ]
)
JOIN_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("kind", pa.string()),
        ("row", pa.string()),
        ("key", pa.string()),
        ("left_ts", pa.timestamp("us", tz="UTC")),
        ("right_ts", pa.timestamp("us", tz="UTC")),
        ("delay_s", pa.float64()),
        ("left_src_ip", pa.string()),
        ("left_dst_ip", pa.string()),
        ("left_dst_port", pa.int32()),
        ("right_src_ip", pa.string()),
    ]
)


def _distinct(sink: Path, batches: int) -> None:
    for b in range(batches):
        rows = [
            {
                "query": "scan-ports-per-source",
                "window_end": T0 + (10 * b + i + 1) * S,
                "group": f"10.0.0.{g}",
                "distinct": 10 * g + b,
                "rank": g,
            }
            for i in range(10)
            for g in (1, 2)
        ]
        write_table(pa.Table.from_pylist(rows, schema=DISTINCT_SCHEMA), sink, b)


def _joins(sink: Path, files: int) -> None:
    """Handshakes in Spark's file-sink layout: a file a minute, a SYN every 6 s, answered in 20 ms."""
    meta = sink / "_spark_metadata"
    meta.mkdir(parents=True)
    for batch in range(files):
        rows = []
        for n in range(10):
            syn = T0 + (60 * batch + 6 * n) * S
            rows.append(
                {
                    "query": "handshake",
                    "kind": "handshake",
                    "row": "match",
                    "key": f"{batch}-{n}",
                    "left_ts": syn,
                    "right_ts": syn + 0.02 * S,
                    "delay_s": 0.02,
                    "left_src_ip": "10.0.0.1",
                    "left_dst_ip": f"192.0.2.{n}",
                    "left_dst_port": 443,
                    "right_src_ip": f"192.0.2.{n}",
                }
            )
        path = sink / f"part-{batch:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=JOIN_SCHEMA), path)
        entry = {"path": path.as_uri(), "size": path.stat().st_size, "isDir": False, "action": "add"}
        (meta / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An hour of every kind's results of a capture replayed a year and a half later."""
    data_dir = tmp_path_factory.mktemp("pages") / "data"
    cfg = Config().replace(paths={"data_dir": data_dir})
    _traffic(results_dir(cfg, "traffic"), 360)
    _topk(results_dir(cfg, "topk"), 360)
    _distinct(results_dir(cfg, "distinct"), 360)
    _joins(results_dir(cfg, "joins"), 60)
    _shedding(results_dir(cfg, "shedding"), 360)  # batch times from T0 ...
    write_sys(data_dir, BATCHES_T0, 3600)  # ... the sys rows' later
    return data_dir


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """No cached read or configuration of another test's data directory, before or after."""
    st.cache_data.clear()
    data.config.clear()
    yield
    st.cache_data.clear()
    data.config.clear()


def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path) -> AppTest:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(data_dir))
    monkeypatch.setenv("NETMON_STATE_DIR", str(tmp_path / "state"))
    data.config.clear()  # the dashboard's configuration is cached per process
    at = AppTest.from_file(str(APP), default_timeout=60)
    return at.run()


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _ends(data_dir: Path, kind: str, column: str, start: dt.datetime, end: dt.datetime) -> set[Any]:
    """The oracle: the distinct times of ``kind``'s rows (``read_results``, everything) in the range."""
    table = read_results(data_dir / "results" / kind, columns=[column])
    assert table is not None
    return {t for t in table.column(column).to_pylist() if t is not None and start <= t <= end}


def _newest(data_dir: Path, kind: str, column: str) -> dt.datetime:
    table = read_results(data_dir / "results" / kind, columns=[column])
    assert table is not None
    return max(t for t in table.column(column).to_pylist() if t is not None)


def _check(at: AppTest) -> None:
    assert not at.exception, at.exception


def test_every_page_reads_its_kinds_last_15_minutes_by_default(monkeypatch, replayed, tmp_path) -> None:
    at = _app(monkeypatch, replayed, tmp_path)
    _check(at)
    assert at.title[0].value == "Traffic"
    assert at.radio[0].value == "last 15 min"
    newest = _newest(replayed, "traffic", "window_end")
    windows = _ends(replayed, "traffic", "window_end", newest - 900 * S, newest)
    assert _metrics(at)["Windows"] == f"{len(windows):,}"
    assert any(time_range.describe((newest - 900 * S, newest)) in c.value for c in at.caption)
    for page in (
        "pages/heavy_hitters.py",
        "pages/distinct_counts.py",
        "pages/joins.py",
        "pages/shedding.py",
        "pages/resources.py",
        "pages/pipeline_status.py",
    ):
        at.switch_page(page).run()
        _check(at)
        assert at.radio[0].value == "last 15 min", page
        assert not [i.value for i in at.info if "yet" in i.value], page
    # the resources page's range is the batches' (2025), not the replayed capture's (2024)
    newest = _newest(replayed, "sys", "batch_time")
    assert newest.year == 2025
    at.switch_page("pages/resources.py").run()
    assert any(time_range.describe((newest - 900 * S, newest)) in c.value for c in at.caption)
    assert _metrics(at)["Batches"] == f"{900 // 10 + 1:,}"


def test_the_chosen_range_holds_across_pages(monkeypatch, replayed, tmp_path) -> None:
    at = _app(monkeypatch, replayed, tmp_path)
    at.radio[0].set_value("last 1 h").run()
    _check(at)
    newest = _newest(replayed, "traffic", "window_end")
    windows = _ends(replayed, "traffic", "window_end", newest - 3600 * S, newest)
    assert _metrics(at)["Windows"] == f"{len(windows):,}"
    assert at.session_state[time_range.KEPT] == time_range.TimeRange(3600.0)
    at.switch_page("pages/distinct_counts.py").run()
    _check(at)
    assert at.radio[0].value == "last 1 h"
    at.switch_page("pages/heavy_hitters.py").run()
    _check(at)
    assert at.radio[0].value == "last 1 h"
    at.selectbox[0].select("flows").run()
    _check(at)
    assert _metrics(at)["Items above δ"] == "3"
    at.switch_page("pages/resources.py").run()
    _check(at)
    assert at.radio[0].value == "last 1 h"
    assert _metrics(at)["Batches"] == f"{3600 // 10:,}"  # every batch of the hour written
    at.switch_page("pages/traffic.py").run()
    assert at.radio[0].value == "last 1 h"


def test_an_absolute_range_holds_across_pages(monkeypatch, replayed, tmp_path) -> None:
    at = _app(monkeypatch, replayed, tmp_path)
    at.radio[0].set_value("absolute").run()
    _check(at)
    # The inputs start from the range in force (the last 15 min of traffic), in whole minutes.
    newest = _newest(replayed, "traffic", "window_end")
    start = (newest - 900 * S).replace(second=0)
    assert [d.value for d in at.date_input] == [start.date(), newest.date()]
    assert at.time_input[0].value == start.time().replace(tzinfo=None)
    # 12:10 to 12:20 of the replayed capture
    at.time_input[0].set_value(dt.time(12, 10))
    at.time_input[1].set_value(dt.time(12, 20)).run()
    _check(at)
    begin, end = T0 + 600 * S, T0 + 1200 * S
    kept = at.session_state[time_range.KEPT]
    assert (kept.seconds, kept.start, kept.end) == (None, begin, end)
    windows = _ends(replayed, "traffic", "window_end", begin, end)
    assert _metrics(at)["Windows"] == f"{len(windows):,}"
    at.switch_page("pages/joins.py").run()
    _check(at)
    assert at.radio[0].value == "absolute"
    assert [t.value for t in at.time_input] == [dt.time(12, 10), dt.time(12, 20)]
    # a SYN every 6 s: 12:10:00 to 12:20:00 inclusive
    assert _metrics(at)["Handshakes"] == f"{600 // 6 + 1:,}"
    at.switch_page("pages/distinct_counts.py").run()
    _check(at)
    assert at.radio[0].value == "absolute"
    assert any("2024-05-01 12:10:00 – 12:20:00 UTC" in c.value for c in at.caption)
    # an end before the start: swapped, said so
    at.time_input[1].set_value(dt.time(12, 5)).run()
    _check(at)
    assert "swapped" in at.warning[0].value
    kept = at.session_state[time_range.KEPT]
    assert (kept.start, kept.end) == (T0 + 300 * S, T0 + 600 * S)
    # back to a relative range: the page's newest rows again
    at.radio[0].set_value("last 5 min").run()
    _check(at)
    assert at.session_state[time_range.KEPT] == time_range.TimeRange(300.0)
    assert not at.time_input


def test_a_range_without_rows_says_so(monkeypatch, replayed, tmp_path) -> None:
    at = _app(monkeypatch, replayed, tmp_path)
    at.radio[0].set_value("absolute").run()
    at.date_input[0].set_value(dt.date(2023, 1, 1))
    at.date_input[1].set_value(dt.date(2023, 1, 2)).run()
    _check(at)
    assert at.info[0].value == "No traffic window ends in this time range."
    at.switch_page("pages/pipeline_status.py").run()
    _check(at)
    assert "No pipeline statistics in this time range" in at.info[0].value
