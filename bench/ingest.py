"""The ingest benchmark (``netmon bench ingest``): parse and replay rates, Scapy as the baseline.

On one capture (generated: ``packets`` frames of the baseline scenario in a temporary directory,
or a given file), in one run:

1. parse: :func:`bench.parse.bench_parse` — our reader over the whole file, and Scapy's
   full dissection of the first ``scapy_packets`` packets; the ratio of the two rates;
2. replay: :func:`ingest.replay.replay` as fast as possible into a real Kafka broker (the given
   bootstrap, or a temporary :class:`netmon.broker.LocalBroker` in a temporary state directory),
   every record acknowledged; the rate counts from the call to the last acknowledgement (after one
   warm-up replay); its baseline: the same producer sending one message per packet (the first
   ``baseline_packets`` records, pre-encoded), and the ratio of the two rates;
3. optionally (``tune``) the replay rate over a grid of records per message, linger and
   compression, to choose the defaults.

Targets (issue 3): parse >= 1,000,000 packets/s, replay >= 300,000 packets/s on 2 cores.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.generate import generate
from ingest.replay import ReplayOptions, replay

__all__ = [
    "PARSE_TARGET_PPS",
    "REPLAY_TARGET_PPS",
    "ReplaySettings",
    "bench_ingest",
    "format_report",
    "temporary_broker",
]

PARSE_TARGET_PPS = 1_000_000
REPLAY_TARGET_PPS = 300_000
TUNE_GRID = [
    (rpm, linger, comp)
    for comp in ("lz4", "none", "gzip")
    for rpm in (500, 1000, 2000, 5000)
    for linger in (5, 20, 50)
    if comp == "lz4" or linger == 20
]


@dataclass(frozen=True)
class ReplaySettings:
    records_per_message: int = 1000
    linger_ms: int = 20
    compression: str = "lz4"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def temporary_broker(state_dir: Path) -> Iterator[str]:
    """A project broker on free ports with its state in ``state_dir``; yields its bootstrap."""
    from netmon.broker import LocalBroker
    from netmon.config import load_config

    cfg = load_config(None, env={}).replace(
        paths={"state_dir": state_dir, "data_dir": state_dir / "data"},
        kafka={"port": _free_port(), "controller_port": _free_port()},
    )
    broker = LocalBroker(cfg)
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _parse(path: Path, scapy_packets: int) -> dict[str, Any]:
    try:
        from bench.parse import bench_parse
    except ImportError:  # the parse benchmark's module is optional here
        return _parse_fallback(path)
    return bench_parse(path, scapy_packets=scapy_packets)


def _parse_fallback(path: Path) -> dict[str, Any]:
    from ingest import read_records

    began = time.perf_counter()
    reader = read_records(path)
    for _batch in reader:
        pass
    seconds = time.perf_counter() - began
    return {
        "packets": reader.summary.frames,
        "seconds": round(seconds, 4),
        "packets_per_s": round(reader.summary.frames / seconds),
    }


def _replay_rate(path: Path, bootstrap: str, settings: ReplaySettings) -> dict[str, Any]:
    topic = f"netmon.bench.{uuid.uuid4().hex[:8]}"
    opts = ReplayOptions(
        records_per_message=settings.records_per_message,
        linger_ms=settings.linger_ms,
        compression=settings.compression,
    )
    summary = replay(path, bootstrap=bootstrap, topic=topic, options=opts, progress=False)
    if summary.acknowledged != summary.produced or summary.failed:
        raise RuntimeError(f"replay lost records: {summary.acknowledged} of {summary.produced} acknowledged")
    return {
        "records_per_message": settings.records_per_message,
        "linger_ms": settings.linger_ms,
        "compression": summary.compression,
        "packets": summary.produced,
        "acknowledged": summary.acknowledged,
        "messages": summary.messages,
        "seconds": summary.elapsed_s,
        "packets_per_s": round(summary.rate_pps),
    }


def _per_packet_rate(path: Path, bootstrap: str, count: int) -> dict[str, Any]:
    """Baseline: the first ``count`` records, one Kafka message each (pre-encoded, only sending timed)."""
    from ingest import read_records
    from ingest.producer import PacketProducer
    from ingest.wire import encode_messages

    messages: list[tuple[bytes, list[tuple[str, bytes]]]] = []
    for batch in read_records(path, batch_size=count):
        messages.extend(encode_messages(batch.slice(0, count - len(messages)), 1))
        if len(messages) >= count:
            break
    topic = f"netmon.bench.{uuid.uuid4().hex[:8]}"
    with PacketProducer(bootstrap, topic, compression="lz4", linger_ms=20, max_pending=1 << 30) as producer:
        began = time.perf_counter()
        for value, headers in messages:
            producer.send(value, headers, 1)
        producer.flush()
        seconds = time.perf_counter() - began
    return {
        "packets": len(messages),
        "seconds": round(seconds, 3),
        "packets_per_s": round(len(messages) / seconds),
    }


def bench_ingest(
    *,
    packets: int = 1_000_000,
    file: str | Path | None = None,
    bootstrap: str | None = None,
    scapy_packets: int = 20_000,
    baseline_packets: int = 20_000,
    settings: ReplaySettings | None = None,
    tune: bool = False,
    say: Callable[[str], None] = lambda _line: None,
) -> dict[str, Any]:
    """Run the ingest benchmark; return every figure (see the module docstring)."""
    settings = settings or ReplaySettings()
    with tempfile.TemporaryDirectory(prefix="netmon-bench-") as tmp:
        out: dict[str, Any] = {}
        if file is None:
            path = Path(tmp) / "bench.pcap"
            say(f"generating {packets:,} packets ...")
            gen = generate(path, packets=packets, seed=1)
            out["generate"] = {
                "packets": gen.packets,
                "seconds": gen.elapsed_s,
                "packets_per_s": round(gen.rate_pps),
            }
        else:
            path = Path(file)
        out["file"] = {"path": str(path), "bytes": path.stat().st_size}
        say("parsing (netmon reader, then Scapy) ...")
        out["parse"] = _parse(path, scapy_packets)
        with contextlib.ExitStack() as stack:
            if bootstrap is None:
                say("starting a temporary Kafka broker ...")
                bootstrap = stack.enter_context(temporary_broker(Path(tmp) / "state"))
                out["broker"] = f"temporary LocalBroker at {bootstrap}"
            else:
                out["broker"] = bootstrap
            say("replaying into Kafka ...")
            _replay_rate(path, bootstrap, settings)  # warm-up: JIT of the broker, page cache
            out["replay"] = _replay_rate(path, bootstrap, settings)
            say(f"baseline: one message per packet ({baseline_packets:,} packets) ...")
            out["per_packet"] = _per_packet_rate(path, bootstrap, baseline_packets)
            out["replay"]["ratio"] = round(
                out["replay"]["packets_per_s"] / out["per_packet"]["packets_per_s"], 1
            )
            if tune:
                out["tune"] = []
                for rpm, linger, comp in TUNE_GRID:
                    say(f"  tune: {rpm} records/message, linger {linger} ms, {comp}")
                    out["tune"].append(_replay_rate(path, bootstrap, ReplaySettings(rpm, linger, comp)))
    out["targets"] = {
        "parse_packets_per_s": PARSE_TARGET_PPS,
        "replay_packets_per_s": REPLAY_TARGET_PPS,
        "parse_ok": out["parse"]["packets_per_s"] >= PARSE_TARGET_PPS,
        "replay_ok": out["replay"]["packets_per_s"] >= REPLAY_TARGET_PPS,
    }
    return out


def format_report(result: dict[str, Any]) -> list[str]:
    """The benchmark figures as text lines."""
    parse, rep, targets = result["parse"], result["replay"], result["targets"]
    size_mb = result["file"]["bytes"] / 1e6
    lines = [f"file      {result['file']['path']} ({parse['packets']:,} packets, {size_mb:.0f} MB)"]
    if "generate" in result:
        lines.append(
            f"generate  {result['generate']['packets_per_s']:>12,} packets/s  (netmon samples generate)"
        )
    lines.append(f"parse     {parse['packets_per_s']:>12,} packets/s  (netmon reader, whole file)")
    if "scapy_packets_per_s" in parse:
        lines.append(
            f"scapy     {parse['scapy_packets_per_s']:>12,} packets/s  "
            f"(full dissection, first {parse['scapy_packets']:,} packets)"
        )
        lines.append(f"ratio     {parse['ratio']:>12,}x            (parse / scapy)")
    lines.append(
        f"replay    {rep['packets_per_s']:>12,} packets/s  "
        f"(into Kafka, {rep['compression'] or 'no'} compression, "
        f"{rep['records_per_message']} records/message, linger {rep['linger_ms']} ms; "
        f"{rep['acknowledged']:,} acknowledged)"
    )
    base = result["per_packet"]
    lines.append(
        f"baseline  {base['packets_per_s']:>12,} packets/s  "
        f"(one Kafka message per packet, first {base['packets']:,})"
    )
    lines.append(f"ratio     {rep['ratio']:>12,}x            (replay / baseline)")
    lines.append(f"broker    {result['broker']}")
    for item in result.get("tune", []):
        lines.append(
            f"tune      {item['packets_per_s']:>12,} packets/s  {item['records_per_message']:>5} rec/msg  "
            f"linger {item['linger_ms']:>2} ms  {item['compression'] or 'none'}"
        )
    verdict = lambda ok: "ok" if ok else "BELOW TARGET"  # noqa: E731
    lines.append(
        f"targets   parse >= {targets['parse_packets_per_s']:,}/s: {verdict(targets['parse_ok'])}; "
        f"replay >= {targets['replay_packets_per_s']:,}/s: {verdict(targets['replay_ok'])}"
    )
    return lines
