"""Vectorised packet-header decoding: raw link-layer frames to header record columns.

The decoder works on a whole block of frames that lie in one byte buffer (a chunk of a capture
file, or live frames joined together). It never loops over packets in Python for the common
case: each header is fetched for all frames at once with one numpy gather of a fixed-width window
(``V40`` for the IP header, ``V20`` for the transport header), and the fields are read from those
windows by column. Only IPv6 extension-header chains are walked per packet.

Link types (``LINKTYPE_*`` as in pcap/pcapng files):

====================  ====================================================================
0 (NULL)              BSD loopback: 4-byte address family in the writer's byte order
1 (ETHERNET)          Ethernet II, any number of 802.1Q / 802.1ad / 0x9100 tags (QinQ)
12, 14, 101 (RAW)     raw IP, version taken from the first nibble
108 (LOOP)            OpenBSD loopback: the family in network byte order
113 (LINUX_SLL)       Linux cooked capture v1 (16-byte header), then optional VLAN tags
228 / 229             raw IPv4 / raw IPv6
276 (LINUX_SLL2)      Linux cooked capture v2 (20-byte header), then optional VLAN tags
====================  ====================================================================

Frames that give no record are counted by reason: ``non_ip`` (ARP, LLDP, ...), ``truncated``
(the capture ends before the end of the link or IP header), ``bad_ip_header`` (IP version does not
match the link layer, IPv4 header length below 20 bytes) and ``unsupported_linktype:N``. Before
any header is read, :func:`impossible_frames` sets aside frames whose capture metadata cannot be
true (``bad_timestamp``: before 1970 or after :data:`MAX_TS_NS`; ``bad_length``: a negative
length, an original length above :data:`MAX_WIRE_LEN`, or more bytes captured than were on the
wire), so no record carries a poisoned event time or byte count.

A record whose transport header (TCP 20 bytes, UDP 8, ICMP/ICMPv6 4) was not captured in full, or
does not fit inside the IP packet's own length, keeps null transport fields (counted as
``l4_truncated``). Non-first IPv4/IPv6 fragments are records with null ports and TCP/ICMP fields
(counted as ``non_first_fragments``). GRE and other tunnels are not decapsulated: the record is
the outer IP header with ``proto`` 47 (or 4, 41, ...). ``ip_len`` is the IPv4 total length or the
IPv6 payload length + 40, as the header says.

Examples
--------
>>> frame = bytes.fromhex(
...     "ffffffffffff 020000000001 0800"                       # Ethernet, IPv4
...     "4500 0028 0001 0000 40 06 0000 0a000001 c0000207"     # 10.0.0.1 -> 192.0.2.7, TCP
...     "3039 0050 00000001 00000000 5002 2000 0000 0000")      # 12345 -> 80, SYN
>>> batch, skipped = decode_frames([frame], [1_700_000_000_000_000_000], [54], linktype=1)
>>> row = batch.to_pylist()[0]
>>> row["src_ip"], row["dst_ip"], row["proto"], row["src_port"], row["dst_port"], row["tcp_flags"]
('10.0.0.1', '192.0.2.7', 6, 12345, 80, 2)
>>> skipped
{}
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from netmon.records import ARROW_SCHEMA, RECORD_COLUMNS

__all__ = [
    "MAX_TS_NS",
    "MAX_WIRE_LEN",
    "PAD",
    "SUPPORTED_LINKTYPES",
    "TRANSPORT_FIELDS",
    "HeaderColumns",
    "build_batch",
    "decode_frames",
    "decode_headers",
    "impossible_frames",
    "projected_schema",
    "sanitize_iface",
]

#: Link types the decoder understands, with a short name.
SUPPORTED_LINKTYPES: dict[int, str] = {
    0: "null",
    1: "ethernet",
    12: "raw",
    14: "raw",
    101: "raw",
    108: "loop",
    113: "linux_sll",
    228: "ipv4",
    229: "ipv6",
    276: "linux_sll2",
}

#: Bytes a buffer must extend past the end of its last frame (the decoder reads fixed windows).
PAD = 128

#: The latest event time a record may carry: 2200-01-01T00:00:00Z, in ns since the epoch. The
#: earliest is the epoch itself (0). A frame outside is counted as ``bad_timestamp``.
MAX_TS_NS = 7_258_118_400 * 10**9

#: The largest original length a frame may have: the capture formats' unsigned 32-bit field.
MAX_WIRE_LEN = 2**32 - 1

#: The fields read from the transport header (``decode_headers(..., transport=False)`` skips them).
TRANSPORT_FIELDS: tuple[str, ...] = RECORD_COLUMNS[
    RECORD_COLUMNS.index("src_port") : RECORD_COLUMNS.index("vlan")
]

_VLAN_TYPES = (0x8100, 0x88A8, 0x9100)
_MAX_VLAN_TAGS = 8
_IPV6_FAMILIES = (10, 24, 28, 30)  # AF_INET6: Linux, NetBSD/OpenBSD, FreeBSD, Darwin
# IPv6 extension headers walked to the transport header: hop-by-hop, routing, fragment,
# destination options, AH, mobility, HIP, shim6.
_IPV6_EXT = (0, 43, 44, 60, 51, 135, 139, 140)

# Per-frame network-layer status after the link layer: a record candidate is 4 or 6.
_NON_IP, _TRUNCATED, _BAD_IP = 0, -1, -2
_REASONS = {_NON_IP: "non_ip", _TRUNCATED: "truncated", _BAD_IP: "bad_ip_header"}


@dataclass
class HeaderColumns:
    """Decoded header fields of the records among a block of frames (one entry per record).

    Nullable fields come as a value array and a boolean validity array (``*_valid``).
    IPv4 addresses are ``uint32`` (0 in IPv6 rows); IPv6 addresses are ``(n6, 16)`` bytes for
    the IPv6 rows, in record order. The :data:`TRANSPORT_FIELDS` are None when decoded with
    ``transport=False`` (their validity arrays are always there).
    """

    index: np.ndarray  #: int64, the frame each record came from
    ip_version: np.ndarray  #: int8, 4 or 6
    proto: np.ndarray
    ip_len: np.ndarray
    ttl: np.ndarray
    src4: np.ndarray
    dst4: np.ndarray
    src6: np.ndarray
    dst6: np.ndarray
    src_port: np.ndarray | None
    dst_port: np.ndarray | None
    port_valid: np.ndarray
    tcp_flags: np.ndarray | None
    tcp_seq: np.ndarray | None
    tcp_ack: np.ndarray | None
    tcp_window: np.ndarray | None
    tcp_valid: np.ndarray
    icmp_type: np.ndarray | None
    icmp_code: np.ndarray | None
    icmp_valid: np.ndarray
    vlan: np.ndarray
    vlan_valid: np.ndarray
    #: frames that are not records, by reason
    skipped: dict[str, int] = field(default_factory=dict)
    non_first_fragments: int = 0
    l4_truncated: int = 0

    def __len__(self) -> int:
        return len(self.index)


# --------------------------------------------------------------------------------------------
# byte views


def _be16(buf: np.ndarray) -> np.ndarray:
    """Big-endian uint16 starting at every byte offset of ``buf`` (an overlapping view)."""
    return np.ndarray(shape=(len(buf) - 1,), dtype=">u2", buffer=buf, strides=(1,))


def _windows(buf: np.ndarray, width: int) -> np.ndarray:
    """``width``-byte windows starting at every byte offset of ``buf``, as one void item each."""
    return np.ndarray(shape=(len(buf) - width + 1,), dtype=f"V{width}", buffer=buf, strides=(1,))


def _gather(buf: np.ndarray, width: int, offsets: np.ndarray) -> np.ndarray:
    """The ``width`` bytes at each offset, as a C-contiguous ``(len(offsets), width)`` array."""
    win = _windows(buf, width)
    rows = win[np.minimum(offsets, len(win) - 1)]
    return rows.view(np.uint8).reshape(len(offsets), width)


def _col16(rows: np.ndarray, col: int) -> np.ndarray:
    """Big-endian uint16 at byte ``col`` of every row of a gathered window array."""
    if rows.shape[0] == 0:
        return np.zeros(0, ">u2")
    return np.ndarray(shape=(rows.shape[0],), dtype=">u2", buffer=rows, offset=col, strides=(rows.shape[1],))


def _col32(rows: np.ndarray, col: int) -> np.ndarray:
    """Big-endian uint32 at byte ``col`` of every row of a gathered window array."""
    if rows.shape[0] == 0:
        return np.zeros(0, ">u4")
    return np.ndarray(shape=(rows.shape[0],), dtype=">u4", buffer=rows, offset=col, strides=(rows.shape[1],))


# --------------------------------------------------------------------------------------------
# link layer: per frame, the offset of the IP header and 4 / 6 / a skip status


def _vlan_tags(
    v16: np.ndarray, et: np.ndarray, l3: np.ndarray, end: np.ndarray, net_ok: np.ndarray, vlan: np.ndarray
) -> None:
    """Walk 802.1Q/802.1ad tags in place: ``et`` and ``l3`` move past them, ``vlan`` = outermost."""
    for _ in range(_MAX_VLAN_TAGS):
        idx = np.flatnonzero(net_ok & ((et == 0x8100) | (et == 0x88A8) | (et == 0x9100)))
        if idx.size == 0:
            return
        p = l3[idx]
        fits = p + 4 <= end[idx]
        net_ok[idx[~fits]] = False
        idx, p = idx[fits], p[fits]
        tci = v16[p]
        outer = vlan[idx] < 0
        vlan[idx[outer]] = tci[outer] & 0x0FFF
        et[idx] = v16[p + 2]
        l3[idx] = p + 4


def _l2_ethertype(
    buf: np.ndarray, ds: np.ndarray, end: np.ndarray, header: int, type_at: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ethernet-like link layers: a header of ``header`` bytes with an EtherType at ``type_at``."""
    v16 = _be16(buf)
    l3 = ds + header
    ok = l3 <= end
    et = v16[np.minimum(ds + type_at, len(v16) - 1)].astype(np.int32)
    vlan = np.full(len(ds), -1, np.int32)
    _vlan_tags(v16, et, l3, end, ok, vlan)
    net = np.where(et == 0x0800, 4, np.where(et == 0x86DD, 6, _NON_IP)).astype(np.int8)
    net[~ok] = _TRUNCATED
    return l3, net, vlan


