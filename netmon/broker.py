"""A local single-node Apache Kafka broker (KRaft, combined broker + controller), run from the jars.

``netmon broker start|stop|status`` drive :class:`LocalBroker`. Everything lives under
``<state_dir>/kafka/``: ``server.properties`` (written from the configuration at each start),
``data/`` (formatted on first start with ``kafka.tools.StorageTool format --standalone``),
``logs/server.log`` (log4j2), ``broker.out`` (the JVM's stdout/stderr) and ``broker.pid``.
The broker listens on 127.0.0.1 unless ``[kafka] host`` says otherwise.

``start(secure=True)`` (``netmon broker start --secure``, docs/security.md) replaces the plaintext
listener with SASL_SSL: TLS with a self-signed certificate made by Java's ``keytool`` into
``<state_dir>/kafka/secure/`` (``ca.pem`` is what clients trust), and SASL authentication of one
user whose password is read from an environment variable at each start — ``[kafka]
sasl_username`` and ``sasl_password_env`` when the configuration already uses SASL, else ``netmon``
and ``NETMON_KAFKA_PASSWORD`` — with the mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. The
controller listener authenticates the same way (SASL_SSL, PLAIN). ``server.properties`` then holds
the password: it is written mode 0600.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from netmon.config import Config, ConfigError, KafkaConfig
from netmon.jvm_deps import ensure_jars
from netmon.kafka_security import client_options, jaas_config, jaas_quote, password
from netmon.orphans import die_with_parent

__all__ = [
    "DEFAULT_PASSWORD_ENV",
    "DEFAULT_USER",
    "BrokerError",
    "BrokerStatus",
    "LocalBroker",
    "kafka_jvm_args",
    "list_topics",
    "wait_for_metadata",
]

log = logging.getLogger(__name__)

#: the secure broker's user when ``[kafka] sasl_username`` is empty
DEFAULT_USER = "netmon"
#: the variable holding its password when ``[kafka] sasl_password_env`` is empty
DEFAULT_PASSWORD_ENV = "NETMON_KAFKA_PASSWORD"
#: SASL mechanisms the secure broker offers (PLAIN from server.properties, SCRAM from its metadata)
SECURE_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: days the self-signed certificate of ``--secure`` is valid; a start makes a new one when fewer than
#: ``CERT_RENEW_DAYS`` are left, or when ``[kafka] host`` changed (or ``secure/`` was deleted)
CERT_DAYS = 825
CERT_RENEW_DAYS = 30


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
    #: the client listener's protocol: PLAINTEXT, or SASL_SSL (``start(secure=True)``)
    security_protocol: str = "PLAINTEXT"

    def line(self) -> str:
        if not self.running:
            return f"stopped (port {self.port}, state {self.state_dir})"
        topics = ", ".join(self.topics) if self.topics else "none"
        secure = "" if self.security_protocol == "PLAINTEXT" else f" ({self.security_protocol})"
        return f"running pid {self.pid} on {self.host}:{self.port}{secure}; topics: {topics}"


def _port_in_use(host: str, port: int) -> bool:
    """Something listens on ``host:port`` (or holds it otherwise), so a JVM could not bind it. With
    ``SO_REUSEADDR``, as the JVMs bind: connections in TIME_WAIT do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def kafka_jvm_args(java: str, classpath: str, heap: str, logs_dir: Path) -> list[str]:
    """A Kafka node's JVM command line before the main class (the local broker's, a cluster node's)."""
    log4j = Path(str(resources.files("netmon") / "jvm" / "log4j2.properties"))
    return [
        java,
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={logs_dir}",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
    ]


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


def list_topics(
    bootstrap: str, timeout_s: float = 5.0, *, security: Mapping[str, Any] | None = None
) -> list[str]:
    """Topic names, through a real metadata request (kafka-python's admin client).

    ``security``: :func:`netmon.kafka_security.client_options` of the cluster (none: PLAINTEXT).
    """
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(timeout_s * 1000),
        bootstrap_timeout_ms=int(timeout_s * 1000),
        client_id="netmon-status",
        **(security or {}),
    )
    try:
        return sorted(t for t in admin.list_topics() if not t.startswith("__"))
    finally:
        admin.close()


