"""Small Kafka admin helpers (kafka-python 3.x): create or reset a topic."""

from __future__ import annotations

import time

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

__all__ = ["ensure_topic", "recreate_topic"]


def _admin(bootstrap: str, timeout_s: float) -> KafkaAdminClient:
    ms = int(timeout_s * 1000)
    return KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=ms, bootstrap_timeout_ms=ms, client_id="netmon-admin"
    )


def ensure_topic(
    bootstrap: str, topic: str, partitions: int = 2, replication: int = 1, timeout_s: float = 10
) -> bool:
    """Create ``topic`` if missing; True when it was created."""
    admin = _admin(bootstrap, timeout_s)
    try:
        if topic in admin.list_topics():
            return False
        # Wait for the metadata so a producer or Spark sees the new partitions at once.
        admin.create_topics(
            [NewTopic(topic, partitions, replication)],
            timeout_ms=int(timeout_s * 1000),
            wait_for_metadata=True,
        )
        return True
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()


def recreate_topic(
    bootstrap: str, topic: str, partitions: int = 2, replication: int = 1, timeout_s: float = 30
) -> None:
    """Delete ``topic`` (if present) and create it empty."""
    admin = _admin(bootstrap, 10)
    deadline = time.monotonic() + timeout_s
    try:
        if topic in admin.list_topics():
            try:
                admin.delete_topics([topic])
            except UnknownTopicOrPartitionError:
                pass
        while True:
            try:
                admin.create_topics([NewTopic(topic, partitions, replication)])
                return
            except TopicAlreadyExistsError:
                # Deletion is asynchronous: wait until the old topic is gone.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    finally:
        admin.close()
