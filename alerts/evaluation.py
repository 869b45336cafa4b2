"""``netmon eval alerts``: precision and recall of alert episodes against the generator's ground truth.

Every scenario of :mod:`ingest.generate` is generated at each rate (packets per second over
``duration_s``) and seed, analysed offline (:func:`alerts.offline.analyze_capture`, the rules of
``netmon analyze alerts``) and scored against ``details["truth"]``:

- an episode is **true** when its subject is one of the attack's attackers or victims and it
  overlaps the attack, ``[start, end + 2 windows]``; every other episode is **false**
  (so every episode on ``baseline`` is false);
- an attack is **caught** when an episode of *its* rule (the rules labelled with the scenario,
  ``labels.scenario``: ``port-scan`` for the port scan, ``ddos`` for the DDoS, ...) names the right
  subject (a victim for a destination rule, ``query = "dst"``, an attacker for a source rule) and
  starts (its first report, a window end) at most two windows after the attack's first packet;
- precision = true / all episodes; recall = caught / attacks.

Real captures (``captures``) with no attack in them are analysed too: every episode there is false.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from alerts.defaults import DETECTION_RULES
from alerts.offline import Episode, analyze_capture
from ingest.generate import SCENARIOS, generate
from netmon.config import AlertRule, AlertsConfig

__all__ = ["RATES", "AlertEvaluation", "Run", "attack_rules", "run_evaluation", "score"]

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
    #: "rule subject" of the first episode that caught the attack
    caught_by: str = ""


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

    def to_dict(self) -> dict[str, Any]:
        """What ``netmon eval alerts --json`` prints: every run, the checks, the files written."""
        return {
            "runs": [asdict(r) | {"false": list(r.false)} for r in self.runs],
            "checks": [{"claim": c, "holds": h, "evidence": e} for c, h, e in self.checks],
            "files": [str(p) for p in self.files],
        }


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


def attack_rules(scenario: str, rules: Sequence[AlertRule] = ()) -> frozenset[str]:
    """The names of the rules meant to catch ``scenario``: those labelled with it
    (``labels.scenario``), among ``rules`` and the built-in detection rules (a configured rule that
    replaces a built-in one keeps its name)."""
    return frozenset(r.name for r in (*DETECTION_RULES, *rules) if r.labels.get("scenario") == scenario)


def _right_subject(e: Episode, truth: dict[str, Any]) -> bool:
    """The episode names the side of the attack its rule looks at: a destination rule a victim, a
    source rule an attacker."""
    side = {"dst": truth["victims"], "src": truth["attackers"]}.get(e.query)
    return e.subject in (side if side is not None else {*truth["attackers"], *truth["victims"]})


def score(
    episodes: Sequence[Episode],
    truth: dict[str, Any],
    window_s: float,
    rules: Collection[str] | None = None,
) -> tuple[int, int, float | None]:
    """(true episodes, caught 0/1, delay from the attack's start) of one capture's episodes.

    ``rules``: only an episode of one of these rules, naming the right side of the attack
    (:func:`attack_rules`), catches it; None: any true episode does."""
    true = [e for e in episodes if _is_true(e, truth, window_s)]
    if rules is not None:
        true_catching = [e for e in true if e.rule in rules and _right_subject(e, truth)]
    else:
        true_catching = true
    if not true:
        return 0, 0, None
    start = _epoch(truth["start"])
    in_time = [e.first - start for e in true_catching if e.first <= start + 2 * window_s + 1e-9]
    return len(true), int(bool(in_time)), (min(in_time) if in_time else None)


def _caught_by(
    episodes: Sequence[Episode], truth: dict[str, Any], window_s: float, rules: Collection[str]
) -> str:
    if truth.get("start") is None:
        return ""
    limit = _epoch(truth["start"]) + 2 * window_s + 1e-9
    for e in episodes:  # sorted by first report
        if e.rule in rules and _right_subject(e, truth) and _is_true(e, truth, window_s) and e.first <= limit:
            return f"{e.rule} {e.subject}"
    return ""


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
                    expected = attack_rules(scenario, rules)
                    true, caught, delay = score(episodes, truth, window, expected)
                    false = _false(episodes, truth, window)
                    run = Run("generated", scenario, rate, seed, summary.packets, len(episodes), true,
                              int(truth["start"] is not None), caught, delay, false,
                              _caught_by(episodes, truth, window, expected))  # fmt: skip
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
            f"every attack alerted by its rule with the right subject within two windows ({2 * window:g} s)"
            " of its start",
            not missed,
            f"{len(attacks) - len(missed)}/{len(attacks)} caught"
            + (f"; missed: {', '.join(missed)}" if missed else ""),
        )
    )
    generated = [r for r in result.runs if r.source == "generated" and r.scenario != "baseline"]
    if generated:
        false = [f"{r.scenario} {r.rate}/s seed {r.seed}: {f}" for r in generated for f in r.false]
        result.checks.append(
            (
                "no false episode on the attack captures (each names the attack's attacker or victim)",
                not false,
                f"{len(false)} false episodes over {len(generated)} attack captures"
                + (f": {'; '.join(false)}" if false else ""),
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
