"""Run a sub-window top-k query offline over packet records (``netmon analyze topk``).

Records arrive as Arrow record batches in file order (``ingest.read_records``, only the columns
the query reads: :attr:`OfflineTopK.columns`). Per batch, each record's key is a code into the
batch's distinct key texts (:func:`analytics.keys.key_codes`: the text of
:func:`analytics.keys.key_text`, made once per distinct key; records without the key's fields are
skipped and not counted), the weight comes from :func:`analytics.keys.weights`, and each record's
sub-window is its position ``// b`` among the counted records (count-based) or ``ts_ns // b``
(time-based). Exact per-sub-window counts are summed with numpy per (sub-window, key code); only
each closed sub-window's top-k rows (count descending, ties by key text) reach
:class:`analytics.topk.SubWindowTopK` — the same split as the Spark operator, where the native
aggregation counts and only the summaries enter the merge.

Count-based, a sub-window closes when it holds ``b`` counted records. Time-based, event time is
the newest timestamp seen so far (``M``; every record with a timestamp moves it, with or without
the key's fields) and the pipeline's rules apply, with the watermark delay ``d``
(``watermark``, the pipeline's ``[pipeline] watermark_s``):

- a record is *late* when its timestamp is more than ``d`` behind the newest one seen before it
  (``ts < M_before - d``; the first record never is): dropped and counted in ``late``, wherever
  the batch boundaries fall — one meaning of late in ``netmon analyze`` and the pipeline
  (``docs/reliability.md``);
- sub-window ``i`` (``[i*b, (i+1)*b)``) closes once ``M >= (i+1)*b + d`` (Spark: its end is at
  most the watermark ``M - d``). A record that is not late is never in a closed sub-window.

Sub-windows still open at the end of the input stay open, unless the run is given
``close_after``: event time then advances to ``d + close_after`` past the last record, as the
pipeline's does on the control message that ends a replay
(``ingest.replay.ReplayOptions.close_windows_s``), so the sub-windows that end by ``close_after``
after the last record close.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics._base import Base
from analytics.granularity import FROM_START, coarse_starts
from analytics.keys import as_numpy, key_codes, parse_key, weight_values
from analytics.late import LateRule
from analytics.timetext import parse_duration_ns
from analytics.topk import ExactSlidingTopK, SubWindowTopK

__all__ = ["OfflineTopK", "parse_delay", "parse_duration", "read_topk"]

#: Below every event time: "no timestamp seen".
_NEVER = -(2**62)
#: A zero duration text: ``0s``, ``0.0ms``, ``0 ns``.
_ZERO = re.compile(r"^\s*(0+(\.0*)?|\.0+)\s*(ns|us|µs|ms|s|m|h)?\s*$")


def parse_duration(text: str | int | timedelta, name: str = "duration") -> int:
    """A time-based window's length: ``"10s"``, ``"500ms"``, a ``timedelta`` or integer ns -> ns.

    ``analytics.timetext.parse_duration_ns`` without bare numbers: here ``10`` is a packet count.

    >>> parse_duration("500ms"), parse_duration("1m"), parse_duration("1.5s")
    (500000000, 60000000000, 1500000000)
    """
    return parse_duration_ns(text, name=name, bare_unit=None)


def parse_delay(text: str | int | timedelta, name: str = "watermark", *, bare_unit: str | None = None) -> int:
    """A watermark delay -> ns: a duration, or zero (``0``, ``"0s"``, ``timedelta(0)``).

    A number without a unit is read in ``bare_unit`` (``"s"`` on the command line), or refused
    (``None``, as :func:`parse_duration` does).

    >>> parse_delay("5s"), parse_delay(0), parse_delay("0s"), parse_delay("2", bare_unit="s")
    (5000000000, 0, 0, 2000000000)
    """
    if isinstance(text, timedelta):
        zero = text == timedelta(0)
    elif isinstance(text, int) and not isinstance(text, bool):
        zero = text == 0
    else:
        zero = bool(_ZERO.match(str(text)))
    if zero:
        return 0
    try:
        return parse_duration_ns(text, name=name, bare_unit=bare_unit)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a duration >= 0 (e.g. 5s, 500ms, 0)") from None


def _count_units(value: int | str | timedelta, name: str) -> int:
    """A count-based window's length, a number of records: durations are refused."""
    if isinstance(value, str | timedelta):
        raise ValueError(f"{name}: a count-based window takes an integer, got {value!r}")
    return value