def _l2_family(fam: np.ndarray) -> np.ndarray:
    """BSD loopback address family to 4 / 6 / non-IP."""
    return np.where(fam == 2, 4, np.where(np.isin(fam, _IPV6_FAMILIES), 6, _NON_IP)).astype(np.int8)


def _link_layer(
    buf: np.ndarray, ds: np.ndarray, end: np.ndarray, linktype: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(l3 offset, network status, outermost vlan or -1)`` of every frame of one link type."""
    n = len(ds)
    no_vlan = np.full(n, -1, np.int32)
    if linktype == 1:
        return _l2_ethertype(buf, ds, end, 14, 12)
    if linktype == 113:
        return _l2_ethertype(buf, ds, end, 16, 14)
    if linktype == 276:
        return _l2_ethertype(buf, ds, end, 20, 0)
    if linktype in (12, 14, 101, 228, 229):
        ver = buf[np.minimum(ds, len(buf) - 1)] >> 4
        if linktype == 228:
            net = np.full(n, 4, np.int8)
        elif linktype == 229:
            net = np.full(n, 6, np.int8)
        else:
            net = np.where((ver == 4) | (ver == 6), ver, _BAD_IP).astype(np.int8)
        net[ds >= end] = _TRUNCATED
        return ds.copy(), net, no_vlan
    if linktype in (0, 108):
        head = _gather(buf, 4, ds)
        if linktype == 0:  # host byte order of the writer: the family is < 256, so one byte is set
            fam = np.where(head[:, 0] != 0, head[:, 0], head[:, 3]).astype(np.int64)
        else:
            fam = _col32(head, 0).astype(np.int64)
        net = _l2_family(fam)
        net[ds + 4 > end] = _TRUNCATED
        return ds + 4, net, no_vlan
    raise ValueError(f"unsupported link type {linktype}")


# --------------------------------------------------------------------------------------------
# IPv6 extension headers (the one per-packet path)


def _walk_ipv6(mv: memoryview, p: int, end: int, nh: int) -> tuple[int, int, bool, bool]:
    """Walk extension headers from ``p``: ``(transport proto, its offset, non-first frag, cut)``.

    As Scapy does, the protocol is the last next-header value that could be read, even when the
    header carrying it is cut short (then there is no transport header: ``cut`` is True).
    """
    while nh in _IPV6_EXT:
        if nh == 44:  # fragment header: 8 bytes; offset in the top 13 bits of bytes 2-3
            if p + 8 > end:
                return nh, p, False, True
            nxt = mv[p]
            if (mv[p + 2] << 5) | (mv[p + 3] >> 3):
                return nxt, p + 8, True, False
            nh, p = nxt, p + 8
            continue
        if p + 2 > end:
            return nh, p, False, True
        nxt, hlen = mv[p], mv[p + 1]
        nh, p = nxt, p + ((hlen + 2) * 4 if nh == 51 else (hlen + 1) * 8)
    return nh, p, False, p > end


# --------------------------------------------------------------------------------------------
# capture metadata that cannot be true


def impossible_frames(
    ts_ns: np.ndarray, cap_len: np.ndarray, wire_len: np.ndarray
) -> tuple[np.ndarray | None, dict[str, int]]:
    """Frames whose timestamp or lengths cannot be true: ``(mask or None, counts by reason)``.

    ``bad_timestamp``: ``ts_ns`` before the epoch or after :data:`MAX_TS_NS` (a reader marks a
    time it could not represent, such as an overflowing pcapng ``if_tsresol``/``if_tsoffset``,
    with -1). ``bad_length``: a negative length, ``wire_len`` above :data:`MAX_WIRE_LEN`, or
    ``cap_len`` above ``wire_len`` (every supported format says a frame is cut, never grown). A
    frame with both problems counts as ``bad_timestamp``. The mask is None when every frame is fine.

    >>> mask, counts = impossible_frames(np.array([5, -1, 7, MAX_TS_NS + 1]), np.array([60, 60, 70, 60]),
    ...                                  np.array([60, 60, 64, 2**32]))
    >>> mask.tolist(), counts
    ([False, True, True, True], {'bad_timestamp': 2, 'bad_length': 1})
    """
    ts = np.asarray(ts_ns, np.int64)
    cap = np.asarray(cap_len, np.int64)
    wire = np.asarray(wire_len, np.int64)
    bad_ts = (ts < 0) | (ts > MAX_TS_NS)
    bad_len = ~bad_ts & ((cap < 0) | (wire < 0) | (wire > MAX_WIRE_LEN) | (cap > wire))
    n_ts, n_len = int(np.count_nonzero(bad_ts)), int(np.count_nonzero(bad_len))
    if not (n_ts or n_len):
        return None, {}
    counts = {name: n for name, n in (("bad_timestamp", n_ts), ("bad_length", n_len)) if n}
    return bad_ts | bad_len, counts


def _as_int64(values: Sequence[int] | np.ndarray) -> np.ndarray:
    """``values`` as int64; a Python integer outside int64 becomes -1 (an impossible time or length)."""
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        return np.fromiter(
            (int(v) if -(2**63) <= int(v) < 2**63 else -1 for v in values), dtype=np.int64, count=len(values)
        )


# --------------------------------------------------------------------------------------------
# the decoder


def decode_headers(
    buf: np.ndarray,
    data_start: np.ndarray,
    cap_len: np.ndarray,
    linktype: int | np.ndarray,
    *,
    transport: bool = True,
) -> HeaderColumns:
    """Decode the IP and transport headers of a block of frames that lie in ``buf``.

    Parameters
    ----------
    buf : numpy.ndarray
        ``uint8`` buffer holding every frame; it must extend at least :data:`PAD` bytes past
        the end of the last frame (the content of that slack does not matter).
    data_start, cap_len : numpy.ndarray
        ``int64`` offset in ``buf`` and captured length of each frame.
    linktype : int or numpy.ndarray
        The link type of all frames, or one per frame (pcapng interfaces differ).
    transport : bool
        Read the transport fields (:data:`TRANSPORT_FIELDS`). If False they are None: the records,
        their validity flags (``port_valid`` ...) and every count are the same, only the ports,
        TCP and ICMP values are not read.

    Returns
    -------
    HeaderColumns
        The records, in frame order, and the frames skipped by reason.
    """
    ds = np.asarray(data_start, dtype=np.int64)
    end = ds + np.asarray(cap_len, dtype=np.int64)
    n = len(ds)
    skipped: dict[str, int] = {}
    groups: list[tuple[int, np.ndarray | None]]  # (linktype, its frames; None: all of them)
    if np.ndim(linktype) == 0:
        groups = [(int(linktype), None)]
    else:
        lts = np.asarray(linktype)
        groups = [(int(lt), np.flatnonzero(lts == lt)) for lt in np.unique(lts)]
    if len(groups) == 1 and groups[0][0] in SUPPORTED_LINKTYPES:
        l3, net, vlan = _link_layer(buf, ds, end, groups[0][0])
    else:
        l3 = np.zeros(n, np.int64)
        net = np.full(n, _NON_IP, np.int8)
        vlan = np.full(n, -1, np.int32)
        unsupported = np.zeros(n, bool)
        for lt, idx in groups:
            idx = np.arange(n) if idx is None else idx
            if lt not in SUPPORTED_LINKTYPES:
                if len(idx):  # no frames, no count (an empty block of an unknown link type)
                    skipped[f"unsupported_linktype:{lt}"] = len(idx)
                unsupported[idx] = True
                continue
            l3[idx], net[idx], vlan[idx] = _link_layer(buf, ds[idx], end[idx], lt)
        net[unsupported] = 1  # a marker outside the statuses below, counted already
    for code, reason in _REASONS.items():
        count = int(np.count_nonzero(net == code))
        if count:
            skipped[reason] = skipped.get(reason, 0) + count
    cand = np.flatnonzero((net == 4) | (net == 6))
    return _network_layer(buf, cand, l3, end, net, vlan, skipped, transport)


def _network_layer(
    buf: np.ndarray,
    cand: np.ndarray,
    l3_all: np.ndarray,
    end_all: np.ndarray,
    net_all: np.ndarray,
    vlan_all: np.ndarray,
    skipped: dict[str, int],
    transport: bool = True,
) -> HeaderColumns:
    """IP and transport headers of the candidate frames ``cand`` (those the link layer says are IP)."""
    l3, end, want6 = l3_all[cand], end_all[cand], net_all[cand] == 6
    ip = _gather(buf, 40, l3)
    b0 = ip[:, 0]
    ihl = (b0 & 0x0F).astype(np.int64) * 4
    hdr_len = np.where(want6, 40, 20)
    truncated = l3 + hdr_len > end
    bad = ~truncated & (((b0 >> 4) != np.where(want6, 6, 4)) | (~want6 & (ihl < 20)))
    truncated |= ~bad & ~want6 & (l3 + ihl > end)  # IPv4 options cut off
    ok = ~(truncated | bad)
    for reason, mask in (("truncated", truncated), ("bad_ip_header", bad)):
        count = int(np.count_nonzero(mask))
        if count:
            skipped[reason] = skipped.get(reason, 0) + count

    proto = np.where(want6, ip[:, 6], ip[:, 9]).astype(np.int16)
    ttl = np.where(want6, ip[:, 7], ip[:, 8]).astype(np.int16)
    ip_len = np.where(want6, _col16(ip, 4).astype(np.int64) + 40, _col16(ip, 2))
    non_first = ~want6 & ((_col16(ip, 6) & 0x1FFF) != 0)
    l4 = l3 + np.where(want6, 40, ihl)
    l4_cut = np.zeros(len(cand), bool)
    # The transport header must lie inside the IP packet: bytes past the IP length are padding.
    # A length of 0 (IPv6 jumbograms, TSO-offloaded IPv4 captures) or below the header bounds nothing.
    bounded = np.where(want6, ip_len > 40, ip_len >= ihl)
    end = np.where(bounded, np.minimum(end, l3 + ip_len), end)

    ext = np.flatnonzero(ok & want6 & np.isin(proto, _IPV6_EXT))
    if ext.size:
        mv = buf.data  # a memoryview
        for i in ext.tolist():
            nh, p, frag, cut = _walk_ipv6(mv, int(l4[i]), int(end[i]), int(proto[i]))
            proto[i], l4[i], non_first[i], l4_cut[i] = nh, p, frag, cut

    is_tcp = proto == 6
    is_udp = proto == 17
    is_icmp = np.where(want6, proto == 58, proto == 1)
    need = np.where(is_tcp, 20, np.where(is_udp, 8, np.where(is_icmp, 4, 0)))
    parse = ok & ~non_first & ~l4_cut & (need > 0)
    captured = parse & (l4 + need <= end)
    l4_cut |= parse & ~captured
    sel = np.flatnonzero(captured)

    k = len(cand)
    port_valid = captured & (is_tcp | is_udp)
    tcp_valid = captured & is_tcp
    icmp_valid = captured & is_icmp
    values: dict[str, np.ndarray | None] = dict.fromkeys(TRANSPORT_FIELDS)
    if transport:
        th = _gather(buf, 20, l4[sel])
        src_port = np.zeros(k, np.int32)
        dst_port = np.zeros(k, np.int32)
        src_port[sel] = _col16(th, 0)
        dst_port[sel] = _col16(th, 2)
        tcp_seq = np.zeros(k, np.int64)
        tcp_ack = np.zeros(k, np.int64)
        tcp_flags = np.zeros(k, np.int16)
        tcp_window = np.zeros(k, np.int32)
        tcp_seq[sel] = _col32(th, 4)
        tcp_ack[sel] = _col32(th, 8)
        tcp_flags[sel] = th[:, 13]
        tcp_window[sel] = _col16(th, 14)
        icmp_type = np.zeros(k, np.int16)
        icmp_code = np.zeros(k, np.int16)
        icmp_type[sel] = th[:, 0]
        icmp_code[sel] = th[:, 1]
        values.update(
            src_port=src_port,
            dst_port=dst_port,
            tcp_flags=tcp_flags,
            tcp_seq=tcp_seq,
            tcp_ack=tcp_ack,
            tcp_window=tcp_window,
            icmp_type=icmp_type,
            icmp_code=icmp_code,
        )

    rec = np.flatnonzero(ok)
    rec6 = rec[want6[rec]]
    ip_version = np.where(want6[rec], 6, 4).astype(np.int8)
    vlan = vlan_all[cand[rec]]
    v4 = ~want6[rec]
    return HeaderColumns(
        index=cand[rec],
        ip_version=ip_version,
        proto=proto[rec],
        ip_len=ip_len[rec].astype(np.int32),
        ttl=ttl[rec],
        src4=np.where(v4, _col32(ip, 12)[rec], 0).astype(np.uint32),
        dst4=np.where(v4, _col32(ip, 16)[rec], 0).astype(np.uint32),
        src6=ip[rec6, 8:24],
        dst6=ip[rec6, 24:40],
        port_valid=port_valid[rec],
        tcp_valid=tcp_valid[rec],
        **{name: None if v is None else v[rec] for name, v in values.items()},
        icmp_valid=icmp_valid[rec],
        vlan=vlan,
        vlan_valid=vlan >= 0,
        skipped=skipped,
        non_first_fragments=int(np.count_nonzero(non_first[rec])),
        l4_truncated=int(np.count_nonzero(l4_cut[rec])),
    )


# --------------------------------------------------------------------------------------------
# IP address text


class _IPv4Text:
    """IPv4 dotted quads for whole arrays: two lookups in 65,536-entry tables of ``"a.b."``."""

    def __init__(self) -> None:
        # "v." and "v" as little-endian integers (the text's first byte lowest), and their lengths.
        dotted = np.array([int.from_bytes(f"{v}.".encode(), "little") for v in range(256)], np.uint64)
        olen = np.array([len(f"{v}.") for v in range(256)], np.uint64)
        bare = dotted & ((np.uint64(1) << (np.uint64(8) * (olen - np.uint64(1)))) - np.uint64(1))
        hi, lo = np.divmod(np.arange(65536), 256)
        shift = np.uint64(8) * olen[hi]
        # The 8 bytes of "a.b." / "c.d" then zeros, read as native uint64 (as the tables are used).
        self.head = (dotted[hi] | (dotted[lo] << shift)).astype("<u8").view(np.uint64)
        self.tail = (dotted[hi] | (bare[lo] << shift)).astype("<u8").view(np.uint64)
        self.head_len = (olen[hi] + olen[lo]).astype(np.int32)
        self.tail_len = (self.head_len - 1).astype(np.int32)

    def __call__(self, addr: np.ndarray) -> pa.StringArray:
        hi, lo = addr >> 16, addr & 0xFFFF
        packed = np.empty((len(addr), 2), np.uint64)
        packed[:, 0] = self.head[hi]
        packed[:, 1] = self.tail[lo]
        chars = packed.view(np.uint8)
        data = chars[chars != 0]
        offsets = np.zeros(len(addr) + 1, np.int32)
        np.cumsum(self.head_len[hi] + self.tail_len[lo], out=offsets[1:])
        return pa.StringArray.from_buffers(len(addr), pa.py_buffer(offsets), pa.py_buffer(data))


_ipv4_text: _IPv4Text | None = None
_ipv6_cache: dict[bytes, str] = {}


def _ipv6_text(raw: np.ndarray) -> pa.Array:
    """RFC 5952 text of ``(n, 16)`` address bytes: each distinct address formatted once."""
    n = len(raw)
    keys = pa.Array.from_buffers(pa.binary(16), n, [None, pa.py_buffer(np.ascontiguousarray(raw))])
    encoded = keys.dictionary_encode()
    if len(_ipv6_cache) > 1_000_000:
        _ipv6_cache.clear()
    texts = []
    for key in encoded.dictionary.to_pylist():
        text = _ipv6_cache.get(key)
        if text is None:
            text = _ipv6_cache[key] = str(ipaddress.IPv6Address(key))
        texts.append(text)
    return _string_array(texts).take(encoded.indices)


def _ipv4_strings(text: _IPv4Text, addr: np.ndarray) -> pa.Array:
    """Dotted quads; traffic repeats addresses, so format each distinct one once when that pays."""
    if len(addr) < 1024:
        return text(addr)
    encoded = _from_numpy(addr, pa.uint32()).dictionary_encode()
    if len(encoded.dictionary) > len(addr) // 2:
        return text(addr)
    distinct = encoded.dictionary
    values = np.frombuffer(distinct.buffers()[1], np.uint32, len(distinct), distinct.offset * 4)
    return text(values).take(encoded.indices)


def _ip_text(cols: HeaderColumns, v4: np.ndarray, addr4: np.ndarray, addr6: np.ndarray) -> pa.Array:
    """One address column: IPv4 and IPv6 rows formatted separately, merged in record order."""
    global _ipv4_text
    if _ipv4_text is None:
        _ipv4_text = _IPv4Text()
    n6 = len(addr6)
    if n6 == 0:
        return _ipv4_strings(_ipv4_text, addr4)
    if n6 == len(cols):
        return _ipv6_text(addr6)
    both = pa.concat_arrays([_ipv4_strings(_ipv4_text, addr4[v4]), _ipv6_text(addr6)])
    order = np.empty(len(cols), np.int32)
    order[v4] = np.arange(len(cols) - n6, dtype=np.int32)
    order[~v4] = np.arange(len(cols) - n6, len(cols), dtype=np.int32)
    return both.take(_from_numpy(order, pa.int32()))


# --------------------------------------------------------------------------------------------
# Arrow record batch


def sanitize_iface(name: str) -> str:
    """An interface name safe for the wire format: ``,`` and line breaks become ``_``.

    >>> sanitize_iface("eth0,mirror\\n")
    'eth0_mirror_'
    """
    return name.replace(",", "_").replace("\n", "_").replace("\r", "_")


_TS_TYPE = ARROW_SCHEMA.field("ts").type


def _from_numpy(values: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width integer Arrow array over ``values`` (no copy if already native and contiguous).

    Null where ``valid`` is False. Built from buffers, not with ``pa.array``: pyarrow imports pandas
    the first time it is handed a numpy array or a list (to check for pandas objects), a quarter
    of a second that reading a capture does not need.
    """
    values = np.ascontiguousarray(values, dtype=type_.to_pandas_dtype())
    n = len(values)
    if valid is None or valid.all():
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)])
    bits = np.packbits(valid, bitorder="little")
    nulls = n - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(type_, n, [pa.py_buffer(bits), pa.py_buffer(values)], null_count=nulls)


