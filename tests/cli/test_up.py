"""``netmon up`` end to end, live on ``lo``: the real broker, a real capture of UDP packets the test
sends to 127.0.0.1, the real Spark pipeline, the dashboard and the alert service as child processes.

Killing the pipeline makes ``netmon up`` start it again, and the traffic results then hold every
packet sent exactly once; ``/metrics`` and ``netmon status`` show the restart; SIGTERM stops every
process ``netmon up`` started. Also the quick refusals of ``netmon up`` and ``netmon status``.
"""

from __future__ import annotations

import collections
import contextlib
import json
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


def _descendants(root: int) -> dict[int, str]:
    """Every live (not zombie) process below ``root`` in the process tree, with its command line."""
    parents: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(fields[1])].append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(parents[root])
    while todo:
        pid = todo.pop()
        try:
            found[pid] = (Path(f"/proc/{pid}") / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        todo += parents[pid]
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _write_config(
    path: Path, base: Config, data: Path, topic: str, kinds: tuple[str, ...] = ("traffic",)
) -> None:
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
kinds = {list(kinds)!r}
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
def test_up_replay_puts_every_packet_in_the_results_and_a_sigkill_leaves_no_process(
    netmon_config: Config, kafka_broker: object, tmp_path: Path
) -> None:
    """Every packet of the replayed file in the results; then ``kill -9`` of ``netmon up`` itself:
    every process below it — the services, the pipeline's Spark JVM and Python workers, the
    dashboard's Streamlit — is gone within the stop timeout, with no signal from anyone else."""
    from ingest import read_records

    sample = REPO_ROOT / "samples" / "mixed-small.pcap"
    expected = sum(batch.num_rows for batch in read_records(sample))
    toml = tmp_path / "netmon.toml"
    topic = f"test.up.{uuid.uuid4().hex[:8]}"
    _write_config(toml, netmon_config, tmp_path / "data", topic, kinds=("traffic", "sys"))
    cfg = load_config(toml, env={})
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env["NETMON_TEST_TAG"] = tag
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "cli.main", "--config", str(toml), "up", "--replay", str(sample)]
    with log.open("wb") as out:
        up = subprocess.Popen([*argv, "--no-alerts"], stdout=out, stderr=out, env=env)
    try:
        _wait(lambda: _service(cfg, "replay").get("state") == "done", 120, "the replay", up, log)
        _wait(
            lambda: sum(sum(v) for v in _windows(cfg, proto=None).values()) == expected,
            240,
            "results",
            up,
            log,
        )
        # the broker is the session's (reused, not supervised); no alerts
        names = {s["name"]: s["state"] for s in (read_state(state_file(cfg)) or {})["services"]}
        assert names == {"broker": "reused", "pipeline": "running", "dashboard": "running", "replay": "done"}
        _wait(
            lambda: any("streamlit" in c for c in _descendants(up.pid).values()),
            60,
            "Streamlit",
            up,
            log,
        )
        # /metrics: the newest sys row's lag, and every batch's latency (lag + duration)
        url = f"http://127.0.0.1:{cfg.metrics.port}/metrics"

        def latency_shown() -> bool:
            table = read_results(results_dir(cfg, "sys") / "packets")
            rows = sorted(table.to_pylist() if table else [], key=lambda r: r["batch_id"])
            latencies = [r["lag_s"] + r["batch_ms"] / 1000 for r in rows if r["lag_s"] is not None]
            m, q = _scrape(url), (("query", "packets"),)
            return bool(
                latencies
                and m.get(("netmon_pipeline_latency_seconds_count", q)) == len(latencies)
                and m.get(("netmon_pipeline_latency_seconds_sum", q)) == pytest.approx(sum(latencies))
                and m.get(("netmon_pipeline_lag_seconds", q)) == rows[-1]["lag_s"]
            )

        _wait(latency_shown, 60, "the sys rows' lag and latency on /metrics", up, log)

        tree = _descendants(up.pid)
        commands = list(tree.values())
        assert any("java" in c.split(" ")[0] for c in commands), commands  # Spark's JVM
        assert any("streamlit" in c for c in commands), commands
        pipeline_log = Path(cfg.paths.state_dir) / "logs" / "pipeline.log"
        logged = pipeline_log.stat().st_size
        os.kill(up.pid, signal.SIGKILL)
        assert up.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + cfg.services.stop_timeout_s + 60
        while time.monotonic() < deadline and (any(_alive(pid) for pid in tree) or _tagged_processes(tag)):
            time.sleep(0.5)
        left = {pid: tree.get(pid, "?") for pid in [*tree, *_tagged_processes(tag)] if _alive(pid)}
        assert left == {}, f"processes outlived netmon up killed by SIGKILL: {left}"
        # the pipeline stopped as on a clean stop, once (one SIGTERM, however many SIGHUPs)
        said = pipeline_log.read_bytes()[logged:].decode(errors="replace")
        assert "stopping pipeline (after the running batch" in said and "stopping now" not in said, said
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            up.wait(120)
        for pid in _tagged_processes(tag):  # what a failed run left
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    status = subprocess.run([*argv[:5], "status"], capture_output=True, text=True, env=env, timeout=60)
    assert status.returncode == 3
    assert status.stdout.splitlines()[0] == "netmon up: not running"


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


