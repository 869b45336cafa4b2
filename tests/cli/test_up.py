"""``netmon up`` end to end, live on ``lo``: the real broker, a real capture of UDP packets the test
sends to 127.0.0.1, the real Spark pipeline, the dashboard and the alert service as child processes.

Killing the pipeline makes ``netmon up`` start it again, and the traffic results then hold every
packet sent exactly once; ``/metrics`` and ``netmon status`` show the restart; SIGTERM stops every
process ``netmon up`` started. Also the quick refusals of ``netmon up`` and ``netmon status``.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from cli.main import cli
from netmon.broker import LocalBroker
from netmon.config import Config, load_config
from netmon.results import read_results, results_dir
from netmon.supervisor import read_state, state_file
from tests.conftest import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
#: packets per burst; one burst per second, half a second into it (far from window edges)
BURST = 25


def _tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment holds ``NETMON_TEST_TAG=<tag>`` (zombies excluded)."""
    found = []
    needle = f"NETMON_TEST_TAG={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def _write_config(path: Path, base: Config, data: Path, topic: str) -> None:
    path.write_text(
        f"""
[paths]
state_dir = "{base.paths.state_dir}"
data_dir = "{data}"
cache_dir = "{base.paths.cache_dir}"
[kafka]
port = {base.kafka.port}
controller_port = {base.kafka.controller_port}
packets_topic = "{topic}"
results_topic_prefix = "{topic}."
partitions = 1
[pipeline]
kinds = ["traffic"]
traffic_window_s = 1.0
watermark_s = 1.0
[spark]
master = "local[1]"
[dashboard]
port = {free_port()}
[metrics]
port = {free_port()}
[services]
restart_backoff_s = 1.0
stop_timeout_s = 45.0
"""
    )


