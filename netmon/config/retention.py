"""``[retention]``: how long results are kept, when small result files are compacted, Kafka's retention.

The pipeline runs the retention and compaction pass (``pipeline.retention.maintain``) every
``interval_s``: result files whose rows are all older than ``results_days`` go, and a per-batch
kind's files of one closed event-time hour are rewritten as one file once their batches are
``compact_after_s`` old (``docs/results.md``, "Retention and compaction"). Results thus take a
bounded amount of disk: ``results_days`` of hourly files per kind and query, plus the last
``compact_after_s`` of batch files.

Ages are event time, counted back from the newest result of the same query (or from the wall
clock, if that is earlier): a replayed capture from years ago keeps its results, while a live
pipeline drops what is older than ``results_days`` of wall-clock time.
"""

from __future__ import annotations

from dataclasses import dataclass

from netmon.config.checks import expect, positive

__all__ = ["RetentionConfig"]

#: the longest retention Kafka takes (``retention.ms`` is a signed 64-bit count of milliseconds)
_MAX_MS = 2**63 - 1


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """Result retention, compaction and the Kafka topics' retention: ``[retention]``."""

    #: delete result files whose rows are all older than this many days (0: keep results forever).
    #: A week: Kafka's own default retention, and far more than the dashboard shows (1 h).
    results_days: float = 7.0
    #: compact a per-batch kind's files into one file per event-time hour
    compact: bool = True
    #: a batch is compacted only once its commit is this old, by the wall clock and behind the
    #: query's newest commit (readers, the dashboard's Resources page too, read compacted hours
    #: as well as commits: any value is safe for them)
    compact_after_s: float = 7200.0
    #: ``retention.ms`` of the packets topic and the result topics, in hours (0: leave the
    #: broker's setting; the local broker keeps 24 h)
    kafka_retention_hours: float = 0.0
    #: how often the pipeline runs the retention and compaction pass
    interval_s: float = 300.0

    def __post_init__(self) -> None:
        where = "[retention]"
        positive(where, "results_days", self.results_days, zero=True)
        positive(where, "compact_after_s", self.compact_after_s, zero=True)
        positive(where, "kafka_retention_hours", self.kafka_retention_hours, zero=True)
        hours = self.kafka_retention_hours
        expect(hours * 3_600_000 <= _MAX_MS, where, "kafka_retention_hours", "at most 2.5e12 hours", hours)
        positive(where, "interval_s", self.interval_s)

    @property
    def results_s(self) -> float | None:
        """``results_days`` in seconds; None when results are kept forever."""
        return self.results_days * 86400.0 if self.results_days else None

    @property
    def kafka_retention_ms(self) -> int | None:
        """The topics' ``retention.ms``; None when the broker's setting is left alone.

        >>> RetentionConfig(kafka_retention_hours=1.5).kafka_retention_ms
        5400000
        """
        return round(self.kafka_retention_hours * 3_600_000) if self.kafka_retention_hours else None