def wait_for_metadata(bootstrap: str, timeout_s: float, *, security: Mapping[str, Any] | None = None) -> None:
    """Return once a metadata request to ``bootstrap`` is answered; raise ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            list_topics(
                bootstrap, timeout_s=min(5.0, max(1.0, deadline - time.monotonic())), security=security
            )
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
        #: ``--secure``: the broker's keystore and the certificate clients trust (``ca.pem``)
        self.secure_dir = self.home / "secure"
        self.ca_file = self.secure_dir / "ca.pem"
        self._keystore = self.secure_dir / "broker.p12"
        self._keystore_pass = self.secure_dir / "keystore-password"
        self._cert_info = self.secure_dir / "certificate.json"

    # -- queries -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.cfg.kafka.host}:{self.cfg.kafka.port}"

    def _pid_info(self) -> dict[str, Any]:
        try:
            info = json.loads(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def pid(self) -> int | None:
        pid = int(self._pid_info().get("pid", 0))
        return pid if pid > 0 and _pid_alive(pid) else None

    def secure(self) -> bool:
        """The running broker was started with ``secure=True`` (SASL_SSL)."""
        return self.pid() is not None and bool(self._pid_info().get("secure"))

    @property
    def user(self) -> str:
        """The secure broker's SASL user: ``[kafka] sasl_username`` when the configuration uses
        SASL, else :data:`DEFAULT_USER`."""
        return self.cfg.kafka.sasl_username if self.cfg.kafka.sasl else DEFAULT_USER

    @property
    def password_env(self) -> str:
        """The variable holding its password: ``[kafka] sasl_password_env`` when the configuration
        uses SASL, else :data:`DEFAULT_PASSWORD_ENV`."""
        return self.cfg.kafka.sasl_password_env if self.cfg.kafka.sasl else DEFAULT_PASSWORD_ENV

    def client_kafka(self, mechanism: str | None = None) -> KafkaConfig:
        """The ``[kafka]`` section a client of the secure broker needs: SASL_SSL, its user and
        password variable, ``ca.pem`` as the CA file, and ``mechanism`` (default: ``[kafka]
        sasl_mechanism``). The certificate must exist (``start(secure=True)`` makes it)."""
        return dataclasses.replace(
            self.cfg.kafka,
            security_protocol="SASL_SSL",
            sasl_mechanism=mechanism or self.cfg.kafka.sasl_mechanism,
            sasl_username=self.user,
            sasl_password_env=self.password_env,
            ssl_cafile=str(self.ca_file),
            ssl_certfile="",
            ssl_keyfile="",
        )

    def _security(self, secure: bool) -> dict[str, Any]:
        """kafka-python options for this broker's own checks (PLAIN: it works before SCRAM is set)."""
        return client_options(self.client_kafka("PLAIN")) if secure else {}

    def status(self, *, with_topics: bool = True) -> BrokerStatus:
        pid = self.pid()
        secure = pid is not None and bool(self._pid_info().get("secure"))
        topics: list[str] = []
        if pid and with_topics:
            with contextlib.suppress(Exception):
                topics = list_topics(self.bootstrap, timeout_s=3.0, security=self._security(secure))
        return BrokerStatus(
            running=pid is not None,
            host=self.cfg.kafka.host,
            port=self.cfg.kafka.port,
            pid=pid,
            topics=topics,
            state_dir=str(self.home),
            security_protocol="SASL_SSL" if secure else "PLAINTEXT",
        )

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, *, secure: bool = False, supervised: Mapping[str, str] | None = None) -> BrokerStatus:
        """Start the broker and return once it answers a metadata request. Harmless if running
        (with the same ``secure``).

        ``secure``: a SASL_SSL listener instead of PLAINTEXT (module docstring); the password
        variable must be set, else :class:`BrokerError` names it. ``supervised``: started by
        ``netmon up``, whose tag these environment variables are: the JVM carries them and gets
        SIGTERM when the calling thread ends (``netmon.orphans``); else it runs on its own.
        """
        k = self.cfg.kafka
        secret = self._password() if secure else None
        if self.pid() is not None:
            if self.secure() != secure:
                running = "with --secure" if self.secure() else "without --secure"
                raise BrokerError(
                    f"the broker is already running {running}; stop it first (netmon broker stop)"
                )
            wait_for_metadata(self.bootstrap, k.start_timeout_s, security=self._security(secure))
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
        if secret is not None:
            self._ensure_certificate(java)
        self._write_properties(secret)
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
                env=None if supervised is None else {**os.environ, **supervised},
                preexec_fn=None if supervised is None else die_with_parent(),
            )
        info = {"pid": proc.pid, "port": k.port, "host": k.host, "secure": secure}
        self.pid_file.write_text(json.dumps(info))
        deadline = time.monotonic() + k.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(f"Kafka broker exited at start (code {proc.returncode}): {self._reason()}")
            try:
                wait_for_metadata(self.bootstrap, 2.0, security=self._security(secure))
            except TimeoutError:
                continue
            if secret is not None:
                try:
                    self._add_scram_credentials(secret)
                except BaseException:
                    self._terminate(proc.pid, 10.0)
                    self.pid_file.unlink(missing_ok=True)
                    raise
            log.info("broker started", extra={"pid": proc.pid, "bootstrap": self.bootstrap, "secure": secure})
            return self.status()
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
        return kafka_jvm_args(java, classpath, self.cfg.kafka.heap, self.logs_dir)

    def _write_properties(self, secret: str | None = None) -> None:
        """``server.properties`` (mode 0600); ``secret``: the secure broker's password (SASL_SSL)."""
        k = self.cfg.kafka
        listener = "PLAINTEXT" if secret is None else "SASL_SSL"
        controller = "PLAINTEXT" if secret is None else "SASL_SSL"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{k.host}:{k.controller_port}",
            "listeners": f"{listener}://{k.host}:{k.port},CONTROLLER://{k.host}:{k.controller_port}",
            "advertised.listeners": f"{listener}://{k.host}:{k.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"CONTROLLER:{controller},{listener}:{listener}",
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
        if secret is not None:
            lines |= self._secure_properties(secret)
        text = "".join(f"{key}={_escape(value)}\n" for key, value in lines.items())
        # Written to a new file created 0600: the secure broker's password is in it.
        tmp = self.properties.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(tmp, self.properties)

    # -- --secure ------------------------------------------------------------------------------
    def _password(self) -> str:
        """The secure broker's password, from its environment variable (BrokerError if unset)."""
        if re.fullmatch(r"[A-Za-z0-9._-]+", self.user) is None:
            raise BrokerError(
                f"[kafka] sasl_username {self.user!r}: the local broker takes letters, digits, '.', '_' "
                "and '-' only"
            )
        try:
            return str(password(self._sasl_kafka()))
        except ConfigError:
            raise BrokerError(
                f"netmon broker start --secure: set the environment variable {self.password_env} to "
                "the password of the broker's user (docs/security.md)"
            ) from None

    def _sasl_kafka(self) -> KafkaConfig:
        """The user and password variable of :meth:`client_kafka`, without the CA file (it may not
        exist yet)."""
        return dataclasses.replace(
            self.cfg.kafka,
            security_protocol="SASL_PLAINTEXT",
            sasl_username=self.user,
            sasl_password_env=self.password_env,
            ssl_cafile="",
            ssl_certfile="",
            ssl_keyfile="",
        )

    def _secure_properties(self, secret: str) -> dict[str, str]:
        """SASL_SSL on the client and controller listeners: one user, PLAIN and SCRAM, TLS."""
        # The PLAIN server module: its own login (inter-broker, controller) and its users as
        # user_<name>="<password>" options.
        plain = jaas_config("PLAIN", self.user, secret).removesuffix(";")
        plain += f" user_{self.user}={jaas_quote(secret)};"
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        keystore_password = self._keystore_pass.read_text().strip()
        props = {
            "sasl.enabled.mechanisms": ",".join(SECURE_MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self._keystore),
            "ssl.keystore.password": keystore_password,
            "ssl.key.password": keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "none",
        }
        for mechanism in SECURE_MECHANISMS[1:]:
            props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = scram
        return props

    def _ensure_certificate(self, java: str) -> None:
        """A self-signed certificate for ``[kafka] host`` in a PKCS12 keystore, made once with Java's
        ``keytool`` (again when the host changed or a file is missing); ``ca.pem`` is its PEM copy."""
        host = self.cfg.kafka.host
        with contextlib.suppress(OSError, ValueError, TypeError):
            made = json.loads(self._cert_info.read_text())
            fresh = float(made.get("until", 0)) - time.time() > CERT_RENEW_DAYS * 86400
            if made.get("host") == host and fresh and self._keystore.is_file() and self.ca_file.is_file():
                return
        keytool = Path(java).resolve().parent / "keytool"
        if not keytool.is_file():
            found = shutil.which("keytool")
            if found is None:
                raise BrokerError(
                    "keytool not found (it comes with Java): --secure makes its certificate with it"
                )
            keytool = Path(found)
        self.secure_dir.mkdir(parents=True, exist_ok=True)
        self.secure_dir.chmod(0o700)
        for path in (self._keystore, self.ca_file, self._cert_info):
            path.unlink(missing_ok=True)
        keystore_password = secrets.token_urlsafe(24)
        fd = os.open(self._keystore_pass, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(keystore_password)
        names = {"ip:127.0.0.1", "dns:localhost"}
        names.add(f"ip:{host}" if _is_ip(host) else f"dns:{host}")
        # The password goes through the environment (-storepass:env), never the command line.
        env = {**os.environ, "NETMON_KEYSTORE_PASSWORD": keystore_password}
        store = [
            "-keystore",
            str(self._keystore),
            "-storetype",
            "PKCS12",
            "-storepass:env",
            "NETMON_KEYSTORE_PASSWORD",
        ]
        commands = [
            [
                "-genkeypair",
                "-alias",
                "broker",
                "-keyalg",
                "RSA",
                "-keysize",
                "2048",
                "-validity",
                str(CERT_DAYS),
                "-dname",
                "CN=netmon local Kafka broker",
                "-ext",
                "SAN=" + ",".join(sorted(names)),
                "-ext",
                "BC:c=ca:true,pathlen:0",
                *store,
            ],
            ["-exportcert", "-rfc", "-alias", "broker", "-file", str(self.ca_file), *store],
        ]
        for args in commands:
            proc = subprocess.run([str(keytool), *args], capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                detail = (proc.stderr or proc.stdout).strip().splitlines()
                raise BrokerError(f"keytool {args[0]} failed: {detail[-1] if detail else proc.returncode}")
        self._keystore.chmod(0o600)
        self._cert_info.write_text(json.dumps({"host": host, "until": time.time() + CERT_DAYS * 86400}))
        log.info("broker certificate made", extra={"ca_file": str(self.ca_file), "host": host})

    def _add_scram_credentials(self, secret: str) -> None:
        """Give the user SCRAM-SHA-256 and -512 credentials (the broker keeps them in its metadata)
        with the current password, over the PLAIN login that server.properties provides."""
        from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap, client_id="netmon-broker", **self._security(True)
        )
        try:
            for mechanism in SECURE_MECHANISMS[1:]:  # one per request: the broker refuses two for a user
                upsert = UserScramCredentialUpsertion(self.user, mechanism, secret)
                error = admin.alter_user_scram_credentials([upsert]).get(self.user)
                if error:
                    raise BrokerError(f"setting the {mechanism} credentials of {self.user!r} failed: {error}")
        finally:
            admin.close()

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


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _escape(value: str) -> str:
    """A Java ``.properties`` value (read as ISO-8859-1): backslashes, line breaks, leading spaces
    and every character outside printable ASCII escaped."""
    out = []
    for i, c in enumerate(value):
        if c == "\\":
            out.append("\\\\")
        elif c == " " and i == 0:
            out.append("\\ ")
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.extend(f"\\u{unit:04x}" for unit in _utf16(c))
    return "".join(out)


def _utf16(c: str) -> list[int]:
    data = c.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
