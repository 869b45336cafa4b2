"""``netmon cluster down`` of a 3-node KRaft cluster whose nodes do not all act on SIGTERM at once.

``down`` sends SIGTERM to every Kafka node together, but a node on a loaded host (or in a GC pause)
may act on it seconds after the others. The nodes are also the controller quorum: a node that
still needed the quorum once a majority of the others had exited waited for it (a controlled
shutdown waits up to 5 minutes) until ``down`` SIGKILLed it at the end of the grace. Here one node
is frozen (SIGSTOP) until the two others have exited, then resumed: every node has to end by
SIGTERM, the two others without waiting for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import NETMON, running, running_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

#: the grace ``down`` gets: far longer than a node needs once it acts on its SIGTERM
GRACE_S = 60


def _wait_gone(pids: list[int], timeout_s: float) -> float:
    """Seconds until none of ``pids`` runs (at most ``timeout_s``)."""
    started = time.monotonic()
    while any(running(pid) for pid in pids) and time.monotonic() - started < timeout_s:
        time.sleep(0.2)
    return time.monotonic() - started


def test_down_ends_every_node_by_sigterm_when_one_acts_late(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3, workers=0) as cluster:
        nodes = {name: cluster.process(name) for name in ("kafka-1", "kafka-2", "kafka-3")}
        late = nodes["kafka-2"]
        others = [nodes["kafka-1"].pid, nodes["kafka-3"].pid]
        os.kill(late.pid, signal.SIGSTOP)
        try:
            down = subprocess.Popen(
                [str(NETMON), "cluster", "down", "--grace", str(GRACE_S)],
                env=cluster.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # The master is stopped first (a few seconds), then the nodes get SIGTERM together.
            others_s = _wait_gone(others, 40)
        finally:
            os.kill(late.pid, signal.SIGCONT)
        late_s = _wait_gone([late.pid], GRACE_S + 30)
        out, err = down.communicate(timeout=GRACE_S + 60)
    assert down.returncode == 0, err
    said = [line for line in out.splitlines() if line.startswith("kafka-")]
    assert said == [f"{name}: stopped (pid {p.pid})" for name, p in nodes.items()], out
    assert others_s < 40, f"kafka-1 and kafka-3 still ran {others_s:.0f} s into `down`: {out}"
    assert late_s < 20, f"kafka-2 took {late_s:.0f} s after it resumed: {out}"
