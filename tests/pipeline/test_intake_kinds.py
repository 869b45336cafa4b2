"""The intake drop box (issue 18: bounded lag when the decode itself is the load), without Spark.

Before the decode a fraction r of the records is kept by a hash of its position
(``analytics.sampling.intake_lines``, checked against its oracle in
``tests/analytics/test_intake.py``). Here: the decode skips exactly the oracle's lines and counts
them; every kind then scales by 1/r and says so in its rows — traffic and top-k rows equal the
exact answers over the kept records each repeated 1/r times, and their intervals (and the distinct
counts', widened for a record sample) cover the exact answers over all records.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from analytics.distinct_offline import distinct_reports
from analytics.sampling import count_interval
from ingest.generate import generate
from ingest.readers import read_records
from ingest.wire import encode_messages
from netmon.config import DistinctQuery, TopKQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query
from pipeline.partials import INTAKE, decode_messages, merge_partials, partials_of
from pipeline.topk import SlidingTopK
from pipeline.traffic import SlidingTraffic
from tests.analytics.test_intake import oracle_hash, oracle_lines
from tests.pipeline.test_batch_kinds import S, apply_one, brute_traffic, control, cuts, records
from tests.pipeline.test_topk_sampled import _offline, _reports

R = 0.25
BOUND = int(R * 2.0**64)


def _intake(batches: list[list[dict]], first: int) -> list[list[dict]]:
    """Batches from ``first`` on as the intake box leaves them: record i of batch b is at offset b,
    line i (the oracle's hash)."""
    return [
        [r for i, r in enumerate(rows) if r["is_control"] or oracle_hash(0, b, i) < BOUND]
        if b >= first
        else rows
        for b, rows in enumerate(batches)
    ]


def _repeated(batches: list[list[dict]], first: int) -> list[list[dict]]:
    """Each kept record of a sampled batch 1/R times: what the scaled counts must equal."""
    times = round(1 / R)
    return [
        [r for r in rows for _ in range(times if b >= first and not r["is_control"] else 1)]
        for b, rows in enumerate(batches)
    ]


def test_the_decode_parses_only_the_kept_lines_and_counts_the_others(tmp_path: Path) -> None:
    capture = tmp_path / "ddos.pcap"
    generate(capture, scenario="ddos", packets=3_000, seed=2, duration_s=10)
    table = pa.Table.from_batches(list(read_records(capture))).combine_chunks()
    n = table.num_rows
    messages = [value for value, _ in encode_messages(table.to_batches()[0], 700)]
    watermark = b"1700000099000000000\n"
    values = [*messages[:2], watermark, *messages[2:]]
    batch = pa.record_batch(
        {
            "value": pa.array(values, pa.binary()),
            "partition": pa.array([3] * len(values), pa.int32()),
            "offset": pa.array(range(40, 40 + len(values)), pa.int64()),
            "known": pa.array([True] * len(values)),
            "control": pa.array([None, None, "watermark", None, None, None], pa.string()),
            "horizon_ns": pa.array([None] * len(values), pa.int64()),
        }
    )
    rows, totals, _ = decode_messages(batch, intake=R)
    # the oracle's lines of the packet messages, the control message whole
    kept = [oracle_lines(v, 3, 40 + i, R) if i != 2 else (v, 0) for i, v in enumerate(values)]
    expected_rows, expected_totals, _ = decode_messages(
        batch.set_column(0, "value", pa.array([v for v, _ in kept], pa.binary()))
    )
    assert rows.equals(expected_rows)
    assert totals["sampled"] == sum(lost for _, lost in kept) > 0
    assert totals["packets"] + totals["sampled"] == n
    assert totals["control"] == 1
    assert {k: v for k, v in totals.items() if k != "sampled"} == {
        k: v for k, v in expected_totals.items() if k != "sampled"
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_traffic_rows_are_the_scaled_counts_and_their_intervals_cover_the_truth(
    tmp_path: Path, seed: int
) -> None:
    rows = records(seed, n=6000)
    batches = cuts(rows, seed)
    batches[-1] = [control(max(r["ts"] for r in rows) + 6 * S)]
    first = 2
    kept = _intake(batches, first)
    kind = SlidingTraffic(tmp_path / "results", tmp_path / "checkpoint", window_s=1.0, watermark_ms=5000)
    for b, batch in enumerate(kept):
        kind.sample({INTAKE: R} if b >= first else {})
        apply_one(kind, batch, b)
    got_rows = read_results(tmp_path / "results").to_pylist()
    got = {(int(r["window_start"].timestamp() * S), r["proto"]): r for r in got_rows}
    expected, _ = brute_traffic(_repeated(kept, first), S, 5000)
    assert {k: (r["packets"], r["bytes"]) for k, r in got.items()} == expected
    truth, _ = brute_traffic(batches, S, 5000)
    # a window a sampled batch's record fell in says so; one closed before sampling is exact
    reached = {r["ts"] // S * S for rows in batches[first:] for r in rows if not r["is_control"]}
    start = min(reached)
    inside = covered = 0
    for (window, proto), r in got.items():
        if window in reached:
            assert r["keep"] == R, (window, proto)
        if window + S <= start - 5 * S:
            assert (r["keep"], r["packets_low"], r["packets_high"]) == (1.0, r["packets"], r["packets"])
        if r["keep"] < 1:
            low, high = count_interval(r["packets"], r["keep"])
            assert (r["packets_low"], r["packets_high"]) == (math.floor(low), math.ceil(high))
            inside += 1
            covered += r["packets_low"] <= truth.get((window, proto), (0, 0))[0] <= r["packets_high"]
    assert inside > 60
    assert covered / inside >= 0.9, (covered, inside)


def test_top_k_rows_are_the_scaled_counts_at_the_intake_fraction(tmp_path: Path) -> None:
    src = TopKQuery(name="src", key="src_ip", window_s=6.0, sub_window_s=1.0, k=3)
    ports = TopKQuery(
        name="ports", key="src_ip,dst_port", weight="bytes", window_s=6.0, sub_window_s=1.0, k=3
    )
    rows = records(5)
    batches = cuts(rows, 5)
    batches[-1] = [control(rows[-1]["ts"] + 5 * S)]
    kept = _intake(batches, 0)
    kind = SlidingTopK((src, ports), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=5000)
    for b, batch in enumerate(kept):
        kind.sample({INTAKE: R})
        apply_one(kind, batch, b)
    got = read_results(tmp_path / "results").to_pylist()
    data = [r for rows_ in _repeated(kept, 0) for r in rows_ if not r["is_control"]]
    end = batches[-1][0]["ts"]
    for q in (src, ports):
        mine = [r for r in got if r["query"] == q.name]
        assert _reports(mine) == _offline(data, q, end), q.name
        assert {r["keep"] for r in mine} == {R}
    for r in got:
        if r["query"] == "ports" or r["count"] is None:
            # a byte count has no interval (the packets' sizes are not kept)
            assert r["count_low"] is None and r["count_high"] is None
        else:
            low, high = count_interval(r["count"], R)[0], count_interval(r["count"] + r["delta"], R)[1]
            assert (r["count_low"], r["count_high"]) == (math.floor(low), math.ceil(high))


T0 = datetime(2024, 3, 1, tzinfo=UTC)
DDOS = DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip", window_s=6, sub_window_s=1, top=0)
DSCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("is_control", pa.bool_()),
        ("src_ip", pa.string()),
        ("dst_ip", pa.string()),
    ]
)


@pytest.mark.parametrize("seed", [1, 2])
def test_distinct_intervals_widen_for_a_record_sample_and_cover_the_exact_counts(
    tmp_path: Path, seed: int
) -> None:
    # Some sources are seen once (spoofed), others dozens of times: a record sample keeps the first
    # with probability R and the others almost surely, so the interval must span both.
    rng = random.Random(seed)
    regulars = [f"10.1.{i // 256}.{i % 256}" for i in range(300)]
    rows = []
    for ms in sorted(rng.sample(range(30_000), 8000)):
        dst = "192.0.2.7" if rng.random() < 0.5 else f"198.51.100.{rng.randrange(4)}"
        src = (
            rng.choice(regulars) if rng.random() < 0.7 else f"10.9.{rng.randrange(256)}.{rng.randrange(256)}"
        )
        rows.append(
            {"ts": T0 + timedelta(milliseconds=ms), "is_control": False, "src_ip": src, "dst_ip": dst}
        )
    closing = {
        "ts": rows[-1]["ts"] + timedelta(seconds=10),
        "is_control": True,
        "src_ip": None,
        "dst_ip": None,
    }
    batches = [rows[a:b] for a, b in ((0, 2000), (2000, 4500), (4500, 8000))] + [[closing]]
    first = 1
    kept = _intake(batches, first)
    kind = SlidingDistinct(
        chains_of([DDOS]), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=2000
    )
    for b, batch in enumerate(kept):
        kind.prepare(b, None)
        kind.sample({INTAKE: R} if b >= first else {})
        counts, max_us = merge_partials(partials_of(pa.Table.from_pylist(batch, schema=DSCHEMA), kind.specs))
        kind.apply(counts, max_us, b)
    everything = [*rows, closing]  # the closing row moves the offline run's event time as the stream's
    table = pa.table(
        {
            "ts": pa.array([r["ts"] for r in everything], pa.timestamp("ns", tz="UTC")),
            "src_ip": [r["src_ip"] for r in everything],
            "dst_ip": [r["dst_ip"] for r in everything],
        }
    )
    exact = {}
    for r in distinct_reports([table], offline_query(DDOS), watermark_ns=2000 * 10**6, exact=True):
        end = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=r.end_ns // 1000)
        for group, n in r.groups:
            exact[(end, group)] = n
    got = read_results(tmp_path / "results").to_pylist()
    sampled_from = batches[first][0]["ts"]
    inside = covered = 0
    for r in got:
        key = (r["window_end"], r["group"])
        if r["window_end"] <= sampled_from - timedelta(seconds=3):
            assert r["keep"] == 1.0  # closed before the intake box: exact
            continue
        if r["window_end"] - timedelta(seconds=DDOS.window_s) >= sampled_from + timedelta(seconds=1):
            assert r["keep"] == R, key
        if r["keep"] < 1:
            assert r["distinct_low"] <= r["distinct"] <= r["distinct_high"]
            inside += 1
            covered += r["distinct_low"] <= exact[key] <= r["distinct_high"]
    assert inside > 40
    assert covered / inside >= 0.95, (covered, inside)
    # a Counter of how often the regulars repeat: the premise of the test
    assert Counter(r["src_ip"] for r in rows).most_common(1)[0][1] > 10


def test_features_rows_say_the_intake_fraction_and_their_counts_are_scaled(tmp_path: Path) -> None:
    from analytics.alert_features import feature_rows
    from pipeline.features import SlidingFeatures
    from tests.pipeline.test_features_kind import apply_one as apply_features
    from tests.pipeline.test_features_kind import as_feature_rows, decoded, order, records_of
    from tests.pipeline.test_features_kind import control as control_row
    from tests.pipeline.test_features_kind import cuts as cut_rows

    capture = tmp_path / "port-scan.pcap"
    generate(capture, scenario="port-scan", packets=20_000, seed=3, duration_s=60)
    rows = decoded(capture, extra=False)
    batches = cut_rows(rows, 7, n=10)
    last_us = int(rows["ts"].cast(pa.int64())[-1].as_py())
    batches[-1] = control_row(last_us + 100 * S)
    first = len(batches) // 2
    kept = [
        b
        if i < first
        else b.filter(pa.array([oracle_hash(0, i, j) < BOUND for j in range(b.num_rows)], pa.bool_()))
        for i, b in enumerate(batches)
    ]
    kind = SlidingFeatures(
        tmp_path / "results", tmp_path / "checkpoint", window_s=5.0, timeout_s=3.0, top=100, watermark_ms=5000
    )
    for i, batch in enumerate(kept):
        kind.sample({INTAKE: R} if first <= i < len(batches) - 1 else {})
        apply_features(kind, batch, i)
    table = read_results(tmp_path / "results")
    got = table.to_pylist()
    start_us = int(batches[first]["ts"].cast(pa.int64())[0].as_py())
    window = 5 * S
    # windows closed before the first sampled record: exact, and equal to the offline rows
    exact_rows = [r for r in got if _us(r["window_end"]) + 3 * S <= start_us - 5 * S]
    assert exact_rows and all(r["keep"] == 1.0 for r in exact_rows)
    offline = {order(r): r for r in feature_rows([records_of(rows)], window_s=5.0, timeout_s=3.0, top=100)}
    for r in as_feature_rows(table.filter(pa.array([r in exact_rows for r in got]))):
        assert r == offline[order(r)]
    # windows a sampled record fell in: the fraction, and the window's total scaled by 1/R
    reached = {t // window for t in pa.concat_tables(batches[first:-1])["ts"].cast(pa.int64()).to_pylist()}
    sampled = [r for r in got if _us(r["window_start"]) // window in reached]
    assert sampled and all(r["keep"] == R for r in sampled)
    kept_all = pa.concat_tables(kept[first:-1])
    per_window = Counter(
        t // window
        for t, s, d in zip(
            kept_all["ts"].cast(pa.int64()).to_pylist(),
            kept_all["src_ip"].to_pylist(),
            kept_all["dst_ip"].to_pylist(),
            strict=True,
        )
        if s is not None and d is not None
    )
    whole = [r for r in sampled if _us(r["window_start"]) >= start_us and r["query"] == "src"]
    assert whole
    for r in whole:
        assert r["total"] == per_window[_us(r["window_start"]) // window] * round(1 / R)


def _us(t: datetime) -> int:
    return round(t.timestamp() * S)
