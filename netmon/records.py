"""The packet-header record: one per decoded packet, the same columns everywhere.

The column names and order below are shared by the Arrow tables the readers yield, the Kafka wire
format (``docs/wire-format.md``), the Spark schema the pipeline decodes with, and Parquet output.
Absent fields are null.

``cap_len`` and ``wire_len`` are int64 (they used to be int32, which turned an original length
of ``0xFFFFFFFF`` into -1): the capture formats store them as unsigned 32-bit numbers.
Kafka messages carry them as decimal text, so older messages decode unchanged; Parquet files
written with the int32 columns are cast on read (:func:`conform`).
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ARROW_SCHEMA", "RECORD_COLUMNS", "SPARK_DDL", "WIRE_FORMAT", "WIRE_VERSION", "conform"]

#: Wire-format name and version, sent as Kafka headers ``netmon.format`` / ``netmon.version``.
WIRE_FORMAT = "packets-csv"
WIRE_VERSION = 1

ARROW_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("ns", tz="UTC")),  # event time, nanosecond precision
        ("cap_len", pa.int64()),  # bytes captured (int64: the formats' fields are unsigned 32-bit)
        ("wire_len", pa.int64()),  # bytes on the wire (original length, 0 .. 2**32 - 1)
        ("ip_version", pa.int8()),  # 4 or 6
        ("src_ip", pa.string()),  # canonical text form (RFC 5952 for IPv6)
        ("dst_ip", pa.string()),
        ("proto", pa.int16()),  # IP protocol number (IPv6: the transport's next header)
        ("ip_len", pa.int32()),  # IPv4 total length / IPv6 payload length + 40 (at most 65,575)
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

#: Spark SQL type of each Arrow type the record uses (``ts`` aside: see :data:`SPARK_DDL`).
_SPARK_TYPES = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.string(): "STRING",
}


def _spark_ddl(schema: pa.Schema) -> str:
    """The Spark DDL of a wire-format line of ``schema``: ``ts`` as ``ts_ns BIGINT``, then by Arrow type.

    >>> _spark_ddl(pa.schema([("ts", pa.timestamp("ns", tz="UTC")), ("proto", pa.int16())]))
    'ts_ns BIGINT, proto SMALLINT'
    >>> _spark_ddl(pa.schema([("ts", pa.timestamp("ns", tz="UTC")), ("x", pa.float64())]))
    Traceback (most recent call last):
    ...
    ValueError: no Spark type for column 'x' (double)
    """
    columns = []
    for field in schema:
        if field.name == "ts" and pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            columns.append("ts_ns BIGINT")  # integer nanoseconds on the wire
        elif field.type in _SPARK_TYPES:
            columns.append(f"{field.name} {_SPARK_TYPES[field.type]}")
        else:
            raise ValueError(f"no Spark type for column {field.name!r} ({field.type})")
    return ", ".join(columns)


#: The Spark DDL of one wire-format line: ``ts`` travels as integer nanoseconds (``ts_ns``) and the
#: pipeline derives the ``ts`` timestamp (microseconds, Spark's precision) from it. Derived from
#: :data:`ARROW_SCHEMA`, so the two cannot drift apart.
SPARK_DDL = _spark_ddl(ARROW_SCHEMA)


def conform(table: pa.Table) -> pa.Table:
    """``table`` (record columns, all or some, in any order) with the types of :data:`ARROW_SCHEMA`.

    Records written before a column was widened (``cap_len``/``wire_len`` were int32) are cast;
    a value that does not fit the current type, or a column that is not a record column, is an
    error (:class:`ValueError`).

    >>> old = pa.table({"wire_len": pa.array([60, None], pa.int32()), "proto": pa.array([6, 17], pa.int16())})
    >>> conform(old).schema.field("wire_len").type
    DataType(int64)
    """
    fields = []
    for name in table.column_names:
        if name not in RECORD_COLUMNS:
            raise ValueError(f"{name!r} is not a record column (one of {list(RECORD_COLUMNS)})")
        fields.append(ARROW_SCHEMA.field(name))
    target = pa.schema(fields)
    if table.schema.equals(target):
        return table
    try:
        return table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"records do not fit the record schema: {exc}") from None
