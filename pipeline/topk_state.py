"""Stage 2 of the streaming top-k: the per-query merge state and the StatefulProcessor around it.

Stage 1 (``pipeline.topk``) counts every closed sub-window exactly in Spark. Its rows reach
``TopKMergeProcessor`` grouped by query, all rows of a sub-window in the same micro-batch (append
mode emits a sub-window once, when the watermark passes its end). The processor only marshals:
per sub-window, in index order, it keeps the top-k rows (count descending, key text ascending —
``docs/topk.md`` convention 1) and the sub-window's total, hands them to :class:`TopKMerge`, and
turns the reports into output rows. ``TopKMerge`` is :class:`analytics.topk.SubWindowTopK` (the
algorithm and its ``to_bytes`` state) plus the per-sub-window traffic totals the dashboard's
shares need; its bytes are the query's one ``ValueState``, so a restart resumes exactly.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from analytics.topk import SubWindowTopK

__all__ = [
    "INPUT_COLUMNS",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "QueryParams",
    "TopKMerge",
    "TopKMergeProcessor",
]

#: Stage 1's rows: the query, the sub-window index (``start // b``), the key text and its count.
INPUT_COLUMNS = ("query", "sw", "key", "count")
#: One row per reported item; a report without items is one row with rank 0 and a null key/count.
OUTPUT_COLUMNS = ("query", "window_end", "delta", "rank", "key", "count", "total")
OUTPUT_SCHEMA = (
    "query STRING, window_end TIMESTAMP, delta BIGINT, rank INT, key STRING, count BIGINT, total BIGINT"
)


class QueryParams(NamedTuple):
    """A query's window in integer nanoseconds (``N``, ``b``) and its top-k length."""

    N: int
    b: int
    k: int


class TopKMerge:
    """A query's merge state: ``SubWindowTopK`` (time-based) and the window's traffic totals.

    ``add(index, top, total)`` takes one closed sub-window (its top-k rows or all its counts, and
    the sum of all its counts) and returns the output rows of the reports it makes — including
    those of empty sub-windows skipped before ``index``.

    >>> merge = TopKMerge(QueryParams(N=2_000, b=1_000, k=2))
    >>> merge.add(5, {"a": 3, "b": 1}, 4)
    []
    >>> merge.add(7, {"a": 2, "c": 2}, 5)  # sub-window 6 was empty: two reports
    [(7000, 1, 1, 'a', 3, 4), (8000, 2, 0, None, None, 5)]
    """

    _VERSION = 1

    def __init__(self, params: QueryParams, algorithm: SubWindowTopK | None = None) -> None:
        self.params = params
        self._topk = algorithm or SubWindowTopK(params.N, params.b, params.k, time_based=True)
        self._totals: deque[tuple[int, int]] = deque()  # (sub-window index, total), this window only
        self._n_sub = params.N // params.b

    @property
    def algorithm(self) -> SubWindowTopK:
        return self._topk

    def add(self, index: int, top: Mapping[str, int], total: int) -> list[tuple[Any, ...]]:
        """Merge sub-window ``index``; rows ``(window_end_ns, delta, rank, key, count, total)``."""
        reports = self._topk.add_subwindow(top, index)
        self._totals.append((index, int(total)))
        rows: list[tuple[Any, ...]] = []
        # Reports come for consecutive closing sub-windows, the last one being ``index``.
        for closing, report in zip(range(index - len(reports) + 1, index + 1), reports, strict=True):
            end_ns = (closing + 1) * self.params.b
            window_total = sum(t for i, t in self._totals if closing - self._n_sub < i <= closing)
            delta = int(report["delta"])
            if not report["items"]:
                rows.append((end_ns, delta, 0, None, None, window_total))
            for rank, item in enumerate(report["items"], 1):
                rows.append((end_ns, delta, rank, item["key"], int(item["count"]), window_total))
        while self._totals[0][0] <= index - self._n_sub:  # keep this window's totals only
            self._totals.popleft()
        return rows

    def to_bytes(self) -> bytes:
        """The state's bytes (little-endian).

        ``B`` version, ``I`` length and ``SubWindowTopK.to_bytes()``, ``I`` number of totals and
        per total ``q`` sub-window index, ``q`` total.
        """
        topk = self._topk.to_bytes()
        totals = b"".join(struct.pack("<qq", i, t) for i, t in self._totals)
        return (
            struct.pack("<BI", self._VERSION, len(topk))
            + topk
            + struct.pack("<I", len(self._totals))
            + totals
        )

    @classmethod
    def from_bytes(cls, data: bytes, params: QueryParams) -> TopKMerge:
        """Rebuild; ``params`` must be those the state was made with (else a fresh checkpoint is needed)."""
        version, size = struct.unpack_from("<BI", data, 0)
        if version != cls._VERSION:
            raise ValueError(f"data: unsupported TopKMerge state version {version}")
        topk = SubWindowTopK.from_bytes(data[5 : 5 + size])
        saved = QueryParams(topk.N, topk.b, topk.k)
        if saved != params:
            raise ValueError(
                f"the checkpoint's top-k state has window {saved} but the query asks for {params}: "
                "delete the top-k checkpoint (and results) to change a query's window, sub-window or k"
            )
        merge = cls(params, topk)
        (n,) = struct.unpack_from("<I", data, 5 + size)
        for j in range(n):
            merge._totals.append(struct.unpack_from("<qq", data, 9 + size + 16 * j))
        return merge


class TopKMergeProcessor(StatefulProcessor):
    """Stage 2, grouped by query: closed sub-windows in, report rows out (``OUTPUT_SCHEMA``).

    Parameters
    ----------
    queries
        Query name -> its :class:`QueryParams` (nanoseconds), as configured.
    """

    def __init__(self, queries: Mapping[str, QueryParams]) -> None:
        self.queries = dict(queries)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._state = handle.getValueState("merge", "merge BINARY")

    def handleInputRows(  # noqa: N802 - Spark's API
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        (query,) = key
        params = self.queries[query]
        merge = (
            TopKMerge.from_bytes(bytes(self._state.get()[0]), params)
            if self._state.exists()
            else TopKMerge(params)
        )
        # Every row of each closed sub-window, ranked within it as convention 1 says.
        counts = pd.concat(list(rows), ignore_index=True).sort_values(
            ["sw", "count", "key"], ascending=[True, False, True]
        )
        out: list[tuple[Any, ...]] = []
        for sw, group in counts.groupby("sw", sort=True):
            top = group.head(params.k)
            top_counts = dict(zip(top["key"], top["count"].tolist(), strict=True))
            out += merge.add(int(sw), top_counts, int(group["count"].sum()))
        self._state.update((merge.to_bytes(),))
        if out:
            yield _frame(query, out)

    def close(self) -> None:
        pass


def _frame(query: str, rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS[1:]))
    return pd.DataFrame(
        {
            "query": query,
            "window_end": pd.to_datetime(table["window_end"].astype("int64") // 1000, unit="us", utc=True),
            "delta": table["delta"].astype("int64"),
            "rank": table["rank"].astype("int32"),
            "key": table["key"].astype(object),
            "count": table["count"].astype("Int64"),
            "total": table["total"].astype("int64"),
        }
    )
