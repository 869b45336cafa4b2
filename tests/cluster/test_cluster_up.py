"""``netmon up`` on the local cluster (3 Kafka nodes, topics with replication factor 3 and
``min.insync.replicas`` 2, a Spark standalone master with 2 workers of 1 core), as a user runs it:
a netmon.toml whose ``[kafka] bootstrap_servers`` and ``[spark] master`` name the cluster, then
``netmon up --replay samples/mixed-small.pcap --no-dashboard`` in the background until the replay's
results are in, then SIGTERM.

- no local broker: ``netmon up`` says so, supervises no broker, and starts no ``kafka.Kafka``;
- the pipeline is an application of the standalone master (its own record, ``/json/``), with an
  executor on each worker that fetched the Kafka connector's jars from the driver;
- every default kind has results; traffic, top-k and distinct rows equal those of ``netmon
  pipeline --available-now --master local[*]`` over the same topic, and the traffic rows are the
  brute-force counts;
- the alert service (on, as by default: it is a client of the cluster too, reading the replicated
  result topics) reads the traffic results up to the topic's end;
- SIGTERM: exit 0, the application FINISHED at the master, no process left running.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts.outbox import Outbox, outbox_path
from ingest import read_records
from netmon.config import Config, load_config
from netmon.orphans import tagged
from netmon.results import read_results, result_topic
from netmon.spark_standalone import master_state
from netmon.supervisor import read_state, state_file
from tests.cluster.conftest import NETMON, Cluster, running_cluster, traffic_of
from tests.conftest import REPO_ROOT, free_port
from tests.pipeline.oracle import traffic_per_window

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"
#: the kinds compared with ``local[*]`` row for row (the join and shedding rows depend on measured
#: batch times, the features on the same windows as traffic)
COMPARED = ("traffic", "topk", "distinct")
APP_NAME = "netmon-pipeline"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster-up"), brokers=3, workers=2) as c:
        yield c


def _rows(data_dir: Path, kind: str) -> list[tuple]:
    table = read_results(data_dir / "results" / kind)
    return [] if table is None else sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _services(cfg: Config) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in (read_state(state_file(cfg)) or {}).get("services", [])}


def _apps(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The master's own record of its applications, running and completed: id -> application."""
    state = master_state("127.0.0.1", cluster.process("spark-master").ports["webui"])
    return {a["id"]: a for a in [*state.get("activeapps", []), *state.get("completedapps", [])]}


def _commits(data_dir: Path) -> int:
    return len(list((data_dir / "checkpoints").glob("*/commits/[0-9]*")))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _running_with(text: str) -> list[str]:
    """The command lines of the running processes that hold ``text`` (an application's executors)."""
    lines = (_cmdline(int(p.name)) for p in Path("/proc").glob("[0-9]*"))
    return [line for line in lines if text in line]


def _traffic_read_by_alerts(cfg: Config) -> bool:
    """The alert service's outbox holds the traffic topic's end offsets (it read every message)."""
    from kafka import KafkaConsumer, TopicPartition

    path = outbox_path(cfg.paths.state_dir)
    if not path.exists():
        return False
    topic = result_topic(cfg, "traffic")
    outbox = Outbox(path, readonly=True)
    try:
        read = {tp: offset for tp, offset in outbox.offsets().items() if tp[0] == topic}
    finally:
        outbox.close()
    consumer = KafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap, client_id="netmon-test")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = {(tp.topic, tp.partition): end for tp, end in consumer.end_offsets(parts).items() if end}
    finally:
        consumer.close()
    return bool(ends) and read == ends


