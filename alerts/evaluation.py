"""``netmon eval alerts``: precision and recall of alert episodes against the generator's ground truth.

Every scenario of :mod:`ingest.generate` is generated at each rate (packets per second over
``duration_s``) and seed, analysed offline (:func:`alerts.offline.analyze_capture`, the rules of
``netmon analyze alerts``) and scored against ``details["truth"]``:

- an episode is **true** when its subject is one of the attack's attackers or victims and it
  overlaps the attack, ``[start, end + 2 windows]``; every other episode is **false**
  (so every episode on ``baseline`` is false);
- an attack is **caught** when a true episode starts (its first report, a window end) at most two
  windows after the attack's first packet;
- precision = true / all episodes; recall = caught / attacks.

Real captures (``captures``) with no attack in them are analysed too: every episode there is false.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from alerts.offline import Episode, analyze_capture
from ingest.generate import SCENARIOS, generate
from netmon.config import AlertRule, AlertsConfig

__all__ = ["RATES", "AlertEvaluation", "Run", "run_evaluation", "score"]

#: packets per second evaluated by default
RATES = (1_000, 10_000, 50_000)


@dataclass(frozen=True)
class Run:
    """One capture's score."""

    source: str
    scenario: str
    rate: int
    seed: int
    packets: int
    episodes: int
    true_episodes: int
    attacks: int
    caught: int
    #: seconds from the attack's first packet to the first true episode (None: not caught)
    delay_s: float | None
    #: "rule subject" of each false episode
    false: tuple[str, ...] = ()


@dataclass
class AlertEvaluation:
    runs: list[Run] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    #: (claim, holds, evidence)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def table(self) -> list[str]:
        """The markdown table: one line per (source, scenario, rate), seeds summed."""
        groups: dict[tuple[str, str, int], list[Run]] = {}
        for run in self.runs:
            groups.setdefault((run.source, run.scenario, run.rate), []).append(run)
        lines = [
            "| capture | scenario | packets/s | seeds | episodes | false | precision | attacks | caught "
            "| recall | worst delay |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for (source, scenario, rate), runs in groups.items():
            episodes = sum(r.episodes for r in runs)
            true = sum(r.true_episodes for r in runs)
            attacks, caught = sum(r.attacks for r in runs), sum(r.caught for r in runs)
            delays = [r.delay_s for r in runs if r.delay_s is not None]
            generated = source == "generated"
            lines.append(
                f"| {source} | {scenario} | {f'{rate:,}' if generated else '-'} "
                f"| {len(runs) if generated else '-'} | {episodes} | {episodes - true} "
                f"| {_ratio(true, episodes)} | {attacks} | {caught} | {_ratio(caught, attacks)} "
                f"| {f'{max(delays):.1f} s' if delays else '-'} |"
            )
        return lines


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "-"


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _is_true(e: Episode, truth: dict[str, Any], window_s: float) -> bool:
    """The episode names one of the attack's attackers or victims and overlaps the attack."""
    if truth.get("start") is None:
        return False
    start, end = _epoch(truth["start"]), _epoch(truth["end"])
    entities = {*truth["attackers"], *truth["victims"]}
    return e.subject in entities and e.last >= start and e.first <= end + 2 * window_s


def score(
    episodes: Sequence[Episode], truth: dict[str, Any], window_s: float
) -> tuple[int, int, float | None]:
    """(true episodes, caught 0/1, delay from the attack's start) of one capture's episodes."""
    true = [e for e in episodes if _is_true(e, truth, window_s)]
    if not true:
        return 0, 0, None
    start = _epoch(truth["start"])
    in_time = [e.first - start for e in true if e.first <= start + 2 * window_s + 1e-9]
    return len(true), int(bool(in_time)), (min(in_time) if in_time else None)


def run_evaluation(
    *,
    rules: Sequence[AlertRule],
    alerts: AlertsConfig,
    rates: Sequence[int] = RATES,
    seeds: Sequence[int] = (1, 2, 3),
    scenarios: Sequence[str] = SCENARIOS,
    duration_s: float = 60.0,
    captures: Sequence[str | os.PathLike[str]] = (),
    out: Path | None = None,
    log: Callable[[str], Any] = lambda _: None,
) -> AlertEvaluation:
    """Score ``rules`` over generated scenarios (and attack-free ``captures``); write ``out``."""
    for rate in rates:
        if rate < 1:
            raise ValueError(f"rates must be >= 1 packet/s, got {rate}")
    window = alerts.features_window_s
    result = AlertEvaluation()
    with tempfile.TemporaryDirectory(prefix="netmon-eval-alerts-") as tmp:
        for rate in rates:
            for scenario in scenarios:
                for seed in seeds:
                    path = Path(tmp) / f"{scenario}-{rate}-{seed}.pcap"
                    packets = round(rate * duration_s)
                    summary = generate(
                        path, scenario=scenario, packets=packets, seed=seed, duration_s=duration_s
                    )
                    episodes = analyze_capture([path], rules, alerts)
                    path.unlink()
                    truth = summary.details["truth"]
                    true, caught, delay = score(episodes, truth, window)
                    false = _false(episodes, truth, window)
                    run = Run("generated", scenario, rate, seed, summary.packets, len(episodes), true,
                              int(truth["start"] is not None), caught, delay, false)  # fmt: skip
                    result.runs.append(run)
                    log(
                        f"{scenario} {rate:,}/s seed {seed}: {len(episodes)} episodes, {true} true, "
                        f"caught {caught}/{run.attacks}" + (f", false: {', '.join(false)}" if false else "")
                    )
    for capture in captures:
        episodes = analyze_capture([capture], rules, alerts)
        false = tuple(f"{e.rule} {e.subject}" for e in episodes)
        result.runs.append(
            Run(Path(capture).name, "real (no attack)", 0, 0, 0, len(episodes), 0, 0, 0, None, false)
        )
        log(f"{capture}: {len(episodes)} episodes" + (f" ({', '.join(false)})" if false else ""))
    _checks(result, window)
    if out is not None:
        result.files = _write(result, out)
    return result


def _false(episodes: Sequence[Episode], truth: dict[str, Any], window_s: float) -> tuple[str, ...]:
    return tuple(f"{e.rule} {e.subject}" for e in episodes if not _is_true(e, truth, window_s))


def _checks(result: AlertEvaluation, window: float) -> None:
    base = [r for r in result.runs if r.scenario == "baseline"]
    n = sum(r.episodes for r in base)
    result.checks.append(
        ("zero episodes on baseline traffic", n == 0, f"{n} episodes over {len(base)} baseline captures")
    )
    attacks = [r for r in result.runs if r.attacks]
    missed = [f"{r.scenario} {r.rate}/s seed {r.seed}" for r in attacks if not r.caught]
    result.checks.append(
        (
            f"every attack alerted with the right subject within two windows ({2 * window:g} s) of its start",
            not missed,
            f"{len(attacks) - len(missed)}/{len(attacks)} caught"
            + (f"; missed: {', '.join(missed)}" if missed else ""),
        )
    )


def _write(result: AlertEvaluation, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "alerts.csv"
    with runs.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f for f in Run.__dataclass_fields__])
        for r in result.runs:
            writer.writerow(
                [getattr(r, f) if f != "false" else " / ".join(r.false) for f in Run.__dataclass_fields__]
            )
    table = out / "alerts.md"
    checks = [
        f"- {'ok' if holds else 'FAIL'}: {claim} ({evidence})" for claim, holds, evidence in result.checks
    ]
    table.write_text("\n".join([*result.table(), "", *checks]) + "\n")
    return [runs, table]
