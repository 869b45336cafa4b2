"""Streaming top-k on the real broker and real Spark equals ``netmon analyze topk --time-based``.

The offline side runs with the pipeline's watermark delay (``--watermark``: ``watermark_s``), so
lateness and closing follow the same rule. A sample is replayed into Kafka with a final watermark
control message exactly ``watermark_s`` past its last record: Spark's watermark then stops at the
last record's time, so Spark closes exactly the sub-windows the offline query closes when event
time ends ``watermark_s`` past the last record (``close_after=0``: all but the one holding the
last record) and both must produce the same reports — every window end, delta, item and count.
The restart test replays as ``netmon demo`` does (``watermark_s + traffic_window_s`` past the last
record), which closes what the offline command's default ``--close-at-end`` closes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from analytics.topk import format_end
from analytics.topk_merge import QueryParams
from analytics.topk_offline import read_topk
from cli.main import cli
from ingest import read_records
from ingest.replay import ReplayOptions, replay
from netmon.config import Config, PipelineConfig, TopKQuery
from netmon.kafka_admin import recreate_topic
from netmon.results import read_results, results_dir
from pipeline.job import Pipeline, start_pipeline
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "samples" / "heavy-hitter-burst.pcap"

#: Three queries in one streaming query: packets and bytes, one and two fields, a key with nulls
#: (ICMP has no ports), whole and fractional sub-windows.
QUERIES = (
    TopKQuery(name="sources", key="src_ip", window_s=10.0, sub_window_s=1.0, k=3),
    TopKQuery(name="pairs-bytes", key="src_ip,dst_ip", weight="bytes", window_s=6.0, sub_window_s=2.0, k=2),
    TopKQuery(name="ports", key="proto,dst_port", window_s=5.0, sub_window_s=0.5, k=4),
)

Reports = dict[str, list[dict[str, Any]]]

_RUNS: dict[str, Config] = {}


def _config(base: Config, data_dir: Path, topic: str, *, partitions: int = 2, **spark: object) -> Config:
    return base.replace(
        paths={"data_dir": data_dir},
        kafka={"packets_topic": topic, "partitions": partitions},
        spark=spark or {},
        queries={"topk": QUERIES},
    )


def _replay(cfg: Config, *, close_at_end: bool = False, **options: object) -> int:
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    # Watermark = the last record's time: Spark closes what the offline query closes when event
    # time ends watermark_s past the last record (offline_reports); close_at_end: traffic_window_s
    # later (netmon demo), what `analyze topk --watermark <watermark_s> --close-at-end` closes.
    close = cfg.pipeline.watermark_s + (cfg.pipeline.traffic_window_s if close_at_end else 0.0)
    opts = ReplayOptions(close_windows_s=close, **options)  # type: ignore[arg-type]
    summary = replay(
        SAMPLE,
        bootstrap=cfg.kafka.bootstrap,
        topic=cfg.kafka.packets_topic,
        options=opts,
        partitions=cfg.kafka.partitions,
        progress=False,
    )
    assert summary.produced == summary.acknowledged
    return int(summary.acknowledged)


def _run_to_end(pipeline: Pipeline, timeout_s: float = 300) -> None:
    try:
        pipeline.await_termination(timeout_s)
        assert pipeline.failed() is None, pipeline.failed()
        assert not pipeline.active, f"the top-k query did not finish in {timeout_s}s"
    finally:
        pipeline.stop()


def offline_reports(
    path: Path = SAMPLE,
    queries: tuple[TopKQuery, ...] = QUERIES,
    *,
    close_at_end: bool = False,
    watermark_s: float = PipelineConfig().watermark_s,
) -> Reports:
    """The offline reports per query, with the pipeline's watermark delay ``watermark_s``.

    ``close_at_end``: ``netmon analyze topk FILE --time-based --watermark <watermark_s>
    --close-at-end`` (the replay ended as ``netmon demo`` ends it), its JSON lines. Otherwise the
    replay's final message put event time exactly ``watermark_s`` past the last record, which no
    option of the command spells (``--keep-open`` is a replay with no final message): the
    function the command runs, ``read_topk``, with ``close_after=0``.
    """
    out: Reports = {}
    for q in queries:
        window, sub_window = f"{round(q.window_s * 1000)}ms", f"{round(q.sub_window_s * 1000)}ms"
        if not close_at_end:
            _, reports = read_topk(
                path, key=q.key, N=window, b=sub_window, k=q.k, weight=q.weight, time_based=True,
                watermark=f"{round(watermark_s * 1000)}ms", close_after=0,
            )  # fmt: skip
            out[q.name] = [json.loads(json.dumps(r)) for r in reports]
            continue
        args = ["analyze", "topk", str(path), "--key", q.key, "--weight", q.weight, "-k", str(q.k)]
        args += ["--window", window, "--sub-window", sub_window]
        args += ["--time-based", "--watermark", f"{round(watermark_s * 1000)}ms", "--close-at-end"]
        result = CliRunner().invoke(cli, args, catch_exceptions=False, env={"NETMON_CONFIG": None})
        assert result.exit_code == 0, result.output
        out[q.name] = [json.loads(line) for line in result.stdout.splitlines()]
    return out


def stream_reports(cfg: Config) -> Reports:
    """The committed result rows folded back into reports; checks each report's rows are well formed."""
    table = read_results(results_dir(cfg, "topk"))
    if table is None:
        return {}
    end_ns = pc.multiply(pc.cast(table["window_end"], pa.int64()), 1000).to_pylist()
    rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row, end in zip(table.to_pylist(), end_ns, strict=True):
        rows[(row["query"], end)].append(row)
    out: Reports = defaultdict(list)
    for (query, end), group in sorted(rows.items()):
        group.sort(key=lambda r: r["rank"])
        ranks = [r["rank"] for r in group]
        assert ranks == [0] or ranks == list(range(1, len(group) + 1)), f"{query} {end}: ranks {ranks}"
        assert len({(r["delta"], r["total"]) for r in group}) == 1, f"{query} {end}: one delta and total"
        if ranks == [0]:
            assert group[0]["key"] is None and group[0]["count"] is None
        items = [{"key": r["key"], "count": r["count"]} for r in group if r["rank"] > 0]
        out[query].append({"end": format_end(end), "delta": group[0]["delta"], "items": items})
    return dict(out)


