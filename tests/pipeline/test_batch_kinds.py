"""The counting kinds of the shared micro-batch, without Spark: stage-1 partials in, committed rows out.

``pipeline.partials`` is checked against a brute-force count; ``SlidingTraffic`` and
``SlidingTopK`` are fed the partials of random micro-batch cuts of the same records (as the shared
query hands them over) and must write what a brute-force windowed count with Spark's watermark
rule writes (traffic), and what the offline command writes (top-k, records in event-time order),
whatever the cuts — and the same rows again when a batch runs twice (a restart).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analytics.topk import format_end
from analytics.topk_offline import OfflineTopK
from netmon.config import TopKQuery
from netmon.results import read_results
from pipeline.partials import MAX_QUERY, CountSpec, merge_partials, partials_of
from pipeline.topk import SlidingTopK
from pipeline.traffic import SlidingTraffic

S = 1_000_000  # microseconds per second
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("is_control", pa.bool_()),
        ("proto", pa.int16()),
        ("src_ip", pa.string()),
        ("dst_port", pa.int32()),
        ("wire_len", pa.int32()),
    ]
)


def records(seed: int, n: int = 3000, *, disorder_s: float = 0.0) -> list[dict]:
    """Records over ~60 s with Zipf-ish sources, some without ports or protocol; optional disorder."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(1_700_000_000 * S, 1_700_000_060 * S, n))
    if disorder_s:
        ts = ts - (rng.random(n) < 0.05) * rng.integers(0, int(disorder_s * S), n)
    src = rng.zipf(1.6, n) % 40
    return [
        {
            "ts": int(t),
            "is_control": False,
            "proto": None if i % 97 == 0 else int(rng.choice([6, 17, 1])),
            "src_ip": f"10.0.0.{int(s)}",
            "dst_port": None if i % 13 == 0 else int(rng.integers(1, 200)),
            "wire_len": int(rng.integers(40, 1500)),
        }
        for i, (t, s) in enumerate(zip(ts, src, strict=True))
    ]


def control(ts_us: int) -> dict:
    return {
        "ts": ts_us,
        "is_control": True,
        "proto": None,
        "src_ip": None,
        "dst_port": None,
        "wire_len": None,
    }


def cuts(rows: list[dict], seed: int) -> list[list[dict]]:
    """The rows in random micro-batches (some empty), in order."""
    rng = np.random.default_rng(seed)
    points = sorted(set(rng.integers(0, len(rows), 12).tolist()) | {0, len(rows)})
    return [rows[a:b] for a, b in zip(points, points[1:], strict=False)] + [[]]


def apply_one(kind, rows: list[dict], batch_id: int, *, split: int = 3) -> None:
    """One batch as ``split`` partitions' partials, merged, then ``kind.apply`` (as SharedBatch does)."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    counts, max_us = merge_partials(
        pa.concat_tables([partials_of(b, kind.specs) for b in _partitions(table, split)])
    )
    kind.apply(counts, max_us, batch_id)


def feed(kind, batches: list[list[dict]]) -> None:
    for batch_id, rows in enumerate(batches):
        apply_one(kind, rows, batch_id)


def _partitions(table: pa.Table, split: int) -> list[pa.RecordBatch]:
    size = max(1, -(-table.num_rows // split))
    out = [b for b in table.to_batches(max_chunksize=size)]
    return out or [pa.RecordBatch.from_pylist([], schema=SCHEMA)]


def test_partials_equal_a_brute_force_count() -> None:
    rows = records(1)[:500]
    spec = CountSpec("topk/x", ("src_ip", "dst_port"), "bytes", 2 * S)
    traffic = CountSpec("traffic/", ("proto",), "bytes", S, keep_null_key=True)
    table = pa.Table.from_pylist([*rows, control(1_800_000_000 * S)], schema=SCHEMA)
    counts, max_us = merge_partials(
        pa.concat_tables([partials_of(b, [spec, traffic]) for b in _partitions(table, 4)])
    )
    assert max_us == 1_800_000_000 * S
    got = {(r["query"], r["sw"], r["key"]): (r["records"], r["weight"]) for r in counts.to_pylist()}
    expected: dict[tuple, list[int]] = {}
    for r in rows:
        if r["dst_port"] is not None:
            key = ("topk/x", r["ts"] // (2 * S), f"{r['src_ip']},{r['dst_port']}")
            expected.setdefault(key, [0, 0])
            expected[key][0] += 1
            expected[key][1] += r["wire_len"]
        key = ("traffic/", r["ts"] // S, None if r["proto"] is None else str(r["proto"]))
        expected.setdefault(key, [0, 0])
        expected[key][0] += 1
        expected[key][1] += r["wire_len"]
    assert got == {k: tuple(v) for k, v in expected.items()}


def brute_traffic(batches: list[list[dict]], window_us: int, delay_ms: int) -> tuple[dict, int]:
    """Spark's windowed aggregation in append mode, batch by batch: rows per closed window, late rows."""
    watermark_ms, late = None, 0
    counts: Counter = Counter()
    nbytes: Counter = Counter()
    for rows in batches:
        for r in rows:
            if r["is_control"]:
                continue
            start = r["ts"] // window_us * window_us
            if watermark_ms is not None and start + window_us <= watermark_ms * 1000:
                late += 1
                continue
            counts[(start, r["proto"])] += 1
            nbytes[(start, r["proto"])] += r["wire_len"]
        if rows:
            moved = max(r["ts"] for r in rows) // 1000 - delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
    closed = {k: (counts[k], nbytes[k]) for k in counts if k[0] + window_us <= (watermark_ms or 0) * 1000}
    return closed, late


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_traffic_equals_spark_rules_whatever_the_cuts_and_reruns(tmp_path: Path, seed: int) -> None:
    rows = records(seed, disorder_s=8.0)
    batches = cuts(rows, seed)
    batches[-1] = [control(max(r["ts"] for r in rows) + 6 * S)]
    kind = SlidingTraffic(tmp_path / "results", tmp_path / "checkpoint", window_s=1.0, watermark_ms=5000)
    feed(kind, batches)
    # A restart: a new process runs the last batch again, same id, same input, cut differently.
    again = SlidingTraffic(tmp_path / "results", tmp_path / "checkpoint", window_s=1.0, watermark_ms=5000)
    apply_one(again, batches[-1], len(batches) - 1, split=1)
    expected, late = brute_traffic(batches, S, 5000)
    got_rows = read_results(tmp_path / "results").to_pylist()
    got = {(int(r["window_start"].timestamp() * S), r["proto"]): (r["packets"], r["bytes"]) for r in got_rows}
    assert len(got) == len(got_rows), "a window written twice"
    assert got == expected
    assert kind.late_rows == late and late > 0


