"""Replay a capture file into Kafka: read, decode, shift time, filter, pace, produce, summarise.

``netmon replay`` calls :func:`replay`. Records come from the fast reader
(:func:`ingest.read_records`, Arrow batches in file order) and leave as ``packets-csv`` messages
through :class:`ingest.producer.PacketProducer`. Modes (:class:`ReplayOptions`):

- as fast as possible (default);
- ``speed``: the capture's own pacing scaled (``1``: original timing, ``10``: ten times faster);
- ``pps``: a fixed rate of records per second;
- ``loop``: replay the file N times; loop *k* shifts timestamps by *k* spans, a span being
  ``max(ts) - min(ts)`` plus one mean inter-arrival time, so event time keeps increasing;
- ``rebase_time``: shift every timestamp so that the first packet is "now"; ``start_ns``: so that
  it is at a given time (several captures replayed one after another on one time line);
- ``limit``: stop after N records produced; ``filter``: keep only records matching an
  :mod:`netmon.filters` expression.

Every record sent is counted, and counted again when the broker acknowledges it; the summary
(:class:`ReplaySummary`) puts the reader's counts (frames read, records decoded, skipped by reason)
beside the producer's. Ctrl-C or SIGTERM stop reading, flush and close the producer, and return the
summary with ``interrupted=True``.

Every replay has a run id (``<start time in ns>-<6 hex digits>``), and each of its data messages
carries it (header ``netmon.replay``) with the index of its first record among the records the run
produces (``netmon.seq``). A replay the broker failed under (its first undelivered message ends
it: ``broker_error``) or that was interrupted can be continued with ``resume=RUN_ID`` and the same
file and options: the continuation reads the topic from the run's start time, sends only the
records none of the run's messages holds, and checks the event time of every message it finds
against the record it would have sent there.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.errors import CaptureError
from ingest.pacing import Pacer
from ingest.producer import (
    HEADER_REPLAY,
    HEADER_SEQ,
    BrokerUnavailable,
    PacketProducer,
    sigterm_as_interrupt,
)
from ingest.progress import ProgressLine, replay_line
from netmon.filters import PacketFilter, parse_filter
from netmon.records import ARROW_SCHEMA

__all__ = [
    "ReplayOptions",
    "ReplayProgress",
    "ReplaySummary",
    "iso_ns",
    "replay",
    "run_start_ns",
    "shift_ts",
]

log = logging.getLogger(__name__)

_TS_TYPE = ARROW_SCHEMA.field("ts").type
_RUN_ID = re.compile(r"(\d{1,19})-[0-9a-f]{6}")
#: a resumed run reads the topic from this long before the run's start (producer clock skew)
_RESUME_SLACK_MS = 60_000


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How to replay (the ``netmon replay`` options). Defaults: once, as fast as possible."""

    speed: float | None = None
    pps: float | None = None
    loop: int = 1
    rebase_time: bool = False
    #: shift every timestamp so that the first packet is at this time (ns since the epoch)
    start_ns: int | None = None
    limit: int | None = None
    filter: str | None = None
    iface: str | None = None
    records_per_message: int = 1000
    linger_ms: int = 20
    compression: str | None = "lz4"
    batch_size: int = 65536
    #: at the end, send a watermark control message this many seconds of event time past the
    #: last record (:meth:`PacketProducer.send_watermark`), so the pipeline closes the last windows
    close_windows_s: float | None = None
    #: continue the run with this id (printed by a failed or interrupted replay): send only the
    #: records none of its messages in the topic holds
    resume: str | None = None

    def __post_init__(self) -> None:
        if self.speed is not None and self.pps is not None:
            raise ValueError("--speed and --pps are exclusive: choose one pacing")
        if self.speed is not None and not self.speed > 0:
            raise ValueError(f"--speed must be > 0, got {self.speed}")
        if self.pps is not None and not self.pps > 0:
            raise ValueError(f"--pps must be > 0, got {self.pps}")
        if self.rebase_time and self.start_ns is not None:
            raise ValueError("--rebase-time and --start-at are exclusive: choose one time base")
        if self.loop < 1:
            raise ValueError(f"--loop must be >= 1, got {self.loop}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"--limit must be >= 0, got {self.limit}")
        if self.records_per_message < 1:
            raise ValueError(f"records_per_message must be >= 1, got {self.records_per_message}")
        if self.close_windows_s is not None and self.close_windows_s < 0:
            raise ValueError(f"close_windows_s must be >= 0, got {self.close_windows_s}")
        if self.resume is not None and not _RUN_ID.fullmatch(self.resume):
            raise ValueError(
                f"--resume {self.resume!r} is not a replay run id (<start ns>-<6 hex digits>, "
                "as a failed or interrupted replay prints it)"
            )


@dataclass
class ReplaySummary:
    """What a replay read, decoded, skipped, filtered out, produced and had acknowledged."""

    file: str
    topic: str
    #: this run's id (a resumed run keeps the id of the run it continues)
    run_id: str = ""
    read: int = 0  #: frames read from the file (all loops)
    decoded: int = 0  #: records decoded (all loops)
    skipped: dict[str, int] = field(default_factory=dict)  #: frames that are not records, by reason
    non_first_fragments: int = 0
    ts_backwards: int = 0
    filtered_out: int = 0
    produced: int = 0  #: records handed to the producer
    #: records a resumed run found in the topic (sent by the run it continues), not sent again
    already_present: int = 0
    acknowledged: int = 0  #: records the broker acknowledged
    failed: int = 0  #: records whose delivery failed
    messages: int = 0  #: Kafka messages sent, control messages included
    control_messages: int = 0  #: watermark control messages sent at the end
    bytes: int = 0  #: message value bytes (before compression)
    elapsed_s: float = 0.0
    rate_pps: float = 0.0  #: produced / elapsed
    first_ts: str | None = None  #: event time of the first record produced (ISO 8601, ns)
    last_ts: str | None = None  #: event time of the last record produced
    loops: int = 0  #: loops completed
    interrupted: bool = False
    #: a fatal read error after some records were produced (every earlier record was still sent)
    error: str | None = None
    #: the broker stopped taking records (died, or refused one): the replay stopped there; what
    #: was acknowledged is in ``acknowledged``, and ``resume=run_id`` continues it
    broker_error: str | None = None
    compression: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The human-readable summary."""
        skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(self.skipped.items())) or "none"
        out = [
            f"file          {self.file}",
            f"read          {self.read:,} frames, {self.decoded:,} records decoded",
            f"skipped       {skipped}",
            f"filtered out  {self.filtered_out:,}",
            f"produced      {self.produced:,} records in {self.messages:,} messages "
            f"({self.bytes / 1e6:.1f} MB, {self.compression or 'no'} compression) to {self.topic}",
            f"acknowledged  {self.acknowledged:,}" + (f"  FAILED {self.failed:,}" if self.failed else ""),
            f"run id        {self.run_id}",
            f"elapsed       {self.elapsed_s:.2f} s, {self.rate_pps:,.0f} records/s",
            f"event time    {self.first_ts} .. {self.last_ts}",
        ]
        if self.non_first_fragments or self.ts_backwards:
            out.append(
                f"notes         {self.non_first_fragments:,} non-first fragments (no ports), "
                f"{self.ts_backwards:,} timestamps going backwards (kept)"
            )
        if self.already_present:
            out.append(f"resumed       {self.already_present:,} records already in the topic, not sent again")
        if self.loops > 1:
            out.append(f"loops         {self.loops}")
        if self.interrupted:
            out.append("interrupted   yes (flushed and closed)")
        if self.error:
            out.append(f"error         {self.error}")
        if self.broker_error:
            out.append(f"broker error  {self.broker_error}")
        out.extend(f"warning       {w}" for w in self.warnings)
        return out


@dataclass(frozen=True)
class ReplayProgress:
    """A progress snapshot handed to a ``progress`` callable."""

    packets: int  #: records produced so far
    acknowledged: int
    bytes_read: int
    total_bytes: int | None
    elapsed_s: float
    fraction: float | None


def iso_ns(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as ISO 8601 with 9 fractional digits (UTC).

    >>> iso_ns(1_700_000_000_123_456_789)
    '2023-11-14T22:13:20.123456789+00:00'
    """
    if ns is None:
        return None
    sec, frac = divmod(int(ns), 1_000_000_000)
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}+00:00"