class _Sender(threading.Thread):
    """One burst of ``BURST`` UDP datagrams to 127.0.0.1:port at every second + 0.5 s."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.bursts: list[int] = []  # the seconds (epoch) of the bursts sent
        self.stop = threading.Event()

    def run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            while not self.stop.is_set():
                now = time.time()
                target = int(now) + 0.5 if now % 1 < 0.4 else int(now) + 1.5
                time.sleep(max(0.0, target - time.time()))
                if self.stop.is_set():
                    return
                second = int(time.time())
                for i in range(BURST):
                    sock.sendto(i.to_bytes(4, "big"), ("127.0.0.1", self.port))
                self.bursts.append(second)


def _windows(cfg: Config, proto: int | None = 17) -> dict[int, list[int]]:
    """window start (epoch s) -> the packet counts of its rows (protocol ``proto``; None: all)."""
    table = read_results(results_dir(cfg, "traffic"))
    out: dict[int, list[int]] = collections.defaultdict(list)
    if table is None:
        return out
    for row in table.to_pylist():
        if proto is None or row["proto"] == proto:
            out[int(row["window_start"].timestamp())].append(row["packets"])
    return out


def _wait(predicate, timeout_s: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        assert proc.poll() is None, f"netmon up exited: {log.read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; netmon up said:\n{log.read_text()[-3000:]}")


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _service(cfg: Config, name: str) -> dict:
    state = read_state(state_file(cfg)) or {}
    return next((s for s in state.get("services") or [] if s["name"] == name), {})


@pytest.mark.slow
@pytest.mark.kafka
def test_up_on_lo_restarts_a_killed_pipeline_without_loss_or_duplicates(
    netmon_config: Config, kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    topic = f"test.up.{uuid.uuid4().hex[:8]}"
    toml = tmp_path / "netmon.toml"
    _write_config(toml, netmon_config, tmp_path / "data", topic)
    cfg = load_config(toml, env={})
    udp_port = free_port()
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env["NETMON_TEST_TAG"] = tag
    env["NETMON_CACHE_DIR"] = str(netmon_config.paths.cache_dir)
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "cli.main", "--config", str(toml), "up", "--iface", "lo"]
    argv += ["--filter", f"proto=udp and dst_port={udp_port}"]
    sender = _Sender(udp_port)
    with log.open("wb") as out:
        up = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        # the capture listens a few seconds after its start (imports, raw socket)
        _wait(lambda: _service(cfg, "capture-lo").get("state") == "running", 60, "the capture", up, log)
        time.sleep(8)
        sender.start()
        _wait(lambda: len(_windows(cfg)) >= 3, 240, "the first results", up, log)
        first = _service(cfg, "pipeline")["pid"]
        os.kill(first, signal.SIGKILL)
        _wait(
            lambda: (
                _service(cfg, "pipeline").get("restarts") == 1
                and _service(cfg, "pipeline").get("state") == "running"
            ),
            30,
            "the pipeline's restart",
            up,
            log,
        )
        restarted_at = time.time()
        _wait(lambda: max(_windows(cfg)) > restarted_at + 3, 240, "results after the restart", up, log)
        sender.stop.set()
        sender.join(5)
        closed = [s for s in sender.bursts if s <= sender.bursts[-1] - 2]  # the watermark passed them
        _wait(lambda: set(closed) <= set(_windows(cfg)), 60, "every closed window", up, log)
        windows = _windows(cfg)
        # no loss, no duplicates: one row per window, with every packet of its burst
        assert {s: windows[s] for s in closed} == {s: [BURST] for s in closed}
        assert set(windows) <= set(sender.bursts)  # nothing but the test's packets

        # the restarted pipeline counts from its own start: at least the packets sent after the
        # restart; its status file trails its commits by up to a poll (2 s), so scrape until then
        after = sum(BURST for s in sender.bursts if s > restarted_at + 1)
        url = f"http://127.0.0.1:{cfg.metrics.port}/metrics"
        samples = _scrape(url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            samples[("netmon_pipeline_packets_total", (("query", "traffic"),))] >= after
            and samples.get(("netmon_pipeline_lag_records", ())) == 0
            # the histogram samples the status file once a second: wait for its first batch
            and samples.get(("netmon_pipeline_batch_duration_seconds_count", ()), 0) >= 1
        ):
            time.sleep(1)
            samples = _scrape(url)
        assert samples[("netmon_pipeline_packets_total", (("query", "traffic"),))] >= after > 0
        assert samples[("netmon_pipeline_lag_records", ())] == 0  # every record read, nothing new
        assert samples[("netmon_service_restarts_total", (("service", "pipeline"),))] == 1
        assert samples[("netmon_service_up", (("service", "pipeline"),))] == 1
        assert samples[("netmon_service_up", (("service", "capture-lo"),))] == 1
        assert samples[("netmon_service_up", (("service", "dashboard"),))] == 1
        assert samples[("netmon_service_up", (("service", "alerts"),))] == 1
        assert samples[("netmon_pipeline_batch_duration_seconds_count", ())] >= 1

        status = subprocess.run(
            [sys.executable, "-m", "cli.main", "--config", str(toml), "status"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        lines = {line.split()[0]: line.split() for line in status.stdout.splitlines() if line}
        assert lines["pipeline"][1:2] == ["running"]
        assert lines["pipeline"][4] == "1"  # restarts
        assert lines["capture-lo"][1] == "running"
        assert "pipeline: lag 0 records" in status.stdout
    finally:
        sender.stop.set()
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        code = up.wait(120)
    said = log.read_text()
    assert code == 0, said[-3000:]
    # sources first, pipeline last
    assert (
        said.index("capture-lo: stopped") < said.index("dashboard: stopped") < said.index("pipeline: stopped")
    )
    assert _tagged_processes(tag) == []
    assert kafka_broker.pid() is not None  # reused, so left running


@pytest.mark.slow
@pytest.mark.kafka
def test_up_replay_puts_every_packet_of_the_file_in_the_results(
    netmon_config: Config, kafka_broker: object, tmp_path: Path
) -> None:
    from ingest import read_records

    sample = REPO_ROOT / "samples" / "mixed-small.pcap"
    expected = sum(batch.num_rows for batch in read_records(sample))
    toml = tmp_path / "netmon.toml"
    _write_config(toml, netmon_config, tmp_path / "data", f"test.up.{uuid.uuid4().hex[:8]}")
    cfg = load_config(toml, env={})
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env["NETMON_TEST_TAG"] = tag
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "cli.main", "--config", str(toml), "up", "--replay", str(sample)]
    with log.open("wb") as out:
        up = subprocess.Popen([*argv, "--no-dashboard", "--no-alerts"], stdout=out, stderr=out, env=env)
    try:
        _wait(lambda: _service(cfg, "replay").get("state") == "done", 120, "the replay", up, log)
        _wait(
            lambda: sum(sum(v) for v in _windows(cfg, proto=None).values()) == expected,
            240,
            "results",
            up,
            log,
        )
        # the broker is the session's (reused, not supervised); no dashboard, no alerts
        names = {s["name"]: s["state"] for s in (read_state(state_file(cfg)) or {})["services"]}
        assert names == {"broker": "reused", "pipeline": "running", "replay": "done"}
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        code = up.wait(120)
    said = log.read_text()
    assert code == 0, said[-3000:]
    assert "replay: done" in said
    assert _tagged_processes(tag) == []
    status = subprocess.run([*argv[:5], "status"], capture_output=True, text=True, env=env, timeout=60)
    assert status.returncode == 3
    assert status.stdout.splitlines()[0] == "netmon up: not running"
    assert [line.split()[:2] for line in status.stdout.splitlines()[1:5]] == [
        ["SERVICE", "STATE"],
        ["broker", "reused"],
        ["pipeline", "stopped"],
        ["replay", "done"],
    ]


def test_up_needs_a_source_and_status_says_when_nothing_runs(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    result = runner.invoke(cli, ["up"], env=env)
    assert result.exit_code == 2
    assert result.output.strip() == "netmon up: error: give --iface IF (one or more) or --replay FILE"
    result = runner.invoke(
        cli, ["status"], env={**env, "NETMON_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    )
    assert result.exit_code == 3
    assert (
        result.output.splitlines()[0] == f"netmon up: not running (no state in {tmp_path / 'state' / 'up'})"
    )
    assert result.output.splitlines()[1] == "pipeline: no status yet; lag unknown"
