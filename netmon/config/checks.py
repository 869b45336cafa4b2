"""The configuration's error type and the small checks every section uses (one-line messages).

Every message reads ``<where> <key>: expected <what>, got <value>``, where ``<where>`` names the
section (``[kafka]``) or the query (``[[queries.topk]] 'top-sources'``).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ConfigError", "check_url", "expect", "port", "positive"]


class ConfigError(ValueError):
    """A configuration problem, naming the file, section and key."""


def expect(ok: bool, where: str, key: str, what: str, got: Any) -> None:
    """Raise ``ConfigError("<where> <key>: expected <what>, got <got!r>")`` unless ``ok``.

    >>> expect(False, "[kafka]", "port", "a port in 1..65535", 0)
    Traceback (most recent call last):
    ...
    netmon.config.checks.ConfigError: [kafka] port: expected a port in 1..65535, got 0
    """
    if not ok:
        raise ConfigError(f"{where} {key}: expected {what}, got {got!r}")


def port(where: str, key: str, value: int) -> None:
    """A TCP port: an integer in 1..65535."""
    expect(isinstance(value, int) and 1 <= value <= 65535, where, key, "a port in 1..65535", value)


def positive(where: str, key: str, value: float, *, zero: bool = False) -> None:
    """A finite number > 0 (``zero=True``: >= 0)."""
    ok = isinstance(value, int | float) and math.isfinite(value) and (value >= 0 if zero else value > 0)
    expect(ok, where, key, "a number >= 0" if zero else "a number > 0", value)


def check_url(where: str, key: str, url: str) -> None:
    """An http(s) URL with a well-formed host (no empty labels such as ``a..b``) and a valid port.

    >>> check_url("[[alerts.targets]] 'x'", "url", "http://a..b/")
    Traceback (most recent call last):
    ...
    netmon.config.checks.ConfigError: [[alerts.targets]] 'x' url: expected an http:// or https:// URL ...
    """
    # The URL is not echoed: chat webhook URLs embed a token.
    what = "an http:// or https:// URL with a host name"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in range
    except ValueError:
        expect(False, where, key, what, "<hidden>")
        return
    labels = host.rstrip(".").split(".")
    ok = parts.scheme in ("http", "https") and bool(host) and (":" in host or all(labels))
    expect(ok and not any(c.isspace() for c in url), where, key, what, "<hidden>")
