"""Stage 1 of every batch kind in one pass over a micro-batch: per-partition partials with pyarrow.

The traffic, top-k and distinct kinds all start from a pass over the batch's packets: exact counts
per (sub-window, key) — packets and bytes per (1 s window, protocol), packets or bytes per
(sub-window, key text) of every top-k query — and one HLL sketch per (sub-window, group) of every
distinct-count query. As Spark aggregations these are a job and a shuffle each (~90k rows/s on 2
cores for the nine default queries); as pyarrow ``group_by`` they take a fraction of a second per
million rows. :func:`raw_partials` runs them all inside Spark's ``mapInArrow`` over the *raw*
Kafka records: each task parses its messages' CSV with pyarrow (:func:`decode_messages`, the
wire format's lenient reading, ``ingest.wire.parse_many``) and computes every stage 1 from the
Arrow rows, so decoded packets never go back into the JVM; only the partials — rows per (query,
sub-window, key) — reach the driver, where :func:`merge_partials` sums the counts.

A :class:`CountSpec` names one counting query: its key fields (or ``proto`` for traffic, where a
null key is a group of its own), its weight (``packets``: 1, ``bytes``: ``wire_len``) and its
sub-window in microseconds. A :class:`DistinctSpec` names one distinct-count query: its group and
item fields, sub-window, ``lg_k`` and the last sub-window already reported (``lo``: items of
older sub-windows are late). Partial rows are ``query, sw, key, records, weight, sketch``:

- counts: how many records and their summed weight per (query, sub-window, key);
- distinct: per (query, sub-window, group) the records sketched and the sketch (DataSketches
  ``HLL_8``, the bytes Spark's ``hll_sketch_agg`` would give for the same items); per query a
  row with neither ``sw`` nor ``key`` whose ``weight`` counts late records;
- ``MAX_QUERY``: the largest event time in microseconds in ``sw`` (control rows included) of
  the rows of one Kafka partition (``key``, null when unknown): the batch's event time is the
  smallest of its partitions' (:func:`merge_partials`), so a partition that lags in event time
  holds the watermark back instead of having its records dropped as late;
- ``TOTALS_QUERY``: per ``key`` in ``packets, control, malformed, future`` the lines of that
  class in ``records``.

A :class:`RowsSpec` names a query that needs some records themselves, not counts (the
``features`` kind: the TCP control packets and ICMP unreachables, ``pipeline.features``): per
Arrow batch of a task, one partial row whose ``sketch`` is an Arrow IPC stream of the kept
records (``ts`` in microseconds, then the spec's fields), ``records`` their number and ``sw`` the
newest event time (µs) of the records that have the spec's required fields. Having a sketch, the
row passes :func:`merge_partials` unmerged; :func:`rows_of` reads a query's rows back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasketches import hll_sketch, hll_union, tgt_hll_type
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.hll_coupons import coupons
from analytics.keys import key_text, weights
from analytics.sampling import HASH_FIELDS, intake_lines, record_hash, sample_mask, scaled
from analytics.sketch_windows import coupon_estimates, coupon_sketches
from ingest.wire import CONTROL_WATERMARK, parse_many
from netmon.records import ARROW_SCHEMA

__all__ = [
    "MAX_QUERY",
    "PARTIAL_SCHEMA",
    "INTAKE",
    "TOTALS",
    "TOTALS_QUERY",
    "CountSpec",
    "DistinctSpec",
    "RowsSpec",
    "Spec",
    "decode_messages",
    "decoded_rows",
    "item_kept",
    "NEWEST_QUERY",
    "merge_partials",
    "newest_of",
    "partial_counts",
    "partials_of",
    "raw_partials",
    "rows_of",
    "totals_of",
]

#: The partial rows' Spark schema as they leave the tasks: ``query`` as its index in the batch's
#: query names (:func:`_coded`), so a row carries four bytes instead of the name.
PARTIAL_SCHEMA = "query INT, sw BIGINT, key STRING, records BIGINT, weight BIGINT, sketch BINARY"
#: The query name of the rows that carry a partition's largest event time (``sw``, microseconds).
MAX_QUERY = "\x00max"
#: The query name of the rows that count the batch's lines by class (``key``: one of :data:`TOTALS`).
TOTALS_QUERY = "\x00totals"
#: The classes every line of a batch falls in (exactly one of the first four each); ``late``
#: counts the packets the late rule dropped (a part of ``packets``); ``sampled`` the records the
#: intake drop box skipped before the decode (``analytics.sampling.intake_lines``; not in ``packets``).
TOTALS = ("packets", "control", "malformed", "future", "late", "sampled")
#: The key of the intake drop box's fraction in a batch's drop-box fractions (``SharedBatch``,
#: the kinds' ``sample``): before the decode, every query's records are a sample at it.
INTAKE = "(intake)"
#: The query name of the rows that carry a partition's newest event time in ns (``sw``; ``key``:
#: the partition): the next batch's lateness starts from it.
NEWEST_QUERY = "\x00newest"
_NEVER = -(2**63)
#: The register width Spark's ``hll_sketch_agg`` writes (``analytics.distinct.HLL_TYPE``).
_HLL_TYPE = tgt_hll_type.HLL_8

_ARROW_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("sw", pa.int64()),
        ("key", pa.string()),
        ("records", pa.int64()),
        ("weight", pa.int64()),
        ("sketch", pa.binary()),
    ]
)
#: The decoded rows stage 1 reads: ``ts`` in microseconds (Spark's precision), a control flag,
#: then the record columns.
ROW_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("is_control", pa.bool_()),
        *list(ARROW_SCHEMA)[1:],
    ]
)


def decoded_rows(records: pa.Table) -> pa.Table:
    """A capture's records (``ingest.read_records``, ``ts`` in ns) as the shared decode gives them
    to stage 1 (:data:`ROW_SCHEMA`: ``ts`` in µs, no control records): a kind's stage 1 and
    driver part run on a capture without Kafka or Spark (benchmarks, tests)."""
    ts = pc.cast(pc.divide(pc.cast(records["ts"], pa.int64()), 1000), pa.timestamp("us", tz="UTC"))
    rows = records.set_column(0, "ts", ts).add_column(1, "is_control", pa.array([False] * records.num_rows))
    return rows.cast(ROW_SCHEMA)


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
    #: the drop box before the query (``analytics.sampling``): the fraction of records kept, by
    #: their hash; below 1 ``records`` and ``weight`` are Horvitz–Thompson estimates (sums / keep)
    keep: float = 1.0
    #: the intake drop box's fraction (records skipped before the decode, an independent trial):
    #: the sums are scaled by ``1 / (keep · intake)``
    intake: float = 1.0


@dataclass(frozen=True)
class DistinctSpec:
    """One distinct-count query of stage 1: an HLL sketch per (sub-window, group)."""

    name: str
    #: group fields (empty: one global group, text ``""``)
    group: tuple[str, ...]
    #: counted fields (the item is their canonical key text)
    item: tuple[str, ...]
    #: sub-window length in microseconds
    b_us: int
    lg_k: int
    #: the last sub-window index already reported: items of sub-windows <= lo are late
    lo: int
    #: the drop box before the query: the fraction of *items* kept, a power of two — those whose
    #: coupon address has its top log2(1/keep) bits zero (:func:`item_kept`); ``records`` scaled
    keep: float = 1.0


@dataclass(frozen=True)
class RowsSpec:
    """One query of stage 1 that carries records, not counts: those ``select`` keeps.

    Per Arrow batch with a record that has every ``required`` field, one partial row: ``sketch``
    an Arrow IPC stream of the kept records' ``ts`` (int64 µs) and ``fields``, ``records`` their
    number, ``sw`` the newest event time (µs) of the records with the required fields (kept or
    not). ``select`` (a module-level function, pickled by reference to the tasks) gets the
    records with the required fields and returns a boolean mask; None keeps them all.
    """

    name: str
    #: the record columns carried, after ``ts``
    fields: tuple[str, ...]
    #: records missing one of these are skipped (and do not count for ``sw``)
    required: tuple[str, ...] = ()
    select: Callable[[pa.RecordBatch | pa.Table], np.ndarray] | None = None


Spec = CountSpec | DistinctSpec | RowsSpec


def _table(columns: dict[str, pa.Array | list]) -> pa.Table:
    n = max((len(v) for v in columns.values()), default=0)
    full = {
        name: columns.get(name, pa.nulls(n, field.type))
        for name, field in zip(_ARROW_SCHEMA.names, _ARROW_SCHEMA, strict=True)
    }
    return pa.table(full, schema=_ARROW_SCHEMA)


def _names(name: str, n: int) -> pa.Array:
    return pa.array([name] * n, pa.string()) if n else pa.array([], pa.string())


def _hashes(batch: pa.RecordBatch, ts_us: np.ndarray) -> np.ndarray:
    """Each record's sampling hash (``analytics.sampling.record_hash``; nulls as 0)."""

    def column(name: str) -> np.ndarray:
        if batch.schema.get_field_index(name) < 0:  # a stream without the field (tests, benches)
            return np.zeros(batch.num_rows, np.int64)
        values = pc.fill_null(batch.column(name), 0)
        return np.asarray(values.to_numpy(zero_copy_only=False))

    return record_hash(ts_us, *(column(name) for name in HASH_FIELDS[1:]))


