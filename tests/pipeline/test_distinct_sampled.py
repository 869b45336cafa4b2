"""The distinct kind behind drop boxes (issue 18 items 5–6), without Spark: a query samples its
*items* (every record of a kept item is kept), and each row says the fraction and its interval.

At one fraction x for the whole stream a window's count is the sketch of the kept items over x:
the rows must equal the offline engine run over the records of the kept items, times 1/x. When
the fraction changes, the windows spanning the change carry both fractions (seed 004's
adaptation delay) and their intervals still cover the exact answer.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from analytics.distinct_offline import distinct_reports
from analytics.hll_coupons import coupons
from analytics.sampling import count_interval
from netmon.config import DistinctQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query
from pipeline.partials import item_kept, merge_partials, partials_of

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NO_SPARK: Any = None  # stage 3 needs no session (SlidingDistinct.prepare)
WATERMARK_MS = 2000
QUERIES = [
    DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(name="flows", count="src_ip,dst_ip", group_by="", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(
        name="short", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5, lg_k=8, top=0
    ),
]
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("is_control", pa.bool_()),
        ("src_ip", pa.string()),
        ("dst_ip", pa.string()),
    ]
)


def _packets(seed: int, seconds: int, n: int = 4000) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for ms in sorted(rng.sample(range(seconds * 1000), n)):
        dst = "192.0.2.7" if rng.random() < 0.4 else f"198.51.100.{rng.randrange(8)}"
        src = f"10.{rng.randrange(4)}.{rng.randrange(256)}.{rng.randrange(256)}"
        rows.append(
            {"ts": T0 + timedelta(milliseconds=ms), "is_control": False, "src_ip": src, "dst_ip": dst}
        )
    return rows


def _offline(rows: list[dict], q: DistinctQuery) -> dict[tuple[datetime, str], int]:
    table = pa.table(
        {
            "ts": pa.array([r["ts"] for r in rows], pa.timestamp("ns", tz="UTC")),
            "src_ip": [r["src_ip"] for r in rows],
            "dst_ip": [r["dst_ip"] for r in rows],
        }
    )
    out = {}
    for r in distinct_reports([table], offline_query(q), lg_k=q.lg_k, watermark_ns=WATERMARK_MS * 10**6):
        end = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=r.end_ns // 1000)
        for group, n in r.groups:
            out[(end, group)] = n
    return out


def _item(r: dict, q: DistinctQuery) -> str:
    return ",".join(r[f] for f in q.count.split(","))


def _kept(rows: list[dict], q: DistinctQuery, keep: float) -> list[dict]:
    mask = item_kept(coupons(pa.array([_item(r, q) for r in rows])), keep, q.lg_k)
    return [r for r, m in zip(rows, mask, strict=True) if m]


def _run(tmp_path, batches: list[list[dict]], keep_of) -> dict[str, list[dict]]:
    kind = SlidingDistinct(
        chains_of(QUERIES), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS
    )
    for batch_id, rows in enumerate(batches):
        kind.prepare(batch_id, NO_SPARK)
        kind.sample(keep_of(batch_id))
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        parts = [
            partials_of(b, kind.specs) for b in table.to_batches(max_chunksize=max(1, len(rows) // 2 + 1))
        ]
        counts, max_us = merge_partials(pa.concat_tables(parts) if parts else partials_of(table, kind.specs))
        kind.apply(counts, max_us, batch_id)
    out: dict[str, list[dict]] = {}
    for r in read_results(tmp_path / "results").to_pylist():
        out.setdefault(r["query"], []).append(r)
    return out


def _batches(rows: list[dict]) -> list[list[dict]]:
    cuts = [0, 500, 1400, 2100, 2900, len(rows)]
    closing = {
        "ts": rows[-1]["ts"] + timedelta(seconds=10),
        "is_control": True,
        "src_ip": None,
        "dst_ip": None,
    }
    return [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)] + [[closing]]


def test_one_fraction_throughout_gives_the_kept_items_counts_scaled(tmp_path) -> None:
    rows = _packets(seed=3, seconds=30)
    got = _run(tmp_path, _batches(rows), lambda _: {"ddos": 0.25, "flows": 0.5})
    closing = [{**_batches(rows)[-1][0], "src_ip": None, "dst_ip": None}]
    for q, x in ((QUERIES[0], 0.25), (QUERIES[1], 0.5)):
        expected = _offline(_kept(rows, q, x) + closing, q)
        mine = {(r["window_end"], r["group"]): r for r in got[q.name]}
        assert set(mine) == set(expected), q.name
        for key, n in expected.items():
            r = mine[key]
            low, high = count_interval(n / x, x)
            assert (r["distinct"], r["keep"]) == (round(n / x), x), (q.name, key)
            assert (r["distinct_low"], r["distinct_high"]) == (int(np.floor(low)), int(np.ceil(high)))
    # the query without a drop box is exact and says so
    exact = _offline(rows + closing, QUERIES[2])
    short = {(r["window_end"], r["group"]): r for r in got["short"]}
    assert {k: r["distinct"] for k, r in short.items()} == exact
    assert all(
        r["keep"] == 1.0 and r["distinct_low"] == r["distinct"] == r["distinct_high"] for r in short.values()
    )


@pytest.mark.parametrize("seed", [4, 5])
def test_a_fraction_set_mid_stream_is_marked_and_its_intervals_cover_the_exact_counts(
    tmp_path, seed: int
) -> None:
    rows = _packets(seed=seed, seconds=30, n=6000)
    batches = _batches(rows)
    start = 2  # batches 2.. sample ddos at 1/2
    got = _run(tmp_path, batches, lambda b: {"ddos": 0.5} if b >= start else {})
    exact = _offline(rows + [{**batches[-1][0]}], QUERIES[0])
    mine = {(r["window_end"], r["group"]): r for r in got["ddos"]}
    first_sampled = min(r["ts"] for r in batches[start])
    window = timedelta(seconds=QUERIES[0].window_s)
    inside = covered = 0
    for key, r in mine.items():
        end, _ = key
        if end <= first_sampled - timedelta(seconds=WATERMARK_MS / 1000) - timedelta(seconds=1):
            # closed before any sampled record: exact
            assert r["keep"] == 1.0 and r["distinct"] == exact[key], key
            continue
        if end - window >= first_sampled + timedelta(seconds=1):
            assert r["keep"] == 0.5, key  # every sub-window of the window was sampled
        if r["keep"] < 1:
            inside += 1
            covered += r["distinct_low"] <= exact.get(key, 0) <= r["distinct_high"]
            assert r["distinct_low"] <= r["distinct"] <= r["distinct_high"]
    assert inside > 50
    assert covered / inside >= 0.9, (covered, inside)


def test_a_fraction_must_be_a_power_of_two_the_sketch_has_bits_for() -> None:
    c = coupons(pa.array(["a", "b"]))
    with pytest.raises(ValueError, match="keep: expected 2"):
        item_kept(c, 0.3, 12)
    with pytest.raises(ValueError, match="keep: expected 2"):
        item_kept(c, 1 / 64, 21)
    assert item_kept(c, 1.0, 21).all()
