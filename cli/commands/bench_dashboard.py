"""``netmon bench dashboard``: seconds per dashboard page in Chromium over a day of results.

Writes a day of every kind's results (``bench.dashboard_day``; the full size of a replayed day by
default: 86,400 one-second batches, 8.5M top-k and 5.2M distinct rows — minutes and a few GB) and
times every page in the system's Chromium (``bench.dashboard_render``), printing the seconds to
each page drawn and their breakdown, two ways (``--mode``): each page opened in a new tab (the
frontend and Plotly loaded anew, the default range of 15 minutes), and each page reached from the
one before by its link in the sidebar, in one tab whose time range is set to the last 24 h (what
an operator does once the dashboard is open). Needs Playwright (``pip install playwright``) and
Chromium (``apt-get install chromium``).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.commands.produced import fail

if TYPE_CHECKING:
    from bench.dashboard_render import PageRender


@click.command("dashboard")
@click.option("--size", type=click.Choice(["full", "per-minute"]), default="full", show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True, help="Times each page is opened.")
@click.option(
    "--dir",
    "where",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the day here (reused when it holds one); default: a temporary directory, removed.",
)
@click.option("--budget", type=float, default=2.0, show_default=True, help="Seconds a page may take.")
@click.option(
    "--mode",
    type=click.Choice(["both", "new-tab", "navigate"]),
    default="both",
    show_default=True,
    help="new-tab: each page opened in a new tab (last 15 min); navigate: page switches in one tab "
    "over the last 24 h, by the sidebar's links.",
)
def command(size: str, rounds: int, where: Path | None, budget: float, mode: str) -> None:
    """Time every dashboard page in Chromium over a day of results (exit 1 over --budget)."""
    from bench.dashboard_day import FULL, PER_MINUTE, write_day
    from bench.dashboard_render import browser, navigate_times, render_times

    if browser() is None:
        fail("bench dashboard", "no Chromium on the PATH (apt-get install chromium)", 1)
    root = where or Path(tempfile.mkdtemp(prefix="netmon-bench-dashboard-"))

    def progress(done: int, total: int) -> None:
        if done % 10_000 == 0:
            click.echo(f"  {done:,}/{total:,} batches", err=True)

    try:
        if not (root / "data" / "results").is_dir():
            click.echo(f"writing a day of results ({size}) in {root}...", err=True)
            day = write_day(
                root / "data",
                root / "state",
                size=FULL if size == "full" else PER_MINUTE,
                progress=progress,
            )
            rows = ", ".join(f"{kind} {n:,}" for kind, n in day.rows.items())
            click.echo(f"written in {day.seconds:.0f} s: {rows}", err=True)
        slow: list[str] = []
        log = root / "dashboard.log"
        if mode in ("both", "new-tab"):
            renders = render_times(root / "data", root / "state", log, rounds=rounds)
            slow += _report("each page in a new tab (last 15 min)", renders, budget)
        if mode in ("both", "navigate"):
            renders = navigate_times(root / "data", root / "state", log, rounds=rounds)
            slow += _report("page switches in one tab, by the sidebar (last 24 h)", renders, budget)
    finally:
        if where is None:
            shutil.rmtree(root, ignore_errors=True)
    if slow:
        click.echo(f"over {budget:g} s: {', '.join(slow)}", err=True)
        sys.exit(1)


def _report(heading: str, renders: list[PageRender], budget: float) -> list[str]:
    """Print one measure's table (each page against ``budget``); the pages over it."""
    click.echo(f"{heading}, budget {budget:g} s:")
    settled = next((r.settled_s for r in renders if r.settled_s is not None), None)
    if settled is not None:
        click.echo(f"(the server settled {settled:.1f} s after it answered: its warm-up's first pass)")
    click.echo(f"{'page':<16} {'median s':>8}  {'load':>5} {'script':>6} {'draw':>5}  {'first':>5}  each")
    for r in renders:
        each = " ".join(f"{s:.2f}" for s in r.seconds)
        first = "" if r.first_s is None else f"{r.first_s:5.2f}"
        over = "  OVER" if r.median_s >= budget else ""
        click.echo(
            f"{r.name:<16} {r.median_s:8.2f}  {r.load_s:5.2f} {r.script_s:6.2f} {r.draw_s:5.2f}"
            f"  {first:>5}  {each}{over}"
        )
    where = heading.split(" (")[0]
    return [f"{r.name} ({where})" for r in renders if r.median_s >= budget]
