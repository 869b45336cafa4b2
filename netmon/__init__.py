"""The ground floor: the contracts every part of netmon shares. It imports no other netmon package.

``config`` the TOML configuration (every section, ``[alerts]`` included) and its one loader;
``columns`` the record's column names and key specs (no pyarrow); ``records`` the packet-header
record (Arrow schema, wire-format name and Spark DDL); ``filters`` the filter-expression grammar
over records; ``results`` the results format (result directories and topics, commit logs,
``read_results``; ``results_range``: a per-batch sink's rows in a time range, the one reader
the dashboard and ``netmon explain`` share; ``recent_results``: a sink's newest rows); ``logs``
quiet, structured logging; ``jvm_deps`` the JVM jars from Maven Central; ``broker`` the local
KRaft Kafka broker (``--secure``: SASL_SSL); ``kafka_admin`` topic helpers; ``kafka_security``
the ``[kafka]`` authentication and TLS options every Kafka client gets;
``supervisor`` the child processes of ``netmon up`` (restarts with backoff, ordered stop);
``orphans`` what keeps them from outliving a ``netmon up`` killed outright (parent-death signal,
a guard process, a tag in their environment);
``pidlock`` the one-holder file locks (pipeline, ``netmon up``);
``metrics`` the Prometheus ``/metrics`` endpoint over the services' status files.

Every other package (``ingest``, ``analytics``, ``pipeline``, ``alerts``, ``dashboard``, ``bench``)
stands on this one; the command line (``cli``) is the top floor (``README.md``, "Architecture").

``__all__`` lists the modules (``from netmon import *`` imports them all).
"""

__all__ = [
    "broker",
    "cluster",
    "columns",
    "config",
    "filters",
    "jvm_deps",
    "kafka_admin",
    "kafka_security",
    "logs",
    "metrics",
    "orphans",
    "pidlock",
    "recent_results",
    "records",
    "results",
    "results_range",
    "spark_standalone",
    "supervisor",
]
