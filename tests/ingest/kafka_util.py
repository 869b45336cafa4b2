"""Reading a topic back from the real broker, for the producer, replay and capture tests."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa

from ingest.wire import decode_message, is_control
from netmon.records import ARROW_SCHEMA


@dataclass
class Message:
    partition: int
    offset: int
    value: bytes
    headers: list[tuple[str, bytes]]


def consume_all(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> list[Message]:
    """Every message of ``topic`` up to its current end offsets, in (partition, offset) order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        assert partitions, f"topic {topic} has no partitions"
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            assert time.monotonic() < deadline, "topic not consumed to its end offsets in time"
            for tp, records in consumer.poll(timeout_ms=500).items():
                for r in records:
                    if r.offset < end[tp]:
                        out.append(Message(tp.partition, r.offset, r.value, list(r.headers or [])))
        return sorted(out, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def records_of(messages: list[Message]) -> pa.Table:
    """The packet records of the data messages (control messages skipped)."""
    tables = [decode_message(m.value, m.headers) for m in messages if not is_control(m.headers)]
    return pa.concat_tables(tables) if tables else ARROW_SCHEMA.empty_table()


def sort_records(table: pa.Table) -> pa.Table:
    """Records in a total order independent of partitioning (messages interleave across partitions)."""
    keys = [(name, "ascending") for name in ARROW_SCHEMA.names]
    return table.sort_by(keys)


def wait_for_messages(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> int:
    """Wait until ``topic`` exists and holds at least one message; return how many it holds."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(topic)
            if parts:
                ends = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
                if sum(ends.values()):
                    return sum(ends.values())
            time.sleep(0.1)
        raise AssertionError(f"no message in {topic} within {timeout_s}s")
    finally:
        consumer.close()
