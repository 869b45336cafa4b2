"""The built-in window-join queries over packet records, and an offline runner for them.

Two queries, each a definition the Spark operator reproduces with the same filters and keys:

**TCP handshake** (:class:`HandshakeQuery`). Left = SYNs (``proto = 6``, SYN bit set, ACK bit clear),
right = SYN-ACKs (SYN and ACK set). A SYN's key is ``src_ip,dst_ip,src_port,dst_port,(seq+1) mod 2³²``,
a SYN-ACK's is ``dst_ip,src_ip,dst_port,src_port,ack``: the reversed 4-tuple with ``ack = seq + 1``
(canonical text as in :mod:`analytics.keys`). ``T_L = T`` and ``T_R = 0``: a SYN-ACK joins a SYN
at most ``T`` after it (at equal timestamps too). The handshake RTT of a SYN-ACK is the time since the
latest matching SYN (retransmitted SYNs share the key; the smallest delay is kept). SYNs without
a SYN-ACK within ``T`` (and at least ``T`` before the end of the input) are counted per destination:
the half-open indicator.

**Link correlation** (:class:`LinkQuery`). Stream A and stream B are two :func:`netmon.filters.parse_filter`
expressions over one record stream, e.g. ``iface=eth0`` / ``iface=eth1`` (two links) or
``dst_ip=10.1.0.0/16`` / ``dst_ip=10.2.0.0/16`` (two address ranges); A ⋈ B on ``src_ip`` (or another
key) with ``T_L = T_R = T``: the same host seen in both within ``T``. Many-to-many, the case where
shedding matters most (seed 003 §3.3). Extension: ``right_key`` lets B use another key column (e.g.
the two directions of a connection: A ``dst_port=7000`` on ``src_port``, B ``src_port=7000`` on
``dst_port``).

:func:`run_join` runs a query over records offline: it cuts the records into micro-batches of
``batch_s`` seconds of event time (so unsorted captures are joined in time order) and feeds
:class:`analytics.join.SymmetricHashJoin`, as the Spark operator does per trigger. With
``late_after_s`` (the watermark delay ``d``; ``netmon analyze join`` passes its ``--lateness``,
by default a configured query's ``[pipeline] watermark_s``) it first drops the late records by the
pipeline's one rule (:class:`analytics.late.LateRule`, in input order: a record more than ``d``
behind the newest timestamp before it), so a backward jump in event time is dropped as the
pipeline drops it instead of being sorted back into the join.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analytics._base import Base
from analytics.join import BatchStats, SymmetricHashJoin, combine_stats
from analytics.join_cost import JoinCostModel
from analytics.keys import key_text, parse_key
from analytics.late import LateRule
from analytics.shedding import LoadShedder, OnlineMaxSubset, Shedder

__all__ = [
    "QUERY_NAMES",
    "STRATEGY_NAMES",
    "HandshakeQuery",
    "JoinRun",
    "JoinSide",
    "LinkQuery",
    "analyze_join",
    "handshake_rtts",
    "link_matches",
    "make_shedder",
    "measure_model",
    "rtt_per_server",
    "run_join",
    "run_join_sides",
    "unanswered_syns",
]

QUERY_NAMES = ("handshake", "link")
#: Strategies :func:`make_shedder` builds.
STRATEGY_NAMES = ("none", "cf", "inp", "pni", "max-subset", "max-subset-prior")

_SYN, _ACK = 0x02, 0x10
_SEQ_MOD = 2**32
_NS = 1_000_000_000


@dataclass(frozen=True)
class JoinSide:
    """One input of a join: event times (int64 ns), keys, record ids and payload columns."""

    ts: np.ndarray
    keys: np.ndarray
    ids: np.ndarray
    payload: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, idx: np.ndarray) -> JoinSide:
        """The rows ``idx`` (indices or a boolean mask)."""
        return JoinSide(
            self.ts[idx], self.keys[idx], self.ids[idx], {k: v[idx] for k, v in self.payload.items()}
        )

    @classmethod
    def concat(cls, sides: Iterable[JoinSide]) -> JoinSide:
        sides = list(sides)
        names = list(sides[0].payload) if sides else []
        return cls(
            np.concatenate([s.ts for s in sides]),
            np.concatenate([s.keys for s in sides]),
            np.concatenate([s.ids for s in sides]),
            {k: np.concatenate([s.payload[k] for s in sides]) for k in names},
        )


def _records(records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(records, pa.Table):
        return records
    if isinstance(records, pa.RecordBatch):
        return pa.Table.from_batches([records])
    batches = list(records)
    if not batches:
        from netmon.records import ARROW_SCHEMA

        return ARROW_SCHEMA.empty_table()
    return pa.Table.from_batches(batches)


def _numpy(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col.cast(pa.timestamp("ns", tz=col.type.tz)), pa.int64())
    out = col.to_numpy(zero_copy_only=False)
    return out.astype(object) if out.dtype.kind in "US" else out


def _side(
    table: pa.Table, mask: pa.Array, keys: pa.Array, payload: Mapping[str, str], offset: int
) -> JoinSide:
    mask = pc.and_(pc.fill_null(mask, False), pc.is_valid(keys))
    idx = np.flatnonzero(_numpy(mask).astype(bool))
    sub = table.take(pa.array(idx))
    return JoinSide(
        ts=_numpy(sub.column("ts")).astype(np.int64),
        keys=_numpy(keys.take(pa.array(idx))),
        ids=(offset + idx).astype(np.int64),
        payload={name: _numpy(sub.column(col)) for name, col in payload.items()},
    )


def _check_window(window_s: float) -> float:
    window_s = float(window_s)
    if not math.isfinite(window_s) or window_s < 0:
        raise ValueError(f"window_s: expected a number of seconds >= 0, got {window_s!r}")
    return window_s


class HandshakeQuery(Base):
    """TCP handshake: SYN ⋈ SYN-ACK on the reversed 4-tuple with ``ack = seq + 1``, within ``T``.

    Parameters
    ----------
    window_s
        ``T`` (seconds): the longest SYN to SYN-ACK delay that still counts as an answer.

    Examples
    --------
    >>> import pyarrow as pa
    >>> recs = pa.table({"ts": pa.array([0, 20_000_000], pa.timestamp("ns", tz="UTC")),
    ...     "src_ip": ["10.0.0.1", "192.0.2.9"], "dst_ip": ["192.0.2.9", "10.0.0.1"],
    ...     "proto": [6, 6], "src_port": [5555, 443], "dst_port": [443, 5555],
    ...     "tcp_flags": [0x02, 0x12], "tcp_seq": [2**32 - 1, 77], "tcp_ack": [0, 0]})
    >>> left, right = HandshakeQuery(window_s=3).sides(recs)
    >>> left.keys.tolist(), right.keys.tolist()
    (['10.0.0.1,192.0.2.9,5555,443,0'], ['10.0.0.1,192.0.2.9,5555,443,0'])

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005. §2.1.
    """

    name = "handshake"

    def __init__(self, window_s: float = 3.0) -> None:
        self.window_s = _check_window(window_s)

    @property
    def window_left_s(self) -> float:
        """``T_L = T``: a SYN waits ``T`` for its SYN-ACK."""
        return self.window_s

    @property
    def window_right_s(self) -> float:
        """``T_R = 0``: a SYN-ACK is never probed by a later SYN (except at the same instant)."""
        return 0.0

    def sides(self, records: pa.Table | pa.RecordBatch, *, offset: int = 0) -> tuple[JoinSide, JoinSide]:
        """(SYNs, SYN-ACKs) of ``records``; ids are row numbers plus ``offset``."""
        t = _records(records)
        flags = pc.fill_null(pc.cast(t.column("tcp_flags"), pa.int64()), 0)
        tcp = pc.equal(pc.cast(t.column("proto"), pa.int64()), 6)
        syn_bit = pc.not_equal(pc.bit_wise_and(flags, _SYN), 0)
        ack_bit = pc.not_equal(pc.bit_wise_and(flags, _ACK), 0)
        seq_next = pc.cast(
            pc.bit_wise_and(pc.add(pc.cast(t.column("tcp_seq"), pa.int64()), 1), _SEQ_MOD - 1), pa.string()
        )
        ack = pc.cast(pc.cast(t.column("tcp_ack"), pa.int64()), pa.string())
        fwd = key_text(t, ("src_ip", "dst_ip", "src_port", "dst_port"))
        rev = key_text(t, ("dst_ip", "src_ip", "dst_port", "src_port"))
        left_keys = pc.binary_join_element_wise(fwd, seq_next, ",", null_handling="emit_null")
        right_keys = pc.binary_join_element_wise(rev, ack, ",", null_handling="emit_null")
        payload = {"client": "src_ip", "server": "dst_ip", "server_port": "dst_port"}
        left = _side(t, pc.and_(tcp, pc.and_(syn_bit, pc.invert(ack_bit))), left_keys, payload, offset)
        right = _side(t, pc.and_(tcp, pc.and_(syn_bit, ack_bit)), right_keys, {}, offset)
        return left, right


class LinkQuery(Base):
    """Link correlation: stream A ⋈ stream B on ``src_ip`` (or ``key``) within ``T`` both ways.

    Parameters
    ----------
    left, right
        Filter expressions selecting streams A and B (:func:`netmon.filters.parse_filter`), e.g.
        ``"iface=eth0"`` or ``"dst_ip=10.1.0.0/16"``.
    window_s
        ``T = T_L = T_R`` (seconds).
    key
        The join key (columns as in :func:`analytics.keys.parse_key`), default ``src_ip``.
    right_key
        B's key columns when they differ from A's (extension; default: ``key``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> recs = pa.table({"ts": pa.array([0, 1, 2], pa.timestamp("ns", tz="UTC")),
    ...     "src_ip": ["10.0.0.1", "10.0.0.1", "10.0.0.2"], "iface": ["a", "b", "b"]})
    >>> a, b = LinkQuery("iface=a", "iface=b").sides(recs)
    >>> a.keys.tolist(), b.keys.tolist(), b.ids.tolist()
    (['10.0.0.1'], ['10.0.0.1', '10.0.0.2'], [1, 2])

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005. §2.1.
    """

    name = "link"

    def __init__(
        self, left: str, right: str, window_s: float = 3.0, key: str = "src_ip", right_key: str | None = None
    ) -> None:
        from netmon.filters import parse_filter

        self._filters = (parse_filter(left), parse_filter(right))
        self.left = left
        self.right = right
        self.window_s = _check_window(window_s)
        self.key = key
        self.right_key = right_key
        self._keys = (parse_key(key), parse_key(right_key if right_key else key))

    @property
    def window_left_s(self) -> float:
        return self.window_s

    @property
    def window_right_s(self) -> float:
        return self.window_s

    def sides(self, records: pa.Table | pa.RecordBatch, *, offset: int = 0) -> tuple[JoinSide, JoinSide]:
        """(A, B) of ``records``; ids are row numbers plus ``offset``; records without a key skipped."""
        t = _records(records)
        (f_a, f_b), (k_a, k_b) = self._filters, self._keys
        a = _side(t, f_a.mask(t), key_text(t, k_a), {}, offset)
        b = _side(t, f_b.mask(t), key_text(t, k_b), {}, offset)
        return a, b


# -- running a query ----------------------------------------------------------------------------
class JoinWindows(Protocol):
    """The two windows of a join, in seconds: all a run over prepared sides needs of its query."""

    @property
    def window_left_s(self) -> float: ...

    @property
    def window_right_s(self) -> float: ...


@dataclass
class JoinRun:
    """The outcome of :func:`run_join`: results, per-batch statistics, the inputs, unmatched tuples.

    ``left`` and ``right`` are the tuples joined (without the late ones); ``late_dropped`` counts
    the records the late rule dropped before the join (``late_after_s``; not the join's own
    ``late``, :attr:`total`).
    """

    results: pd.DataFrame
    stats: list[BatchStats]
    left: JoinSide
    right: JoinSide
    unmatched: pd.DataFrame
    span_s: float
    late_dropped: int = 0

    @property
    def total(self) -> BatchStats:
        """The statistics of the whole run (:func:`analytics.join.combine_stats`)."""
        return combine_stats(self.stats)


def run_join(
    query: HandshakeQuery | LinkQuery,
    records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch] | tuple[JoinSide, JoinSide],
    *,
    shedder: Shedder | None = None,
    batch_s: float = 1.0,
    lateness_s: float = 0.0,
    track_unmatched: bool = False,
    late_after_s: float | None = None,
) -> JoinRun:
    """Run ``query`` over ``records`` (or prepared sides) in event-time micro-batches of ``batch_s``.

    Batches are aligned to multiples of ``batch_s`` from the first timestamp; each is one
    :meth:`SymmetricHashJoin.process_batch` call. Empty batches are skipped.

    ``late_after_s``: the watermark delay ``d`` of the pipeline's late rule (``[pipeline]
    watermark_s``): a record more than ``d`` behind the newest timestamp before it, in the order
    of ``records``, is dropped before the join and counted (:attr:`JoinRun.late_dropped`), as the
    pipeline's joins never see it. None (the default): no record is dropped, and a backward jump
    is sorted into the event-time batches. The rule reads every record, so it needs ``records``,
    not prepared sides.
    """
    if not (math.isfinite(batch_s) and batch_s > 0):
        raise ValueError(f"batch_s: expected a number of seconds > 0, got {batch_s!r}")
    late = 0
    if isinstance(records, tuple) and len(records) == 2 and isinstance(records[0], JoinSide):
        if late_after_s is not None:
            raise ValueError("late_after_s: the late rule reads every record in order, not prepared sides")
        left, right = records
    else:
        (left, right), late = _on_time_sides(query, _records(records), late_after_s)
    run = run_join_sides(
        query,
        (left, right),
        shedder=shedder,
        batch_s=batch_s,
        lateness_s=lateness_s,
        track_unmatched=track_unmatched,
    )
    run.late_dropped = late
    return run


def _on_time_sides(
    query: HandshakeQuery | LinkQuery, table: pa.Table, late_after_s: float | None
) -> tuple[tuple[JoinSide, JoinSide], int]:
    """``query``'s sides of ``table`` without the records late by the rule (``late_after_s``: ``d``,
    None: none late), and how many records were late. Ids stay the records' row numbers."""
    left, right = query.sides(table)
    if late_after_s is None:
        return (left, right), 0
    late_after_s = float(late_after_s)
    if not (math.isfinite(late_after_s) and late_after_s >= 0):
        raise ValueError(f"late_after_s: expected a number of seconds >= 0, got {late_after_s!r}")
    ts = table.column("ts")
    if pa.types.is_timestamp(ts.type):
        ts = ts.cast(pa.timestamp("ns", tz=ts.type.tz))
    ns = pc.cast(ts, pa.int64())
    valid = None if ns.null_count == 0 else np.asarray(pc.is_valid(ns).to_numpy(zero_copy_only=False), bool)
    values = np.asarray(pc.fill_null(ns, 0).to_numpy(), np.int64)
    rule = LateRule(round(late_after_s * _NS))  # as the pipeline rounds [pipeline] watermark_s
    on_time = ~rule.late_mask(values, valid)
    return (left.take(on_time[left.ids]), right.take(on_time[right.ids])), rule.late


