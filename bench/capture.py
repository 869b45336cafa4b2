"""The live-capture benchmark (``netmon bench capture``): the highest rate capture follows with no loss.

One run builds a private link, then measures :func:`ingest.capture.capture` (the code of
``netmon capture``, in this process) over a ladder of packet rates:

1. a network namespace and a veth pair, named after this process's id: one end in the
   namespace (address 10.231.0.1/30, IPv6 off), the other on the host (no address, IPv6 off), so
   the only frames on the link are the benchmark's own; both are removed at the end, also on an
   error, Ctrl-C or SIGTERM;
2. a Kafka broker: the given bootstrap, or a temporary :func:`bench.ingest.temporary_broker`;
3. for each rate, a capture on the host end into a fresh topic, and a sender in the namespace
   (this module run by ``ip netns exec``: a raw ``AF_PACKET`` socket sending pre-built
   Ethernet/IPv4 UDP and TCP frames, paced: after each sleep of at most 1 ms it sends every
   frame due, :func:`sender_main`) for ``seconds``. The
   frames carry a destination MAC that is not the host end's, so the host's IP stack drops them
   unseen and sends nothing back; capture sees every one. When the sender is done, the capture
   gets up to :data:`DRAIN_S` seconds to read what is queued, then stops, flushes and counts the
   records Kafka acknowledged.

Per rate: the rate asked, the frames and rate the sender achieved (its own count, and the host
end's ``rx_packets`` counter as a second witness), frames captured, records acknowledged, the
socket's kernel drops (``PACKET_STATISTICS``), drops on the link, and the CPU of the capture
process (all of it, and per thread) and of the sender while the sender ran.

A rate is *sustained* (:func:`keeps_up`) when the sender held it (its achieved rate within
:data:`SENDER_TOLERANCE` of the asked rate) and the capture lost nothing: zero kernel drops,
captured == sent, acknowledged == captured. The sustained rate (:func:`sustained_rate`) is the
highest sustained rate of the ladder. A rate the sender could not hold proves nothing either way
and is marked ``sender-limited``. Needs root (namespaces, raw sockets) and ``ip`` (iproute2).

Why a Python sender rather than ``tcpreplay``: no new system dependency, an exact count of the
frames handed to the kernel, and a rate it can hold well above what the capture follows (its
achieved rate is measured at every rate and the verdict says when it fell short).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DRAIN_S",
    "Link",
    "NS_ADDRESS",
    "PEER_ADDRESS",
    "RateResult",
    "SENDER_TOLERANCE",
    "bench_capture",
    "build_frames",
    "format_report",
    "keeps_up",
    "parse_rates",
    "private_link",
    "sender_held",
    "sender_main",
    "sustained_rate",
    "verdict",
]

#: The sender must achieve at least (1 - this) of the asked rate for the rate to count.
SENDER_TOLERANCE = 0.02
#: After the sender is done, the capture reads what is queued for at most this long.
DRAIN_S = 2.0
#: The namespace end's address (a private /30), and the address the frames are sent to.
NS_ADDRESS, PEER_ADDRESS = "10.231.0.1", "10.231.0.2"
#: Locally administered MACs: the sender's, and a destination that is not the host end's.
SRC_MAC, DST_MAC = bytes.fromhex("026e6d000001"), bytes.fromhex("026e6d000002")
_SENDER_CODE = "import sys; from bench.capture import sender_main; sys.exit(sender_main(sys.argv[1:]))"
_REPO = Path(__file__).resolve().parents[1]


# -- pure parts ----------------------------------------------------------------------------------


def parse_rates(text: str) -> list[int]:
    """The ladder of ``--rates``: comma-separated packets/s (``k`` = thousand), ascending, distinct.

    >>> parse_rates("5000, 10k,20000")
    [5000, 10000, 20000]
    >>> parse_rates("1.5k")
    [1500]
    """
    rates: list[int] = []
    for item in text.split(","):
        word = item.strip().lower().replace("_", "")
        if not word:
            raise ValueError(f"empty rate in {text!r}")
        scale = 1000 if word.endswith("k") else 1
        try:
            value = float(word[:-1] if scale == 1000 else word) * scale
        except ValueError:
            raise ValueError(f"not a rate: {item.strip()!r} (packets/s, e.g. 20000 or 20k)") from None
        if value != int(value) or value < 1:
            raise ValueError(f"a rate must be a whole number >= 1 packet/s, got {item.strip()!r}")
        rates.append(int(value))
    if rates != sorted(set(rates)):
        raise ValueError(f"rates must be ascending and distinct, got {text!r}")
    return rates


@dataclass
class RateResult:
    """The figures of one rate of the ladder."""

    rate: int  #: asked, packets/s
    seconds: float  #: the sender's window, as asked
    sent: int = 0  #: frames the sender sent (its count: send() calls that succeeded)
    send_errors: int = 0  #: send() calls the kernel refused (ENOBUFS, ...)
    sent_pps: float = 0.0  #: sent / the sender's elapsed time (at least ``seconds``)
    sender_cpu_pct: float = 0.0  #: the sender process's user + system CPU over its window
    link_rx: int = 0  #: frames the host end received (its rx_packets counter)
    link_drops: int = 0  #: frames the link dropped (host end rx_dropped + namespace end tx_dropped)
    captured: int = 0  #: frames the capture read (CaptureSummary.packets)
    decoded: int = 0
    produced: int = 0
    acknowledged: int = 0  #: records the broker acknowledged
    failed: int = 0
    kernel_drops: int = 0  #: PACKET_STATISTICS tp_drops of the capture socket
    capture_cpu_pct: float = 0.0  #: the capture process's CPU (all threads) while the sender ran
    threads_cpu_pct: dict[str, float] = field(default_factory=dict)  #: the same, per thread
    drain_s: float = 0.0  #: how long the capture needed after the sender's last frame
    load1: float = 0.0  #: the 1-minute load average at the end of the rate
    topic: str = ""
    status: str = ""  #: see :func:`verdict`

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sender_held(row: RateResult) -> bool:
    """Did the sender achieve the asked rate (within :data:`SENDER_TOLERANCE`)?"""
    return row.sent_pps >= (1.0 - SENDER_TOLERANCE) * row.rate


def keeps_up(row: RateResult) -> bool:
    """The capture lost nothing at a rate the sender held.

    >>> r = RateResult(rate=1000, seconds=1, sent=1000, sent_pps=1000, captured=1000, acknowledged=1000)
    >>> keeps_up(r), keeps_up(RateResult(**{**r.to_dict(), "kernel_drops": 1}))
    (True, False)
    """
    return (
        sender_held(row)
        and row.sent > 0
        and row.kernel_drops == 0
        and row.captured == row.sent
        and row.acknowledged == row.captured
        and row.failed == 0
    )


def verdict(row: RateResult) -> str:
    """``ok``; ``sender-limited`` (the sender fell short: no conclusion); ``kernel-drops``;
    ``missed`` (captured < sent without kernel drops: still queued at the stop, or dropped on the
    link); ``extra`` (captured > sent: frames that are not the sender's reached the link);
    ``unacknowledged`` (captured, but not every record acknowledged)."""
    if not sender_held(row) or row.sent == 0:
        return "sender-limited"
    if row.kernel_drops:
        return "kernel-drops"
    if row.captured != row.sent:
        return "missed" if row.captured < row.sent else "extra"
    if row.acknowledged != row.captured or row.failed:
        return "unacknowledged"
    return "ok"


def sustained_rate(rows: Sequence[RateResult]) -> int | None:
    """The highest asked rate that :func:`keeps_up` (None when none does).

    >>> ok = RateResult(rate=10, seconds=1, sent=10, sent_pps=10, captured=10, acknowledged=10)
    >>> drop = RateResult(rate=20, seconds=1, sent=20, sent_pps=20, captured=15, kernel_drops=5)
    >>> sustained_rate([ok, drop]), sustained_rate([drop])
    (10, None)
    """
    good = [row.rate for row in rows if keeps_up(row)]
    return max(good) if good else None


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def build_frames(count: int = 64) -> list[bytes]:
    """``count`` distinct Ethernet/IPv4 frames from :data:`NS_ADDRESS` to :data:`PEER_ADDRESS`.

    Three in four are UDP (source port 40000 + i, destination 5000 + i % 8, 18-146 bytes of
    payload), one in four TCP (PSH+ACK, source port 50000 + i, destination 443); checksums valid.
    """
    src, dst = socket.inet_aton(NS_ADDRESS), socket.inet_aton(PEER_ADDRESS)
    frames = []
    for i in range(count):
        payload = bytes((i + j) & 0xFF for j in range(18 + (i % 5) * 32))
        if i % 4 == 3:
            proto = 6
            header = struct.pack("!HHIIBBHHH", 50000 + i, 443, 1000 * i, 7, 5 << 4, 0x18, 64240, 0, 0)
        else:
            proto = 17
            header = struct.pack("!HHHH", 40000 + i, 5000 + i % 8, 8 + len(payload), 0)
        segment = header + payload
        pseudo = src + dst + struct.pack("!BBH", 0, proto, len(segment))
        check = _checksum(pseudo + segment) or 0xFFFF
        at = 16 if proto == 6 else 6
        segment = segment[:at] + struct.pack("!H", check) + segment[at + 2 :]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(segment), i, 0, 64, proto, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
        frames.append(DST_MAC + SRC_MAC + b"\x08\x00" + ip + segment)
    return frames


# -- the sender (runs in the namespace) -----------------------------------------------------------


def _send(
    dev: str, rate: int, seconds: float, frames: Sequence[bytes], started: Callable[[], None]
) -> dict[str, Any]:
    """Send ``rate * seconds`` frames (cycling through ``frames``) paced at ``rate``; stop at the
    window's end (plus 5 %) if behind. Frame k is due at ``k / rate`` s; each wake-up sends every
    frame due (a burst of at most 1024), then sleeps until the next is due (at most 1 ms; Linux
    sleeps at least ~50 us, so at high rates each burst holds several frames)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: receives nothing
    sock.bind((dev, 0))
    send, n, total = sock.send, len(frames), round(rate * seconds)
    sent = errors = 0
    cpu0 = time.process_time()
    started()
    start = time.perf_counter()
    deadline = start + seconds * 1.05
    while sent + errors < total:
        now = time.perf_counter()
        if now >= deadline:
            break
        due = min(total, int((now - start) * rate) + 1, sent + errors + 1024)
        while sent + errors < due:
            try:
                send(frames[(sent + errors) % n])
                sent += 1
            except OSError:
                errors += 1
        wait = start + (sent + errors) / rate - time.perf_counter()
        if wait > 0:
            time.sleep(min(wait, 0.001))
    end = time.perf_counter()
    elapsed = max(end - start, seconds)  # a sender on time sends the last frame before the end
    rest = start + seconds - end
    if rest > 0:
        time.sleep(rest)
    cpu = time.process_time() - cpu0
    sock.close()
    return {
        "sent": sent,
        "errors": errors,
        "target": total,
        "elapsed_s": round(elapsed, 4),
        "sent_pps": round(sent / elapsed, 1),
        "cpu_pct": round(100 * cpu / elapsed, 1),
    }


def sender_main(argv: Sequence[str]) -> int:
    """``DEV RATE SECONDS [FRAMES]``: print ``start`` when sending begins, then the result as JSON."""
    dev, rate, seconds = argv[0], int(argv[1]), float(argv[2])
    frames = build_frames(int(argv[3]) if len(argv) > 3 else 64)
    result = _send(dev, rate, seconds, frames, lambda: print("start", flush=True))
    print(json.dumps(result), flush=True)
    return 0


# -- the link ----------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and run.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {run.stderr.strip() or run.returncode}")
    return run


@dataclass(frozen=True)
class Link:
    """The benchmark's namespace and veth pair."""

    namespace: str
    host_dev: str  #: the end the capture listens on (host namespace)
    ns_dev: str  #: the end the sender sends on (in ``namespace``)

    def host_counters(self) -> tuple[int, int]:
        """(rx_packets, rx_dropped) of the host end."""
        base = Path("/sys/class/net", self.host_dev, "statistics")
        return int((base / "rx_packets").read_text()), int((base / "rx_dropped").read_text())

    def ns_tx_dropped(self) -> int:
        out = _ip("-n", self.namespace, "-j", "-s", "link", "show", "dev", self.ns_dev).stdout
        stats = json.loads(out)[0].get("stats64", {}).get("tx", {})
        return int(stats.get("dropped", 0))


def _disable_ipv6(path: Path) -> None:
    with contextlib.suppress(OSError):  # IPv6 off (or absent) already
        path.write_text("1")


def _remove(link: Link) -> None:
    _ip("netns", "del", link.namespace, check=False)
    if Path("/sys/class/net", link.host_dev).exists():  # the pair was not (yet) moved
        _ip("link", "del", link.host_dev, check=False)


@contextlib.contextmanager
def private_link(tag: str | None = None) -> Iterator[Link]:
    """A namespace and a veth pair (see the module docstring), removed on the way out."""
    if os.geteuid() != 0:
        raise PermissionError("bench capture needs root (network namespaces, raw sockets)")
    if shutil.which("ip") is None:
        raise RuntimeError("bench capture needs the ip command (iproute2)")
    tag = tag or str(os.getpid())
    link = Link(f"netmon-capbench-{tag}", f"ncb{tag}h", f"ncb{tag}n")
    try:
        _ip("netns", "add", link.namespace)
        _ip(
            "link", "add", link.host_dev, "type", "veth", "peer", "name", link.ns_dev, "netns", link.namespace
        )
        _disable_ipv6(Path("/proc/sys/net/ipv6/conf", link.host_dev, "disable_ipv6"))
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                link.namespace,
                "sysctl",
                "-qw",
                f"net.ipv6.conf.{link.ns_dev}.disable_ipv6=1",
            ],
            capture_output=True,
            timeout=30,
        )
        _ip("-n", link.namespace, "addr", "add", f"{NS_ADDRESS}/30", "dev", link.ns_dev)
        _ip("-n", link.namespace, "link", "set", link.ns_dev, "address", SRC_MAC.hex(":"), "up")
        _ip("link", "set", link.host_dev, "up")
        _wait_up(link.host_dev)
        yield link
    finally:
        _remove(link)