def _string_array(texts: Sequence[str]) -> pa.Array:
    """A string array of ``texts`` (no nulls), built from buffers (see :func:`_from_numpy`)."""
    data = [t.encode() for t in texts]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError("texts: 2 GiB or more of text for one string array")
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)


def projected_schema(columns: Sequence[str] | None) -> pa.Schema:
    """:data:`netmon.records.ARROW_SCHEMA`, or only ``columns`` of it in the order given.

    >>> projected_schema(["src_ip", "ts"]).names
    ['src_ip', 'ts']
    """
    if columns is None:
        return ARROW_SCHEMA
    names = list(columns)
    unknown = [c for c in names if c not in ARROW_SCHEMA.names]
    if unknown:
        raise ValueError(f"columns: unknown record column(s) {unknown}; one of {ARROW_SCHEMA.names}")
    if len(set(names)) != len(names):
        raise ValueError(f"columns: a column is named twice in {names}")
    return pa.schema([ARROW_SCHEMA.field(c) for c in names])


def _iface_column(iface: str | tuple[Sequence[str], np.ndarray], idx: np.ndarray) -> pa.Array:
    n = len(idx)
    if isinstance(iface, str):
        name = sanitize_iface(iface).encode()
        offsets = np.arange(n + 1, dtype=np.int32) * len(name)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(name * n))
    names, which = iface
    table = _string_array([sanitize_iface(s) for s in names])
    return table.take(_from_numpy(np.asarray(which)[idx], pa.int32()))


