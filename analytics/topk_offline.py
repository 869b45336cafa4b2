"""Run a sub-window top-k query offline over packet records (``netmon analyze topk``).

Records arrive as Arrow record batches in file order (``ingest.read_records``). Per batch, the
key text comes from :func:`analytics.keys.key_text` (records without the key's fields are skipped
and not counted), the weight from :func:`analytics.keys.weights`, and each record's sub-window is
its position ``// b`` among the counted records (count-based) or ``ts_ns // b`` (time-based).
Exact per-sub-window counts are one Arrow group-by per batch; only each closed sub-window's top-k
rows reach :class:`analytics.topk.SubWindowTopK` — the same split as the Spark operator, where
the native aggregation counts and only the summaries enter the merge.

A sub-window closes when it holds ``b`` counted records (count-based) or when a record of a later
sub-window arrives (time-based: Spark's closing with a zero watermark delay). The sub-window still
open at the end of the input is not closed. Time-based, a record of an already-closed sub-window
(a timestamp going back across a sub-window boundary) is late: it is dropped and counted in
``late``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics._base import Base
from analytics.keys import key_text, parse_key, weights
from analytics.topk import ExactSlidingTopK, SubWindowTopK

__all__ = ["OfflineTopK", "parse_duration", "read_topk"]

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|m|h)\s*$")


def parse_duration(text: str | int | timedelta, name: str = "duration") -> int:
    """``"10s"``, ``"500ms"``, ``"1m"``, ``"1.5s"``, a ``timedelta`` or integer ns -> integer nanoseconds.

    >>> parse_duration("500ms"), parse_duration("1m"), parse_duration("1.5s")
    (500000000, 60000000000, 1500000000)
    """
    if isinstance(text, timedelta):
        return (text.days * 86_400 + text.seconds) * 10**9 + text.microseconds * 1000
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(
            f"{name}: expected a duration such as 10s, 500ms, 1m (units ns us ms s m h), got {text!r}"
        )
    value = Decimal(match.group(1)) * _UNITS_NS[match.group(2)]
    if value != value.to_integral_value():
        raise ValueError(f"{name}: {text!r} is not a whole number of nanoseconds")
    return int(value)


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
    ) -> None:
        self.key = key
        self.N = N
        self.b = b
        self.k = k
        self.weight = weight
        self.time_based = time_based
        self.exact = exact
        self._fields = parse_key(key)
        if weight not in ("packets", "bytes"):
            raise ValueError(f"weight: expected 'packets' or 'bytes', got {weight!r}")
        if time_based:
            n_units, b_units = parse_duration(N, "N"), parse_duration(b, "b")
        else:
            n_units, b_units = N, b
            for name, value in (("N", N), ("b", b)):
                if isinstance(value, str | timedelta):
                    raise ValueError(f"{name}: a count-based window takes an integer, got {value!r}")
        algorithm = ExactSlidingTopK if exact else SubWindowTopK
        self._algorithm: SubWindowTopK | ExactSlidingTopK = algorithm(
            n_units, b_units, k, time_based=time_based
        )
        self._b_units = int(b_units)  # type: ignore[arg-type]
        self.records = 0  # records counted (with the key, not late)
        self.skipped = 0  # records without the key's fields
        self.late = 0  # time-based: records of an already-closed sub-window, dropped
        self._max_index: int | None = None
        self._carry: pa.Table | None = None  # aggregated rows of the still-open sub-window

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table]) -> Iterator[dict[str, Any]]:
        """Feed record batches in order; yield each report as its sub-window closes."""
        for batch in batches:
            yield from self.feed(batch)

    def feed(self, batch: pa.RecordBatch | pa.Table) -> Iterator[dict[str, Any]]:
        """Feed one batch; yield the reports of the sub-windows it closes."""
        keys = key_text(batch, self._fields)
        valid = pc.is_valid(keys)
        if self.time_based:
            valid = pc.and_(valid, pc.is_valid(batch.column("ts")))
        n_valid = pc.sum(valid).as_py() or 0
        self.skipped += batch.num_rows - n_valid
        if n_valid == 0:
            return
        keys = keys.filter(valid)
        w = weights(batch, self.weight).filter(valid)
        if self.time_based:
            ts = pc.cast(_flat(batch.column("ts")).filter(valid), pa.int64()).to_numpy(zero_copy_only=False)
            index = ts // self._b_units
            prev = np.empty_like(index)
            prev[0] = index[0] if self._max_index is None else self._max_index
            np.maximum.accumulate(index[:-1], out=prev[1:])
            np.maximum(prev[1:], prev[0], out=prev[1:])
            late = index < prev
            if late.any():
                self.late += int(late.sum())
                keep = pa.array(~late)
                keys, w, index = keys.filter(keep), w.filter(keep), index[~late]
            if len(index) == 0:
                return
            self._max_index = int(max(prev[0], index.max()))
        else:
            index = (self.records + np.arange(n_valid, dtype=np.int64)) // self._b_units
        self.records += len(index)
        rows = pa.table({"sw": pa.array(index, pa.int64()), "key": keys, "w": w})
        if self._carry is not None:
            rows = pa.concat_tables([self._carry, rows])
        counts = rows.group_by(["sw", "key"], use_threads=False).aggregate([("w", "sum")])
        counts = counts.sort_by([("sw", "ascending"), ("w_sum", "descending"), ("key", "ascending")])
        sw = counts["sw"].to_numpy()
        last = int(sw[-1])
        closes_last = not self.time_based and self.records == (last + 1) * self._b_units
        n_closed = len(sw) if closes_last else int(np.searchsorted(sw, last, side="left"))
        tail = counts.slice(n_closed)
        self._carry = tail.rename_columns(["sw", "key", "w"]) if tail.num_rows else None
        if n_closed == 0:
            return
        sw = sw[:n_closed]
        starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]])
        if not self.exact:
            # Only the top-k rows of each sub-window enter the merge (rows are sorted by rank).
            rank = np.arange(n_closed) - np.repeat(starts, np.diff(np.r_[starts, n_closed]))
            keep = np.flatnonzero(rank < self.k)
            sw = sw[keep]
            starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]])
            key_list = counts["key"].take(keep).to_pylist()
            count_list = counts["w_sum"].take(keep).to_pylist()
        else:
            key_list = counts["key"].slice(0, n_closed).to_pylist()
            count_list = counts["w_sum"].slice(0, n_closed).to_pylist()
        ends = np.r_[starts[1:], len(sw)]
        add = self._algorithm.add_subwindow
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            yield from add(dict(zip(key_list[s:e], count_list[s:e], strict=True)), int(sw[s]))


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def read_topk(path: str | Path, **query: Any) -> tuple[OfflineTopK, Iterator[dict[str, Any]]]:
    """Open a capture with ``ingest.read_records`` and run ``OfflineTopK(**query)`` over it."""
    from ingest import read_records  # the capture reader lives in ingest/

    q = OfflineTopK(**query)
    return q, q.run(read_records(path))
