"""The sections of ``netmon.toml`` (all but ``[alerts]``, in :mod:`netmon.config.alerts`).

Each section is a frozen, keyword-only dataclass whose ``__post_init__`` checks every value, so a
section is valid however it is built (from TOML by :func:`netmon.config.load_config`, or in code
with ``Config().replace(...)``); errors are one line naming the section and key.
"""

from __future__ import annotations

import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netmon.columns import parse_key
from netmon.config.checks import ConfigError, expect, port, positive

__all__ = [
    "BUDGET_SCOPES",
    "COMPRESSIONS",
    "JOIN_QUERY_KINDS",
    "RESULT_KINDS",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SHEDDING_STRATEGIES",
    "DashboardConfig",
    "DistinctQuery",
    "IngestConfig",
    "JoinQuery",
    "KafkaConfig",
    "PathsConfig",
    "PipelineConfig",
    "QueriesConfig",
    "SheddingConfig",
    "SparkConfig",
    "TopKQuery",
    "check_unique_names",
]

#: The result kinds the pipeline can run (``[pipeline] kinds``), each written to
#: ``results/<kind>/`` and republished on ``<prefix><kind>``; alert rules read them too.
#: ``sys`` is the pipeline's own statistics, a row per micro-batch of each query; ``features`` the
#: detection rows of the alert rules (``pipeline.features``, not run by default).
RESULT_KINDS: tuple[str, ...] = ("traffic", "topk", "distinct", "features", "joins", "shedding", "sys")
#: Producer compression codecs Kafka clients share (``[ingest] compression``).
COMPRESSIONS: tuple[str, ...] = ("lz4", "zstd", "gzip", "snappy", "none")
#: Smallest unit of a window: Spark's timestamps are microseconds.
_US = 1_000_000
#: Kafka's security protocols (``[kafka] security_protocol``): TLS and/or SASL authentication.
SECURITY_PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms netmon's clients speak (``[kafka] sasl_mechanism``).
SASL_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: The kinds of ``[[queries.join]]`` query (``query = ...``).
JOIN_QUERY_KINDS = ("handshake", "link")
#: The streaming join's load-shedding strategies (seed 003 §3.3; ``analytics.join_cost``).
SHEDDING_STRATEGIES: tuple[str, ...] = ("none", "cf", "inp", "pni")


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


