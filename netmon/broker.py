"""A local single-node Apache Kafka broker (KRaft, combined broker + controller), run from the jars.

``netmon broker start|stop|status`` drive :class:`LocalBroker`. Everything lives under
``<state_dir>/kafka/``: ``server.properties`` (written from the configuration at each start),
``data/`` (formatted on first start with ``kafka.tools.StorageTool format --standalone``),
``logs/server.log`` (log4j2), ``broker.out`` (the JVM's stdout/stderr) and ``broker.pid``.
The broker listens on 127.0.0.1 unless ``[kafka] host`` says otherwise.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from netmon.config import Config
from netmon.jvm_deps import ensure_jars

__all__ = ["BrokerError", "BrokerStatus", "LocalBroker", "list_topics", "wait_for_metadata"]

log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    """The broker could not be started or stopped; the message gives the reason in one line."""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    host: str
    port: int
    pid: int | None = None
    topics: list[str] = field(default_factory=list)
    state_dir: str = ""

    def line(self) -> str:
        if not self.running:
            return f"stopped (port {self.port}, state {self.state_dir})"
        topics = ", ".join(self.topics) if self.topics else "none"
        return f"running pid {self.pid} on {self.host}:{self.port}; topics: {topics}"


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own exited child not yet reaped) is not alive.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def list_topics(bootstrap: str, timeout_s: float = 5.0) -> list[str]:
    """Topic names, through a real metadata request (kafka-python's admin client)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(timeout_s * 1000),
        bootstrap_timeout_ms=int(timeout_s * 1000),
        client_id="netmon-status",
    )
    try:
        return sorted(t for t in admin.list_topics() if not t.startswith("__"))
    finally:
        admin.close()


