"""A local multi-process cluster: N Kafka KRaft nodes and a Spark standalone master with M workers.

``netmon cluster up|down|status`` drive :class:`LocalCluster`. Every process is its own JVM, from
the same distributions a multi-host deployment runs (the Kafka jars of ``netmon setup``, PySpark's
own ``spark-class``), listening on 127.0.0.1 only, on free ports chosen at ``up``. Everything lives
under ``<state_dir>/cluster/``:

- ``kafka-<id>/``: the node's ``server.properties``, ``data/`` (formatted with one cluster id for
  all nodes), ``logs/`` and ``kafka.out``. Every node is broker and controller, and all N are the
  static quorum's voters (``controller.quorum.voters``), so a majority keeps the metadata going;
- ``spark-master/`` and ``spark-worker-<i>/``: each daemon's ``spark.out`` and work directory;
- ``cluster.json``: the record of what runs (pids, ports, bootstrap servers, master URL). ``down``
  stops workers, then the master, then the brokers, and removes it;
- ``kept.json``: after ``down`` (without ``wipe``), the record of the stopped cluster: its cluster
  id and every process's ports. The next ``up`` with as many brokers restarts the same nodes on the
  same ports with their storage (no format, the same ``controller.quorum.voters``), and the Spark
  daemons on their ports. ``down(wipe=True)`` removes the whole directory instead.

An ``up`` with nothing kept formats fresh storage on new free ports (a new quorum).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from netmon.broker import _escape, _pid_alive, _port_in_use, kafka_jvm_args
from netmon.config import Config
from netmon.jvm_deps import ensure_jars
from netmon.spark_standalone import (
    MASTER_CLASS,
    SparkStandaloneError,
    WorkerSpec,
    alive_workers,
    master_state,
    start_master,
    start_worker,
    wait_for_workers,
)

__all__ = [
    "ClusterError",
    "ClusterProcess",
    "ClusterStatus",
    "KafkaNode",
    "LocalCluster",
    "free_ports",
    "kafka_jvm_args",
    "kept_line",
    "node_properties",
    "port_in_use",
    "quorum_voters",
    "replication_defaults",
    "write_properties",
]

log = logging.getLogger(__name__)

#: the order ``down`` stops the roles in: what uses the brokers goes first
STOP_ORDER = ("spark-worker", "spark-master", "kafka")
#: the file a formatted Kafka log dir holds (its cluster id and node id)
META_PROPERTIES = "meta.properties"


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped; the message gives the reason in one line."""


# -- Kafka nodes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node (broker and controller): its id and its two ports."""

    node_id: int
    port: int
    controller_port: int


def quorum_voters(nodes: Iterable[KafkaNode], host: str) -> str:
    """``controller.quorum.voters``: ``id@host:controller_port`` of every node.

    >>> quorum_voters([KafkaNode(1, 20001, 20002), KafkaNode(2, 20003, 20004)], "127.0.0.1")
    '1@127.0.0.1:20002,2@127.0.0.1:20004'
    """
    return ",".join(f"{n.node_id}@{host}:{n.controller_port}" for n in nodes)


def replication_defaults(brokers: int) -> dict[str, str]:
    """Replication settings for a cluster of ``brokers``: three copies where there are three
    brokers (fewer otherwise), and writes acknowledged by all but one of them, so one broker can
    be down without refusing ``acks=all`` producers.

    >>> replication_defaults(3)["min.insync.replicas"], replication_defaults(1)["min.insync.replicas"]
    ('2', '1')
    """
    if brokers < 1:
        raise ValueError(f"brokers: expected >= 1, got {brokers}")
    factor = min(brokers, 3)
    isr = str(max(1, factor - 1))
    return {
        "default.replication.factor": str(factor),
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": str(factor),
        "transaction.state.log.replication.factor": str(factor),
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": str(factor),
        "share.coordinator.state.topic.min.isr": isr,
    }