def _wait(check: Callable[[], bool], timeout_s: float, what: str, up: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert up.poll() is None, f"netmon up exited with {up.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def test_up_on_the_cluster_gives_the_local_results_and_stops_clean(cluster: Cluster) -> None:
    config = cluster.toml(
        "up.toml",
        kafka={"replication_factor": 3, "min_insync_replicas": 2},
        spark={"master": cluster.master_url},
        metrics={"port": free_port()},
    )
    data_dir = cluster.tmp / "up"
    env = {**cluster.env, "NETMON_DATA_DIR": str(data_dir)}
    cfg = load_config(config, env=env)
    expected = sum(batch.num_rows for batch in read_records(SAMPLE))
    apps_before = set(_apps(cluster))
    log = cluster.tmp / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [str(NETMON), "--config", str(config), "up", "--replay", str(SAMPLE), "--no-dashboard"],
            env=env,
            stdout=out,
            stderr=out,
        )
    tag = ""  # the supervisor's tag
    seen: set[str] = set()  # the command lines of the processes carrying it
    try:
        _wait(lambda: "pipeline" in _services(cfg), 60, "the state file", up, log)
        tag = (read_state(state_file(cfg)) or {})["supervisor"]["tag"]

        def complete() -> bool:
            seen.update(_cmdline(pid) for pid in tagged(tag))
            return (
                _services(cfg)["replay"]["state"] == "done"
                and sum(p for p, _ in traffic_of(data_dir).values()) == expected
                and all(_rows(data_dir, kind) for kind in cfg.pipeline.kinds)
                and _traffic_read_by_alerts(cfg)
            )

        _wait(complete, 600, "every replayed packet in the results", up, log)
        # The last batch's windows and the join query's: wait until no batch commits for 5 s.
        stable, commits = time.monotonic(), _commits(data_dir)
        while time.monotonic() - stable < 5:
            if _commits(data_dir) != commits:
                stable, commits = time.monotonic(), _commits(data_dir)
            time.sleep(0.5)
        services = _services(cfg)
        assert set(services) == {"pipeline", "alerts", "replay"}  # no broker supervised
        assert services["pipeline"]["state"] == services["alerts"]["state"] == "running"
        assert services["pipeline"]["restarts"] == services["alerts"]["restarts"] == 0
        # The pipeline is the master's application, with every free core (one per worker), and
        # each worker's executor fetched the connector's jars from the driver.
        (app_id,) = set(_apps(cluster)) - apps_before
        app = _apps(cluster)[app_id]
        assert (app["name"], app["state"], app["cores"]) == (APP_NAME, "RUNNING", 2), app
        for worker in ("spark-worker-1", "spark-worker-2"):
            (executor,) = (cluster.tmp / "state" / "cluster" / worker / "work" / app_id).iterdir()
            assert list(executor.glob("spark-sql-kafka-*.jar")), sorted(executor.iterdir())
        up.send_signal(signal.SIGTERM)
        code = up.wait(180)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    said = log.read_text()
    assert code == 0, said[-3000:]
    assert "pipeline: stopped (exit 0)" in said and "alerts: stopped (exit 0)" in said, said
    # No local broker: said so, none started (it would carry the tag), the driver's JVM did.
    assert f"kafka: {cluster.bootstrap} ([kafka] bootstrap_servers; no local broker)" in said, said
    assert not any(line.startswith("broker:") for line in said.splitlines()), said
    assert not any("kafka.Kafka" in c for c in seen), seen
    assert any("org.apache.spark.deploy.SparkSubmit" in c for c in seen), seen
    pipeline_log = (Path(cfg.paths.state_dir) / "logs" / "pipeline.log").read_text()
    assert f"pipeline running on {cluster.master_url};" in pipeline_log
    # Stopped: nothing carrying the tag outlives netmon up; the application finished at the master,
    # whose workers then stop its executors (theirs, not netmon up's: given a while).
    assert [_cmdline(pid) for pid in tagged(tag)] == []
    deadline = time.monotonic() + 60
    while _apps(cluster)[app_id]["state"] == "RUNNING" or _running_with(app_id):
        assert time.monotonic() < deadline, (_apps(cluster)[app_id], _running_with(app_id))
        time.sleep(0.5)
    assert _apps(cluster)[app_id]["state"] == "FINISHED"
    # The same rows as Spark in one local JVM over the same topic (not republished).
    local = cluster.toml("up-local.toml", pipeline={"publish_results": False})
    run = cluster.netmon(
        "pipeline",
        "--available-now",
        "--quiet",
        "--master",
        "local[*]",
        config=local,
        timeout=300,
        data_dir=cluster.tmp / "up-local",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for kind in COMPARED:
        rows = _rows(cluster.tmp / "up-local", kind)
        assert rows, kind
        assert _rows(data_dir, kind) == rows, kind
    oracle = traffic_per_window(SAMPLE, watermark_ns=round(cfg.pipeline.watermark_s * 1e9))
    assert sum(p for p, _ in oracle.values()) == expected
    assert traffic_of(data_dir) == oracle