@pytest.mark.parametrize(
    ("seed", "window_s", "sub_s", "k"), [(1, 10.0, 1.0, 3), (2, 6.0, 2.0, 2), (3, 5.0, 0.5, 4)]
)
def test_topk_equals_the_offline_command_whatever_the_cuts(
    tmp_path: Path, seed: int, window_s: float, sub_s: float, k: int
) -> None:
    rows = records(seed)
    batches = cuts(rows, seed)
    # The replay's closing message: the watermark stops at the last record, as the offline run.
    batches[-1] = [control(rows[-1]["ts"] + 5 * S)]
    queries = (
        TopKQuery(name="src", key="src_ip", window_s=window_s, sub_window_s=sub_s, k=k),
        TopKQuery(
            name="ports", key="src_ip,dst_port", weight="bytes", window_s=window_s, sub_window_s=sub_s, k=k
        ),
    )
    kind = SlidingTopK(queries, tmp_path / "results", tmp_path / "checkpoint", watermark_ms=5000)
    feed(kind, batches)
    # A restart: a new process runs the last batch again (Spark reruns only an uncommitted batch).
    again = SlidingTopK(queries, tmp_path / "results", tmp_path / "checkpoint", watermark_ms=5000)
    apply_one(again, batches[-1], len(batches) - 1, split=2)
    got_rows = read_results(tmp_path / "results").to_pylist()
    table = pa.Table.from_pylist(rows, schema=SCHEMA).drop(["is_control"])
    for q in queries:
        # The kind's watermark delay; event time ends 5 s past the last record, as the control row.
        offline = OfflineTopK(
            q.key, N=round(window_s * 1e9), b=round(sub_s * 1e9), k=k, weight=q.weight, time_based=True,
            watermark=5000 * 10**6,
        )  # fmt: skip
        ns_table = table.cast(table.schema.set(0, pa.field("ts", pa.timestamp("ns", tz="UTC"))))
        expected = list(offline.run([ns_table], close_after=0))
        mine = [r for r in got_rows if r["query"] == q.name]
        assert _reports(mine) == expected, q.name


def _reports(rows: list[dict]) -> list[dict]:
    """Committed top-k rows folded back into the offline command's reports."""
    by_end: dict[int, list[dict]] = {}
    for r in rows:
        by_end.setdefault(int(r["window_end"].timestamp() * S), []).append(r)
    out = []
    for end_us, group in sorted(by_end.items()):
        group.sort(key=lambda r: r["rank"])
        items = [{"key": r["key"], "count": r["count"]} for r in group if r["rank"] > 0]
        out.append({"end": format_end(end_us * 1000), "delta": group[0]["delta"], "items": items})
    return out


def test_the_batch_event_time_is_the_slowest_partitions() -> None:
    """Partition 0 read up to t = 50 s, partition 1 up to 20 s: the batch's event time is 20 s.

    Spark's watermark would follow partition 0 and drop partition 1's next records as late.
    """
    spec = CountSpec("topk/x", ("src_ip",), "packets", S)
    parts = []
    for partition, top_s in ((0, 50), (1, 20), (1, 7)):
        rows = [_row(top_s * S, "10.0.0.1")]
        table = partials_of(pa.Table.from_pylist(rows, schema=SCHEMA), [spec])
        is_max = pc.equal(table["query"], MAX_QUERY)
        parts.append(table.set_column(2, "key", pc.if_else(is_max, pa.scalar(str(partition)), table["key"])))
    merged, max_us = merge_partials(pa.concat_tables(parts))
    assert max_us == 20 * S
    assert merged.filter(pc.equal(merged["query"], "topk/x"))["records"].to_pylist() == [1, 1, 1]
    # Rows of no known partition count as one partition.
    unknown = pa.Table.from_pylist([_row(50 * S, "a"), _row(20 * S, "b")], schema=SCHEMA)
    assert merge_partials(partials_of(unknown, [spec]))[1] == 50 * S


def _row(ts_us: int, src: str) -> dict:
    return {"ts": ts_us, "is_control": False, "proto": 6, "src_ip": src, "dst_port": 80, "wire_len": 60}