def _query(kind: str, name: str) -> str:
    """``[[queries.<kind>]] 'name'``, after checking the name is not empty."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"[[queries.{kind}]] name: expected a non-empty query name, got {name!r}")
    return f"[[queries.{kind}]] {name!r}"


def _key(where: str, key: str, spec: str) -> None:
    try:
        parse_key(spec)
    except ValueError as exc:
        raise ConfigError(f"{where} {key}: {exc}") from None


def _windows(where: str, window_s: float, sub_window_s: float) -> None:
    """A sub-window of whole microseconds (Spark's precision) that divides the window."""
    for key, value in (("window_s", window_s), ("sub_window_s", sub_window_s)):
        positive(where, key, value)
    b_us, n_us = round(sub_window_s * _US), round(window_s * _US)
    expect(
        b_us >= 1 and math.isclose(b_us, sub_window_s * _US, abs_tol=1e-6),
        where,
        "sub_window_s",
        "a whole number of microseconds",
        sub_window_s,
    )
    expect(
        n_us >= b_us and n_us % b_us == 0 and math.isclose(n_us, window_s * _US, abs_tol=1e-6),
        where,
        "window_s",
        f"a multiple of sub_window_s = {sub_window_s:g}",
        window_s,
    )


@dataclass(frozen=True, kw_only=True)
class PathsConfig:
    """Where netmon keeps things; never inside the repository."""

    #: broker data and logs, pids, service logs
    state_dir: Path = field(default_factory=lambda: _xdg("XDG_STATE_HOME", ".local/state") / "netmon")
    #: results (Parquet) and Spark checkpoints
    data_dir: Path = field(default_factory=lambda: _xdg("XDG_DATA_HOME", ".local/share") / "netmon")
    #: downloaded JVM jars (the Kafka broker, Spark's Kafka connector); shared by every state dir
    cache_dir: Path = field(default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "netmon")


@dataclass(frozen=True, kw_only=True)
class KafkaConfig:
    """The Kafka cluster netmon talks to, and the local broker ``netmon broker`` runs."""

    #: empty: the local broker, ``<host>:<port>``
    bootstrap_servers: str = ""
    host: str = "127.0.0.1"
    port: int = 9092
    controller_port: int = 9093
    packets_topic: str = "netmon.packets"
    #: results go to ``<prefix><kind>`` (netmon.traffic, netmon.topk, ...)
    results_topic_prefix: str = "netmon."
    partitions: int = 2
    #: copies of each partition of the topics netmon creates; a cluster needs as many brokers
    replication_factor: int = 1
    #: those topics' ``min.insync.replicas`` (set when replication_factor > 1): copies that must
    #: have a write before an ``acks=all`` producer, as every netmon producer is, is answered
    min_insync_replicas: int = 1
    #: JVM heap of the local broker
    heap: str = "512m"
    start_timeout_s: float = 60.0
    #: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL authentication over TLS); every
    #: client (producers, consumers, admin, Spark's source) uses it (netmon.kafka_security)
    security_protocol: str = "PLAINTEXT"
    #: SASL_*: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl_mechanism: str = "SCRAM-SHA-512"
    #: SASL_*: the user name
    sasl_username: str = ""
    #: SASL_*: the name of the environment variable holding the password (never the password)
    sasl_password_env: str = ""
    #: SSL, SASL_SSL: PEM file of the CA certificates to trust (empty: the system's trust store)
    ssl_cafile: str = ""
    #: SSL, SASL_SSL: PEM client certificate chain, for brokers that require one (mutual TLS)
    ssl_certfile: str = ""
    #: its PEM private key (PKCS#8, unencrypted); empty when ssl_certfile holds the key too
    ssl_keyfile: str = ""

    def __post_init__(self) -> None:
        where = "[kafka]"
        expect(bool(self.host.strip()), where, "host", "a host name or address", self.host)
        port(where, "port", self.port)
        port(where, "controller_port", self.controller_port)
        expect(
            self.port != self.controller_port, where, "controller_port", "a port other than port", self.port
        )
        for key in ("packets_topic", "results_topic_prefix"):
            value = getattr(self, key)
            expect(bool(value) and not any(c.isspace() for c in value), where, key, "a topic name", value)
        expect(self.partitions >= 1, where, "partitions", "an integer >= 1", self.partitions)
        factor = self.replication_factor
        expect(factor >= 1, where, "replication_factor", "an integer >= 1", factor)
        expect(
            1 <= self.min_insync_replicas <= factor,
            where,
            "min_insync_replicas",
            f"an integer in 1..replication_factor = {factor}",
            self.min_insync_replicas,
        )
        positive(where, "start_timeout_s", self.start_timeout_s)
        self._check_security(where)

    def _check_security(self, where: str) -> None:
        protocol = self.security_protocol
        expect(
            protocol in SECURITY_PROTOCOLS, where, "security_protocol", _one_of(SECURITY_PROTOCOLS), protocol
        )
        expect(
            self.sasl_mechanism in SASL_MECHANISMS,
            where,
            "sasl_mechanism",
            _one_of(SASL_MECHANISMS),
            self.sasl_mechanism,
        )
        sasl, tls = self.sasl, self.tls
        user, env = self.sasl_username, self.sasl_password_env
        if sasl:
            # Quotes and backslashes would have to be escaped in Spark's JAAS line: refused instead.
            ok = bool(user.strip()) and user.isprintable() and not any(c in user for c in '"\\')
            expect(ok, where, "sasl_username", f"a user name ({protocol} authenticates)", user)
            expect(
                _ENV_NAME.fullmatch(env) is not None,
                where,
                "sasl_password_env",
                f"the name of the environment variable holding the password ({protocol})",
                env,
            )
        else:
            for key in ("sasl_username", "sasl_password_env"):
                value = getattr(self, key)
                expect(
                    not value,
                    where,
                    key,
                    "empty unless security_protocol is SASL_PLAINTEXT or SASL_SSL",
                    value,
                )
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, key)
            if not value:
                continue
            expect(tls, where, key, "empty unless security_protocol is SSL or SASL_SSL", value)
            expect(Path(value).expanduser().is_file(), where, key, "an existing PEM file", value)
        expect(
            not self.ssl_keyfile or bool(self.ssl_certfile),
            where,
            "ssl_keyfile",
            "empty unless ssl_certfile is set (the key of that certificate)",
            self.ssl_keyfile,
        )

    @property
    def sasl(self) -> bool:
        """The clients authenticate with SASL (``SASL_PLAINTEXT`` or ``SASL_SSL``)."""
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        """The clients speak TLS (``SSL`` or ``SASL_SSL``)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers or f"{self.host}:{self.port}"


#: a portable environment variable name
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _one_of(values: tuple[str, ...]) -> str:
    return f"one of {', '.join(values)}"


@dataclass(frozen=True, kw_only=True)
class SparkConfig:
    master: str = "local[*]"
    #: small on purpose: with Spark's default 200 a 2-core machine spends its batches on scheduling
    shuffle_partitions: int = 2
    #: Kafka offsets read per micro-batch at most (0: no limit). With several partitions a cap can
    #: let one partition run ahead in event time; the other's records may then be late (README).
    max_offsets_per_trigger: int = 0
    #: 2g: a micro-batch's stage-1 partials of 250,000 ddos packets reach the driver at once
    #: (the task results and their Arrow copies); 1g ran out of heap on whole-capture batches.
    driver_memory: str = "2g"
    log_level: str = "WARN"
    #: Options for the driver's (and executors') JVM, before any of the user's own
    #: ``extraJavaOptions``. The default stops the JIT at its first tier (C1): every micro-batch
    #: loads new generated classes, and the optimizing compiler (C2) spent about a third of a core
    #: compiling them, more than the code it optimized saved (docs/performance.md, "JIT"). "" for
    #: the JVM's default. With C1 alone the JVM's code cache defaults to 48 MB, which the generated
    #: classes filled in under three minutes (then compiling pauses until the sweeper frees space):
    #: 240 MB, the tiered default.
    java_options: str = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

    def __post_init__(self) -> None:
        where = "[spark]"
        expect(bool(self.master.strip()), where, "master", "a Spark master URL such as local[*]", self.master)
        expect(
            self.shuffle_partitions >= 1,
            where,
            "shuffle_partitions",
            "an integer >= 1",
            self.shuffle_partitions,
        )
        expect(
            self.max_offsets_per_trigger >= 0,
            where,
            "max_offsets_per_trigger",
            "an integer >= 0 (0: no limit)",
            self.max_offsets_per_trigger,
        )
        levels = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE")
        expect(
            self.log_level.upper() in levels,
            where,
            "log_level",
            f"one of {', '.join(levels)}",
            self.log_level,
        )


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The streaming job's event-time settings."""

    traffic_window_s: float = 1.0
    watermark_s: float = 5.0
    trigger_s: float = 1.0
    #: result kinds to run (pipeline.job.KINDS)
    kinds: tuple[str, ...] = ("traffic", "topk", "distinct", "features", "joins", "shedding", "sys")
    #: also publish committed results as JSON rows to Kafka topics netmon.<kind>
    publish_results: bool = True
    #: a record or control message more than this ahead of the wall clock is dropped and counted
    #: (a broken clock, a wrapped pcapng offset, a hostile writer); it never moves the watermark.
    #: 0 turns the guard off.
    max_future_s: float = 86400.0
    #: Kafka messages one micro-batch of the shared query reads at most (when [spark]
    #: max_offsets_per_trigger is 0): bounds a batch's memory and time when the pipeline catches
    #: up (600 messages of `netmon replay`'s 1,000 records: 600,000 packets). Measured
    #: (docs/performance.md): 250 held baseline traffic to ~83k packets/s when paced (a batch's
    #: fixed costs paid every 250k packets); 600 sustains 100k.
    max_batch_messages: int = 600

    def __post_init__(self) -> None:
        where = "[pipeline]"
        positive(where, "traffic_window_s", self.traffic_window_s)
        expect(
            self.max_batch_messages >= 1,
            where,
            "max_batch_messages",
            "an integer >= 1",
            self.max_batch_messages,
        )
        positive(where, "watermark_s", self.watermark_s, zero=True)
        positive(where, "trigger_s", self.trigger_s)
        positive(where, "max_future_s", self.max_future_s, zero=True)
        for kind in self.kinds:
            expect(kind in RESULT_KINDS, where, "kinds", f"kinds among {', '.join(RESULT_KINDS)}", kind)


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    records_per_message: int = 1000
    linger_ms: int = 20
    compression: str = "lz4"
    #: the capture `netmon demo` replays, relative to the repository (or absolute)
    demo_capture: str = "samples/mixed-small.pcap"

    def __post_init__(self) -> None:
        where = "[ingest]"
        expect(
            self.records_per_message >= 1,
            where,
            "records_per_message",
            "an integer >= 1",
            self.records_per_message,
        )
        expect(self.linger_ms >= 0, where, "linger_ms", "an integer >= 0", self.linger_ms)
        expect(
            self.compression in COMPRESSIONS,
            where,
            "compression",
            f"one of {', '.join(COMPRESSIONS)}",
            self.compression,
        )


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    host: str = "127.0.0.1"
    port: int = 8501
    refresh_s: float = 3.0

    def __post_init__(self) -> None:
        expect(bool(self.host.strip()), "[dashboard]", "host", "a host name or address", self.host)
        port("[dashboard]", "port", self.port)
        positive("[dashboard]", "refresh_s", self.refresh_s)


