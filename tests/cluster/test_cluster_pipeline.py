"""The pipeline on the local cluster (3 Kafka nodes, topics with replication factor 3 and
``min.insync.replicas`` 2, a Spark standalone master with 2 workers of 1 core), each run a
``netmon`` subprocess as a user would start it:

- ``netmon pipeline --available-now --master spark://…`` gives the rows ``--master local[2]`` gives
  over the same topic (traffic, top-k, distinct), and the traffic rows are Scapy's counts;
- ``netmon demo --cluster --until-done`` reuses the running cluster and exits 0;
- ``kill -9`` of one worker (and its executor) while a streaming run works through the topic: the
  run goes on with the other worker and ends with the same rows;
- ``kill -9`` of the leader of a partition while ``netmon replay`` produces: the replay completes,
  every record is in the topic once, and the pipeline counts each once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from ingest import read_records
from ingest.generate import generate
from netmon.records import ARROW_SCHEMA
from netmon.results import read_results
from netmon.spark_standalone import alive_workers, master_state
from tests.cluster.conftest import Cluster, running_cluster, traffic_of
from tests.faults.conftest import wait_for_message_count
from tests.ingest.kafka_util import consume_all, records_of, sort_records
from tests.pipeline.oracle import traffic_per_window

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KINDS = ("traffic", "topk", "distinct")
PACKETS = 3000
WATERMARK_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster-pipeline"), brokers=3, workers=2) as c:
        yield c


@dataclass
class Replayed:
    capture: Path
    topic: str
    #: the rows of ``netmon pipeline --available-now --master local[2]`` over the topic
    local: dict[str, list[tuple]]


def _pipeline_config(cluster: Cluster, name: str, topic: str, **pipeline: object) -> Path:
    return cluster.toml(
        f"{name}.toml",
        kafka={
            "packets_topic": topic,
            "results_topic_prefix": f"{topic}.",
            "partitions": 2,
            "replication_factor": 3,
            "min_insync_replicas": 2,
        },
        pipeline={"kinds": list(KINDS), "publish_results": False, "watermark_s": WATERMARK_S, **pipeline},
    )


def _rows(data_dir: Path, kind: str) -> list[tuple]:
    table = read_results(data_dir / "results" / kind)
    return [] if table is None else sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _replay(cluster: Cluster, capture: Path, config: Path, *args: str) -> dict:
    """``netmon replay`` (topic, replication: the config's), 100 records a message."""
    run = cluster.netmon(
        "replay", str(capture), "--records-per-message", "100", "-q", "--json", *args, config=config
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _available_now(cluster: Cluster, config: Path, master: str) -> None:
    """``netmon pipeline --available-now`` with the data directory named as the config file."""
    run = cluster.netmon(
        "pipeline",
        "--available-now",
        "--quiet",
        "--master",
        master,
        config=config,
        timeout=300,
        data_dir=cluster.tmp / config.stem,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"pipeline running on {master}" in run.stderr


@pytest.fixture(scope="module")
def replayed(cluster: Cluster) -> Replayed:
    capture = cluster.tmp / "baseline.pcap"
    generate(capture, packets=PACKETS, seed=7, duration_s=20.0)
    topic = "netmon.cluster.pipeline"
    local = _pipeline_config(cluster, "local", topic)
    summary = _replay(cluster, capture, local)
    assert summary["produced"] == summary["acknowledged"] == PACKETS
    _available_now(cluster, local, "local[2]")
    return Replayed(capture, topic, {kind: _rows(cluster.tmp / "local", kind) for kind in KINDS})


def _executor_dirs(cluster: Cluster) -> dict[str, set[str]]:
    """Per worker, the applications it ran executors for (``work/app-*``)."""
    home = cluster.tmp / "state" / "cluster"
    return {
        worker: {d.name for d in (home / worker / "work").glob("app-*")}
        for worker in ("spark-worker-1", "spark-worker-2")
    }


def test_the_cluster_gives_the_local_results(cluster: Cluster, replayed: Replayed) -> None:
    config = _pipeline_config(cluster, "on-cluster", replayed.topic)
    before = _executor_dirs(cluster)
    _available_now(cluster, config, cluster.master_url)
    # The executors ran on both workers: one new application directory on each.
    after = _executor_dirs(cluster)
    assert all(len(after[w] - before[w]) == 1 for w in after), (before, after)
    for kind in KINDS:
        assert replayed.local[kind], kind
        assert _rows(cluster.tmp / "on-cluster", kind) == replayed.local[kind], kind
    expected = traffic_per_window(replayed.capture, watermark_ns=round(WATERMARK_S * 1e9))
    assert sum(p for p, _ in expected.values()) == PACKETS
    assert traffic_of(cluster.tmp / "on-cluster") == expected


def test_demo_on_the_cluster_until_done(cluster: Cluster) -> None:
    capture = cluster.tmp / "demo.pcap"
    generate(capture, packets=2000, seed=9, duration_s=10.0)
    config = cluster.toml(
        "demo.toml",
        pipeline={"kinds": list(KINDS), "watermark_s": WATERMARK_S},
        alerts={"enabled": False},
    )
    run = cluster.netmon(
        "demo", "--cluster", "--until-done", "--capture", str(capture), config=config, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "cluster: reused" in run.stderr
    assert "2,000 packets replayed, 2,000 in results" in run.stderr
    demo_data = cluster.tmp / "data" / "demo"
    expected = traffic_per_window(capture, watermark_ns=round(WATERMARK_S * 1e9))
    assert traffic_of(demo_data) == expected
    # The demo's topic is replicated on the three brokers.
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="netmon-test")
    try:
        (described,) = admin.describe_topics(["cli.demo.packets"])
    finally:
        admin.close()
    assert [sorted(p["replica_nodes"]) for p in described["partitions"]] == [[1, 2, 3], [1, 2, 3]]


def _commits(data_dir: Path) -> int:
    return len(list((data_dir / "checkpoints").glob("*/commits/[0-9]*")))


def test_a_worker_killed_mid_stream_the_other_finishes_it(cluster: Cluster, replayed: Replayed) -> None:
    data_dir = cluster.tmp / "worker-kill"
    # Three messages of 100 records a batch: about a dozen batches over the topic.
    config = _pipeline_config(cluster, "worker-kill", replayed.topic, max_batch_messages=3, trigger_s=0.5)
    proc = cluster.popen(
        "pipeline", "--quiet", "--master", cluster.master_url, config=config, data_dir=data_dir
    )
    try:
        deadline = time.monotonic() + 180
        while _commits(data_dir) < 2:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no batch committed"
            time.sleep(0.2)
        cluster.kill("spark-worker-2")
        killed_at = _commits(data_dir)
        assert sum(p for p, _ in traffic_of(data_dir).values()) < PACKETS, "killed too late"
        deadline = time.monotonic() + 240
        while sum(p for p, _ in traffic_of(data_dir).values()) < PACKETS:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"{traffic_of(data_dir)} after the kill"
            time.sleep(0.5)
        assert _commits(data_dir) > killed_at
        # The last batch's other kinds: committed with it; wait until no batch runs.
        stable, seen = time.monotonic(), _commits(data_dir)
        while time.monotonic() - stable < 4:
            if _commits(data_dir) != seen:
                stable, seen = time.monotonic(), _commits(data_dir)
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    for kind in KINDS:
        assert _rows(data_dir, kind) == replayed.local[kind], kind
    state = master_state("127.0.0.1", cluster.process("spark-master").ports["webui"])
    assert [w["port"] for w in alive_workers(state)] == [cluster.process("spark-worker-1").ports["worker"]]


def _leader(cluster: Cluster, topic: str, partition: int) -> int:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="netmon-test")
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    (found,) = [p for p in described["partitions"] if p["partition_index"] == partition]
    return int(found["leader_id"])


def test_a_broker_killed_mid_replay_loses_and_doubles_nothing(cluster: Cluster) -> None:
    capture = cluster.tmp / "broker-kill.pcap"
    generate(capture, packets=PACKETS, seed=11, duration_s=20.0)
    expected_records = pa.Table.from_batches(list(read_records(capture)), schema=ARROW_SCHEMA)
    topic = "netmon.cluster.broker-kill"
    config = _pipeline_config(cluster, "broker-kill", topic)
    # Paced (about 6 s in all) so that the kill lands in the middle.
    proc = cluster.popen(
        "replay", str(capture), "--records-per-message", "50", "--pps", "500", "-q", "--json", config=config
    )
    try:
        wait_for_message_count(cluster.bootstrap, topic, 6)
        node = _leader(cluster, topic, 0)
        cluster.kill(f"kafka-{node}")
        assert proc.poll() is None, "the replay should still be producing when its leader dies"
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["produced"] == summary["acknowledged"] == PACKETS
    assert summary["broker_error"] is None
    assert _leader(cluster, topic, 0) != node  # the failover happened
    # Every record once in the topic: none lost in the failover, none sent twice by a retry.
    in_topic = records_of(consume_all(cluster.bootstrap, topic))
    assert sort_records(in_topic).equals(sort_records(expected_records))
    # ... and counted once by the pipeline on the cluster, with the dead broker still in its list.
    _available_now(cluster, config, cluster.master_url)
    traffic = traffic_of(cluster.tmp / "broker-kill")
    assert sum(p for p, _ in traffic.values()) == PACKETS
    assert traffic == traffic_per_window(capture, watermark_ns=round(WATERMARK_S * 1e9))


#: the kinds the first equality test leaves out: the detection rows and the join (unshed, so its
#: output is exact; ``pni`` sheds by the batch's measured time, which no two runs share)
OTHER_KINDS = ("features", "joins")


def test_the_cluster_gives_the_local_features_and_join_rows(cluster: Cluster, replayed: Replayed) -> None:
    rows = {}
    for name, master in (("local-other", "local[2]"), ("cluster-other", cluster.master_url)):
        config = _pipeline_config(cluster, name, replayed.topic, kinds=list(OTHER_KINDS))
        with config.open("a") as fh:
            fh.write('[[queries.join]]\nname = "handshake"\nstrategy = "none"\n')
        _available_now(cluster, config, master)
        rows[name] = {kind: _rows(cluster.tmp / name, kind) for kind in OTHER_KINDS}
    for kind in OTHER_KINDS:
        assert rows["local-other"][kind], kind  # the capture has handshakes and detection windows
        assert rows["cluster-other"][kind] == rows["local-other"][kind], kind
