"""``Config`` (every section) and the one loader: TOML file, built-in defaults, environment overrides.

The loader walks each section's dataclass fields and types them from the dataclass's own
annotations (``typing.get_type_hints``, no ``eval``): scalars must have their TOML type (an
integer is accepted for a float), ``Path`` takes a string, ``tuple[str, ...]`` an array of
strings, ``tuple[Section, ...]`` an array of tables, ``dict[str, ...]`` a table. Unknown sections
and keys, missing required keys and wrong types are one-line errors naming the file, section and
key; the values themselves are checked by each section's ``__post_init__``. Environment variables
override the file:

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
import functools
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netmon.config.alerts import AlertsConfig
from netmon.config.checks import ConfigError
from netmon.config.resources import ResourcesConfig
from netmon.config.retention import RetentionConfig
from netmon.config.sections import (
    DashboardConfig,
    IngestConfig,
    KafkaConfig,
    PathsConfig,
    PipelineConfig,
    QueriesConfig,
    SheddingConfig,
    SparkConfig,
)
from netmon.config.services import MetricsConfig, ServicesConfig

__all__ = ["Config", "alerts_config", "load_alerts", "load_config"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Every section of ``netmon.toml``; built-in defaults for those the file leaves out."""

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
    #: budgets and QoS ranges for the cost model (netmon explain) and the resource manager
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    services: ServicesConfig = field(default_factory=ServicesConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: how long results are kept, their compaction, and the Kafka topics' retention
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    #: the TOML file this came from, if any
    source: Path | None = None

    def replace(self, **sections: Any) -> Config:
        """A copy with some keys of some sections changed: ``cfg.replace(kafka={"port": 9999})``."""
        changes = {
            name: dataclasses.replace(getattr(self, name), **values) for name, values in sections.items()
        }
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section as plain TOML-able values; secrets shown as ``***``."""
        out: dict[str, dict[str, Any]] = {}
        for f in dataclasses.fields(self):
            if f.name == "source":
                continue
            out[f.name] = _plain(getattr(self, f.name))
        return out


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


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A section's field types, resolved from its own module (``from __future__`` annotations)."""
    return typing.get_type_hints(cls)


def _coerce(where: str, value: Any, hint: Any) -> Any:
    """``value`` from TOML, checked against the field type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        return _coerce(where, value, next(a for a in args if a is not type(None)))
    if origin is tuple:
        item = args[0]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            if not isinstance(value, list):
                raise ConfigError(
                    f"{where}: expected an array of tables ([[...]]), got {type(value).__name__}"
                )
            items = tuple(_section(f"{where}[{i}]", item, v) for i, v in enumerate(value))
            names = [getattr(q, "name", None) for q in items]
            if len(set(names)) != len(names):
                raise ConfigError(f"{where}: query names must be unique, got {names}")
            return items
        if item is float and isinstance(value, list):  # TOML [30, 120]: integers are floats here
            value = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
            raise ConfigError(f"{where}: expected an array of {item.__name__}s, got {value!r}")
        return tuple(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return dict(value)
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: expected a path (string), got {type(value).__name__}")
        return Path(value).expanduser()
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (bool, int, str, float) and type(value) is not hint:
        raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


def _section(where: str, cls: type, raw: Any) -> Any:
    """Build section ``cls`` from its TOML table ``raw``."""
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
    hints = _hints(cls)
    return cls(**{k: _coerce(f"{where}.{k}", v, hints[k]) for k, v in raw.items()})


def _read_toml(source: Path) -> dict[str, Any]:
    try:
        with source.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{source}: configuration file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None


def load_config(path: str | Path | None = None, *, env: typing.Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or ``$NETMON_CONFIG``; built-in defaults when neither), then apply env overrides."""
    env = os.environ if env is None else env
    path = path or env.get("NETMON_CONFIG") or None
    source = Path(path).expanduser() if path else None
    raw = _read_toml(source) if source else {}
    for var, (section, key) in _ENV_OVERRIDES.items():
        if env.get(var):
            raw.setdefault(section, {})[key] = env[var]
    where = str(source) if source else "config"
    sections = {f.name for f in dataclasses.fields(Config) if f.name != "source"}
    unknown = sorted(set(raw) - sections)
    if unknown:
        raise ConfigError(f"{where}: unknown section [{unknown[0]}] (known: {', '.join(sorted(sections))})")
    hints = _hints(Config)
    built = {name: _section(f"{where} [{name}]", hints[name], raw[name]) for name in sections if name in raw}
    return Config(**built, source=source)


def load_alerts(path: str | Path) -> AlertsConfig:
    """The ``[alerts]`` section of a TOML file (defaults when the file has none).

    The same loader as :func:`load_config`: a file that holds only ``[alerts]`` (as
    ``docker/alerts.example.toml`` does) is a whole configuration with default other sections.
    """
    return load_config(path, env={}).alerts


def alerts_config(cfg: Config, path: str | Path | None = None) -> AlertsConfig:
    """The alerts section: from the file at ``path`` if given, else ``cfg.alerts``."""
    return load_alerts(path) if path else cfg.alerts
