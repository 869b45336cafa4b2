"""The join operator on the real broker and real Spark: equal to Spark's own join, shedding, restart.

A sample is replayed into Kafka; the ``joins`` kind runs the handshake query and a link query
(``dst_port=443`` ⋈ ``dst_port=80`` on ``src_ip``: hosts using both web ports within 2 s,
many-to-many) each twice, unshed and with PNI at fixed fractions. Spark's stream-stream inner join
with the same time-range condition runs on the same input in the same test: without shedding
both must produce the same rows, and the offline :func:`analytics.join_queries.run_join` too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from functools import reduce
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analytics.join_queries import HandshakeQuery, LinkQuery, run_join
from ingest import read_records
from ingest.replay import ReplayOptions, replay
from netmon.config import Config, ConfigError, JoinQuery, SheddingConfig
from netmon.kafka_admin import recreate_topic
from netmon.results import (
    COMMITS,
    SHARED_QUERY,
    checkpoint_dir,
    read_results,
    result_files,
    results_dir,
    status_file,
)
from pipeline.job import Pipeline, start_pipeline
from pipeline.joins import SheddingListener, build_spark_join, control_file, filter_column
from pipeline.publish import ResultPublisher
from pipeline.shedding_controller import STATS_SCHEMA, SheddingRecord, read_control
from pipeline.source import read_packets
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"

HANDSHAKE = JoinQuery(name="handshake", query="handshake", window_s=3.0, strategy="none")
LINK = JoinQuery(
    name="web", query="link", left="dst_port=443", right="dst_port=80", window_s=2.0, strategy="none"
)
#: The same two joins with Probe-No-Insert at the static fractions of ``SHED``.
SHED_QUERIES = (
    dataclasses.replace(HANDSHAKE, name="handshake-pni", strategy="pni"),
    dataclasses.replace(LINK, name="web-pni", strategy="pni"),
)
SHED = SheddingConfig(x_left=0.5, x_right=0.3, buckets=4, seed=7)

#: The columns that identify a result row (``delay_s`` is derived from the two times).
_PAYLOAD = ("src_ip", "dst_ip", "src_port", "dst_port", "iface")
ROW = ("key", "left_ts", "right_ts", *(f"{side}_{c}" for side in ("left", "right") for c in _PAYLOAD))

_RUNS: dict[str, Config] = {}


# -- helpers -------------------------------------------------------------------------------------
def with_joins(cfg: Config, queries: tuple[JoinQuery, ...], shedding: SheddingConfig) -> Config:
    """``cfg`` with ``[[queries.join]]`` and ``[shedding]``."""
    return dataclasses.replace(cfg.replace(queries={"join": queries}), shedding=shedding)


def join_config(
    base: Config,
    data_dir: Path,
    topic: str,
    queries: tuple[JoinQuery, ...],
    shedding: SheddingConfig = SHED,
    *,
    partitions: int = 2,
    **spark: object,
) -> Config:
    cfg = base.replace(
        paths={"data_dir": data_dir},
        kafka={"packets_topic": topic, "partitions": partitions, "results_topic_prefix": f"{topic}."},
        spark=spark or {},
    )
    return with_joins(cfg, queries, shedding)


def replay_sample(cfg: Config, path: Path = SAMPLE, **options: Any) -> Any:
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    opts = ReplayOptions(close_windows_s=cfg.pipeline.watermark_s, **options)
    summary = replay(
        path,
        bootstrap=cfg.kafka.bootstrap,
        topic=cfg.kafka.packets_topic,
        options=opts,
        partitions=cfg.kafka.partitions,
        progress=False,
    )
    assert summary.produced == summary.acknowledged
    return summary


def run_to_end(pipeline: Pipeline, timeout_s: float = 300) -> None:
    try:
        pipeline.await_termination(timeout_s)
        assert pipeline.failed() is None, pipeline.failed()
        assert not pipeline.active, f"the queries did not finish in {timeout_s}s"
    finally:
        pipeline.stop()


def rows(table: pa.Table | None, query: str, row: str = "match") -> Counter[tuple[Any, ...]]:
    """The multiset of a query's result rows (timestamps as integer microseconds)."""
    if table is None:
        return Counter()
    mine = table.filter(pc.and_(pc.equal(table["query"], query), pc.equal(table["row"], row)))
    cols = [
        pc.cast(mine[c], pa.int64()).to_pylist() if c.endswith("_ts") else mine[c].to_pylist()
        for c in ROW
        if c in mine.column_names
    ]
    return Counter(zip(*cols, strict=True))


