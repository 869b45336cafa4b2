"""What the alert rules look at, computed exactly from packet records: one row per window and subject.

Attacks show in how connection attempts end, not in raw counts: a scanner's probes fail (no
SYN-ACK, a RST, an ICMP unreachable), a SYN flood leaves connections half-open, a DDoS brings many
new sources *and* packets to one destination. :func:`feature_rows` turns records into rows of
kind ``features`` (the alert service reads the same rows from ``netmon.features``), per tumbling
window ``[k*window_s, (k+1)*window_s)`` aligned like Spark's windows:

``query = "src"`` (subject: a source address)
    ``packets`` it sent, ``total`` packets in the window, ``share = packets / total``;
    ``attempts``: distinct (host, port) it sent a TCP SYN to whose fate is known;
    ``failed``: distinct (host, port) of those attempts that failed, plus hosts that sent it an
    ICMP unreachable (port -1); ``fail_ratio = failed / max(attempts, failed)``;
    ``vertical``: the most distinct failed ports on one host (that host: ``vertical_host``);
    ``horizontal``: the most distinct failed hosts on one port (that port: ``horizontal_port``).
``query = "dst"`` (subject: a destination address)
    ``packets`` it received, ``sources``: distinct sources that sent to it; ``syn``: SYNs to it
    whose fate is known, ``half_open``: those never answered (no SYN-ACK, no RST) and
    ``half_open_sources`` their distinct sources; ``half_open_ratio = half_open / syn``.

A SYN's fate is read from the packets that answer it on the reversed 4-tuple within ``timeout_s``:
a SYN-ACK (answered), else a RST (refused: failed), else nothing (unanswered: failed, half-open).
SYNs sent less than ``timeout_s`` before the last record have no known fate yet and are left out,
as a streaming job would still be waiting for their answer.

Only the rows that can matter are kept: per window and family, the ``top`` subjects by each
column a rule reads (``failed``, ``packets`` for sources; ``sources``, ``packets``,
``half_open`` for destinations), so a spoofed flood's 100 000 one-packet sources do not become
100 000 rows. Everything is exact (no sketches): addresses become integer codes, groups come from
sorting one int64 key per row (numpy), with no Python loop over records.

The rows need only two inputs, which a streaming job can gather window by window
(``pipeline.features``): the packets per (window, destination, source) pair
(:func:`pair_counts`) and the *control* records, those :func:`control_mask` keeps (TCP SYNs,
SYN-ACKs and RSTs, ICMP unreachables). :func:`features_of` turns them into the rows;
:func:`feature_rows` is it over a whole capture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CONTROL_COLUMNS",
    "FEATURE_COLUMNS",
    "control_mask",
    "control_records",
    "feature_rows",
    "features_of",
    "pair_counts",
    "records_frame",
]

#: the record columns :func:`feature_rows` reads
FEATURE_COLUMNS = ("ts", "src_ip", "dst_ip", "proto", "src_port", "dst_port", "tcp_flags", "icmp_type")

_SYN, _RST, _ACK = 0x02, 0x04, 0x10
#: ICMP destination unreachable (IPv4 type 3, IPv6 type 1)
_UNREACHABLE = ((1, 3), (58, 1))
#: the columns of :func:`records_frame` (times ``t`` in ns, nulls as -1) a control record keeps
CONTROL_COLUMNS = ("t", "src", "dst", "proto", "sport", "dport", "flags", "icmp")
#: the integer columns of a control record after its time and addresses
_CONTROL_INTS = CONTROL_COLUMNS[3:]


def records_frame(batches: Iterable[pa.RecordBatch | pa.Table]) -> pd.DataFrame:
    """The columns :func:`feature_rows` needs, from record batches, as one DataFrame."""
    tables = [pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in batches]
    tables = [t.select(list(FEATURE_COLUMNS)) for t in tables if t.num_rows]
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in FEATURE_COLUMNS})
    table = pa.concat_tables(tables)
    frame = pd.DataFrame(
        {
            "t": table.column("ts").cast(pa.int64()).to_numpy(),
            "src": table.column("src_ip").to_numpy(zero_copy_only=False),
            "dst": table.column("dst_ip").to_numpy(zero_copy_only=False),
        }
    )
    for column, name in (
        ("proto", "proto"),
        ("src_port", "sport"),
        ("dst_port", "dport"),
        ("tcp_flags", "flags"),
        ("icmp_type", "icmp"),
    ):
        frame[name] = table.column(column).fill_null(-1).cast(pa.int64()).to_numpy()
    return frame


def control_mask(proto: np.ndarray, flags: np.ndarray, icmp: np.ndarray) -> np.ndarray:
    """The records a SYN's fate or a failure is read from: TCP SYNs, SYN-ACKs and RSTs, ICMP
    unreachables. Integer arrays with -1 for null, as :func:`records_frame` has them.

    >>> control_mask(np.array([6, 6, 6, 17, 1]), np.array([0x02, 0x10, 0x14, -1, -1]),
    ...              np.array([-1, -1, -1, -1, 3])).tolist()
    [True, False, True, False, True]
    """
    tcp = proto == 6
    handshake = flags & (_SYN | _ACK)
    keep = tcp & ((handshake == _SYN) | (handshake == (_SYN | _ACK)) | ((flags & _RST) != 0))
    for family, kind in _UNREACHABLE:
        keep |= (proto == family) & (icmp == kind)
    return np.asarray(keep, bool)


def control_records(records: pa.RecordBatch | pa.Table) -> np.ndarray:
    """:func:`control_mask` over record columns (``proto``, ``tcp_flags``, ``icmp_type``)."""

    def column(name: str) -> np.ndarray:
        values = records.column(name).fill_null(-1).cast(pa.int64())
        return np.asarray(values.to_numpy(), np.int64)

    return control_mask(column("proto"), column("tcp_flags"), column("icmp_type"))


def pair_counts(f: pd.DataFrame) -> pd.DataFrame:
    """Packets per (window ``w``, ``dst``, ``src``) of a frame with its window column ``w``."""
    return f.groupby(["w", "dst", "src"], sort=False).size().rename("packets").reset_index()


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{ns % 10**9 // 10**6:03d}Z" if ns % 10**9 else "Z"
    )


# --- the computation: integer codes and numpy, no per-row Python ---------------------------------
#
# Addresses become int64 codes into one list of names sorted by text, so that ordering codes orders
# the text (ties are broken by the subject's text). Groups are formed by sorting one int64 key per
# row: (window, address) is ``w * n + address`` (windows counted from the first one); longer keys
# are built by :func:`_combine`, which renumbers densely first when the product could overflow.

_PORTS = 65_537  # a port + 1 (a null port is -1): 0 ... 65 536
_LIMIT = 2**62
_I64 = np.int64


def _combine(a: np.ndarray, b: np.ndarray, nb: int) -> np.ndarray:
    """One int64 key per row for the pair (``a``, ``b``), ``a >= 0`` and ``0 <= b < nb``."""
    if a.size and int(a.max()) >= _LIMIT // max(nb, 1):
        a = np.unique(a, return_inverse=True)[1].astype(_I64)
    return a * nb + b


def _reduce(key: np.ndarray, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct ``key``, ascending: the index of one row holding it, and the sum of ``values``
    over its rows (the number of its rows without ``values``)."""
    if not key.size:
        return np.zeros(0, _I64), np.zeros(0, _I64)
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    if values is None:
        agg = np.diff(np.append(starts, k.size))
    else:
        agg = np.add.reduceat(values[order], starts)
    return order[starts], agg.astype(_I64)


