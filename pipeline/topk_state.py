"""Stage 2 of the streaming top-k: the per-query merge state and the StatefulProcessor around it.

Stage 1 (``pipeline.topk``) counts every closed sub-window exactly in Spark. Its rows reach
``TopKMergeProcessor`` grouped by query, all rows of a sub-window in the same micro-batch (append
mode emits a sub-window once, when the watermark passes its end). The processor only marshals:
per sub-window, in index order, it keeps the top-k rows (count descending, key text ascending —
``docs/topk.md`` convention 1) and the sub-window's total, hands them to
:class:`analytics.topk_merge.TopKMerge`, and turns the reports into output rows. The merge's bytes
are the query's one ``ValueState``, so a restart resumes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues

from analytics.topk_merge import QueryParams, TopKMerge

__all__ = [
    "INPUT_COLUMNS",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "TopKMergeProcessor",
]

#: Stage 1's rows: the query, the sub-window index (``start // b``), the key text and its count.
INPUT_COLUMNS = ("query", "sw", "key", "count")
#: One row per reported item; a report without items is one row with rank 0 and a null key/count.
OUTPUT_COLUMNS = ("query", "window_end", "delta", "rank", "key", "count", "total")
OUTPUT_SCHEMA = (
    "query STRING, window_end TIMESTAMP, delta BIGINT, rank INT, key STRING, count BIGINT, total BIGINT"
)


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
        stored = self._state.get() if self._state.exists() else None
        merge = TopKMerge.from_bytes(bytes(stored[0]), params) if stored is not None else TopKMerge(params)
        # Every row of each closed sub-window, ranked within it as convention 1 says.
        counts = pd.concat(list(rows), ignore_index=True).sort_values(
            ["sw", "count", "key"], ascending=[True, False, True]
        )
        out: list[tuple[Any, ...]] = []
        for sw, group in counts.groupby("sw", sort=True):
            top = group.head(params.k)
            top_counts = dict(zip(top["key"], top["count"].tolist(), strict=True))
            out += merge.add_subwindow(top_counts, int(sw), int(group["count"].sum()))
        self._state.update((merge.to_bytes(),))
        if out:
            yield _frame(query, out)

    def close(self) -> None:
        pass


def _frame(query: str, rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    columns = list(OUTPUT_COLUMNS[1:])
    table = pd.DataFrame([row[: len(columns)] for row in rows], columns=columns)  # no window column
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