def node_properties(
    node: KafkaNode, nodes: list[KafkaNode], host: str, data_dir: Path, *, partitions: int = 2
) -> dict[str, str]:
    """``server.properties`` of one node of a cluster of ``nodes`` (PLAINTEXT, combined mode, the
    static quorum of all nodes), as on a real host with ``host`` its name."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": quorum_voters(nodes, host),
        "listeners": f"PLAINTEXT://{host}:{node.port},CONTROLLER://{host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": str(partitions),
        "num.recovery.threads.per.data.dir": "1",
        "offsets.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        # `down` stops every node at once. A broker's controlled shutdown waits (up to 5 minutes)
        # for the controller quorum to commit it, and the nodes here are also that quorum: a node
        # that acts on its SIGTERM after a majority of the others have exited (a loaded host, a
        # GC pause) waits for a commit that cannot come and is SIGKILLed at the end of the grace.
        # The leader moves it would make have nowhere to go when all nodes stop; each node's own
        # clean shutdown (logs flushed, no recovery at the next `up`) does not depend on it.
        "controlled.shutdown.enable": "false",
        # As the single local broker: a monitor's raw packets are transient.
        "log.retention.hours": "24",
        "log.retention.bytes": str(1 << 30),
        "log.segment.bytes": str(128 << 20),
        **replication_defaults(len(nodes)),
    }


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    """A Java ``.properties`` file, written whole (a reader never sees half of it)."""
    text = "".join(f"{key}={_escape(value)}\n" for key, value in props.items())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, path)


# -- ports ----------------------------------------------------------------------------------------


def free_ports(count: int, host: str = "127.0.0.1", *, avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct free ports below the kernel's ephemeral range (a port ``bind(0)`` hands
    out can be handed out again, to an outgoing connection, before our JVM binds it), none of
    ``avoid``."""
    avoided = set(avoid)
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    ports: list[int] = []
    for _ in range(count * 200):
        if len(ports) == count:
            return ports
        port = rng.randrange(20000, min(low, 32768))
        if port in ports or port in avoided:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        ports.append(port)
    if len(ports) == count:
        return ports
    raise ClusterError(f"no {count} free ports on {host} in 20000-32767")


