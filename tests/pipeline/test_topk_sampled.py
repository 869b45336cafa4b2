"""The top-k kind behind a drop box (issue 18 items 5–6), without Spark: sampled counts are the
Horvitz–Thompson estimates, and every row says the fraction it was computed at and its interval.

With fractions 1/2 and 1/4 the scaled counts are whole numbers, so the kind's rows must equal the
offline command run over the kept records, each repeated 1/keep times — whatever the batch cuts,
and again when a batch runs twice.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa

from analytics.sampling import ExactSample, count_interval
from analytics.topk_offline import OfflineTopK
from netmon.config import TopKQuery
from netmon.results import read_results
from pipeline.topk import SlidingTopK
from tests.pipeline.test_batch_kinds import SCHEMA, S, _reports, apply_one, control, cuts, records

QUERY = TopKQuery(name="src", key="src_ip", window_s=6.0, sub_window_s=1.0, k=3)
EXACT = TopKQuery(name="ports", key="src_ip,dst_port", weight="bytes", window_s=6.0, sub_window_s=1.0, k=3)


def _kept(rows: list[dict], keep: float) -> list[dict]:
    """The records the drop box keeps (the oracle, one at a time), each repeated 1/keep times."""
    out = []
    for r in rows:
        if ExactSample(keep).update(r).report()[0]:
            out += [r] * round(1 / keep)
    return out


def _offline(rows: list[dict], q: TopKQuery, last_ts: int) -> list[dict]:
    ordered = sorted(rows, key=lambda r: r["ts"])
    table = pa.Table.from_pylist(ordered + [control(last_ts)], schema=SCHEMA).drop(["is_control"])
    table = table.filter(pa.compute.invert(pa.compute.is_null(table["src_ip"])))
    table = table.cast(table.schema.set(0, pa.field("ts", pa.timestamp("ns", tz="UTC"))))
    offline = OfflineTopK(
        q.key, N=round(q.window_s * 1e9), b=round(q.sub_window_s * 1e9), k=q.k, weight=q.weight,
        time_based=True, watermark=5000 * 10**6,
    )  # fmt: skip
    return list(offline.run([table], close_after=0))


def _run(tmp_path: Path, seed: int, keep_from: int, keep: float) -> tuple[list[list[dict]], list[dict]]:
    rows = records(seed)
    batches = cuts(rows, seed)
    batches[-1] = [control(rows[-1]["ts"] + 5 * S)]
    kind = SlidingTopK((QUERY, EXACT), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=5000)
    for batch_id, batch in enumerate(batches):
        kind.sample({"src": keep} if batch_id >= keep_from else {})
        apply_one(kind, batch, batch_id)
    # A restart runs the last batch again with the fractions it ran with.
    again = SlidingTopK((QUERY, EXACT), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=5000)
    again.sample({"src": keep})
    apply_one(again, batches[-1], len(batches) - 1, split=2)
    return batches, read_results(tmp_path / "results").to_pylist()


def test_a_sampled_query_reports_the_horvitz_thompson_counts_of_the_kept_records(tmp_path: Path) -> None:
    batches, got = _run(tmp_path, seed=4, keep_from=0, keep=0.25)
    data = [r for b in batches for r in b if not r["is_control"]]
    end = batches[-1][0]["ts"]
    mine = [r for r in got if r["query"] == "src"]
    assert _reports(mine) == _offline(_kept(data, 0.25), QUERY, end)
    assert {r["keep"] for r in mine} == {0.25}
    for r in mine:
        if r["count"] is None:
            assert r["count_low"] is None and r["count_high"] is None
            continue
        # the sample's interval around Alg. 6's range [count, count + delta]
        low, high = count_interval(r["count"], 0.25)[0], count_interval(r["count"] + r["delta"], 0.25)[1]
        assert (r["count_low"], r["count_high"]) == (math.floor(low), math.ceil(high))
        assert r["count_low"] < r["count"] < r["count_high"]
    # the unsampled query beside it stays exact, and says so
    exact = [r for r in got if r["query"] == "ports"]
    assert _reports(exact) == _offline(data, EXACT, end)
    assert all(
        r["keep"] == 1.0 and r["count_low"] == r["count"] == r["count_high"] for r in exact if r["count"]
    )


def test_a_fraction_set_mid_stream_marks_every_window_that_holds_a_sampled_sub_window(tmp_path: Path) -> None:
    keep_from = 6
    batches, got = _run(tmp_path, seed=5, keep_from=keep_from, keep=0.5)
    before = [r for b in batches[:keep_from] for r in b if not r["is_control"]]
    after = [r for b in batches[keep_from:] for r in b if not r["is_control"]]
    end = batches[-1][0]["ts"]
    mine = [r for r in got if r["query"] == "src"]
    assert _reports(mine) == _offline(before + _kept(after, 0.5), QUERY, end)
    # Soundness: a window holding a sub-window that lost a record to the drop box says so.
    b_us, n_sub = S, 6
    dropped = {r["ts"] // b_us for r in after if r not in _kept([r], 0.5)}
    assert dropped
    for r in mine:
        closing = int(r["window_end"].timestamp() * S) // b_us - 1
        if any(closing - n_sub < sw <= closing for sw in dropped):
            assert r["keep"] == 0.5, r
    # and the windows reported before the change are exact
    first_sampled = min(int(r["ts"]) for r in after) // b_us
    early = [r for r in mine if int(r["window_end"].timestamp() * S) // b_us - 1 < first_sampled - 6]
    assert early and all(r["keep"] == 1.0 for r in early)