class OfflineTopK(Base):
    """A top-k query (key, weight, window) run over record batches; reports in order.

    Parameters
    ----------
    key
        Record column(s): ``"src_ip"``, ``"src_ip,dst_ip"``, ``("proto", "dst_port")``.
    N
        Window: records (count-based) or integer nanoseconds / a duration text (time-based).
    b
        Sub-window, in the same unit as ``N``.
    k
        Top-k list length per sub-window.
    weight
        ``"packets"`` (1 per record) or ``"bytes"`` (``wire_len``).
    time_based
        Event-time windows aligned to multiples of ``b``.
    exact
        Run the exact oracle (:class:`ExactSlidingTopK`: true counts above the same delta).
    watermark
        Time-based: the watermark delay ``d`` (integer ns or a duration text, ``0`` by default).
        A record more than ``d`` behind the newest timestamp seen before it is late; sub-window
        ``i`` closes once a timestamp reaches ``(i+1)*b + d`` (the module docstring).
    granularity
        Time-based: the granularity operator Γ's schedule (``analytics.granularity``), the
        sub-window ``m·b`` from each fine index (``ts_ns // b``) on: an ``m`` from the start, or
        ``[(start, m), ...]`` ascending (the first start at or before the data, e.g.
        ``FROM_START``), each start a multiple of the ``m`` before and its own — what the
        pipeline's ``netmon tune --granularity`` made (``pipeline.topk``), so the same change at
        the same instant gives the same rows. The fine sub-windows' full counts are summed into
        each coarse one before its top-k is taken; a coarse sub-window closes once a timestamp
        reaches its end + ``d``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"src_ip": ["a", "a", None, "b", "a", "a", "c"]})
    >>> q = OfflineTopK("src_ip", N=4, b=2, k=2)
    >>> list(q.run([batch])), (q.records, q.skipped)
    ([{'end': 4, 'delta': 1, 'items': [{'key': 'a', 'count': 3}]},
      {'end': 6, 'delta': 2, 'items': []}], (6, 1))

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University of
       Waterloo, 2006, ch. 6, Algorithm 6.
    """

    def __init__(
        self,
        key: str | Sequence[str],
        *,
        N: int | str | timedelta,
        b: int | str | timedelta,
        k: int,
        weight: str = "packets",
        time_based: bool = False,
        exact: bool = False,
        watermark: int | str | timedelta = 0,
        granularity: int | Sequence[tuple[int, int]] = 1,
    ) -> None:
        self.key = key
        self.N = N
        self.b = b
        self.k = k
        self.weight = weight
        self.time_based = time_based
        self.exact = exact
        self.watermark = watermark
        self.granularity = granularity
        self._fields = parse_key(key)
        if weight not in ("packets", "bytes"):
            raise ValueError(f"weight: expected 'packets' or 'bytes', got {weight!r}")
        if time_based:
            n_units, b_units = parse_duration(N, "N"), parse_duration(b, "b")
            self._delay_ns = parse_delay(watermark, "watermark")
        else:
            n_units, b_units = _count_units(N, "N"), _count_units(b, "b")
            if parse_delay(watermark, "watermark"):
                raise ValueError("watermark: count-based windows have no event time; it takes 0")
            self._delay_ns = 0
        algorithm = ExactSlidingTopK if exact else SubWindowTopK
        self._algorithm: SubWindowTopK | ExactSlidingTopK = algorithm(
            n_units, b_units, k, time_based=time_based
        )
        self._b_units = int(b_units)
        schedule = [(FROM_START, granularity)] if isinstance(granularity, int) else list(granularity)
        #: Γ's schedule: None without one (every sub-window one b)
        self._schedule: list[tuple[int, int]] | None = None
        if schedule != [(FROM_START, 1)]:
            if not time_based:
                raise ValueError("granularity: the granularity operator is for time-based windows")
            self._algorithm.set_granularity(schedule[0][1])
            for start, m in schedule[1:]:
                self._algorithm.set_granularity(m, start)
            self._schedule = [(FROM_START, schedule[0][1]), *schedule[1:]]
        self.records = 0  # records counted (with the key, not late)
        self.skipped = 0  # records without the key's fields
        self.late = 0  # time-based: records more than the watermark delay behind, dropped
        #: time-based: the largest timestamp seen (ns), records without the key included
        self.last_ns: int | None = None
        # Event time M (ns) and the late rule over it: the pipeline's one meaning of late
        # (analytics.late); M is last_ns, or later once finish() has advanced it.
        self._rule = LateRule(self._delay_ns)
        # The still-open sub-windows' aggregated rows, in (sub-window, key) order: each row's
        # sub-window index, its key text, its count.
        self._carry: tuple[np.ndarray, pa.Array, np.ndarray] | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The record columns the query reads: the key's fields, ``ts`` (time-based), ``wire_len`` (bytes)."""
        extra = ("ts",) * self.time_based + ("wire_len",) * (self.weight == "bytes")
        return tuple(dict.fromkeys((*self._fields, *extra)))

    def run(
        self,
        batches: Iterable[pa.RecordBatch | pa.Table],
        *,
        close_after: int | str | timedelta | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Feed record batches in order; yield each report as its sub-window closes.

        ``close_after`` (time-based): at the end, :meth:`finish` with it; ``None`` leaves the last
        sub-window open.
        """
        if close_after is not None:
            self._check_close(close_after)
        for batch in batches:
            yield from self.feed(batch)
        if close_after is not None:
            yield from self.finish(close_after)

    def finish(self, close_after: int | str | timedelta = 0) -> Iterator[dict[str, Any]]:
        """The end of the input (time-based): event time advances ``close_after`` past the last record.

        The open sub-window closes, with its reports, if it ends by then — what the pipeline does
        when a replay's final watermark message puts its watermark ``close_after`` past the last
        record. A duration (``"1s"``, ``timedelta``, integer ns) or ``0``.

        >>> import pyarrow as pa
        >>> t = pa.table({"ts": pa.array([0, 1_500_000_000], pa.timestamp("ns", tz="UTC")),
        ...               "src_ip": ["a", "b"]})
        >>> q = OfflineTopK("src_ip", N="1s", b="1s", k=1, time_based=True)
        >>> [r["end"] for r in q.run([t])], [r["end"] for r in q.finish("1s")]
        (['1970-01-01T00:00:01Z'], ['1970-01-01T00:00:02Z'])
        """
        after_ns = self._check_close(close_after)
        if self.last_ns is None:
            return
        # Event time is now d + after_ns past the last record: the watermark, after_ns past it.
        self._rule.advance(self.last_ns + self._delay_ns + after_ns)
        yield from self._close_carry(self._closable())

    def _check_close(self, close_after: int | str | timedelta) -> int:
        if not self.time_based:
            raise ValueError("close_after: count-based sub-windows close only when they hold b records")
        if isinstance(close_after, int) and not isinstance(close_after, bool) and close_after == 0:
            return 0
        return parse_duration(close_after, "close_after")

    def feed(self, batch: pa.RecordBatch | pa.Table) -> Iterator[dict[str, Any]]:
        """Feed one batch; yield the reports of the sub-windows it closes."""
        codes, valid, texts = key_codes(batch, self._fields)
        late = None
        if self.time_based:
            ts, ts_valid = as_numpy(_int64(batch.column("ts")))
            late = self._late(ts, ts_valid)
            if ts_valid is not None:
                valid = ts_valid if valid is None else valid & ts_valid
        n_valid = batch.num_rows if valid is None else int(np.count_nonzero(valid))
        self.skipped += batch.num_rows - n_valid
        if late is not None and late.any():
            late = late if valid is None else late & valid
            self.late += int(np.count_nonzero(late))
            valid = ~late if valid is None else valid & ~late
        n_use = batch.num_rows if valid is None else int(np.count_nonzero(valid))
        w = weight_values(batch, self.weight) if n_use else None
        if n_use < batch.num_rows:
            codes = codes[valid]
            w = None if w is None else w[valid]
            if self.time_based:
                ts = ts[valid]
        if self.time_based:
            index = ts // self._b_units
            if self._schedule is not None:
                index = coarse_starts(self._schedule, index)[0]  # Γ: the coarse sub-window's start
            self.records += n_use
            closable = self._closable()
        else:
            index = (self.records + np.arange(n_use, dtype=np.int64)) // self._b_units
            self.records += n_use
            closable = self.records // self._b_units - 1  # full sub-windows
        yield from self._count(index, codes.astype(np.int64), w, texts, closable)

    def _late(self, ts: np.ndarray, ts_valid: np.ndarray | None) -> np.ndarray:
        """Which records are late (``ts < M_before - d``, :class:`analytics.late.LateRule`); moves
        event time M and ``last_ns`` on.

        ``ts``: the batch's timestamps (ns), ``ts_valid``: which are present (None: all). A
        record without a timestamp is never late and does not move event time.
        """
        late = self._rule.late_mask(ts, ts_valid)
        timed = ts if ts_valid is None else ts[np.asarray(ts_valid, bool)]
        if len(timed):
            high = int(timed.max())
            self.last_ns = high if self.last_ns is None else max(self.last_ns, high)
        return late

    def _closable(self) -> int:
        """Time-based: the last sub-window that event time has closed (its end + d <= M)."""
        if self._rule.newest is None:
            return _NEVER
        first_open = (self._rule.newest - self._delay_ns) // self._b_units
        if self._schedule is not None:  # Γ: the coarse sub-window holding it is open
            first_open = int(coarse_starts(self._schedule, np.array([first_open]))[0][0])
        return first_open - 1

    def _close_carry(self, closable: int) -> Iterator[dict[str, Any]]:
        """Close the open sub-windows up to ``closable`` (no new records), with their reports."""
        if self._carry is None:
            return
        index, texts, sums = self._carry
        n = int(np.searchsorted(index, closable, side="right"))
        if n == 0:
            return
        self._carry = None if n == len(index) else (index[n:], texts.slice(n), sums[n:])
        windows = np.unique(index[:n])
        rank = np.searchsorted(windows, index[:n])
        keys = np.arange(n, dtype=np.int64)
        yield from self._close_rows(windows, rank, keys, sums[:n], texts.slice(0, n))

    def _count(
        self, index: np.ndarray, codes: np.ndarray, w: np.ndarray | None, texts: pa.Array, closable: int
    ) -> Iterator[dict[str, Any]]:
        """Sum the records' weights per (sub-window, key) with the open sub-windows' rows; close.

        ``index`` is each record's sub-window (any order: within the watermark delay records may
        go back; none is in a closed one), ``codes`` its key in ``texts``, ``w`` its weight (None:
        1 each). The sub-windows up to ``closable`` close, the others stay open.
        """
        if not len(index):
            yield from self._close_carry(closable)
            return
        carry = self._carry
        n_carry = 0
        if len(index) == 1 or bool((index[1:] >= index[:-1]).all()):
            windows = index[np.r_[True, index[1:] != index[:-1]]]  # in order: the usual case
        else:
            windows = np.unique(index)
        if carry is not None:
            # The open sub-windows' rows (key texts) and this batch's keys, in one code space.
            carry_index, carry_texts, carry_counts = carry
            n_carry = len(carry_texts)
            encoded = pa.concat_arrays([carry_texts, texts]).dictionary_encode()
            joint = as_numpy(encoded.indices)[0].astype(np.int64)
            carry_codes, codes = joint[:n_carry], joint[n_carry:][codes]
            texts = encoded.dictionary
            windows = np.union1d(windows, carry_index)
        # Sub-windows ranked 0, 1, ... in index order; one code per (rank, key).
        n_keys = len(texts)
        code = np.searchsorted(windows, index) * n_keys + codes
        if n_carry:
            carry_codes = np.searchsorted(windows, carry_index) * n_keys + carry_codes
        size = len(windows) * n_keys
        if size <= 4 * len(code) + 65536:
            present = np.bincount(code, minlength=size)
            sums = present.copy() if w is None else _sums(code, w, size)
            if n_carry:
                present[carry_codes] += 1
                sums[carry_codes] += carry_counts
            rows = np.flatnonzero(present)
            sums = sums[rows]
        else:
            both = code if not n_carry else np.concatenate([carry_codes, code])
            rows, group = np.unique(both, return_inverse=True)
            if w is None:
                sums = np.bincount(group[n_carry:], minlength=len(rows))
            else:
                sums = _sums(group[n_carry:], w, len(rows))
            if n_carry:
                sums[group[:n_carry]] += carry_counts
        # rows: (sub-window rank, key) codes in ascending order, sums: their exact counts
        rank, keys = np.divmod(rows, n_keys)
        first_open = int(np.searchsorted(windows, closable, side="right"))
        n_closed = int(np.searchsorted(rank, first_open, side="left"))
        if n_closed < len(rows):
            open_rank = rank[n_closed:]
            self._carry = (windows[open_rank], texts.take(_indices(keys[n_closed:])), sums[n_closed:])
        else:
            self._carry = None
        if n_closed == 0:
            return
        yield from self._close_rows(windows, rank[:n_closed], keys[:n_closed], sums[:n_closed], texts)

    def _close_rows(
        self, windows: np.ndarray, rank: np.ndarray, keys: np.ndarray, sums: np.ndarray, texts: pa.Array
    ) -> Iterator[dict[str, Any]]:
        """Close the sub-windows ``windows[rank]`` holding keys ``texts[keys]`` with counts ``sums``.

        The rows are in ascending (rank, key) order; each sub-window's top-k rows go to the
        algorithm, in sub-window order, and their reports are yielded.
        """
        n_closed = len(rank)
        # Count descending within each sub-window; then (Alg. 6) only each one's top-k rows, ties
        # at the k-th count broken by the key text: the rows the Arrow-sorted path passed on.
        order = np.lexsort((-sums, rank))
        rank, keys, sums = rank[order], keys[order], sums[order]
        starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
        if not self.exact:
            lengths = np.diff(np.r_[starts, n_closed])
            kth = np.where(lengths >= self.k, sums[np.minimum(starts + self.k - 1, n_closed - 1)], sums.min())
            cand = np.flatnonzero(sums >= np.repeat(kth, lengths))
            rank, keys, sums = rank[cand], keys[cand], sums[cand]
            text_rank = np.empty(len(cand), np.int64)
            text_rank[as_numpy(pc.sort_indices(texts.take(_indices(keys))))[0]] = np.arange(len(cand))
            order = np.lexsort((text_rank, -sums, rank))
            rank, keys, sums = rank[order], keys[order], sums[order]
            starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
            position = np.arange(len(rank)) - np.repeat(starts, np.diff(np.r_[starts, len(rank)]))
            keep = np.flatnonzero(position < self.k)
            rank, keys, sums = rank[keep], keys[keep], sums[keep]
            starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
        key_list = texts.take(_indices(keys)).to_pylist()
        count_list = sums.tolist()
        ends = np.r_[starts[1:], len(rank)]
        add = self._algorithm.add_subwindow
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            sub_window = int(windows[rank[s]])
            yield from add(dict(zip(key_list[s:e], count_list[s:e], strict=True)), sub_window)


def _sums(group: np.ndarray, w: np.ndarray, size: int) -> np.ndarray:
    """Exact ``int64`` sums of ``w`` per group (``group`` in ``0 .. size - 1``)."""
    bound = max(int(w.max()), -int(w.min())) * len(w)
    if bound < 2**53:  # every partial sum is an integer a float64 holds exactly
        return np.bincount(group, weights=w, minlength=size).astype(np.int64)
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    out = np.zeros(size, np.int64)
    out[g[starts]] = np.add.reduceat(w[order], starts)
    return out


def _indices(values: np.ndarray) -> pa.Array:
    """``int64`` numpy -> an Arrow index array for ``take`` (from buffers: see analytics.keys)."""
    values = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _int64(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A timestamp or integer column as raw ``int64`` values (``pc.cast`` for other types)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_timestamp(column.type) or column.type == pa.int64():
        return column
    return pc.cast(column, pa.int64())


def read_topk(
    path: str | Path,
    *,
    key: str | Sequence[str],
    N: int | str | timedelta,
    b: int | str | timedelta,
    k: int,
    weight: str = "packets",
    time_based: bool = False,
    exact: bool = False,
    close_after: int | str | timedelta | None = None,
    watermark: int | str | timedelta = 0,
) -> tuple[OfflineTopK, Iterator[dict[str, Any]]]:
    """Open a capture with ``ingest.read_records`` and run an :class:`OfflineTopK` over it.

    The parameters are :class:`OfflineTopK`'s and :meth:`OfflineTopK.run`'s ``close_after``;
    they are checked at once, the capture is read as the reports are consumed.
    """
    from ingest import read_records  # the capture reader lives in ingest/

    q = OfflineTopK(
        key, N=N, b=b, k=k, weight=weight, time_based=time_based, exact=exact, watermark=watermark
    )
    if close_after is not None:
        q._check_close(close_after)
    return q, q.run(read_records(path, columns=q.columns), close_after=close_after)
