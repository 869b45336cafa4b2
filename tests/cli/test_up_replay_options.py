"""``netmon up --replay``'s pacing and time-base options reach the ``netmon replay`` it runs.

``--speed``, ``--pps``, ``--loop``, ``--start-at`` and ``--rebase-time`` are checked before any
service starts (exit 2, one line), then handed to :func:`netmon.supervisor.monitor_services` as the
replay's arguments, which puts them on the replay's command line; that command line is parsed by
``netmon replay``'s own options here, so an argument it would refuse fails the test.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import netmon.supervisor
from cli.commands.replay import command as replay_command
from cli.main import cli
from netmon.config import load_config


class _Stop(Exception):
    """Raised by the stand-in of monitor_services: nothing is started."""


def _env(tmp_path: Path) -> dict[str, str]:
    return {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}


def _replay_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *options: str) -> tuple[str, ...]:
    """The replay command line ``netmon up --replay FILE OPTIONS`` would run (nothing started)."""
    capture = tmp_path / "x.pcap"
    capture.write_bytes(b"")
    seen: dict[str, Any] = {}
    real = netmon.supervisor.monitor_services

    def recording(cfg: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        services, _ = real(cfg, **kwargs, run_id="1-abcdef")
        seen["services"] = services
        raise _Stop

    monkeypatch.setattr(netmon.supervisor, "monitor_services", recording)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # up's handlers stay out of pytest's process
    result = CliRunner().invoke(cli, ["up", "--replay", str(capture), *options], env=_env(tmp_path))
    assert isinstance(result.exception, _Stop), result.output
    assert seen["replay"] == str(capture)
    (replay,) = [s for s in seen["services"] if s.name == "replay"]
    assert replay.once
    head = ("replay", str(capture), "--quiet", "--resume", "1-abcdef")
    assert replay.argv[3 : 3 + len(head)] == head
    return tuple(replay.argv[3 + len(head) :])


def test_speed_loop_and_start_at_reach_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _replay_argv(
        tmp_path, monkeypatch, "--speed", "48", "--loop", "24", "--start-at", "2026-11-26T17:00:00Z"
    )
    assert args == ("--speed", "48.0", "--loop", "24", "--start-at", "2026-11-26T17:00:00Z")
    # netmon replay takes them as they are
    ctx = replay_command.make_context("replay", [str(tmp_path / "x.pcap"), *args])
    assert ctx.params["speed"] == 48.0 and ctx.params["loop"] == 24
    assert ctx.params["start_at"] == "2026-11-26T17:00:00Z" and not ctx.params["rebase_time"]


def test_pps_rebase_time_and_filter_reach_the_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _replay_argv(tmp_path, monkeypatch, "--pps", "500", "--rebase-time", "--filter", "proto=udp")
    assert args == ("--filter", "proto=udp", "--pps", "500.0", "--rebase-time")
    ctx = replay_command.make_context("replay", [str(tmp_path / "x.pcap"), *args])
    assert ctx.params["pps"] == 500.0 and ctx.params["rebase_time"] and ctx.params["speed"] is None


def test_without_options_the_replay_runs_as_fast_as_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _replay_argv(tmp_path, monkeypatch) == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--speed", "2", "--pps", "10"], "--speed and --pps are exclusive: choose one pacing"),
        (["--speed", "0"], "--speed must be > 0, got 0"),
        (["--pps", "-1"], "--pps must be > 0, got -1"),
        (["--loop", "0"], "--loop must be >= 1, got 0"),
        (
            ["--start-at", "2026-01-01T00:00:00Z", "--rebase-time"],
            "--rebase-time and --start-at are exclusive: choose one time base",
        ),
        (["--start-at", "yesterday"], "--start-at 'yesterday' is not an ISO-8601 time"),
    ],
)
def test_bad_replay_options_fail_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: list[str], message: str
) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("monitor_services called")

    monkeypatch.setattr(netmon.supervisor, "monitor_services", refuse)
    capture = tmp_path / "x.pcap"
    capture.write_bytes(b"")
    result = CliRunner().invoke(cli, ["up", "--replay", str(capture), *options], env=_env(tmp_path))
    assert result.exit_code == 2
    assert result.output.startswith(f"netmon up: error: {message}")
    assert not (tmp_path / "state" / "up").exists()  # not even the lock was taken


def test_replay_options_need_a_replay(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["up", "--iface", "lo", "--speed", "2", "--rebase-time"], env=_env(tmp_path)
    )
    assert result.exit_code == 2
    assert result.output.strip() == "netmon up: error: --speed, --rebase-time: only with --replay FILE"
    assert load_config(None, env=_env(tmp_path)).paths.state_dir == tmp_path / "state"
