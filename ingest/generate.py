"""Deterministic synthetic captures with realistic structure (``netmon samples generate``).

A seeded numpy generator draws a host population and a stream of sessions; the frames are packed
with ``struct`` (never Scapy) into a classic pcap (Ethernet, microsecond timestamps, header-only
``snaplen`` by default so files stay small while ``wire_len`` keeps the real size).

Traffic model (every scenario has it as background):

- **Hosts.** Internal clients in ``10.1.0.0/16`` and external servers (random public addresses),
  chosen with Zipf-skewed popularity (exponents 1.1 and 1.3), so a few sources and destinations
  carry most traffic. Each server has a fixed RTT (log-normal, median 30 ms, 1–300 ms), an initial
  TTL minus a hop count, and a service port (443, 80 or 22); two resolvers answer DNS.
- **TCP** (45 % of sessions): SYN (with an MSS option); SYN-ACK one RTT later with
  ``ack = seq + 1``; ACK; a request; the response in MSS-sized segments with a client ACK every
  second segment; FIN/ACK from the client, FIN/ACK from the server, last ACK. 3 % of connection
  attempts are refused (RST/ACK). Sequence and acknowledgement numbers follow the bytes sent.
- **DNS over UDP** (45 %): a query (A or AAAA) to a resolver and its response (an answer record,
  or NXDOMAIN for 3 %), real DNS messages.
- **ICMP echo** (10 %): 1–4 requests a second apart, each answered one RTT later (5 % never are).

IPv4, TCP, UDP and ICMP checksums are valid (payload bytes are zeros except DNS).

Scenarios add, in the middle of the capture: ``syn-flood`` (unanswered SYNs from spoofed sources
to one victim port), ``port-scan`` (one source probes many ports of one host: RST/ACK from closed
ports, SYN-ACK then the scanner's RST from open ones), ``heavy-hitter-burst`` (one client sends a
UDP stream that takes most packets for a while), ``ddos`` (many sources, SYNs and UDP, to one
destination). :func:`generate` returns the attack's parameters (victim, scanner, ...) in its summary,
and the ground truth under ``details["truth"]``: ``attackers`` (listed when at most 100),
``attackers_count``, ``spoofed``, ``victims``, and the attack's first and last packet (``start``,
``end`` ISO-8601; ``start_s``, ``end_s`` seconds after ``start``). ``baseline`` has no attack: empty
lists and null times.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from ingest.pcapwriter import LINKTYPE_ETHERNET, PcapWriter

__all__ = ["DEFAULT_START", "GenerateSummary", "SCENARIOS", "generate", "parse_start"]

SCENARIOS = ("baseline", "syn-flood", "port-scan", "heavy-hitter-burst", "ddos")
DEFAULT_START = "2024-01-01T00:00:00Z"

# Row kinds (the second field of a packet row).
_TCP, _UDP, _DNS_Q, _DNS_R, _ICMP = range(5)
# TCP flag bits.
_FIN, _SYN, _RST, _PSH, _ACK = 0x01, 0x02, 0x04, 0x08, 0x10
_MSS = 1448
_OPEN_SCAN_PORTS = (22, 80, 443, 3306)

_IP = struct.Struct("!BBHHHBBHII")
_TCP_HDR = struct.Struct("!HHIIBBHHH")
_UDP_HDR = struct.Struct("!HHHH")
_ICMP_HDR = struct.Struct("!BBHHH")
_REC = struct.Struct("<IIII")
_DNS_HDR = struct.Struct("!HHHHHH")
_MSS_OPTION = b"\x02\x04\x05\xb4"  # kind 2, length 4, MSS 1460

_WORDS = ("www", "api", "cdn", "mail", "img", "static", "login", "news", "shop", "video")
_DOMAINS = ("example", "acme", "contoso", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka")
_TLDS = ("com", "net", "org", "io")


@dataclass(frozen=True)
class GenerateSummary:
    """What :func:`generate` wrote."""

    path: str
    scenario: str
    packets: int
    bytes: int
    first_ts: str
    last_ts: str
    elapsed_s: float
    rate_pps: float
    #: the attack's parameters (victim, scanner, ...) and the seed/start used
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_start(text: str, option: str = "--start") -> int:
    """An ISO-8601 time (UTC unless it says otherwise) as integer nanoseconds since the epoch.

    >>> parse_start("2024-01-01T00:00:00Z")
    1704067200000000000
    """
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{option} {text!r} is not an ISO-8601 time (e.g. {DEFAULT_START})") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _fold(total: int) -> int:
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    return sum(struct.unpack(f"!{len(data) // 2}H", data))


def _zipf_weights(n: int, exponent: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return w / w.sum()


def _public_addresses(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` distinct random unicast addresses outside private, loopback and link-local ranges."""
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        cand = rng.integers(0x01000000, 0xDF000000, size=2 * n + 16, dtype=np.int64)
        first = cand >> 24
        ok = (first != 10) & (first != 127) & (first != 100)
        ok &= (cand >> 16) != 0xA9FE  # 169.254/16
        ok &= (cand >> 20) != 0xAC1  # 172.16/12
        ok &= (cand >> 16) != 0xC0A8  # 192.168/16
        for a in cand[ok].tolist():
            if a not in seen:
                seen.add(a)
                out.append(a)
                if len(out) == n:
                    break
    return np.array(out, dtype=np.int64)