def _wait_up(dev: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while Path("/sys/class/net", dev, "operstate").read_text().strip() != "up":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{dev} did not come up")
        time.sleep(0.02)


# -- CPU ----------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _thread_ticks() -> dict[int, int]:
    """utime + stime (clock ticks) of each live thread of this process."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = int(fields[11]) + int(fields[12])
    return out


def _thread_names() -> dict[int, str]:
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) not in names:
            with contextlib.suppress(OSError):
                names[int(task.name)] = (task / "comm").read_text().strip()
    return names


@dataclass
class _CpuWindow:
    wall: float = 0.0
    process: float = 0.0
    ticks: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    @classmethod
    def now(cls) -> _CpuWindow:
        return cls(time.monotonic(), time.process_time(), _thread_ticks(), _thread_names())

    def since(self, start: _CpuWindow) -> tuple[float, dict[str, float]]:
        """The process's CPU % between ``start`` and this instant, and per thread (named)."""
        wall = max(self.wall - start.wall, 1e-9)
        names = {**start.names, **self.names}
        threads: dict[str, float] = {}
        for tid, ticks in self.ticks.items():
            used = (ticks - start.ticks.get(tid, 0)) / _TICK
            name = names.get(tid, str(tid))
            threads[name] = round(threads.get(name, 0.0) + 100 * used / wall, 1)
        busy = {k: v for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v >= 0.5}
        return round(100 * (self.process - start.process) / wall, 1), busy


# -- one rate -------------------------------------------------------------------------------------


class _Run:
    """One rate: the sender launched when the capture listens; stop once it is done and drained."""

    def __init__(self, link: Link, row: RateResult, frames: int) -> None:
        self.link, self.row, self.frames = link, row, frames
        self.stop = threading.Event()
        self.summary: Any = None
        self.sender: subprocess.Popen[str] | None = None
        self.result: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.cpu: tuple[_CpuWindow, _CpuWindow] | None = None
        self.watcher = threading.Thread(target=self._watch, name="bench-watcher", daemon=True)

    def status(self, summary: Any) -> None:
        self.summary = summary  # the live summary: its counters grow as the capture reads

    def ready(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
        }
        self.sender = subprocess.Popen(
            ["ip", "netns", "exec", self.link.namespace, sys.executable, "-c", _SENDER_CODE,
             self.link.ns_dev, str(self.row.rate), str(self.row.seconds), str(self.frames)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.watcher.start()

    def _watch(self) -> None:
        try:
            sender = self.sender
            assert sender is not None and sender.stdout is not None and sender.stderr is not None
            first = sender.stdout.readline().strip()
            if first != "start":
                raise RuntimeError(f"the sender did not start: {first or sender.stderr.read().strip()}")
            began = _CpuWindow.now()
            out, err = sender.communicate(timeout=self.row.seconds * 2 + 30)
            if sender.returncode != 0:
                raise RuntimeError(f"the sender failed ({sender.returncode}): {err.strip()}")
            self.result = json.loads(out.strip().splitlines()[-1])
            done = time.monotonic()
            while time.monotonic() - done < DRAIN_S:
                if self.summary is not None and self.summary.packets >= self.result["sent"]:
                    break
                time.sleep(0.01)
            self.row.drain_s = round(time.monotonic() - done, 3)
            self.cpu = (began, _CpuWindow.now())
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc
        finally:
            self.stop.set()

    def close(self) -> None:
        if self.sender is not None and self.sender.poll() is None:
            self.sender.kill()
            self.sender.communicate(timeout=10)
        self.stop.set()
        if self.watcher.is_alive():
            self.watcher.join(timeout=10)


def _measure_rate(
    link: Link, bootstrap: str, rate: int, seconds: float, frames: int, capture_kwargs: dict[str, Any]
) -> RateResult:
    from ingest.capture import CaptureOptions, capture

    row = RateResult(rate=rate, seconds=seconds, topic=f"netmon.bench.capture.{uuid.uuid4().hex[:8]}.{rate}")
    run = _Run(link, row, frames)
    rx0, dropped0 = link.host_counters()
    tx_dropped0 = link.ns_tx_dropped()
    try:
        summary = capture(
            bootstrap=bootstrap,
            topic=row.topic,
            options=CaptureOptions(iface=link.host_dev, **capture_kwargs),
            status=run.status,
            stop=run.stop,
            ready=run.ready,
        )
    finally:
        run.close()
    if summary.interrupted:
        raise KeyboardInterrupt
    if run.error is not None:
        raise run.error
    rx1, dropped1 = link.host_counters()
    res = run.result
    row.sent, row.send_errors, row.sent_pps = res["sent"], res["errors"], res["sent_pps"]
    row.sender_cpu_pct = res["cpu_pct"]
    row.link_rx, row.link_drops = rx1 - rx0, (dropped1 - dropped0) + (link.ns_tx_dropped() - tx_dropped0)
    row.captured, row.decoded, row.produced = summary.packets, summary.decoded, summary.produced
    row.acknowledged, row.failed, row.kernel_drops = (
        summary.acknowledged,
        summary.failed,
        summary.kernel_drops,
    )
    if run.cpu is not None:
        row.capture_cpu_pct, row.threads_cpu_pct = run.cpu[1].since(run.cpu[0])
    row.load1 = round(os.getloadavg()[0], 2)
    row.status = verdict(row)
    return row


# -- the benchmark -------------------------------------------------------------------------------


def bench_capture(
    *,
    rates: Sequence[int],
    seconds: float = 10.0,
    bootstrap: str | None = None,
    frames: int = 64,
    capture_options: dict[str, Any] | None = None,
    say: Callable[[str], None] = lambda _line: None,
) -> dict[str, Any]:
    """Run the ladder (see the module docstring); return every figure.

    ``capture_options``: extra :class:`ingest.capture.CaptureOptions` fields (``records_per_message``,
    ``linger_ms``, ``compression``: what ``netmon capture`` takes from the configuration).
    """
    from ingest.producer import sigterm_as_interrupt

    if not rates or not seconds > 0:
        raise ValueError("bench capture needs at least one rate and seconds > 0")
    out: dict[str, Any] = {
        "seconds": seconds,
        "sender": "python AF_PACKET raw socket in a network namespace (ip netns exec), paced bursts",
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "rows": [],
    }
    rows: list[RateResult] = []
    with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="netmon-bench-capture-") as tmp:
        with private_link() as link, contextlib.ExitStack() as stack:
            out["link"] = {"namespace": link.namespace, "host_dev": link.host_dev, "ns_dev": link.ns_dev}
            if bootstrap is None:
                say("starting a temporary Kafka broker ...")
                from bench.ingest import temporary_broker

                bootstrap = stack.enter_context(temporary_broker(Path(tmp) / "state"))
                out["broker"] = f"temporary LocalBroker at {bootstrap}"
            else:
                out["broker"] = bootstrap
            for rate in rates:
                row = _measure_rate(link, bootstrap, rate, seconds, frames, dict(capture_options or {}))
                rows.append(row)
                out["rows"].append(row.to_dict())
                say(_progress(row))
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["sustained_pps"] = sustained_rate(rows)
    return out


def _progress(row: RateResult) -> str:
    return (
        f"rate {row.rate:>9,}/s: sent {row.sent:,} ({row.sent_pps:,.0f}/s), captured {row.captured:,}, "
        f"acknowledged {row.acknowledged:,}, kernel drops {row.kernel_drops:,}, "
        f"capture CPU {row.capture_cpu_pct:.0f}% -> {row.status}"
    )


def format_report(result: dict[str, Any]) -> list[str]:
    """The figures as a text table, then the sustained rate."""
    head = (
        f"{'asked/s':>9} {'sent/s':>9} {'sent':>9} {'link rx':>9} {'captured':>9} {'acked':>9} "
        f"{'k.drops':>8} {'l.drops':>8} {'cap CPU':>8} {'snd CPU':>8}  status"
    )
    lines = [head]
    for r in result["rows"]:
        lines.append(
            f"{r['rate']:>9,} {r['sent_pps']:>9,.0f} {r['sent']:>9,} {r['link_rx']:>9,} {r['captured']:>9,} "
            f"{r['acknowledged']:>9,} {r['kernel_drops']:>8,} {r['link_drops']:>8,} "
            f"{r['capture_cpu_pct']:>7.0f}% {r['sender_cpu_pct']:>7.0f}%  {r['status']}"
        )
    for r in result["rows"]:
        threads = ", ".join(f"{k} {v:.0f}%" for k, v in r["threads_cpu_pct"].items()) or "-"
        lines.append(f"threads at {r['rate']:,}/s: {threads}")
    sustained = result["sustained_pps"]
    lines.append(
        f"sustained {sustained:,} packets/s with zero kernel drops, captured == sent == acknowledged"
        if sustained
        else "sustained none of the rates"
    )
    lines.append(f"sender    {result['sender']}")
    lines.append(f"broker    {result['broker']}")
    before, after = (" ".join(map(str, result[k])) for k in ("load_before", "load_after"))
    lines.append(f"load      {before} before, {after} after ({result['cpus']} CPUs)")
    return lines
