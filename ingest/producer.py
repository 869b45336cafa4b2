"""The Kafka producer of packet-header messages (kafka-python 3.x).

:class:`PacketProducer` sends ``packets-csv`` messages (:mod:`ingest.wire`) with ``acks=all``,
idempotence and unlimited retries inside a bounded delivery timeout, producer-side compression
(lz4, else zstd, else gzip: whichever codec library is installed), and size + linger batching.
It creates the topic when missing, counts what it sent and what the broker acknowledged (delivery
callbacks), bounds the messages in flight so memory stays bounded, and never hangs: an unreachable
broker raises :class:`BrokerUnavailable` within ``timeout_s``.

:func:`sigterm_as_interrupt` turns SIGTERM into ``KeyboardInterrupt`` so that a ``try/finally``
around a producing loop flushes and closes on Ctrl-C and SIGTERM alike.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from ingest.wire import encode_messages, watermark_message

__all__ = [
    "BrokerUnavailable",
    "COMPRESSION_FALLBACK",
    "DeliveryFailed",
    "HEADER_REPLAY",
    "HEADER_SEQ",
    "PacketProducer",
    "ProducerCounts",
    "pick_compression",
    "sigterm_as_interrupt",
]

log = logging.getLogger(__name__)

_CRC_WARNED = False

#: Codecs tried in this order when the requested one's library is missing.
COMPRESSION_FALLBACK = ("lz4", "zstd", "gzip")


#: Optional header of a replay's data messages: the replay's run id (``ingest.replay``).
HEADER_REPLAY = "netmon.replay"
#: Optional header beside :data:`HEADER_REPLAY`: the index of the message's first record among the
#: records that run produces (decimal text), so a resumed run can tell what is already there.
HEADER_SEQ = "netmon.seq"


class BrokerUnavailable(RuntimeError):
    """The Kafka broker did not answer in time (at start, or while delivering)."""


class DeliveryFailed(BrokerUnavailable):
    """A message sent earlier was not delivered (the broker died, or refused it)."""


def _codec_available(name: str) -> bool:
    from kafka import codec

    check = {"lz4": codec.has_lz4, "zstd": codec.has_zstd, "gzip": codec.has_gzip, "snappy": codec.has_snappy}
    return name in check and bool(check[name]())


def pick_compression(requested: str | None) -> str | None:
    """The codec to use for ``requested``: itself if its library is installed, else the next one.

    ``None``, ``""`` or ``"none"`` mean no compression.

    >>> pick_compression("none") is None
    True
    >>> pick_compression("gzip")
    'gzip'
    """
    if requested is None or requested.lower() in ("", "none"):
        return None
    name = requested.lower()
    if name not in ("lz4", "zstd", "gzip", "snappy"):
        raise ValueError(f"unknown compression {requested!r} (choose lz4, zstd, gzip, snappy or none)")
    if _codec_available(name):
        return name
    for fallback in COMPRESSION_FALLBACK:
        if _codec_available(fallback):
            log.warning("compression %s unavailable (library missing); using %s", name, fallback)
            return fallback
    return None  # gzip is in the standard library, so this is not reached


@dataclass
class ProducerCounts:
    """What a :class:`PacketProducer` sent and what the broker acknowledged."""

    messages: int = 0  #: messages sent, control messages included
    control_messages: int = 0
    records: int = 0
    bytes: int = 0
    acked_messages: int = 0
    acked_records: int = 0
    failed_messages: int = 0
    failed_records: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class PacketProducer:
    """Send packet-header messages to one topic, counting acknowledgements.

    Parameters
    ----------
    bootstrap
        ``host:port[,host:port...]`` of the Kafka cluster.
    topic
        Topic to produce to; created with ``partitions`` and ``replication`` when missing.
    compression
        ``lz4`` (default), ``zstd``, ``gzip``, ``snappy`` or ``none``; see :func:`pick_compression`.
    linger_ms
        How long the producer waits to fill a batch.
    partitions, replication, min_insync_replicas
        For a topic this producer creates; an existing topic is used as it is. A replication
        factor above the cluster's brokers raises :class:`BrokerUnavailable` naming the topic.
    batch_bytes
        Producer batch size in bytes (several messages share one compressed record batch).
    max_request_bytes
        Largest request the producer sends (the broker's ``message.max.bytes`` bounds it too).
    timeout_s
        Bound on connecting, fetching metadata and blocking in ``send``; beyond it
        :class:`BrokerUnavailable` is raised.
    delivery_timeout_s
        Bound on delivering one message, retries included; ``flush``/``close`` wait at most this.
    max_pending
        Messages in flight (sent, not yet acknowledged) before ``send`` waits for the oldest.
    create_topic
        Create ``topic`` when it does not exist.
    client_id
        Kafka client id.
    security
        The cluster's authentication and TLS options,
        ``netmon.kafka_security.client_options(cfg.kafka)`` (none: PLAINTEXT). A refused TLS
        handshake or SASL login raises :class:`BrokerUnavailable` naming the reason.

    Examples
    --------
    A session against a real broker (not run as a doctest)::

        with PacketProducer("127.0.0.1:9092", "netmon.packets") as producer:
            producer.send_batch(batch, records_per_message=1000)
        assert producer.counts.acked_records == batch.num_rows
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        compression: str | None = "lz4",
        linger_ms: int = 20,
        partitions: int = 2,
        replication: int = 1,
        min_insync_replicas: int | None = None,
        batch_bytes: int = 1_048_576,
        max_request_bytes: int = 1_048_576,
        timeout_s: float = 10.0,
        delivery_timeout_s: float = 60.0,
        max_pending: int = 256,
        create_topic: bool = True,
        client_id: str = "netmon-ingest",
        security: Mapping[str, Any] | None = None,
    ) -> None:
        if partitions < 1 or replication < 1:
            raise ValueError(f"partitions and replication must be >= 1, got {partitions}, {replication}")
        if timeout_s <= 0 or delivery_timeout_s <= 0:
            raise ValueError("timeout_s and delivery_timeout_s must be > 0")
        self.bootstrap = bootstrap
        self.topic = topic
        self.compression = pick_compression(compression)
        self.linger_ms = linger_ms
        self.partitions = partitions
        self.replication = replication
        self.min_insync_replicas = min_insync_replicas
        self.batch_bytes = batch_bytes
        self.max_request_bytes = max_request_bytes
        self.timeout_s = timeout_s
        self._request_timeout_ms = max(int(timeout_s * 1000), 5000)
        # kafka-python requires delivery >= linger + request timeout: a shorter one is raised to that.
        self.delivery_timeout_s = max(delivery_timeout_s, (linger_ms + self._request_timeout_ms) / 1000)
        self.max_pending = max_pending
        self._security = dict(security or {})  # holds the SASL password: never logged or shown
        self.counts = ProducerCounts()
        self._lock = threading.Lock()
        self._pending: deque[Any] = deque()
        self._first_error: BaseException | None = None
        self._closed = False
        if create_topic:
            self.ensure_topic()
        self._producer = self._connect(client_id)

    # --- setup -------------------------------------------------------------------------------

    def _unavailable(self, what: str, exc: BaseException | None = None) -> BrokerUnavailable:
        detail = f" ({exc})" if exc is not None and str(exc) else ""
        return BrokerUnavailable(
            f"Kafka broker at {self.bootstrap} unavailable: {what} within {self.timeout_s:g}s{detail}"
        )

    def ensure_topic(self) -> bool:
        """Create the topic if it does not exist; return whether this call created it."""
        from kafka.errors import KafkaError, KafkaTimeoutError

        from netmon.kafka_admin import KafkaSecurityError, TopicReplicationError, ensure_topic

        try:
            created = ensure_topic(
                self.bootstrap,
                self.topic,
                self.partitions,
                self.replication,
                timeout_s=self.timeout_s,
                security=self._security,
                min_insync_replicas=self.min_insync_replicas,
            )
        except (KafkaSecurityError, TopicReplicationError) as exc:
            raise BrokerUnavailable(str(exc.args[0])) from None
        except (KafkaTimeoutError, OSError) as exc:
            raise self._unavailable(f"topic {self.topic!r} not created", exc) from None
        except KafkaError as exc:
            raise BrokerUnavailable(
                f"cannot create topic {self.topic!r} on {self.bootstrap}: {exc}"
            ) from None
        if created:
            log.info("created topic", extra={"topic": self.topic, "partitions": self.partitions})
        return created

    def _connect(self, client_id: str) -> Any:
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError
        from kafka.record import util

        from netmon.kafka_admin import security_failure

        global _CRC_WARNED
        if util.crc32c_c is None and not _CRC_WARNED:
            _CRC_WARNED = True
            log.warning(
                "the crc32c package is not installed: kafka-python checksums record batches in pure "
                "Python (~7 MB/s), which caps the replay rate; pip install crc32c"
            )

        ms = int(self.timeout_s * 1000)
        try:
            return KafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=client_id,
                acks="all",
                enable_idempotence=True,
                retries=2**31 - 1,
                compression_type=self.compression,
                linger_ms=self.linger_ms,
                batch_size=self.batch_bytes,
                max_request_size=self.max_request_bytes,
                bootstrap_timeout_ms=ms,
                max_block_ms=ms,
                request_timeout_ms=self._request_timeout_ms,
                delivery_timeout_ms=int(self.delivery_timeout_s * 1000),
                **self._security,
            )
        except (KafkaTimeoutError, OSError) as exc:
            refused = security_failure(self.bootstrap, self._security, self.timeout_s)
            if refused is not None:
                raise BrokerUnavailable(str(refused.args[0])) from None
            raise self._unavailable("no answer to the producer's bootstrap", exc) from None

    # --- sending -----------------------------------------------------------------------------

    def _on_ack(self, records: int, _metadata: Any) -> None:
        with self._lock:
            self.counts.acked_messages += 1
            self.counts.acked_records += records

    def _on_error(self, records: int, exc: BaseException) -> None:
        with self._lock:
            self.counts.failed_messages += 1
            self.counts.failed_records += records
            first = self._first_error is None
            if first:
                self._first_error = exc
        # The first failure is the caller's to report (raise_if_failed, counts): log, not shout.
        log.log(
            logging.INFO if first else logging.DEBUG,
            "message not delivered",
            extra={"records": records, "error": repr(exc)},
        )

    def send(self, value: bytes, headers: list[tuple[str, bytes]], records: int) -> None:
        """Send one message holding ``records`` records (blocks while too many are in flight)."""
        from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

        if self._closed:
            raise RuntimeError("PacketProducer is closed")
        while len(self._pending) >= self.max_pending:
            self._wait_oldest()
        try:
            future = self._producer.send(self.topic, value=value, headers=headers)
        except KafkaTimeoutError as exc:
            raise self._unavailable("send blocked (no metadata or buffer)", exc) from None
        except MessageSizeTooLargeError as exc:
            raise ValueError(
                f"a message of {len(value)} bytes is too large ({exc}); lower records_per_message"
            ) from None
        self.counts.messages += 1
        self.counts.records += records
        self.counts.bytes += len(value)
        future.add_callback(self._on_ack, records)
        future.add_errback(self._on_error, records)
        self._pending.append(future)

    def send_batch(
        self, batch: pa.RecordBatch, records_per_message: int, *, run: str | None = None, seq: int = 0
    ) -> int:
        """Encode ``batch`` (:func:`ingest.wire.encode_messages`) and send it; return the messages sent.

        With ``run``, every message also carries the headers :data:`HEADER_REPLAY` (``run``) and
        :data:`HEADER_SEQ` (``seq`` plus the records of ``batch`` before the message's first).
        """
        sent = 0
        for value, headers in encode_messages(batch, records_per_message):
            records = int(headers[2][1])
            if run is not None:
                headers = [*headers, (HEADER_REPLAY, run.encode()), (HEADER_SEQ, str(seq).encode())]
            self.send(value, headers, records)
            seq += records
            sent += 1
        return sent

    def send_watermark(self, event_ns: int) -> int:
        """Send a watermark control message (:func:`ingest.wire.watermark_message`) to every
        partition of the topic, so the pipeline's watermark reaches ``event_ns`` whichever partition
        it reads last; return the messages sent. They count as messages, not records."""
        from kafka.errors import KafkaTimeoutError

        try:
            partitions = sorted(self._producer.partitions_for(self.topic) or [])
        except KafkaTimeoutError as exc:
            raise self._unavailable("no metadata for the topic", exc) from None
        value, headers = watermark_message(event_ns)
        for partition in partitions:
            future = self._producer.send(self.topic, value=value, headers=headers, partition=partition)
            self.counts.messages += 1
            self.counts.control_messages += 1
            future.add_callback(self._on_ack, 0)
            future.add_errback(self._on_error, 0)
            self._pending.append(future)
        return len(partitions)

    def _wait_oldest(self) -> None:
        from kafka.errors import KafkaError, KafkaTimeoutError

        future = self._pending.popleft()
        try:
            future.get(timeout=self.delivery_timeout_s)
        except KafkaTimeoutError as exc:
            raise self._unavailable("no acknowledgement", exc) from None
        except KafkaError:
            pass  # counted by the errback

    def _drop_done(self) -> None:
        while self._pending and self._pending[0].is_done:
            self._pending.popleft()

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged or failed."""
        with self._lock:
            done = self.counts.acked_messages + self.counts.failed_messages
        return self.counts.messages - done

    @property
    def first_error(self) -> BaseException | None:
        """The first delivery failure, if any."""
        return self._first_error

    def raise_if_failed(self) -> None:
        """Raise :class:`DeliveryFailed` if any message sent so far was not delivered."""
        exc = self._first_error
        if exc is None:
            return
        from kafka.errors import KafkaTimeoutError

        if isinstance(exc, KafkaTimeoutError):
            what = f"no acknowledgement within {self.delivery_timeout_s:g}s"
            raise DeliveryFailed(f"Kafka broker at {self.bootstrap} unavailable: {what} ({exc})")
        raise DeliveryFailed(f"Kafka broker at {self.bootstrap} did not take a message: {exc!r}")

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every message sent so far is acknowledged or failed.

        Raises
        ------
        BrokerUnavailable
            When messages are still in flight after ``timeout_s`` (default ``delivery_timeout_s``).
        """
        from kafka.errors import KafkaError, KafkaTimeoutError

        timeout = self.delivery_timeout_s if timeout_s is None else timeout_s
        try:
            self._producer.flush(timeout=timeout)
        except KafkaTimeoutError as exc:
            raise BrokerUnavailable(
                f"Kafka broker at {self.bootstrap}: {self.in_flight} messages not acknowledged "
                f"within {timeout:g}s ({exc})"
            ) from None
        except KafkaError:
            # kafka-python's flush gives up ("Future not done") when a batch the broker refused as
            # too large was split and re-sent: wait for every message's own future instead.
            self._wait_each(timeout)
        self._drop_done()

    def _wait_each(self, timeout_s: float) -> None:
        from kafka.errors import KafkaError, KafkaTimeoutError

        deadline = time.monotonic() + timeout_s
        for future in list(self._pending):
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaTimeoutError as exc:
                raise BrokerUnavailable(
                    f"Kafka broker at {self.bootstrap}: {self.in_flight} messages not acknowledged "
                    f"within {timeout_s:g}s ({exc})"
                ) from None
            except KafkaError as exc:  # counted by the errback, which may still be running
                with self._lock:
                    if self._first_error is None:
                        self._first_error = exc

    def close(self, timeout_s: float | None = None) -> None:
        """Flush and close (idempotent). A broker that stopped answering cannot make this hang.

        Messages still in flight after ``timeout_s`` (default ``delivery_timeout_s``) are abandoned
        (:class:`BrokerUnavailable` is raised after closing); they stay unacknowledged in the counts.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        finally:
            self._force_close(0 if self.in_flight else (timeout_s or self.timeout_s))
            self._pending.clear()

    def _force_close(self, timeout_s: float) -> None:
        """Close kafka-python's producer; with messages still in flight, abandon them."""
        from netmon.kafka_admin import close_producer

        close_producer(self._producer, timeout_s)

    def __enter__(self) -> PacketProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PacketProducer(bootstrap={self.bootstrap!r}, topic={self.topic!r}, "
            f"compression={self.compression!r}, linger_ms={self.linger_ms}, partitions={self.partitions})"
        )


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` in the main thread (as Ctrl-C does).

    Outside the main thread this does nothing (signal handlers can only be set there).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
