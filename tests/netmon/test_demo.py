"""``netmon demo --until-done`` and the dashboard over its results: real broker, real Spark, AppTest."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.demo import demo_config
from cli.main import cli
from netmon.results import read_results, results_dir
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames
from tests.pipeline.oracle import traffic_per_window

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.fixture(scope="module")
def demo_run(spark, kafka_broker, netmon_config):
    """Run the demo once through the CLI, against the session's broker and Spark session."""
    cfg = netmon_config
    env = {
        "NETMON_STATE_DIR": str(cfg.paths.state_dir),
        "NETMON_DATA_DIR": str(cfg.paths.data_dir),
        "NETMON_CONFIG": "",
        "NETMON_BOOTSTRAP_SERVERS": cfg.kafka.bootstrap,
    }
    result = CliRunner().invoke(cli, ["demo", "--until-done", "--timeout", "480"], env=env)
    return cfg, result


def test_demo_until_done_reflects_every_packet(demo_run) -> None:
    cfg, result = demo_run
    assert result.exit_code == 0, result.output
    expected = traffic_per_window(REPO_ROOT / "samples" / "mixed-small.pcap")
    packets = sum(p for p, _ in expected.values())
    assert f"{packets:,} packets replayed, {packets:,} in results" in result.output
    table = read_results(results_dir(demo_config(cfg), "traffic"))
    assert table is not None and sum(table.column("packets").to_pylist()) == packets
    assert f"{len({w for w, _ in expected}):,} windows" in result.output


def test_dashboard_renders_demo_results(demo_run, monkeypatch) -> None:
    from streamlit.testing.v1 import AppTest

    cfg, result = demo_run
    assert result.exit_code == 0
    monkeypatch.setenv("NETMON_DATA_DIR", str(demo_config(cfg).paths.data_dir))
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    import streamlit as st

    st.cache_resource.clear()  # dashboard.data.config() is cached per process: an earlier app test's
    st.cache_data.clear()
    at = AppTest.from_file(str(REPO_ROOT / "dashboard" / "app.py"), default_timeout=60).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    expected = traffic_per_window(REPO_ROOT / "samples" / "mixed-small.pcap")
    assert metrics["Packets"] == f"{sum(p for p, _ in expected.values()):,}"
    assert len(chart_frames.charts(at)) == 2
    at.switch_page("pages/pipeline_status.py").run()
    assert not at.exception


def test_the_demo_alert_service_runs_in_a_child_at_lower_priority_and_stops(
    kafka_broker, netmon_config, tmp_path
) -> None:
    import multiprocessing
    import os
    import time

    from alerts.outbox import outbox_path
    from cli.demo import _start_alerts

    cfg = demo_config(
        netmon_config.replace(paths={"state_dir": tmp_path / "state", "data_dir": tmp_path / "data"})
    )
    stop = _start_alerts(cfg)
    try:
        (child,) = [c for c in multiprocessing.active_children() if c.name == "netmon-demo-alerts"]
        deadline = time.monotonic() + 60
        while not outbox_path(cfg.paths.state_dir).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert outbox_path(cfg.paths.state_dir).exists()  # the service opened its outbox: it runs
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == os.getpriority(os.PRIO_PROCESS, 0) + 10
    finally:
        stop()
    assert not child.is_alive() and child.exitcode == 0  # stopped by its event, not terminated