def offline(query: HandshakeQuery | LinkQuery) -> Counter[tuple[str, int, int]]:
    """``(key, left_ts µs, right_ts µs)`` of the offline join over the sample (``run_join``)."""
    records = pa.Table.from_batches(list(read_records(SAMPLE)))
    out = run_join(query, records).results
    left = out["left_ts"].astype("int64") // 1000
    right = out["right_ts"].astype("int64") // 1000
    return Counter(zip(out["key"], left.tolist(), right.tolist(), strict=True))


def replayed_joins(spark: Any, netmon_config: Config, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Replay the sample, run the ``joins`` kind to the end once per session; its config.

    Checks that the four query sides read the Kafka source once: the query's input rows are the
    messages replayed.
    """
    if "joins" not in _RUNS:
        data = tmp_path_factory.mktemp("joins") / "data"
        cfg = join_config(netmon_config, data, "netmon.test.joins", (HANDSHAKE, LINK, *SHED_QUERIES))
        summary = replay_sample(cfg)
        pipeline = start_pipeline(spark, cfg, available_now=True, kinds=("joins",))
        run_to_end(pipeline)
        assert pipeline.stats["joins"].input_rows == summary.messages
        _RUNS["joins"] = cfg
    return _RUNS["joins"]


def spark_join_rows(spark: Any, cfg: Config, out: Path) -> pa.Table | None:
    """Spark's stream-stream inner join of the handshake and link queries, run to the end."""
    packets = read_packets(spark, cfg)
    joined = reduce(lambda a, b: a.unionByName(b), [build_spark_join(packets, q) for q in (HANDSHAKE, LINK)])
    query = (
        joined.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out / "rows"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    return read_results(out / "rows")


# -- tests ---------------------------------------------------------------------------------------
@pytest.mark.spark
def test_settings_are_validated(spark) -> None:
    """Bad settings fail when built (config load, ``cfg.replace``, direct use), before Spark sees them."""
    from pipeline.joins_batch import SharedJoins

    bad = [
        ({"query": "nope"}, "query: expected one of handshake, link"),
        ({"strategy": "max-subset"}, "strategy: .*max-subset runs offline only"),
        ({"query": "link", "left": "iface=a"}, "right: a link query needs a filter"),
    ]
    for fields, message in bad:
        with pytest.raises(ConfigError, match=rf"\[\[queries\.join\]\] 'x' {message}"):
            JoinQuery(name="x", **fields)
    for fields, name in (
        ({"buckets": 0}, "buckets"),
        ({"smoothing": 0}, "smoothing"),
        ({"x_left": 1.5}, "x_left"),
        ({"cpu_budget": 0}, "cpu_budget"),
    ):
        with pytest.raises(ConfigError, match=rf"\[shedding\] {name}"):
            SheddingConfig(**fields)
        with pytest.raises(ConfigError, match=rf"\[shedding\] {name}"):
            Config().replace(shedding=fields)
    # A tuple handed to the joins kind directly: names must still be unique (they key its state).
    with pytest.raises(ConfigError, match=r"\[\[queries\.join\]\] name: query names must be unique"):
        SharedJoins((HANDSHAKE, HANDSHAKE), {}, Path("results"), Path("checkpoint"))


@pytest.mark.spark
def test_filter_column_matches_the_offline_filters(spark) -> None:
    from netmon.filters import parse_filter

    data = pa.table(
        {
            "src_ip": ["10.1.2.3", "10.2.0.1", None, "2001:db8::1", "192.0.2.7", "10.1.255.255"],
            "src_port": pa.array([5000, 80, None, 1, 2, 3], pa.int32()),
            "dst_port": pa.array([80, 443, 80, None, 22, 8080], pa.int32()),
            "proto": pa.array([6, 6, 17, 6, 6, 17], pa.int16()),
            "iface": ["eth0", "eth1", "eth0", None, "eth1", "eth0"],
        }
    )
    schema = "src_ip string, src_port int, dst_port int, proto smallint, iface string"
    df = spark.createDataFrame(data.to_pylist(), schema)
    filters = (
        "src_ip=10.1.0.0/16",
        "src_ip!=10.0.0.0/8 and proto=tcp",
        "port=80 or iface=eth1",
        "not (dst_port>=443) and dst_port!=22",
        "src_ip=2001:db8::/32",
        "src_ip=192.0.2.7",
    )
    got = df.select(*(filter_column(text).alias(f"f{i}") for i, text in enumerate(filters))).collect()
    for i, text in enumerate(filters):
        assert [r[i] for r in got] == parse_filter(text).mask(data).to_pylist(), text


@pytest.mark.spark
@pytest.mark.kafka
def test_unshed_output_equals_sparks_join_and_offline(
    spark, kafka_bootstrap, netmon_config, tmp_path_factory
) -> None:
    cfg = replayed_joins(spark, netmon_config, tmp_path_factory)
    ours = read_results(results_dir(cfg, "joins"))
    reference = spark_join_rows(spark, cfg, tmp_path_factory.mktemp("spark-join"))
    for q in (HANDSHAKE, LINK):
        got, expected = rows(ours, q.name), rows(reference, q.name)
        assert sum(expected.values()) > 100, q.name
        assert got == expected, q.name
    # The offline join over the capture (analytics) agrees on keys and times.
    for q, offline_query in (
        (HANDSHAKE, HandshakeQuery(3.0)),
        (LINK, LinkQuery("dst_port=443", "dst_port=80", 2.0)),
    ):
        triples: Counter[tuple[Any, ...]] = Counter()
        for key, n in rows(ours, q.name).items():
            triples[key[:3]] += n
        assert triples == offline(offline_query), q.name
    # Handshake RTTs are the SYN-ACK's delay since its SYN.
    assert ours is not None
    hs = ours.filter(pc.and_(pc.equal(ours["query"], "handshake"), pc.equal(ours["row"], "match")))
    micros = pc.subtract(pc.cast(hs["right_ts"], pa.int64()), pc.cast(hs["left_ts"], pa.int64()))
    delay = pc.divide(pc.cast(micros, pa.float64()), 1e6)
    assert pc.max(pc.abs(pc.subtract(delay, hs["delay_s"]))).as_py() < 1e-9


@pytest.mark.spark
@pytest.mark.kafka
def test_shed_output_is_a_subset_and_unmatched_syns_are_unanswered(
    spark, kafka_bootstrap, netmon_config, tmp_path_factory
) -> None:
    cfg = replayed_joins(spark, netmon_config, tmp_path_factory)
    ours = read_results(results_dir(cfg, "joins"))
    for full, shed in zip((HANDSHAKE, LINK), SHED_QUERIES, strict=True):
        everything, kept = rows(ours, full.name), rows(ours, shed.name)
        assert 0 < sum(kept.values()) < sum(everything.values()), shed.name
        assert not kept - everything, f"{shed.name}: rows that the unshed join does not produce"
    # Unmatched rows: SYNs of the unshed query that no SYN-ACK answered within T.
    answered = {(k[0], k[1]) for k in rows(ours, "handshake")}
    unmatched = rows(ours, "handshake", "unmatched")
    assert unmatched and not {(k[0], k[1]) for k in unmatched} & answered


#: The restart scenario: the unshed handshake query, and the link query with PNI under the live
#: controller at a budget far below its cost.
LIVE = dataclasses.replace(LINK, name="web-live", strategy="pni")
LIVE_SHEDDING = SheddingConfig(cpu_budget=0.002, smoothing=1.0, max_step=0.5, buckets=4)


def measured_batches(pipeline: Pipeline) -> set[tuple[str, int]]:
    """(join query, batch id) of every batch with input for that join query, from the joins
    kind's own statistics of its batches (``SharedJoins.observed``)."""
    out = set()
    for batch_id, observed in pipeline.batch_functions["joins"].observed.items():
        for name, m in observed.items():
            if int(m["n_left"] or 0) + int(m["n_right"] or 0):
                out.add((name.removeprefix("join."), int(batch_id)))
    return out


def restarted_joins(
    spark: Any, netmon_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Run ``joins`` + ``shedding`` for a few small batches, stop, restart to the end (once per session).

    One partition, 500 records a message, 5 messages a batch: 4 batches, the first run stops after
    2 or 3. Returns the config, the first run's handshake rows, the fractions it left behind, the
    joins batches with input (:func:`measured_batches`) of both runs, the streaming queries that
    ran and the first run's status. Also used by ``tests/dashboard/test_join_pages.py`` (both pages
    have real results here).
    """
    if "restart" in _RUNS:
        return _RUNS["restart"]
    data = tmp_path_factory.mktemp("restart") / "data"
    cfg = join_config(
        netmon_config,
        data,
        "netmon.test.joins.restart",
        (HANDSHAKE, LIVE),
        LIVE_SHEDDING,
        partitions=1,
        max_offsets_per_trigger=5,
    )
    replay_sample(cfg, records_per_message=500)
    first = start_pipeline(spark, cfg, kinds=("joins", "shedding"))
    try:
        running = {q.name for q in spark.streams.active}
        deadline = time.monotonic() + 240
        while len(measured_batches(first)) < 2:
            first.poll()
            assert first.failed() is None, first.failed()
            assert time.monotonic() < deadline, "no batches"
            time.sleep(0.5)
    finally:
        first.stop()
    status = json.loads(status_file(cfg).read_text())["queries"]
    partial = rows(read_results(results_dir(cfg, "joins")), "handshake")
    fractions = read_control(control_file(cfg))
    second = start_pipeline(spark, cfg, available_now=True, kinds=("joins", "shedding"))
    run_to_end(second)
    _RUNS["restart"] = {
        "cfg": cfg,
        "partial": partial,
        "fractions": fractions,
        "batches": (measured_batches(first), measured_batches(second)),
        "queries": (running, set(first.queries), set(second.queries)),
        "status": status,
    }
    return _RUNS["restart"]


@pytest.mark.spark
@pytest.mark.kafka
def test_restart_keeps_join_state_and_the_controller_sheds(
    spark, kafka_bootstrap, netmon_config, tmp_path_factory
) -> None:
    """Stopped after a few batches and restarted: the unshed output is exact, with no duplicate;
    the controller lowers the fractions of the live PNI query, the operator applies them, and its
    output stays a subset of the full output."""
    full = read_results(results_dir(replayed_joins(spark, netmon_config, tmp_path_factory), "joins"))
    run = restarted_joins(spark, netmon_config, tmp_path_factory)
    cfg = run["cfg"]
    assert 0 < sum(run["partial"].values()) < sum(rows(full, "handshake").values()), "stopped too late"
    assert run["fractions"]["handshake"] == (1.0, 1.0) and min(run["fractions"]["web-live"]) < 1

    got = read_results(results_dir(cfg, "joins"))
    assert rows(got, "handshake") == rows(full, "handshake")
    assert rows(got, "handshake", "unmatched") == rows(full, "handshake", "unmatched")
    shed, everything = rows(got, "web-live"), rows(full, "web")
    assert 0 < sum(shed.values()) < sum(everything.values()) and not shed - everything

    stats = read_results(results_dir(cfg, "shedding"))
    assert stats is not None
    table = stats.to_pandas().sort_values(["query", "batch_id"])
    web = table[table["query"] == "web-live"]
    assert len(web) >= 3 and web["batch_id"].is_unique
    # Over budget from the first batch on: the fractions fall, and later batches apply them (the
    # listener runs asynchronously: a batch may start before the previous decision is written).
    assert web["utilisation"].iloc[0] > LIVE_SHEDDING.cpu_budget
    assert min(web["next_x_left"].iloc[0], web["next_x_right"].iloc[0]) < 1
    assert min(web["x_left"].iloc[-1], web["x_right"].iloc[-1]) < 1
    hs = table[table["query"] == "handshake"]
    assert (hs[["x_left", "x_right", "next_x_left", "next_x_right"]] == 1).all().all()
    assert 0 < hs["results"].sum() <= sum(rows(full, "handshake").values())


@pytest.mark.spark
@pytest.mark.kafka
def test_shedding_rows_are_committed_per_joins_batch_without_a_query_of_their_own(
    spark, kafka_bootstrap, netmon_config, tmp_path_factory
) -> None:
    """Neither the joins nor the ``shedding`` kind run a streaming query of their own: the joins
    run on the shared query, and the listener commits one row per join query and batch with join
    input, named by the shared batch id, across a restart (the restarted query goes on with its
    checkpoint's batch ids)."""
    run = restarted_joins(spark, netmon_config, tmp_path_factory)
    cfg = run["cfg"]
    running, first_queries, second_queries = run["queries"]
    assert SHARED_QUERY in running and not {"joins", "shedding"} & running
    assert first_queries == second_queries == {SHARED_QUERY}
    before, after = run["batches"]
    assert before and after and max(b for _, b in before) < min(b for _, b in after)

    stats = read_results(results_dir(cfg, "shedding"))
    assert stats is not None
    committed = list(zip(stats["query"].to_pylist(), stats["batch_id"].to_pylist(), strict=True))
    assert sorted(committed) == sorted(before | after)  # once each: no duplicate, none missing
    commits = sorted(int(p.stem) for p in (results_dir(cfg, "shedding") / COMMITS).glob("*.json"))
    assert commits == sorted({b for _, b in before | after})
    # No statistics files, no Spark sink or checkpoint for the kind.
    assert not (control_file(cfg).parent / "stats").exists()
    assert not (results_dir(cfg, "shedding") / "_spark_metadata").exists()
    assert not checkpoint_dir(cfg, "shedding").exists()
    # The status: the kind's commits, active while the joins query is (stopped here).
    shedding = run["status"]["shedding"]
    first_batches = {b for _, b in before}
    assert shedding["batches"] == len(first_batches) and shedding["last_batch_id"] == max(first_batches)
    assert shedding["input_rows"] == len(before) and not shedding["active"]


def _old_ddl() -> str:
    """The Spark DDL with which the ``shedding`` kind's own query read the controller's JSON files."""
    types = {"str": "STRING", "int": "BIGINT", "float": "DOUBLE", "str | None": "STRING"}
    return ", ".join(
        f"{f.name} {'TIMESTAMP' if f.name in ('batch_time', 'event_time') else types[str(f.type)]}"
        for f in dataclasses.fields(SheddingRecord)
    )


def _old_json(record: SheddingRecord) -> str:
    """A record as the listener wrote it into its JSON files (NaN as null)."""
    return json.dumps(
        {
            k: None if isinstance(v, float) and math.isnan(v) else v
            for k, v in dataclasses.asdict(record).items()
        }
    )


class _Producer:
    """A producer that acknowledges every message (``pipeline.publish`` checks each future)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, topic: str, value: bytes, **_: Any) -> Any:
        self.values.append(value)
        return SimpleNamespace(succeeded=lambda: True, exception=None)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


@pytest.mark.spark
def test_shedding_rows_keep_their_schema_beside_an_older_spark_sink_history(
    spark, netmon_config, tmp_path
) -> None:
    """A data directory whose ``results/shedding/`` an older netmon wrote with Spark's file sink
    (a file-source query over the controller's JSON files): the listener's commits go beside it
    (``_commits/`` and ``batch-<id>/``, apart from ``_spark_metadata/`` and its part files even
    where batch numbers coincide), with the same schema and rows, both are read, and each file
    is published once."""
    from tests.pipeline.test_shedding_controller import controller, progress

    cfg = netmon_config.replace(paths={"data_dir": tmp_path / "data"})
    results = results_dir(cfg, "shedding")
    # The older history: batches 0 and 1 through JSON files, Spark's file source and file sink.
    batches = [progress(0), progress(1, min_ts_ns=1795320000000000000, max_ts_ns=1795320002000000000)]
    old = controller()
    stats = tmp_path / "stats"
    stats.mkdir()
    for body in batches:
        lines = "".join(_old_json(r) + "\n" for r in old.update(body))
        (stats / f"batch-{body['batchId']:012d}.json").write_text(lines)
    query = (
        spark.readStream.schema(_old_ddl())
        .json(str(stats))
        .writeStream.format("parquet")
        .option("path", str(results))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    spark_files = result_files(results)
    assert spark_files and (results / "_spark_metadata" / "0").exists()
    # Now the listener commits the same batch ids (those of the joins query) beside it.
    listener = SheddingListener(control_file(cfg), results, controller())
    listener.follow("joins")  # an older netmon's joins query: its progress's own metrics
    for body in batches:
        body["name"] = "joins"
        assert listener.handle(body)
    assert sorted(p.name for p in (results / COMMITS).iterdir()) == ["0.json", "1.json"]
    ours = [f for f in result_files(results) if f not in spark_files]
    assert [f.relative_to(results).as_posix() for f in ours] == [
        "batch-000000/part-00000.parquet",
        "batch-000001/part-00000.parquet",
    ]

    def table(files: list[Path]) -> list[dict[str, Any]]:
        read = pa.concat_tables([pq.read_table(f) for f in files])
        assert read.schema.remove_metadata() == STATS_SCHEMA
        return sorted(read.to_pylist(), key=lambda r: (r["batch_id"], r["query"]))

    assert table(ours) == table(spark_files)  # the same rows, the same schema
    both = read_results(results)
    assert both is not None and both.num_rows == 2 * len(table(ours))
    # Published once: every file of both logs, then nothing more.
    producer = _Producer()
    publisher = ResultPublisher(cfg, ("shedding",), producer=producer)
    assert publisher.publish() == both.num_rows
    assert publisher.publish() == 0
    assert publisher._done("shedding") == {f.relative_to(results).as_posix() for f in result_files(results)}
    published = [line for value in producer.values for line in value.splitlines() if line]
    assert len(published) == both.num_rows