def run_join_sides(
    windows: JoinWindows,
    sides: tuple[JoinSide, JoinSide],
    *,
    shedder: Shedder | None = None,
    batch_s: float = 1.0,
    lateness_s: float = 0.0,
    track_unmatched: bool = False,
) -> JoinRun:
    """:func:`run_join` over prepared sides ``(left, right)``: only the windows of a query are needed.

    ``windows`` is a query (:class:`HandshakeQuery`, :class:`LinkQuery`) or anything else with
    ``window_left_s`` and ``window_right_s``, e.g. ``analytics.join_eval.WindowSpec``.
    """
    if not (math.isfinite(batch_s) and batch_s > 0):
        raise ValueError(f"batch_s: expected a number of seconds > 0, got {batch_s!r}")
    left, right = sides
    join = SymmetricHashJoin(
        windows.window_left_s,
        windows.window_right_s,
        shedder=shedder,
        lateness_s=lateness_s,
        track_unmatched=track_unmatched,
    )
    lo_ = np.argsort(left.ts, kind="stable")
    ro_ = np.argsort(right.ts, kind="stable")
    left_s, right_s = left.take(lo_), right.take(ro_)
    all_ts = np.concatenate([left_s.ts, right_s.ts])
    results: list[pd.DataFrame] = []
    stats: list[BatchStats] = []
    unmatched: list[pd.DataFrame] = []
    span_s = 0.0
    if len(all_ts):
        t0 = int(all_ts.min())
        span_s = (int(all_ts.max()) - t0) / _NS
        step = max(1, round(batch_s * _NS))
        b_left = (left_s.ts - t0) // step
        b_right = (right_s.ts - t0) // step
        for b in np.unique(np.concatenate([b_left, b_right])):
            ls = slice(*np.searchsorted(b_left, [b, b + 1]))
            rs = slice(*np.searchsorted(b_right, [b, b + 1]))
            out = join.process_batch(
                left_s.ts[ls], left_s.keys[ls], right_s.ts[rs], right_s.keys[rs],
                left_ids=left_s.ids[ls], right_ids=right_s.ids[rs],
                left_payload={k: v[ls] for k, v in left_s.payload.items()},
                right_payload={k: v[rs] for k, v in right_s.payload.items()},
            )  # fmt: skip
            results.append(out)
            assert join.last_stats is not None
            stats.append(join.last_stats)
            if track_unmatched:
                unmatched.append(join.expired_unmatched())
    if not results:  # no tuple on either side: one empty batch, so the run has its statistics
        results.append(join.process_batch([], [], [], []))
        assert join.last_stats is not None
        stats.append(join.last_stats)
    nonempty = [r for r in results if len(r)]
    res = pd.concat(nonempty, ignore_index=True) if nonempty else results[0]
    unmatched = [u for u in unmatched if len(u)]
    um = pd.concat(unmatched, ignore_index=True) if unmatched else pd.DataFrame()
    return JoinRun(res, stats, left, right, um, span_s)