def _counts(
    batch: pa.RecordBatch, ts_us: np.ndarray, spec: CountSpec, hashes: np.ndarray | None = None
) -> pa.Table:
    if spec.keep < 1:
        # The drop box: the records whose hash is below the fraction's bound (the same records
        # when Spark runs the batch again); the sums are scaled by 1/keep after the group-by.
        mask = sample_mask(_hashes(batch, ts_us) if hashes is None else hashes, spec.keep)
        batch, ts_us = batch.filter(pa.array(mask)), ts_us[mask]
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
    return _table(
        {
            "query": _names(spec.name, grouped.num_rows),
            "sw": grouped["sw"],
            "key": grouped["key"],
            "records": _scaled(grouped["count_all"], spec.keep * spec.intake),
            "weight": _scaled(pc.fill_null(grouped["w_sum"], 0), spec.keep * spec.intake),
        }
    )


def _scaled(values: pa.ChunkedArray | pa.Array, keep: float) -> pa.Array | pa.ChunkedArray:
    if keep >= 1:
        return values
    return pa.array(scaled(np.asarray(values.to_numpy()), keep), pa.int64())


def _sketches(batch: pa.RecordBatch, ts_us: np.ndarray, spec: DistinctSpec) -> pa.Table:
    """Per (sub-window, group): the records counted and their items' HLL sketch; the late count.

    A record counts when its group and item are present and the item is not empty (as offline,
    ``analytics.distinct_offline``); a counted record of a sub-window ``<= lo`` is late. Each
    sketch gets every distinct item of its (sub-window, group) once: ``update`` is idempotent,
    so the sketch equals one fed every record, as Spark's ``hll_sketch_agg`` is.
    """
    n = batch.num_rows
    group = key_text(batch, spec.group) if spec.group else pa.array([""] * n, pa.string())
    item = key_text(batch, spec.item)
    idx = np.floor_divide(ts_us, spec.b_us)
    counted = pc.and_(pc.is_valid(group), pc.fill_null(pc.not_equal(item, ""), False))
    fresh = pc.and_(counted, pa.array(idx > spec.lo))
    late = pc.sum(pc.and_not(counted, fresh)).as_py() or 0
    rows = pa.table({"sw": pa.array(idx), "key": group, "item": item}).filter(fresh)
    parts = [_table({"query": [spec.name], "records": [0], "weight": [late]})]
    if rows.num_rows:
        # Each item's DataSketches coupon, all at once; a (sub-window, group) whose distinct
        # coupons stay in coupon mode gets its sketch's bytes from them without a Python call per
        # item (most groups); the others are united from coupon-mode pieces.
        rows = rows.append_column("c", pa.array(coupons(rows["item"])))
        if spec.keep < 1:
            rows = rows.filter(pa.array(item_kept(rows["c"].to_numpy(), spec.keep, spec.lg_k)))
        grouped = rows.group_by(["sw", "key"], use_threads=False).aggregate(
            [([], "count_all"), ("c", "distinct")]
        )
        distinct = grouped["c_distinct"].combine_chunks()
        sizes = pc.list_value_length(distinct).to_numpy(zero_copy_only=False)
        light = sizes < len(coupon_estimates(spec.lg_k))
        light_rows = grouped.filter(pa.array(light))
        light_values = pc.list_flatten(distinct.filter(pa.array(light))).to_numpy(zero_copy_only=False)
        tables = [(light_rows, coupon_sketches(sizes[light], light_values, spec.lg_k))]
        if not light.all():
            heavy = grouped.filter(pa.array(~light))
            heavy_values = pc.list_flatten(distinct.filter(pa.array(~light))).to_numpy(zero_copy_only=False)
            tables.append((heavy, _united_sketches(sizes[~light], heavy_values, spec.lg_k)))
        for table, sketches in tables:
            parts.append(
                _table(
                    {
                        "query": _names(spec.name, table.num_rows),
                        "sw": table["sw"],
                        "key": table["key"],
                        "records": _scaled(table["count_all"], spec.keep),
                        "weight": pa.array(np.zeros(table.num_rows, np.int64)),
                        "sketch": sketches,
                    }
                )
            )
    return pa.concat_tables(parts)


