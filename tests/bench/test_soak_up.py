"""``bench.soak_up`` (``netmon bench soak-up``): the run's settings and configuration, the verdict
on render-time series, the report, the command line, and a one-minute soak through ``netmon up``.

The soak itself (24 h of event time in 30 minutes) is run by hand and recorded in
``docs/performance.md``; here two hours of event time at ``--speed 120`` (one minute), the traffic
kind only, retention one hour of event time, and one browser measure at least.
"""

from __future__ import annotations

import importlib.util
import math
import tomllib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import bench.soak_up
from bench.dashboard_render import PageRender, browser
from bench.soak_up import (
    SoakUpSettings,
    format_report,
    metrics_figures,
    render_sample,
    soak_up,
    up_argv,
    write_config,
)
from cli.main import cli
from netmon.config import load_config


def test_event_time_is_compressed_by_speed() -> None:
    s = SoakUpSettings(event_hours=24, speed=48, pps=1000, loop_s=3600)
    assert s.minutes == 30.0
    assert s.loops == 24 and s.loops * s.loop_s == 24 * 3600
    # pps / speed packets per second of event time: the replay at --speed 48 sends pps per second
    assert s.capture_packets == round(1000 / 48 * 3600)
    odd = SoakUpSettings(event_hours=2.5, speed=100, loop_s=3600)
    assert odd.loops == 3 and math.isclose(odd.minutes, 1.5)  # 3 loops of an hour cover 2.5 h
    assert SoakUpSettings(event_hours=2.5, loop_s=1000).loops == 9  # covers 2.5 h: 9 x 1000 s
    for bad in ({"speed": 0.0}, {"event_hours": -1.0}, {"pps": 0}, {"browser_every_s": -1.0}):
        with pytest.raises(ValueError):
            SoakUpSettings(**bad)
    with pytest.raises(ValueError, match="no packet per loop"):
        SoakUpSettings(pps=1, speed=10_000, loop_s=60)


def test_the_command_line_is_netmon_up_with_the_time_base() -> None:
    s = SoakUpSettings(event_hours=4, speed=120, loop_s=1200)
    argv = up_argv(Path("/r/netmon.toml"), Path("/r/x.pcap"), s, "2026-01-01T00:00:00Z")
    assert argv[1:5] == ["-m", "cli.main", "--config", "/r/netmon.toml"]
    assert argv[5:] == [
        "up",
        "--replay",
        "/r/x.pcap",
        "--speed",
        "120",
        "--loop",
        "12",
        "--start-at",
        "2026-01-01T00:00:00Z",
    ]


def test_the_run_config_is_its_own(tmp_path: Path) -> None:
    s = SoakUpSettings(
        retention_hours=6, compact_after_s=45, interval_s=20, kafka_retention_s=900, kinds=("traffic",)
    )
    path = write_config(s, tmp_path, tmp_path / "cache")
    raw = tomllib.loads(path.read_text())
    cfg = load_config(path, env={})
    assert cfg.paths.state_dir == tmp_path / "state" and cfg.paths.data_dir == tmp_path / "data"
    assert cfg.paths.cache_dir == tmp_path / "cache"
    ports = [cfg.kafka.port, cfg.kafka.controller_port, cfg.dashboard.port, cfg.metrics.port]
    assert len(set(ports)) == 4 and all(p > 1024 for p in ports)
    assert raw["kafka"]["port"] == cfg.kafka.port and cfg.dashboard.host == cfg.metrics.host == "127.0.0.1"
    assert cfg.retention.results_s == 6 * 3600
    assert cfg.retention.compact_after_s == 45 and cfg.retention.interval_s == 20
    assert cfg.retention.kafka_retention_ms == 900_000
    assert cfg.pipeline.kinds == ("traffic",)
    # without kinds, the configuration's default
    default = load_config(write_config(SoakUpSettings(), tmp_path, tmp_path / "cache"), env={})
    assert default.pipeline.kinds == load_config(None, env={}).pipeline.kinds


def _renders(t_s: list[float], seconds: list[float]) -> list[dict[str, Any]]:
    tabs = [[PageRender("Traffic", "u", [v])] for v in seconds]
    switches = [[PageRender("Traffic", "u", [v / 10])] for v in seconds]
    return [render_sample(t, a, b) for t, a, b in zip(t_s, tabs, switches, strict=True)]