def wait_for_metadata(bootstrap: str, timeout_s: float) -> None:
    """Return once a metadata request to ``bootstrap`` is answered; raise ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            list_topics(bootstrap, timeout_s=min(5.0, max(1.0, deadline - time.monotonic())))
            return
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last = exc
            time.sleep(0.3)
    raise TimeoutError(f"no metadata answer from {bootstrap} within {timeout_s:.0f}s ({last})")


class LocalBroker:
    """The project's own Kafka broker under ``<state_dir>/kafka``."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.home = Path(cfg.paths.state_dir) / "kafka"
        self.data_dir = self.home / "data"
        self.logs_dir = self.home / "logs"
        self.pid_file = self.home / "broker.pid"
        self.out_file = self.home / "broker.out"
        self.properties = self.home / "server.properties"

    # -- queries -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.cfg.kafka.host}:{self.cfg.kafka.port}"

    def pid(self) -> int | None:
        try:
            info = json.loads(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        pid = int(info.get("pid", 0))
        return pid if pid > 0 and _pid_alive(pid) else None

    def status(self, *, with_topics: bool = True) -> BrokerStatus:
        pid = self.pid()
        topics: list[str] = []
        if pid and with_topics:
            with contextlib.suppress(Exception):
                topics = list_topics(self.bootstrap, timeout_s=3.0)
        return BrokerStatus(
            running=pid is not None,
            host=self.cfg.kafka.host,
            port=self.cfg.kafka.port,
            pid=pid,
            topics=topics,
            state_dir=str(self.home),
        )

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> BrokerStatus:
        """Start the broker and return once it answers a metadata request. Harmless if running."""
        k = self.cfg.kafka
        if self.pid() is not None:
            wait_for_metadata(self.bootstrap, k.start_timeout_s)
            return self.status()
        java = shutil.which("java")
        if java is None:
            raise BrokerError("Java not found on PATH: the Kafka broker needs Java 17 or newer")
        for name, port in (("port", k.port), ("controller_port", k.controller_port)):
            if _port_in_use(k.host, port):
                raise BrokerError(
                    f"port {port} on {k.host} is already in use ([kafka] {name}); stop what uses it "
                    f"or choose another port in netmon.toml"
                )
        classpath = ensure_jars(self.cfg.paths.cache_dir, "broker").classpath
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._write_properties()
        jvm = self._jvm_args(java, classpath)
        if not (self.data_dir / "meta.properties").exists():
            self._format(jvm)
        with self.out_file.open("ab") as out:
            proc = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(self.properties)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in the terminal must not kill the broker mid-write
            )
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "port": k.port, "host": k.host}))
        deadline = time.monotonic() + k.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(f"Kafka broker exited at start (code {proc.returncode}): {self._reason()}")
            try:
                wait_for_metadata(self.bootstrap, 2.0)
                log.info("broker started", extra={"pid": proc.pid, "bootstrap": self.bootstrap})
                return self.status()
            except TimeoutError:
                continue
        self._terminate(proc.pid, 10.0)
        self.pid_file.unlink(missing_ok=True)
        raise BrokerError(f"Kafka broker did not answer within {k.start_timeout_s:.0f}s: {self._reason()}")

    def stop(self, timeout_s: float = 30.0) -> str:
        """Stop gracefully (SIGTERM, wait, then SIGKILL) and say what happened. Harmless if stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return "not running"
        how = self._terminate(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return how

    def kill(self, timeout_s: float = 15.0) -> int | None:
        """``kill -9`` the broker's JVM, as a crash would, and wait until it is gone; return its pid.

        Nothing is flushed and the pid file stays (as after a crash): ``start`` then recovers the
        log and starts again. For fault tests; ``stop`` is the graceful way. Harmless if stopped.
        """
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while _pid_alive(pid):
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka broker pid {pid} still alive {timeout_s:.0f}s after SIGKILL")
            self._reap(pid)
            time.sleep(0.05)
        self._reap(pid)
        log.info("broker killed", extra={"pid": pid})
        return pid

    # -- internals -----------------------------------------------------------------------------
    def _terminate(self, pid: int, timeout_s: float) -> str:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                self._reap(pid)
                return f"stopped (pid {pid})"
            self._reap(pid)
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._reap(pid)
        return f"killed (pid {pid} ignored SIGTERM for {timeout_s:.0f}s)"

    @staticmethod
    def _reap(pid: int) -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)

    def _jvm_args(self, java: str, classpath: str) -> list[str]:
        log4j = Path(str(resources.files("netmon") / "jvm" / "log4j2.properties"))
        heap = self.cfg.kafka.heap
        return [
            java,
            f"-Xmx{heap}",
            f"-Xms{heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.logs_dir}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            classpath,
        ]

    def _write_properties(self) -> None:
        k = self.cfg.kafka
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{k.host}:{k.controller_port}",
            "listeners": f"PLAINTEXT://{k.host}:{k.port},CONTROLLER://{k.host}:{k.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{k.host}:{k.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(k.partitions),
            "num.recovery.threads.per.data.dir": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # A monitor's raw packets are transient: keep a day or 1 GiB per partition.
            "log.retention.hours": "24",
            "log.retention.bytes": str(1 << 30),
            "log.segment.bytes": str(128 << 20),
        }
        self.properties.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))

    def _format(self, jvm: list[str]) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # "--cluster-id=ID": a base64 id may begin with "-", which argparse would take for an option
        cmd = [*jvm, "kafka.tools.StorageTool", "format", "--standalone", f"--cluster-id={cluster_id}"]
        proc = subprocess.run([*cmd, "-c", str(self.properties)], capture_output=True, text=True)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise BrokerError(
                f"formatting Kafka storage in {self.data_dir} failed: {detail[-1] if detail else ''}"
            )

    def _reason(self) -> str:
        """The most telling line of the broker's own output, for a one-line error."""
        text = ""
        for path in (self.out_file, self.logs_dir / "server.log"):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")[-20000:] + "\n"
        patterns = [
            r"Address already in use[^\n]*",
            r"UnsupportedClassVersionError[^\n]*",
            r"(?:ERROR|FATAL)[^\n]*",
            r"Exception[^\n]*",
        ]
        for pattern in patterns:
            found = re.findall(pattern, text)
            if found:
                return found[-1].strip()[:300]
        return f"see {self.out_file} and {self.logs_dir / 'server.log'}"