def make_shedder(
    strategy: str,
    *,
    x_left: float = 1.0,
    x_right: float = 1.0,
    seed: int | None = None,
    window_left_s: float = 0.0,
    window_right_s: float = 0.0,
    cu_s: float = 0.0,
    cp_s: float = 0.0,
    budget: float = math.inf,
) -> Shedder | None:
    """``None`` for ``none``; a :class:`LoadShedder` for cf/inp/pni; :class:`OnlineMaxSubset` for
    ``max-subset`` (model includes the batch) and ``max-subset-prior`` (earlier batches only)."""
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"strategy: expected one of {', '.join(STRATEGY_NAMES)}, got {strategy!r}")
    if strategy == "none":
        return None
    if strategy in ("max-subset", "max-subset-prior"):
        return OnlineMaxSubset(
            window_left_s,
            window_right_s,
            cu_s,
            cp_s,
            budget,
            include_batch=strategy == "max-subset",
            seed=seed,
        )
    return LoadShedder(strategy, x_left=x_left, x_right=x_right, seed=seed)


def measure_model(
    run: JoinRun, *, cu_s: float | None = None, cp_s: float | None = None, window: tuple[float, float]
) -> JoinCostModel:
    """The cost model of an unshed run: rates and ``f`` over its span, measured (or given) C_u, C_p."""
    total = run.total
    span = run.span_s if run.span_s > 0 else math.nan
    lam_l, lam_r = len(run.left) / span, len(run.right) / span
    t_l, t_r = window
    pairs = lam_l * lam_r * (t_l + t_r)
    f = (total.unshed_estimate / span) / pairs if pairs > 0 else 0.0
    return JoinCostModel(
        lam_l if math.isfinite(lam_l) else 0.0,
        lam_r if math.isfinite(lam_r) else 0.0,
        t_l,
        t_r,
        min(1.0, f) if math.isfinite(f) else 0.0,
        total.cu_s if cu_s is None else cu_s,
        total.cp_s if cp_s is None else cp_s,
    )


