"""The ``netmon`` command and what every part shares: configuration, the local broker, jars, logs.

``cli`` is the command (its subcommands live in ``netmon.commands``, imported on first use);
``config`` the TOML configuration; ``broker`` the local KRaft Kafka broker run from the jars that
``jvm_deps`` fetches from Maven Central; ``kafka_admin`` topic helpers; ``demo`` the whole system
on one machine; ``results`` reading committed results back without Spark; ``logs`` quiet,
structured logging.

``__all__`` lists the modules (``from netmon import *`` imports them all).
"""

__all__ = [
    "broker",
    "cli",
    "commands",
    "config",
    "demo",
    "jvm_deps",
    "kafka_admin",
    "logs",
    "results",
]