def _window_range(where: str, window_s: float, sub_window_s: float, lo_hi: tuple[float, ...]) -> None:
    """A query's ``window_range_s`` (empty, or [min, max] around ``window_s``, each bound a
    window ``sub_window_s`` can make); raises ``ConfigError`` naming the problem."""
    if not lo_hi:
        return
    expect(
        len(lo_hi) == 2 and lo_hi[0] <= window_s <= lo_hi[1],
        where,
        "window_range_s",
        f"[min, max] around window_s = {window_s:g}",
        list(lo_hi),
    )
    for bound in lo_hi:
        _windows(where, bound, sub_window_s)


def _window_problem(where: str, window_s: float, sub_window_s: float, lo_hi: tuple[float, ...]) -> str | None:
    """Why ``window_s`` cannot be a query's window at run time (None: it can): a multiple of its
    sub-window, inside its ``window_range_s`` if it has one."""
    b_us, n_us = round(sub_window_s * _US), round(window_s * _US)
    if not (window_s > 0 and n_us % b_us == 0 and math.isclose(n_us, window_s * _US, abs_tol=1e-6)):
        return f"{where} is not a multiple of sub_window_s = {sub_window_s:g}"
    if lo_hi and not lo_hi[0] <= window_s <= lo_hi[1]:
        lo, hi = lo_hi
        return f"{where} is outside window_range_s = [{lo:g}, {hi:g}]"
    return None