def analyze_join(
    query: HandshakeQuery | LinkQuery,
    records: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
    *,
    strategy: str = "none",
    x_left: float | None = None,
    x_right: float | None = None,
    budget: float | None = None,
    cu_s: float | None = None,
    cp_s: float | None = None,
    seed: int | None = None,
    batch_s: float = 1.0,
    lateness_s: float = 0.0,
    late_after_s: float | None = None,
) -> tuple[JoinRun, JoinCostModel | None]:
    """``netmon analyze join``: run ``query`` with a strategy at given fractions or a budget.

    With ``budget`` (CPU seconds per second), an unshed run first measures λ_L, λ_R, f, C_u, C_p
    (C_u, C_p may be given instead); the optimizer (:class:`JoinCostModel`) then picks the
    strategy's fractions, or Online Max-Subset gets the budget. ``lateness_s`` is the join's
    (:func:`run_join`; the pipeline uses its watermark delay); ``late_after_s`` drops the late
    records first, for both runs (:func:`run_join`; the pipeline's is its watermark delay too).
    Returns the run and the model used.
    """
    if budget is not None and (x_left is not None or x_right is not None):
        raise ValueError("budget: give either the fractions x_left/x_right or a budget, not both")
    sides, late = _on_time_sides(query, _records(records), late_after_s)
    model = None
    xl, xr = (1.0 if x_left is None else x_left), (1.0 if x_right is None else x_right)
    if budget is not None:
        base = run_join(query, sides, batch_s=batch_s, lateness_s=lateness_s)
        model = measure_model(base, cu_s=cu_s, cp_s=cp_s, window=(query.window_left_s, query.window_right_s))
        if strategy in ("cf", "inp", "pni"):
            alloc = model.optimum(strategy, budget)
            xl, xr = alloc.x_left, alloc.x_right
    shedder = make_shedder(
        strategy, x_left=xl, x_right=xr, seed=seed, window_left_s=query.window_left_s,
        window_right_s=query.window_right_s, cu_s=model.cu_s if model else (cu_s or 0.0),
        cp_s=model.cp_s if model else (cp_s or 0.0), budget=budget if budget is not None else math.inf,
    )  # fmt: skip
    run = run_join(
        query, sides, shedder=shedder, batch_s=batch_s, lateness_s=lateness_s, track_unmatched=True
    )
    run.late_dropped = late
    return run, model


