"""Publish committed results to Kafka: one JSON message per result row on ``netmon.<kind>``.

Spark's file sink is the system of record (exactly once, checkpointed). The driver republishes each
newly committed Parquet file once, so consumers such as ``netmon alerts`` can subscribe instead of
polling files, and no second streaming query recomputes the results. Delivery is at least once: a
file is marked published after the producer's flush; a crash in between republishes it, so
consumers dedupe on the row's identity (kind, query, window, key/group).

Message layout (documented in ``docs/results.md``):

- value: the row as a JSON object, timestamps as ISO-8601 UTC strings, binary columns omitted;
- key: the row's ``query`` (or the kind), so one query's rows stay ordered on one partition;
- headers: ``netmon.kind`` = the kind, ``netmon.result-version`` = ``1``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from netmon.config import Config
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
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return []
    table = pa.concat_tables(tables, promote_options="default")
    column = next((c for c in TIME_COLUMNS if c in table.column_names), None)
    if column is not None:
        table = table.take(pc.sort_indices(table, [(column, "ascending", "at_end")]))
    return table.to_pylist()


class ResultPublisher:
    """Tracks which committed result files of each kind went to Kafka, and sends the new ones."""

    def __init__(self, cfg: Config, kinds: tuple[str, ...], *, producer: Any | None = None) -> None:
        self.cfg = cfg
        self.kinds = kinds
        self._producer = producer
        self._state = checkpoint_dir(cfg, "publish")
        self.published_rows = 0

    def _files(self, kind: str) -> list[Path]:
        return result_files(results_dir(self.cfg, kind))

    def _done(self, kind: str) -> set[str]:
        try:
            return set(json.loads((self._state / f"{kind}.json").read_text()))
        except (FileNotFoundError, ValueError):
            return set()

    def _mark(self, kind: str, done: set[str]) -> None:
        self._state.mkdir(parents=True, exist_ok=True)
        tmp = self._state / f"{kind}.json.tmp"
        tmp.write_text(json.dumps(sorted(done)))
        tmp.replace(self._state / f"{kind}.json")

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer

            from netmon.kafka_admin import ensure_topic

            for kind in self.kinds:
                ensure_topic(
                    self.cfg.kafka.bootstrap, result_topic(self.cfg, kind), self.cfg.kafka.partitions
                )
            self._producer = KafkaProducer(
                bootstrap_servers=self.cfg.kafka.bootstrap,
                acks="all",
                linger_ms=20,
                client_id="netmon-results",
            )
        return self._producer

    def publish(self) -> int:
        """Send every committed, not yet published result file; return the number of rows sent."""
        sent = 0
        for kind in self.kinds:
            done = self._done(kind)
            new = [f for f in self._files(kind) if f.name not in done]
            if not new:
                continue
            try:
                producer = self._ensure_producer()
                headers = [("netmon.kind", kind.encode()), ("netmon.result-version", b"1")]
                for row in _in_time_order([pq.read_table(path) for path in new]):
                    key = str(row.get("query") or kind).encode()
                    producer.send(result_topic(self.cfg, kind), row_to_json(row), key=key, headers=headers)
                    sent += 1
                producer.flush(timeout=30)
            except Exception as exc:  # noqa: BLE001 - Kafka down: keep results, retry next poll
                log.warning("publishing results failed; will retry", extra={"kind": kind, "error": str(exc)})
                continue
            self._mark(kind, done | {f.name for f in new})
        self.published_rows += sent
        return sent

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None
