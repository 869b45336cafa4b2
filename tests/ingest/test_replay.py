"""Replay: pacing and progress units, and replays into the real broker consumed back and compared."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from cli.main import cli
from ingest import CaptureError, read_records
from ingest.generate import generate
from ingest.pacing import FakeClock, Pacer
from ingest.progress import ProgressLine, replay_line
from ingest.replay import ReplayOptions, ReplayProgress, iso_ns, replay, shift_ts
from ingest.wire import is_control
from netmon.config import load_config
from netmon.filters import FilterError
from netmon.records import ARROW_SCHEMA
from tests.conftest import REPO_ROOT
from tests.ingest.conftest import netmon_records, scapy_file_records
from tests.ingest.kafka_util import consume_all, records_of, sort_records, wait_for_messages

CAPTURES = REPO_ROOT.parent / "shared" / "captures"
NETMON = Path(sys.executable).with_name("netmon")


def topic_name(prefix: str) -> str:
    return f"test.{prefix}.{uuid.uuid4().hex[:8]}"


def table_of(path: Path, **kwargs: object) -> pa.Table:
    return pa.Table.from_batches(list(read_records(path, **kwargs)), schema=ARROW_SCHEMA)


def ts_of(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column("ts").cast(pa.int64()).to_numpy())


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "sample.pcap"
    generate(path, packets=3000, seed=9, duration_s=20)
    return path


# --- units: no broker ----------------------------------------------------------------------------


def test_pacer_speed_follows_scaled_timestamps_per_message() -> None:
    clock = FakeClock(100.0)
    pacer = Pacer(speed=10.0, quantum_s=0.05, clock=clock, sleep=clock.sleep)
    ts = (np.array([0, 10, 20, 600, 610, 3000, 2000, 9000]) * 1_000_000).astype(np.int64)  # ms -> ns
    chunks = pacer.chunks(ts, records_per_message=2)
    # Scaled offsets 0, .001, .002, .06, .061, .3, .2 (backwards), .9; 50 ms quanta; at most 2 per message.
    assert [(a, b) for a, b, _ in chunks] == [(0, 2), (2, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
    assert [round(o, 3) for _, _, o in chunks] == [0.0, 0.002, 0.06, 0.3, 0.2, 0.9]
    for _, _, offset in chunks:
        pacer.wait(offset)
    # Sleeps reach each offset on time; the backwards timestamp is sent at once, not waited for.
    assert round(clock.now - 100.0, 6) == 0.9
    assert [round(s, 3) for s in clock.slept] == [0.002, 0.058, 0.24, 0.6]


def test_pacer_fixed_rate_and_unpaced() -> None:
    clock = FakeClock()
    pacer = Pacer(pps=1000.0, quantum_s=0.05, clock=clock, sleep=clock.sleep)
    ts = np.zeros(120, np.int64)
    first = pacer.chunks(ts, records_per_message=1000)
    second = pacer.chunks(ts[:30], records_per_message=1000)
    assert [(a, b) for a, b, _ in first] == [(0, 50), (50, 100), (100, 120)]
    assert [o for *_, o in first + second] == [0.0, 0.05, 0.1, 0.12]
    for *_, offset in first + second:
        pacer.wait(offset)
    assert round(clock.now, 6) == 0.12
    unpaced = Pacer()
    assert unpaced.chunks(ts, 50) == [(0, 50, 0.0), (50, 100, 0.0), (100, 120, 0.0)]
    assert unpaced.wait(5.0) == 0.0
    with pytest.raises(ValueError, match="exclusive"):
        Pacer(speed=1, pps=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speed": 0}, "--speed must be > 0"),
        ({"pps": -1}, "--pps must be > 0"),
        ({"speed": 1, "pps": 10}, "exclusive"),
        ({"loop": 0}, "--loop must be >= 1"),
        ({"limit": -5}, "--limit must be >= 0"),
        ({"records_per_message": 0}, "records_per_message must be >= 1"),
    ],
)
def test_options_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReplayOptions(**kwargs)


def test_shift_and_iso() -> None:
    batch = pa.RecordBatch.from_pydict(
        {n: [None] for n in ARROW_SCHEMA.names} | {"ts": [1_000_000_123]}, schema=ARROW_SCHEMA
    )
    shifted = shift_ts(batch, 5_000_000_000)
    assert shifted.column(0).cast(pa.int64()).to_pylist() == [6_000_000_123]
    assert shifted.schema.equals(ARROW_SCHEMA) and shift_ts(batch, 0) is batch
    assert iso_ns(6_000_000_123) == "1970-01-01T00:00:06.000000123+00:00"


def test_progress_line_terminal_and_log() -> None:
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    line = ProgressLine(tty, interval_s=0)
    line.show("replay  10 pkts")
    line.show("replay  9 pkts")
    line.close()
    assert tty.getvalue() == "\rreplay  10 pkts\rreplay  9 pkts \n"
    log = io.StringIO()
    line = ProgressLine(log, log_interval_s=3600)
    line.show("not yet")  # a log gets lines only every log_interval_s
    line.close("done")
    assert log.getvalue() == "done\n"
    quiet = io.StringIO()
    ProgressLine(quiet, enabled=False).close("done")
    assert quiet.getvalue() == ""
    assert replay_line(packets=10, elapsed_s=0, bytes_read=0) == "replay  10 pkts  0 pkt/s  0.0 MB"


def test_bad_input_is_reported_before_connecting(tmp_path: Path) -> None:
    not_pcap = tmp_path / "notes.txt"
    not_pcap.write_text("hello, world\n")
    dead = "127.0.0.1:1"  # would be BrokerUnavailable if replay connected first
    with pytest.raises(CaptureError, match=r"notes.txt: byte 0: not a capture file"):
        replay(not_pcap, bootstrap=dead, topic="t", progress=False)
    with pytest.raises(FilterError, match="unknown field"):
        replay(not_pcap, bootstrap=dead, topic="t", options=ReplayOptions(filter="nope=1"), progress=False)


def test_cli_bad_input_exit_codes(tmp_path: Path, sample: Path) -> None:
    not_pcap = tmp_path / "x.pcap"
    not_pcap.write_bytes(b"GIF89a......")
    runner = CliRunner()
    res = runner.invoke(cli, ["replay", str(not_pcap), "--bootstrap", "127.0.0.1:1"])
    assert res.exit_code == 2 and "x.pcap: byte 0: not a capture file" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = runner.invoke(
        cli, ["replay", str(sample), "--filter", "proto=tcp and", "--bootstrap", "127.0.0.1:1"]
    )
    assert res.exit_code == 2 and "bad filter at column 14" in res.output
    res = runner.invoke(
        cli, ["replay", str(sample), "--speed", "2", "--pps", "5", "--bootstrap", "127.0.0.1:1"]
    )
    assert res.exit_code == 2 and "exclusive" in res.output
    res = runner.invoke(cli, ["replay", str(sample), "--start-at", "yesterday", "--bootstrap", "127.0.0.1:1"])
    assert res.exit_code == 2 and "--start-at 'yesterday' is not an ISO-8601 time" in res.output
    res = runner.invoke(cli, ["replay", str(sample), "--bootstrap", "127.0.0.1:1", "--timeout", "1", "-q"])
    assert res.exit_code == 1 and "Kafka broker at 127.0.0.1:1 unavailable" in res.output


def test_cli_close_at_end_sends_the_demo_watermark(monkeypatch: pytest.MonkeyPatch, sample: Path) -> None:
    # netmon replay ends like netmon demo's replay by default (--close-at-end): a watermark message
    # [pipeline] watermark_s + traffic_window_s past the last record; --keep-open: none.
    import ingest.replay
    from ingest.replay import ReplaySummary

    seen: list[ReplayOptions] = []

    def fake_replay(path: object, *, options: ReplayOptions, **kw: object) -> ReplaySummary:
        seen.append(options)
        return ReplaySummary(file=str(path), topic="t")

    monkeypatch.setattr(ingest.replay, "replay", fake_replay)
    for args in ([], ["--keep-open"], ["--close-at-end"]):
        res = CliRunner().invoke(cli, ["replay", str(sample), "-q", *args], env={"NETMON_CONFIG": None})
        assert res.exit_code == 0, res.output
    pipeline = load_config(None, env={}).pipeline
    close = pipeline.watermark_s + pipeline.traffic_window_s
    assert [o.close_windows_s for o in seen] == [close, None, close]
    help_text = " ".join(CliRunner().invoke(cli, ["replay", "--help"]).output.split())
    assert "[kafka] bootstrap_servers" in help_text and "[kafka] bootstrap)" not in help_text
    assert "--close-at-end / --keep-open --close-at-end (the default)" in help_text


def test_cli_resume_needs_a_run_id(sample: Path) -> None:
    res = CliRunner().invoke(
        cli, ["replay", str(sample), "--resume", "yesterday", "--bootstrap", "127.0.0.1:1"]
    )
    assert res.exit_code == 2 and "--resume 'yesterday' is not a replay run id" in res.output
    assert len(res.output.strip().splitlines()) == 1


# --- against the real broker ----------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.parametrize("name", ["http-bro.org.pcap", "irc-dcc-send.pcapng", "http-vlan-0.pcap"])
def test_replay_real_capture_every_record_arrives(kafka_bootstrap: str, name: str) -> None:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    topic = topic_name("real")
    seen: list[ReplayProgress] = []
    summary = replay(
        path,
        bootstrap=kafka_bootstrap,
        topic=topic,
        progress=seen.append,
        options=ReplayOptions(records_per_message=100),
    )
    consumed = records_of(consume_all(kafka_bootstrap, topic))
    reader = read_records(path)
    expected = pa.Table.from_batches(list(reader), schema=ARROW_SCHEMA)
    assert summary.produced == summary.acknowledged == consumed.num_rows == expected.num_rows
    assert summary.read == reader.summary.frames and summary.decoded == reader.summary.records
    assert summary.skipped == reader.summary.skipped and summary.failed == 0
    assert sort_records(consumed).equals(sort_records(expected))
    # Independent oracle: Scapy's full dissection of the same file, field by field (as multisets).
    oracle = [r for r in scapy_file_records(path) if r is not None]
    got = netmon_records(sort_records(consumed).to_batches())
    key = lambda r: tuple((v is None, v) for v in r.values())  # noqa: E731
    assert sorted(got, key=key) == sorted((r | {"iface": got[0]["iface"]} for r in oracle), key=key)
    assert seen and seen[-1].packets == summary.produced and seen[-1].fraction == 1.0
    assert summary.first_ts == iso_ns(int(ts_of(expected)[0])) and summary.messages == -(
        -summary.produced // 100
    )


@pytest.mark.kafka
def test_filter_and_limit(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("filter")
    opts = ReplayOptions(filter="proto=udp or proto=icmp", limit=150, batch_size=64)
    summary = replay(sample, bootstrap=kafka_bootstrap, topic=topic, options=opts, progress=False)
    rows = table_of(sample).to_pylist()
    wanted = [r for r in rows if r["proto"] in (17, 1)][:150]
    consumed = records_of(consume_all(kafka_bootstrap, topic))
    assert summary.produced == summary.acknowledged == consumed.num_rows == 150
    assert sort_records(consumed).equals(sort_records(pa.Table.from_pylist(wanted, schema=ARROW_SCHEMA)))
    # Batches of 64 are filtered whole; the limit then cuts the batch holding the 150th match.
    matches, seen = 0, 0
    while matches < 150:
        matches += sum(r["proto"] in (17, 1) for r in rows[seen : seen + 64])
        seen += 64
    assert summary.filtered_out == seen - matches


@pytest.mark.kafka
def test_loop_shifts_event_time_by_the_span(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("loop")
    summary = replay(
        sample, bootstrap=kafka_bootstrap, topic=topic, options=ReplayOptions(loop=3), progress=False
    )
    original = ts_of(table_of(sample))
    n = len(original)
    extent = int(original.max() - original.min())
    span = extent + extent // (n - 1)
    consumed = np.sort(ts_of(records_of(consume_all(kafka_bootstrap, topic))))
    expected = np.sort(np.concatenate([original + k * span for k in range(3)]))
    assert summary.loops == 3 and summary.produced == summary.acknowledged == 3 * n
    assert summary.read == 3 * n
    assert np.array_equal(consumed, expected)
    assert original.max() + 2 * span == consumed.max() and original.max() < original.min() + span


@pytest.mark.kafka
def test_rebase_time_makes_the_capture_look_live(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("rebase")
    before = time.time_ns()
    replay(
        sample,
        bootstrap=kafka_bootstrap,
        topic=topic,
        options=ReplayOptions(rebase_time=True),
        progress=False,
    )
    after = time.time_ns()
    original = ts_of(table_of(sample))
    consumed = ts_of(records_of(consume_all(kafka_bootstrap, topic)))
    shift = int(consumed.min() - original.min())
    assert before <= original[0] + shift <= after
    assert np.array_equal(np.sort(consumed), np.sort(original + shift))


@pytest.mark.kafka
def test_start_at_puts_the_first_packet_at_the_given_time(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("start")
    res = CliRunner().invoke(
        cli,
        ["replay", str(sample), "--bootstrap", kafka_bootstrap, "--topic", topic, "-q"]
        + ["--start-at", "2030-01-02T03:04:05.000006Z"],
    )
    assert res.exit_code == 0, res.output
    original = ts_of(table_of(sample))
    consumed = ts_of(records_of(consume_all(kafka_bootstrap, topic)))
    shift = 1_893_553_445_000_006_000 - int(original[0])
    assert np.array_equal(np.sort(consumed), np.sort(original + shift))


@pytest.mark.kafka
def test_paced_modes_are_not_faster_than_asked(kafka_bootstrap: str, tmp_path: Path) -> None:
    path = tmp_path / "short.pcap"
    generate(path, packets=400, seed=4, duration_s=2.0)
    span_s = float(np.ptp(ts_of(table_of(path)))) / 1e9
    began = time.monotonic()
    s = replay(
        path,
        bootstrap=kafka_bootstrap,
        topic=topic_name("speed"),
        options=ReplayOptions(speed=4.0),
        progress=False,
    )
    assert time.monotonic() - began >= span_s / 4 - 0.06 and s.acknowledged == 400
    began = time.monotonic()
    s = replay(
        path,
        bootstrap=kafka_bootstrap,
        topic=topic_name("pps"),
        options=ReplayOptions(pps=1000),
        progress=False,
    )
    assert time.monotonic() - began >= 0.35 and s.acknowledged == 400


@pytest.mark.kafka
def test_close_windows_sends_a_watermark_past_the_last_record(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("close")
    summary = replay(
        sample,
        bootstrap=kafka_bootstrap,
        topic=topic,
        partitions=3,
        options=ReplayOptions(close_windows_s=6.0),
        progress=False,
    )
    messages = consume_all(kafka_bootstrap, topic)
    control = [m for m in messages if dict(m.headers).get("netmon.control") == b"watermark"]
    assert sorted(m.partition for m in control) == [0, 1, 2] and summary.control_messages == 3
    assert {int(m.value) for m in control} == {int(ts_of(table_of(sample)).max()) + 6_000_000_000}
    assert records_of(messages).num_rows == summary.produced == summary.acknowledged == 3000


@pytest.mark.kafka
@pytest.mark.parametrize("flags", [[], ["--keep-open"]], ids=["default", "keep-open"])
def test_cli_replay_closes_its_windows_unless_kept_open(
    kafka_bootstrap: str, sample: Path, flags: list[str]
) -> None:
    # Without flags the topic ends, on every partition, with the demo's control message:
    # [pipeline] watermark_s + traffic_window_s of event time past the last record.
    topic = topic_name("closes")
    res = CliRunner().invoke(
        cli,
        ["replay", str(sample), "--bootstrap", kafka_bootstrap, "--topic", topic, "-q", *flags],
        env={"NETMON_CONFIG": None},
    )
    assert res.exit_code == 0, res.output
    messages = consume_all(kafka_bootstrap, topic)
    control = [m for m in messages if dict(m.headers).get("netmon.control") == b"watermark"]
    assert records_of(messages).num_rows == 3000
    if flags:
        assert control == []
        return
    cfg = load_config(None, env={})
    close_ns = int((cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s) * 1e9)
    assert {int(m.value) for m in control} == {int(ts_of(table_of(sample)).max()) + close_ns}
    last = {}
    for m in messages:  # in (partition, offset) order: the last one per partition wins
        last[m.partition] = m
    assert sorted(m.partition for m in control) == sorted(last) == list(range(cfg.kafka.partitions))
    assert all(dict(m.headers).get("netmon.control") == b"watermark" for m in last.values())


@pytest.mark.kafka
def test_resume_with_other_options_is_refused(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("mismatch")
    first = replay(
        sample, bootstrap=kafka_bootstrap, topic=topic, options=ReplayOptions(limit=1000), progress=False
    )
    assert first.acknowledged == 1000 and first.run_id
    res = CliRunner().invoke(
        cli,
        ["replay", str(sample), "--bootstrap", kafka_bootstrap, "--topic", topic, "-q"]
        + ["--resume", first.run_id, "--start-at", "2030-01-01T00:00:00Z"],
    )
    assert res.exit_code == 2 and f"--resume {first.run_id}: record 0 of the topic" in res.output
    assert "same file and options" in res.output
    # With the same options it sends what is missing, and only that.
    again = replay(
        sample,
        bootstrap=kafka_bootstrap,
        topic=topic,
        options=ReplayOptions(limit=2500, resume=first.run_id),
        progress=False,
    )
    assert again.already_present == 1000 and again.produced == again.acknowledged == 1500
    consumed = records_of(consume_all(kafka_bootstrap, topic))
    assert sort_records(consumed).equals(sort_records(table_of(sample).slice(0, 2500)))


@pytest.mark.kafka
def test_damaged_files_keep_every_good_packet(kafka_bootstrap: str, sample: Path, tmp_path: Path) -> None:
    data = sample.read_bytes()
    offset, k = 24, 0
    while k < 1234:  # walk the records to the 1234th one
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
        k += 1
    corrupt = tmp_path / "corrupt.pcap"
    corrupt.write_bytes(data[: offset + 8] + struct.pack("<I", 0x7FFFFFFF) + data[offset + 12 :])
    topic = topic_name("corrupt")
    summary = replay(
        corrupt, bootstrap=kafka_bootstrap, topic=topic, progress=False, options=ReplayOptions(batch_size=100)
    )
    assert summary.error and f"byte {offset}" in summary.error
    assert summary.produced == summary.acknowledged == 1234
    assert records_of(consume_all(kafka_bootstrap, topic)).num_rows == 1234
    res = CliRunner().invoke(
        cli, ["replay", str(corrupt), "--bootstrap", kafka_bootstrap, "--topic", topic, "-q"]
    )
    assert res.exit_code == 2 and f"byte {offset}" in res.output

    truncated = tmp_path / "truncated.pcap"
    truncated.write_bytes(data[:-10])
    summary = replay(truncated, bootstrap=kafka_bootstrap, topic=topic_name("trunc"), progress=False)
    assert summary.error is None and summary.produced == summary.acknowledged == 2999
    assert any("byte" in w for w in summary.warnings), summary.warnings


@pytest.mark.kafka
def test_cli_json_summary(kafka_bootstrap: str, sample: Path) -> None:
    topic = topic_name("cli")
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(sample),
            "--bootstrap",
            kafka_bootstrap,
            "--topic",
            topic,
            "--json",
            "-q",
            "--records-per-message",
            "250",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["produced"] == out["acknowledged"] == out["read"] == 3000
    assert out["messages"] == 12 + out["control_messages"] and out["control_messages"] >= 1
    assert out["compression"] == "lz4" and out["interrupted"] is False and out["skipped"] == {}


@pytest.mark.kafka
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_flushes_and_closes(kafka_bootstrap: str, sample: Path, sig: signal.Signals) -> None:
    topic = topic_name("signal")
    env = {**os.environ, "NETMON_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.Popen(
        [str(NETMON), "replay", str(sample), "--topic", topic, "--pps", "500", "--json", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        wait_for_messages(kafka_bootstrap, topic)  # 3000 packets at 500/s take 6 s: stop it early
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["interrupted"] is True and 0 < summary["produced"] < 3000
    assert summary["produced"] == summary["acknowledged"]
    messages = consume_all(kafka_bootstrap, topic)
    assert records_of(messages).num_rows == summary["produced"]
    assert not any(is_control(m.headers) for m in messages)  # an interrupted replay stays open
    # --resume RUN_ID continues it: every record of the capture once, then the closing watermark.
    res = CliRunner().invoke(
        cli,
        ["replay", str(sample), "--topic", topic, "--resume", summary["run_id"], "--json", "-q"],
        env={"NETMON_BOOTSTRAP_SERVERS": kafka_bootstrap, "NETMON_CONFIG": None},
    )
    assert res.exit_code == 0, res.output
    resumed = json.loads(res.output)
    assert resumed["already_present"] == summary["produced"]
    assert resumed["produced"] == resumed["acknowledged"] == 3000 - summary["produced"]
    messages = consume_all(kafka_bootstrap, topic)
    assert sort_records(records_of(messages)).equals(sort_records(table_of(sample)))
    assert resumed["control_messages"] >= 1 and is_control(messages[-1].headers)