def test_render_series_get_the_plateau_rule_with_their_floor() -> None:
    from bench.soak import summarize

    times = [60.0 + 300.0 * i for i in range(7)]
    # noisy but flat: 2.0 s +- 0.3 s
    flat = _renders(times, [2.0 + (0.3 if i % 2 else -0.3) for i in range(7)])
    assert flat[0] == {"t": 60.0, "tab Traffic": 1.7, "switch Traffic": 0.17}
    series = summarize(flat, floors={"seconds": 0.5})
    assert series["tab Traffic"]["verdict"] == "plateau" and series["tab Traffic"]["unit"] == "seconds"
    assert series["tab Traffic"]["start"] == 1.7 and series["tab Traffic"]["end"] == 1.7
    # one second more every five minutes: 2 s per 10 minutes, above the floor
    growing = summarize(_renders(times, [2.0 + i for i in range(7)]), floors={"seconds": 0.5})
    assert growing["tab Traffic"]["verdict"] == "growing"
    assert growing["tab Traffic"]["growth_per_min"] == pytest.approx(0.2)
    # the page switch grows a tenth of that, 0.2 s per 10 minutes: under the floor, flat
    assert growing["switch Traffic"]["verdict"] == "plateau"
    assert (
        summarize(_renders(times, [2.0 + i for i in range(7)]), floors={"seconds": 0.1})["switch Traffic"][
            "verdict"
        ]
        == "growing"
    )
    assert growing["tab Traffic"]["mid"] == 5.0  # the sample nearest the middle (t = 960 s)


def test_metrics_figures_read_the_lag_and_the_packets() -> None:
    text = (
        "# TYPE netmon_pipeline_lag_records gauge\nnetmon_pipeline_lag_records 40.0\n"
        "# TYPE netmon_pipeline_packets counter\n"
        'netmon_pipeline_packets_total{query="shared"} 1000.0\n'
        'netmon_pipeline_packets_total{query="other"} 500.0\n'
    )
    # every query reading the packets topic counts them: the largest count is the pipeline's
    assert metrics_figures(text) == {"lag": 40.0, "packets": 1000.0}
    assert metrics_figures("") == {"lag": None, "packets": None}


def _result(left: list[str]) -> dict[str, Any]:
    s = SoakUpSettings(event_hours=2, speed=120)
    samples = [
        {"t": 10.0 * i, "data total": 5_000_000 + i, "rss driver": 300_000_000, "lag": 3, "load 1m": 1.5}
        for i in range(12)
    ]
    from bench.soak import summarize

    renders = _renders([30.0, 90.0], [3.0, 3.2])
    return {
        "settings": {**vars(s), "kinds": None},
        "retention": s.retention(),
        "minutes": s.minutes,
        "loops": s.loops,
        "cpus": 2,
        "kinds": ["traffic"],
        "command": "--config c.toml up --replay x.pcap --speed 120 --loop 2 --start-at 2026-01-01T00:00:00Z",
        "start_at": "2026-01-01T00:00:00Z",
        "samples": samples,
        "render_samples": renders,
        "browser_errors": [],
        "page_errors": [],
        "elapsed_s": 110.0,
        "replay_done_s": 100.0,
        "load_1m": {"min": 1.5, "mean": 1.5, "max": 1.5},
        "restarts": {"pipeline": 0},
        "traffic_window_end": {"oldest": "2026-01-01T01:00:00+00:00", "newest": "2026-01-01T02:00:00+00:00"},
        "up_exit": 0,
        "stop_s": 4.0,
        "left_after_stop": left,
        "lag_floor": 40.0,
        "series": summarize(samples, lag_floor=40.0),
        "render_series": summarize(renders),
    }


def test_the_report_has_every_series_and_the_render_times() -> None:
    lines = format_report(_result([]))
    text = "\n".join(lines)
    assert "command: netmon --config c.toml up --replay x.pcap --speed 120" in text
    assert "2 h of event time at --speed 120 (1 min)" in text
    row = next(line for line in lines if line.startswith("data total"))
    assert row.split()[-1] == "plateau"
    assert next(line for line in lines if line.startswith("tab Traffic ")).split()[2:] == ["3.00", "3.20"]
    assert "load 1m" not in text.split("series", 1)[1].split("render")[0]
    assert "processes left: none" in text


