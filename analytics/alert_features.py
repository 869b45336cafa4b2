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
100 000 rows. Everything is exact (pandas group-bys, no sketches).

The rows need only two inputs, which a streaming job can gather window by window
(``pipeline.features``): the packets per (window, destination, source) pair
(:func:`pair_counts`) and the *control* records, those :func:`control_mask` keeps (TCP SYNs,
SYN-ACKs and RSTs, ICMP unreachables). :func:`features_of` turns them into the rows;
:func:`feature_rows` is it over a whole capture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

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
_SRC_RANK = ("failed", "packets")
#: the columns of :func:`records_frame` (times ``t`` in ns, nulls as -1) a control record keeps
CONTROL_COLUMNS = ("t", "src", "dst", "proto", "sport", "dport", "flags", "icmp")
_DST_RANK = ("sources", "packets", "half_open")


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


def _syn_fates(f: pd.DataFrame, timeout_ns: int, last: int | None) -> pd.DataFrame:
    """One row per SYN with a known fate: t, w, src, dst, dport, answered, refused."""
    tcp = f[f.proto == 6]
    flags = tcp["flags"]
    syn = tcp[(flags & (_SYN | _ACK)) == _SYN][["t", "w", "src", "dst", "sport", "dport"]]
    syn = syn.reset_index(drop=True)
    syn["i"] = np.arange(len(syn))
    reply = tcp[((flags & (_SYN | _ACK)) == (_SYN | _ACK)) | ((flags & _RST) != 0)]
    # the answer travels the reversed 4-tuple
    reply = pd.DataFrame(
        {
            "ta": reply.t.to_numpy(),
            "src": reply.dst.to_numpy(),
            "dst": reply.src.to_numpy(),
            "sport": reply.dport.to_numpy(),
            "dport": reply.sport.to_numpy(),
            "synack": ((reply["flags"] & _SYN) != 0).to_numpy(),
        }
    )
    pairs = syn.merge(reply, on=["src", "dst", "sport", "dport"], how="inner")
    pairs = pairs[(pairs.ta >= pairs.t) & (pairs.ta <= pairs.t + timeout_ns)]
    answered = np.zeros(len(syn), bool)
    refused = np.zeros(len(syn), bool)
    answered[pairs.i[pairs.synack].to_numpy()] = True
    refused[pairs.i[~pairs.synack].to_numpy()] = True
    syn["answered"] = answered
    syn["refused"] = refused & ~answered
    # no answer yet and still inside the timeout at the end: fate unknown
    known = answered | refused
    if last is None:
        known[:] = True
    else:
        known |= syn.t.to_numpy() + timeout_ns <= last
    return syn[known]