#: the bits of a coupon's address (DataSketches KEY_MASK_26, ``analytics.hll_coupons``)
_ADDRESS_BITS = 26


def item_kept(coupon: np.ndarray, keep: float, lg_k: int) -> np.ndarray:
    """Which items a distinct query's drop box keeps: those whose coupon address has its top
    ``log2(1/keep)`` bits zero.

    Every record of an item shares its fate, so a kept item's sketch is exact in the sample and
    the kept items are a Bernoulli(keep) sample of the distinct items (``|kept| / keep`` estimates
    the count). The register index is the address's low ``lg_k`` bits and the register value
    comes from the other half of the hash, so the sample is independent of both: the kept items
    are spread over every register, as a full stream's are. ``keep`` is a power of two with at
    most ``26 - lg_k`` bits (at least 1/32 at the largest ``lg_k``, 21).
    """
    bits = round(-np.log2(keep))
    if not (0 <= bits <= _ADDRESS_BITS - lg_k) or 2.0**-bits != keep:
        raise ValueError(f"keep: expected 2^-j with 0 <= j <= {_ADDRESS_BITS - lg_k}, got {keep!r}")
    address = np.asarray(coupon, np.uint32) & np.uint32((1 << _ADDRESS_BITS) - 1)
    return (address >> np.uint32(_ADDRESS_BITS - bits)) == 0 if bits else np.ones(len(address), bool)


