"""netmon's configuration: one optional TOML file, defaults built in, environment overrides.

Each ``netmon.toml`` section is a frozen, keyword-only dataclass; :class:`Config` composes them.
Defaults live only in the dataclasses. Unknown sections or keys, wrong types and bad values are
errors that name the section and key (``[[queries.join]]``, ``[shedding]`` and ``[alerts]`` check
their values in ``__post_init__``, when the section is built). Environment variables override the
file:

==========================  ==========================================
``NETMON_CONFIG``           path of the TOML file (same as ``--config``)
``NETMON_STATE_DIR``        ``[paths] state_dir``
``NETMON_DATA_DIR``         ``[paths] data_dir``
``NETMON_CACHE_DIR``        ``[paths] cache_dir``
``NETMON_BOOTSTRAP_SERVERS`` ``[kafka] bootstrap_servers``
==========================  ==========================================
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerts.config import AlertRule, AlertsConfig, AlertTarget

__all__ = [
    "JOIN_QUERY_KINDS",
    "Config",
    "ConfigError",
    "DashboardConfig",
    "DistinctQuery",
    "IngestConfig",
    "JoinQuery",
    "KafkaConfig",
    "PathsConfig",
    "PipelineConfig",
    "QueriesConfig",
    "SHEDDING_STRATEGIES",
    "SheddingConfig",
    "SparkConfig",
    "TopKQuery",
    "check_unique_names",
    "load_config",
]

#: The kinds of ``[[queries.join]]`` query (``query = ...``).
JOIN_QUERY_KINDS = ("handshake", "link")
#: The streaming join's load-shedding strategies (seed 003 §3.3; ``analytics.join_cost``).
SHEDDING_STRATEGIES: tuple[str, ...] = ("none", "cf", "inp", "pni")


class ConfigError(ValueError):
    """A configuration problem, naming the file, section and key."""


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


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
    #: JVM heap of the local broker
    heap: str = "512m"
    start_timeout_s: float = 60.0

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers or f"{self.host}:{self.port}"


@dataclass(frozen=True, kw_only=True)
class SparkConfig:
    master: str = "local[*]"
    #: small on purpose: with Spark's default 200 a 2-core machine spends its batches on scheduling
    shuffle_partitions: int = 2
    #: Kafka offsets read per micro-batch at most (0: no limit). With several partitions a cap can
    #: let one partition run ahead in event time; the other's records may then be late (README).
    max_offsets_per_trigger: int = 0
    driver_memory: str = "1g"
    log_level: str = "WARN"


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The streaming job's event-time settings."""

    traffic_window_s: float = 1.0
    watermark_s: float = 5.0
    trigger_s: float = 1.0
    #: result kinds to run (pipeline.job.KINDS)
    kinds: tuple[str, ...] = ("traffic", "topk", "distinct", "joins", "shedding")
    #: also publish committed results as JSON rows to Kafka topics netmon.<kind>
    publish_results: bool = True


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    records_per_message: int = 1000
    linger_ms: int = 20
    compression: str = "lz4"
    #: the capture `netmon demo` replays, relative to the repository (or absolute)
    demo_capture: str = "samples/mixed-small.pcap"


@dataclass(frozen=True, kw_only=True)
class DashboardConfig:
    host: str = "127.0.0.1"
    port: int = 8501
    refresh_s: float = 3.0


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
        where = f"[[queries.join]] {self.name!r}"
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
            # Imported here: both need pyarrow, which the handshake default and the CLI's start skip.
            from netmon.filters import parse_filter
            from netmon.records import parse_key

            for name in ("key", "right_key"):
                if getattr(self, name):
                    try:
                        parse_key(getattr(self, name))
                    except ValueError as exc:
                        raise ConfigError(f"{where} {name}: {exc}") from None
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
    #: what the budget bounds: "batch" = the whole micro-batch's duration (Spark's per-batch work,
    #: reading and writing included); "operator" = the join operator's own time only (seed 003's cost)
    budget_scope: str = "batch"
    #: fractions before the controller's first decision (and without the "shedding" kind)
    x_left: float = 1.0
    x_right: float = 1.0
    #: weight of the newest measurement / optimum in the controller's smoothing (0 < s <= 1)
    smoothing: float = 0.5
    #: largest change of a fraction per batch
    max_step: float = 0.25
    #: hash buckets of join keys per query (one stateful call each per micro-batch)
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


