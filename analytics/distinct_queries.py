"""The built-in distinct-count queries, as data: what is counted, per what, over which window.

Each query counts the distinct values of one key (a column or tuple of columns, canonical text as
in :mod:`analytics.keys`) per group key, over a window of ``window_s`` seconds sliding every
``sub_window_s`` (N and b of ``docs/distinct.md``). A record whose counted key or group key is
null (e.g. no ports for ICMP) is skipped by that query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from analytics.keys import parse_key

__all__ = ["QUERIES", "DistinctQuery", "get_query"]

#: The flow key: the classic 5-tuple. Portless packets (ICMP, non-first fragments) are no flow.
FIVE_TUPLE = ("src_ip", "dst_ip", "proto", "src_port", "dst_port")


@dataclass(frozen=True, kw_only=True, init=False)
class DistinctQuery:
    """One distinct-count query.

    Parameters
    ----------
    name
        Identifier (used in results and ``--query``).
    count
        The key whose distinct values are counted, e.g. ``("src_ip",)`` (a ``"a,b"`` string is
        accepted and parsed with :func:`analytics.keys.parse_key`).
    group_by
        The group key, or ``()`` for one global count (group text ``""``).
    window_s, sub_window_s
        Window N and sub-window b in seconds; N must be a multiple of b.
    description
        One line for humans.

    Examples
    --------
    >>> DistinctQuery(name="x", count="src_ip", group_by="dst_ip").group_by
    ('dst_ip',)

    References
    ----------
    .. [1] ``docs/distinct.md`` (conventions); L. Golab, PhD thesis, 2006, §2.3.4.
    """

    name: str
    count: tuple[str, ...]
    group_by: tuple[str, ...] = ()
    window_s: float = 10.0
    sub_window_s: float = 1.0
    description: str = ""

    # Written out, not generated: the keys are taken as given (text or tuple), and kept parsed.
    def __init__(
        self,
        *,
        name: str,
        count: str | Sequence[str],
        group_by: str | Sequence[str] = (),
        window_s: float = 10.0,
        sub_window_s: float = 1.0,
        description: str = "",
    ) -> None:
        # Frozen: each field is set once, here.
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "window_s", window_s)
        object.__setattr__(self, "sub_window_s", sub_window_s)
        object.__setattr__(self, "description", description)
        if not self.name:
            raise ValueError("name: empty query name")
        object.__setattr__(self, "count", parse_key(count))
        object.__setattr__(self, "group_by", parse_key(group_by) if group_by else ())
        for field, v in (("window_s", self.window_s), ("sub_window_s", self.sub_window_s)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"{field}: expected a positive number of seconds, got {v!r}")
        window, sub = Decimal(str(self.window_s)), Decimal(str(self.sub_window_s))
        if window % sub:
            raise ValueError(
                f"window_s: {self.window_s:g} is not a multiple of sub_window_s={self.sub_window_s:g}"
            )


QUERIES: dict[str, DistinctQuery] = {
    q.name: q
    for q in (
        DistinctQuery(
            name="ddos",
            count=("src_ip",),
            group_by=("dst_ip",),
            description="distinct sources per destination (DDoS victim indicator)",
        ),
        DistinctQuery(
            name="port-scan",
            count=("dst_port",),
            group_by=("src_ip",),
            description="distinct destination ports per source (port scan)",
        ),
        DistinctQuery(
            name="host-scan",
            count=("dst_ip",),
            group_by=("src_ip",),
            description="distinct destinations per source (host scan / worm)",
        ),
        DistinctQuery(
            name="flows",
            count=FIVE_TUPLE,
            description="distinct 5-tuple flows overall (packets with ports only)",
        ),
        DistinctQuery(
            name="flows-per-proto",
            count=FIVE_TUPLE,
            group_by=("proto",),
            description="distinct 5-tuple flows per IP protocol",
        ),
    )
}


def get_query(name: str) -> DistinctQuery:
    """The built-in query ``name``; a one-line error lists the known ones.

    >>> get_query("ddos").count
    ('src_ip',)
    """
    try:
        return QUERIES[name]
    except KeyError:
        raise ValueError(f"query: unknown query {name!r} (one of: {', '.join(QUERIES)})") from None
