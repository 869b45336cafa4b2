"""Durations and instants as text: ``"500ms"`` -> nanoseconds, nanoseconds -> ISO-8601 UTC.

One parser and one formatter for every offline command (``netmon analyze topk``, ``distinct``),
so a window written the same way means the same thing everywhere, and reports print their
window ends alike.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

__all__ = ["iso_utc", "parse_duration_ns"]

_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|ms|s|m|h)?\s*$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_duration_ns(
    text: str | int | timedelta, *, name: str = "duration", bare_unit: str | None = "s"
) -> int:
    """``"10s"``, ``"500ms"``, ``"1.5m"``, ``"250us"``, ``"2h"``, a ``timedelta`` or integer ns -> ns.

    A number without a unit is read in ``bare_unit`` (seconds), or refused when ``bare_unit`` is
    ``None`` (where a bare number could be mistaken for a packet count). The result must be a
    positive whole number of nanoseconds.

    >>> parse_duration_ns("1.5s"), parse_duration_ns("250ms"), parse_duration_ns("2")
    (1500000000, 250000000, 2000000000)
    """
    if isinstance(text, timedelta):
        ns = Decimal((text.days * 86_400 + text.seconds) * 10**9 + text.microseconds * 1000)
    elif isinstance(text, int) and not isinstance(text, bool):
        ns = Decimal(text)
    else:
        m = _DURATION.match(str(text))
        unit = m and (m.group(2) or bare_unit)
        if not m or unit is None:
            raise ValueError(f"{name}: cannot parse duration {text!r} (e.g. 10s, 500ms, 1m)")
        ns = Decimal(m.group(1)) * _UNITS[unit]
    if ns != ns.to_integral_value() or ns <= 0:
        raise ValueError(f"{name}: {text!r} is not a positive whole number of nanoseconds")
    return int(ns)


def iso_utc(ns: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC with ``Z``.

    Seconds always, then a fraction of 3, 6 or 9 digits only when it is non-zero (whole
    milliseconds, microseconds, or else).

    >>> iso_utc(1_700_000_010_500_000_000), iso_utc(0)
    ('2023-11-14T22:13:30.500Z', '1970-01-01T00:00:00Z')
    >>> iso_utc(1_500_000), iso_utc(1)
    ('1970-01-01T00:00:00.001500Z', '1970-01-01T00:00:00.000000001Z')
    """
    sec, frac = divmod(int(ns), 10**9)
    text = (_EPOCH + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        digits = f"{frac:09d}"
        digits = digits[:3] if digits.endswith("000000") else digits[:6] if digits.endswith("000") else digits
        text += "." + digits
    return text + "Z"
