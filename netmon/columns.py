"""The packet record's column names and key specifications, without pyarrow.

The configuration checks ``key``/``count``/``group_by`` against these names when it loads, and
the command line must start without importing pyarrow; :mod:`netmon.records` builds the Arrow
schema with the same names in the same order (a test checks they agree).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RECORD_COLUMNS", "parse_key"]

#: The record columns, in wire-format order (``docs/wire-format.md``).
RECORD_COLUMNS: tuple[str, ...] = (
    "ts",
    "cap_len",
    "wire_len",
    "ip_version",
    "src_ip",
    "dst_ip",
    "proto",
    "ip_len",
    "ttl",
    "src_port",
    "dst_port",
    "tcp_flags",
    "tcp_seq",
    "tcp_ack",
    "tcp_window",
    "icmp_type",
    "icmp_code",
    "vlan",
    "iface",
)

#: Columns that are not key fields (every record has its own time).
_NOT_KEYS = {"ts"}


def parse_key(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"src_ip,dst_ip"`` or ``("src_ip", "dst_ip")`` -> validated tuple of column names.

    >>> parse_key("proto, dst_port")
    ('proto', 'dst_port')
    """
    fields = tuple(f.strip() for f in (spec.split(",") if isinstance(spec, str) else spec) if f.strip())
    if not fields:
        raise ValueError("key: empty key specification")
    for f in fields:
        if f not in RECORD_COLUMNS or f in _NOT_KEYS:
            allowed = ", ".join(c for c in RECORD_COLUMNS if c not in _NOT_KEYS)
            raise ValueError(f"key: unknown field {f!r} (one of: {allowed})")
    return fields
