"""The shared query's pyarrow decode equals Spark's native decode, line class by line class.

``pipeline.partials.decode_messages`` (in the shared query's ``mapInArrow``) and
``pipeline.source.decode_packets`` (Spark's ``from_csv``, still used by the join queries) read the
same wire format; on hostile and damaged messages both must keep the same packets, the same
control rows and count the same malformed and future lines.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest.readers import read_records
from ingest.wire import encode_messages, watermark_message
from pipeline.partials import ROW_SCHEMA, TOTALS, decode_messages
from pipeline.source import decode_packets, raw_messages
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.spark]

GOOD = b"1700000000123456789,74,74,4,10.0.0.1,192.0.2.7,6,60,64,51514,80,2,1000,0,64240,,,,eth0\n"
KNOWN = [("netmon.format", b"packets-csv"), ("netmon.version", b"1"), ("netmon.records", b"1")]
FUTURE_NS = 8_500_000_000_000_000_000  # year 2239


def _messages() -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    table = read_records(REPO_ROOT / "samples" / "mixed-small.pcap")
    batches = table.to_batches() if hasattr(table, "to_batches") else list(table)
    good = [m for b in batches for m in encode_messages(b, records_per_message=50)]
    hostile = [
        # one bad field among good lines: proto out of range, a ttl that is no number
        (GOOD + GOOD.replace(b",6,60,", b",99999,60,") + GOOD.replace(b",64,51514", b",x,51514"), KNOWN),
        # wrong field counts, an empty ts, blank lines, a trailing field
        (b"not,a,record\n\n" + GOOD.replace(b"1700000000123456789", b"") + GOOD[:-1] + b",extra\n", KNOWN),
        # bytes that are not UTF-8 in a text field, and in the event time
        (GOOD.replace(b"eth0", b"eth\xff0") + b"\xff" + GOOD[1:], KNOWN),
        # a record from the future, and a good one
        (str(FUTURE_NS).encode() + GOOD[19:] + GOOD, KNOWN),
        # unknown format, unknown version, no headers
        (GOOD + GOOD, [("netmon.format", b"other"), ("netmon.version", b"1")]),
        (GOOD, [("netmon.format", b"packets-csv"), ("netmon.version", b"2")]),
        (GOOD, []),
        # control messages: good, from the future, not a number, an unknown control
        watermark_message(1_700_000_100_000_000_000),
        watermark_message(FUTURE_NS),
        (b"soon\n", [*KNOWN, ("netmon.control", b"watermark")]),
        (b"1700000000000000000\n", [*KNOWN, ("netmon.control", b"pause")]),
        # an empty value and a null value
        (b"", KNOWN),
        (None, KNOWN),
    ]
    return good + hostile


def _raw(spark, messages):
    rows = [(value, i % 2, [(k, v) for k, v in headers]) for i, (value, headers) in enumerate(messages)]
    return spark.createDataFrame(
        rows, "value binary, partition int, headers array<struct<key: string, value: binary>>"
    )


def test_python_decode_equals_sparks_decode(spark) -> None:
    raw = _raw(spark, _messages())
    max_future_s = 86400.0
    # Spark's native decode, every line kept and flagged.
    native = decode_packets(raw, 10.0, keep_control=True, keep_malformed=True, max_future_s=max_future_s)
    flagged = native.toArrow()
    malformed, future, control = (flagged[c].to_pylist() for c in ("is_malformed", "is_future", "is_control"))
    counts = {
        "packets": sum(not m and not f and not c for m, f, c in zip(malformed, future, control, strict=True)),
        "control": sum(not m and not f and c for m, f, c in zip(malformed, future, control, strict=True)),
        "malformed": sum(malformed),
        "future": sum(future),
    }
    kept = flagged.filter(pc.invert(pc.or_(flagged["is_malformed"], flagged["is_future"])))
    columns = ["ts", "is_control", *ROW_SCHEMA.names[2:]]

    def rows_of(table: pa.Table) -> list[tuple]:
        table = table.select(columns).set_column(0, "ts", pc.cast(table["ts"], pa.int64()))
        return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)

    # The pyarrow decode over the same messages.
    rows, totals = decode_messages(raw_messages(raw, max_future_s).toArrow())

    assert set(totals) == set(TOTALS)
    assert totals == counts
    assert counts["malformed"] >= 10 and counts["future"] == 2 and counts["control"] == 1
    assert rows_of(rows) == rows_of(kept)


def test_decode_of_no_messages_is_empty() -> None:
    empty = pa.table(
        {
            "value": pa.array([], pa.binary()),
            "known": pa.array([], pa.bool_()),
            "control": pa.array([], pa.string()),
            "horizon_ns": pa.array([], pa.int64()),
        }
    )
    rows, totals = decode_messages(empty)
    assert rows.num_rows == 0 and totals == dict.fromkeys(TOTALS, 0)