def _lookup(keys: np.ndarray, at: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """``values`` (of the sorted distinct ``at``) placed at the rows of the sorted distinct ``keys``
    holding the same key; 0 elsewhere."""
    out = np.zeros(size, _I64)
    pos, hit = _find(keys, at)
    out[pos[hit]] = values[hit]
    return out


def _encode(*columns: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """Address columns (pandas, numpy or pyarrow; categorical or text, no nulls) as int64 codes into
    one array of names sorted by text."""
    codes: list[np.ndarray] = []
    uniques: list[np.ndarray] = []
    for column in columns:
        if isinstance(column, pa.ChunkedArray | pa.Array):
            whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            encoded = whole.dictionary_encode()
            codes.append(np.asarray(encoded.indices.to_numpy(zero_copy_only=False), _I64))
            uniques.append(np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), object))
        elif isinstance(getattr(column, "dtype", None), pd.CategoricalDtype):
            codes.append(np.asarray(column.cat.codes.to_numpy(), _I64))
            uniques.append(np.asarray(column.cat.categories.to_numpy(), object))
        else:
            c, u = pd.factorize(np.asarray(column, object))
            codes.append(np.asarray(c, _I64))
            uniques.append(np.asarray(u, object))
    every = np.concatenate(uniques) if uniques else np.zeros(0, object)
    joint, names = pd.factorize(every)
    names = np.asarray(names, object)
    order = np.asarray(pc.array_sort_indices(pa.array(names, pa.string())).to_numpy(), _I64)
    rank = np.empty(len(names), _I64)
    rank[order] = np.arange(len(names), dtype=_I64)
    remap = rank[joint] if len(joint) else np.zeros(0, _I64)
    out, offset = [], 0
    for c, u in zip(codes, uniques, strict=True):
        out.append(remap[offset + c] if c.size else np.zeros(0, _I64))
        offset += len(u)
    return names[order], out


