"""A whole-cluster restart keeps the data: ``netmon cluster down`` (which keeps the storage by
default), then ``netmon cluster up`` restarts the same 3 Kafka nodes on the same ports with their
log dirs, and the Spark master and worker on theirs. A pipeline on the cluster's master, stopped
mid-stream before the restart, resumes from its checkpoint after it; a replay interrupted before
the restart is completed with ``--resume``. In the end the topic holds every record of the capture
once and the traffic results are the brute-force counts, no window written twice.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest

from ingest import read_records
from ingest.generate import generate
from netmon.cluster import ClusterProcess
from netmon.records import ARROW_SCHEMA
from tests.cluster.conftest import Cluster, running, running_cluster, traffic_of
from tests.faults.conftest import wait_for_message_count
from tests.ingest.kafka_util import consume_all, records_of, sort_records
from tests.pipeline.oracle import traffic_per_window

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PACKETS = 3000
WATERMARK_S = 5.0
TOPIC = "netmon.cluster.restart"


def _config(cluster: Cluster) -> Path:
    return cluster.toml(
        "restart.toml",
        kafka={
            "packets_topic": TOPIC,
            "results_topic_prefix": f"{TOPIC}.",
            "partitions": 2,
            "replication_factor": 3,
            "min_insync_replicas": 2,
        },
        # Three messages of 100 records a batch: several batches before the restart.
        pipeline={
            "kinds": ["traffic"],
            "publish_results": False,
            "watermark_s": WATERMARK_S,
            "max_batch_messages": 3,
            "trigger_s": 0.5,
        },
    )


def _commits(data_dir: Path) -> int:
    return len(list((data_dir / "checkpoints").glob("*/commits/[0-9]*")))


def _ports(record: dict) -> dict[str, dict[str, int]]:
    return {p["name"]: p["ports"] for p in record["processes"]}


def _interrupted_replay(cluster: Cluster, capture: Path, config: Path) -> dict:
    """``netmon replay``, paced, stopped with SIGINT after about a third of the capture."""
    proc = cluster.popen(
        "replay", str(capture), "--records-per-message", "100", "--pps", "600", "-q", "--json", config=config
    )
    try:
        wait_for_message_count(cluster.bootstrap, TOPIC, 10)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    summary = json.loads(out)
    assert summary["interrupted"] is True and 0 < summary["produced"] < PACKETS
    assert summary["produced"] == summary["acknowledged"]
    return summary


def _stream_until_committed(cluster: Cluster, config: Path, data_dir: Path, batches: int) -> None:
    """``netmon pipeline`` (streaming) on the cluster's master until ``batches`` batches are
    committed, then SIGINT (as Ctrl-C)."""
    proc = cluster.popen(
        "pipeline", "--quiet", "--master", cluster.master_url, config=config, data_dir=data_dir
    )
    try:
        deadline = time.monotonic() + 150
        while _commits(data_dir) < batches:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no batch committed"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert f"pipeline running on {cluster.master_url}" in err


def test_whole_cluster_restart_resumes_the_pipeline_without_loss_or_duplicates(tmp_path: Path) -> None:
    capture = tmp_path / "restart.pcap"
    generate(capture, packets=PACKETS, seed=13, duration_s=20.0)
    expected_records = pa.Table.from_batches(list(read_records(capture)), schema=ARROW_SCHEMA)
    data_dir = tmp_path / "pipeline"
    home = tmp_path / "state" / "cluster"
    with running_cluster(tmp_path, brokers=3, workers=1) as cluster:
        config = _config(cluster)
        first = _interrupted_replay(cluster, capture, config)
        _stream_until_committed(cluster, config, data_dir, batches=2)
        committed = _commits(data_dir)
        assert sum(p for p, _ in traffic_of(data_dir).values()) < PACKETS

        # -- the whole cluster down, its storage kept --------------------------------------------
        before = cluster.record
        meta = {n: (home / f"kafka-{n}" / "data" / "meta.properties").read_text() for n in (1, 2, 3)}
        down = cluster.netmon("cluster", "down", "--grace", "30")
        assert down.returncode == 0, down.stderr
        assert "storage of a stopped cluster kept (3 brokers" in down.stdout.splitlines()[-1]
        assert not any(running(p["pid"]) for p in before["processes"])
        assert not (home / "cluster.json").exists()
        status = cluster.netmon("cluster", "status", "--json")
        assert status.returncode == 3
        assert json.loads(status.stdout)["kept"]["cluster_id"] == before["cluster_id"]
        wrong = cluster.netmon("cluster", "up", "--brokers", "1", "--workers", "1")
        assert wrong.returncode == 1
        (line,) = wrong.stderr.strip().splitlines()
        assert "has 3 brokers, not 1" in line and "down --wipe" in line

        # -- up again: the same nodes, ports, storage and cluster id ------------------------------
        up = cluster.netmon("cluster", "up", "--brokers", "3", "--workers", "1", timeout=300)
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("restarted (3 brokers, 1 workers")
        after = json.loads((home / "cluster.json").read_text())
        cluster.record = after
        assert after["restarted"] is True
        for key in ("cluster_id", "bootstrap_servers", "master_url", "master_webui"):
            assert after[key] == before[key], key
        assert _ports(after) == _ports(before)
        assert not {p["pid"] for p in after["processes"]} & {p["pid"] for p in before["processes"]}
        assert all(ClusterProcess(**p).alive() for p in after["processes"])
        assert not (home / "kept.json").exists()
        # not formatted again: the same meta.properties, the same voters
        assert {n: (home / f"kafka-{n}" / "data" / "meta.properties").read_text() for n in (1, 2, 3)} == meta
        # the records of the first replay are still in the topic
        assert records_of(consume_all(cluster.bootstrap, TOPIC)).num_rows == first["produced"]

        # -- the rest of the capture, then the pipeline from its checkpoint to the end ------------
        resume = cluster.netmon(
            "replay",
            str(capture),
            "--records-per-message",
            "100",
            "--resume",
            first["run_id"],
            "-q",
            "--json",
            config=config,
        )
        assert resume.returncode == 0, resume.stderr
        resumed = json.loads(resume.stdout)
        assert resumed["already_present"] == first["produced"]
        assert resumed["produced"] == resumed["acknowledged"] == PACKETS - first["produced"]
        run = cluster.netmon(
            "pipeline",
            "--available-now",
            "--quiet",
            "--master",
            cluster.master_url,
            config=config,
            timeout=300,
            data_dir=data_dir,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert _commits(data_dir) > committed  # the same checkpoint, carried on

        # Every record in the topic once; every packet counted once, in the windows Scapy counts.
        in_topic = records_of(consume_all(cluster.bootstrap, TOPIC))
        assert sort_records(in_topic).equals(sort_records(expected_records))
        traffic = traffic_of(data_dir)
        assert sum(p for p, _ in traffic.values()) == PACKETS
        assert traffic == traffic_per_window(capture, watermark_ns=round(WATERMARK_S * 1e9))
