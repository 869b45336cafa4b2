"""netmon.orphans.stop_tagged: what one ``netmon up`` left is stopped, and only that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netmon import orphans

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(600)"
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _tagged_child(tag: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", IGNORES_TERM],
        env={**os.environ, orphans.TAG_ENV: tag},
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    return child


def test_a_process_whose_tag_can_no_longer_be_read_is_still_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a process exits, ``/proc/<pid>/environ`` reads empty before the process is a zombie:
    the tag is seen once, then no more. Seen in CI: the next ``netmon up`` returned while the
    process still ran. A process found once must count until it is gone."""
    tag = f"test-{os.getpid()}-{time.monotonic_ns()}"
    child = _tagged_child(tag)
    real = orphans.tagged
    calls = []

    def tag_read_once(wanted: str) -> list[int]:
        calls.append(wanted)
        return real(wanted) if len(calls) == 1 else []

    monkeypatch.setattr(orphans, "tagged", tag_read_once)
    try:
        found = orphans.stop_tagged(tag, grace_s=0.1, kill_after_s=5.0)
        assert found == [child.pid]
        # SIGTERM is ignored: only the SIGKILL that follows stops it
        assert child.wait(timeout=5) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


def test_a_pid_taken_by_another_process_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pid of a process found once names that process only: should it exit and its pid go to
    another one (simulated by a changed start time), that one gets no signal."""
    tag = f"test-{os.getpid()}-{time.monotonic_ns()}"
    child = _tagged_child(tag)
    real_tagged, real_start = orphans.tagged, orphans._start_time
    calls = []

    def tag_read_once(wanted: str) -> list[int]:
        calls.append(wanted)
        return real_tagged(wanted) if len(calls) == 1 else []

    starts = []

    def start_time(pid: int) -> int | None:
        starts.append(pid)
        value = real_start(pid)
        return value if len(starts) == 1 or value is None else value + 1

    monkeypatch.setattr(orphans, "tagged", tag_read_once)
    monkeypatch.setattr(orphans, "_start_time", start_time)
    try:
        assert orphans.stop_tagged(tag, grace_s=0.1, kill_after_s=0.5) == [child.pid]
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
    finally:
        child.kill()
        child.wait()
