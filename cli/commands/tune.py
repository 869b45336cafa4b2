"""``netmon tune``: change the resource manager's budgets and QoS knobs while the pipeline runs.

The values go to the control file ``<data_dir>/control/resources.json``, replaced atomically; the
running manager (``[resources] manage = true``, ``pipeline.resource_manager``) reads it at its
next batch, so a change is in force within one trigger, without a restart. ``--window`` sets a
top-k or a distinct query's window (``<data_dir>/control/windows.json``, ``pipeline.window_knobs``),
read by the running pipeline at its next batch whether or not the manager is on: ``NAME`` is the
query of that name (``topk/NAME`` or ``distinct/NAME`` when both kinds have one).
``--granularity`` sets a top-k query's sub-window, or a distinct query's as ``distinct/NAME``
(seed 004's granularity knob: ``<data_dir>/control/granularity.json``), a whole multiple of its
``sub_window_s`` up to ``[resources] sub_window_max_factor`` times it that divides the window in
force; the running pipeline puts it in force at the first instant on both the old and the new
grid. Without options it shows the knobs in force; ``--clear`` goes back to the configuration.

    netmon tune --cpu-budget 0.5 --importance top-sources=4 --keep-min-of top-pairs=0.5
    netmon tune --window top-sources=30 --window ddos=120
    netmon tune --granularity top-sources=2 --granularity distinct/ddos=4
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from cli.main import pass_config
from netmon.config import Config, DistinctQuery, TopKQuery
from netmon.config.checks import ConfigError

__all__ = ["command"]


def _pairs(option: str, values: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for text in values:
        name, sep, value = text.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise click.UsageError(f"{option}: expected NAME=NUMBER, got {text!r}") from None
    return out


@click.command("tune")
@click.option("--cpu-budget", type=float, help="CPU seconds per second the shared query may use.")
@click.option("--reserve", type=float, help="Share of the budgets kept free, in [0, 1).")
@click.option("--keep-min", type=float, help="Lowest fraction any drop box may keep, in (0, 1].")
@click.option("--importance", multiple=True, metavar="QUERY=W", help="A query's weight (default 1).")
@click.option("--keep-min-of", multiple=True, metavar="QUERY=X", help="A query's own lowest fraction.")
@click.option(
    "--window",
    multiple=True,
    metavar="QUERY=SECONDS",
    help="A top-k or distinct query's window from the next batch on (a multiple of its sub-window; "
    "topk/NAME or distinct/NAME when both kinds have a query NAME).",
)
@click.option(
    "--granularity",
    multiple=True,
    metavar="QUERY=SECONDS",
    help="A top-k query's sub-window (distinct/NAME: a distinct query's) from the next batch on (a "
    "whole multiple of its sub_window_s, at most sub_window_max_factor times it, dividing its window).",
)
@click.option("--clear", is_flag=True, help="Remove every override: back to the configuration.")
@click.option("--json", "as_json", is_flag=True, help="Print the knobs in force as JSON.")
@pass_config
def command(
    cfg: Config,
    cpu_budget: float | None,
    reserve: float | None,
    keep_min: float | None,
    importance: tuple[str, ...],
    keep_min_of: tuple[str, ...],
    window: tuple[str, ...],
    granularity: tuple[str, ...],
    clear: bool,
    as_json: bool,
) -> None:
    """Change the resource manager's knobs at run time (the running pipeline reads them)."""
    from pipeline.resource_manager import (
        TUNABLE,
        control_file,
        eligible_queries,
        in_force,
        read_overrides,
        write_overrides,
    )
    from pipeline.window_knobs import window_key

    path = control_file(cfg)
    try:
        overrides: dict[str, Any] = {} if clear else read_overrides(path)
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (netmon tune --clear starts afresh)") from None
    for key, value in (("cpu_budget", cpu_budget), ("reserve", reserve), ("keep_min", keep_min)):
        if value is not None:
            overrides[key] = value
    names = set(eligible_queries(cfg))
    for key, option, given in (
        ("importance", "--importance", importance),
        ("keep_min_by_query", "--keep-min-of", keep_min_of),
    ):
        values = _pairs(option, given)
        unknown = sorted(set(values) - names)
        if unknown:
            known = ", ".join(sorted(names))
            raise click.UsageError(
                f"{option}: no drop box for query {unknown[0]!r} (queries with one: {known})"
            )
        if values:
            overrides[key] = {**overrides.get(key, {}), **values}
    try:
        res = in_force(cfg, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    # Everything is checked before either control file is written: a refused command changes nothing.
    windows, save_windows = _windows(cfg, window, clear)
    grains, save_grains = _granularities(cfg, granularity, clear, windows, res.sub_window_max_factor)
    _windows_fit_sub_windows(cfg, window, windows, grains)
    save_windows()
    save_grains()
    changed = (
        clear or any(v is not None for v in (cpu_budget, reserve, keep_min)) or importance or keep_min_of
    )
    if changed:
        if overrides:
            write_overrides(path, overrides)
        else:
            path.unlink(missing_ok=True)
    shown = {key: getattr(res, key) for key in TUNABLE}
    in_use = {
        window_key(kind, q.name): windows.get(window_key(kind, q.name), q.window_s)
        for kind, queries in (("topk", cfg.queries.topk), ("distinct", cfg.queries.distinct))
        for q in queries
    }
    sub_in_use = {
        window_key(kind, q.name): grains.get(window_key(kind, q.name), q.sub_window_s)
        for kind, queries in (("topk", cfg.queries.topk), ("distinct", cfg.queries.distinct))
        for q in queries
    }
    if as_json:
        body = {**shown, "overridden": sorted(overrides), "manage": res.manage}
        body.update(windows=in_use, windows_overridden=sorted(windows))
        body.update(sub_windows=sub_in_use, sub_windows_overridden=sorted(grains))
        click.echo(json.dumps(body, sort_keys=True))
        return
    for key, value in shown.items():
        mark = " (overridden)" if key in overrides else ""
        click.echo(f"{key:<18} {value}{mark}")
    for key, seconds in in_use.items():
        mark = " (overridden)" if key in windows else ""
        click.echo(f"{'window ' + key:<18} {seconds:g} s{mark}")
    for key, seconds in sub_in_use.items():
        mark = " (overridden)" if key in grains else ""
        click.echo(f"{'sub-window ' + key:<18} {seconds:g} s{mark}")
    if not res.manage and not ((window or granularity) and not changed):  # the windows need no manager
        click.echo(
            "note: [resources] manage is false: no resource manager reads these until it is on", err=True
        )


def _windows(cfg: Config, given: tuple[str, ...], clear: bool) -> tuple[dict[str, float], Callable[[], None]]:
    """The windows asked for (control file entries, ``pipeline.window_knobs.window_key``),
    checked against their queries, and what writes them when changed."""
    from pipeline.window_knobs import read_windows, window_file, window_key

    path = window_file(cfg)
    try:
        windows = {} if clear else read_windows(path)
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (netmon tune --clear starts afresh)") from None
    for name, seconds in _pairs("--window", given).items():
        kind, q = _windowed(cfg, name)
        problem = q.window_problem(seconds)
        if problem is not None:
            raise click.UsageError(f"--window: {problem}")
        windows[window_key(kind, q.name)] = seconds

    return windows, _saver(path, windows, bool(given or clear))


def _saver(path: Path, values: dict[str, float], active: bool) -> Callable[[], None]:
    """Writes ``values`` to the control file at ``path`` when asked to (``active``: the knob was
    given or cleared), or removes the file when nothing is left; run once every knob is checked."""

    def save() -> None:
        from pipeline.window_knobs import write_windows

        if active:
            if values:
                write_windows(path, values)
            else:
                path.unlink(missing_ok=True)

    return save


def _windows_fit_sub_windows(
    cfg: Config, given: tuple[str, ...], windows: dict[str, float], grains: dict[str, float]
) -> None:
    """Each window asked for is a whole multiple of its query's sub-window in force (the
    granularity file's, or the one asked for with it): else the running kind would refuse that
    granularity at its next batch and fall back to the configured sub-window."""
    from pipeline.window_knobs import window_key

    for name in _pairs("--window", given):
        kind, q = _windowed(cfg, name)
        key = window_key(kind, q.name)
        sub = grains.get(key)
        if sub is not None and round(windows[key] * 1e6) % round(sub * 1e6):
            raise click.UsageError(
                f"--window: {'distinct' if kind == 'distinct' else 'top-k'} query {q.name!r}: window "
                f"{windows[key]:g} s is not a multiple of its sub-window {sub:g} s in force "
                f"(netmon tune --granularity {key}=SECONDS first)"
            )


def _granularities(
    cfg: Config, given: tuple[str, ...], clear: bool, windows: dict[str, float], max_factor: float
) -> tuple[dict[str, float], Callable[[], None]]:
    """The sub-windows asked for (``pipeline.window_knobs.granularity_file``; a top-k query's
    name, ``distinct/NAME`` for a distinct query), checked against their query at the window in
    force (``windows``, else ``window_s``), and what writes them when changed."""
    from pipeline.window_knobs import (
        KINDS,
        granularity_factor,
        granularity_file,
        read_windows,
        window_key,
    )

    path = granularity_file(cfg)
    try:
        grains = {} if clear else read_windows(path)
    except ConfigError as exc:
        raise click.ClickException(f"{exc} (netmon tune --clear starts afresh)") from None
    for name, seconds in _pairs("--granularity", given).items():
        kind, q = _grained(cfg, name)
        key = window_key(kind, q.name)
        window_s = windows.get(key, q.window_s)
        problem = granularity_factor(q, seconds, window_s, max_factor, label=KINDS[kind][1])[1]
        if problem is not None:
            raise click.UsageError(f"--granularity: {problem}")
        grains[key] = seconds

    return grains, _saver(path, grains, bool(given or clear))


def _grained(cfg: Config, name: str) -> tuple[str, TopKQuery | DistinctQuery]:
    """``(kind, query)`` of a ``--granularity`` name: a top-k query's ``NAME`` (or ``topk/NAME``),
    a distinct query's ``distinct/NAME``."""
    if name.startswith("distinct/"):
        distinct = {q.name: q for q in cfg.queries.distinct}
        wanted = name.removeprefix("distinct/")
        found = distinct.get(wanted)
        if found is None:
            known = ", ".join(distinct) or "none"
            raise click.UsageError(f"--granularity: no distinct query {wanted!r} (distinct queries: {known})")
        return "distinct", found
    queries = {q.name: q for q in cfg.queries.topk}
    q = queries.get(name.removeprefix("topk/"))
    if q is None:
        raise click.UsageError(
            f"--granularity: no top-k query {name!r} (top-k queries: {', '.join(queries) or 'none'})"
        )
    return "topk", q


def _windowed(cfg: Config, name: str) -> tuple[str, TopKQuery | DistinctQuery]:
    """``(kind, query)`` of a ``--window`` name: ``NAME``, ``topk/NAME`` or ``distinct/NAME``."""
    kind, sep, rest = name.partition("/")
    kinds, wanted = ((kind,), rest) if sep and kind in ("topk", "distinct") else (("topk", "distinct"), name)
    found: dict[str, TopKQuery | DistinctQuery] = {
        k: q
        for k, queries in (("topk", cfg.queries.topk), ("distinct", cfg.queries.distinct))
        if k in kinds
        for q in queries
        if q.name == wanted
    }
    if len(found) == 1:
        return next(iter(found.items()))
    if found:
        raise click.UsageError(
            f"--window: a top-k and a distinct query are named {name!r}: say topk/{name} or distinct/{name}"
        )
    known = [q.name for q in cfg.queries.topk] + [f"distinct/{q.name}" for q in cfg.queries.distinct]
    raise click.UsageError(
        f"--window: no top-k or distinct query {name!r} (queries with a window: {', '.join(known) or 'none'})"
    )