@dataclass(frozen=True, kw_only=True)
class TopKQuery:
    """A sliding top-k heavy-hitter query (Golab Alg. 6): ``[[queries.topk]]``."""

    name: str
    #: a record column or comma-separated columns (analytics.keys)
    key: str = "src_ip"
    #: "packets" or "bytes"
    weight: str = "packets"
    #: "who is eating the link right now": a 10 s window slid every second
    window_s: float = 10.0
    sub_window_s: float = 1.0
    k: int = 10
    #: [min, max]: the windows ``netmon tune --window`` may set at run time (seed 004's QoS
    #: range); empty: any multiple of sub_window_s. ``window_s`` is the window at the start.
    window_range_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        where = _query("topk", self.name)
        _key(where, "key", self.key)
        expect(self.weight in ("packets", "bytes"), where, "weight", "'packets' or 'bytes'", self.weight)
        _windows(where, self.window_s, self.sub_window_s)
        expect(self.k >= 1, where, "k", "an integer >= 1", self.k)
        _window_range(where, self.window_s, self.sub_window_s, self.window_range_s)

    def window_problem(self, window_s: float) -> str | None:
        """Why ``window_s`` cannot be this query's window at run time (None: it can)."""
        where = f"top-k query {self.name!r}: window {window_s:g} s"
        return _window_problem(where, window_s, self.sub_window_s, self.window_range_s)