# -- processes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterProcess:
    """One process of the record: what it is, its pid and ports, and arguments its command line
    must hold to be ours (a pid the system reused for something else is not)."""

    name: str
    role: str
    pid: int
    ports: dict[str, int]
    log: str
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        if not _pid_alive(self.pid):
            return False
        try:
            args = Path(f"/proc/{self.pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return True  # no /proc: trust the pid
        return all(a in args for a in self.argv)


@dataclass(frozen=True)
class ClusterStatus:
    up: bool
    record: dict[str, Any]
    processes: list[tuple[ClusterProcess, bool]]
    #: the brokers the cluster metadata reports: ``{"node_id", "host", "port"}``
    kafka_brokers: list[dict[str, Any]]
    kafka_error: str
    #: the workers the master reports ALIVE
    spark_workers: list[dict[str, Any]]
    spark_error: str
    #: when not up: the record of the stopped cluster whose storage ``down`` kept (else empty)
    kept: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        kept = {k: self.kept.get(k) for k in ("brokers", "workers", "cluster_id", "stopped")}
        return {
            "up": self.up,
            "kept": kept if self.kept else None,
            **self.record,
            "processes": [{**asdict(p), "alive": alive} for p, alive in self.processes],
            "kafka_brokers": self.kafka_brokers,
            "kafka_error": self.kafka_error,
            "spark_workers_alive": self.spark_workers,
            "spark_error": self.spark_error,
        }

    def lines(self) -> list[str]:
        if not self.record:
            return ["not up", *([kept_line(self.kept)] if self.kept else [])]
        out = []
        for p, alive in self.processes:
            ports = ", ".join(f"{k} {v}" for k, v in p.ports.items())
            out.append(f"{p.name:<15} pid {p.pid:<8} {'alive' if alive else 'DEAD ':<6} {ports}")
        if self.kafka_error:
            out.append(f"kafka: no metadata ({self.kafka_error})")
        else:
            brokers = ", ".join(f"{b['node_id']}@{b['host']}:{b['port']}" for b in self.kafka_brokers)
            out.append(f"kafka: {len(self.kafka_brokers)} brokers in the metadata: {brokers}")
        if self.spark_error:
            out.append(f"spark: no answer from the master ({self.spark_error})")
        else:
            out.append(f"spark: {len(self.spark_workers)} workers ALIVE at {self.record.get('master_url')}")
        return out


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Something holds ``host:port``, so a JVM could not bind it (``netmon.broker``'s check)."""
    return _port_in_use(host, port)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _terminate(procs: list[ClusterProcess], grace_s: float) -> list[str]:
    """SIGTERM every process of ``procs`` at once, wait up to ``grace_s``, SIGKILL what is left."""
    running = [p for p in procs if p.alive()]
    for p in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    said: dict[str, str] = {p.name: "not running" for p in procs}
    left = list(running)
    while left and time.monotonic() < deadline:
        for p in left:
            _reap(p.pid)
        left = [p for p in left if _pid_alive(p.pid)]
        time.sleep(0.1)
    for p in running:
        said[p.name] = f"stopped (pid {p.pid})"
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        said[p.name] = f"killed (pid {p.pid} ignored SIGTERM for {grace_s:.0f}s)"
    end = time.monotonic() + 10.0
    while any(_pid_alive(p.pid) for p in left) and time.monotonic() < end:
        for p in left:
            _reap(p.pid)
        time.sleep(0.05)
    return [f"{p.name}: {said[p.name]}" for p in procs]


def kept_line(kept: Mapping[str, Any]) -> str:
    """One line on a stopped cluster whose storage is kept."""
    return (
        f"storage of a stopped cluster kept ({kept.get('brokers')} brokers, cluster id "
        f"{kept.get('cluster_id')}, stopped {kept.get('stopped')}): `netmon cluster up --brokers "
        f"{kept.get('brokers')}` restarts it, `netmon cluster down --wipe` removes it"
    )


# -- the cluster ----------------------------------------------------------------------------------


class LocalCluster:
    """The project's local multi-process cluster under ``<state_dir>/cluster``."""

    def __init__(self, cfg: Config, *, host: str = "127.0.0.1") -> None:
        self.cfg = cfg
        self.host = host
        self.home = Path(cfg.paths.state_dir) / "cluster"
        self.record_file = self.home / "cluster.json"
        self.kept_file = self.home / "kept.json"

    # -- the record --------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The record of the cluster ``up`` started (empty when there is none)."""
        return _read_json(self.record_file)

    def kept(self) -> dict[str, Any]:
        """The record of the stopped cluster whose storage ``down`` kept (empty when there is none)."""
        return _read_json(self.kept_file)

    def processes(self, record: Mapping[str, Any] | None = None) -> list[ClusterProcess]:
        rec = self.record() if record is None else record
        return [ClusterProcess(**p) for p in rec.get("processes", [])]

    def _save(self, record: Mapping[str, Any], path: Path | None = None) -> None:
        target = self.record_file if path is None else path
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, target)

    # -- lifecycle ---------------------------------------------------------------------------------
    def up(
        self,
        brokers: int = 3,
        workers: int = 2,
        *,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        timeout_s: float = 180.0,
    ) -> tuple[dict[str, Any], bool]:
        """Start the cluster and return ``(record, reused)`` once the metadata lists every broker and
        the master every worker ALIVE. A cluster already up is reused (``reused`` True) whatever
        its size; one with a dead process is an error (``down`` first). When ``down`` kept the
        storage of a stopped cluster, that cluster is restarted (``record["restarted"]`` True): the
        same nodes, ports and storage; ``brokers`` must be its number of brokers (``workers`` may
        differ: a new worker gets new ports)."""
        if brokers < 1 or workers < 0 or worker_cores < 1:
            raise ClusterError(
                f"expected brokers >= 1, workers >= 0, worker cores >= 1; got {brokers}, {workers}, "
                f"{worker_cores}"
            )
        current = self.record()
        if current:
            dead = [p.name for p in self.processes(current) if not p.alive()]
            if dead:
                raise ClusterError(
                    f"the cluster in {self.home} is partly down ({', '.join(dead)} not running): "
                    "run `netmon cluster down` first"
                )
            return current, True
        kept = self.kept()
        layout = self._check_kept(kept, brokers) if kept else None
        java = shutil.which("java")
        if java is None:
            raise ClusterError("Java not found on PATH: Kafka and Spark need Java 17 or newer")
        classpath = ensure_jars(self.cfg.paths.cache_dir, "broker").classpath
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if layout is None:
            # From nothing: storage left here (an `up` that failed) belongs to another quorum.
            shutil.rmtree(self.home, ignore_errors=True)
            self.home.mkdir(parents=True)
            ports = free_ports(2 * brokers + 2 + 2 * workers, self.host)
            nodes = [KafkaNode(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(brokers)]
            master_port, master_webui = ports[2 * brokers], ports[2 * brokers + 1]
            worker_ports = [
                (ports[2 * brokers + 2 + 2 * i], ports[2 * brokers + 3 + 2 * i]) for i in range(workers)
            ]
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            created = now
        else:
            nodes, (master_port, master_webui), worker_ports = layout
            worker_ports = worker_ports[:workers]
            if len(worker_ports) < workers:
                taken = [p for n in nodes for p in (n.port, n.controller_port)]
                taken += [master_port, master_webui, *(p for w in layout[2] for p in w)]
                extra = free_ports(2 * (workers - len(worker_ports)), self.host, avoid=taken)
                worker_ports += [(extra[i], extra[i + 1]) for i in range(0, len(extra), 2)]
            cluster_id = str(kept["cluster_id"])
            created = str(kept.get("created") or kept.get("started") or "")
        specs = [WorkerSpec(worker_cores, worker_memory, port, webui) for port, webui in worker_ports]
        record: dict[str, Any] = {
            "host": self.host,
            "cluster_id": cluster_id,
            "brokers": brokers,
            "workers": workers,
            "bootstrap_servers": ",".join(f"{self.host}:{n.port}" for n in nodes),
            "master_url": f"spark://{self.host}:{master_port}",
            "master_webui": f"http://{self.host}:{master_webui}",
            "created": created,
            "started": now,
            "restarted": layout is not None,
            "processes": [],
        }
        try:
            self._start_kafka(record, nodes, java, classpath, format_storage=layout is None)
            self._start_spark(record, master_port, master_webui, specs)
            self._wait(record, nodes, master_webui, workers, timeout_s)
        except BaseException:
            _terminate(self.processes(record), 15.0)
            self.record_file.unlink(missing_ok=True)  # a kept cluster's kept.json stays: `up` again
            raise
        self.kept_file.unlink(missing_ok=True)
        log.info(
            "cluster restarted" if layout else "cluster up",
            extra={"bootstrap": record["bootstrap_servers"], "master": record["master_url"]},
        )
        return record, False

    def _check_kept(
        self, kept: Mapping[str, Any], brokers: int
    ) -> tuple[list[KafkaNode], tuple[int, int], list[tuple[int, int]]]:
        """The kept cluster's nodes, master ports and worker ports, once its size matches
        ``brokers``, its storage is there and every recorded port is free; else a one-line error."""
        wipe = "`netmon cluster down --wipe` first to start a new cluster"
        if kept.get("brokers") != brokers:
            raise ClusterError(
                f"the stopped cluster kept in {self.home} has {kept.get('brokers')} brokers, not {brokers}: "
                f"`netmon cluster up --brokers {kept.get('brokers')}` restarts it; {wipe}"
            )
        if kept.get("host") != self.host or not kept.get("cluster_id"):
            raise ClusterError(f"the record {self.kept_file} is not of a cluster on {self.host}: {wipe}")
        procs = self.processes(kept)
        nodes = sorted(
            (
                KafkaNode(int(p.name.split("-", 1)[1]), p.ports["client"], p.ports["controller"])
                for p in procs
                if p.role == "kafka"
            ),
            key=lambda n: n.node_id,
        )
        masters = [p for p in procs if p.role == "spark-master"]
        workers = sorted(
            (p for p in procs if p.role == "spark-worker"), key=lambda p: int(p.name.rsplit("-", 1)[1])
        )
        if [n.node_id for n in nodes] != list(range(1, brokers + 1)) or len(masters) != 1:
            raise ClusterError(f"the record {self.kept_file} lacks processes of the cluster: {wipe}")
        for node in nodes:
            meta = self.home / f"kafka-{node.node_id}" / "data" / META_PROPERTIES
            if not meta.is_file():
                raise ClusterError(f"the kept storage of kafka-{node.node_id} is missing ({meta}): {wipe}")
        for p in procs:
            for kind, port in p.ports.items():
                if port_in_use(port, self.host):
                    raise ClusterError(
                        f"port {port} ({p.name} {kind}) of the stopped cluster kept in {self.home} is "
                        f"in use by another process: stop it and `netmon cluster up` again, or {wipe} "
                        "on new ports"
                    )
        master = (masters[0].ports["master"], masters[0].ports["webui"])
        return nodes, master, [(w.ports["worker"], w.ports["webui"]) for w in workers]

    def down(self, grace_s: float = 30.0, *, wipe: bool = False) -> list[str]:
        """Stop workers, then the master, then the brokers (SIGTERM, ``grace_s``, SIGKILL); move the
        record to ``kept.json`` (the next ``up`` restarts the cluster with its storage), or with
        ``wipe`` remove the whole cluster directory. One line per process and one on the storage;
        ``["not up", ...]`` when there is no record (``wipe`` then still removes kept storage)."""
        record = self.record()
        if not record:
            kept = self.kept()
            if wipe and self.home.exists():
                shutil.rmtree(self.home)
                return ["not up", f"storage removed ({self.home})"]
            return ["not up", *([kept_line(kept)] if kept else [])]
        procs = self.processes(record)
        said = []
        for role in STOP_ORDER:
            said += _terminate([p for p in procs if p.role == role], grace_s)
        alive = [p.name for p in procs if p.alive()]
        if alive:
            raise ClusterError(f"still running after SIGKILL: {', '.join(alive)}; record kept")
        if wipe:
            shutil.rmtree(self.home)
            said.append(f"storage removed ({self.home})")
        else:
            kept = {**record, "stopped": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            self._save(kept, self.kept_file)
            self.record_file.unlink(missing_ok=True)
            said.append(kept_line(kept))
        log.info("cluster down", extra={"processes": len(procs), "wipe": wipe})
        return said

    def status(self, timeout_s: float = 5.0) -> ClusterStatus:
        """Each process alive or dead, the brokers in the metadata, the workers ALIVE at the master."""
        record = self.record()
        if not record:
            return ClusterStatus(False, {}, [], [], "", [], "", self.kept())
        procs = [(p, p.alive()) for p in self.processes(record)]
        brokers: list[dict[str, Any]] = []
        kafka_error = spark_error = ""
        try:
            brokers = metadata_brokers(record["bootstrap_servers"], timeout_s)
        except Exception as exc:  # noqa: BLE001 - reported, not raised: status shows what it can
            kafka_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        workers: list[dict[str, Any]] = []
        try:
            webui = int(record["master_webui"].rsplit(":", 1)[1])
            workers = [
                {k: w.get(k) for k in ("id", "host", "port", "cores", "memory", "state")}
                for w in alive_workers(master_state(record["host"], webui, timeout_s))
            ]
        except Exception as exc:  # noqa: BLE001 - as above
            spark_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        up = all(alive for _, alive in procs)
        return ClusterStatus(up, record, procs, brokers, kafka_error, workers, spark_error)

    # -- internals ---------------------------------------------------------------------------------
    def _start_kafka(
        self,
        record: dict[str, Any],
        nodes: list[KafkaNode],
        java: str,
        classpath: str,
        *,
        format_storage: bool = True,
    ) -> None:
        """Write every node's properties, format every log dir with the record's cluster id (not a
        kept cluster's: its storage is formatted), then start the nodes."""
        for node in nodes:
            home = self.home / f"kafka-{node.node_id}"
            (home / "logs").mkdir(parents=True, exist_ok=True)
            settings = node_properties(
                node, nodes, self.host, home / "data", partitions=self.cfg.kafka.partitions
            )
            write_properties(home / "server.properties", settings)
        if format_storage:
            self._format(record["cluster_id"], nodes, java, classpath)
        for node in nodes:
            home = self.home / f"kafka-{node.node_id}"
            props = home / "server.properties"
            jvm = kafka_jvm_args(java, classpath, self.cfg.kafka.heap, home / "logs")
            with (home / "kafka.out").open("ab") as out:
                pid = subprocess.Popen(
                    [*jvm, "kafka.Kafka", str(props)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # outlives `netmon cluster up`; Ctrl-C must not reach it
                ).pid
            ports = {"client": node.port, "controller": node.controller_port}
            argv = ["kafka.Kafka", str(props)]
            name = f"kafka-{node.node_id}"
            self._add(record, ClusterProcess(name, "kafka", pid, ports, str(home / "kafka.out"), argv))

    def _format(self, cluster_id: str, nodes: list[KafkaNode], java: str, classpath: str) -> None:
        """Format every node's log dir with the same cluster id, in parallel (each is a JVM start).
        No ``--standalone`` / ``--initial-controllers``: the quorum is the static voters list."""
        running = []
        for node in nodes:
            home = self.home / f"kafka-{node.node_id}"
            jvm = kafka_jvm_args(java, classpath, self.cfg.kafka.heap, home / "logs")
            # "--cluster-id=ID": a base64 id may begin with "-", which argparse would take for an option
            cmd = [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}"]
            cmd += ["-c", str(home / "server.properties")]
            running.append(
                (node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            )
        failed = []
        for node, proc in running:
            said, _ = proc.communicate()
            if proc.returncode != 0:
                lines = (said or "").strip().splitlines()
                failed.append(f"node {node.node_id}: {lines[-1] if lines else proc.returncode}")
        if failed:
            raise ClusterError(f"formatting Kafka storage failed: {'; '.join(failed)}")

    def _start_spark(self, record: dict[str, Any], port: int, webui: int, specs: list[WorkerSpec]) -> None:
        home = self.home / "spark-master"
        home.mkdir(exist_ok=True)
        pid = start_master(self.host, port, webui, home, home / "spark.out")
        self._add(
            record,
            ClusterProcess(
                "spark-master",
                "spark-master",
                pid,
                {"master": port, "webui": webui},
                str(home / "spark.out"),
                [MASTER_CLASS, str(port)],
            ),
        )
        for i, spec in enumerate(specs, 1):
            home = self.home / f"spark-worker-{i}"
            home.mkdir(exist_ok=True)
            pid = start_worker(record["master_url"], self.host, spec, home, home / "spark.out")
            self._add(
                record,
                ClusterProcess(
                    f"spark-worker-{i}",
                    "spark-worker",
                    pid,
                    {"worker": spec.port, "webui": spec.webui_port},
                    str(home / "spark.out"),
                    [str(home / "work")],
                ),
            )

    def _add(self, record: dict[str, Any], proc: ClusterProcess) -> None:
        """Record a started process at once, so ``down`` finds it even if ``up`` dies now."""
        record["processes"].append(asdict(proc))
        self._save(record)

    def _wait(
        self, record: dict[str, Any], nodes: list[KafkaNode], webui: int, workers: int, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        bootstrap = record["bootstrap_servers"]
        last = "no answer"
        while True:
            self._check_alive(record)
            try:
                found = metadata_brokers(bootstrap, 3.0)
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last = type(exc).__name__
            else:
                if len(found) >= len(nodes):
                    break
                last = f"{len(found)} of {len(nodes)} brokers in the metadata"
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the Kafka cluster at {bootstrap} was not ready within {timeout_s:.0f}s ({last})"
                )
            time.sleep(0.5)
        left = max(5.0, deadline - time.monotonic())
        try:
            wait_for_workers(self.host, webui, workers, left)
        except SparkStandaloneError:
            self._check_alive(record)
            raise

    def _check_alive(self, record: Mapping[str, Any]) -> None:
        for p in self.processes(record):
            if not p.alive():
                _reap(p.pid)
                raise ClusterError(f"{p.name} exited at start: {_reason(Path(p.log))}")


def metadata_brokers(bootstrap: str, timeout_s: float) -> list[dict[str, Any]]:
    """The brokers the cluster's metadata lists (a real DescribeCluster request)."""
    from kafka.admin import KafkaAdminClient

    ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=ms,
        bootstrap_timeout_ms=ms,
        client_id="netmon-cluster",
    )
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    return sorted(
        (
            {"node_id": b["broker_id"], "host": b["host"], "port": b["port"]}
            for b in described["brokers"]
            if not b.get("is_fenced")  # registered but not (yet, or any more) serving
        ),
        key=lambda b: b["node_id"],
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _reason(log_file: Path) -> str:
    """The most telling line of a process's output, for a one-line error."""
    try:
        text = log_file.read_text(errors="replace")[-20000:]
    except OSError:
        return f"see {log_file}"
    for pattern in (r"Address already in use[^\n]*", r"(?:ERROR|FATAL)[^\n]*", r"Exception[^\n]*"):
        found = re.findall(pattern, text)
        if found:
            return found[-1].strip()[:300]
    return f"see {log_file}"