# -- query summaries ----------------------------------------------------------------------------
def handshake_rtts(results: pd.DataFrame) -> pd.DataFrame:
    """One row per answered SYN-ACK: ``synack_id``, ``syn_id``, ``client``, ``server``, ``server_port``,
    ``ts`` (SYN-ACK time) and ``rtt_s``, the delay since the latest matching SYN."""
    cols = ["synack_id", "syn_id", "client", "server", "server_port", "ts", "rtt_s"]
    if results.empty:
        return pd.DataFrame({c: [] for c in cols})
    rtt = (results["right_ts"] - results["left_ts"]).dt.total_seconds()
    df = pd.DataFrame(
        {
            "synack_id": results["right_id"].to_numpy(),
            "syn_id": results["left_id"].to_numpy(),
            "client": results["left_client"].to_numpy(),
            "server": results["left_server"].to_numpy(),
            "server_port": results["left_server_port"].to_numpy(),
            "ts": results["right_ts"].to_numpy(),
            "rtt_s": rtt.to_numpy(),
        }
    )
    df = df.sort_values(["synack_id", "rtt_s", "syn_id"], kind="stable")
    return df.drop_duplicates("synack_id", keep="first").reset_index(drop=True)[cols]


def rtt_per_server(rtts: pd.DataFrame) -> pd.DataFrame:
    """Per (server, port): ``handshakes`` and RTT ``min``/``p50``/``p90``/``max`` in seconds."""
    cols = ["server", "server_port", "handshakes", "rtt_min_s", "rtt_p50_s", "rtt_p90_s", "rtt_max_s"]
    if rtts.empty:
        return pd.DataFrame({c: [] for c in cols})
    g = rtts.groupby(["server", "server_port"], sort=True)["rtt_s"]
    out = pd.DataFrame(
        {
            "handshakes": g.size(),
            "rtt_min_s": g.min(),
            "rtt_p50_s": g.quantile(0.5),
            "rtt_p90_s": g.quantile(0.9),
            "rtt_max_s": g.max(),
        }
    ).reset_index()
    return out.sort_values(["handshakes", "server", "server_port"], ascending=[False, True, True],
                           kind="stable").reset_index(drop=True)[cols]  # fmt: skip