def shift_ts(batch: pa.RecordBatch, shift_ns: int) -> pa.RecordBatch:
    """``batch`` with ``shift_ns`` added to every timestamp (returned unchanged for 0)."""
    if shift_ns == 0:
        return batch
    ts = np.asarray(batch.column(0).cast(pa.int64()).to_numpy(zero_copy_only=False)) + np.int64(shift_ns)
    return batch.set_column(0, ARROW_SCHEMA.field("ts"), pa.array(ts, pa.int64()).cast(_TS_TYPE))


def _ts_ns(batch: pa.RecordBatch) -> np.ndarray:
    return np.asarray(batch.column(0).cast(pa.int64()).to_numpy(zero_copy_only=False))


def run_start_ns(run_id: str) -> int:
    """The start time (ns since the epoch) a replay run id begins with.

    >>> run_start_ns("1700000000123456789-0a1b2c")
    1700000000123456789
    """
    match = _RUN_ID.fullmatch(run_id)
    if match is None:
        raise ValueError(f"not a replay run id: {run_id!r}")
    return int(match.group(1))


def _present(
    bootstrap: str, topic: str, run_id: str, *, timeout_s: float, security: Mapping[str, Any] | None = None
) -> list[tuple[int, int, int]]:
    """The data messages of run ``run_id`` in ``topic``: (first record index, records, first event time).

    Reads every partition from the run's start time (less a minute) to its current end offset;
    raises :class:`BrokerUnavailable` when a read makes no progress for ``timeout_s``.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    ms = int(timeout_s * 1000)
    run = run_id.encode()
    found: list[tuple[int, int, int]] = []
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="netmon-replay-resume",
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=max(ms, 5000),
            bootstrap_timeout_ms=ms,
            **(security or {}),
        )
    except (KafkaError, OSError) as exc:
        raise BrokerUnavailable(f"Kafka broker at {bootstrap} unavailable: {exc}") from None
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not partitions:
            return []
        since = max(0, run_start_ns(run_id) // 1_000_000 - _RESUME_SLACK_MS)
        starts = consumer.offsets_for_times(dict.fromkeys(partitions, since), timeout_ms=ms)
        ends = consumer.end_offsets(partitions, timeout_ms=ms)
        todo = {
            tp: ends[tp] for tp in partitions if starts.get(tp) is not None and starts[tp].offset < ends[tp]
        }
        if not todo:
            return []
        consumer.assign(list(todo))
        for tp in todo:
            consumer.seek(tp, starts[tp].offset)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end for tp, end in todo.items()):
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"Kafka broker at {bootstrap}: reading {topic} for run {run_id} made no progress "
                    f"within {timeout_s:g}s"
                )
            for tp, records in consumer.poll(timeout_ms=500).items():
                deadline = time.monotonic() + timeout_s
                for r in records:
                    if r.offset >= todo[tp]:
                        continue
                    headers = dict(r.headers or [])
                    if headers.get(HEADER_REPLAY) != run:
                        continue
                    count = int(headers.get("netmon.records", b"0"))
                    if count:
                        first_ts = int(r.value.split(b",", 1)[0])
                        found.append((int(headers[HEADER_SEQ]), count, first_ts))
    except KafkaError as exc:
        raise BrokerUnavailable(f"Kafka broker at {bootstrap} unavailable: {exc}") from None
    finally:
        consumer.close()
    return found


def _read_records(path: str | Path, *, batch_size: int, iface: str | None) -> Any:
    from ingest.readers import read_records

    return read_records(path, batch_size=batch_size, iface=iface)


class _Totals:
    """Reader summaries added up over the loops."""

    def __init__(self) -> None:
        self.read = self.decoded = self.non_first = self.backwards = 0
        self.bytes_done = 0
        self.skipped: dict[str, int] = {}
        self.warnings: list[str] = []

    def add(self, reader: Any) -> None:
        summary = reader.summary
        self.bytes_done += reader.file_position
        self.read += summary.frames
        self.decoded += summary.records
        self.non_first += summary.non_first_fragments
        self.backwards += summary.ts_backwards
        for reason, count in summary.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + count
        for warning in summary.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)


def replay(
    path: str | Path,
    *,
    bootstrap: str,
    topic: str,
    options: ReplayOptions | None = None,
    partitions: int = 2,
    progress: bool | Callable[[ReplayProgress], None] = True,
    timeout_s: float = 10.0,
    producer: PacketProducer | None = None,
    delivery_timeout_s: float = 60.0,
    security: Mapping[str, Any] | None = None,
    replication: int = 1,
    min_insync_replicas: int | None = None,
) -> ReplaySummary:
    """Replay the capture at ``path`` into ``topic`` and return the summary.

    Parameters
    ----------
    path
        A pcap / pcapng file (optionally gzip-compressed).
    bootstrap, topic, partitions
        Where to produce; the topic is created with ``partitions`` when missing.
    options
        :class:`ReplayOptions` (defaults: once, as fast as possible, no filter).
    progress
        ``True``: a progress bar on stderr; ``False``: nothing; a callable: called with a
        :class:`ReplayProgress` after every record batch.
    timeout_s
        Bound on reaching the broker (:class:`ingest.producer.BrokerUnavailable` beyond it).
    producer
        An already connected producer to use (it is flushed, not closed).
    delivery_timeout_s
        Bound on delivering one message; the first message not delivered ends the replay
        (``summary.broker_error``, nothing raised).
    security
        kafka-python security options (:func:`netmon.kafka_security.client_options`).
    replication, min_insync_replicas
        For the topic when it is created (:class:`ingest.producer.PacketProducer`).

    Raises
    ------
    ingest.CaptureError
        The file is not a readable capture (raised before connecting to the broker).
    netmon.filters.FilterError
        The filter expression is malformed (raised before reading anything).
    ingest.producer.BrokerUnavailable
        The broker did not answer within ``timeout_s`` at the start (later failures end the replay
        with ``summary.broker_error`` instead).
    ValueError
        ``options.resume`` names a run whose records differ from this file and these options.
    """
    opts = options or ReplayOptions()
    packet_filter = parse_filter(opts.filter) if opts.filter else None
    began = time.monotonic()
    run_id = opts.resume or f"{time.time_ns()}-{secrets.token_hex(3)}"
    summary = ReplaySummary(file=str(path), topic=topic, run_id=run_id)
    totals = _Totals()
    # Open the file and decode its first batch before connecting: bad input fails fast (exit 2).
    reader = _read_records(path, batch_size=opts.batch_size, iface=opts.iface)
    batches = iter(reader)
    first = next(batches, None)
    total_bytes = reader.file_size * opts.loop
    own_producer = producer is None
    if producer is None:
        try:
            producer = PacketProducer(
                bootstrap,
                topic,
                compression=opts.compression,
                linger_ms=opts.linger_ms,
                partitions=partitions,
                replication=replication,
                min_insync_replicas=min_insync_replicas,
                timeout_s=timeout_s,
                delivery_timeout_s=delivery_timeout_s,
                security=security,
            )
        except BaseException:
            _close(reader)
            raise
    summary.compression = producer.compression
    try:
        present = (
            []
            if opts.resume is None
            else _present(bootstrap, topic, run_id, timeout_s=timeout_s, security=security)
        )
    except BaseException:
        _close(reader)
        if own_producer:
            producer.close(timeout_s=0)
        raise
    bar = ProgressLine(enabled=progress is True)
    run = _Run(opts, producer, packet_filter, summary, run_id, present)

    def report(force: bool = False) -> None:
        if progress is False or not (force or bar.due() or callable(progress)):
            return
        done = totals.bytes_done + (reader.file_position if reader is not None else 0)
        fraction = min(1.0, done / total_bytes) if total_bytes else None
        if opts.limit:
            fraction = max(fraction or 0.0, run.position / opts.limit)
        elapsed = time.monotonic() - began
        if callable(progress):
            progress(
                ReplayProgress(
                    summary.produced,
                    producer.counts.acked_records,
                    done,
                    total_bytes or None,
                    elapsed,
                    fraction,
                )
            )
        else:
            bar.show(
                replay_line(packets=summary.produced, elapsed_s=elapsed, bytes_read=done, fraction=fraction),
                force=force,
            )

    try:
        with sigterm_as_interrupt():
            for loop in range(opts.loop):
                if loop > 0:
                    reader = _read_records(path, batch_size=opts.batch_size, iface=opts.iface)
                    batches = iter(reader)
                    first = next(batches, None)
                source: Iterable[pa.RecordBatch] = _chain(first, batches)
                done = run.loop(loop, source, report)
                totals.add(reader)
                _close(reader)
                reader = None
                summary.loops = loop + 1
                if done:
                    break
            if opts.close_windows_s is not None and run.max_ns is not None:
                # Only once every record is in: a record behind the watermark would be late.
                producer.flush()
                producer.raise_if_failed()
                producer.send_watermark(run.max_ns + int(opts.close_windows_s * 1e9))
    except KeyboardInterrupt:
        summary.interrupted = True
        log.warning("replay interrupted: flushing and closing the producer")
    except CaptureError as exc:
        summary.error = str(exc)
    except BrokerUnavailable as exc:  # DeliveryFailed included: stop at the first lost message
        summary.broker_error = str(exc)
    finally:
        if reader is not None:
            totals.add(reader)
            _close(reader)
        try:
            if own_producer:
                grace = 10.0 if summary.interrupted else timeout_s if summary.broker_error else None
                producer.close(timeout_s=grace)
            else:
                producer.flush()
            producer.raise_if_failed()
        except BrokerUnavailable as exc:
            # What is still in flight stays unacknowledged: counted, and left to a resumed run.
            summary.broker_error = summary.broker_error or str(exc)
        finally:
            _finish(summary, totals, producer, began)
            if progress is True:
                bar.close(
                    replay_line(
                        packets=summary.produced,
                        elapsed_s=summary.elapsed_s,
                        bytes_read=totals.bytes_done,
                        fraction=None if summary.interrupted or summary.broker_error else 1.0,
                    )
                )
    return summary


def _chain(first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
    yield from rest


def _close(reader: Any) -> None:
    close = getattr(reader, "close", None)
    if callable(close):
        close()


def _finish(summary: ReplaySummary, totals: _Totals, producer: PacketProducer, began: float) -> None:
    counts = producer.counts
    summary.read, summary.decoded = totals.read, totals.decoded
    summary.skipped = dict(sorted(totals.skipped.items()))
    summary.non_first_fragments, summary.ts_backwards = totals.non_first, totals.backwards
    summary.warnings = totals.warnings
    summary.acknowledged, summary.failed = counts.acked_records, counts.failed_records
    summary.messages, summary.bytes = counts.messages, counts.bytes
    summary.control_messages = counts.control_messages
    summary.elapsed_s = round(time.monotonic() - began, 3)
    summary.rate_pps = round(summary.produced / summary.elapsed_s, 1) if summary.elapsed_s > 0 else 0.0
    if counts.failed_records and producer.first_error is not None:
        summary.warnings.append(f"{counts.failed_records} records not delivered: {producer.first_error}")


class _Run:
    """The per-batch work of one replay: time shift, filter, limit, pacing, producing."""

    def __init__(
        self,
        opts: ReplayOptions,
        producer: PacketProducer,
        packet_filter: PacketFilter | None,
        summary: ReplaySummary,
        run_id: str,
        present: list[tuple[int, int, int]],
    ) -> None:
        self.opts = opts
        self.producer = producer
        self.filter = packet_filter
        self.summary = summary
        self.run_id = run_id
        #: the run's time base: --rebase-time puts the first packet at the run's start
        self.started_ns = run_start_ns(run_id)
        self.pacer = Pacer(speed=opts.speed, pps=opts.pps)
        #: index of the next record of the run's sequence (records after the filter, all loops)
        self.position = 0
        # Messages of this run already in the topic (resume): first record index, records, first ts.
        rows = np.array(sorted(present), dtype=np.int64).reshape(-1, 3)
        self.present_starts, self.present_ends = rows[:, 0], rows[:, 0] + rows[:, 1]
        self.present_ts = rows[:, 2]
        self.rebase_ns: int | None = None
        # The capture's extent, learnt during the first loop, sets the loop shift.
        self.min_ts: int | None = None
        self.max_ts: int | None = None
        self.count = 0
        self.span_ns = 0
        self.first_ns: int | None = None
        self.max_ns: int | None = None  #: latest event time produced

    def loop(self, k: int, batches: Iterable[pa.RecordBatch], report: Callable[..., None]) -> bool:
        """Replay one pass; return True when the limit is reached."""
        if k == 1:
            self.span_ns = self._span()
        for batch in batches:
            if batch.num_rows == 0:
                continue
            ts = _ts_ns(batch)
            if k == 0:
                self._extent(ts)
            if self.rebase_ns is None:
                start = self.started_ns if self.opts.rebase_time else self.opts.start_ns
                self.rebase_ns = 0 if start is None else start - int(ts[0])
            batch = shift_ts(batch, self.rebase_ns + k * self.span_ns)
            if self.filter is not None:
                kept = self.filter.apply(batch)
                self.summary.filtered_out += batch.num_rows - kept.num_rows
                batch = kept
            if self.opts.limit is not None:
                room = self.opts.limit - self.position
                if batch.num_rows > room:
                    batch = batch.slice(0, room)
            if batch.num_rows:
                self._emit(batch)
            report()
            if self.opts.limit is not None and self.position >= self.opts.limit:
                return True
        return False

    def _extent(self, ts: np.ndarray) -> None:
        lo, hi = int(ts.min()), int(ts.max())
        self.min_ts = lo if self.min_ts is None else min(self.min_ts, lo)
        self.max_ts = hi if self.max_ts is None else max(self.max_ts, hi)
        self.count += len(ts)

    def _span(self) -> int:
        """Loop shift: the capture's time extent plus one mean inter-arrival (1 ms for one packet)."""
        if self.min_ts is None or self.max_ts is None:
            return 0
        extent = self.max_ts - self.min_ts
        mean_gap = extent // (self.count - 1) if self.count > 1 else 0
        return extent + max(mean_gap, 1_000_000 if extent == 0 else 1)

    def _emit(self, batch: pa.RecordBatch) -> None:
        """Send the records of ``batch`` (the next of the run's sequence) the topic lacks."""
        first, n = self.position, batch.num_rows
        ts = _ts_ns(batch)
        latest = int(ts.max())
        self.max_ns = latest if self.max_ns is None else max(self.max_ns, latest)
        starts, ends = self.present_starts, self.present_ends
        overlap: np.ndarray = np.nonzero((starts < first + n) & (ends > first))[0]
        if len(overlap) == 0:
            self._send(batch, first)
            self.position += n
            return
        keep = np.ones(n, dtype=bool)
        for i in overlap:
            start, end = int(starts[i]), int(ends[i])
            keep[max(start - first, 0) : min(end - first, n)] = False
            if first <= start < first + n and int(ts[start - first]) != int(self.present_ts[i]):
                raise ValueError(
                    f"--resume {self.run_id}: record {start} of the topic has event time "
                    f"{iso_ns(int(self.present_ts[i]))}, this replay's has {iso_ns(int(ts[start - first]))}: "
                    "resume with the same file and options as the run it continues"
                )
        self.summary.already_present += n - int(keep.sum())
        edges = np.diff(np.concatenate(([0], keep.astype(np.int8), [0])))
        for a, b in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0], strict=True):
            self._send(batch.slice(int(a), int(b - a)), first + int(a))
        self.position += n

    def _send(self, batch: pa.RecordBatch, seq: int) -> None:
        """Send ``batch``, whose first record is record ``seq`` of the run; stop at a lost message."""
        producer, rpm, run = self.producer, self.opts.records_per_message, self.run_id
        if not self.pacer.paced:
            producer.raise_if_failed()
            producer.send_batch(batch, rpm, run=run, seq=seq)
            self._sent(batch)
            return
        for a, b, offset in self.pacer.chunks(_ts_ns(batch), rpm):
            self.pacer.wait(offset)
            producer.raise_if_failed()
            chunk = batch.slice(a, b - a)
            producer.send_batch(chunk, b - a, run=run, seq=seq + a)
            self._sent(chunk)

    def _sent(self, batch: pa.RecordBatch) -> None:
        """Account for records handed to the producer."""
        ts_col = batch.column(0)
        if self.first_ns is None:
            self.first_ns = ts_col[0].value
            self.summary.first_ts = iso_ns(self.first_ns)
        self.summary.last_ts = iso_ns(ts_col[-1].value)
        self.summary.produced += batch.num_rows