@dataclass(frozen=True, kw_only=True)
class DistinctQuery:
    """A sliding distinct-count query over sub-window synopses: ``[[queries.distinct]]``."""

    name: str
    count: str = "src_ip"
    #: empty: one global count
    group_by: str = "dst_ip"
    window_s: float = 60.0
    sub_window_s: float = 1.0
    lg_k: int = 12
    top: int = 20
    #: [min, max]: the windows ``netmon tune --window`` (and the resource manager's window
    #: reduction) may set at run time (seed 004's QoS range), as for ``[[queries.topk]]``; empty:
    #: any multiple of sub_window_s. ``window_s`` is the window at the start.
    window_range_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        where = _query("distinct", self.name)
        _key(where, "count", self.count)
        if self.group_by.strip():
            _key(where, "group_by", self.group_by)
        _windows(where, self.window_s, self.sub_window_s)
        # The HLL sketches' range (DataSketches and Spark's hll_sketch_agg: 4..21).
        expect(4 <= self.lg_k <= 21, where, "lg_k", "an integer in 4..21", self.lg_k)
        expect(self.top >= 0, where, "top", "an integer >= 0 (0: every group)", self.top)
        _window_range(where, self.window_s, self.sub_window_s, self.window_range_s)

    def window_problem(self, window_s: float) -> str | None:
        """Why ``window_s`` cannot be this query's window at run time (None: it can); the rules
        of ``TopKQuery.window_problem``."""
        where = f"distinct query {self.name!r}: window {window_s:g} s"
        return _window_problem(where, window_s, self.sub_window_s, self.window_range_s)