def _top(frame: pd.DataFrame, columns: tuple[str, ...], top: int) -> pd.DataFrame:
    """Per window, the rows in the ``top`` of any of ``columns`` (ties broken by subject text)."""
    if top <= 0 or frame.empty:
        return frame
    keep = np.zeros(len(frame), bool)
    for column in columns:
        ranked = frame.sort_values(["w", column, "subject"], ascending=[True, False, True], kind="stable")
        ranked = ranked[ranked[column] > 0]
        chosen = ranked.groupby("w", sort=False).head(top).index
        keep |= frame.index.isin(chosen)
    return frame[keep]


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
    f = f.assign(w=f.t // w_ns)
    control = f[control_mask(f["proto"].to_numpy(), f["flags"].to_numpy(), f["icmp"].to_numpy())]
    return features_of(
        pair_counts(f),
        control[list(CONTROL_COLUMNS)],
        window_ns=w_ns,
        timeout_ns=round(timeout_s * 1e9),
        top=top,
        last=int(f.t.max()),
    )


def features_of(
    pairs: pd.DataFrame,
    control: pd.DataFrame,
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
    (ISO-8601 text).
    """
    w_ns = window_ns
    if before is not None:
        pairs = pairs[pairs.w < before]
    if pairs.empty:
        return []
    control = control.assign(w=control.t // w_ns)

    # --- per source ---------------------------------------------------------------------------
    packets = pairs.groupby(["w", "src"]).packets.sum().rename("packets")
    total = pairs.groupby("w").packets.sum().rename("total")
    fates = _syn_fates(control, timeout_ns, last)
    is_unreach = np.zeros(len(control), bool)
    for proto, kind in _UNREACHABLE:
        is_unreach |= ((control.proto == proto) & (control.icmp == kind)).to_numpy()
    unreach = control[is_unreach]
    if before is not None:
        fates = fates[fates.w < before]
        unreach = unreach[unreach.w < before]
    attempts = fates[["w", "src", "dst", "dport"]].drop_duplicates()
    failed = fates[~fates.answered][["w", "src", "dst", "dport"]]
    # an ICMP unreachable tells its recipient (the prober) that the host it came from failed it;
    # the port probed is inside the quoted header, which records do not carry: port -1
    unreach_targets = pd.DataFrame(
        {"w": unreach.w.to_numpy(), "src": unreach.dst.to_numpy(), "dst": unreach.src.to_numpy(), "dport": -1}
    )
    failed = pd.concat([failed, unreach_targets], ignore_index=True).drop_duplicates()
    src = pd.concat(
        [
            packets,
            attempts.groupby(["w", "src"]).size().rename("attempts"),
            failed.groupby(["w", "src"]).size().rename("failed"),
        ],
        axis=1,
    ).fillna(0)
    src = src[src.packets > 0].astype("int64").reset_index().rename(columns={"src": "subject"})
    src = src.merge(total.reset_index(), on="w")
    src["share"] = src.packets / src.total
    src["fail_ratio"] = src.failed / np.maximum(src.attempts, src.failed).clip(lower=1)
    src = _top(src, _SRC_RANK, top)
    vertical = failed.groupby(["w", "src", "dst"]).size().rename("vertical").reset_index()
    vertical = vertical.sort_values(["w", "src", "vertical", "dst"], ascending=[True, True, False, True])
    vertical = vertical.drop_duplicates(["w", "src"]).rename(columns={"dst": "vertical_host"})
    horizontal = failed.groupby(["w", "src", "dport"]).size().rename("horizontal").reset_index()
    horizontal = horizontal.sort_values(
        ["w", "src", "horizontal", "dport"], ascending=[True, True, False, True]
    )
    horizontal = horizontal.drop_duplicates(["w", "src"]).rename(columns={"dport": "horizontal_port"})
    src = src.merge(vertical.rename(columns={"src": "subject"}), on=["w", "subject"], how="left")
    src = src.merge(horizontal.rename(columns={"src": "subject"}), on=["w", "subject"], how="left")

    # --- per destination ----------------------------------------------------------------------
    half = fates[~fates.answered & ~fates.refused]
    dst = pd.concat(
        [
            pairs.groupby(["w", "dst"]).packets.sum().rename("packets"),
            pairs.groupby(["w", "dst"]).size().rename("sources"),
            fates.groupby(["w", "dst"]).size().rename("syn"),
            half.groupby(["w", "dst"]).size().rename("half_open"),
            half.groupby(["w", "dst"]).src.nunique().rename("half_open_sources"),
        ],
        axis=1,
    ).fillna(0)
    dst = dst.astype("int64").reset_index().rename(columns={"dst": "subject"})
    dst["half_open_ratio"] = dst.half_open / dst.syn.clip(lower=1)
    dst = _top(dst, _DST_RANK, top)

    out: list[dict[str, Any]] = []
    for query, frame in (("dst", dst), ("src", src)):
        for rec in frame.to_dict("records"):
            w = int(rec.pop("w"))
            row: dict[str, Any] = {
                "query": query,
                "window_start": time(w * w_ns),
                "window_end": time((w + 1) * w_ns),
            }
            for key, value in rec.items():
                if isinstance(value, float) and value != value:  # NaN: no failed attempt
                    value = 0 if key in ("vertical", "horizontal") else None
                elif key in ("vertical", "horizontal", "horizontal_port"):
                    value = int(value)
                elif isinstance(value, np.integer):
                    value = int(value)
                elif isinstance(value, np.floating):
                    value = float(value)
                row[key] = value
            out.append(row)
    out.sort(key=lambda r: (r["window_end"], r["query"], r["subject"]))
    return out
