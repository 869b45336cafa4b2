"""The packet producer against the project's real Kafka broker: delivery, counts, topic, errors."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid

import pyarrow as pa
import pytest

from ingest import read_records
from ingest.generate import generate
from ingest.producer import (
    HEADER_REPLAY,
    HEADER_SEQ,
    BrokerUnavailable,
    DeliveryFailed,
    PacketProducer,
    pick_compression,
)
from netmon.records import ARROW_SCHEMA
from tests.ingest.kafka_util import consume_all, records_of, sort_records


def topic_name(prefix: str) -> str:
    return f"test.{prefix}.{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    path = tmp_path_factory.mktemp("producer") / "sample.pcap"
    generate(path, packets=5000, seed=3)
    return pa.Table.from_batches(list(read_records(path, batch_size=1500)), schema=ARROW_SCHEMA)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
def test_every_record_delivered_and_acknowledged(kafka_bootstrap: str, sample: pa.Table) -> None:
    topic = topic_name("producer")
    with PacketProducer(kafka_bootstrap, topic, partitions=3, compression="lz4") as producer:
        sent = sum(producer.send_batch(batch, 700) for batch in sample.to_batches())
    counts = producer.counts
    assert counts.records == counts.acked_records == sample.num_rows
    assert (
        counts.messages
        == counts.acked_messages
        == sent
        == sum(-(-b.num_rows // 700) for b in sample.to_batches())
    )
    assert counts.failed_records == 0 and producer.in_flight == 0
    messages = consume_all(kafka_bootstrap, topic)
    assert len(messages) == sent
    assert {m.partition for m in messages} <= {0, 1, 2}
    assert all(int(dict(m.headers)["netmon.records"]) <= 700 for m in messages)
    assert sort_records(records_of(messages)).equals(sort_records(sample))


@pytest.mark.kafka
def test_topic_created_with_the_configured_partitions(kafka_bootstrap: str) -> None:
    from kafka import KafkaConsumer

    topic = topic_name("partitions")
    producer = PacketProducer(kafka_bootstrap, topic, partitions=5)
    assert producer.ensure_topic() is False  # already there: created by the constructor
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2, 3, 4}
    finally:
        consumer.close()


@pytest.mark.kafka
def test_watermark_control_message_reaches_every_partition(kafka_bootstrap: str) -> None:
    topic = topic_name("control")
    with PacketProducer(kafka_bootstrap, topic, partitions=3) as producer:
        assert producer.send_watermark(1_700_000_000_000_000_000) == 3
    assert producer.counts.control_messages == 3 and producer.counts.acked_records == 0
    messages = consume_all(kafka_bootstrap, topic)
    assert sorted(m.partition for m in messages) == [0, 1, 2]
    assert {m.value for m in messages} == {b"1700000000000000000\n"}
    assert all(dict(m.headers)["netmon.control"] == b"watermark" for m in messages)


def test_unreachable_broker_fails_fast_with_a_clear_error() -> None:
    port = free_port()  # nothing listens there
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable) as info:
        PacketProducer(f"127.0.0.1:{port}", "t", timeout_s=1.5)
    assert time.monotonic() - began < 15, "a dead broker must not hang the producer"
    assert str(info.value).startswith(f"Kafka broker at 127.0.0.1:{port} unavailable") and "1.5s" in str(
        info.value
    )


def test_compression_falls_back_when_a_codec_library_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka import codec

    assert pick_compression("lz4") == ("lz4" if codec.has_lz4() else pick_compression("zstd"))
    monkeypatch.setattr(codec, "has_lz4", lambda: False)
    expected = "zstd" if codec.has_zstd() else "gzip"
    assert pick_compression("lz4") == expected
    assert pick_compression("NONE") is None and pick_compression(None) is None
    with pytest.raises(ValueError, match="unknown compression 'brotli'"):
        pick_compression("brotli")


def test_constructor_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="partitions and replication must be >= 1"):
        PacketProducer("127.0.0.1:1", "t", partitions=0)


@pytest.mark.kafka
def test_run_headers_number_the_records_of_every_message(kafka_bootstrap: str, sample: pa.Table) -> None:
    topic = topic_name("seq")
    batch = sample.slice(0, 2500).combine_chunks().to_batches()[0]
    with PacketProducer(kafka_bootstrap, topic, partitions=1) as producer:
        assert producer.send_batch(batch, 1000, run="1700000000000000000-abcdef", seq=7000) == 3
    messages = consume_all(kafka_bootstrap, topic)
    headers = [dict(m.headers) for m in messages]
    assert [(h[HEADER_SEQ], h["netmon.records"]) for h in headers] == [
        (b"7000", b"1000"),
        (b"8000", b"1000"),
        (b"9000", b"500"),
    ]
    assert {h[HEADER_REPLAY] for h in headers} == {b"1700000000000000000-abcdef"}
    assert sort_records(records_of(messages)).equals(sort_records(pa.Table.from_batches([batch])))


@pytest.mark.kafka
def test_a_refused_message_is_raised_once_and_close_does_not_hang(
    kafka_bootstrap: str, sample: pa.Table
) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = topic_name("refused")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:  # every message is larger than the topic takes
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": "512"})])
    finally:
        admin.close()
    producer = PacketProducer(kafka_bootstrap, topic, create_topic=False, delivery_timeout_s=10)
    producer.raise_if_failed()  # nothing sent, nothing failed
    producer.send_batch(sample.slice(0, 300).combine_chunks().to_batches()[0], 100)
    producer.flush()  # kafka-python's own flush gives up here ("Future not done"): this one waits
    with pytest.raises(DeliveryFailed, match=f"Kafka broker at {kafka_bootstrap} did not take a message"):
        producer.raise_if_failed()
    deadline = time.monotonic() + 5  # the error callbacks run in kafka-python's sender thread
    while producer.counts.failed_records < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert producer.counts.failed_records == 300 and producer.counts.acked_records == 0
    began = time.monotonic()
    with contextlib.suppress(DeliveryFailed):
        producer.close()
    assert time.monotonic() - began < 10


@pytest.mark.kafka
def test_a_short_delivery_timeout_is_raised_to_what_kafka_python_accepts(kafka_bootstrap: str) -> None:
    # kafka-python refuses delivery_timeout < linger + request timeout (5 s at least here) with a
    # configuration error once connected: the producer raises the timeout to that bound instead.
    with PacketProducer(kafka_bootstrap, topic_name("short"), timeout_s=2, delivery_timeout_s=1) as producer:
        assert producer.delivery_timeout_s == pytest.approx(5.02)