def _united_sketches(sizes: np.ndarray, values: np.ndarray, lg_k: int) -> pa.Array:
    """Sketches of more coupons than coupon mode holds: each the union of coupon-mode pieces.

    Sketch ``r`` holds ``values[sum(sizes[:r]) : sum(sizes[:r+1])]`` (distinct coupons). Its
    coupons are cut into pieces that coupon mode holds, built with
    :func:`analytics.sketch_windows.coupon_sketches` and united by the library: the same
    registers as a sketch fed the items one by one (a register is the largest value among the
    coupons of its address), in a Python call per piece instead of per item. Read settled, as
    every estimate of the distinct counts is, the two give the same estimate.
    """
    limit = len(coupon_estimates(lg_k)) - 1
    pieces = -(-sizes // limit)  # per sketch
    # The pieces of a sketch are consecutive runs of its coupons, all but its last one full.
    nth = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_sizes = np.minimum(limit, np.repeat(sizes, pieces) - nth * limit)
    blobs = coupon_sketches(piece_sizes, values, lg_k).to_pylist()
    out = []
    at = 0
    for count in pieces.tolist():
        union = hll_union(lg_k)
        for blob in blobs[at : at + count]:
            union.update(hll_sketch.deserialize(blob))
        at += count
        out.append(union.get_result(_HLL_TYPE).serialize_compact())
    return pa.array(out, pa.binary())


def _rows(batch: pa.RecordBatch, ts_us: np.ndarray, spec: RowsSpec) -> pa.Table:
    """The records ``spec`` keeps, as an Arrow IPC stream in one partial row (none without any)."""
    valid = np.ones(batch.num_rows, bool)
    for name in spec.required:
        valid &= np.asarray(pc.is_valid(batch.column(name)).to_numpy(zero_copy_only=False), bool)
    if not valid.any():
        return _ARROW_SCHEMA.empty_table()
    present = batch.filter(pa.array(valid)) if not valid.all() else batch
    keep = spec.select(present) if spec.select is not None else np.ones(present.num_rows, bool)
    kept = present.filter(pa.array(keep))
    table = pa.table(
        {"ts": pa.array(ts_us[valid][keep], pa.int64()), **{f: kept.column(f) for f in spec.fields}}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return _table(
        {
            "query": [spec.name],
            "sw": [int(ts_us[valid].max())],
            "records": [table.num_rows],
            "weight": [0],
            "sketch": pa.array([sink.getvalue().to_pybytes()], pa.binary()),
        }
    )


def rows_of(partials: pa.Table, name: str) -> tuple[pa.Table | None, int | None]:
    """The records a :class:`RowsSpec` named ``name`` carried in ``partials`` (None: no row), and
    the newest event time (µs) of the records with its required fields (None: none)."""
    mine = partials.filter(pc.equal(partials["query"], name))
    tables = [pa.ipc.open_stream(blob).read_all() for blob in mine["sketch"].to_pylist() if blob is not None]
    newest = pc.max(mine["sw"]).as_py() if mine.num_rows else None
    return (pa.concat_tables(tables) if tables else None), newest


def partials_of(batch: pa.RecordBatch | pa.Table, specs: Sequence[Spec]) -> pa.Table:
    """Stage 1 of ``specs`` over one Arrow batch of decoded rows (``ts``, ``is_control``, fields)."""
    ts = pc.cast(batch.column("ts"), pa.int64())
    ts = ts.combine_chunks() if isinstance(ts, pa.ChunkedArray) else ts
    parts = []
    if len(ts) and ts.null_count < len(ts):
        parts.append(
            _table({"query": [MAX_QUERY], "sw": [pc.max(ts).as_py()], "records": [0], "weight": [0]})
        )
    rows = batch.filter(pc.invert(batch.column("is_control")))
    if rows.num_rows:
        ts_us = np.asarray(pc.cast(rows.column("ts"), pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        sampled = any(isinstance(s, CountSpec) and s.keep < 1 for s in specs)
        hashes = _hashes(rows, ts_us) if sampled else None
        for spec in specs:
            if isinstance(spec, RowsSpec):
                parts.append(_rows(rows, ts_us, spec))
                continue
            parts.append(
                _counts(rows, ts_us, spec, hashes)
                if isinstance(spec, CountSpec)
                else _sketches(rows, ts_us, spec)
            )
    else:
        parts += [
            _table({"query": [s.name], "records": [0], "weight": [0]})
            for s in specs
            if isinstance(s, DistinctSpec)
        ]
    return pa.concat_tables(parts) if parts else _ARROW_SCHEMA.empty_table()


def _fields(spec: Spec) -> tuple[str, ...]:
    if isinstance(spec, CountSpec):
        return spec.fields
    if isinstance(spec, DistinctSpec):
        return (*spec.group, *spec.item)
    return (*spec.fields, *spec.required)


def _columns(specs: Sequence[Spec]) -> list[str]:
    fields = {f for s in specs for f in _fields(s)}
    weights = {"wire_len"} if any(isinstance(s, CountSpec) and s.weight == "bytes" for s in specs) else set()
    if any(isinstance(s, CountSpec) and s.keep < 1 for s in specs):
        weights |= set(HASH_FIELDS[1:])
    return sorted({"ts", "is_control", *weights, *fields})


def partial_counts(df: DataFrame, specs: Sequence[Spec]) -> pa.Table:
    """Stage 1 of ``specs`` over a micro-batch of decoded rows: partials per partition, collected."""
    specs = tuple(specs)
    names = _query_names(specs)

    def stage1(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from _coded(partials_of(batch, specs), names).to_batches()

    if "is_control" not in df.columns:  # a stream without control rows (e.g. `netmon bench distinct`)
        df = df.withColumn("is_control", F.lit(False))
    return _named(df.select(*_columns(specs)).mapInArrow(stage1, PARTIAL_SCHEMA).toArrow(), names)


def _query_names(specs: Sequence[Spec]) -> pa.Array:
    return pa.array([MAX_QUERY, TOTALS_QUERY, NEWEST_QUERY, *(s.name for s in specs)], pa.string())


def _coded(partials: pa.Table, names: pa.Array) -> pa.Table:
    """``partials`` with each query name replaced by its index in ``names``."""
    return partials.set_column(
        0, pa.field("query", pa.int32()), pc.index_in(partials["query"], value_set=names)
    )


def _named(partials: pa.Table, names: pa.Array) -> pa.Table:
    """The inverse of :func:`_coded`."""
    return partials.set_column(0, pa.field("query", pa.string()), pc.take(names, partials["query"]))


def decode_messages(
    messages: pa.RecordBatch | pa.Table,
    *,
    newest_ns: int | None = None,
    delay_ns: int | None = None,
    intake: float = 1.0,
) -> tuple[pa.Table, dict[str, int], int | None]:
    """Raw Kafka messages -> decoded rows (:data:`ROW_SCHEMA`), the count of each line class, and
    the newest event time seen (ns, or None).

    ``messages``: ``value`` (binary), ``known`` (the message's format and version headers are
    this wire format's), ``control`` (its ``netmon.control`` header or null) and ``horizon_ns``
    (null, or the event time past which a record is from the future), in the order they were
    written (one Kafka partition's offsets). A line of a known message without a control header
    is a packet if it parses (``ingest.wire.parse_many``); a line of a known ``watermark``
    control message holding an integer is a control row (its event time); a packet or control
    row later than ``horizon_ns`` is *future*: counted, and dropped; every other non-empty line
    is malformed. The rules of ``docs/wire-format.md``, as Spark's decoding
    (``pipeline.source.decode_packets``) applies them to the join queries' stream.

    With ``delay_ns`` (the watermark delay), one meaning of *late* for every kind and for the
    offline commands (``docs/reliability.md``): a packet is late when its event time is more than
    ``delay_ns`` behind the newest event time seen before it — earlier packets and control rows
    of the partition, from ``newest_ns`` on (the batches before). Late packets are counted
    (``late``) and dropped, whatever the micro-batch boundaries were.

    With ``intake`` < 1, the intake drop box (``analytics.sampling.intake_lines``): only the lines
    of packet messages it keeps, by their ``partition``, ``offset`` and index, are parsed; the
    others are counted as ``sampled``.
    """
    totals = dict.fromkeys(TOTALS, 0)
    values = messages.column("value").to_pylist()
    known = messages.column("known").to_pylist()
    control = messages.column("control").to_pylist()
    if intake < 1:
        # The intake drop box: only the kept lines of packet messages are parsed (control and
        # unknown messages are read whole).
        partitions = messages.column("partition").to_pylist()
        at = zip(known, control, partitions, messages.column("offset").to_pylist(), strict=True)
        values = [
            _intake(v, p, o, intake, totals) if ok and kind is None else v
            for v, (ok, kind, p, o) in zip(values, at, strict=True)
        ]
    horizons = [h for h in messages.column("horizon_ns").to_pylist() if h is not None]
    horizon = min(horizons) if horizons else None
    newest = newest_ns
    tables: list[pa.Table] = []
    control_ns: list[int] = []
    run: list[bytes] = []  # consecutive packet messages: parsed in one read

    def packets(values: list[bytes]) -> None:
        nonlocal newest
        table, bad = parse_many(values)
        totals["malformed"] += bad
        if horizon is not None and table.num_rows:
            ahead = pc.greater(table.column("ts"), horizon)
            future = pc.sum(ahead).as_py() or 0
            if future:
                table = table.filter(pc.invert(ahead))
                totals["future"] += future
        if not table.num_rows:
            return
        totals["packets"] += table.num_rows  # late ones included: `late` counts those apart
        ts = np.asarray(table.column("ts").to_numpy(zero_copy_only=False), np.int64)
        if delay_ns is not None:
            # The newest event time before each packet: the running maximum, shifted by one.
            before = np.empty_like(ts)
            before[0] = _NEVER if newest is None else newest
            np.maximum.accumulate(ts[:-1], out=before[1:])
            np.maximum(before[1:], before[0], out=before[1:])
            # Nothing before the first packet of the stream: it is never late.
            late = (before != _NEVER) & (ts < before - delay_ns)
            if late.any():
                totals["late"] += int(late.sum())
                table = table.filter(pa.array(~late))
        top = int(ts.max())
        newest = top if newest is None else max(newest, top)
        tables.append(table)

    for value, ok, kind in zip(values, known, control, strict=True):
        value = value or b""
        if ok and kind is None:
            run.append(value)
            continue
        if run:  # a control or unknown message: the packets before it come first
            packets(run)
            run = []
        for line in value.split(b"\n"):
            if not line:
                continue
            if ok and kind == CONTROL_WATERMARK:
                try:
                    ns = int(line.strip())
                except ValueError:
                    pass
                else:
                    if horizon is not None and ns > horizon:
                        totals["future"] += 1
                    else:
                        control_ns.append(ns)
                        newest = ns if newest is None else max(newest, ns)
                    continue
            totals["malformed"] += 1
    if run:
        packets(run)
    records = pa.concat_tables(tables) if tables else None
    ts_ns = records.column("ts") if records is not None else pa.array([], pa.int64())
    totals["control"] = len(control_ns)
    # Spark's event time: `timestamp_micros(ts_ns div 1000)` (integer division toward zero).
    ts_us = pc.divide(pc.cast(ts_ns, pa.int64()), 1000)
    columns = [pa.array(np.zeros(len(ts_ns), bool))]
    if records is not None:
        columns += [records.column(name) for name in ARROW_SCHEMA.names[1:]]
    else:
        columns += [pa.array([], field.type) for field in list(ARROW_SCHEMA)[1:]]
    rows = pa.Table.from_arrays([pc.cast(ts_us, pa.timestamp("us", tz="UTC")), *columns], schema=ROW_SCHEMA)
    if control_ns:
        marks = pa.table(
            {
                "ts": pa.array(
                    [ns // 1000 if ns >= 0 else -((-ns) // 1000) for ns in control_ns], pa.int64()
                ).cast(pa.timestamp("us", tz="UTC")),
                "is_control": pa.array([True] * len(control_ns)),
            }
        )
        rows = pa.concat_tables([rows, marks], promote_options="default").cast(ROW_SCHEMA)
    return rows, totals, newest


def _intake(value: bytes | None, partition: int, offset: int, keep: float, totals: dict[str, int]) -> bytes:
    kept, dropped = intake_lines(value or b"", partition, offset, keep)
    totals["sampled"] += dropped
    return kept


def totals_of(merged: pa.Table) -> dict[str, int]:
    """The line classes' counts of a merged batch (:func:`merge_partials`)."""
    rows = merged.filter(pc.equal(merged["query"], TOTALS_QUERY))
    counts = dict(zip(rows["key"].to_pylist(), rows["records"].to_pylist(), strict=True))
    return {name: int(counts.get(name) or 0) for name in TOTALS}


def raw_partials(
    messages: DataFrame,
    specs: Sequence[Spec],
    *,
    newest_ns: dict[int, int] | None = None,
    delay_ns: int | None = None,
    intake: float = 1.0,
) -> pa.Table:
    """Decode and stage 1 of ``specs`` over a micro-batch of raw Kafka messages, collected.

    ``messages``: ``value, partition, offset, known, control, horizon_ns``
    (``pipeline.source.raw_messages``; ``intake`` < 1: the intake drop box, :func:`decode_messages`),
    one task per Kafka partition's offsets (in order). Each
    task decodes its messages with pyarrow (:func:`decode_messages`: late packets, by the newest
    event time of their partition before them — ``newest_ns`` from the batches before — are
    dropped and counted) and computes every partial of its rows. A ``NEWEST_QUERY`` row per
    partition carries its newest event time after the batch, in ns.
    """
    specs = tuple(specs)
    names = _query_names(specs)
    carried = dict(newest_ns or {})

    def stage1(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        newest: dict[int, int | None] = {}
        for batch in batches:
            parts = pc.unique(batch.column("partition")).to_pylist() if batch.num_rows else []
            if len(parts) > 1:
                raise ValueError(
                    f"a task read several Kafka partitions ({parts}): lateness needs their order"
                )
            partition = parts[0] if parts else None
            before = newest.get(partition, carried.get(partition)) if partition is not None else None
            rows, totals, after = decode_messages(batch, newest_ns=before, delay_ns=delay_ns, intake=intake)
            partials = partials_of(rows, specs)
            if partition is not None:
                newest[partition] = after
                # A task reads one Kafka partition's offsets: its largest event time is that partition's.
                is_max = pc.equal(partials["query"], MAX_QUERY)
                key = pc.if_else(is_max, pa.scalar(str(partition)), partials["key"])
                partials = partials.set_column(2, "key", key)
            yield from _coded(partials, names).to_batches()
            counted = _table(
                {
                    "query": _names(TOTALS_QUERY, len(TOTALS)),
                    "key": list(TOTALS),
                    "records": [totals[name] for name in TOTALS],
                    "weight": [0] * len(TOTALS),
                }
            )
            yield from _coded(counted, names).to_batches()
        marks = {p: ns for p, ns in newest.items() if ns is not None}
        if marks:
            newest_rows = _table(
                {
                    "query": _names(NEWEST_QUERY, len(marks)),
                    "sw": list(marks.values()),
                    "key": [str(p) for p in marks],
                    "records": [0] * len(marks),
                    "weight": [0] * len(marks),
                }
            )
            yield from _coded(newest_rows, names).to_batches()

    return _named(messages.mapInArrow(stage1, PARTIAL_SCHEMA).toArrow(), names)


def newest_of(partials: pa.Table) -> dict[int, int]:
    """Each Kafka partition's newest event time (ns) after a batch (:func:`raw_partials`)."""
    rows = partials.filter(pc.equal(partials["query"], NEWEST_QUERY))
    out: dict[int, int] = {}
    for key, ns in zip(rows["key"].to_pylist(), rows["sw"].to_pylist(), strict=True):
        out[int(key)] = max(ns, out.get(int(key), ns))
    return out


def merge_partials(partials: pa.Table) -> tuple[pa.Table, int | None]:
    """Sum the partitions' counts per (query, sub-window, key); the batch's event time (µs).

    The batch's event time is the smallest over its Kafka partitions of their largest event
    time: Spark's watermark follows the newest record of any partition, which drops the records
    of a partition that lags in event time as late (issue 22); here the slowest partition read
    in the batch sets the pace. A partition with no record in the batch does not hold it back.

    Sketch rows pass through unmerged (a sub-window's partial sketches are united later, by the
    distinct kind's store): the result has the partial rows' columns.
    """
    is_max = pc.equal(partials["query"], MAX_QUERY)
    tops = partials.filter(is_max).group_by("key", use_threads=False).aggregate([("sw", "max")])
    # The slowest partition's newest event time (rows of no known partition count as one).
    max_us = pc.min(tops["sw_max"]).as_py() if tops.num_rows else None
    rows = partials.filter(pc.invert(is_max))
    is_newest = pc.equal(rows["query"], NEWEST_QUERY)
    newest = rows.filter(is_newest)
    rows = rows.filter(pc.invert(is_newest))
    has_sketch = pc.is_valid(rows["sketch"])
    sketches = rows.filter(has_sketch)
    counts = rows.filter(pc.invert(has_sketch))
    merged = counts.group_by(["query", "sw", "key"], use_threads=False).aggregate(
        [("records", "sum"), ("weight", "sum")]
    )
    merged = merged.select(["query", "sw", "key", "records_sum", "weight_sum"])
    merged = merged.rename_columns(["query", "sw", "key", "records", "weight"])
    merged = merged.append_column("sketch", pa.nulls(merged.num_rows, pa.binary()))
    return pa.concat_tables([merged.cast(_ARROW_SCHEMA), sketches, newest]), max_us
