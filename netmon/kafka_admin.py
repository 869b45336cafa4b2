"""Small Kafka admin helpers (kafka-python 3.x): check a broker answers, create or reset a topic.

Each takes ``security``: the cluster's :func:`netmon.kafka_security.client_options` (``[kafka]``
authentication and TLS; none: PLAINTEXT).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from netmon.kafka_security import diagnose

__all__ = [
    "KafkaSecurityError",
    "KafkaUnreachable",
    "TopicReplicationError",
    "check_reachable",
    "close_producer",
    "ensure_topic",
    "recreate_topic",
    "security_failure",
    "set_topic_retention",
]


class KafkaUnreachable(RuntimeError):
    """No broker at the bootstrap servers answered a metadata request in time (one-line message)."""


class KafkaSecurityError(KafkaError):
    """The broker refused the client's TLS handshake or SASL login; the message says which and why."""


class TopicReplicationError(KafkaError):
    """A topic's replication factor exceeds the brokers of the cluster (one-line message)."""


def _check_brokers(admin: KafkaAdminClient, bootstrap: str, topic: str, replication: int) -> None:
    """Raise :class:`TopicReplicationError` unless the cluster has ``replication`` brokers (the
    broker's own refusal does not name the topic). One broker always suffices for a factor of 1."""
    if replication <= 1:
        return
    brokers = [b for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")]
    if len(brokers) < replication:
        raise TopicReplicationError(
            f"topic {topic!r}: replication factor {replication} needs {replication} brokers, "
            f"the cluster at {bootstrap} has {len(brokers)} ([kafka] replication_factor)"
        )


def security_failure(
    bootstrap: str, security: Mapping[str, Any] | None, timeout_s: float = 5.0
) -> KafkaSecurityError | None:
    """After a secured client got no answer: the refusal that explains it, if one is found (none
    for PLAINTEXT clients, which the plain timeout describes)."""
    if not security:
        return None
    reason = diagnose(bootstrap, security, timeout_s=min(timeout_s, 5.0))
    return KafkaSecurityError(reason) if reason else None


def check_reachable(
    bootstrap: str, timeout_s: float = 5.0, *, security: Mapping[str, Any] | None = None
) -> None:
    """Return once a broker at ``bootstrap`` answers a metadata request; else raise
    :class:`KafkaUnreachable` (within about ``timeout_s``: connecting and one request)."""
    try:
        admin = _admin(bootstrap, timeout_s, security)
        try:
            admin.list_topics()
        finally:
            admin.close()
    except KafkaSecurityError as exc:
        raise KafkaUnreachable(str(exc.args[0])) from None
    except (KafkaError, OSError) as exc:
        raise KafkaUnreachable(
            f"no Kafka broker answers at {bootstrap} within {timeout_s:g}s ({type(exc).__name__})"
        ) from None


def _admin(bootstrap: str, timeout_s: float, security: Mapping[str, Any] | None = None) -> KafkaAdminClient:
    ms = int(timeout_s * 1000)
    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            request_timeout_ms=ms,
            bootstrap_timeout_ms=ms,
            client_id="netmon-admin",
            **(security or {}),
        )
    except KafkaError:  # kafka-python says only "Unable to bootstrap": find out why
        refused = security_failure(bootstrap, security, timeout_s)
        if refused is None:
            raise
        raise refused from None


def close_producer(producer: Any, timeout_s: float) -> bool:
    """Close a kafka-python ``KafkaProducer`` within about ``timeout_s``; False if messages were
    still unsent then (they are abandoned: their futures fail).

    ``KafkaProducer.close`` flushes first and raises when that times out, leaving its sender
    thread running (and its finaliser tries again, noisily): the sender is then closed by force.
    """
    try:
        producer.close(timeout=timeout_s)
        return True
    except KafkaTimeoutError:
        pass
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        sender.force_close()  # fails the batches it holds, then stops
        sender.join(5.0)
    with contextlib.suppress(KafkaTimeoutError):
        producer.close(timeout=0)  # nothing left to flush now: closed for good
    return False


def ensure_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 2,
    replication: int = 1,
    timeout_s: float = 10,
    *,
    security: Mapping[str, Any] | None = None,
    configs: Mapping[str, str] | None = None,
    min_insync_replicas: int | None = None,
) -> bool:
    """Create ``topic`` if missing (with the topic ``configs``, e.g. ``retention.ms``); True when
    it was created.

    ``replication`` above 1 needs as many brokers (else :class:`TopicReplicationError`), and then
    ``min_insync_replicas`` becomes the topic's ``min.insync.replicas``; a factor of 1 keeps the
    broker's setting, as before these options existed.
    """
    topic_configs = dict(configs or {})
    if min_insync_replicas is not None and replication > 1:
        topic_configs["min.insync.replicas"] = str(min_insync_replicas)
    admin = _admin(bootstrap, timeout_s, security)
    try:
        if topic in admin.list_topics():
            return False
        _check_brokers(admin, bootstrap, topic, replication)
        # Wait for the metadata so a producer or Spark sees the new partitions at once.
        admin.create_topics(
            [NewTopic(topic, partitions, replication, topic_configs=topic_configs)],
            timeout_ms=int(timeout_s * 1000),
            wait_for_metadata=True,
        )
        return True
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()


def recreate_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 2,
    replication: int = 1,
    timeout_s: float = 30,
    *,
    security: Mapping[str, Any] | None = None,
) -> None:
    """Delete ``topic`` (if present) and create it empty."""
    admin = _admin(bootstrap, 10, security)
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


def set_topic_retention(
    bootstrap: str,
    topics: list[str],
    retention_ms: int,
    partitions: int = 2,
    replication: int = 1,
    timeout_s: float = 10,
    *,
    security: Mapping[str, Any] | None = None,
    min_insync_replicas: int | None = None,
) -> None:
    """Give ``topics`` the topic config ``retention.ms`` (creating those missing with it, with
    ``replication`` copies and ``min_insync_replicas``: :func:`ensure_topic`).

    Only that key changes (an incremental alter on brokers since Kafka 2.3); raises
    ``KafkaError`` naming the topic when the broker refuses.
    """
    configs = {"retention.ms": str(retention_ms)}
    for topic in topics:
        ensure_topic(
            bootstrap,
            topic,
            partitions,
            replication,
            timeout_s,
            security=security,
            configs=configs,
            min_insync_replicas=min_insync_replicas,
        )
    admin = _admin(bootstrap, timeout_s, security)
    try:
        results = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, configs=dict(configs)) for t in topics]
        )
    finally:
        admin.close()
    for topic, result in (results.get("topic") or {}).items():
        if result != "OK":
            raise KafkaError(f"setting retention.ms of topic {topic}: {result}")
