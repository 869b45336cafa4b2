"""Publish committed results to Kafka: JSON Lines messages of result rows on ``netmon.<kind>``.

Spark's file sink is the system of record (exactly once, checkpointed). The driver republishes each
newly committed Parquet file once, so consumers such as ``netmon alerts`` can subscribe instead of
polling files, and no second streaming query recomputes the results. Delivery is at least once: a
file is marked published only once the broker acknowledged every message holding its rows (each
send's future is checked after the flush); a file with a row not acknowledged stays unpublished and
is sent again, whole, at the next poll, and a crash between the acknowledgements and the mark
republishes it too, so consumers dedupe on the row's identity (kind, query, window, key/group).
The mark (``<data>/checkpoints/publish/<kind>.json``: the published files, by their path under
the kind's results directory) is written to a temporary file, fsynced, renamed over the old one,
and the directory fsynced: a power cut leaves the old mark or the new one, never a torn one.

Message layout (result version 2, documented in ``docs/results.md``):

- value: rows as JSON Lines (one JSON object per line, each ending with ``\\n``), in event-time
  order, up to :data:`MESSAGE_BYTES` per message; timestamps as ISO-8601 UTC strings, binary
  columns omitted;
- key: the kind, so a kind's messages stay in order on one partition;
- headers: ``netmon.kind`` = the kind, ``netmon.result-version`` = ``2``, ``netmon.rows`` = the
  rows in the message.

Version 1 sent one message per row: a replayed day (millions of report rows, one per item per
one-second slide) took kafka-python minutes of sends, longer than the pipeline took to compute
them. Encoding is column-wise (:func:`pipeline.result_json.json_lines`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from netmon.config import Config
from netmon.kafka_admin import close_producer
from netmon.results import checkpoint_dir, result_files, result_topic, results_dir
from pipeline.result_json import json_lines, row_to_json

__all__ = [
    "MESSAGE_BYTES",
    "RESULT_VERSION",
    "ResultPublisher",
    "fsync_dir",
    "mark_file",
    "read_mark",
    "row_to_json",
]

log = logging.getLogger(__name__)

RESULT_VERSION = 2
#: the most JSON text one message carries (a single longer row goes alone); the broker's default
#: limit on a message is 1 MiB
MESSAGE_BYTES = 256 * 1024
#: rows encoded at a time (bounds the text held in memory)
_ENCODE_ROWS = 250_000

#: the first of these a kind's rows have is their event time (as ``alerts.rules`` reads it)
TIME_COLUMNS = ("window_end", "event_time", "batch_time", "ts", "left_ts")

_FILE_INDEX = "__netmon_file"


def _in_time_order(tables: list[pa.Table]) -> pa.Table:
    """The rows of newly committed files in event-time order (stable: ties keep file order), with
    the index of each row's table in ``tables`` in the column :data:`_FILE_INDEX`.

    A micro-batch writes one file per partition, each in its own order; consumers that evaluate
    rows in arrival order (``netmon alerts``) see time move forward instead of back and forth.
    """
    tagged = [
        t.append_column(_FILE_INDEX, pa.array(np.full(t.num_rows, i, np.int32)))
        for i, t in enumerate(tables)
        if t.num_rows
    ]
    if not tagged:
        return pa.table({_FILE_INDEX: pa.array([], pa.int32())})
    table = pa.concat_tables(tagged, promote_options="default")
    column = next((c for c in TIME_COLUMNS if c in table.column_names), None)
    if column is not None and not _ascending(table.column(column)):
        table = table.take(pc.sort_indices(table, [(column, "ascending", "at_end")]))
    return table


def _ascending(column: pa.ChunkedArray) -> bool:
    """Whether a time column is already in order without nulls (a per-batch kind's one file
    usually is): a sort of millions of rows is then skipped."""
    if column.null_count or not pa.types.is_timestamp(column.type):
        return False
    values = pc.cast(column, pa.int64()).to_numpy()
    return bool(np.all(values[1:] >= values[:-1]))


def _messages(lines: pa.Array) -> Iterator[tuple[int, int, bytes]]:
    """(first row, end row, value) of each message: consecutive lines up to :data:`MESSAGE_BYTES`.

    The value is a slice of the array's text buffer (the lines already end with a newline).
    """
    lines = pc.cast(lines, pa.large_string())  # 64-bit offsets: no limit on the text's size
    _, offsets_buffer, data = lines.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64)[lines.offset : lines.offset + len(lines) + 1]
    start = 0
    while start < len(lines):
        end = int(np.searchsorted(offsets, offsets[start] + MESSAGE_BYTES, side="right")) - 1
        end = max(end, start + 1)
        yield start, end, data[int(offsets[start]) : int(offsets[end])].to_pybytes()
        start = end


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_file(cfg: Config, kind: str) -> Path:
    """The kind's publish mark: the files published, by their path under its results directory."""
    return checkpoint_dir(cfg, "publish") / f"{kind}.json"


