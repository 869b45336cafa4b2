"""The Alerts page's reads: the alert outbox ``<state_dir>/alerts/outbox.db`` (SQLite, read-only)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from alerts.outbox import Outbox, outbox_path
from dashboard.data import cached

__all__ = ["ALERT_COLUMNS", "alerts", "counts", "dead_letters", "outbox_file", "value_against_threshold"]

#: the episode columns the page shows, in order (then one ``→ <target>`` column per target)
ALERT_COLUMNS = [
    "status",
    "severity",
    "rule",
    "subject_label",
    "subject",
    "query",
    "first_seen",
    "last_seen",
    "resolved_at",
    "value",
    "peak",
    "mode",
    "threshold",
    "suppressed",
]
_TIMES = ["first_seen", "last_seen", "resolved_at"]


def outbox_file(state_dir: str) -> Path:
    return outbox_path(state_dir)


def _open(state_dir: str) -> Outbox | None:
    path = outbox_path(state_dir)
    return Outbox(path, readonly=True) if path.exists() else None


@cached()
def alerts(state_dir: str) -> pd.DataFrame:
    """One row per alert episode, newest first, with the delivery state per target as columns."""
    outbox = _open(state_dir)
    if outbox is None:
        return pd.DataFrame(columns=ALERT_COLUMNS)
    with outbox:
        items = outbox.alerts(limit=5000)
    if not items:
        return pd.DataFrame(columns=ALERT_COLUMNS)
    df = pd.DataFrame(items)
    targets = sorted({t for d in df["deliveries"] for t in d})
    for t in targets:
        df[f"→ {t}"] = df["deliveries"].map(lambda d, t=t: d.get(t, "-"))
    for c in _TIMES:
        df[c] = pd.to_datetime(df[c], unit="s", utc=True)
    df["labels"] = df["labels"].map(lambda d: ", ".join(f"{k}={v}" for k, v in sorted(d.items())))
    return df[ALERT_COLUMNS + [f"→ {t}" for t in targets] + ["labels", "alert_id", "episode_id"]]


def value_against_threshold(df: pd.DataFrame) -> pd.DataFrame:
    """The firing alerts with a value and what it was compared with (the threshold, or in
    baseline mode the top of the learned band): ``label, value, threshold, mode``."""
    cols = ["label", "value", "threshold", "mode"]
    if df.empty or "threshold" not in df.columns:
        return pd.DataFrame(columns=cols)
    firing = df[(df["status"] == "firing") & df["value"].notna() & df["threshold"].notna()]
    out = firing.assign(label=firing["rule"] + " " + firing["subject"])
    return out[cols].reset_index(drop=True)


@cached()
def dead_letters(state_dir: str) -> pd.DataFrame:
    """Deliveries that gave up: event, target, attempts, last error."""
    columns = ["target", "rule", "subject", "status", "attempts", "last_error", "last_at", "event_id"]
    outbox = _open(state_dir)
    if outbox is None:
        return pd.DataFrame(columns=columns)
    with outbox:
        rows = outbox.deliveries("dead")
    df = pd.DataFrame(rows, columns=list(rows[0]) if rows else columns)
    df["last_at"] = pd.to_datetime(df["last_at"], unit="s", utc=True)
    return df[columns]


@cached()
def counts(state_dir: str) -> dict[str, int]:
    """Firing/resolved episodes; pending/delivered/dead deliveries."""
    outbox = _open(state_dir)
    if outbox is None:
        return {"firing": 0, "resolved": 0, "pending": 0, "delivered": 0, "dead": 0}
    with outbox:
        return outbox.counts()