@dataclass(frozen=True, kw_only=True)
class JoinQuery:
    """A window join over the packet stream: ``[[queries.join]]``.

    ``query = "handshake"``: SYN ⋈ SYN-ACK on the reversed 4-tuple with ``ack = seq + 1``, a SYN-ACK
    at most ``window_s`` after its SYN (``T_L = window_s``, ``T_R = 0``); unanswered SYNs become
    ``unmatched`` rows. ``query = "link"``: stream ``left`` ⋈ stream ``right`` (filter expressions,
    ``netmon.filters``) on ``key`` (``right_key`` for the right stream if given) within
    ``window_s`` both ways.
    """

    name: str
    #: "handshake" or "link"
    query: str = "handshake"
    window_s: float = 3.0
    #: link: filter expressions of streams A and B, e.g. "iface=eth0" / "iface=eth1"
    left: str = ""
    right: str = ""
    #: link: the join key (record columns), and B's key when it differs
    key: str = "src_ip"
    right_key: str = ""
    #: load shedding: none, cf, inp or pni (seed 003 §3.3)
    strategy: str = "pni"
    #: a fixed share of [shedding] cpu_budget (0 < s <= 1); unset: the queries without one divide
    #: what the others leave in proportion to their unshed cost
    cpu_share: float | None = None

    def __post_init__(self) -> None:
        where = _query("join", self.name)
        if self.query not in JOIN_QUERY_KINDS:
            raise ConfigError(
                f"{where} query: expected one of {', '.join(JOIN_QUERY_KINDS)}, got {self.query!r}"
            )
        if not self.window_s >= 0:
            raise ConfigError(f"{where} window_s: expected a number of seconds >= 0, got {self.window_s!r}")
        if self.strategy not in SHEDDING_STRATEGIES:
            raise ConfigError(
                f"{where} strategy: expected one of {', '.join(SHEDDING_STRATEGIES)} "
                f"(max-subset runs offline only: netmon eval shedding), got {self.strategy!r}"
            )
        if self.cpu_share is not None and not 0 < self.cpu_share <= 1:
            raise ConfigError(f"{where} cpu_share: expected a fraction in (0, 1], got {self.cpu_share!r}")
        if self.query == "link":
            # Imported here: the filter grammar needs pyarrow, which the CLI's start skips.
            from netmon.filters import parse_filter

            for name in ("key", "right_key"):
                if getattr(self, name):
                    _key(where, name, getattr(self, name))
            for name in ("left", "right"):
                if not getattr(self, name).strip():
                    raise ConfigError(f"{where} {name}: a link query needs a filter expression")
                try:
                    parse_filter(getattr(self, name))
                except ValueError as exc:
                    raise ConfigError(f"{where} {name}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class QueriesConfig:
    """The analytic queries the pipeline runs (besides traffic, which always runs)."""

    topk: tuple[TopKQuery, ...] = (
        TopKQuery(name="top-sources", key="src_ip"),
        TopKQuery(name="top-destinations-bytes", key="dst_ip", weight="bytes"),
        TopKQuery(name="top-pairs", key="src_ip,dst_ip"),
        TopKQuery(name="top-dst-ports", key="proto,dst_port"),
    )
    distinct: tuple[DistinctQuery, ...] = (
        DistinctQuery(name="ddos-sources-per-destination", count="src_ip", group_by="dst_ip"),
        DistinctQuery(name="scan-ports-per-source", count="dst_port", group_by="src_ip"),
        DistinctQuery(name="scan-hosts-per-source", count="dst_ip", group_by="src_ip"),
        DistinctQuery(
            name="flows-per-protocol", count="src_ip,dst_ip,src_port,dst_port,proto", group_by="proto"
        ),
    )
    #: the handshake query; link correlation needs its two filters
    join: tuple[JoinQuery, ...] = (JoinQuery(name="handshake"),)

    def __post_init__(self) -> None:
        check_unique_names("topk", self.topk)
        check_unique_names("distinct", self.distinct)
        check_unique_names("join", self.join)
        shares = [q.cpu_share for q in self.join if q.cpu_share is not None]
        if sum(shares) > 1 + 1e-9:
            raise ConfigError(
                f"[[queries.join]] cpu_share: the shares of the budget sum to more than 1, got {shares}"
            )


def check_unique_names(kind: str, queries: typing.Iterable[Any]) -> None:
    """A ``[[queries.<kind>]]`` list whose names repeat is an error."""
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise ConfigError(f"[[queries.{kind}]] name: query names must be unique, got {names}")


#: what ``[shedding] cpu_budget`` bounds (``pipeline.shedding_controller``)
BUDGET_SCOPES = ("batch", "operator")


@dataclass(frozen=True, kw_only=True)
class SheddingConfig:
    """The join operator and its load-shedding controller: ``[shedding]``."""

    #: the join's share of each trigger interval (1.0 = one core for the whole interval)
    cpu_budget: float = 0.8
    #: what the budget bounds: "batch" = the joins kind's whole time in the micro-batch (staging,
    #: writing rows, saving state included); "operator" = the join operator's own time only (seed 003's)
    budget_scope: str = "batch"
    #: fractions before the controller's first decision (and without the "shedding" kind)
    x_left: float = 1.0
    x_right: float = 1.0
    #: weight of the newest measurement / optimum in the controller's smoothing (0 < s <= 1)
    smoothing: float = 0.5
    #: largest change of a fraction per batch
    max_step: float = 0.25
    #: hash buckets of join keys per query: read by Spark's reference staging only
    #: (``pipeline.joins.build_staged``); the joins kind keeps one join per query. Kept so that
    #: older configs load.
    buckets: int = 8
    #: seed of the shedders' random generators
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.buckets >= 1:
            raise ConfigError(f"[shedding] buckets: expected an integer >= 1, got {self.buckets!r}")
        if not self.cpu_budget > 0:
            raise ConfigError(f"[shedding] cpu_budget: expected a fraction > 0, got {self.cpu_budget!r}")
        if self.budget_scope not in BUDGET_SCOPES:
            raise ConfigError(
                f"[shedding] budget_scope: expected one of {', '.join(BUDGET_SCOPES)}, "
                f"got {self.budget_scope!r}"
            )
        for name in ("smoothing", "max_step"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(
                    f"[shedding] {name}: expected a number in (0, 1], got {getattr(self, name)!r}"
                )
        for name in ("x_left", "x_right"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(
                    f"[shedding] {name}: expected a fraction in [0, 1], got {getattr(self, name)!r}"
                )