def _find(keys: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``at``: its position in the sorted ``keys``, and whether it is there."""
    if not keys.size:
        return np.zeros(at.size, _I64), np.zeros(at.size, bool)
    pos = np.minimum(np.searchsorted(keys, at), keys.size - 1)
    return pos, keys[pos] == at


def _top_mask(w: np.ndarray, subject: np.ndarray, columns: list[np.ndarray], top: int) -> np.ndarray:
    """Per window, the rows in the ``top`` of any of ``columns`` (> 0; ties broken by subject)."""
    if top <= 0 or not w.size:
        return np.ones(w.size, bool)
    keep = np.zeros(w.size, bool)
    for column in columns:
        order = np.lexsort((subject, -column, w))
        ws = w[order]
        starts = np.flatnonzero(np.concatenate(([True], ws[1:] != ws[:-1])))
        group = np.repeat(starts, np.diff(np.append(starts, ws.size)))
        rank = np.empty(w.size, _I64)
        rank[order] = np.arange(w.size) - group
        keep |= (column > 0) & (rank < top)
    return keep


def _best(ws: np.ndarray, value: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per ``ws``: the ``value`` with the most rows (``count``), the smallest on a tie."""
    order = np.lexsort((value, -count, ws))
    ws, value, count = ws[order], value[order], count[order]
    first = np.flatnonzero(np.concatenate(([True], ws[1:] != ws[:-1]))) if ws.size else np.zeros(0, _I64)
    return ws[first], value[first], count[first]


def _fates(
    t: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    sport: np.ndarray,
    dport: np.ndarray,
    flags: np.ndarray,
    tcp: np.ndarray,
    n: int,
    timeout_ns: int,
    last: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the control records: the indices of the SYNs whose fate is known, and whether each was
    answered (a SYN-ACK on the reversed 4-tuple within the timeout) or else refused (a RST)."""
    handshake = flags & (_SYN | _ACK)
    syn = np.flatnonzero(tcp & (handshake == _SYN))
    reply = np.flatnonzero(tcp & ((handshake == (_SYN | _ACK)) | ((flags & _RST) != 0)))
    # the answer travels the reversed 4-tuple
    hosts = np.unique(
        np.concatenate((_combine(src[syn], dst[syn], n), _combine(dst[reply], src[reply], n))),
        return_inverse=True,
    )[1].astype(_I64)
    syn_key = _combine(_combine(hosts[: syn.size], sport[syn] + 1, _PORTS), dport[syn] + 1, _PORTS)
    reply_key = _combine(_combine(hosts[syn.size :], dport[reply] + 1, _PORTS), sport[reply] + 1, _PORTS)
    order = np.argsort(reply_key, kind="stable")
    sorted_keys = reply_key[order]
    lo = np.searchsorted(sorted_keys, syn_key, "left")
    count = np.searchsorted(sorted_keys, syn_key, "right") - lo
    which = np.repeat(np.arange(syn.size), count)
    start = np.cumsum(count) - count
    answer = reply[order[np.repeat(lo - start, count) + np.arange(int(count.sum()))]]
    ts = t[syn]
    ok = (t[answer] >= ts[which]) & (t[answer] <= ts[which] + timeout_ns)
    synack = (flags[answer] & _SYN) != 0
    answered = np.zeros(syn.size, bool)
    refused = np.zeros(syn.size, bool)
    answered[which[ok & synack]] = True
    refused[which[ok & ~synack]] = True
    refused &= ~answered
    # no answer yet and still inside the timeout at the end: fate unknown
    known = answered | refused
    if last is None:
        known[:] = True
    else:
        known |= ts + timeout_ns <= last
    return syn[known], answered[known], refused[known]


def feature_rows(
    records: pd.DataFrame | Iterable[pa.RecordBatch | pa.Table],
    *,
    window_s: float = 5.0,
    timeout_s: float = 3.0,
    top: int = 100,
) -> list[dict[str, Any]]:
    """The ``features`` rows of a capture's records, sorted by window end, query, subject.

    ``records``: record batches (:data:`netmon.records.ARROW_SCHEMA`) or :func:`records_frame`.

    Examples
    --------
    >>> import pyarrow as pa
    >>> s = 10**9
    >>> t = pa.table({"ts": pa.array([0, s // 2, s], pa.timestamp("ns", tz="UTC")),
    ...   "src_ip": ["6.6.6.6", "10.0.0.1", "6.6.6.6"], "dst_ip": ["10.0.0.1", "6.6.6.6", "10.0.0.1"],
    ...   "proto": pa.array([6, 6, 6], pa.int16()), "src_port": [999, 22, 999], "dst_port": [22, 999, 23],
    ...   "tcp_flags": pa.array([2, 0x14, 2], pa.int16()), "icmp_type": pa.array([None] * 3, pa.int16())})
    >>> rows = feature_rows([t], timeout_s=1)  # the RST refuses the first SYN; the second, unknown
    >>> row = next(r for r in rows if r["query"] == "src" and r["subject"] == "6.6.6.6")
    >>> row["attempts"], row["failed"], row["vertical"], row["vertical_host"], row["fail_ratio"]
    (1, 1, 1, '10.0.0.1', 1.0)
    """
    if window_s <= 0 or timeout_s < 0:
        raise ValueError(f"window_s must be > 0 and timeout_s >= 0, got {window_s}, {timeout_s}")
    f = records if isinstance(records, pd.DataFrame) else records_frame(records)
    f = f.dropna(subset=["src", "dst"])
    if f.empty:
        return []
    w_ns = round(window_s * 1e9)
    names, (src, dst) = _encode(f["src"], f["dst"])
    n = len(names)
    t = np.asarray(f["t"].to_numpy(), _I64)
    w = t // w_ns
    # packets per (window, destination, source)
    first, packets = _reduce(_combine(_combine(w - w.min(), dst, n), src, n))
    ints = {c: np.asarray(f[c].to_numpy(), _I64) for c in _CONTROL_INTS}
    keep = np.flatnonzero(control_mask(ints["proto"], ints["flags"], ints["icmp"]))
    return _features(
        names,
        (w[first], dst[first], src[first], packets),
        (t[keep], src[keep], dst[keep], *(ints[c][keep] for c in _CONTROL_INTS)),
        window_ns=w_ns,
        timeout_ns=round(timeout_s * 1e9),
        top=top,
        last=int(t.max()),
        before=None,
        time=_iso,
    )


def features_of(
    pairs: pd.DataFrame | Mapping[str, Any],
    control: pd.DataFrame | Mapping[str, Any],
    *,
    window_ns: int,
    timeout_ns: int,
    top: int = 100,
    last: int | None,
    before: int | None = None,
    time: Callable[[int], Any] = _iso,
) -> list[dict[str, Any]]:
    """The ``features`` rows of windows from their inputs, sorted by window end, query, subject.

    ``pairs``: ``w, dst, src, packets`` (:func:`pair_counts`), every packet of each window
    counted once; ``control``: the control records (:data:`CONTROL_COLUMNS`, :func:`control_mask`),
    those of the windows and those that may answer their SYNs (up to ``timeout_ns`` after the
    last window's end). ``last``: the newest record's time, ns (a SYN whose timeout runs past it
    has no known fate); None: every fate is known. ``before``: rows of windows before this index
    only. ``time``: a window bound (ns) as written in ``window_start`` and ``window_end``
    (ISO-8601 text). Either may be a mapping of column name to a pandas, numpy or pyarrow array
    (``pipeline.features`` hands over Arrow columns); address columns are text or categorical,
    without nulls.
    """
    names, (dst, src, csrc, cdst) = _encode(pairs["dst"], pairs["src"], control["src"], control["dst"])

    def ints(frame: pd.DataFrame | Mapping[str, Any], column: str) -> np.ndarray:
        values = frame[column]
        if isinstance(values, pa.ChunkedArray | pa.Array):
            values = values.fill_null(-1).cast(pa.int64())
        return np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values, _I64)

    return _features(
        names,
        (ints(pairs, "w"), dst, src, ints(pairs, "packets")),
        (ints(control, "t"), csrc, cdst, *(ints(control, c) for c in _CONTROL_INTS)),
        window_ns=window_ns,
        timeout_ns=timeout_ns,
        top=top,
        last=last,
        before=before,
        time=time,
    )


def _features(
    names: np.ndarray,
    pairs: tuple[np.ndarray, ...],
    control: tuple[np.ndarray, ...],
    *,
    window_ns: int,
    timeout_ns: int,
    top: int,
    last: int | None,
    before: int | None,
    time: Callable[[int], Any],
) -> list[dict[str, Any]]:
    """:func:`features_of` on address codes into ``names`` (sorted): ``pairs`` = (w, dst, src,
    packets), ``control`` = (t, src, dst, proto, sport, dport, flags, icmp)."""
    pw, pdst, psrc, pk = pairs
    if before is not None:
        cut = pw < before
        pw, pdst, psrc, pk = pw[cut], pdst[cut], psrc[cut], pk[cut]
    if not pw.size:
        return []
    n = max(len(names), 1)
    ct, csrc, cdst, proto, sport, dport, flags, icmp = control
    cw = ct // window_ns
    w0 = int(min(pw.min(), cw.min())) if cw.size else int(pw.min())

    def ws(w: np.ndarray, subject: np.ndarray) -> np.ndarray:
        """The (window, address) key."""
        return (w - w0) * n + subject

    # --- SYN fates and ICMP unreachables ------------------------------------------------------
    syn, answered, refused = _fates(ct, csrc, cdst, sport, dport, flags, proto == 6, n, timeout_ns, last)
    unreach = np.zeros(ct.size, bool)
    for family, kind in _UNREACHABLE:
        unreach |= (proto == family) & (icmp == kind)
    unreach = np.flatnonzero(unreach)
    if before is not None:
        inside = cw[syn] < before
        syn, answered, refused = syn[inside], answered[inside], refused[inside]
        unreach = unreach[cw[unreach] < before]
    f_ws, f_src, f_dst, f_port = ws(cw[syn], csrc[syn]), csrc[syn], cdst[syn], dport[syn]

    # --- per source ---------------------------------------------------------------------------
    first, packets = _reduce(ws(pw, psrc), pk)
    keys = ws(pw[first], psrc[first])
    s_w, s_subject = pw[first], psrc[first]
    total_by_w = np.bincount(pw - w0, weights=pk).astype(_I64)
    total = total_by_w[s_w - w0]
    at, _ = _reduce(_combine(_combine(f_ws, f_dst, n), f_port + 1, _PORTS))  # distinct attempts
    attempt_ws, attempts = _reduce(f_ws[at])
    attempts = _lookup(keys, f_ws[at][attempt_ws], attempts, keys.size)
    # an ICMP unreachable tells its recipient (the prober) that the host it came from failed it;
    # the port probed is inside the quoted header, which records do not carry: port -1
    bad = ~answered
    x_ws = np.concatenate((f_ws[bad], ws(cw[unreach], cdst[unreach])))
    x_dst = np.concatenate((f_dst[bad], csrc[unreach]))
    x_port = np.concatenate((f_port[bad], np.full(unreach.size, -1, _I64)))
    at, _ = _reduce(_combine(_combine(x_ws, x_dst, n), x_port + 1, _PORTS))
    x_ws, x_dst, x_port = x_ws[at], x_dst[at], x_port[at]
    fail_at, failed = _reduce(x_ws)
    failed = _lookup(keys, x_ws[fail_at], failed, keys.size)
    share = packets / total
    fail_ratio = failed / np.maximum(np.maximum(attempts, failed), 1)
    keep = _top_mask(s_w, s_subject, [failed, packets], top) & (packets > 0)  # the ranked columns
    # the most distinct failed ports on one host, the most distinct failed hosts on one port
    at, count = _reduce(_combine(x_ws, x_dst, n))
    v_ws, v_host, vertical = _best(x_ws[at], x_dst[at], count)
    at, count = _reduce(_combine(x_ws, x_port + 1, _PORTS))
    h_ws, h_port, horizontal = _best(x_ws[at], x_port[at], count)
    v_pos, v_hit = _find(v_ws, keys)
    h_pos, h_hit = _find(h_ws, keys)

    # --- per destination ----------------------------------------------------------------------
    half = ~answered & ~refused
    d_first, d_packets = _reduce(ws(pw, pdst), pk)
    d_pair_ws = ws(pw[d_first], pdst[d_first])
    _, d_sources = _reduce(ws(pw, pdst))
    fd_ws = ws(cw[syn], f_dst)
    d_keys = np.unique(np.concatenate((d_pair_ws, fd_ws)))
    d_w = d_keys // n + w0
    d_subject = d_keys % n
    d_packets = _lookup(d_keys, d_pair_ws, d_packets, d_keys.size)
    d_sources = _lookup(d_keys, d_pair_ws, d_sources, d_keys.size)
    at, d_syn = _reduce(fd_ws)
    d_syn = _lookup(d_keys, fd_ws[at], d_syn, d_keys.size)
    at, d_half = _reduce(fd_ws[half])
    d_half = _lookup(d_keys, fd_ws[half][at], d_half, d_keys.size)
    half_ws, half_src = fd_ws[half], f_src[half]
    at, _ = _reduce(_combine(half_ws, half_src, n))
    at2, d_half_src = _reduce(half_ws[at])
    d_half_src = _lookup(d_keys, half_ws[at][at2], d_half_src, d_keys.size)
    d_ratio = d_half / np.maximum(d_syn, 1)
    d_keep = _top_mask(d_w, d_subject, [d_sources, d_packets, d_half], top)

    # --- rows ---------------------------------------------------------------------------------
    bounds: dict[int, tuple[Any, Any]] = {}

    def window(w: int) -> tuple[Any, Any]:
        if w not in bounds:
            bounds[w] = (time(w * window_ns), time((w + 1) * window_ns))
        return bounds[w]

    out: list[dict[str, Any]] = []
    columns = zip(
        d_w[d_keep].tolist(), names[d_subject[d_keep]].tolist(), d_packets[d_keep].tolist(),
        d_sources[d_keep].tolist(), d_syn[d_keep].tolist(), d_half[d_keep].tolist(),
        d_half_src[d_keep].tolist(), d_ratio[d_keep].tolist(), strict=True,
    )  # fmt: skip
    for w, subject, packets_, sources, syn_, half_open, half_sources, ratio in columns:
        start, end = window(w)
        out.append(
            {"query": "dst", "window_start": start, "window_end": end, "subject": subject,
             "packets": packets_, "sources": sources, "syn": syn_, "half_open": half_open,
             "half_open_sources": half_sources, "half_open_ratio": ratio}
        )  # fmt: skip
    for i in np.flatnonzero(keep).tolist():
        start, end = window(int(s_w[i]))
        vh, hh = bool(v_hit[i]), bool(h_hit[i])
        out.append(
            {
                "query": "src",
                "window_start": start,
                "window_end": end,
                "subject": names[s_subject[i]],
                "packets": int(packets[i]),
                "attempts": int(attempts[i]),
                "failed": int(failed[i]),
                "total": int(total[i]),
                "share": float(share[i]),
                "fail_ratio": float(fail_ratio[i]),
                "vertical_host": names[v_host[v_pos[i]]] if vh else None,
                "vertical": int(vertical[v_pos[i]]) if vh else 0,
                "horizontal_port": int(h_port[h_pos[i]]) if hh else None,
                "horizontal": int(horizontal[h_pos[i]]) if hh else 0,
            }
        )
    out.sort(key=lambda r: (r["window_end"], r["query"], r["subject"]))
    return out
