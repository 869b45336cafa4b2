"""netmon's configuration: one optional TOML file, defaults built in, environment overrides.

Each ``netmon.toml`` section is a frozen, keyword-only dataclass that checks its values when it is
built (:mod:`netmon.config.sections`, the ``[alerts]`` section in :mod:`netmon.config.alerts`);
:class:`Config` composes them and :func:`load_config` is the one loader
(:mod:`netmon.config.loader`). Defaults live only in the dataclasses; errors are one line naming
the file, section and key (:class:`ConfigError`).

Every name is re-exported here: ``from netmon.config import Config, TopKQuery, AlertRule``.
"""

from __future__ import annotations

from netmon.config.alerts import (
    AGGREGATES,
    FORMATS,
    KINDS,
    OPS,
    SEVERITIES,
    AlertRule,
    AlertsConfig,
    AlertTarget,
    parse_comparison,
)
from netmon.config.checks import ConfigError
from netmon.config.loader import Config, alerts_config, load_alerts, load_config
from netmon.config.resources import ResourcesConfig
from netmon.config.retention import RetentionConfig
from netmon.config.sections import (
    BUDGET_SCOPES,
    COMPRESSIONS,
    JOIN_QUERY_KINDS,
    RESULT_KINDS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    SHEDDING_STRATEGIES,
    DashboardConfig,
    DistinctQuery,
    IngestConfig,
    JoinQuery,
    KafkaConfig,
    PathsConfig,
    PipelineConfig,
    QueriesConfig,
    SheddingConfig,
    SparkConfig,
    TopKQuery,
    check_unique_names,
)
from netmon.config.services import MetricsConfig, ServicesConfig

__all__ = [
    "AGGREGATES",
    "BUDGET_SCOPES",
    "COMPRESSIONS",
    "FORMATS",
    "JOIN_QUERY_KINDS",
    "KINDS",
    "OPS",
    "RESULT_KINDS",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "SEVERITIES",
    "SHEDDING_STRATEGIES",
    "AlertRule",
    "AlertTarget",
    "AlertsConfig",
    "Config",
    "ConfigError",
    "DashboardConfig",
    "DistinctQuery",
    "IngestConfig",
    "JoinQuery",
    "KafkaConfig",
    "MetricsConfig",
    "PathsConfig",
    "PipelineConfig",
    "QueriesConfig",
    "ResourcesConfig",
    "RetentionConfig",
    "ServicesConfig",
    "SheddingConfig",
    "SparkConfig",
    "TopKQuery",
    "alerts_config",
    "check_unique_names",
    "load_alerts",
    "load_config",
    "parse_comparison",
]
