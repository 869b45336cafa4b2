"""``netmon cluster up|status|down`` for real: 3 Kafka KRaft nodes and a Spark master with 1 worker,
each its own JVM, started by the ``netmon`` command in a temporary state directory; replicated
topics made by netmon's own topic creation (``netmon replay``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from netmon.cluster import ClusterProcess
from tests.cluster.conftest import Cluster, running, running_cluster
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster"), brokers=3, workers=1) as c:
        yield c


def test_status_shows_three_brokers_and_one_alive_worker(cluster: Cluster) -> None:
    run = cluster.netmon("cluster", "status", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    st = json.loads(run.stdout)
    assert st["up"] is True
    assert [b["node_id"] for b in st["kafka_brokers"]] == [1, 2, 3]
    assert {b["host"] for b in st["kafka_brokers"]} == {"127.0.0.1"}
    assert len(st["spark_workers_alive"]) == 1
    assert st["spark_workers_alive"][0]["cores"] == 1
    names = {p["name"]: p for p in st["processes"]}
    assert set(names) == {"kafka-1", "kafka-2", "kafka-3", "spark-master", "spark-worker-1"}
    assert all(p["alive"] for p in st["processes"])
    assert len({p["pid"] for p in st["processes"]}) == 5
    ports = [port for p in st["processes"] for port in p["ports"].values()]
    assert len(ports) == len(set(ports)) == 10
    assert st["master_url"] == f"spark://127.0.0.1:{names['spark-master']['ports']['master']}"
    text = cluster.netmon("cluster", "status")
    assert "kafka: 3 brokers in the metadata" in text.stdout
    assert "spark: 1 workers ALIVE" in text.stdout


def test_up_again_reuses_the_cluster(cluster: Cluster) -> None:
    run = cluster.netmon("cluster", "up", "--brokers", "3", "--workers", "1")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("already up")
    assert cluster.bootstrap in run.stdout
    again = json.loads(cluster.netmon("cluster", "up", "--json").stdout)
    assert again["reused"] is True
    assert [p["pid"] for p in again["processes"]] == [p["pid"] for p in cluster.record["processes"]]


def test_replicated_topic_through_netmon_replay(cluster: Cluster) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from tests.ingest.kafka_util import consume_all, records_of

    topic = "netmon.cluster.rf3"
    config = cluster.config("rf3.toml", replication_factor=3, min_insync_replicas=2, packets_topic=topic)
    run = cluster.netmon("replay", str(SAMPLE), "--quiet", "--json", config=config)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["acknowledged"] == summary["produced"] > 0  # PacketProducer: acks=all, idempotent
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="netmon-test")
    try:
        (described,) = admin.describe_topics([topic])
        partitions = described["partitions"]
        assert len(partitions) == 2
        for p in partitions:
            assert sorted(p["replica_nodes"]) == [1, 2, 3], p
            assert sorted(p["isr_nodes"]) == [1, 2, 3], p
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert configs["topic"][topic]["min.insync.replicas"]["value"] == "2"
    finally:
        admin.close()
    assert records_of(consume_all(cluster.bootstrap, topic)).num_rows == summary["produced"]


def test_acks_all_produce_and_consume(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from netmon.kafka_admin import ensure_topic

    topic = "netmon.cluster.acks"
    assert ensure_topic(cluster.bootstrap, topic, 2, 3, min_insync_replicas=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True)
    sent = [f"record-{i}".encode() for i in range(200)]
    try:
        for value in sent:
            producer.send(topic, value)
        producer.flush(30)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=None, auto_offset_reset="earliest")
    got: list[bytes] = []
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(tps)
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def test_factor_above_the_brokers_is_a_one_line_error(cluster: Cluster) -> None:
    topic = "netmon.cluster.rf4"
    config = cluster.config("rf4.toml", replication_factor=4, min_insync_replicas=2, packets_topic=topic)
    run = cluster.netmon("replay", str(SAMPLE), "--quiet", config=config)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert f"topic '{topic}'" in lines[0]
    assert "replication factor 4" in lines[0] and "has 3" in lines[0]
    from netmon.broker import list_topics

    assert topic not in list_topics(cluster.bootstrap)


def test_down_leaves_no_process_alive(cluster: Cluster) -> None:
    record_file = cluster.tmp / "state" / "cluster" / "cluster.json"
    procs = [ClusterProcess(**p) for p in json.loads(record_file.read_text())["processes"]]
    assert all(p.alive() for p in procs)
    run = cluster.netmon("cluster", "down", "--grace", "30")
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.strip().splitlines()) == 6  # one per process, one on the kept storage
    assert run.stdout.strip().splitlines()[-1].startswith("storage of a stopped cluster kept (3 brokers")
    # workers, then the master, then the brokers
    assert [line.split(":")[0] for line in run.stdout.splitlines()][:2] == ["spark-worker-1", "spark-master"]
    # any process with a recorded pid, ours or not, is a failure here (a reused pid within
    # seconds is unlikely; a JVM still shutting down is what this catches)
    alive = [p.name for p in procs if running(p.pid)]
    assert alive == []
    assert not record_file.exists()
    status = cluster.netmon("cluster", "status")
    assert status.returncode == 3
    assert status.stdout.splitlines()[0] == "not up"
    wipe = cluster.netmon("cluster", "down", "--wipe")
    assert wipe.returncode == 0, wipe.stderr
    assert wipe.stdout.splitlines() == ["not up", f"storage removed ({record_file.parent})"]
    assert not record_file.parent.exists()
    assert cluster.netmon("cluster", "status").stdout.strip() == "not up"
