"""``kill -9`` of the broker in the middle of ``netmon replay``, then ``netmon replay --resume``.

A replay the broker dies under stops at its first undelivered message and says, in one line on
stderr, how many records the broker acknowledged and which ``--resume RUN_ID`` continues it;
the continuation sends exactly the records the topic lacks (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from ingest import read_records
from ingest.generate import generate
from ingest.wire import is_control
from netmon.broker import LocalBroker
from netmon.records import ARROW_SCHEMA
from tests.faults.conftest import NETMON, kill_broker, netmon_env, wait_for_message_count
from tests.ingest.kafka_util import consume_all, records_of, sort_records

pytestmark = pytest.mark.kafka

LINE = re.compile(
    r"^netmon replay: error: Kafka broker at \S+ unavailable: .*; ([\d,]+) of ([\d,]+) records sent were "
    r"acknowledged; continue with: netmon replay \S+ --resume (\d+-[0-9a-f]{6}) \(and the same options\)$"
)


def _replay(cap: Path, topic: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(NETMON), "replay", str(cap), "--topic", topic, "--json", "-q", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )


def _failed_run(proc: subprocess.Popen[str]) -> tuple[dict, int, str]:
    """The summary, acknowledged count and run id of a replay the broker died under."""
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    match = LINE.match(err.strip())
    assert match, err
    summary = json.loads(out)
    acked = int(match[1].replace(",", ""))
    assert acked == summary["acknowledged"] and int(match[2].replace(",", "")) == summary["produced"]
    assert match[3] == summary["run_id"] and summary["broker_error"]
    assert summary["control_messages"] == 0  # no watermark after a failure: the stream goes on
    return summary, acked, match[3]


def _check_exactly_once(bootstrap: str, topic: str, expected: pa.Table) -> None:
    """Every record of ``expected`` once in ``topic``, in messages whose sequence numbers tile it."""
    messages = consume_all(bootstrap, topic)
    data = [m for m in messages if not is_control(m.headers)]
    assert sort_records(records_of(messages)).equals(sort_records(expected))
    spans = sorted((int(dict(m.headers)["netmon.seq"]), int(dict(m.headers)["netmon.records"])) for m in data)
    covered = 0
    for seq, n in spans:
        assert seq == covered, f"records {covered}..{seq} missing or sent twice"
        covered = seq + n
    assert covered == expected.num_rows
    last: dict[int, object] = {}
    for m in messages:
        last[m.partition] = m
    assert all(is_control(m.headers) for m in last.values())  # the resumed run closed the windows


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    path = tmp_path_factory.mktemp("faults") / "capture.pcap"
    generate(path, packets=9000, seed=21, duration_s=12)
    return path, pa.Table.from_batches(list(read_records(path)), schema=ARROW_SCHEMA)


def test_kill_9_mid_replay_reports_the_acknowledged_count_and_resume_completes_it(
    own_broker: LocalBroker, capture: tuple[Path, pa.Table]
) -> None:
    cap, table = capture
    bootstrap, topic = own_broker.bootstrap, "faults.replay.kill"
    env = netmon_env(own_broker.cfg, bootstrap)
    proc = _replay(cap, topic, env, "--pps", "1000", "--timeout", "2", "--delivery-timeout", "3")
    try:
        wait_for_message_count(bootstrap, topic, 10)
        # Freeze the replay so that no new request reaches the broker while it dies. The answers to
        # requests sent just before the freeze may still sit unread in the replay's socket when the
        # broker's reset arrives (seen once in CI: 700 records held, 650 acknowledged), so the count
        # is a lower bound off by at most what was in flight; --resume reads the topic, not the count.
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(1.5)
        kill_broker(own_broker)
        os.kill(proc.pid, signal.SIGCONT)
        summary, acked, run_id = _failed_run(proc)
    finally:
        proc.kill()
    assert 0 < acked < table.num_rows and summary["produced"] <= table.num_rows

    own_broker.start()
    held = records_of(consume_all(bootstrap, topic)).num_rows
    assert acked <= held <= summary["produced"] and held < table.num_rows

    res = subprocess.run(
        [str(NETMON), "replay", str(cap), "--topic", topic, "--resume", run_id, "--json", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    resumed = json.loads(res.stdout)
    assert resumed["run_id"] == run_id and resumed["already_present"] == held
    assert resumed["produced"] == resumed["acknowledged"] == table.num_rows - held
    _check_exactly_once(bootstrap, topic, table)


def _expected(table: pa.Table, run_id: str, loops: int) -> pa.Table:
    """The records a ``--rebase-time --loop N --filter proto=tcp`` replay of ``table`` produces."""
    from ingest.replay import run_start_ns, shift_ts

    ts = table.column("ts").cast(pa.int64()).to_numpy()
    extent = int(ts.max() - ts.min())
    span = extent + extent // (len(ts) - 1)
    base = run_start_ns(run_id) - int(ts[0])
    tcp = table.filter(pa.compute.equal(table.column("proto"), 6))
    return pa.concat_tables(
        pa.Table.from_batches([shift_ts(b, base + k * span) for b in tcp.to_batches()], schema=ARROW_SCHEMA)
        for k in range(loops)
    )


@pytest.mark.slow
def test_kill_9_racing_the_acknowledgements_twice_then_resumed_exactly_once(
    own_broker: LocalBroker, capture: tuple[Path, pa.Table]
) -> None:
    """No freeze: a request the broker wrote may die unacknowledged. The count is then a lower
    bound of what the topic holds, and --resume (which reads the topic, not the count) still ends
    with every record once, even when the broker also dies under the resumed run."""
    cap, table = capture
    bootstrap, topic = own_broker.bootstrap, "faults.replay.race"
    env = netmon_env(own_broker.cfg, bootstrap)
    options = ["--rebase-time", "--loop", "2", "--filter", "proto=tcp", "--records-per-message", "20"]
    slow = ["--pps", "1500", "--timeout", "2", "--delivery-timeout", "3"]
    run_id = None
    present = messages = 0
    for _ in range(2):
        resume = ["--resume", run_id] if run_id else []
        proc = _replay(cap, topic, env, *options, *slow, *resume)
        try:
            wait_for_message_count(bootstrap, topic, messages + 20)  # this run is under way
            kill_broker(own_broker)
            summary, acked, run_id = _failed_run(proc)
        finally:
            proc.kill()
        assert summary["already_present"] == present
        own_broker.start()
        in_topic = consume_all(bootstrap, topic)
        held = records_of(in_topic).num_rows
        assert present + acked <= held <= present + summary["produced"]
        present, messages = held, len(in_topic)
    assert run_id is not None
    res = subprocess.run(
        [str(NETMON), "replay", str(cap), "--topic", topic, *options, "--resume", run_id, "--json", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    resumed = json.loads(res.stdout)
    assert resumed["already_present"] == present
    expected = _expected(table, run_id, loops=2)
    assert resumed["produced"] == resumed["acknowledged"] == expected.num_rows - present
    _check_exactly_once(bootstrap, topic, expected)
