"""The packet-header record: one per decoded packet, the same columns everywhere.

The column names and order below are shared by the Arrow tables the readers yield, the Kafka wire
format (``docs/wire-format.md``), the Spark schema the pipeline decodes with, and Parquet output.
Absent fields are null.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

__all__ = ["ARROW_SCHEMA", "RECORD_COLUMNS", "SPARK_DDL", "WIRE_FORMAT", "WIRE_VERSION", "parse_key"]

#: Wire-format name and version, sent as Kafka headers ``netmon.format`` / ``netmon.version``.
WIRE_FORMAT = "packets-csv"
WIRE_VERSION = 1

ARROW_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("ns", tz="UTC")),  # event time, nanosecond precision
        ("cap_len", pa.int32()),  # bytes captured
        ("wire_len", pa.int32()),  # bytes on the wire (original length)
        ("ip_version", pa.int8()),  # 4 or 6
        ("src_ip", pa.string()),  # canonical text form (RFC 5952 for IPv6)
        ("dst_ip", pa.string()),
        ("proto", pa.int16()),  # IP protocol number (IPv6: the transport's next header)
        ("ip_len", pa.int32()),  # IPv4 total length / IPv6 payload length + 40
        ("ttl", pa.int16()),  # IPv4 TTL / IPv6 hop limit
        ("src_port", pa.int32()),  # TCP/UDP; null for non-first fragments
        ("dst_port", pa.int32()),
        ("tcp_flags", pa.int16()),  # the 8 flag bits (CWR..FIN)
        ("tcp_seq", pa.int64()),
        ("tcp_ack", pa.int64()),
        ("tcp_window", pa.int32()),
        ("icmp_type", pa.int16()),  # ICMP or ICMPv6
        ("icmp_code", pa.int16()),
        ("vlan", pa.int32()),  # outermost 802.1Q VLAN id
        ("iface", pa.string()),  # interface / source id (pcapng if_name or index, live iface name)
    ]
)

RECORD_COLUMNS: tuple[str, ...] = tuple(ARROW_SCHEMA.names)

#: The Spark DDL of one wire-format line: ``ts`` travels as integer nanoseconds (``ts_ns``) and the
#: pipeline derives the ``ts`` timestamp (microseconds, Spark's precision) from it.
SPARK_DDL = (
    "ts_ns BIGINT, cap_len INT, wire_len INT, ip_version TINYINT, src_ip STRING, dst_ip STRING, "
    "proto SMALLINT, ip_len INT, ttl SMALLINT, src_port INT, dst_port INT, tcp_flags SMALLINT, "
    "tcp_seq BIGINT, tcp_ack BIGINT, tcp_window INT, icmp_type SMALLINT, icmp_code SMALLINT, "
    "vlan INT, iface STRING"
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
