"""The built-in rules on the bundled sample captures: the right alerts, and none for the baseline.

The result rows come from the offline twins of the streaming queries (``analytics``: the same
conventions as the Spark jobs, exact mode), shaped as ``docs/results.md`` publishes them, so this
runs in a second without Spark. The end-to-end replay through the pipeline is the lead's run.
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from alerts.defaults import DEFAULT_RULES
from alerts.rules import RuleEngine
from analytics.distinct_offline import distinct_reports
from analytics.distinct_queries import DistinctQuery
from analytics.join_queries import HandshakeQuery, run_join
from analytics.topk_offline import OfflineTopK
from ingest import read_records
from netmon.config import QueriesConfig

SAMPLES = Path(__file__).resolve().parents[2] / "samples"

EXPECTED = {
    "mixed-small": set(),
    "ddos": {("ddos", "victim", "34.22.41.40"), ("syn-flood", "destination", "34.22.41.40")},
    "port-scan": {("port-scan", "scanner", "198.51.100.200")},
    "syn-flood": {("syn-flood", "destination", "132.219.96.91"), ("ddos", "victim", "132.219.96.91")},
    "heavy-hitter-burst": {("heavy-hitter", "source", "10.1.0.38")},
}


@cache
def records(sample: str) -> pa.Table:
    batches = list(read_records(str(SAMPLES / f"{sample}.pcap")))
    return pa.concat_tables(batches) if isinstance(batches[0], pa.Table) else pa.Table.from_batches(batches)


def iso(value: object) -> str:
    return pd.Timestamp(value).tz_convert("UTC").isoformat().replace("+00:00", "Z")


def distinct_rows(table: pa.Table) -> list[dict]:
    rows = []
    for q in QueriesConfig().distinct:
        query = DistinctQuery(
            name=q.name, count=q.count, group_by=q.group_by, window_s=q.window_s, sub_window_s=q.sub_window_s
        )
        for report in distinct_reports([table], query, exact=True, top=q.top):
            for rank, g in enumerate(report.to_json()["groups"], start=1):
                rows.append({"query": q.name, "window_end": report.to_json()["end"], "rank": rank} | g)
    return rows


def topk_rows(table: pa.Table, window_s: int = 10) -> list[dict]:
    """``top-sources`` as the default query computes it: a 10 s window of 1 s sub-windows."""
    ts = table.column("ts").to_pandas()
    rows = []
    topk = OfflineTopK("src_ip", N=f"{window_s}s", b="1s", k=10, time_based=True, exact=True)
    for report in topk.run([table]):
        end = pd.Timestamp(report["end"])
        total = int(((ts >= end - dt.timedelta(seconds=window_s)) & (ts < end)).sum())
        items = report["items"] or [{"key": None, "count": None}]
        for rank, item in enumerate(items, start=1 if report["items"] else 0):
            rows.append(
                {"query": "top-sources", "window_end": report["end"], "delta": report["delta"]} | item
            )
            rows[-1] |= {"rank": rank, "total": total}
    return rows


def joins_rows(table: pa.Table) -> list[dict]:
    """The handshake query's unanswered SYNs, as ``pipeline.joins`` writes them (T = 3 s)."""
    run = run_join(HandshakeQuery(window_s=3.0), table, track_unmatched=True)
    unmatched = run.unmatched.sort_values("ts")
    return [
        {"query": "handshake", "kind": "handshake", "row": "unmatched", "key": r.key, "left_ts": iso(r.ts)}
        | {"left_src_ip": r.client, "left_dst_ip": r.server, "left_dst_port": r.server_port}
        for r in unmatched.itertuples()
    ]


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_builtin_rules_on_the_samples(sample: str) -> None:
    table = records(sample)
    engine = RuleEngine(DEFAULT_RULES)
    fired = []
    for kind, rows in (
        ("distinct", distinct_rows(table)),
        ("topk", topk_rows(table)),
        ("joins", joins_rows(table)),
    ):
        assert rows or kind == "topk"
        for row in rows:
            fired += [
                (n.rule, n.subject_label, n.subject)
                for n in engine.observe(kind, row)
                if n.status == "firing"
            ]
    assert set(fired) == EXPECTED[sample]
    assert len(fired) == len(set(fired))  # one firing per alert
    assert not engine.problems
