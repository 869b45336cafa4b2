"""What ``netmon analyze topk|distinct|join`` share: query names, lateness, closing at the end.

``--query NAME`` names a query of the pipeline's configuration (``[[queries.topk]]``,
``[[queries.distinct]]``, ``[[queries.join]]``; ``netmon config show``), run offline with the
pipeline's parameters. Some commands also have built-in offline queries; a name that is both
means the configured one (:data:`CONFIGURED_FIRST`).

``--close-at-end/--keep-open``: at the end of a replay ``netmon demo`` sends a watermark control
message ``[pipeline] watermark_s + traffic_window_s`` past the last record
(``ingest.replay.ReplayOptions.close_windows_s``), so the pipeline's watermark ends
``traffic_window_s`` past the last record and the sub-windows that end by then close. By default
the offline commands do the same at the end of the file (:func:`close_after_ns`).

``--watermark DURATION`` (top-k and distinct): the watermark delay ``d``, with the pipeline's one
meaning of late (``docs/reliability.md``): a record more than ``d`` behind the newest timestamp
seen before it is late, dropped and counted; a sub-window closes once a timestamp reaches its end
plus ``d``. A configured query (``--query``) runs with ``[pipeline] watermark_s``
(:func:`watermark_ns`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Protocol, TypeVar

import click

from netmon.config import Config

__all__ = [
    "CONFIGURED_FIRST",
    "QueryNameError",
    "close_after_ns",
    "close_option",
    "find_query",
    "seconds_ns",
    "watermark_ns",
    "watermark_option",
]

#: The ``--help`` sentence on names that are both configured and built in.
CONFIGURED_FIRST = "A name that is both a configured and a built-in query means the configured one."


class _Named(Protocol):
    @property
    def name(self) -> str: ...


Q = TypeVar("Q", bound=_Named)


class QueryNameError(click.ClickException):
    """An unknown ``--query`` name: one line naming the known ones, exit code 2 (a usage error)."""

    exit_code = 2


def find_query(kind: str, name: str, configured: Sequence[Q], builtin: Iterable[str] = ()) -> Q | None:
    """The configured query ``name``; ``None`` if it is only a built-in one; else :class:`QueryNameError`.

    ``kind`` is the ``[[queries.<kind>]]`` table. A configured query wins over a built-in one of
    the same name.
    """
    for query in configured:
        if query.name == name:
            return query
    builtin = list(builtin)
    if name in builtin:
        return None
    names = ", ".join(q.name for q in configured) or "none"
    known = f"configured [[queries.{kind}]]: {names}"
    if builtin:
        known += f"; built-in: {', '.join(builtin)}"
    raise QueryNameError(f"--query: unknown query {name!r} ({known})")


def seconds_ns(seconds: float, name: str) -> int:
    """A configured number of seconds (``0.5``) as whole nanoseconds, exactly as written."""
    ns = Decimal(str(seconds)) * 10**9
    if ns != ns.to_integral_value() or ns < 0:
        raise click.ClickException(f"{name}: {seconds!r} s is not a whole number of nanoseconds >= 0")
    return int(ns)


def close_after_ns(cfg: Config) -> int:
    """How far past the last record the pipeline closes sub-windows at the end of a demo replay.

    ``netmon demo`` ends its replay with a watermark message ``watermark_s + traffic_window_s``
    past the last record; the watermark (maximum event time − ``watermark_s``) then stands
    ``traffic_window_s`` past it.
    """
    return seconds_ns(cfg.pipeline.traffic_window_s, "[pipeline] traffic_window_s")


CLOSE_HELP = (
    "At the end of the file, close the sub-windows the pipeline closes at the end of a replay "
    "(netmon demo, netmon replay --close-at-end): those that end at most [pipeline] "
    "traffic_window_s after the last record. --keep-open leaves them open and unreported "
    "(a replay that ends without the watermark message)."
)


def close_option(f: Callable[..., object]) -> Callable[..., object]:
    """The ``--close-at-end/--keep-open`` flag (default: close), as the ``close_at_end`` parameter."""
    return click.option(
        "--close-at-end/--keep-open", "close_at_end", default=True, show_default=True, help=CLOSE_HELP
    )(f)


WATERMARK_HELP = (
    "Watermark delay: a record more than this behind the newest timestamp before it is late "
    "(dropped and counted, as in the pipeline); a sub-window closes once a timestamp reaches its "
    "end plus this. [a configured --query: [pipeline] watermark_s, else 0]"
)


def _delay(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    from analytics.topk_offline import parse_delay

    try:
        return parse_delay(value, "--watermark", bare_unit="s")
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--watermark: ")) from None


def watermark_option(f: Callable[..., object]) -> Callable[..., object]:
    """``--watermark DURATION`` (``0`` allowed, bare numbers are seconds): ``watermark``, ns or None."""
    return click.option(
        "--watermark", "watermark", callback=_delay, default=None, metavar="DURATION", help=WATERMARK_HELP
    )(f)


def watermark_ns(cfg: Config, given: int | None, *, configured: bool) -> int:
    """The watermark delay (ns): ``given``, else ``[pipeline] watermark_s`` for a configured query, else 0."""
    if given is not None:
        return given
    return seconds_ns(cfg.pipeline.watermark_s, "[pipeline] watermark_s") if configured else 0