def unanswered_syns(run: JoinRun, window_s: float) -> pd.DataFrame:
    """SYNs with no SYN-ACK within ``window_s``, counted per destination (``server``), most first.

    A SYN counts only once its window has passed: ``ts + T`` before the last timestamp of the
    input. Under shedding a SYN that was not inserted cannot be answered, so counts are inflated.
    """
    syn = run.left
    answered = np.isin(syn.ids, run.results["left_id"].to_numpy())
    end = max(int(syn.ts.max()) if len(syn) else 0, int(run.right.ts.max()) if len(run.right) else 0)
    due = syn.ts + round(window_s * _NS) < end
    keep = ~answered & due
    if not keep.any():
        return pd.DataFrame({"server": [], "syns": []})
    s = pd.Series(syn.payload["server"][keep]).value_counts()
    out = pd.DataFrame({"server": s.index.to_numpy(), "syns": s.to_numpy()})
    return out.sort_values(["syns", "server"], ascending=[False, True], kind="stable").reset_index(drop=True)


def link_matches(results: pd.DataFrame) -> pd.DataFrame:
    """Per key: ``matches``, distinct A and B tuples matched, first and last result time."""
    cols = ["key", "matches", "left_tuples", "right_tuples", "first", "last"]
    if results.empty:
        return pd.DataFrame({c: [] for c in cols})
    when = results[["left_ts", "right_ts"]].max(axis=1)
    df = results.assign(when=when)
    g = df.groupby("key", sort=True)
    out = pd.DataFrame(
        {
            "matches": g.size(),
            "left_tuples": g["left_id"].nunique(),
            "right_tuples": g["right_id"].nunique(),
            "first": g["when"].min(),
            "last": g["when"].max(),
        }
    ).reset_index()
    return out.sort_values(["matches", "key"], ascending=[False, True], kind="stable").reset_index(drop=True)[
        cols
    ]
