"""The cluster's pieces without a JVM: each node's properties, ports, the record's processes,
``[kafka] replication_factor`` / ``min_insync_replicas`` and the topic-creation rule they drive."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netmon import kafka_admin
from netmon.cluster import (
    ClusterError,
    ClusterProcess,
    KafkaNode,
    LocalCluster,
    free_ports,
    node_properties,
    quorum_voters,
    replication_defaults,
    write_properties,
)
from netmon.config import Config, ConfigError, load_config


def _nodes(n: int) -> list[KafkaNode]:
    ports = free_ports(2 * n)
    return [KafkaNode(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(n)]


def _read_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_every_node_names_all_voters_and_its_own_ports(tmp_path: Path) -> None:
    nodes = _nodes(3)
    voters = quorum_voters(nodes, "127.0.0.1")
    assert voters == ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    seen_ids, seen_listeners = set(), set()
    for node in nodes:
        props = node_properties(node, nodes, "127.0.0.1", tmp_path / f"kafka-{node.node_id}")
        assert props["node.id"] == str(node.node_id)
        assert props["controller.quorum.voters"] == voters
        assert props["process.roles"] == "broker,controller"
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
        )
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.port}"
        assert props["log.dirs"] == str(tmp_path / f"kafka-{node.node_id}")
        assert props["default.replication.factor"] == "3"
        assert props["min.insync.replicas"] == "2"
        assert props["offsets.topic.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        seen_ids.add(props["node.id"])
        seen_listeners.add(props["listeners"])
    assert seen_ids == {"1", "2", "3"}
    assert len(seen_listeners) == 3


def test_replication_defaults_fit_the_cluster_size() -> None:
    for brokers, factor, isr in ((1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")):
        d = replication_defaults(brokers)
        assert d["default.replication.factor"] == factor, brokers
        assert d["offsets.topic.replication.factor"] == factor, brokers
        assert d["transaction.state.log.replication.factor"] == factor, brokers
        assert d["min.insync.replicas"] == isr, brokers
        assert d["transaction.state.log.min.isr"] == isr, brokers
    with pytest.raises(ValueError):
        replication_defaults(0)


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(12)
    assert len(set(ports)) == 12
    for port in ports:
        assert 20000 <= port < 32768
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_properties_file_round_trips(tmp_path: Path) -> None:
    nodes = _nodes(2)
    props = node_properties(nodes[1], nodes, "127.0.0.1", tmp_path / "data", partitions=4)
    path = tmp_path / "server.properties"
    write_properties(path, props)
    assert _read_properties(path) == props
    assert props["num.partitions"] == "4"
    assert not path.with_suffix(".tmp").exists()


def test_a_process_is_ours_only_with_its_arguments() -> None:
    # this process's own first argument, as it was started (``python``, or the venv's full path)
    mine = Path("/proc/self/cmdline").read_bytes().decode().split("\0")[0]
    me = ClusterProcess("me", "kafka", os.getpid(), {}, "", [mine])
    assert me.alive()
    assert not ClusterProcess("me", "kafka", os.getpid(), {}, "", ["kafka.Kafka", "/nowhere"]).alive()
    assert not ClusterProcess("gone", "kafka", 2**22 + 17, {}, "", []).alive()


def test_status_and_down_without_a_cluster(tmp_path: Path) -> None:
    from cli.main import cli

    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    runner = CliRunner()
    st = runner.invoke(cli, ["cluster", "status"], env=env)
    assert st.exit_code == 3, st.output
    assert st.output.strip() == "not up"
    down = runner.invoke(cli, ["cluster", "down"], env=env)
    assert down.exit_code == 0 and down.output.strip() == "not up"
    cfg = load_config(None, env=env)
    assert LocalCluster(cfg).record() == {}


def _kept_cluster(tmp_path: Path, brokers: int = 3, workers: int = 1) -> tuple[Config, dict[str, Any]]:
    """The state a ``down`` that kept the storage leaves: ``kept.json`` and formatted log dirs."""
    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    cfg = load_config(None, env=env)
    home = tmp_path / "state" / "cluster"
    ports = free_ports(2 * brokers + 2 + 2 * workers)
    procs = [
        {
            "name": f"kafka-{i}",
            "role": "kafka",
            "pid": 2**22 + i,
            "log": "",
            "argv": [],
            "ports": {"client": ports[2 * i - 2], "controller": ports[2 * i - 1]},
        }
        for i in range(1, brokers + 1)
    ]
    procs.append(
        {
            "name": "spark-master",
            "role": "spark-master",
            "pid": 2**22,
            "log": "",
            "argv": [],
            "ports": {"master": ports[2 * brokers], "webui": ports[2 * brokers + 1]},
        }
    )
    procs += [
        {
            "name": f"spark-worker-{i}",
            "role": "spark-worker",
            "pid": 2**22 + 100 + i,
            "log": "",
            "argv": [],
            "ports": {"worker": ports[2 * brokers + 2 * i], "webui": ports[2 * brokers + 2 * i + 1]},
        }
        for i in range(1, workers + 1)
    ]
    kept = {
        "host": "127.0.0.1",
        "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA",
        "brokers": brokers,
        "workers": workers,
        "stopped": "then",
        "processes": procs,
    }
    for i in range(1, brokers + 1):
        (home / f"kafka-{i}" / "data").mkdir(parents=True)
        (home / f"kafka-{i}" / "data" / "meta.properties").write_text(f"node.id={i}\n")
    (home / "kept.json").write_text(json.dumps(kept))
    return cfg, kept


def test_a_kept_cluster_restarts_on_its_ports(tmp_path: Path) -> None:
    cfg, kept = _kept_cluster(tmp_path)
    cluster = LocalCluster(cfg)
    assert cluster.kept() == kept and cluster.record() == {}
    nodes, master, worker_ports = cluster._check_kept(kept, 3)
    ports = {p["name"]: p["ports"] for p in kept["processes"]}
    assert nodes == [
        KafkaNode(i, ports[f"kafka-{i}"]["client"], ports[f"kafka-{i}"]["controller"]) for i in (1, 2, 3)
    ]
    assert master == (ports["spark-master"]["master"], ports["spark-master"]["webui"])
    assert worker_ports == [(ports["spark-worker-1"]["worker"], ports["spark-worker-1"]["webui"])]


def test_a_kept_cluster_of_another_size_is_a_one_line_error(tmp_path: Path) -> None:
    cfg, _ = _kept_cluster(tmp_path)
    with pytest.raises(ClusterError) as err:
        LocalCluster(cfg).up(brokers=1, workers=1)
    text = str(err.value)
    assert "\n" not in text
    assert "has 3 brokers, not 1" in text and "`netmon cluster down --wipe` first" in text
    assert (tmp_path / "state" / "cluster" / "kept.json").exists()


def test_a_kept_port_taken_by_another_process_is_a_one_line_error(tmp_path: Path) -> None:
    cfg, kept = _kept_cluster(tmp_path)
    port = kept["processes"][1]["ports"]["controller"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(ClusterError) as err:
            LocalCluster(cfg).up(brokers=3, workers=1)
    text = str(err.value)
    assert "\n" not in text
    assert f"port {port} (kafka-2 controller)" in text and "in use by another process" in text


def test_kept_storage_missing_is_a_one_line_error(tmp_path: Path) -> None:
    cfg, _ = _kept_cluster(tmp_path)
    (tmp_path / "state" / "cluster" / "kafka-3" / "data" / "meta.properties").unlink()
    with pytest.raises(ClusterError, match="kept storage of kafka-3 is missing"):
        LocalCluster(cfg).up(brokers=3, workers=1)


def test_status_and_down_of_a_kept_cluster(tmp_path: Path) -> None:
    from cli.main import cli

    _kept_cluster(tmp_path)
    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    runner = CliRunner()
    st = runner.invoke(cli, ["cluster", "status"], env=env)
    assert st.exit_code == 3, st.output
    first, kept_line = st.output.strip().splitlines()
    assert first == "not up"
    assert kept_line.startswith("storage of a stopped cluster kept (3 brokers, cluster id AAAA")
    assert "`netmon cluster up --brokers 3` restarts it" in kept_line
    down = runner.invoke(cli, ["cluster", "down"], env=env)
    assert down.exit_code == 0 and down.output.strip().splitlines() == [first, kept_line]
    assert (tmp_path / "state" / "cluster" / "kept.json").exists()
    wipe = runner.invoke(cli, ["cluster", "down", "--wipe"], env=env)
    assert wipe.exit_code == 0, wipe.output
    assert wipe.output.strip().splitlines()[-1] == f"storage removed ({tmp_path / 'state' / 'cluster'})"
    assert not (tmp_path / "state" / "cluster").exists()
    assert runner.invoke(cli, ["cluster", "status"], env=env).output.strip() == "not up"


def test_free_ports_avoid_the_kept_ones() -> None:
    taken = free_ports(40)
    assert not set(free_ports(10, avoid=taken)) & set(taken)


# -- [kafka] replication_factor and min_insync_replicas -------------------------------------------


def test_replication_defaults_keep_the_single_broker() -> None:
    k = Config().kafka
    assert (k.replication_factor, k.min_insync_replicas) == (1, 1)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"replication_factor": 0}, "[kafka] replication_factor: expected an integer >= 1, got 0"),
        (
            {"replication_factor": 3, "min_insync_replicas": 4},
            "[kafka] min_insync_replicas: expected an integer in 1..replication_factor = 3, got 4",
        ),
        (
            {"min_insync_replicas": 2},
            "[kafka] min_insync_replicas: expected an integer in 1..replication_factor = 1, got 2",
        ),
        ({"replication_factor": 3, "min_insync_replicas": 0}, "[kafka] min_insync_replicas: expected"),
    ],
)
def test_replication_keys_are_checked(keys: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Config().replace(kafka=keys)
    assert str(err.value).startswith(message)


def test_replication_keys_load_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "netmon.toml"
    path.write_text("[kafka]\nreplication_factor = 3\nmin_insync_replicas = 2\n")
    k = load_config(str(path), env={}).kafka
    assert (k.replication_factor, k.min_insync_replicas) == (3, 2)


class _FakeAdmin:
    """The admin client calls ``ensure_topic`` makes, against a cluster of ``brokers``."""

    def __init__(self, brokers: int) -> None:
        self.brokers = brokers
        self.created: list[Any] = []
        self.described = 0

    def list_topics(self) -> list[str]:
        return []

    def describe_cluster(self) -> dict[str, Any]:
        self.described += 1
        return {"brokers": [{"broker_id": i, "host": "h", "port": 1} for i in range(self.brokers)]}

    def create_topics(self, topics: list[Any], **_: Any) -> None:
        self.created += topics

    def close(self) -> None:
        pass


def _ensure(monkeypatch: pytest.MonkeyPatch, brokers: int, **kwargs: Any) -> _FakeAdmin:
    admin = _FakeAdmin(brokers)
    monkeypatch.setattr(kafka_admin, "_admin", lambda *a, **k: admin)
    kafka_admin.ensure_topic("b:1", "netmon.packets", 2, **kwargs)
    return admin


def test_a_replicated_topic_gets_min_insync_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _ensure(monkeypatch, 3, replication=3, min_insync_replicas=2)
    (topic,) = admin.created
    assert topic.replication_factor == 3
    assert topic.topic_configs == {"min.insync.replicas": "2"}


def test_a_single_copy_topic_is_created_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _ensure(monkeypatch, 1, replication=1, min_insync_replicas=1)
    (topic,) = admin.created
    assert topic.replication_factor == 1
    assert topic.topic_configs == {}
    assert admin.described == 0  # no extra request on the single-broker path


def test_too_few_brokers_is_one_line_naming_topic_factor_and_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kafka_admin.TopicReplicationError) as err:
        _ensure(monkeypatch, 2, replication=3, min_insync_replicas=2)
    text = str(err.value)
    assert "\n" not in text
    assert "'netmon.packets'" in text and "replication factor 3" in text and "has 2" in text
