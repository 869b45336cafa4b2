"""The Spark side: netmon's Structured Streaming job, wiring ``analytics`` into Spark.

``session`` builds the one SparkSession; ``source`` reads and decodes Kafka; ``traffic``, ``topk``
(with its stateful merge ``topk_state``), ``distinct`` and ``joins`` (with ``join_state`` and the
live ``shedding_controller``) build one streaming query per result kind; ``job`` starts them and
follows their progress; ``batch_sink`` commits the files of a kind written per micro-batch
(``distinct``); ``publish`` copies committed results to Kafka topics.

``__all__`` lists the modules (``from pipeline import *`` imports them all).

Floor 3 of the house (README, "Architecture"): it stands on ``analytics``, ``ingest`` and
``netmon``; ``alerts`` shares the floor and neither imports the other.
"""

__all__ = [
    "batch_sink",
    "distinct",
    "job",
    "join_state",
    "joins",
    "publish",
    "session",
    "shedding_controller",
    "source",
    "topk",
    "topk_state",
    "traffic",
]
