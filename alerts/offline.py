"""Alert rules over a capture, offline: ``netmon analyze alerts FILE...``.

The capture's records become ``features`` rows (:func:`analytics.alert_features.feature_rows`,
exact), which are fed in window order to the same :class:`~alerts.rules.RuleEngine` the streaming
service runs on the rows it reads from Kafka; the last report is closed at the end of the input
(:meth:`RuleEngine.flush`). The result is the list of alert episodes the rules would have raised:
one per (rule, subject) firing, with its first and last report time and its peak value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from alerts.rules import RuleEngine, iso
from analytics.alert_features import FEATURE_COLUMNS, feature_rows, records_frame
from ingest.readers import read_records
from netmon.config import AlertRule, AlertsConfig

__all__ = ["FEATURES", "Episode", "analyze_capture", "episodes_from_rows", "read_frame"]

#: the result kind of the detection rows
FEATURES = "features"


@dataclass(frozen=True)
class Episode:
    """One alert episode: a rule firing for a subject from ``first`` to ``last`` (epoch seconds)."""

    rule: str
    severity: str
    subject: str
    first: float
    last: float
    #: the peak value while it fired
    value: float
    subject_label: str = ""
    query: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON line of ``netmon analyze alerts --format jsonl`` (times ISO-8601 UTC)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "subject": self.subject,
            "first": iso(self.first),
            "last": iso(self.last),
            "value": self.value,
        }


def episodes_from_rows(
    rules: Sequence[AlertRule], kind: str, rows: Iterable[Mapping[str, Any]]
) -> list[Episode]:
    """Feed result rows of ``kind`` to a fresh :class:`RuleEngine`; the episodes it announced.

    Episodes are sorted by first report time, then rule and subject.
    """
    engine = RuleEngine(rules)
    by_episode: dict[str, Any] = {}
    for row in rows:
        engine.observe(kind, row)
        for record in engine.take_changes():
            by_episode[record.episode_id] = record
    engine.flush(kind)
    for record in engine.take_changes():
        by_episode[record.episode_id] = record
    out = [
        Episode(
            rule=r.rule,
            severity=r.severity,
            subject=r.subject,
            first=float(r.first_seen),
            last=float(r.last_seen if r.last_seen is not None else r.first_seen),
            value=float(r.peak if r.peak is not None else r.value),
            subject_label=r.subject_label,
            query=r.query,
        )
        for r in by_episode.values()
        if r.first_seen is not None
    ]
    return sorted(out, key=lambda e: (e.first, e.rule, e.subject))


def read_frame(paths: Sequence[str | os.PathLike[str]]) -> pd.DataFrame:
    """The records :func:`analytics.alert_features.feature_rows` needs, of every file, by time."""
    frames = [records_frame(read_records(p, columns=list(FEATURE_COLUMNS))) for p in paths]
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if len(frames) > 1:
        frame = frame.sort_values("t", kind="stable", ignore_index=True)
    return frame


def analyze_capture(
    paths: Sequence[str | os.PathLike[str]], rules: Sequence[AlertRule], alerts: AlertsConfig
) -> list[Episode]:
    """The episodes ``rules`` (those reading ``features``) raise over the captures ``paths``."""
    rows = feature_rows(
        read_frame(paths),
        window_s=alerts.features_window_s,
        timeout_s=alerts.features_timeout_s,
        top=alerts.features_top,
    )
    return episodes_from_rows([r for r in rules if r.source == FEATURES], FEATURES, rows)
