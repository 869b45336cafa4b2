"""Symmetric hash join of two streams over time windows, with load shedding (seed 003 §2.1-2.2).

``L[T_L] ⋈ R[T_R]`` on an equality key. Each arriving tuple, in timestamp order, (1) *probes* the
opposite side's window for tuples with the same key whose timestamps lie within that window, producing
one result per match, then (2) is *inserted* into its own window; tuples that fell out of their
window are expired. A shedding strategy (:mod:`analytics.shedding`) may skip (1) or (2) per tuple.

Semantics, decided here and shared with the exact oracle and the Spark operator:

- **Window boundaries are inclusive** (Definition 2: ``t - t' ≤ T``). A left tuple at ``t_l`` and a
  right tuple at ``t_r`` with the same key join iff ``t_l - T_R ≤ t_r ≤ t_l + T_L``, the time-range
  condition Spark writes as ``r.ts BETWEEN l.ts - T_R AND l.ts + T_L``.
- **Processing order** is the timestamp order. Within a batch the tuples are stable-sorted by
  timestamp; at equal timestamps left tuples go before right tuples, and each side keeps its input
  order. Equal timestamps therefore never lose or duplicate a pair (whichever arrives second finds
  the first); the order only decides which tuple's coin a shedding strategy consults.
- **Batches** must be cut by time (all tuples of a batch after those of earlier batches), as a
  micro-batch engine does. A tuple older than the join's clock (the largest timestamp processed)
  is still joined exactly as long as it is at most ``lateness_s`` late: it probes the opposite state
  over its whole range ``[t - T_other, t + T_own]``, and state is kept ``lateness_s`` longer. More
  lateness is counted (``BatchStats.late``) and may miss pairs.

State per side holds the inserted tuples of the current window sorted by (key code, timestamp), as
numpy columns: insertion and expiry are bulk operations per batch and probes are vectorised binary
searches, so one call handles many keys. The batch entry point (``update``, or its batch form
``process_batch``) times its phases and reports the paper's ``C_u`` (insert + expire, per inserted
tuple) and ``C_p`` (probe + produce, per result).
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Self

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analytics._base import Base
from analytics.shedding import Decisions, Shedder

__all__ = ["BatchStats", "ExactWindowJoin", "SymmetricHashJoin", "combine_stats"]

_NS = 1_000_000_000
_VERSION = 1
_SIDES = ("left", "right")


# -- input conversion ---------------------------------------------------------------------------
def _as_ns(name: str, ts: Any) -> np.ndarray:
    """Timestamps as int64 nanoseconds (datetime64, pandas/pyarrow timestamps, or integer ns)."""
    if isinstance(ts, pa.ChunkedArray):
        ts = ts.combine_chunks()
    if isinstance(ts, pa.Array):
        if pa.types.is_timestamp(ts.type):
            ts = pc.cast(ts.cast(pa.timestamp("ns", tz=ts.type.tz)), pa.int64())
        if ts.null_count:
            raise ValueError(f"{name}: null timestamps")
        ts = ts.to_numpy(zero_copy_only=False)
    elif isinstance(ts, pd.Series | pd.Index):
        if isinstance(ts.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_any_dtype(ts.dtype):
            ts = pd.DatetimeIndex(ts).as_unit("ns").asi8
        else:
            ts = ts.to_numpy()
    arr = np.asarray(ts)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a one-dimensional array, got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.datetime64):
        if np.isnat(arr).any():
            raise ValueError(f"{name}: null timestamps")
        return arr.astype("datetime64[ns]").view(np.int64)
    if np.issubdtype(arr.dtype, np.integer) or len(arr) == 0:
        return arr.astype(np.int64)
    raise ValueError(f"{name}: expected datetime64 values or integer nanoseconds, got dtype {arr.dtype}")


def _as_keys(name: str, keys: Any, n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Key values, their uint64 codes and kind: ``"int"`` (code = value) or ``"str"`` (stable hash)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(keys, pa.Array):
        if keys.null_count:
            raise ValueError(f"{name}: null keys; filter records without a key out first")
        keys = keys.to_numpy(zero_copy_only=False)
    elif isinstance(keys, pd.Series | pd.Index):
        keys = keys.to_numpy()
    arr = np.asarray(keys)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name}: expected {n} keys (one per timestamp), got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.integer):
        vals = arr.astype(np.int64)
        return vals, vals.view(np.uint64), "int"
    if n == 0:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.uint64), ""
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    if arr.dtype != object or not all(isinstance(k, str | bytes) for k in arr):
        raise ValueError(f"{name}: expected integer or string keys (no nulls), got dtype {arr.dtype}")
    # pandas' hash is SipHash with a fixed key: stable across processes, unlike hash().
    return arr, pd.util.hash_array(arr, categorize=True), "str"


def _as_payload(name: str, payload: Mapping[str, Any] | None, n: int) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for col, values in (payload or {}).items():
        if isinstance(values, pa.ChunkedArray | pa.Array):
            values = values.to_numpy(zero_copy_only=False)
        arr = np.asarray(values)
        if arr.ndim != 1 or len(arr) != n:
            raise ValueError(f"{name}: column {col!r} has shape {arr.shape}, expected ({n},)")
        out[str(col)] = arr
    return out


# -- vectorised search helpers ------------------------------------------------------------------
class _Pairs:
    """Pairs (code, val) sorted lexicographically, ready for many :meth:`search` calls.

    A probe searches the same stored window twice (start and stop of each range), so the sorted
    side's preparation is done once: the pairs become one order-preserving int64,
    ``run(code) · M + (val − lo + 1)``, where ``run`` numbers the distinct codes in order and ``M``
    exceeds the span of the values by two (room for query values below and above every stored
    one). No sort of the stored pairs is needed (they are sorted already): the cost follows the
    queries, plus one pass over the stored pairs, not a sort of the state per call (measured: the
    ``np.unique`` calls of the rank form were 29 % of a SYN flood's join time at 50k packets/s).
    When ``runs · M`` could overflow an int64 (a day of event time over many codes), the dense
    ranks of the union are used instead (:func:`_search_ranked`).
    """

    __slots__ = ("codes", "composite", "lo", "m", "vals")

    def __init__(self, codes: np.ndarray, vals: np.ndarray) -> None:
        self.codes, self.vals = codes, vals
        self.composite: np.ndarray | None = None
        self.lo, self.m = 0, 0
        if len(codes) == 0:
            return
        lo, hi = int(vals.min()), int(vals.max())
        m = hi - lo + 3
        runs = 1 + int(np.count_nonzero(codes[1:] != codes[:-1]))
        if m <= 0 or runs * m >= 2**62:
            return
        run = np.zeros(len(codes), np.int64)
        np.cumsum(codes[1:] != codes[:-1], out=run[1:])
        self.composite = run * m + (vals.astype(np.int64) - lo + 1)
        self.lo, self.m = lo, m

    def search(self, q_codes: np.ndarray, q_vals: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
        """``searchsorted`` of the pairs ``(q_code, q_val)`` (lexicographic), ``side`` as numpy's."""
        if len(self.codes) == 0 or len(q_codes) == 0:
            return np.zeros(len(q_codes), dtype=np.int64)
        if self.composite is None:
            return _search_ranked(self.codes, self.vals, q_codes, q_vals, side)
        first = np.searchsorted(self.codes, q_codes, "left")
        present = first < len(self.codes)
        present[present] = self.codes[first[present]] == q_codes[present]
        out = first.astype(np.int64)
        if present.any():
            run = self.composite[first[present]] // self.m
            val = np.clip(q_vals[present].astype(np.int64) - self.lo + 1, 0, self.m - 1)
            out[present] = np.searchsorted(self.composite, run * self.m + val, side=side)
        return out


def _search_ranked(
    s_codes: np.ndarray,
    s_vals: np.ndarray,
    q_codes: np.ndarray,
    q_vals: np.ndarray,
    side: Literal["left", "right"],
) -> np.ndarray:
    """:meth:`_Pairs.search` by dense ranks: both components are replaced by their ranks over the union,
    so the pair becomes one order-preserving int64 whatever the timestamp span."""
    if len(s_codes) == 0 or len(q_codes) == 0:
        return np.zeros(len(q_codes), dtype=np.int64)
    u_codes = np.unique(np.concatenate([s_codes, q_codes]))
    u_vals = np.unique(np.concatenate([s_vals, q_vals]))
    m = np.int64(len(u_vals) + 1)
    comp_s = np.searchsorted(u_codes, s_codes).astype(np.int64) * m + np.searchsorted(u_vals, s_vals)
    comp_q = np.searchsorted(u_codes, q_codes).astype(np.int64) * m + np.searchsorted(u_vals, q_vals)
    return np.searchsorted(comp_s, comp_q, side=side)


def _expand(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (query index, position) pairs with ``starts[q] ≤ position < stops[q]``."""
    counts = np.maximum(stops - starts, 0)
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(starts)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, np.repeat(starts, counts) + offsets


def _take(cols: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in cols.items()}


def _concat(parts: Sequence[dict[str, np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in names}


# -- statistics ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchStats:
    """Shedding statistics of one batch (or, from :func:`combine_stats`, of a run).

    Counts are tuples or results; ``span_s`` is the event time the batch covers (the advance of the
    join's clock; the first batch: its own extent); ``update_s``, ``probe_s`` and ``shed_s`` are
    measured wall-clock seconds of the insert+expire, probe+produce and decision phases, ``total_s``
    of the whole call (with input conversion and ordering, which the cost model does not charge).
    ``unshed_estimate`` is the Horvitz-Thompson estimate of the results without shedding (each result
    weighted by 1 / (p_insert(earlier)·p_probe(later))); for Max-Subset it omits the dropped keys.
    """

    strategy: str
    x_left: float
    x_right: float
    window_left_s: float
    window_right_s: float
    span_s: float
    n_left: int
    n_right: int
    inserted_left: int
    inserted_right: int
    probed_left: int
    probed_right: int
    expired_left: int
    expired_right: int
    late: int
    results: int
    unshed_estimate: float
    update_s: float
    probe_s: float
    shed_s: float
    total_s: float
    state_left: int
    state_right: int

    @property
    def lambda_left(self) -> float:
        """λ_L, left arrivals per second of event time."""
        return self.n_left / self.span_s if self.span_s > 0 else math.nan

    @property
    def lambda_right(self) -> float:
        """λ_R, right arrivals per second of event time."""
        return self.n_right / self.span_s if self.span_s > 0 else math.nan

    @property
    def output_rate(self) -> float:
        """Results per second of event time."""
        return self.results / self.span_s if self.span_s > 0 else math.nan

    @property
    def selectivity(self) -> float:
        """``f`` from eq. (9): estimated unshed output rate / (λ_L·λ_R·(T_L + T_R))."""
        pairs = self.n_left * self.n_right * (self.window_left_s + self.window_right_s)
        return self.unshed_estimate * self.span_s / pairs if pairs > 0 and self.span_s > 0 else math.nan

    @property
    def cu_s(self) -> float:
        """Measured C_u: insert + expire seconds per inserted tuple."""
        ins = self.inserted_left + self.inserted_right
        return self.update_s / ins if ins else math.nan

    @property
    def cp_s(self) -> float:
        """Measured C_p: probe + produce seconds per result."""
        return self.probe_s / self.results if self.results else math.nan

    @property
    def insert_fraction_left(self) -> float:
        return self.inserted_left / self.n_left if self.n_left else math.nan

    @property
    def insert_fraction_right(self) -> float:
        return self.inserted_right / self.n_right if self.n_right else math.nan

    @property
    def probe_fraction_left(self) -> float:
        return self.probed_left / self.n_left if self.n_left else math.nan

    @property
    def probe_fraction_right(self) -> float:
        return self.probed_right / self.n_right if self.n_right else math.nan

    def cost(self, cu_s: float | None = None, cp_s: float | None = None) -> float:
        """Eq. (2) from the counts: (inserted·C_u + results·C_p) / span, CPU seconds per second."""
        cu = self.cu_s if cu_s is None else cu_s
        cp = self.cp_s if cp_s is None else cp_s
        ins = self.inserted_left + self.inserted_right
        work = (ins * cu if ins else 0.0) + (self.results * cp if self.results else 0.0)
        return work / self.span_s if self.span_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        """Fields plus the derived rates, selectivity, costs and fractions."""
        out = asdict(self)
        for name in (
            "lambda_left",
            "lambda_right",
            "output_rate",
            "selectivity",
            "cu_s",
            "cp_s",
            "insert_fraction_left",
            "insert_fraction_right",
            "probe_fraction_left",
            "probe_fraction_right",
        ):
            out[name] = getattr(self, name)
        return out


def combine_stats(stats: Sequence[BatchStats]) -> BatchStats:
    """One :class:`BatchStats` over consecutive batches: sums, the last batch's x and state sizes."""
    if not stats:
        raise ValueError("stats: need at least one batch")
    last = stats[-1]
    summed = {
        f.name: sum(getattr(s, f.name) for s in stats)
        for f in fields(BatchStats)
        if f.name
        not in (
            "strategy",
            "x_left",
            "x_right",
            "window_left_s",
            "window_right_s",
            "state_left",
            "state_right",
        )
    }
    return BatchStats(
        strategy=last.strategy,
        x_left=last.x_left,
        x_right=last.x_right,
        window_left_s=last.window_left_s,
        window_right_s=last.window_right_s,
        state_left=last.state_left,
        state_right=last.state_right,
        **summed,
    )


# -- the join -----------------------------------------------------------------------------------
def _check_seconds(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a number of seconds >= 0, got {value!r}")
    return value


class _WindowJoin(Base):
    """What both joins share: the batch form of their verbs."""

    def update(
        self,
        left_ts: Any,
        left_keys: Any,
        right_ts: Any,
        right_keys: Any,
        *,
        left_ids: Any = None,
        right_ids: Any = None,
        left_payload: Mapping[str, Any] | None = None,
        right_payload: Mapping[str, Any] | None = None,
    ) -> Self:
        """Join one micro-batch of both streams (each join class defines it)."""
        raise NotImplementedError

    def report(self) -> pd.DataFrame:
        """The results of the last :meth:`update` (each join class defines it)."""
        raise NotImplementedError

    def process_batch(
        self,
        left_ts: Any,
        left_keys: Any,
        right_ts: Any,
        right_keys: Any,
        *,
        left_ids: Any = None,
        right_ids: Any = None,
        left_payload: Mapping[str, Any] | None = None,
        right_payload: Mapping[str, Any] | None = None,
    ) -> pd.DataFrame:
        """The batch form: :meth:`update` with these arguments, then its :meth:`report`."""
        return self.update(
            left_ts, left_keys, right_ts, right_keys,
            left_ids=left_ids, right_ids=right_ids, left_payload=left_payload, right_payload=right_payload,
        ).report()  # fmt: skip


class SymmetricHashJoin(_WindowJoin):
    """Sliding-window symmetric hash join ``L[T_L] ⋈ R[T_R]`` with load shedding (seed 003 §2.1-2.2).

    Exactness: without shedding, :meth:`update` over a stream cut into time-ordered batches
    produces exactly the pairs with equal keys and ``t_l - T_R ≤ t_r ≤ t_l + T_L`` (inclusive), each
    once, in the batch that holds the later of the two: the output of :class:`ExactWindowJoin`.
    With a shedder, a pair is kept iff its earlier tuple was inserted and its later tuple probed
    (§3.3), so shed output is a subset of the full output.

    Verbs (the ``analytics`` convention): ``update(left_ts, left_keys, right_ts, right_keys, ...)``
    feeds one micro-batch of both streams (probe, insert, expire) and returns ``self``; the
    windows slide with the event-time clock inside it, so there is no ``slide()``. ``report()``
    reads the results of the last update; ``process_batch(...)`` is the batch form
    ``update(...).report()``. No ``merge``: the pairs between two instances' tuples were never
    probed, so a union of their states would not have produced them. :meth:`expired_unmatched`
    hands over (and clears) the tuples that expired without a partner.

    Parameters
    ----------
    window_left_s, window_right_s
        ``T_L``, ``T_R`` (seconds): how long a left (right) tuple stays in its window to be probed
        by right (left) arrivals.
    shedder
        A :class:`analytics.shedding.LoadShedder`, :class:`analytics.shedding.OnlineMaxSubset` or
        ``None`` (no shedding).
    lateness_s
        How late (behind the largest timestamp seen) a tuple may be and still join exactly; state is
        kept that much longer. 0 for in-order streams.
    track_unmatched
        Keep a matched flag per stored tuple and collect tuples that expire without ever matching
        (e.g. SYNs never answered): see :meth:`expired_unmatched`.

    Examples
    --------
    >>> j = SymmetricHashJoin(window_left_s=2, window_right_s=1)
    >>> s = 10**9
    >>> out = j.update(np.array([0, 5]) * s, ["a", "b"], np.array([2, 3, 5]) * s, ["a", "a", "b"]).report()
    >>> out[["left_id", "right_id", "key"]].values.tolist()
    [[0, 0, 'a'], [1, 2, 'b']]

    The right tuple at 3 s is 3 s after the left one, outside ``T_L = 2`` s.

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005.
       §2.1 Definitions 2-3, §2.2 eq. (2), §3.3.
    """

    def __init__(
        self,
        window_left_s: float,
        window_right_s: float,
        *,
        shedder: Shedder | None = None,
        lateness_s: float = 0.0,
        track_unmatched: bool = False,
    ) -> None:
        self.window_left_s = _check_seconds("window_left_s", window_left_s)
        self.window_right_s = _check_seconds("window_right_s", window_right_s)
        if shedder is not None and not callable(getattr(shedder, "decide", None)):
            raise ValueError(f"shedder: expected an object with a decide() method, got {shedder!r}")
        self.shedder = shedder
        self.lateness_s = _check_seconds("lateness_s", lateness_s)
        self.track_unmatched = bool(track_unmatched)
        self._win_ns = {"left": round(self.window_left_s * _NS), "right": round(self.window_right_s * _NS)}
        self._late_ns = round(self.lateness_s * _NS)
        self._clock: int | None = None
        self._seq = 0
        self._next_id = {"left": 0, "right": 0}
        self._key_kind = ""
        self._payload: dict[str, list[str] | None] = {"left": None, "right": None}
        self._state: dict[str, dict[str, np.ndarray]] = {s: self._empty_cols(s) for s in _SIDES}
        self._unmatched: list[dict[str, np.ndarray]] = []
        self._result: pd.DataFrame | None = None  # the last update's results (output, not state)
        self.last_stats: BatchStats | None = None

    # -- state helpers --------------------------------------------------------------------------
    @staticmethod
    def _empty_cols(side: str) -> dict[str, np.ndarray]:
        return {
            "code": np.zeros(0, np.uint64),
            "ts": np.zeros(0, np.int64),
            "id": np.zeros(0, np.int64),
            "seq": np.zeros(0, np.int64),
            "key": np.zeros(0, object),
            "pins": np.zeros(0, np.float64),
            "matched": np.zeros(0, bool),
        }

    def state_size(self) -> tuple[int, int]:
        """Number of stored tuples (left, right)."""
        return len(self._state["left"]["ts"]), len(self._state["right"]["ts"])

    @property
    def clock(self) -> int | None:
        """The largest event time processed or advanced to (ns); None before the first tuple."""
        return self._clock

    def advance(self, clock: Any) -> int:
        """Move the join's clock to ``clock`` (integer ns or ``datetime64``; never back) without
        tuples, and expire what falls out of the windows; return the tuples expired.

        The clock otherwise follows the join's own tuples only: a join whose stream goes quiet
        would keep its last tuples (and, with ``track_unmatched``, not report them unanswered)
        until its next tuple, however much later. A caller that knows the time of the stream the
        join is part of — a micro-batch engine's event time, at the end of the batch — moves it
        on. Tuples later than ``clock - lateness_s`` are not late afterwards, as after
        :meth:`update`: pass a time no later than what the streams' own tuples may still carry.
        """
        ns = int(_as_ns("clock", np.asarray([clock]))[0])
        if self._clock is not None and ns <= self._clock:
            return 0
        self._clock = ns
        expired = 0
        for side in _SIDES:
            st = self._state[side]
            nothing = {name: values[:0] for name, values in st.items()}
            nothing["insert"] = np.zeros(0, dtype=bool)
            expired += self._insert_expire(side, nothing)[1]
        return expired

    def _prepare(self, side: str, ts: Any, keys: Any, ids: Any, payload: Mapping[str, Any] | None):
        ns = _as_ns(f"{side}_ts", ts)
        n = len(ns)
        vals, codes, kind = _as_keys(f"{side}_keys", keys, n)
        st = self._state[side]
        if kind:
            if self._key_kind and kind != self._key_kind:
                raise ValueError(f"{side}_keys: {kind} keys, but earlier keys were {self._key_kind} keys")
            self._key_kind = kind
            if len(st["key"]) == 0 and st["key"].dtype != vals.dtype:
                st["key"] = np.zeros(0, vals.dtype)
        else:
            vals = np.zeros(0, st["key"].dtype)
        if ids is None:
            id_arr = self._next_id[side] + np.arange(n, dtype=np.int64)
        else:
            id_arr = np.asarray(ids).astype(np.int64)
            if id_arr.shape != (n,):
                raise ValueError(f"{side}_ids: expected {n} ids, got shape {id_arr.shape}")
        self._next_id[side] += n
        pay = _as_payload(f"{side}_payload", payload, n)
        names = sorted(pay)
        known = self._payload[side]
        if known is None:
            if n or payload is not None:
                self._payload[side] = names
                for name in names:
                    self._state[side]["p:" + name] = np.zeros(0, pay[name].dtype)
        elif names != known:
            if n == 0 and payload is None:
                pay = {name: np.zeros(0, self._state[side]["p:" + name].dtype) for name in known}
            else:
                raise ValueError(f"{side}_payload: columns {names} differ from earlier batches' {known}")
        cols = {"code": codes, "ts": ns, "id": id_arr, "key": vals}
        cols.update({"p:" + k: v for k, v in pay.items()})
        return cols

    # -- the batch entry point ------------------------------------------------------------------
    def update(
        self,
        left_ts: Any,
        left_keys: Any,
        right_ts: Any,
        right_keys: Any,
        *,
        left_ids: Any = None,
        right_ids: Any = None,
        left_payload: Mapping[str, Any] | None = None,
        right_payload: Mapping[str, Any] | None = None,
    ) -> Self:
        """Join one micro-batch of both streams against the state and itself; update the state.

        Each tuple, in processing order, probes the opposite window and is inserted into its own;
        then what fell out of the windows at the new clock expires. :meth:`report` reads the
        results, the batch's :class:`BatchStats` is in :attr:`last_stats`.

        Parameters
        ----------
        left_ts, right_ts
            Event times: ``datetime64``/timestamp arrays (pyarrow, pandas, numpy) or integer ns.
        left_keys, right_keys
            Join keys, integers or strings (e.g. :func:`analytics.keys.key_text`); no nulls.
        left_ids, right_ids
            Tuple ids for the output (default: each side's running arrival number from 0).
        left_payload, right_payload
            Extra columns to carry to the output as ``left_<name>`` / ``right_<name>``; the same
            column names in every batch.
        """
        t_start = time.perf_counter()
        cols: dict[str, dict[str, np.ndarray]] = {
            "left": self._prepare("left", left_ts, left_keys, left_ids, left_payload),
            "right": self._prepare("right", right_ts, right_keys, right_ids, right_payload),
        }
        n_l, n_r = len(cols["left"]["ts"]), len(cols["right"]["ts"])
        n = n_l + n_r
        ts_all = np.concatenate([cols["left"]["ts"], cols["right"]["ts"]])
        order = np.argsort(ts_all, kind="stable")  # ties: left (concatenated first) before right
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        is_left_sorted = order < n_l
        codes_all = np.concatenate([cols["left"]["code"], cols["right"]["code"]])

        # Shedding decisions, drawn in processing order.
        t0 = time.perf_counter()
        if self.shedder is None:
            dec = Decisions.keep_all(n)
        else:
            dec = self.shedder.decide(is_left_sorted, codes_all[order], ts_all[order])
        flags = {}
        for name in ("insert", "probe", "p_insert", "p_probe"):
            arr = np.empty(n, dtype=getattr(dec, name).dtype)
            arr[order] = getattr(dec, name)
            flags[name] = arr
        for side, sl in (("left", slice(0, n_l)), ("right", slice(n_l, n))):
            c = cols[side]
            c["rank"] = rank[sl]
            c["seq"] = self._seq + rank[sl]
            c["insert"] = flags["insert"][sl].astype(bool)
            c["probe"] = flags["probe"][sl].astype(bool)
            c["pins"] = flags["p_insert"][sl].astype(np.float64)
            c["pprobe"] = flags["p_probe"][sl].astype(np.float64)
            c["matched"] = np.zeros(len(c["ts"]), dtype=bool)
        self._seq += n
        shed_s = time.perf_counter() - t0

        # Probe + produce.
        t1 = time.perf_counter()
        parts = []
        weights = []
        for side, other in (("left", "right"), ("right", "left")):
            p, w = self._probe(side, other, cols)
            parts.extend(p)
            weights.extend(w)
        result = self._assemble(parts)
        probe_s = time.perf_counter() - t1
        unshed = float(sum(float(np.sum(w)) for w in weights))

        # Insert + expire.
        t2 = time.perf_counter()
        old_clock = self._clock
        late = 0
        if n:
            if old_clock is not None:
                late = int(np.count_nonzero(ts_all < old_clock - self._late_ns))
            new_clock = int(ts_all.max()) if old_clock is None else max(old_clock, int(ts_all.max()))
            span = (new_clock - (int(ts_all.min()) if old_clock is None else old_clock)) / _NS
            self._clock = new_clock
        else:
            span = 0.0
        inserted = {}
        expired = {}
        for side in _SIDES:
            inserted[side], expired[side] = self._insert_expire(side, cols[side])
        update_s = time.perf_counter() - t2

        size_l, size_r = self.state_size()
        shedder = self.shedder
        self.last_stats = BatchStats(
            strategy=getattr(shedder, "strategy", "none") if shedder is not None else "none",
            x_left=float(getattr(shedder, "x_left", 1.0 if shedder is None else math.nan)),
            x_right=float(getattr(shedder, "x_right", 1.0 if shedder is None else math.nan)),
            window_left_s=self.window_left_s,
            window_right_s=self.window_right_s,
            span_s=span,
            n_left=n_l,
            n_right=n_r,
            inserted_left=inserted["left"],
            inserted_right=inserted["right"],
            probed_left=int(np.count_nonzero(cols["left"]["probe"])),
            probed_right=int(np.count_nonzero(cols["right"]["probe"])),
            expired_left=expired["left"],
            expired_right=expired["right"],
            late=late,
            results=len(result),
            unshed_estimate=unshed,
            update_s=update_s,
            probe_s=probe_s,
            shed_s=shed_s,
            total_s=time.perf_counter() - t_start,
            state_left=size_l,
            state_right=size_r,
        )
        self._result = result
        return self

    def report(self) -> pd.DataFrame:
        """The results of the last :meth:`update` (none before the first, or after ``from_bytes``).

        One row per result: ``left_id``, ``left_ts``, ``right_id``, ``right_ts`` (UTC), ``key``,
        then the payload columns; ordered by result time ``max(left_ts, right_ts)``, then ids.
        Reads only: the same frame until the next update.
        """
        return self._result if self._result is not None else self._assemble([])

    def _probe(self, side: str, other: str, cols: dict[str, dict[str, np.ndarray]]):
        """Results produced by ``side``'s probing tuples: against the stored state of ``other``,
        then against ``other``'s inserted tuples of this batch processed earlier."""
        me = cols[side]
        probers = np.flatnonzero(me["probe"])
        q_code, q_ts, q_rank = me["code"][probers], me["ts"][probers], me["rank"][probers]
        lo_ts = q_ts - self._win_ns[other]
        parts: list[tuple[str, dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray], np.ndarray]] = []
        weights: list[np.ndarray] = []

        # (a) the stored window: timestamps in [t - T_other, t + T_own] (the upper end matters only
        #     for late tuples; in order, everything stored is at or before t).
        st = self._state[other]
        stored = _Pairs(st["code"], st["ts"])
        start = stored.search(q_code, lo_ts, "left")
        stop = stored.search(q_code, q_ts + self._win_ns[side], "right")
        owner, pos = _expand(start, stop)
        owner, pos = self._verify(me, probers[owner], st, pos)
        if self.track_unmatched and len(pos):
            st["matched"][pos] = True
            me["matched"][owner] = True
        parts.append((side, me, owner, st, pos))
        weights.append(1.0 / (me["pprobe"][owner] * st["pins"][pos]))

        # (b) this batch: other side's inserted tuples with smaller rank and ts ≥ t - T_other.
        ins = np.flatnonzero(cols[other]["insert"])
        ob = cols[other]
        srt = ins[np.lexsort((ob["rank"][ins], ob["code"][ins]))]
        b_code, b_ts, b_rank = ob["code"][srt], ob["ts"][srt], ob["rank"][srt]
        start = _Pairs(b_code, b_ts).search(q_code, lo_ts, "left")
        stop = _Pairs(b_code, b_rank).search(q_code, q_rank, "left")
        owner, pos = _expand(start, stop)
        owner, pos = self._verify(me, probers[owner], ob, srt[pos])
        if self.track_unmatched and len(pos):
            ob["matched"][pos] = True
            me["matched"][owner] = True
        parts.append((side, me, owner, ob, pos))
        weights.append(1.0 / (me["pprobe"][owner] * ob["pins"][pos]))
        return parts, weights

    def _verify(self, a: dict[str, np.ndarray], ia: np.ndarray, b: dict[str, np.ndarray], ib: np.ndarray):
        """Drop hash collisions (string keys): keep pairs whose key values are equal."""
        if self._key_kind != "str" or len(ia) == 0:
            return ia, ib
        same = a["key"][ia] == b["key"][ib]
        return ia[same], ib[same]

    def _assemble(self, parts) -> pd.DataFrame:
        pay_l = self._payload["left"] or []
        pay_r = self._payload["right"] or []
        chunks: dict[str, list[np.ndarray]] = {
            k: [] for k in ("left_id", "left_ts", "right_id", "right_ts", "key")
        }
        for name in pay_l:
            chunks["left_" + name] = []
        for name in pay_r:
            chunks["right_" + name] = []
        for side, me, owner, src, pos in parts:
            lsrc, li, rsrc, ri = (me, owner, src, pos) if side == "left" else (src, pos, me, owner)
            chunks["left_id"].append(lsrc["id"][li])
            chunks["left_ts"].append(lsrc["ts"][li])
            chunks["right_id"].append(rsrc["id"][ri])
            chunks["right_ts"].append(rsrc["ts"][ri])
            chunks["key"].append(lsrc["key"][li])
            for name in pay_l:
                chunks["left_" + name].append(lsrc["p:" + name][li])
            for name in pay_r:
                chunks["right_" + name].append(rsrc["p:" + name][ri])
        data = {k: np.concatenate(v) if v else np.zeros(0) for k, v in chunks.items()}
        when = np.maximum(data["left_ts"], data["right_ts"])
        sort = np.lexsort((data["right_id"], data["left_id"], when))
        data = {k: v[sort] for k, v in data.items()}
        data["left_ts"] = pd.to_datetime(data["left_ts"].astype(np.int64), utc=True, unit="ns")
        data["right_ts"] = pd.to_datetime(data["right_ts"].astype(np.int64), utc=True, unit="ns")
        return pd.DataFrame(data)

    def _insert_expire(self, side: str, batch: dict[str, np.ndarray]) -> tuple[int, int]:
        """Insert the batch's inserted tuples into ``side``'s state; expire what fell out.

        The stored window is sorted by (code, ts, seq) already: only the new tuples are sorted,
        and each column is written once, stored survivors and new tuples into their places (a
        concatenation and a sort of the whole window per batch were 35 % of a SYN flood's join
        time, measured at 50k packets/s with ~200k half-open SYNs in the window).
        """
        st = self._state[side]
        keep_new = np.flatnonzero(batch["insert"])
        if self._clock is not None:
            cut = self._clock - self._late_ns - self._win_ns[side]
            alive_old, alive_new = st["ts"] >= cut, batch["ts"][keep_new] >= cut
        else:
            alive_old, alive_new = np.ones(len(st["ts"]), bool), np.ones(len(keep_new), bool)
        n_expired = int(
            len(alive_old) - np.count_nonzero(alive_old) + len(alive_new) - np.count_nonzero(alive_new)
        )
        if n_expired == 0 and len(keep_new) == 0:
            return 0, 0  # the window as it was: no copy of its columns
        if self.track_unmatched and n_expired:
            gone_old = np.flatnonzero(~alive_old & ~st["matched"])
            gone_new = keep_new[~alive_new & ~batch["matched"][keep_new]]
            if len(gone_old) or len(gone_new):
                rec = {k: np.concatenate([st[k][gone_old], batch[k][gone_new]]) for k in st}
                rec["side"] = np.full(len(gone_old) + len(gone_new), side, dtype=object)
                self._unmatched.append(rec)
        old = np.flatnonzero(alive_old)
        new = keep_new[alive_new]
        if len(new) == 0:
            self._state[side] = _take(st, old)
            return len(keep_new), n_expired
        new = new[np.lexsort((batch["seq"][new], batch["ts"][new], batch["code"][new]))]
        # each new tuple goes after the stored ones of equal (code, ts): its seq is larger
        at = _Pairs(st["code"][old], st["ts"][old]).search(batch["code"][new], batch["ts"][new], "right")
        n = len(old) + len(new)
        new_slots = at + np.arange(len(new))
        is_new = np.zeros(n, bool)
        is_new[new_slots] = True
        old_slots = np.flatnonzero(~is_new)
        out = {}
        for k, values in st.items():
            col = np.empty(n, values.dtype)
            col[old_slots] = values[old]
            col[new_slots] = batch[k][new]
            out[k] = col
        self._state[side] = out
        return len(keep_new), n_expired

    def expired_unmatched(self) -> pd.DataFrame:
        """Stored tuples that expired without ever joining, since the last call (then cleared).

        Only with ``track_unmatched=True``. Columns ``side``, ``id``, ``ts`` (UTC), ``key`` and the
        payload columns (unprefixed; the side's own). Tuples that a shedder kept out of the window
        are not stored, so they are not reported.
        """
        recs, self._unmatched = self._unmatched, []
        rows = []
        for rec in recs:
            frame = {"side": rec["side"], "id": rec["id"], "ts": rec["ts"], "key": rec["key"]}
            frame.update({k[2:]: v for k, v in rec.items() if k.startswith("p:")})
            rows.append(pd.DataFrame(frame))
        if not rows:
            return pd.DataFrame({"side": [], "id": [], "ts": [], "key": []})
        out = pd.concat(rows, ignore_index=True)
        out["ts"] = pd.to_datetime(out["ts"].astype(np.int64), utc=True, unit="ns")
        return out

    # -- persistence ----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The join state: a version byte, a JSON header and one Arrow IPC stream per side.

        The shedder is not included (it has its own state, e.g. :meth:`LoadShedder.to_bytes`).
        """
        header = {
            "params": {k: v for k, v in self._get_params().items() if k != "shedder"},
            "clock": self._clock,
            "seq": self._seq,
            "next_id": self._next_id,
            "key_kind": self._key_kind,
            "payload": self._payload,
        }
        blobs = [json.dumps(header).encode()]
        for side in _SIDES:
            st = self._state[side]
            table = pa.table({k: pa.array(v) for k, v in st.items()})
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            blobs.append(sink.getvalue())
        out = bytearray([_VERSION])
        for blob in blobs:
            out += len(blob).to_bytes(8, "little") + blob
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes, *, shedder: Shedder | None = None) -> SymmetricHashJoin:
        """Inverse of :meth:`to_bytes`; pass the shedder to continue with."""
        if not data or data[0] != _VERSION:
            raise ValueError(f"data: unsupported SymmetricHashJoin state version {data[:1]!r}")
        blobs, pos = [], 1
        while pos < len(data):
            size = int.from_bytes(data[pos : pos + 8], "little")
            blobs.append(data[pos + 8 : pos + 8 + size])
            pos += 8 + size
        header = json.loads(blobs[0].decode())
        obj = cls(**header["params"], shedder=shedder)
        obj._clock = header["clock"]
        obj._seq = header["seq"]
        obj._next_id = header["next_id"]
        obj._key_kind = header["key_kind"]
        obj._payload = header["payload"]
        for side, blob in zip(_SIDES, blobs[1:], strict=True):
            table = pa.ipc.open_stream(blob).read_all()
            st = {}
            for name in table.column_names:
                col = table.column(name)
                if pa.types.is_string(col.type) or pa.types.is_binary(col.type):
                    st[name] = col.to_numpy(zero_copy_only=False).astype(object, copy=False)
                elif pa.types.is_null(col.type):
                    st[name] = np.asarray(col.to_pylist(), dtype=object)
                else:
                    st[name] = np.array(col.to_numpy())
            st["code"] = st["code"].astype(np.uint64)
            obj._state[side] = st
        return obj


class ExactWindowJoin(_WindowJoin):
    """Brute-force oracle of :class:`SymmetricHashJoin`: every pair, straight from the definition.

    Keeps every tuple forever in per-key lists; a pair (left, right) with equal keys is a result iff
    ``t_l - T_R ≤ t_r ≤ t_l + T_L`` (seed 003 Definitions 2-3, inclusive). The same verbs as
    :class:`SymmetricHashJoin`: :meth:`update` feeds a batch, :meth:`report` reads the pairs with at
    least one member in it, in the same layout and order; :meth:`process_batch` does both.

    Parameters
    ----------
    window_left_s, window_right_s
        ``T_L``, ``T_R`` (seconds).

    Examples
    --------
    >>> j = ExactWindowJoin(window_left_s=2, window_right_s=1)
    >>> s = 10**9
    >>> out = j.update(np.array([0, 5]) * s, ["a", "b"], np.array([2, 3, 5]) * s, ["a", "a", "b"]).report()
    >>> out[["left_id", "right_id", "key"]].values.tolist()
    [[0, 0, 'a'], [1, 2, 'b']]

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005. §2.1.
    """

    def __init__(self, window_left_s: float, window_right_s: float) -> None:
        self.window_left_s = _check_seconds("window_left_s", window_left_s)
        self.window_right_s = _check_seconds("window_right_s", window_right_s)
        self._tuples: dict[str, dict[Any, list[tuple[int, int, dict[str, Any]]]]] = {"left": {}, "right": {}}
        self._next_id = {"left": 0, "right": 0}
        self._payload: dict[str, list[str]] = {"left": [], "right": []}
        self._pairs: list[tuple[tuple[int, int, dict[str, Any]], tuple[int, int, dict[str, Any]], Any]] = []

    def update(
        self,
        left_ts: Any,
        left_keys: Any,
        right_ts: Any,
        right_keys: Any,
        *,
        left_ids: Any = None,
        right_ids: Any = None,
        left_payload: Mapping[str, Any] | None = None,
        right_payload: Mapping[str, Any] | None = None,
    ) -> Self:
        """Store one batch and find its pairs (arguments as :meth:`SymmetricHashJoin.update`)."""
        t_l = round(self.window_left_s * _NS)
        t_r = round(self.window_right_s * _NS)
        new: dict[str, list[tuple[Any, int, int, dict[str, Any]]]] = {}
        for side, ts, keys, ids, payload in (
            ("left", left_ts, left_keys, left_ids, left_payload),
            ("right", right_ts, right_keys, right_ids, right_payload),
        ):
            ns = _as_ns(f"{side}_ts", ts)
            vals, _, _ = _as_keys(f"{side}_keys", keys, len(ns))
            id_list = (
                list(range(self._next_id[side], self._next_id[side] + len(ns)))
                if ids is None
                else [int(i) for i in ids]
            )
            self._next_id[side] += len(ns)
            pay = _as_payload(f"{side}_payload", payload, len(ns))
            if pay:
                self._payload[side] = sorted(pay)
            rows = [{name: pay[name][i] for name in pay} for i in range(len(ns))]
            new[side] = [
                (k.item() if isinstance(k, np.generic) else k, int(t), i, r)
                for k, t, i, r in zip(vals, ns, id_list, rows, strict=True)
            ]
        pairs: list[tuple[tuple[int, int, dict[str, Any]], tuple[int, int, dict[str, Any]], Any]] = []
        # New right tuples against all left tuples (old and new); new left against old right only.
        for key, t, i, r in new["left"]:
            self._tuples["left"].setdefault(key, []).append((t, i, r))
        for key, t, i, r in new["right"]:
            for lt, li, lr in self._tuples["left"].get(key, []):
                if lt - t_r <= t <= lt + t_l:
                    pairs.append(((lt, li, lr), (t, i, r), key))
        for key, t, i, r in new["left"]:
            for rt, ri, rr in self._tuples["right"].get(key, []):
                if t - t_r <= rt <= t + t_l:
                    pairs.append(((t, i, r), (rt, ri, rr), key))
        for key, t, i, r in new["right"]:
            self._tuples["right"].setdefault(key, []).append((t, i, r))
        pairs.sort(key=lambda p: (max(p[0][0], p[1][0]), p[0][1], p[1][1]))
        self._pairs = pairs
        return self

    def report(self) -> pd.DataFrame:
        """The pairs with a member in the last :meth:`update`'s batch; reads only."""
        pairs = self._pairs
        data: dict[str, Any] = {
            "left_id": np.array([p[0][1] for p in pairs], dtype=np.int64),
            "left_ts": pd.to_datetime(
                np.array([p[0][0] for p in pairs], dtype=np.int64), utc=True, unit="ns"
            ),
            "right_id": np.array([p[1][1] for p in pairs], dtype=np.int64),
            "right_ts": pd.to_datetime(
                np.array([p[1][0] for p in pairs], dtype=np.int64), utc=True, unit="ns"
            ),
            "key": [p[2] for p in pairs],
        }
        for name in self._payload["left"]:
            data["left_" + name] = [p[0][2][name] for p in pairs]
        for name in self._payload["right"]:
            data["right_" + name] = [p[1][2][name] for p in pairs]
        return pd.DataFrame(data)
