"""Stage 1 of the counting kinds in one pass over a micro-batch: per-partition counts with pyarrow.

The traffic and top-k kinds both start from exact counts per (sub-window, key): packets and bytes
per (1 s window, protocol), packets or bytes per (sub-window, key text) of every top-k query. As
Spark aggregations these are a job and a shuffle over string keys each (~90k rows/s on 2 cores
for the nine default queries); as pyarrow ``group_by`` they take a fraction of a second per
million rows. :func:`partial_counts` runs them all inside Spark's ``mapInArrow``, one Arrow batch
of a partition at a time, so the work stays on the executors and only the partial counts — rows
per (query, sub-window, key) — reach the driver, where :func:`merge_partials` sums them.

Each :class:`CountSpec` names one counting query: its key fields (or ``proto`` for traffic, where
a null key is a group of its own), its weight (``packets``: 1, ``bytes``: ``wire_len``) and its
sub-window in microseconds. Partial rows are ``query, sw, key, records, weight``: how many records
and their summed weight. A row with the query ``MAX_QUERY`` carries a partition's largest event
time in microseconds in ``sw`` (control rows included): the batch's watermark follows from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from analytics.keys import key_text, weights

__all__ = ["MAX_QUERY", "PARTIAL_SCHEMA", "CountSpec", "merge_partials", "partial_counts", "partials_of"]

#: The partial rows' Spark schema.
PARTIAL_SCHEMA = "query STRING, sw BIGINT, key STRING, records BIGINT, weight BIGINT"
#: The query name of the rows that carry a partition's largest event time (``sw``, microseconds).
MAX_QUERY = "\x00max"

_ARROW_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("sw", pa.int64()),
        ("key", pa.string()),
        ("records", pa.int64()),
        ("weight", pa.int64()),
    ]
)


@dataclass(frozen=True)
class CountSpec:
    """One counting query of stage 1."""

    name: str
    #: key fields (their canonical text, ``analytics.keys``); records missing one are skipped
    fields: tuple[str, ...]
    #: "packets" or "bytes"
    weight: str
    #: sub-window (or tumbling window) length in microseconds
    b_us: int
    #: a record whose key is null is a group of its own (traffic: packets without a protocol)
    keep_null_key: bool = False


def _counts(batch: pa.RecordBatch, ts_us: np.ndarray, spec: CountSpec) -> pa.Table:
    if spec.keep_null_key:
        keys = pc.cast(batch.column(spec.fields[0]), pa.string())
        if len(spec.fields) > 1:
            raise ValueError("keep_null_key: one key field only")
    else:
        keys = key_text(batch, spec.fields)
    table = pa.table(
        {"sw": pa.array(np.floor_divide(ts_us, spec.b_us)), "key": keys, "w": weights(batch, spec.weight)}
    )
    if not spec.keep_null_key and keys.null_count:
        table = table.filter(pc.is_valid(keys))
    grouped = table.group_by(["sw", "key"], use_threads=False).aggregate([([], "count_all"), ("w", "sum")])
    n = grouped.num_rows
    return pa.table(
        {
            "query": pa.array([spec.name] * n, pa.string()) if n else pa.array([], pa.string()),
            "sw": grouped["sw"],
            "key": grouped["key"],
            "records": grouped["count_all"],
            "weight": pc.fill_null(grouped["w_sum"], 0),
        },
        schema=_ARROW_SCHEMA,
    )


def partials_of(batch: pa.RecordBatch, specs: Sequence[CountSpec]) -> pa.Table:
    """Stage 1 of ``specs`` over one Arrow batch of decoded rows (``ts``, ``is_control``, fields)."""
    ts = pc.cast(batch.column("ts"), pa.int64())
    ts = ts.combine_chunks() if isinstance(ts, pa.ChunkedArray) else ts
    parts = []
    if len(ts) and ts.null_count < len(ts):
        top = pc.max(ts).as_py()
        parts.append(
            pa.table(
                {"query": [MAX_QUERY], "sw": [top], "key": [None], "records": [0], "weight": [0]},
                schema=_ARROW_SCHEMA,
            )
        )
    rows = batch.filter(pc.invert(batch.column("is_control")))
    if rows.num_rows:
        ts_us = np.asarray(pc.cast(rows.column("ts"), pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        parts += [_counts(rows, ts_us, spec) for spec in specs]
    return pa.concat_tables(parts) if parts else _ARROW_SCHEMA.empty_table()


def partial_counts(df: DataFrame, specs: Sequence[CountSpec]) -> pa.Table:
    """Stage 1 of ``specs`` over a micro-batch: per-partition partials (``mapInArrow``), collected."""
    specs = tuple(specs)
    columns = sorted({"ts", "is_control", *(f for s in specs for f in s.fields), "wire_len"})

    def stage1(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from partials_of(batch, specs).to_batches()

    return df.select(*columns).mapInArrow(stage1, PARTIAL_SCHEMA).toArrow()


def merge_partials(partials: pa.Table) -> tuple[pa.Table, int | None]:
    """Sum the partitions' partials per (query, sub-window, key); the batch's largest event time (µs)."""
    is_max = pc.equal(partials["query"], MAX_QUERY)
    tops = partials.filter(is_max)["sw"]
    max_us = pc.max(tops).as_py() if len(tops) else None
    rows = partials.filter(pc.invert(is_max))
    merged = rows.group_by(["query", "sw", "key"], use_threads=False).aggregate(
        [("records", "sum"), ("weight", "sum")]
    )
    merged = merged.select(["query", "sw", "key", "records_sum", "weight_sum"])
    return merged.rename_columns(["query", "sw", "key", "records", "weight"]), max_us
