"""The cluster's pieces without a JVM: each node's properties, ports, the record's processes,
``[kafka] replication_factor`` / ``min_insync_replicas`` and the topic-creation rule they drive."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netmon import kafka_admin
from netmon.cluster import (
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
    me = ClusterProcess("me", "kafka", os.getpid(), {}, "", [sys.executable])
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
