"""The shared query's pyarrow decode equals Spark's native decode, line class by line class.

``pipeline.partials.decode_messages`` (in the shared query's ``mapInArrow``) and
``pipeline.source.decode_packets`` (Spark's ``from_csv``, still used by the join queries) read the
same wire format; on hostile and damaged messages both must keep the same packets, the same
control rows and count the same malformed and future lines.
"""

from __future__ import annotations

import numpy as np
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
    rows, totals, _ = decode_messages(raw_messages(raw, max_future_s).toArrow())

    assert set(totals) == set(TOTALS)
    assert totals.pop("late") == 0  # no watermark delay given: nothing is late
    assert totals.pop("sampled") == 0  # no intake drop box
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
    rows, totals, _ = decode_messages(empty)
    assert rows.num_rows == 0 and totals == dict.fromkeys(TOTALS, 0)


def _messages_table(values: list[bytes], control: list[str | None] | None = None) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "known": pa.array([True] * n),
            "control": pa.array(control or [None] * n, pa.string()),
            "horizon_ns": pa.array([None] * n, pa.int64()),
        }
    )


def _line(ts_ns: int, src: str = "10.0.0.1") -> bytes:
    return f"{ts_ns},60,60,4,{src},10.0.0.2,17,46,64,1000,53,,,,,,,,eth0\n".encode()


def test_late_is_more_than_the_delay_behind_the_newest_before_whatever_the_batches() -> None:
    """Late: an event time more than the delay behind the newest one seen before it (ns)."""
    rng = np.random.default_rng(7)
    times = [int(t) for t in rng.integers(10_000, 11_000, 400)]
    # A large backward jump, then the same times again, and a control message in the middle.
    times = times + [t - 500 for t in times]
    delay = 100
    newest, expected = None, []
    for t in times:
        expected.append(newest is None or t >= newest - delay)
        newest = t if newest is None else max(newest, t)
    values = [b"".join(_line(t) for t in times[i : i + 37]) for i in range(0, len(times), 37)]
    whole, totals, after = decode_messages(_messages_table(values), delay_ns=delay)
    kept = [t // 1000 for t, keep in zip(times, expected, strict=True) if keep]
    assert pc.cast(whole["ts"], pa.int64()).to_pylist() == kept
    assert totals["late"] == expected.count(False) > 0 and totals["packets"] == len(times)
    assert whole.num_rows == len(kept)
    assert after == max(times)
    # The same messages in batches cut anywhere: the newest event time carries over.
    for cut in (1, 5, len(values) - 1):
        first, t1, carry = decode_messages(_messages_table(values[:cut]), delay_ns=delay)
        second, t2, end = decode_messages(_messages_table(values[cut:]), newest_ns=carry, delay_ns=delay)
        both = pc.cast(pa.concat_tables([first, second])["ts"], pa.int64()).to_pylist()
        assert both == kept and t1["late"] + t2["late"] == totals["late"] and end == after


def test_a_control_message_moves_the_newest_event_time() -> None:
    values = [_line(1_000), b"5000\n", _line(2_000), _line(4_950)]
    rows, totals, after = decode_messages(
        _messages_table(values, [None, "watermark", None, None]), delay_ns=100
    )
    assert totals["late"] == 1 and totals["control"] == 1 and after == 5_000
    assert sorted(pc.cast(rows["ts"], pa.int64()).to_pylist()) == [1, 4, 5]


def test_the_joins_staging_on_the_shared_batch_equals_sparks(spark, tmp_path) -> None:
    """The joins kind's path — stage 1 in the tasks (``SharedJoins.specs``: the records on a join
    side), then ``pipeline.joins.stage_rows`` on the driver — stages exactly the rows Spark's
    functions stage (``pipeline.joins.build_staged``) from the same raw messages."""
    from pyspark.sql import functions as F

    from netmon.config import JoinQuery
    from pipeline.joins import build_staged
    from pipeline.joins_batch import JOINS_SPEC, SharedJoins
    from pipeline.partials import partials_of, rows_of

    queries = (
        JoinQuery(name="handshake"),
        JoinQuery(name="udp-tcp", query="link", left="proto=udp", right="proto=tcp", key="src_ip"),
    )
    raw = _raw(spark, _messages())
    native = decode_packets(raw, 10.0, max_future_s=86400.0)
    columns = ["query", "is_left", "ts", "key", "src_ip", "dst_ip", "src_port", "dst_port", "iface"]
    staged_by_spark = build_staged(native, queries, 16)
    micros = staged_by_spark.select(*columns[:2], F.unix_micros("ts").alias("ts"), *columns[3:])
    expected = sorted((tuple(r) for r in micros.collect()), key=repr)
    assert {r[0] for r in expected} == {"handshake", "udp-tcp"} and len(expected) > 100

    joins = SharedJoins(queries, {}, tmp_path / "results", tmp_path / "checkpoint")
    decoded, _, _ = decode_messages(raw_messages(raw, 86400.0).toArrow())
    records, _ = rows_of(partials_of(decoded, joins.specs), JOINS_SPEC)
    staged = joins._staged(records)
    staged = staged.set_column(2, "ts", pc.cast(staged["ts"], pa.int64()))
    got = sorted(zip(*(staged[c].to_pylist() for c in columns), strict=True), key=repr)
    assert got == expected