def _ip_text(addr: int) -> str:
    return ".".join(str((addr >> s) & 255) for s in (24, 16, 8, 0))


class _Network:
    """The host population: clients, servers, resolvers and their fixed properties."""

    def __init__(self, rng: np.random.Generator, packets: int) -> None:
        self.n_clients = int(np.clip(packets // 50, 50, 5000))
        self.n_servers = int(np.clip(packets // 100, 30, 2000))
        order = rng.permutation(self.n_clients)
        self.clients = (0x0A010000 + 1 + order // 250 * 256 + order % 250).astype(np.int64)
        self.client_p = _zipf_weights(self.n_clients, 1.1)
        self.servers = _public_addresses(rng, self.n_servers)
        self.server_p = _zipf_weights(self.n_servers, 1.3)
        self.server_rtt_us = np.clip(rng.lognormal(math.log(30_000), 0.7, self.n_servers), 1000, 300_000)
        self.server_rtt_us = self.server_rtt_us.astype(np.int64)
        self.server_port = rng.choice(np.array([443, 80, 22]), size=self.n_servers, p=[0.7, 0.25, 0.05])
        initial = rng.choice(np.array([64, 128, 255]), size=self.n_servers, p=[0.6, 0.3, 0.1])
        self.server_ttl = initial - rng.integers(4, 20, size=self.n_servers)
        self.resolvers = np.array([0x0A000035, 0x0A000036], dtype=np.int64)  # 10.0.0.53, 10.0.0.54
        self.resolver_p = np.array([0.7, 0.3])
        self.resolver_rtt_us = np.array([800, 12_000], dtype=np.int64)
        self.names = [f"{w}.{d}.{t}" for t in _TLDS for d in _DOMAINS for w in _WORDS]
        self.name_p = _zipf_weights(len(self.names), 1.0)
        self.ttl: dict[int, int] = {
            int(a): int(t) for a, t in zip(self.servers, self.server_ttl, strict=True)
        }


class _Rows:
    """Packet rows: ``(t_us, kind, src, dst, sport, dport, flags, seq, ack, payload_len, aux)``."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def tcp(
        self,
        t: int,
        src: int,
        dst: int,
        sport: int,
        dport: int,
        flags: int,
        seq: int,
        ack: int,
        plen: int = 0,
        win: int = 502,
    ) -> None:
        self.rows.append(
            (t, _TCP, src, dst, sport, dport, flags, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, plen, win)
        )


def _tcp_session(
    r: _Rows,
    t: int,
    c: int,
    s: int,
    sport: int,
    dport: int,
    rtt: int,
    isn_c: int,
    isn_s: int,
    req: int,
    resp: int,
    think: int,
    gap: int,
    close: int,
    refused: bool,
) -> None:
    """One client-side view of a TCP connection (handshake, request, response, teardown)."""
    r.tcp(t, c, s, sport, dport, _SYN, isn_c, 0, win=64240)
    t += rtt
    if refused:
        r.tcp(t, s, c, dport, sport, _RST | _ACK, 0, isn_c + 1, win=0)
        return
    r.tcp(t, s, c, dport, sport, _SYN | _ACK, isn_s, isn_c + 1, win=65160)
    cseq, sseq = isn_c + 1, isn_s + 1
    r.tcp(t + 40, c, s, sport, dport, _ACK, cseq, sseq)
    r.tcp(t + 90, c, s, sport, dport, _PSH | _ACK, cseq, sseq, plen=req)
    cseq += req
    t += 90 + rtt + think
    sent = 0
    nseg = -(-resp // _MSS)
    for i in range(nseg):
        size = min(_MSS, resp - sent)
        last = i == nseg - 1
        r.tcp(t, s, c, dport, sport, (_PSH | _ACK) if last else _ACK, sseq + sent, cseq, plen=size, win=509)
        sent += size
        if i % 2 == 1 or last:
            r.tcp(t + 35, c, s, sport, dport, _ACK, cseq, sseq + sent)
        t += gap
    sseq += sent
    t += close
    r.tcp(t, c, s, sport, dport, _FIN | _ACK, cseq, sseq)
    t += rtt
    r.tcp(t, s, c, dport, sport, _FIN | _ACK, sseq, cseq + 1, win=509)
    r.tcp(t + 45, c, s, sport, dport, _ACK, cseq + 1, sseq + 1)


def _tcp_packets(refused: np.ndarray, resp: np.ndarray) -> np.ndarray:
    nseg = -(-resp // _MSS)
    normal = 7 + nseg + (nseg + 1) // 2
    return np.where(refused, 2, normal)


def _background(rng: np.random.Generator, net: _Network, r: _Rows, target: int, span_us: int) -> None:
    """Sessions (TCP, DNS, ICMP) starting over ``[0, span_us)`` until about ``target`` packets."""
    if target <= 0:
        return
    k = target // 2 + 16  # every session has at least 2 packets... drawn generously, then cut
    kind = rng.choice(3, size=k, p=[0.45, 0.45, 0.10])
    client = rng.choice(net.n_clients, size=k, p=net.client_p)
    server = rng.choice(net.n_servers, size=k, p=net.server_p)
    resolver = rng.choice(2, size=k, p=net.resolver_p)
    name = rng.choice(len(net.names), size=k, p=net.name_p)
    aaaa = rng.random(k) < 0.2
    nxdomain = rng.random(k) < 0.03
    refused = rng.random(k) < 0.03
    unanswered = rng.random(k) < 0.05
    req = rng.integers(80, 700, size=k)
    resp = np.clip(rng.lognormal(math.log(6000), 1.2, size=k), 200, 40 * _MSS).astype(np.int64)
    think = rng.exponential(2000, size=k).astype(np.int64)
    gap = np.clip(rng.lognormal(math.log(120), 0.7, size=k), 10, 5000).astype(np.int64)
    close = rng.exponential(50_000, size=k).astype(np.int64)
    sport = rng.integers(32768, 61000, size=k)
    isn = rng.integers(0, 2**32, size=(k, 2), dtype=np.int64)
    txid = rng.integers(0, 65536, size=k)
    pings = rng.integers(1, 5, size=k)
    per = np.where(kind == 0, _tcp_packets(refused, resp), np.where(kind == 1, 2, 2 * pings))
    per = np.where((kind == 2) & unanswered, pings, per)
    n = int(np.searchsorted(np.cumsum(per), target * 1.03)) + 1
    n = min(n, k)
    start = np.sort(rng.integers(0, span_us, size=n))
    cols = [
        a[:n].tolist()
        for a in (
            kind,
            client,
            server,
            resolver,
            name,
            aaaa,
            nxdomain,
            refused,
            unanswered,
            req,
            resp,
            think,
            gap,
            close,
            sport,
            txid,
            pings,
        )
    ]
    isn_c, isn_s = isn[:n, 0].tolist(), isn[:n, 1].tolist()
    clients, servers = net.clients.tolist(), net.servers.tolist()
    rtts, ports = net.server_rtt_us.tolist(), net.server_port.tolist()
    resolvers, rrtt = net.resolvers.tolist(), net.resolver_rtt_us.tolist()
    rows = r.rows
    for i, t in enumerate(start.tolist()):
        (kd, ci, si, ri, ni, is6, nx, ref, unans, rq, rs, th, gp, cl, sp, tx, pg) = (col[i] for col in cols)
        c = clients[ci]
        if kd == 0:
            _tcp_session(
                r, t, c, servers[si], sp, ports[si], rtts[si], isn_c[i], isn_s[i], rq, rs, th, gp, cl, ref
            )
        elif kd == 1:
            res = resolvers[ri]
            qtype = 28 if is6 else 1
            rows.append((t, _DNS_Q, c, res, sp, 53, 0, tx, ni, qtype, 0))
            answer = -1 if nx else servers[ni % len(servers)]
            rows.append((t + rrtt[ri] + th // 8, _DNS_R, res, c, 53, sp, 0, tx, ni, qtype, answer))
        else:
            ident = tx
            for p in range(pg):
                tp = t + p * 1_000_000
                rows.append((tp, _ICMP, c, servers[si], 0, 0, 8, ident, p + 1, 56, 0))
                if not unans:
                    rows.append((tp + rtts[si], _ICMP, servers[si], c, 0, 0, 0, ident, p + 1, 56, 0))


def _attack(
    rng: np.random.Generator, net: _Network, r: _Rows, scenario: str, n_att: int, span_us: int
) -> dict:
    """Add the scenario's attack rows (``n_att`` packets, about) in the middle of the capture."""
    details: dict[str, Any] = {}
    if scenario == "baseline" or n_att <= 0:
        return details
    lo, hi = int(span_us * 0.3), int(span_us * 0.7)
    if scenario == "syn-flood":
        victim, port = int(net.servers[0]), int(net.server_port[0])
        src = _public_addresses(rng, min(n_att, 50_000))
        pick = rng.integers(0, len(src), size=n_att)
        times = np.sort(rng.integers(lo, hi, size=n_att)).tolist()
        sports = rng.integers(1024, 65536, size=n_att).tolist()
        seqs = rng.integers(0, 2**32, size=n_att, dtype=np.int64).tolist()
        srcs = src[pick].tolist()
        for t, s, sp, sq in zip(times, srcs, sports, seqs, strict=True):
            r.tcp(t, s, victim, sp, port, _SYN, sq, 0, win=1024)
        details.update(victim=_ip_text(victim), victim_port=port, attack_packets=n_att)
        used = int(np.unique(pick).size)  # addresses of the pool that really sent
        details["truth"] = _truth([], [victim], times[0], times[-1], attackers_count=used, spoofed=True)
    elif scenario == "port-scan":
        scanner, target = 0xC633_64C8, 0x0A00_000A  # 198.51.100.200 -> 10.0.0.10
        ports = (rng.permutation(65535)[: max(1, n_att // 2)] + 1).tolist()
        for p in _OPEN_SCAN_PORTS:
            if p not in ports:
                ports[len(ports) // 2 + p % 7] = p
        step = max(1, (hi - lo) // (len(ports) + 1))
        seqs = rng.integers(0, 2**32, size=len(ports), dtype=np.int64).tolist()
        rtt = 400
        for i, (p, sq) in enumerate(zip(ports, seqs, strict=True)):
            t = lo + i * step
            r.tcp(t, scanner, target, 45_678, p, _SYN, sq, 0, win=1024)
            if p in _OPEN_SCAN_PORTS:
                r.tcp(t + rtt, target, scanner, p, 45_678, _SYN | _ACK, sq ^ 0x5A5A5A5A, sq + 1, win=65160)
                r.tcp(t + rtt + 30, scanner, target, 45_678, p, _RST, sq + 1, 0, win=0)
            else:
                r.tcp(t + rtt, target, scanner, p, 45_678, _RST | _ACK, 0, sq + 1, win=0)
        net.ttl.setdefault(target, 64)
        details.update(
            scanner=_ip_text(scanner),
            target=_ip_text(target),
            ports=len(ports),
            open_ports=list(_OPEN_SCAN_PORTS),
        )
        last = lo + (len(ports) - 1) * step + rtt + (30 if ports[-1] in _OPEN_SCAN_PORTS else 0)
        details["truth"] = _truth([scanner], [target], lo, last)
    elif scenario == "heavy-hitter-burst":
        heavy, dst = int(net.clients[10 % net.n_clients]), int(net.servers[5 % net.n_servers])
        b_lo, b_hi = int(span_us * 0.4), int(span_us * 0.6)
        times = np.sort(rng.integers(b_lo, b_hi, size=n_att)).tolist()
        rows = r.rows
        for t in times:
            rows.append((t, _UDP, heavy, dst, 40_000, 5001, 0, 0, 0, 1200, 0))
        details.update(
            heavy_hitter=_ip_text(heavy),
            destination=_ip_text(dst),
            burst_start_s=b_lo / 1e6,
            burst_end_s=b_hi / 1e6,
            attack_packets=n_att,
        )
        details["truth"] = _truth([heavy], [dst], times[0], times[-1])
    elif scenario == "ddos":
        victim, port = int(net.servers[1]), 80
        n_src = int(np.clip(n_att // 5, 100, 20_000))
        src = _public_addresses(rng, n_src)
        pick = rng.integers(0, n_src, size=n_att)
        times = np.sort(rng.integers(lo, hi, size=n_att)).tolist()
        is_syn = (rng.random(n_att) < 0.5).tolist()
        sports = rng.integers(1024, 65536, size=n_att).tolist()
        seqs = rng.integers(0, 2**32, size=n_att, dtype=np.int64).tolist()
        rows = r.rows
        for t, s, syn, sp, sq in zip(times, src[pick].tolist(), is_syn, sports, seqs, strict=True):
            if syn:
                r.tcp(t, s, victim, sp, port, _SYN, sq, 0, win=1024)
            else:
                rows.append((t, _UDP, s, victim, sp, port, 0, 0, 0, 512, 0))
        details.update(victim=_ip_text(victim), victim_port=port, sources=n_src, attack_packets=n_att)
        attackers = src[np.unique(pick)].tolist()  # the sources that really sent
        details["truth"] = _truth(attackers, [victim], times[0], times[-1])
    else:  # pragma: no cover - checked by generate()
        raise ValueError(scenario)
    return details


#: ground truth lists at most this many attackers (a DDoS has thousands; the count is always there)
_TRUTH_ATTACKERS = 100


def _truth(
    attackers: list[int],
    victims: list[int],
    start_us: int,
    end_us: int,
    *,
    attackers_count: int | None = None,
    spoofed: bool = False,
) -> dict[str, Any]:
    """What an evaluation needs to know about the attack (times still offsets, made ISO later)."""
    count = len(attackers) if attackers_count is None else attackers_count
    return {
        "attackers": [_ip_text(a) for a in attackers] if count <= _TRUTH_ATTACKERS else [],
        "attackers_count": count,
        "spoofed": spoofed,
        "victims": [_ip_text(v) for v in victims],
        "start_us": int(start_us),
        "end_us": int(end_us),
    }


def _dns_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00"


def _write(rows: list[tuple], path: Path, start_ns: int, snaplen: int, net: _Network) -> int:
    """Pack the (sorted) rows into pcap records; return the file size."""
    qnames = [_dns_name(n) for n in net.names]
    ttl_of = net.ttl
    ipid: dict[int, int] = {}
    macs: dict[int, bytes] = {}
    zeros = bytes(max(snaplen, 1))
    start_us = start_ns // 1000
    chunk: list[bytes] = []
    ip_pack, tcp_pack, udp_pack, icmp_pack, rec_pack = (
        _IP.pack,
        _TCP_HDR.pack,
        _UDP_HDR.pack,
        _ICMP_HDR.pack,
        _REC.pack,
    )
    with PcapWriter(path, linktype=LINKTYPE_ETHERNET, snaplen=snaplen) as out:
        for t, kind, src, dst, sport, dport, flags, seq, ack, plen, aux in rows:
            ms = macs.get(src)
            if ms is None:
                ms = macs[src] = b"\x02\x00" + src.to_bytes(4, "big")
            md = macs.get(dst)
            if md is None:
                md = macs[dst] = b"\x02\x00" + dst.to_bytes(4, "big")
            ttl = ttl_of.get(src)
            if ttl is None:
                ttl = ttl_of[src] = 64 if src >> 24 == 10 else 40 + src % 80
            ident = ipid.get(src, (src * 2654435761) & 0xFFFF)
            ipid[src] = (ident + 1) & 0xFFFF
            pseudo = (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF)
            if kind == _TCP:
                proto = 6
                hlen = 24 if flags & _SYN else 20
                l4len = hlen + plen
                ports = sport + dport
                words = ports + (seq >> 16) + (seq & 0xFFFF) + (ack >> 16) + (ack & 0xFFFF) + aux
                words += (hlen << 10) + flags + pseudo + 6 + l4len
                if hlen == 24:
                    words += 0x0204 + 0x05B4
                l4 = tcp_pack(sport, dport, seq, ack, hlen << 2, flags, aux, _fold(words), 0)
                if hlen == 24:
                    l4 += _MSS_OPTION
                payload_len = plen
            elif kind == _ICMP:
                proto = 1
                l4len = 8 + plen
                csum = _fold((flags << 8) + seq + ack)
                l4 = icmp_pack(flags, 0, csum, seq, ack)
                payload_len = plen
            else:
                proto = 17
                if kind == _UDP:
                    body = b""
                    payload_len = plen
                else:  # DNS: seq = txid, ack = name index, plen = qtype, aux = answer (-1: NXDOMAIN)
                    q = qnames[ack] + (b"\x00\x1c\x00\x01" if plen == 28 else b"\x00\x01\x00\x01")
                    if kind == _DNS_Q:
                        body = _DNS_HDR.pack(seq, 0x0100, 1, 0, 0, 0) + q
                    elif aux < 0:
                        body = _DNS_HDR.pack(seq, 0x8183, 1, 0, 0, 0) + q
                    else:
                        if plen == 28:
                            rdata = b"\x20\x01\x0d\xb8" + bytes(8) + aux.to_bytes(4, "big")
                        else:
                            rdata = aux.to_bytes(4, "big")
                        rr = (
                            b"\xc0\x0c" + q[-4:] + b"\x00\x00\x01\x2c" + len(rdata).to_bytes(2, "big") + rdata
                        )
                        body = _DNS_HDR.pack(seq, 0x8180, 1, 1, 0, 0) + q + rr
                    payload_len = 0
                l4len = 8 + len(body) + payload_len
                csum = (
                    _fold(sport + dport + l4len + pseudo + 17 + l4len + (_sum16(body) if body else 0))
                    or 0xFFFF
                )
                l4 = udp_pack(sport, dport, l4len, csum) + body
            total = 20 + l4len
            ipsum = _fold(0x4500 + total + ident + 0x4000 + (ttl << 8 | proto) + pseudo)
            frame = (
                md
                + ms
                + b"\x08\x00"
                + ip_pack(0x45, 0, total, ident, 0x4000, ttl, proto, ipsum, src, dst)
                + l4
            )
            wire = 14 + total
            room = snaplen - len(frame)
            if room < 0:
                frame = frame[:snaplen]
            elif payload_len:
                frame += zeros[: min(room, payload_len)]
            sec, us = divmod(start_us + t, 1_000_000)
            chunk.append(rec_pack(sec, us, len(frame), wire) + frame)
            if len(chunk) >= 8192:
                out.write_raw(b"".join(chunk), len(chunk))
                chunk.clear()
        out.write_raw(b"".join(chunk), len(chunk))
        size = out.bytes_written
    return size


def generate(
    out: str | Path,
    *,
    scenario: str = "baseline",
    packets: int = 10_000,
    seed: int = 1,
    start: str = DEFAULT_START,
    duration_s: float = 60.0,
    snaplen: int = 128,
) -> GenerateSummary:
    """Write a deterministic synthetic capture of exactly ``packets`` frames to ``out``.

    Parameters
    ----------
    out
        The pcap file to write (replaced if it exists).
    scenario
        One of :data:`SCENARIOS`.
    packets
        Number of frames.
    seed
        Seed of the numpy generator: the same arguments give a byte-identical file.
    start
        ISO-8601 time of the capture's start (UTC unless it says otherwise).
    duration_s
        Event-time span the sessions start in (the capture ends near it).
    snaplen
        Bytes captured per frame (headers and DNS fit in the default 128); ``wire_len`` is the
        frame's full size.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (choose from {', '.join(SCENARIOS)})")
    if packets < 1:
        raise ValueError(f"packets must be >= 1, got {packets}")
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if snaplen < 64:
        raise ValueError(f"snaplen must be >= 64 (headers), got {snaplen}")
    began = time.perf_counter()
    start_ns = parse_start(start)
    span_us = max(1, int(duration_s * 1_000_000))
    rng = np.random.default_rng(seed)
    net = _Network(rng, packets)
    rows = _Rows()
    share = {"baseline": 0.0, "syn-flood": 0.5, "port-scan": 0.4, "heavy-hitter-burst": 0.4, "ddos": 0.6}
    n_att = round(packets * share[scenario])
    details = _attack(rng, net, rows, scenario, n_att, span_us)
    _background(rng, net, rows, packets - len(rows.rows), span_us)
    rows.rows.sort(key=itemgetter(0))
    del rows.rows[packets:]
    path = Path(out)
    size = _write(rows.rows, path, start_ns, snaplen, net)
    elapsed = time.perf_counter() - began
    first, last = rows.rows[0][0], rows.rows[-1][0]

    def iso(us: int) -> str:
        return datetime.fromtimestamp((start_ns // 1000 + us) / 1e6, UTC).isoformat()

    truth = details.pop("truth", None) or {
        "attackers": [], "attackers_count": 0, "spoofed": False, "victims": [],
        "start_us": None, "end_us": None,
    }  # fmt: skip
    # the attack's first and last packet, in the capture's time (ISO) and as offsets from --start
    for key in ("start", "end"):
        offset = truth.pop(f"{key}_us")
        truth[key] = None if offset is None else iso(offset)
        truth[f"{key}_s"] = None if offset is None else offset / 1e6
    truth["scenario"] = scenario
    details.update(seed=seed, start=start, duration_s=duration_s, snaplen=snaplen, truth=truth)
    return GenerateSummary(
        path=str(path),
        scenario=scenario,
        packets=len(rows.rows),
        bytes=size,
        first_ts=iso(first),
        last_ts=iso(last),
        elapsed_s=round(elapsed, 3),
        rate_pps=round(len(rows.rows) / elapsed, 1) if elapsed > 0 else 0.0,
        details=details,
    )