#: a process a killed `netmon up` left: holds the pipeline's lock as a pipeline does, ignores
#: SIGTERM, and has a child of its own
LEFTOVER = """
import fcntl, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
lock = open(sys.argv[1], "a+")
fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
lock.seek(0); lock.truncate(); lock.write(f"{os.getpid()}\\n"); lock.flush()
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""


def test_up_stops_what_a_killed_up_left_before_starting_anything(tmp_path: Path) -> None:
    """A previous ``netmon up`` (dead: its lock is free) left a "pipeline" holding the data
    directory's lock, and its child. The next ``netmon up`` stops both — by the tag they carry —
    before it chooses its services, so it starts a pipeline instead of reusing the leftover.
    No Kafka: the services it starts fail and are restarted until SIGTERM."""
    state, data = tmp_path / "state", tmp_path / "data"
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        f"""
[paths]
state_dir = "{state}"
data_dir = "{data}"
[kafka]
bootstrap_servers = "127.0.0.1:{free_port()}"
[metrics]
port = {free_port()}
[services]
stop_timeout_s = 1.0
"""
    )
    cfg = load_config(toml, env={})
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env["NETMON_TEST_TAG"] = tag
    data.mkdir()
    leftover = subprocess.Popen(
        [sys.executable, "-c", LEFTOVER, str(data / "pipeline.lock")],
        env={**env, "NETMON_UP_TAG": "1-dead"},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    up: subprocess.Popen[bytes] | None = None
    try:
        assert leftover.stdout is not None and leftover.stdout.readline() == b"ready\n"
        kid = next(iter(_descendants(leftover.pid)))
        state_file(cfg).parent.mkdir(parents=True)
        state_file(cfg).write_text(
            json.dumps(
                {
                    "supervisor": {"pid": 1, "started": 0, "updated": 0, "tag": "1-dead"},
                    "services": [
                        {"name": "pipeline", "command": "", "state": "running", "pid": leftover.pid}
                    ],
                }
            )
        )
        log = tmp_path / "up.log"
        argv = [sys.executable, "-m", "cli.main", "--config", str(toml), "up", "--replay"]
        with log.open("wb") as out:
            up = subprocess.Popen(
                [*argv, str(REPO_ROOT / "samples" / "mixed-small.pcap"), "--no-dashboard", "--no-alerts"],
                stdout=out,
                stderr=out,
                env=env,
            )
        line = (
            "stopped what the netmon up killed before (pid 1) left running: "
            f"pipeline (pid {leftover.pid}) and 1 other process"
        )
        _wait(lambda: line in log.read_text(), 60, "the leftovers stopped", up, log)
        assert leftover.wait(5) == -signal.SIGKILL  # it ignored SIGTERM
        assert not _alive(kid)
        _wait(lambda: bool(_service(cfg, "pipeline").get("pid")), 30, "a pipeline of its own", up, log)
        assert _service(cfg, "pipeline")["state"] != "reused"
    finally:
        if up is not None and up.poll() is None:
            up.send_signal(signal.SIGTERM)
            up.wait(60)
        if leftover.poll() is None:
            leftover.kill()
        for pid in _tagged_processes(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert up is not None and up.returncode == 0
    assert _tagged_processes(tag) == []