def test_the_command_passes_the_options_and_fails_on_a_leftover(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[SoakUpSettings] = []

    def fake(settings: SoakUpSettings, **kwargs: Any) -> dict[str, Any]:
        seen.append(settings)
        return _result(left)

    monkeypatch.setattr(bench.soak_up, "soak_up", fake)
    left: list[str] = []
    args = [
        "bench",
        "soak-up",
        "--event-hours",
        "2",
        "--speed",
        "120",
        "--browser-every-s",
        "0",
        "--kind",
        "traffic",
    ]
    result = CliRunner().invoke(cli, [*args, "-q"])
    assert result.exit_code == 0, result.output
    assert seen[-1].event_hours == 2 and seen[-1].speed == 120 and seen[-1].browser_every_s == 0
    assert seen[-1].kinds == ("traffic",) and seen[-1].retention_hours == 6
    left = ["4242 java"]
    result = CliRunner().invoke(cli, [*args, "-q"])
    assert result.exit_code == 1 and "left after the stop: ['4242 java']" in result.output
    result = CliRunner().invoke(cli, ["bench", "soak-up", "--pps", "1", "--speed", "10000", "--loop-s", "60"])
    assert result.exit_code == 2 and "no packet per loop" in result.output


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("playwright") is None or browser() is None,
    reason="needs Playwright and Chromium (apt-get install chromium)",
)
def test_a_one_minute_soak_through_netmon_up(tmp_path: Path) -> None:
    settings = SoakUpSettings(
        event_hours=2.0,
        speed=120.0,
        pps=300,
        loop_s=1200.0,
        sample_s=5.0,
        browser_every_s=3600.0,
        retention_hours=0.5,
        compact_after_s=10.0,
        interval_s=10.0,
        kafka_retention_s=60.0,
        segment_s=20.0,
        kinds=("traffic",),
    )
    seen: list[dict[str, Any]] = []
    result = soak_up(settings, progress=seen.append, work=tmp_path / "soak")
    samples = result["samples"]
    assert samples == seen and len(samples) >= 8
    assert result["replay_done_s"] is not None and result["up_exit"] == 0
    # nothing netmon up started is left (each of its processes carries its tag)
    assert result["left_after_stop"] == []
    # the services were measured: the pipeline's driver and its Spark JVM, the broker, the dashboard
    for key in ("rss driver", "rss spark jvm", "rss broker", "rss dashboard", "rss netmon up"):
        assert any((s.get(key) or 0) > 0 for s in samples), key
    # the dashboard's figure holds the Streamlit server netmon dashboard runs (pandas, Plotly
    # imported: far above the launcher's ~25 MB)
    assert samples[-1]["rss dashboard"] > 100e6
    assert samples[-1]["results/traffic"] > 0 and samples[-1]["packets decoded"] > 0
    assert all(s["restarts"] == 0 for s in samples)
    # event time was compressed and rebased: the replay began two hours before the run, and the
    # results left are the last half hour (+ a retention pass, 10 s = 20 min of event time, + slack)
    start = datetime.fromisoformat(result["start_at"].replace("Z", "+00:00"))
    oldest = datetime.fromisoformat(result["traffic_window_end"]["oldest"])
    newest = datetime.fromisoformat(result["traffic_window_end"]["newest"])
    assert newest - start > timedelta(hours=1.5)
    assert newest - oldest <= timedelta(minutes=30 + 20 + 10)
    assert oldest - start > timedelta(minutes=30)  # the first hour's results were deleted
    assert newest <= datetime.now(newest.tzinfo)  # never in the future
    # a render measure in Chromium against netmon up's dashboard: every page, both ways
    renders = result["render_samples"]
    assert renders and renders[-1]["tab Traffic"] > 0 and renders[-1]["switch Traffic"] > 0
    assert {"tab Pipeline", "switch Pipeline"} <= set(renders[-1])
    assert result["render_series"]["tab Traffic"]["unit"] == "seconds"
    assert result["series"]["data total"]["verdict"] in ("plateau", "growing", "too short")
    report = "\n".join(format_report(result))
    assert "--speed 120 --loop 6 --start-at" in report and "processes left: none" in report
