"""Publish committed results to Kafka: one JSON message per result row on ``netmon.<kind>``.

Spark's file sink is the system of record (exactly once, checkpointed). The driver republishes each
newly committed Parquet file once, so consumers such as ``netmon alerts`` can subscribe instead of
polling files, and no second streaming query recomputes the results. Delivery is at least once: a
file is marked published only once the broker acknowledged every one of its rows (each send's
future is checked after the flush); a file with a row not acknowledged stays unpublished and is
sent again, whole, at the next poll, and a crash between the acknowledgements and the mark
republishes it too, so consumers dedupe on the row's identity (kind, query, window, key/group).
The mark (``<data>/checkpoints/publish/<kind>.json``: the published files, by their path under
the kind's results directory) is written to a temporary file, fsynced, renamed over the old one,
and the directory fsynced: a power cut leaves the old mark or the new one, never a torn one.

Message layout (documented in ``docs/results.md``):

- value: the row as a JSON object, timestamps as ISO-8601 UTC strings, binary columns omitted;
- key: the row's ``query`` (or the kind), so one query's rows stay ordered on one partition;
- headers: ``netmon.kind`` = the kind, ``netmon.result-version`` = ``1``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from netmon.config import Config
from netmon.kafka_admin import close_producer
from netmon.results import checkpoint_dir, result_files, result_topic, results_dir

__all__ = ["RESULT_VERSION", "ResultPublisher", "row_to_json"]

log = logging.getLogger(__name__)

RESULT_VERSION = 1


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return value


def row_to_json(row: dict[str, Any]) -> bytes:
    """One result row as compact JSON (binary columns dropped)."""
    plain = {k: _plain(v) for k, v in row.items() if not isinstance(v, bytes | bytearray)}
    return json.dumps(plain, separators=(",", ":"), sort_keys=True).encode()


#: the first of these a kind's rows have is their event time (as ``alerts.rules`` reads it)
TIME_COLUMNS = ("window_end", "event_time", "batch_time", "ts", "left_ts")


def _in_time_order(tables: list[pa.Table]) -> list[dict[str, Any]]:
    """The rows of newly committed files in event-time order (stable: ties keep file order).

    A micro-batch writes one file per partition, each in its own order; consumers that evaluate
    rows in arrival order (``netmon alerts``) see time move forward instead of back and forth.
    """
    return [row for _, row in _rows_by_file(tables)]


_FILE_INDEX = "__netmon_file"


def _rows_by_file(tables: list[pa.Table]) -> list[tuple[int, dict[str, Any]]]:
    """(index of the row's table in ``tables``, row) in :func:`_in_time_order`'s order."""
    tagged = [
        t.append_column(_FILE_INDEX, pa.array([i] * t.num_rows, pa.int32()))
        for i, t in enumerate(tables)
        if t.num_rows
    ]
    if not tagged:
        return []
    table = pa.concat_tables(tagged, promote_options="default")
    column = next((c for c in TIME_COLUMNS if c in table.column_names), None)
    if column is not None:
        table = table.take(pc.sort_indices(table, [(column, "ascending", "at_end")]))
    return [(row.pop(_FILE_INDEX), row) for row in table.to_pylist()]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        try:
            return set(json.loads((self._state / f"{kind}.json").read_text()))
        except (FileNotFoundError, ValueError):
            return set()

    def _mark(self, kind: str, done: set[str]) -> None:
        """Replace the kind's mark durably: temporary file, fsync, rename, fsync the directory."""
        self._state.mkdir(parents=True, exist_ok=True)
        tmp = self._state / f"{kind}.json.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(sorted(done)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state / f"{kind}.json")
        _fsync_dir(self._state)

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
                    security=security,
                )
            self._producer = KafkaProducer(
                bootstrap_servers=self.cfg.kafka.bootstrap,
                acks="all",
                linger_ms=20,
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
        headers = [("netmon.kind", kind.encode()), ("netmon.result-version", b"1")]
        ok = set(range(len(tables)))
        sends: list[tuple[int, Any]] = []
        first_error: BaseException | None = None
        for i, row in _rows_by_file(tables):
            if i not in ok:
                continue  # the file is retried whole anyway
            key = str(row.get("query") or kind).encode()
            try:
                sends.append((i, producer.send(topic, row_to_json(row), key=key, headers=headers)))
            except KafkaTimeoutError:
                raise  # blocked: the broker is away, retry everything next poll
            except Exception as exc:  # noqa: BLE001 - this row cannot be sent: its file waits
                ok.discard(i)
                first_error = first_error or exc
        producer.flush(timeout=30)
        for i, future in sends:
            if not future.succeeded():
                ok.discard(i)
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
