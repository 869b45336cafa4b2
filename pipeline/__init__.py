"""The Spark side: netmon's Structured Streaming job, wiring ``analytics`` into Spark.

``session`` builds the one SparkSession; ``source`` reads and decodes Kafka; ``job`` starts one
shared query that reads Kafka once and hands each micro-batch to the batch kinds — ``traffic``
and ``topk`` (fed by ``partials``, their stage-1 counts in one pyarrow pass), ``distinct``,
``features`` (the alert rules' detection rows) and ``joins_batch`` (the window joins, with
``joins``' staging and ``join_state``'s operator; the live ``shedding_controller`` runs in a
progress listener and commits the ``shedding`` rows) — and follows its progress;
``sys_stats`` commits every query's per-batch statistics (the ``sys`` rows) from another
listener. ``batch_state`` keeps a batch kind's state
per batch, ``batch_sink`` commits its rows per batch; ``topk_state`` is the first top-k version's
stateful merge (kept for ``netmon bench topk``); ``publish`` copies committed results to Kafka
(``result_json`` writes their rows as JSON, a column at a time); ``resource_manager`` chooses
the drop boxes before the top-k queries each batch under overload (``[resources] manage``);
``window_knobs`` the top-k and distinct windows each batch applies (``netmon tune --window``).

``__all__`` lists the modules (``from pipeline import *`` imports them all).

Floor 3 of the house (README, "Architecture"): it stands on ``analytics``, ``ingest`` and
``netmon``; ``alerts`` shares the floor and neither imports the other.
"""

__all__ = [
    "batch_sink",
    "batch_state",
    "distinct",
    "features",
    "job",
    "join_state",
    "joins",
    "joins_batch",
    "partials",
    "publish",
    "resource_manager",
    "result_json",
    "retention",
    "session",
    "shedding_controller",
    "source",
    "sys_stats",
    "topk",
    "topk_state",
    "traffic",
    "window_knobs",
]