def replayed_topk(spark: object, netmon_config: Config, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Replay the sample and run the top-k pipeline to the end, once per test session; its config.

    Also used by ``tests/dashboard/test_heavy_hitters_page.py`` for real results.
    """
    if "replayed" not in _RUNS:
        cfg = _config(netmon_config, tmp_path_factory.mktemp("topk") / "data", "netmon.test.topk")
        _replay(cfg)
        _run_to_end(start_pipeline(spark, cfg, available_now=True, kinds=("topk",)))  # type: ignore[arg-type]
        _RUNS["replayed"] = cfg
    return _RUNS["replayed"]


def test_processor_ranks_each_subwindow_and_resumes_from_its_state() -> None:
    """The processor in memory (``TwsTester``): full counts in, top-k merged, state carried over."""
    import pandas as pd
    from pyspark.sql.streaming.tws_tester import TwsTester

    from analytics.topk import SubWindowTopK
    from pipeline.topk_state import TopKMergeProcessor

    params = QueryParams(N=3 * 10**9, b=10**9, k=2)
    tester = TwsTester(TopKMergeProcessor({"q": params}))
    oracle = SubWindowTopK(params.N, params.b, params.k, time_based=True)
    subwindows = {
        100: {"b": 5, "a": 5, "c": 9, "d": 1},  # tie at the k-th count: key text decides
        101: {"a": 4, "e": 4},
        103: {"a": 7, "c": 2, "b": 2},  # 102 is empty
        104: {"z": 1},
    }
    got, expected = [], []
    for batch in ([100, 101], [103], [104]):
        rows = [(sw, key, c) for sw in reversed(batch) for key, c in subwindows[sw].items()]
        out = tester.testInPandas("q", pd.DataFrame(rows, columns=["sw", "key", "count"]))
        got += [
            (int(r.window_end.value), r.delta, r.rank, r.key, None if pd.isna(r.count) else r.count)
            for r in out.itertuples()
        ]
        for sw in batch:
            for report in oracle.add_subwindow(subwindows[sw], sw):
                end = pd.Timestamp(report["end"]).value
                items = report["items"] or [{"key": None, "count": None}]
                rank0 = not report["items"]
                expected += [
                    (end, report["delta"], 0 if rank0 else i, it["key"], it["count"])
                    for i, it in enumerate(items, 1)
                ]
    assert got == expected and len(got) >= 3
    # The last report's window is sub-windows 102 (empty), 103 and 104.
    assert out["total"].tolist() == [0 + 11 + 1] * len(out)


@pytest.mark.spark
@pytest.mark.kafka
def test_stream_equals_offline_command(spark, kafka_bootstrap, netmon_config, tmp_path_factory) -> None:
    cfg = replayed_topk(spark, netmon_config, tmp_path_factory)
    expected = offline_reports(watermark_s=cfg.pipeline.watermark_s)
    assert all(len(reports) > 20 for reports in expected.values())
    got = stream_reports(cfg)
    for q in QUERIES:
        assert got[q.name] == expected[q.name], q.name
    # ``total``: the window's traffic (the query's weight, records with the key).
    records = pa.Table.from_batches(list(read_records(SAMPLE)))
    ts = pc.cast(records["ts"], pa.int64())
    table = read_results(results_dir(cfg, "topk"))
    assert table is not None
    for row in table.filter(pc.equal(table["query"], "sources")).to_pylist()[::7]:
        end = int(row["window_end"].timestamp()) * 10**9
        inside = pc.and_(pc.greater_equal(ts, end - 10 * 10**9), pc.less(ts, end))
        assert row["total"] == pc.sum(pc.cast(inside, pa.int64())).as_py()


@pytest.mark.spark
@pytest.mark.kafka
def test_restart_from_checkpoint_resumes_exactly(spark, kafka_bootstrap, netmon_config, tmp_path) -> None:
    # One partition (so small batches arrive in event-time order: nothing is late), 100 records a
    # message, 8 messages a batch: the first run stops after two of about four batches.
    cfg = _config(
        netmon_config, tmp_path / "data", "netmon.test.topk.restart", partitions=1, max_offsets_per_trigger=8
    )
    # Replayed as netmon demo replays: the last sub-windows close too (offline: --close-at-end).
    _replay(cfg, close_at_end=True, records_per_message=100)
    first = start_pipeline(spark, cfg, kinds=("topk",))
    try:
        while (stats := first.poll().get("topk")) is None or stats.batches < 2:
            assert first.failed() is None, first.failed()
            first.await_termination(0.5)
    finally:
        first.stop()
    partial = stream_reports(cfg)
    expected = offline_reports(close_at_end=True, watermark_s=cfg.pipeline.watermark_s)
    assert sum(map(len, partial.values())) < sum(map(len, expected.values())), "stopped too late"
    kept = offline_reports(watermark_s=cfg.pipeline.watermark_s)
    assert all(len(expected[q.name]) > len(kept[q.name]) for q in QUERIES), "nothing more closed"

    _run_to_end(start_pipeline(spark, cfg, available_now=True, kinds=("topk",)))
    # No report lost or written twice (stream_reports folds rows per window end; duplicates
    # would break the rank check), and the reports straddling the restart are exact.
    assert stream_reports(cfg) == expected


def _split_capture(path: Path, first: Path, second: Path) -> int:
    """The classic pcap ``path`` cut in two at its middle packet; the first part's last time (µs)."""
    import struct

    data = path.read_bytes()
    header, pos, records = data[:24], 24, []
    while pos < len(data):
        sec, usec, incl, _ = struct.unpack_from("<IIII", data, pos)
        records.append((sec * 1_000_000 + usec, data[pos : pos + 16 + incl]))
        pos += 16 + incl
    half = len(records) // 2
    first.write_bytes(header + b"".join(r for _, r in records[:half]))
    second.write_bytes(header + b"".join(r for _, r in records[half:]))
    return records[half - 1][0]


def _resized_rows(q: TopKQuery, change_at_us: int, window_s: float) -> list[tuple]:
    """The offline rows of ``q`` over the sample (exact counts per sub-window, ``TopKMerge``),
    resized to ``window_s`` before the first sub-window not closed at ``change_at_us``; event time
    ends at the last record (the replay's closing message puts the watermark there)."""
    from analytics.keys import key_text, parse_key
    from analytics.topk import top_k
    from analytics.topk_merge import TopKMerge

    table = pa.Table.from_batches(list(read_records(SAMPLE)))
    ts_us = pc.divide(pc.cast(table["ts"], pa.int64()), 1000)
    b_us = round(q.sub_window_s * 1e6)
    keyed = pa.table({"sw": pc.divide(ts_us, b_us), "key": key_text(table, parse_key(q.key))})
    counts = keyed.filter(pc.is_valid(keyed["key"])).group_by(["sw", "key"]).aggregate([("key", "count")])
    subs: dict[int, dict[str, int]] = defaultdict(dict)
    for sw, key, n in zip(*(counts[c].to_pylist() for c in ("sw", "key", "key_count")), strict=True):
        subs[sw][key] = n
    end_us = pc.max(ts_us).as_py()  # the watermark stops at the last record
    merge = TopKMerge(QueryParams(N=round(q.window_s * 1e9), b=b_us * 1000, k=q.k))
    rows, resized = [], False
    for sw in sorted(subs):
        if (sw + 1) * b_us > end_us:
            break
        if not resized and (sw + 1) * b_us > change_at_us:
            merge.resize(round(window_s * 1e9))
            resized = True
        items, _ = top_k(subs[sw], q.k)
        rows += merge.add_subwindow(dict(items), sw, sum(subs[sw].values()))
    return [
        (end // 1000, delta, rank, key, count, total, w / 1e9)
        for end, delta, rank, key, count, total, w in rows
    ]


@pytest.mark.spark
@pytest.mark.kafka
def test_a_window_changed_while_the_pipeline_runs_equals_the_offline_change(
    spark, kafka_bootstrap, netmon_config, tmp_path
) -> None:
    """Issue 18 item 4 on the real broker and Spark: the pipeline runs; the first half of the
    capture is replayed and processed; ``netmon tune --window`` shrinks one window and grows
    another; the second half follows. The rows equal the offline algorithm resized at the same
    instant: the first sub-window the next batch closes (the watermark before it, in force from
    the next sub-window's end on)."""
    from pipeline.window_knobs import window_file

    cfg = _config(netmon_config, tmp_path / "data", "netmon.test.topk.window", partitions=1)
    first, second = tmp_path / "first.pcap", tmp_path / "second.pcap"
    last_first_us = _split_capture(SAMPLE, first, second)
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    delay_us = round(cfg.pipeline.watermark_s * 1e6)
    changes = {"sources": 4.0, "ports": 10.0}  # 10 s -> 4 s, 5 s -> 10 s

    def replay_part(path: Path, close: float | None) -> None:
        opts = ReplayOptions(close_windows_s=close, records_per_message=100)
        summary = replay(path, bootstrap=cfg.kafka.bootstrap, topic=cfg.kafka.packets_topic, options=opts,
                         partitions=cfg.kafka.partitions, progress=False)  # fmt: skip
        assert summary.produced == summary.acknowledged

    def wait_for(pipeline: Pipeline, name: str, end_us: int) -> None:
        for _ in range(600):
            assert pipeline.failed() is None, pipeline.failed()
            table = read_results(results_dir(cfg, "topk"))
            if table is not None:
                mine = table.filter(pc.equal(table["query"], name))
                if mine.num_rows and pc.max(pc.cast(mine["window_end"], pa.int64())).as_py() >= end_us:
                    return
            pipeline.await_termination(0.5)
        raise AssertionError(f"{name}: no window ending at {end_us} µs in 300 s")

    change_at = last_first_us - delay_us  # the watermark before the first batch of the second half
    expected = {
        name: sorted(_resized_rows(q, change_at, changes[name]))
        for name, q in ((q.name, q) for q in QUERIES)
        if name in changes
    }
    # The first half is in the topic before the pipeline starts, so its first batch reads all of
    # it (13 messages, under the 600 a batch may take): the change falls between that batch and
    # the next, whose watermark before it is the first half's.
    replay_part(first, None)
    pipeline = start_pipeline(spark, cfg, kinds=("topk",))
    try:
        # the first half is processed: its last report (closed by its watermark) is committed
        wait_for(pipeline, "sources", max(r[0] for r in expected["sources"] if r[0] <= change_at))
        window_file(cfg).parent.mkdir(parents=True, exist_ok=True)
        window_file(cfg).write_text(json.dumps(changes))
        replay_part(second, cfg.pipeline.watermark_s)
        wait_for(pipeline, "ports", max(r[0] for r in expected["ports"]))
    finally:
        pipeline.stop()
    table = read_results(results_dir(cfg, "topk"))
    assert table is not None
    for q in QUERIES:
        mine = table.filter(pc.equal(table["query"], q.name)).to_pylist()
        got = sorted(
            (
                int(r["window_end"].timestamp() * 1e6),
                r["delta"],
                r["rank"],
                r["key"],
                r["count"],
                r["total"],
                r["window_s"],
            )
            for r in mine
        )
        if q.name not in changes:  # the bytes query is left alone: exact, its window throughout
            assert {r["window_s"] for r in mine} == {q.window_s}
            continue
        assert got == expected[q.name], q.name
        assert {q.window_s, changes[q.name]} <= {r["window_s"] for r in mine}  # before and after
    # the growth of "ports" from 5 to 10 s shows windows in between
    assert {6.0, 7.0, 8.0, 9.0} <= {
        r["window_s"] for r in table.filter(pc.equal(table["query"], "ports")).to_pylist()
    }


@pytest.mark.spark
@pytest.mark.kafka
def test_a_sub_window_changed_while_the_pipeline_runs_equals_the_offline_twin(
    spark, kafka_bootstrap, netmon_config, tmp_path
) -> None:
    """Seed 004's granularity knob on the real broker and Spark: the first half of the capture is
    processed; ``netmon tune --granularity`` coarsens two queries' sub-windows; the second half
    follows. The rows equal the offline twin (``OfflineTopK(granularity=...)``) with the change at
    the same instant: the first one, at or after the first sub-window the next batch has open
    (the watermark before it), on both the old and the new grid."""
    from analytics.granularity import FROM_START
    from analytics.topk_offline import OfflineTopK
    from pipeline.window_knobs import granularity_file

    cfg = _config(netmon_config, tmp_path / "data", "netmon.test.topk.granularity", partitions=1)
    first, second = tmp_path / "first.pcap", tmp_path / "second.pcap"
    last_first_us = _split_capture(SAMPLE, first, second)
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    delay_us = round(cfg.pipeline.watermark_s * 1e6)
    sub_windows = {"sources": 2.0, "ports": 1.0}  # 1 s -> 2 s, 0.5 s -> 1 s
    change_at = last_first_us - delay_us  # the watermark before the first batch of the second half
    table = pa.Table.from_batches(list(read_records(SAMPLE)))
    expected = {}
    for q in QUERIES:
        b_us = round(q.sub_window_s * 1e6)
        m = round(sub_windows.get(q.name, q.sub_window_s) / q.sub_window_s)
        first_open = ((last_first_us // 1000) * 1000 - delay_us) // b_us  # the kind's ms watermark
        at = -(-first_open // m) * m  # lcm(1, m) = m: the first multiple of m from there
        offline = OfflineTopK(
            q.key, N=round(q.window_s * 1e9), b=b_us * 1000, k=q.k, weight=q.weight, time_based=True,
            watermark=delay_us * 1000, granularity=[(FROM_START, 1), (at, m)] if m > 1 else 1,
        )  # fmt: skip
        expected[q.name] = list(offline.run([table], close_after=0))

    def replay_part(path: Path, close: float | None) -> None:
        opts = ReplayOptions(close_windows_s=close, records_per_message=100)
        summary = replay(path, bootstrap=cfg.kafka.bootstrap, topic=cfg.kafka.packets_topic, options=opts,
                         partitions=cfg.kafka.partitions, progress=False)  # fmt: skip
        assert summary.produced == summary.acknowledged

    def wait_for(pipeline: Pipeline, name: str, end: str) -> None:
        for _ in range(600):
            assert pipeline.failed() is None, pipeline.failed()
            rows = read_results(results_dir(cfg, "topk"))
            if rows is not None and any(r["end"] == end for r in _folded(rows, name)):
                return
            pipeline.await_termination(0.5)
        raise AssertionError(f"{name}: no window ending at {end} in 300 s")

    replay_part(first, None)
    pipeline = start_pipeline(spark, cfg, kinds=("topk",))
    try:
        first_half = [r for r in expected["sources"] if r["end"] <= format_end(change_at * 1000)]
        wait_for(pipeline, "sources", first_half[-1]["end"])
        granularity_file(cfg).parent.mkdir(parents=True, exist_ok=True)
        granularity_file(cfg).write_text(json.dumps(sub_windows))
        replay_part(second, cfg.pipeline.watermark_s)
        wait_for(pipeline, "ports", expected["ports"][-1]["end"])
        wait_for(pipeline, "sources", expected["sources"][-1]["end"])
    finally:
        pipeline.stop()
    rows = read_results(results_dir(cfg, "topk"))
    assert rows is not None
    for q in QUERIES:
        assert _folded(rows, q.name) == expected[q.name], q.name
        mine = rows.filter(pc.equal(rows["query"], q.name))
        assert set(mine["sub_window_s"].to_pylist()) == {
            q.sub_window_s,
            sub_windows.get(q.name, q.sub_window_s),
        }


def _folded(rows: pa.Table, name: str) -> list[dict[str, Any]]:
    """One query's committed rows folded back into the offline twin's reports."""
    by_end: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows.filter(pc.equal(rows["query"], name)).to_pylist():
        by_end[int(r["window_end"].timestamp() * 1e6)].append(r)
    out = []
    for end_us, group in sorted(by_end.items()):
        group.sort(key=lambda r: r["rank"])
        items = [{"key": r["key"], "count": r["count"]} for r in group if r["rank"] > 0]
        out.append({"end": format_end(end_us * 1000), "delta": group[0]["delta"], "items": items})
    return out