@dataclass(frozen=True, kw_only=True)
class Config:
    paths: PathsConfig = field(default_factory=PathsConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    queries: QueriesConfig = field(default_factory=QueriesConfig)
    #: the join operator's load shedding (the join queries themselves are ``[[queries.join]]``)
    shedding: SheddingConfig = field(default_factory=SheddingConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    #: the TOML file this came from, if any
    source: Path | None = None

    def replace(self, **sections: Any) -> Config:
        """A copy with some keys of some sections changed: ``cfg.replace(kafka={"port": 9999})``."""
        changes = {
            name: dataclasses.replace(getattr(self, name), **values) for name, values in sections.items()
        }
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(self):
            if f.name == "source":
                continue
            out[f.name] = _plain(getattr(self, f.name))
        return out


_QUERY_TYPES = {
    "TopKQuery": TopKQuery,
    "DistinctQuery": DistinctQuery,
    "JoinQuery": JoinQuery,
    "AlertRule": AlertRule,
    "AlertTarget": AlertTarget,
}

_ENV_OVERRIDES = {
    "NETMON_STATE_DIR": ("paths", "state_dir"),
    "NETMON_DATA_DIR": ("paths", "data_dir"),
    "NETMON_CACHE_DIR": ("paths", "cache_dir"),
    "NETMON_BOOTSTRAP_SERVERS": ("kafka", "bootstrap_servers"),
}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        # Secrets (fields declared repr=False) are never printed.
        return {
            f.name: "***" if not f.repr and getattr(value, f.name) else _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
        }
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def _coerce(where: str, value: Any, annotation: Any) -> Any:
    """Check ``value`` against a (string) annotation from a config dataclass."""
    hint = eval(annotation, {"Path": Path, **_QUERY_TYPES}) if isinstance(annotation, str) else annotation  # noqa: S307
    if typing.get_origin(hint) is tuple and typing.get_args(hint)[0] is str:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: expected an array of strings, got {value!r}")
        return tuple(value)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected an array of tables ([[...]]), got {type(value).__name__}")
        items = tuple(_section(f"{where}[{i}]", item, v) for i, v in enumerate(value))
        names = [getattr(q, "name", None) for q in items]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: query names must be unique, got {names}")
        return items
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        hint = options[0]
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: expected a path (string), got {type(value).__name__}")
        return Path(value).expanduser()
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is bool or hint is int or hint is str or hint is float:
        if type(value) is not hint:
            raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
        return value
    return value


def _section(where: str, cls: type, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    required = sorted(
        f.name
        for f in known.values()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in raw
    )
    if required:
        raise ConfigError(f"{where}: missing required key {required[0]!r}")
    return cls(**{k: _coerce(f"{where}.{k}", v, known[k].type) for k, v in raw.items()})


def load_config(path: str | Path | None = None, *, env: typing.Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or ``$NETMON_CONFIG``; built-in defaults when neither), then apply env overrides."""
    env = os.environ if env is None else env
    path = path or env.get("NETMON_CONFIG") or None
    raw: dict[str, Any] = {}
    source = None
    if path:
        source = Path(path).expanduser()
        try:
            with source.open("rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{source}: configuration file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    for var, (section, key) in _ENV_OVERRIDES.items():
        if env.get(var):
            raw.setdefault(section, {})[key] = env[var]
    where = str(source) if source else "config"
    sections = {f.name: f for f in dataclasses.fields(Config) if f.name != "source"}
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise ConfigError(f"{where}: unknown section [{unknown[0]}] (known: {', '.join(sorted(sections))})")
    built = {}
    for name in sections:
        if name in raw:
            cls = typing.get_type_hints(Config)[name]
            built[name] = _section(f"{where} [{name}]", cls, raw[name])
    return Config(**built, source=source)