def build_batch(
    cols: HeaderColumns,
    ts_ns: np.ndarray,
    cap_len: np.ndarray,
    wire_len: np.ndarray,
    iface: str | tuple[Sequence[str], np.ndarray],
    columns: Sequence[str] | None = None,
) -> pa.RecordBatch:
    """The record batch (:data:`netmon.records.ARROW_SCHEMA`, or ``columns`` of it) of decoded records.

    ``ts_ns``, ``cap_len`` and ``wire_len`` are per frame (indexed by ``cols.index``); ``iface``
    is one name for every record, or ``(names, per-frame index into names)``. ``columns``: only
    these columns, in that order (:func:`projected_schema`); the others are never built.
    """
    schema = projected_schema(columns)
    missing = [name for name in schema.names if name in TRANSPORT_FIELDS and getattr(cols, name) is None]
    if missing:
        raise ValueError(f"columns: {missing} were not decoded (decode_headers(..., transport=False))")
    idx = cols.index
    v4 = cols.ip_version == 4

    def transport(values: np.ndarray | None) -> np.ndarray:
        assert values is not None  # checked above: the transport columns asked for were decoded
        return values

    build = {
        "ts": lambda: _from_numpy(np.asarray(ts_ns, dtype=np.int64)[idx], pa.int64()).view(_TS_TYPE),
        "cap_len": lambda: _from_numpy(np.asarray(cap_len, dtype=np.int64)[idx], pa.int64()),
        "wire_len": lambda: _from_numpy(np.asarray(wire_len, dtype=np.int64)[idx], pa.int64()),
        "ip_version": lambda: _from_numpy(cols.ip_version, pa.int8()),
        "src_ip": lambda: _ip_text(cols, v4, cols.src4, cols.src6),
        "dst_ip": lambda: _ip_text(cols, v4, cols.dst4, cols.dst6),
        "proto": lambda: _from_numpy(cols.proto, pa.int16()),
        "ip_len": lambda: _from_numpy(cols.ip_len, pa.int32()),
        "ttl": lambda: _from_numpy(cols.ttl, pa.int16()),
        "src_port": lambda: _from_numpy(transport(cols.src_port), pa.int32(), cols.port_valid),
        "dst_port": lambda: _from_numpy(transport(cols.dst_port), pa.int32(), cols.port_valid),
        "tcp_flags": lambda: _from_numpy(transport(cols.tcp_flags), pa.int16(), cols.tcp_valid),
        "tcp_seq": lambda: _from_numpy(transport(cols.tcp_seq), pa.int64(), cols.tcp_valid),
        "tcp_ack": lambda: _from_numpy(transport(cols.tcp_ack), pa.int64(), cols.tcp_valid),
        "tcp_window": lambda: _from_numpy(transport(cols.tcp_window), pa.int32(), cols.tcp_valid),
        "icmp_type": lambda: _from_numpy(transport(cols.icmp_type), pa.int16(), cols.icmp_valid),
        "icmp_code": lambda: _from_numpy(transport(cols.icmp_code), pa.int16(), cols.icmp_valid),
        "vlan": lambda: _from_numpy(cols.vlan, pa.int32(), cols.vlan_valid),
        "iface": lambda: _iface_column(iface, idx),
    }
    return pa.RecordBatch.from_arrays([build[name]() for name in schema.names], schema=schema)