def read_mark(path: Path) -> set[str]:
    """The files a publish mark names (none when it is missing or torn)."""
    try:
        return set(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return set()


class ResultPublisher:
    """Tracks which committed result files of each kind went to Kafka, and sends the new ones."""

    def __init__(self, cfg: Config, kinds: tuple[str, ...], *, producer: Any | None = None) -> None:
        self.cfg = cfg
        self.kinds = kinds
        self._producer = producer
        self._state = checkpoint_dir(cfg, "publish")
        self.published_rows = 0

    def _files(self, kind: str) -> dict[str, Path]:
        """The kind's committed files by their path under its results directory.

        By path, not by name: the files of a kind written per micro-batch all have the same name
        (``batch-<id>/part-00000.parquet``). A Spark file sink's files lie directly in the directory,
        so their key is their name, as in marks written before keys were paths.
        """
        root = results_dir(self.cfg, kind)
        return {f.relative_to(root).as_posix(): f for f in result_files(root)}

    def _done(self, kind: str) -> set[str]:
        return read_mark(mark_file(self.cfg, kind))

    def _mark(self, kind: str, done: set[str]) -> None:
        """Replace the kind's mark durably: temporary file, fsync, rename, fsync the directory."""
        self._state.mkdir(parents=True, exist_ok=True)
        tmp = self._state / f"{kind}.json.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(sorted(done)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, mark_file(self.cfg, kind))
        fsync_dir(self._state)

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer

            from netmon.kafka_admin import ensure_topic
            from netmon.kafka_security import client_options

            security = client_options(self.cfg.kafka)  # [kafka] authentication and TLS
            for kind in self.kinds:
                ensure_topic(
                    self.cfg.kafka.bootstrap,
                    result_topic(self.cfg, kind),
                    self.cfg.kafka.partitions,
                    self.cfg.kafka.replication_factor,
                    security=security,
                    min_insync_replicas=self.cfg.kafka.min_insync_replicas,
                )
            self._producer = KafkaProducer(
                bootstrap_servers=self.cfg.kafka.bootstrap,
                acks="all",
                linger_ms=20,
                compression_type="lz4",  # JSON of repeated keys and names: several times smaller
                client_id="netmon-results",
                # a broker that stopped answering must not block the driver's poll for long
                max_block_ms=10_000,
                **security,
            )
        return self._producer

    def publish(self) -> int:
        """Send every committed, not yet published result file; return the rows of the files
        published (every row acknowledged). A file with a row not acknowledged is retried whole
        at the next call."""
        published = 0
        for kind in self.kinds:
            done = self._done(kind)
            new = [(key, path) for key, path in self._files(kind).items() if key not in done]
            if not new:
                continue
            try:
                tables = [pq.read_table(path) for _, path in new]
                ok = self._send(kind, tables)
            except Exception as exc:  # noqa: BLE001 - Kafka down: keep results, retry next poll
                log.warning("publishing results failed; will retry", extra={"kind": kind, "error": str(exc)})
                self._drop_producer()
                continue
            if len(ok) < len(new):
                # kafka-python's idempotent producer takes some refusals as fatal and then refuses
                # every later send: the retry starts from a new producer.
                self._drop_producer()
            if ok:
                self._mark(kind, done | {new[i][0] for i in ok})
                published += sum(tables[i].num_rows for i in ok)
        self.published_rows += published
        return published

    def _send(self, kind: str, tables: list[pa.Table]) -> set[int]:
        """Send the rows of ``tables``; return the indices of the tables whose rows were all
        acknowledged (raises when the producer cannot even flush)."""
        from kafka.errors import KafkaTimeoutError

        producer = self._ensure_producer()
        topic = result_topic(self.cfg, kind)
        key = kind.encode()
        ok = set(range(len(tables)))
        sends: list[tuple[np.ndarray, Any]] = []
        first_error: BaseException | None = None
        ordered = _in_time_order(tables)
        files = ordered.column(_FILE_INDEX).to_numpy()
        rows = ordered.drop_columns([_FILE_INDEX])
        for begin in range(0, rows.num_rows, _ENCODE_ROWS):
            for first, end, value in _messages(json_lines(rows.slice(begin, _ENCODE_ROWS))):
                holders = np.unique(files[begin + first : begin + end])
                headers = [
                    ("netmon.kind", kind.encode()),
                    ("netmon.result-version", str(RESULT_VERSION).encode()),
                    ("netmon.rows", str(end - first).encode()),
                ]
                try:
                    sends.append((holders, producer.send(topic, value, key=key, headers=headers)))
                except KafkaTimeoutError:
                    raise  # blocked: the broker is away, retry everything next poll
                except Exception as exc:  # noqa: BLE001 - these rows cannot be sent: their files wait
                    ok.difference_update(holders.tolist())
                    first_error = first_error or exc
        producer.flush(timeout=30)
        for holders, future in sends:
            if not future.succeeded():
                ok.difference_update(holders.tolist())
                first_error = first_error or future.exception or TimeoutError("not acknowledged")
        if first_error is not None:
            log.warning(
                "result rows not acknowledged; their files stay unpublished and are retried",
                extra={"kind": kind, "files": len(tables) - len(ok), "error": repr(first_error)},
            )
        return ok

    def _drop_producer(self) -> None:
        """Close the producer, abandoning what it still holds (a new one is made when needed)."""
        producer, self._producer = self._producer, None
        if producer is not None and not close_producer(producer, 0):
            log.debug("result producer closed with rows still buffered (they are resent whole later)")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None
