"""``bench.capture`` (``netmon bench capture``): the ladder and the sustained-rate rule, the frames,
the private link, and one short real run checked against counts the test makes itself.

The real run needs root (a network namespace, a veth pair, raw sockets), ``ip`` (iproute2) and the
session's Kafka broker; without root or ``ip`` it is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.capture import (
    NS_ADDRESS,
    PEER_ADDRESS,
    SENDER_TOLERANCE,
    RateResult,
    build_frames,
    keeps_up,
    parse_rates,
    private_link,
    sustained_rate,
    verdict,
)
from cli.main import cli
from ingest.decode import decode_frames
from tests.ingest.kafka_util import consume_all, records_of

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"),
    reason="needs root (network namespaces, raw sockets) and iproute2",
)


def _row(rate: int, **changes: object) -> RateResult:
    """A row where the capture kept up at ``rate`` for 10 s, then ``changes``."""
    sent = rate * 10
    base = RateResult(
        rate=rate, seconds=10, sent=sent, sent_pps=rate, captured=sent, acknowledged=sent, link_rx=sent
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


# -- the ladder -----------------------------------------------------------------------------------


def test_rates_parse_in_order_with_thousands() -> None:
    assert parse_rates("5000,10000,20000") == [5000, 10000, 20000]
    assert parse_rates(" 5k , 12.5k,40_000 ") == [5000, 12500, 40000]
    assert parse_rates("1") == [1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10000,5000", "ascending and distinct"),
        ("5000,5000", "ascending and distinct"),
        ("5000,,10000", "empty rate"),
        ("fast", "not a rate: 'fast'"),
        ("0", "whole number >= 1"),
        ("-5", "whole number >= 1"),
        ("2.5", "whole number >= 1"),
    ],
)
def test_bad_rates_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rates(text)


def test_the_command_refuses_a_bad_ladder_before_touching_the_network() -> None:
    res = CliRunner().invoke(cli, ["bench", "capture", "--rates", "20000,10000"])
    assert res.exit_code == 2 and "ascending and distinct" in res.output
    res = CliRunner().invoke(cli, ["bench", "--help"])
    assert res.exit_code == 0 and "capture" in res.output.split()


# -- the sustained-rate rule ----------------------------------------------------------------------


def test_a_rate_is_kept_up_only_when_nothing_is_lost() -> None:
    assert keeps_up(_row(10_000)) and verdict(_row(10_000)) == "ok"
    assert verdict(_row(10_000, kernel_drops=1, captured=99_999)) == "kernel-drops"
    assert verdict(_row(10_000, captured=99_990)) == "missed"  # queued at the stop / dropped on the link
    assert verdict(_row(10_000, captured=100_001)) == "extra"  # a frame that is not the sender's
    assert verdict(_row(10_000, acknowledged=99_000)) == "unacknowledged"
    assert verdict(_row(10_000, failed=3)) == "unacknowledged"
    for changes in ({"kernel_drops": 1}, {"captured": 99_990}, {"acknowledged": 0}, {"failed": 1}):
        assert not keeps_up(_row(10_000, **changes)), changes


def test_a_rate_the_sender_did_not_hold_proves_nothing() -> None:
    held = (1 - SENDER_TOLERANCE) * 50_000
    slow = _row(50_000, sent=400_000, sent_pps=40_000.0, captured=400_000, acknowledged=400_000)
    assert verdict(slow) == "sender-limited" and not keeps_up(slow)
    assert verdict(_row(50_000, sent_pps=held)) == "ok"
    assert verdict(_row(50_000, sent_pps=held - 1)) == "sender-limited"
    assert verdict(_row(50_000, sent=0, sent_pps=50_000, captured=0, acknowledged=0)) == "sender-limited"


def test_the_sustained_rate_is_the_highest_rate_kept_up() -> None:
    ladder = [
        _row(5_000),
        _row(10_000),
        _row(20_000, kernel_drops=120, captured=199_880, acknowledged=199_880),
        _row(40_000, sent_pps=30_000.0),  # sender-limited: not a success even though nothing is lost
    ]
    assert sustained_rate(ladder) == 10_000
    assert sustained_rate(ladder[:1]) == 5_000
    assert sustained_rate(ladder[2:]) is None
    assert sustained_rate([]) is None
    # the rule is per rate, as stated: a higher rate kept up counts even after a lower one failed
    assert sustained_rate([*ladder, _row(80_000)]) == 80_000


# -- the frames -----------------------------------------------------------------------------------


def test_the_frames_decode_to_the_udp_and_tcp_records_they_claim() -> None:
    frames = build_frames(64)
    assert len(set(frames)) == 64
    batch, skipped = decode_frames(frames, [1_000 + i for i in range(64)], [len(f) for f in frames], 1)
    assert skipped == {} and batch.num_rows == 64
    rows = batch.to_pylist()
    assert {r["src_ip"] for r in rows} == {NS_ADDRESS} and {r["dst_ip"] for r in rows} == {PEER_ADDRESS}
    assert Counter(r["proto"] for r in rows) == {17: 48, 6: 16}
    for i, r in enumerate(rows):
        if i % 4 == 3:
            assert (r["proto"], r["src_port"], r["dst_port"], r["tcp_flags"]) == (6, 50000 + i, 443, 0x18)
        else:
            assert (r["proto"], r["src_port"], r["dst_port"]) == (17, 40000 + i, 5000 + i % 8)
        assert r["wire_len"] == len(frames[i]) and r["ip_len"] == len(frames[i]) - 14


# -- the link -------------------------------------------------------------------------------------


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


@needs_root
def test_the_private_link_is_removed_also_on_an_error() -> None:
    tag = f"t{os.getpid() % 100000}"
    with pytest.raises(RuntimeError, match="boom"), private_link(tag) as link:
        assert Path("/sys/class/net", link.host_dev).exists()
        assert link.namespace in _namespaces()
        ns_links = subprocess.run(
            ["ip", "-n", link.namespace, "-br", "addr", "show", "dev", link.ns_dev],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert f"{NS_ADDRESS}/30" in ns_links and "UP" in ns_links
        raise RuntimeError("boom")
    assert not Path("/sys/class/net", link.host_dev).exists()
    assert link.namespace not in _namespaces()


# -- one short real run ----------------------------------------------------------------------------


@needs_root
@pytest.mark.kafka
def test_a_short_run_counts_what_the_sender_sent_and_kafka_holds(kafka_bootstrap: str) -> None:
    rate, seconds = 3000, 2.0
    res = CliRunner().invoke(
        cli,
        ["bench", "capture", "--rates", str(rate), "--seconds", str(seconds), "--json",
         "--bootstrap", kafka_bootstrap],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    assert "-> ok" in res.stderr  # the progress line of the rate
    [row] = result["rows"]
    sent = round(rate * seconds)
    # the sender's own count, the host end's rx_packets counter and the capture agree
    assert row["sent"] == row["link_rx"] == row["captured"] == row["decoded"] == sent
    assert row["send_errors"] == 0 and row["link_drops"] == 0 and row["kernel_drops"] == 0
    assert abs(row["sent_pps"] - rate) <= SENDER_TOLERANCE * rate
    assert row["produced"] == row["acknowledged"] == sent and row["failed"] == 0
    assert row["status"] == "ok" and result["sustained_pps"] == rate
    assert 0 < row["capture_cpu_pct"] < 200 and row["threads_cpu_pct"].get("MainThread", 0) > 0
    # brute force: read the topic back; every frame the sender sent is one record, frame by frame
    records = records_of(consume_all(kafka_bootstrap, row["topic"])).to_pylist()
    assert len(records) == sent
    assert {(r["src_ip"], r["dst_ip"], r["iface"]) for r in records} == {
        (NS_ADDRESS, PEER_ADDRESS, result["link"]["host_dev"])
    }
    frames = build_frames(64)
    expected = Counter(frames[k % 64] for k in range(sent))
    by_port = {40000 + i if i % 4 != 3 else 50000 + i: f for i, f in enumerate(frames)}
    assert Counter(by_port[r["src_port"]] for r in records) == expected
    # nothing is left behind
    assert not Path("/sys/class/net", result["link"]["host_dev"]).exists()
    assert result["link"]["namespace"] not in _namespaces()
