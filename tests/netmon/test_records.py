"""The record schema: the Spark DDL is derived from the Arrow schema, and matches the wire format."""

from __future__ import annotations

import pyarrow as pa
import pytest

from netmon.records import ARROW_SCHEMA, RECORD_COLUMNS, SPARK_DDL, _spark_ddl

#: SPARK_DDL as it was written by hand before it was derived from ARROW_SCHEMA: the
#: derivation must reproduce it exactly, or the pipeline would decode the wire format differently.
HAND_WRITTEN_DDL = (
    "ts_ns BIGINT, cap_len BIGINT, wire_len BIGINT, ip_version TINYINT, src_ip STRING, dst_ip STRING, "
    "proto SMALLINT, ip_len INT, ttl SMALLINT, src_port INT, dst_port INT, tcp_flags SMALLINT, "
    "tcp_seq BIGINT, tcp_ack BIGINT, tcp_window INT, icmp_type SMALLINT, icmp_code SMALLINT, "
    "vlan INT, iface STRING"
)


def test_spark_ddl_is_the_hand_written_one() -> None:
    assert SPARK_DDL == HAND_WRITTEN_DDL


def test_spark_ddl_has_one_column_per_record_column_in_order() -> None:
    names = [column.split()[0] for column in SPARK_DDL.split(", ")]
    assert names == ["ts_ns", *RECORD_COLUMNS[1:]]
    assert RECORD_COLUMNS[0] == "ts" and list(RECORD_COLUMNS) == ARROW_SCHEMA.names


@pytest.mark.parametrize(
    ("arrow", "spark"),
    [
        (pa.int8(), "TINYINT"),
        (pa.int16(), "SMALLINT"),
        (pa.int32(), "INT"),
        (pa.int64(), "BIGINT"),
        (pa.string(), "STRING"),
    ],
)
def test_arrow_types_map_to_spark_types(arrow: pa.DataType, spark: str) -> None:
    schema = pa.schema([("ts", pa.timestamp("ns", tz="UTC")), ("c", arrow)])
    assert _spark_ddl(schema) == f"ts_ns BIGINT, c {spark}"


@pytest.mark.parametrize(
    "field",
    [pa.field("c", pa.float64()), pa.field("c", pa.uint16()), pa.field("ts", pa.timestamp("us", tz="UTC"))],
)
def test_a_type_without_a_mapping_is_refused(field: pa.Field) -> None:
    with pytest.raises(ValueError, match="no Spark type"):
        _spark_ddl(pa.schema([field]))
