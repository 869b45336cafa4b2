"""The window joins (kind ``joins``) on the shared micro-batch: one Kafka read for every kind.

Until this module the joins ran as a streaming query of their own: a second Kafka read and
decode of every packet, its own micro-batches competing for the two cores with the shared
query's, and its own meaning of *late* (the join operator's clock per hash bucket). Measured, that
second query was the largest cost left in the whole pipeline (docs/performance.md). Now the join
is one more kind of the shared query (``pipeline.job.SharedBatch``):

1. **Stage 1, in the tasks** (``pipeline.partials.RowsSpec``): the records that fall on some
   side of some join query (:func:`join_rows`: a handshake query's SYNs and SYN-ACKs, a link
   query's filtered packets with their key fields) travel to the driver as Arrow; the rest of a
   flood never leaves its task. Late records are already gone: the shared decode drops them by
   the one rule of every kind (``pipeline.partials.decode_messages``).
2. **On the driver**: the rows are staged per query and side (``pipeline.joins.stage_rows``, the
   same keys and filters as before) and each query's :class:`pipeline.join_state.JoinBucket` — the
   symmetric hash join of seed 003 with its shedder, one vectorised call over all the batch's
   keys — joins them with the shedding fractions of the control file
   (``pipeline.joins.control_file``). The rows (``match`` and, for the handshake query,
   ``unmatched``) are committed with the batch (``pipeline.batch_sink``): a batch Spark runs
   again rewrites the same rows.

**Under the intake drop box** (``[resources] manage``, ``pipeline.resource_manager``) the joins
see a sample of the records: a SYN kept whose SYN-ACK was skipped becomes an ``unmatched`` row, a
pair survives with the product of its sides' fractions. Every row says so: ``keep`` is the
smallest intake fraction of the batches that may have carried the row's tuples, or skipped the
answer an unmatched SYN lacks: those whose tuples' event times overlap the row's (from its
earliest tuple to its latest, or to the latest its answer could have been: the query's windows
and lateness after the SYN) — 1.0 when every such batch read every record. The
batches that sampled are kept in the state description (:data:`INTAKE_HISTORY_S` of event time),
so a restart or a batch run again marks the same rows. Rules that count unanswered SYNs skip such
rows (``exact_only``, ``alerts.defaults``).

The state is each query's join (``JoinBucket.to_bytes``: its windows and its shedder's random
generator), one Arrow IPC file per batch that changed it beside the checkpoint
(``state-<id>.arrow``), named by a versioned JSON (``pipeline.batch_state``) written after the
rows: a batch that runs again starts from the version before it. The state is also held in
memory between batches, and dropped when a batch fails half way (the join's windows are updated
in place).

Departures from the streaming query this replaces, all deliberate: a query's join is one hash
join over all its keys (no buckets: the driver has one core for it, and one call is the
cheapest), so a query's shedder has one random stream (seed: ``pipeline.join_state.bucket_seed``
of bucket 0). At the end of each batch every query's clock moves to the batch's event time
(``SymmetricHashJoin.advance``): an unanswered SYN is reported once the stream has passed its
window, even when its own query's tuples stopped, and a closing watermark reports the last ones
(a bucket's clock moved with its own tuples only). The statistics the controller and the ``sys``
rows read are this kind's own, per batch (:attr:`SharedJoins.observed`), instead of Spark's
observed metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analytics.join import BatchStats
from analytics.keys import parse_key
from netmon.config import Config, JoinQuery, check_unique_names
from pipeline.batch_sink import write_table
from pipeline.batch_state import BatchState, read_arrow, write_arrow
from pipeline.join_state import PAIR_COLUMNS, PAYLOAD, STATS_COLUMNS, JoinBucket, JoinSpec
from pipeline.joins import RESULT_COLUMNS, _side_masks, control_file, join_specs, stage_rows
from pipeline.partials import INTAKE, RowsSpec, rows_of
from pipeline.shedding_controller import observe_name, read_control

__all__ = ["JOINS_SPEC", "RESULT_SCHEMA", "SharedJoins", "build_joins_batch", "join_fields", "join_rows"]

log = logging.getLogger(__name__)

#: The stage-1 query name of the joins kind (``pipeline.partials``).
JOINS_SPEC = "joins/rows"

_ARROW_TYPES = {
    "STRING": pa.string(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}
#: The rows of ``results/joins/`` (the types Spark's file sink wrote for the same columns).
RESULT_SCHEMA = pa.schema(
    [
        *((name, _ARROW_TYPES[PAIR_COLUMNS[name]]) for name in RESULT_COLUMNS),
        # the intake drop box's fraction the row's tuples were read with (module docstring)
        ("keep", pa.float64()),
    ]
)
_STATE = pa.schema([("query", pa.string()), ("state", pa.large_binary())])
#: the whole state is written every this many changing batches, only their input in between
SNAPSHOT_EVERY = 10
#: batches whose statistics are kept for the listeners (they run after the next batch may begin)
OBSERVED_KEPT = 64
#: event time (s) beyond the longest join window and lateness for which the batches that sampled
#: are remembered (a row's ``keep``): an unmatched row is reported once the stream passed its window
INTAKE_HISTORY_S = 60.0


def _filter_fields(node: Any) -> set[str]:
    """The record fields a parsed filter reads (``netmon.filters``' expression tree)."""
    from netmon import filters as fl

    if isinstance(node, fl._Bool):
        return _filter_fields(node.left) | _filter_fields(node.right)
    if isinstance(node, fl._Not):
        return _filter_fields(node.inner)
    return {node.field}


def join_fields(queries: Iterable[JoinQuery]) -> tuple[str, ...]:
    """The record columns stage 1 carries for ``queries``: the payload, what the handshake keys
    need, and each link query's key and filter fields."""
    from netmon.filters import parse_filter

    fields = [*PAYLOAD, "proto", "tcp_flags", "tcp_seq", "tcp_ack"]
    for q in queries:
        if q.query == "link":
            fields += parse_key(q.key) + parse_key(q.right_key or q.key)
            for text in (q.left, q.right):
                fields += sorted(_filter_fields(parse_filter(text)._node))
    return tuple(dict.fromkeys(fields))


def join_rows(queries: tuple[JoinQuery, ...], records: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Stage 1's selection: the records on some side of some query, with that side's key."""
    keep = np.zeros(records.num_rows, bool)
    for q in queries:
        for mask, key in _side_masks(records, q):
            hit = pc.and_(pc.fill_null(mask, False), pc.is_valid(key))
            keep |= np.asarray(hit.to_numpy(zero_copy_only=False), bool)
    return keep


class SharedJoins:
    """The joins kind on each micro-batch (module docstring).

    Parameters
    ----------
    queries, specs
        ``[[queries.join]]`` and the operator's view of them (``pipeline.joins.join_specs``).
    results, checkpoint
        ``results/joins/`` and the kind's checkpoint directory.
    control
        The shedding controller's control file (the fractions a batch applies), or None for the
        static ones.
    """

    def __init__(
        self,
        queries: tuple[JoinQuery, ...],
        specs: Mapping[str, JoinSpec],
        results: Path,
        checkpoint: Path,
        *,
        control: Path | None = None,
    ) -> None:
        check_unique_names("join", queries)
        self.queries = tuple(queries)
        self.join_specs = dict(specs)
        self.results = Path(results)
        self.store = Path(checkpoint)
        self.state = BatchState(self.store / "versions")
        self.control = control
        #: a snapshot of the whole state every this many batches that change it (deltas between)
        self.snapshot_every = SNAPSHOT_EVERY
        #: per batch id: each join query's statistics (``observe_name(query)`` -> sums), as
        #: the streaming query's observed metrics were; read by the shedding and sys listeners
        self.observed: OrderedDict[int, dict[str, dict[str, Any]]] = OrderedDict()
        #: the state this process holds: the batch id that saved it, each query's join, the
        #: tuples waiting for the batches' event time to reach them
        self._held: tuple[int, dict[str, JoinBucket], pa.Table | None] | None = None
        #: the intake drop box's fraction in force for the next batch (:meth:`sample`)
        self.intake = 1.0
        # per query, how far from a tuple its pair may lie, late arrivals included (a row's keep)
        self._reach_us = {
            name: round((sp.window_left_s + sp.window_right_s + sp.lateness_s) * 1e6)
            for name, sp in self.join_specs.items()
        }
        self._slack_us = round(max((sp.lateness_s for sp in self.join_specs.values()), default=0.0) * 1e6)
        # the longest time a tuple waits for its pair, and then for the stream to pass it
        self._history_us = max(self._reach_us.values(), default=0) + round(INTAKE_HISTORY_S * 1e6)

    def sample(self, keep: Mapping[str, float]) -> None:
        """The drop boxes' fractions of the next batch: the joins have none of their own (they
        shed by PNI), but read what the intake box kept (``INTAKE``)."""
        self.intake = float(keep.get(INTAKE, 1.0))

    @property
    def specs(self) -> tuple[RowsSpec, ...]:
        """Stage 1: the records on some side of some join query."""
        return (RowsSpec(JOINS_SPEC, join_fields(self.queries), select=partial(join_rows, self.queries)),)

    def apply(self, partials: pa.Table, max_us: int | None, batch_id: int) -> None:
        """Join the batch's records; commit the rows; save the state."""
        before = self.state.load(batch_id) or {"version": None}
        joins, waiting = self._load(before)
        self._held = None  # updated in place below: held again only once the batch is saved
        records, _ = rows_of(partials, JOINS_SPEC)
        new = self._staged(records)
        control = read_control(self.control) if self.control is not None else {}
        fractions = {q.name: self._fractions(q.name, control) for q in self.queries}
        frames, observed, waiting, changed = self._step(joins, waiting, new, fractions, max_us)
        sampled = _sampled_batches(before, self.intake, new, max_us, self._history_us)
        rows = _marked(pa.concat_tables(frames) if frames else None, sampled, self._reach_us, self._slack_us)
        write_table(rows, self.results, batch_id)
        after = before
        if changed or new.num_rows:
            after = self._save(batch_id, before, joins, waiting, new, fractions, max_us)
        after = (
            {**after, "sampled": sampled} if sampled else {k: v for k, v in after.items() if k != "sampled"}
        )
        self.state.save(batch_id, after)
        self._held = (after["version"], joins, waiting) if after["version"] is not None else None
        self._drop_states(keep=_files(before) | _files(after))
        self.observed[batch_id] = observed
        while len(self.observed) > OBSERVED_KEPT:
            self.observed.popitem(last=False)
        log.debug(
            "joins batch",
            extra={
                "batch": batch_id,
                "records": 0 if records is None else records.num_rows,
                "rows": rows.num_rows,
            },
        )

    def _fractions(self, name: str, control: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
        """The shedding fractions query ``name`` applies in this batch (1, 1: every tuple)."""
        spec = self.join_specs[name]
        if spec.strategy == "none":
            return 1.0, 1.0
        x_left, x_right = control.get(name, (spec.x_left, spec.x_right))
        return float(x_left), float(x_right)

    def _step(
        self,
        joins: dict[str, JoinBucket],
        waiting: pa.Table | None,
        new: pa.Table,
        fractions: Mapping[str, tuple[float, float]],
        max_us: int | None,
    ) -> tuple[list[pa.Table], dict[str, dict[str, Any]], pa.Table, bool]:
        """One batch on the joins in memory (updated in place): the result tables, the statistics,
        the tuples left waiting, whether the joins changed. A function of its arguments only, so a
        restart replays the batches since the last snapshot through it (:meth:`_load`)."""
        staged = _concat([waiting, new])
        # Tuples later than the batch's event time (the slowest partition's newest) wait for a
        # batch whose event time reaches them: a partition read further ahead than another must
        # not move the join's clock past tuples the other partition has still to bring (they
        # would be late to the join and miss their pairs; measured: 8 % of the handshakes of a
        # 1M-packet replay over two partitions in 600-message batches).
        left = staged.slice(0, 0)
        if staged.num_rows:
            ahead = (
                pc.greater(pc.cast(staged["ts"], pa.int64()), max_us)
                if max_us is not None
                else pa.array(np.ones(staged.num_rows, bool))
            )
            left, staged = staged.filter(ahead), staged.filter(pc.invert(ahead))
        frames: list[pa.Table] = []
        observed: dict[str, dict[str, Any]] = {}
        changed = False
        for q in self.queries:
            mine = staged.filter(pc.equal(staged["query"], q.name)) if staged.num_rows else staged
            if not mine.num_rows:
                continue
            started = time.perf_counter()
            bucket = joins.get(q.name) or joins.setdefault(q.name, JoinBucket(self.join_specs[q.name], 0))
            x_left, x_right = fractions.get(q.name, (1.0, 1.0))
            out, stats = bucket.process_frames(mine.drop_columns(["query"]).to_pandas(), x_left, x_right)
            frames += [_result_table(frame) for frame in out if len(frame)]
            ts = pc.cast(mine["ts"], pa.int64())
            observed[observe_name(q.name)] = _observed(
                stats, x_left, x_right, pc.min(ts).as_py() * 1000, pc.max(ts).as_py() * 1000, started
            )
            changed = True
        if max_us is not None:
            # The batch's event time moves every query's clock at its end, so a query whose own
            # tuples stop (a quiet handshake) still expires its windows and reports its unanswered
            # SYNs on time, and a stream closed by a watermark control message closes them all.
            # Not later than any partition's records may still be: the slowest partition's newest.
            for bucket in joins.values():
                expired = bucket.advance(max_us * 1000)
                if expired is not None:
                    changed = True
                    if len(expired):
                        frames.append(_result_table(expired))
        for name, bucket in joins.items():  # the windows held by queries without input
            if observe_name(name) not in observed:
                held_left, held_right = bucket.join.state_size()
                observed[observe_name(name)] = {
                    "n_left": 0,
                    "n_right": 0,
                    "state_left": held_left,
                    "state_right": held_right,
                }
        return frames, observed, left, changed

    def _save(
        self,
        batch_id: int,
        before: Mapping[str, Any],
        joins: Mapping[str, JoinBucket],
        waiting: pa.Table,
        new: pa.Table,
        fractions: Mapping[str, tuple[float, float]],
        max_us: int | None,
    ) -> dict[str, Any]:
        """Save what batch ``batch_id`` changed; its state description (saved after, by the caller).

        Every :attr:`snapshot_every` changes the whole state is written (each query's join and the
        waiting tuples: ``state-<id>.arrow``, ``waiting-<id>.arrow``); in between only the batch's
        input (``delta-<id>.arrow``: its staged tuples, the fractions and the event time it
        applied), which :meth:`_load` replays. Writing the whole window every batch was 54 % of a
        SYN flood's join time (~200k half-open SYNs in the window at 50k packets/s, 1 s batches);
        a batch's own tuples are a small part of it.
        """
        snapshot, deltas = before.get("snapshot", before["version"]), list(before.get("deltas", []))
        if snapshot is None or len(deltas) + 1 >= self.snapshot_every:
            self._write_state(joins, waiting, batch_id)
            return {"version": batch_id, "snapshot": batch_id, "deltas": []}
        meta = {"fractions": json.dumps(fractions, sort_keys=True), "max_us": json.dumps(max_us)}
        write_arrow(new.replace_schema_metadata(meta), self._delta_path(batch_id))
        return {"version": batch_id, "snapshot": snapshot, "deltas": [*deltas, batch_id]}

    def _staged(self, records: pa.Table | None) -> pa.Table:
        if records is None or not records.num_rows:
            return pa.table({"query": pa.array([], pa.string())})
        records = records.set_column(0, "ts", pc.cast(records["ts"], pa.timestamp("us", tz="UTC")))
        return stage_rows(records, self.queries)

    def _load(self, before: Mapping[str, Any]) -> tuple[dict[str, JoinBucket], pa.Table | None]:
        """Each query's join and the tuples waiting, as the state description ``before`` names them
        (the held ones when they are its version): the snapshot, then its deltas replayed."""
        version = before["version"]
        if version is None:
            return {}, None
        if self._held is not None and self._held[0] == version:
            return self._held[1], self._held[2]
        snapshot = before.get("snapshot", version)  # state saved before deltas: each a snapshot
        joins: dict[str, JoinBucket] = {}
        waiting = None
        if snapshot is not None:
            table = read_arrow(self._state_path(snapshot))
            for name, blob in zip(table["query"].to_pylist(), table["state"].to_pylist(), strict=True):
                if name in self.join_specs:  # a query removed from the config: its state goes
                    joins[name] = JoinBucket.from_bytes(blob, self.join_specs[name], 0)
            if self._waiting_path(snapshot).exists():
                waiting = read_arrow(self._waiting_path(snapshot))
        for delta in before.get("deltas", []):
            new = read_arrow(self._delta_path(delta))
            meta = new.schema.metadata or {}
            fractions = {k: (float(v[0]), float(v[1])) for k, v in json.loads(meta[b"fractions"]).items()}
            new = new.replace_schema_metadata(None)
            _, _, waiting, _ = self._step(joins, waiting, new, fractions, json.loads(meta[b"max_us"]))
        if waiting is not None:
            waiting = waiting.filter(pc.is_in(waiting["query"], pa.array(list(self.join_specs), pa.string())))
        return joins, waiting

    def _state_path(self, version: int) -> Path:
        return self.store / f"state-{version:06d}.arrow"

    def _waiting_path(self, version: int) -> Path:
        return self.store / f"waiting-{version:06d}.arrow"

    def _delta_path(self, version: int) -> Path:
        return self.store / f"delta-{version:06d}.arrow"

    def _write_state(self, joins: Mapping[str, JoinBucket], waiting: pa.Table, version: int) -> None:
        """Every query's join and the tuples waiting, whole (tmp + fsync + rename each); the
        version naming them is saved after."""
        if waiting.num_rows:
            write_arrow(waiting, self._waiting_path(version))
        table = pa.table(
            {
                "query": list(joins),
                "state": pa.array([j.to_bytes() for j in joins.values()], pa.large_binary()),
            },
            schema=_STATE,
        )
        write_arrow(table, self._state_path(version))

    def _drop_states(self, keep: set[int]) -> None:
        for pattern in ("state-*.arrow", "waiting-*.arrow", "delta-*.arrow"):
            for path in self.store.glob(pattern):
                if int(path.stem.split("-", 1)[1]) not in keep:
                    path.unlink(missing_ok=True)


def _sampled_batches(
    before: Mapping[str, Any], intake: float, new: pa.Table, max_us: int | None, history_us: int
) -> list[list[float]]:
    """The batches that read a sample, ``[oldest_us, newest_us, fraction]`` each, this one's
    included when it did: the event times of the join tuples it read (its own event time
    ``max_us`` too, for the newest; without tuples, that alone). Those whose newest is more than
    ``history_us`` behind the newest are forgotten."""
    kept = [list(map(float, entry)) for entry in before.get("sampled", [])]
    if intake < 1:
        span = _span_us(new)
        times = [t for t in (max_us, *(span or ())) if t is not None]
        if times:
            oldest = span[0] if span is not None else max(times)
            kept.append([float(oldest), float(max(times)), intake])
    if not kept:
        return []
    horizon = max(newest for _, newest, _ in kept) - history_us
    return [entry for entry in kept if entry[1] >= horizon]


def _span_us(new: pa.Table) -> tuple[int, int] | None:
    """The oldest and newest event time (µs) of the batch's join tuples; None without any."""
    if not new.num_rows or "ts" not in new.column_names:
        return None
    bounds = pc.min_max(pc.cast(new["ts"], pa.int64())).as_py()
    return int(bounds["min"]), int(bounds["max"])


def _marked(
    rows: pa.Table | None, sampled: list[list[float]], reach_us: Mapping[str, int], slack_us: int
) -> pa.Table:
    """The batch's rows with ``keep``: the smallest fraction of the sampled batches that may have
    read one of the row's tuples, or skipped one it lacks (1.0 when none did). A row's tuples lie
    between its earliest (``left_ts``, or a link pair's ``right_ts`` when earlier) and its latest
    (a pair's other one; for an unmatched SYN, the latest its answer could have been:
    ``left_ts`` + ``reach_us`` of its query, the windows and the lateness); a batch may have
    skipped tuples up to ``slack_us`` (the lateness: older ones are late and dropped anyway)
    before the oldest one it read."""
    if rows is None:
        return RESULT_SCHEMA.empty_table()
    keep = np.ones(rows.num_rows)
    if sampled and rows.num_rows:
        left = pc.cast(rows["left_ts"], pa.int64())
        right = pc.cast(rows["right_ts"], pa.int64())
        names = list(reach_us)
        at = pc.index_in(rows["query"], pa.array(names, pa.string())).to_numpy(zero_copy_only=False)
        # a query no longer configured (its state gone): the widest reach
        widths = np.array([*reach_us.values(), max(reach_us.values(), default=0)], np.int64)
        reach = widths[np.where(np.isnan(at.astype(float)), len(names), at).astype(np.int64)]
        first = pc.min_element_wise(left, right, skip_nulls=True).to_numpy(zero_copy_only=False)
        last = pc.max_element_wise(left, right, skip_nulls=True).to_numpy(zero_copy_only=False)
        unanswered = pc.is_null(right).to_numpy(zero_copy_only=False)
        last = np.where(unanswered, last + reach, last)
        for oldest, newest, fraction in sampled:
            near = (newest >= first) & (oldest - slack_us <= last)
            keep = np.where(near, np.minimum(keep, fraction), keep)
    return rows.append_column("keep", pa.array(keep, pa.float64()))


def _files(description: Mapping[str, Any]) -> set[int]:
    """The batch ids whose state files a state description needs: its snapshot and deltas."""
    snapshot = description.get("snapshot", description["version"])
    return ({snapshot} if snapshot is not None else set()) | set(description.get("deltas", []))


def _concat(tables: list[pa.Table | None]) -> pa.Table:
    """The staged tables with rows, one after the other (an empty one without any)."""
    full = [t for t in tables if t is not None and t.num_rows]
    return pa.concat_tables(full) if full else pa.table({"query": pa.array([], pa.string())})


def _observed(
    stats: BatchStats, x_left: float, x_right: float, min_ts_ns: int, max_ts_ns: int, started: float
) -> dict[str, Any]:
    """One query's statistics of the batch, the columns of ``pipeline.join_state.STATS_COLUMNS``."""
    values: dict[str, Any] = {
        name: getattr(stats, name)
        for name in STATS_COLUMNS
        if name not in ("busy_s", "x_left", "x_right", "min_ts_ns", "max_ts_ns") and hasattr(stats, name)
    }
    values.update(
        x_left=float(x_left),
        x_right=float(x_right),
        min_ts_ns=int(min_ts_ns),
        max_ts_ns=int(max_ts_ns),
        busy_s=time.perf_counter() - started,
        buckets=1,
    )
    return values


def _result_table(out: pd.DataFrame) -> pa.Table:
    """The operator's result frame (``match`` and ``unmatched`` rows) as :data:`RESULT_SCHEMA`."""
    frame = out[list(RESULT_COLUMNS)]
    schema = pa.schema([RESULT_SCHEMA.field(name) for name in RESULT_COLUMNS])
    return pa.Table.from_pandas(frame, schema=schema, preserve_index=False, safe=False)


def build_joins_batch(cfg: Config, results: Path, checkpoint: Path) -> SharedJoins:
    """The joins kind's function on the shared micro-batch (``[[queries.join]]``, ``[shedding]``)."""
    queries = cfg.queries.join
    return SharedJoins(
        queries,
        join_specs(queries, cfg.shedding, lateness_s=cfg.pipeline.watermark_s),
        results,
        checkpoint,
        control=control_file(cfg),
    )
