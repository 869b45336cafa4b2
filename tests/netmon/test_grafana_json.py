"""The example Grafana dashboard (``docs/grafana/netmon.json``) asks only for metrics netmon serves.

Every metric name in the panels' PromQL is looked up among the samples ``/metrics`` exposes: a
``NetmonCollector`` registered in a registry as ``netmon.metrics.MetricsServer`` does, over status
files that make every family appear (the pipeline's status, the supervisor's state, a capture's
status, ``sys`` rows folded into the latency histogram, alert counts, a lag). So a metric renamed
in ``netmon/metrics.py`` (or a label) fails here until the dashboard follows. The label matchers,
``by (...)`` groupings and legend ``{{label}}``s must name labels those metrics carry, and a
matcher's value one they take.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from netmon.config import Config
from netmon.metrics import NetmonCollector
from netmon.results import results_dir, status_file
from netmon.supervisor import state_file
from tests.conftest import REPO_ROOT

DASHBOARD = REPO_ROOT / "docs" / "grafana" / "netmon.json"
_SELECTOR = re.compile(r"\b(netmon_[a-z0-9_]+)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r'(\w+)\s*(?:=~|!=|!~|=)\s*"([^"]*)"')
_BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def _targets() -> list[tuple[str, str, str]]:
    """``(panel title, expr, legendFormat)`` of every target of every panel."""
    board = json.loads(DASHBOARD.read_text())
    return [
        (p["title"], t["expr"], t.get("legendFormat", ""))
        for p in board["panels"]
        for t in p.get("targets", [])
    ]


@pytest.fixture
def exposed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, set[str]]]:
    """Every sample name ``/metrics`` serves -> its label names -> the values seen."""
    from pipeline.batch_sink import write_table
    from pipeline.sys_stats import sys_table

    cfg = Config().replace(paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"})
    kinds = {
        kind: {
            "input_rows": 40,
            "packets": 1234,
            "malformed": 2,
            "future": 1,
            "late_dropped": 5,
            "batches": 7,
            "restarts": 1,
            "active": True,
            "state_rows": 11,
            "last_batch_ms": 250,
        }
        for kind in ("traffic", "topk", "distinct")
    }
    status_file(cfg).parent.mkdir(parents=True)
    status_file(cfg).write_text(json.dumps({"updated": time.time(), "queries": kinds}))
    capture = {
        "iface": "eth0",
        **dict.fromkeys(("packets", "produced", "acknowledged", "failed", "filtered_out", "kernel_drops"), 3),
    }
    status_file(cfg).with_name("capture-eth0.json").write_text(json.dumps(capture))
    state_file(cfg).parent.mkdir(parents=True)
    service = {"name": "pipeline", "state": "running", "pid": 1, "started": time.time() - 60, "restarts": 2}
    state_file(cfg).write_text(json.dumps({"supervisor": {"pid": 1}, "services": [service]}))

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)

    def sys_rows(query: str, batch: int) -> None:
        row = {
            "query": query,
            "batch_id": batch,
            "batch_time": now + dt.timedelta(seconds=batch),
            "max_event_time": now,
            "lag_s": 1.5,
            "backlog_s": 0.5,
            "batch_ms": 300,
        }
        write_table(sys_table([row]), results_dir(cfg, "sys") / query, batch)

    counts = {"firing": 1, "resolved": 2, "pending": 1, "delivered": 3, "dead": 1}
    collector = NetmonCollector(cfg, alert_counts=lambda: counts)
    monkeypatch.setattr(collector, "lag", lambda: 42)  # asked of Kafka otherwise
    for query in ("packets", "joins"):
        sys_rows(query, 0)
    collector.observe()  # the first call sets the marks, and the batch count
    kinds["traffic"]["batches"] = 8
    status_file(cfg).write_text(json.dumps({"updated": time.time(), "queries": kinds}))
    for query in ("packets", "joins"):
        sys_rows(query, 1)
    collector.observe()  # a batch ran: folded into both histograms
    registry = CollectorRegistry(auto_describe=False)  # as netmon.metrics.MetricsServer builds it
    registry.register(collector)
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for family in registry.collect():
        for sample in family.samples:
            labels = out[sample.name]
            for name, value in sample.labels.items():
                labels[name].add(value)
    return {name: dict(labels) for name, labels in out.items()}


def test_the_fixture_exposes_every_family_netmon_serves(exposed: dict[str, dict[str, set[str]]]) -> None:
    """Were a family missing from the fixture, a dashboard metric could be missed as renamed."""
    assert {
        "netmon_service_up",
        "netmon_service_restarts_total",
        "netmon_pipeline_lag_records",
        "netmon_pipeline_lag_seconds",
        "netmon_pipeline_backlog_seconds",
        "netmon_pipeline_batch_duration_seconds_bucket",
        "netmon_pipeline_latency_seconds_bucket",
        "netmon_capture_kernel_drops_total",
        "netmon_alerts",
        "netmon_alert_deliveries",
    } <= set(exposed)
    assert exposed["netmon_pipeline_latency_seconds_bucket"]["query"] == {"packets", "joins"}


def test_every_metric_of_the_dashboard_is_served(exposed: dict[str, dict[str, set[str]]]) -> None:
    targets = _targets()
    assert len(targets) >= 12
    used: set[str] = set()
    wrong: list[str] = []
    for title, expr, legend in targets:
        selectors = _SELECTOR.findall(expr)
        assert selectors, f"{title}: no netmon metric in {expr!r}"
        labels: set[str] = set()
        for name, braces in selectors:
            used.add(name)
            if name not in exposed:
                wrong.append(f"{title}: {name} is not served")
                continue
            labels |= set(exposed[name])
            for label, value in _MATCHER.findall(braces or ""):
                if value not in exposed[name].get(label, set()):
                    wrong.append(f"{title}: {name} has no {label}={value!r}")
        for group in _BY.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                if label not in labels:
                    wrong.append(f"{title}: by ({label}): not a label of its metrics")
        for label in _LEGEND.findall(legend):
            if label not in labels:
                wrong.append(f"{title}: legend {{{{{label}}}}}: not a label of its metrics")
    assert not wrong, "\n".join(wrong)
    # the panels: rates, lag, batch time, latency, late/malformed, alerts, restarts, drops
    for family in (
        "netmon_capture_produced_total",
        "netmon_pipeline_packets_total",
        "netmon_pipeline_lag_records",
        "netmon_pipeline_lag_seconds",
        "netmon_pipeline_batch_duration_seconds_bucket",
        "netmon_pipeline_latency_seconds_bucket",
        "netmon_query_late_rows_total",
        "netmon_pipeline_malformed_total",
        "netmon_alerts",
        "netmon_alert_deliveries",
        "netmon_service_restarts_total",
        "netmon_capture_kernel_drops_total",
    ):
        assert family in used, family


def test_the_dashboard_is_importable_json() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "netmon"
    # every panel reads the data source chosen on import
    assert {p["datasource"]["uid"] for p in board["panels"]} == {"${datasource}"}
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