def decode_frames(
    frames: Sequence[bytes],
    ts_ns: Sequence[int] | np.ndarray,
    wire_lens: Sequence[int] | np.ndarray,
    linktype: int,
    iface: str = "0",
) -> tuple[pa.RecordBatch, dict[str, int]]:
    """Decode separate frames (live capture) into one record batch.

    Parameters
    ----------
    frames : sequence of bytes
        The captured bytes of each frame, starting at the link-layer header.
    ts_ns, wire_lens : sequence of int
        Each frame's timestamp (integer nanoseconds since the epoch) and original length.
    linktype : int
        The pcap link type of every frame (1 for Ethernet).
    iface : str
        The ``iface`` column of every record (``,`` and line breaks become ``_``).

    Returns
    -------
    (pyarrow.RecordBatch, dict)
        The records in frame order, and the frames that are not records by reason (e.g.
        ``{"non_ip": 3}``; ``unsupported_linktype:N`` for every frame of an unknown link type;
        ``bad_timestamp`` / ``bad_length`` for impossible metadata, see :func:`impossible_frames`).
    """
    if not (len(frames) == len(ts_ns) == len(wire_lens)):
        raise ValueError(f"{len(frames)} frames, {len(ts_ns)} timestamps, {len(wire_lens)} wire lengths")
    ts = _as_int64(ts_ns)
    wire = _as_int64(wire_lens)
    lens = np.fromiter((len(f) for f in frames), dtype=np.int64, count=len(frames))
    bad, skipped = impossible_frames(ts, lens, wire)
    if bad is not None:
        keep = np.flatnonzero(~bad)
        frames = [frames[i] for i in keep.tolist()]
        ts, wire, lens = ts[keep], wire[keep], lens[keep]
    starts = np.zeros(len(frames), np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    buf = np.frombuffer(b"".join(frames) + bytes(PAD), np.uint8)
    cols = decode_headers(buf, starts, lens, linktype)
    batch = build_batch(cols, ts, lens, wire, iface)
    for reason, count in cols.skipped.items():
        skipped[reason] = skipped.get(reason, 0) + count
    return batch, skipped
