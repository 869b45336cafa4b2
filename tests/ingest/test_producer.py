"""The packet producer against the project's real Kafka broker: delivery, counts, topic, errors."""

from __future__ import annotations

import socket
import time
import uuid

import pyarrow as pa
import pytest

from ingest import read_records
from ingest.generate import generate
from ingest.producer import BrokerUnavailable, PacketProducer, pick_compression
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
