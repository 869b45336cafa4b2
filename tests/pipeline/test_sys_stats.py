"""The ``sys`` kind's listener fed progress JSON as Spark's listener sees it (no Spark, no Kafka).

The progress events are shaped like those Spark 4.2 reports for the pipeline's two queries: the
shared query ``packets`` (a ``foreachBatch`` sink, no state operator, a capped Kafka read) and the
``joins`` query (a file sink, ``transformWithStateInPandas`` state, the join's observed sums).
Every expected value is worked out by hand below the event it comes from.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from netmon.config import Config, JoinQuery
from netmon.results import COMMITS, read_results, result_files
from pipeline.partials import INTAKE
from pipeline.shedding_controller import write_control
from pipeline.sys_stats import SYS_SCHEMA, BatchFigures, Knobs, SysListener, kafka_lag, sys_row

T = dt.datetime(2026, 11, 26, 17, 0, 1, tzinfo=dt.UTC)

#: The shared query's batch 12: 40 messages of 1,000 records; partitions 0 and 1 of the packets
#: topic read up to offsets 120 and 100 of the 150 and 105 Spark saw (lag 30 + 5 = 35 messages,
#: which the source's own metrics agree with: 17.5 behind on average over 2 partitions).
PACKETS: dict[str, Any] = {
    "id": "0b3c7a52-5a8e-4f43-9f0e-2c4b8b9e1d10",
    "runId": "5d2f8e61-7c1a-4c55-b7a9-1e6f3d2c8a01",
    "name": "packets",
    "timestamp": "2026-11-26T17:00:01.000Z",
    "batchId": 12,
    "batchDuration": 850,
    "numInputRows": 40,
    "inputRowsPerSecond": 40.0,
    "processedRowsPerSecond": 50.0,
    "durationMs": {
        "addBatch": 700,
        "commitOffsets": 30,
        "getBatch": 0,
        "latestOffset": 5,
        "queryPlanning": 10,
        "triggerExecution": 850,
        "walCommit": 40,
    },
    "stateOperators": [],
    "sources": [
        {
            "description": "KafkaV2[Subscribe[netmon.packets]]",
            "startOffset": {"netmon.packets": {"0": 100, "1": 80}},
            "endOffset": {"netmon.packets": {"0": 120, "1": 100}},
            "latestOffset": {"netmon.packets": {"0": 150, "1": 105}},
            "numInputRows": 40,
            "inputRowsPerSecond": 40.0,
            "processedRowsPerSecond": 50.0,
            "metrics": {
                "avgOffsetsBehindLatest": "17.5",
                "maxOffsetsBehindLatest": "30",
                "minOffsetsBehindLatest": "5",
            },
        }
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    "observedMetrics": {},
}
#: What the shared batch function measured of batch 12: the newest record 0.75 s before the trigger.
FIGURES = BatchFigures(
    packets=40_000,
    newest_ns=1_795_712_400_250_000_000,  # 2026-11-26T17:00:00.25Z
    seconds={"stage1": 0.5, "traffic": 0.05, "topk": 0.1, "distinct": 0.04},
    state={"traffic": 12, "topk": 3_400, "distinct": 250},
)

#: The joins query's batch 7: the handshake query unshed (strategy none) and a PNI link query
#: shedding (x 0.5 / 0.25 applied); 8 state-store rows (one per bucket) holding 300 + 40 tuples.
JOINS: dict[str, Any] = {
    "id": "3f1c2b7e-8a60-4a0e-9d51-6f1f0c2f7a10",
    "runId": "9a6d1d0e-2f4b-4e57-8d8e-0b9a2c1e4f33",
    "name": "joins",
    "timestamp": "2026-11-26T17:00:02.500Z",
    "batchId": 7,
    "batchDuration": 1800,
    "numInputRows": 60,
    "inputRowsPerSecond": 30.0,
    "processedRowsPerSecond": 33.3,
    "durationMs": {"addBatch": 1500, "getBatch": 0, "latestOffset": 3, "triggerExecution": 1800},
    "eventTime": {},
    "stateOperators": [
        {
            "operatorName": "transformWithStateInPandasExec",
            "numRowsTotal": 8,
            "numRowsUpdated": 8,
            "memoryUsedBytes": 20480,
            "numRowsDroppedByWatermark": 0,
        }
    ],
    "sources": [
        {
            "description": "KafkaV2[Subscribe[netmon.packets]]",
            "startOffset": {"netmon.packets": {"0": 90, "1": 70}},
            "endOffset": {"netmon.packets": {"0": 120, "1": 100}},
            "latestOffset": {"netmon.packets": {"0": 120, "1": 100}},
            "numInputRows": 60,
        }
    ],
    "sink": {"description": "FileSink[/data/results/joins]", "numOutputRows": 600},
    "observedMetrics": {
        "join.handshake": {
            "n_left": 50,
            "n_right": 45,
            "state_left": 280,
            "state_right": 20,
            "x_left": 1.0,
            "x_right": 1.0,
            "min_ts_ns": 1_795_712_400_000_000_000,
            "max_ts_ns": 1_795_712_401_000_000_000,  # 17:00:01Z
        },
        "join.link": {
            "n_left": 10,
            "n_right": 12,
            "state_left": 30,
            "state_right": 10,
            "x_left": 0.5,
            "x_right": 0.25,
            "min_ts_ns": 1_795_712_400_100_000_000,
            "max_ts_ns": 1_795_712_401_500_000_000,  # 17:00:01.5Z: the newest
        },
    },
}
LINK = JoinQuery(name="link", query="link", left="iface=a", right="iface=b", strategy="pni")


def config(tmp_path: Path, **pipeline: Any) -> Config:
    return Config().replace(
        paths={"data_dir": tmp_path / "data"},
        pipeline=pipeline,
        queries={"join": (JoinQuery(name="handshake", strategy="none"), LINK)},
    )


class Figures:
    """A shared batch function's figures (``SharedBatch.figures``)."""

    def __init__(self, **by_batch: BatchFigures) -> None:
        self.by_batch = {int(k.removeprefix("b")): v for k, v in by_batch.items()}

    def figures(self, batch_id: int) -> BatchFigures | None:
        return self.by_batch.get(batch_id)


def listener(tmp_path: Path, cfg: Config | None = None, **figures: BatchFigures) -> SysListener:
    cfg = cfg or config(tmp_path)
    out = SysListener(tmp_path / "data" / "results" / "sys", Knobs.of(cfg))
    out.follow("packets", Figures(**figures))
    out.follow("joins")
    return out


def _event(body: dict[str, Any] | str) -> SimpleNamespace:
    """A progress event as the listener receives it (Spark's JSON of the progress)."""
    text = body if isinstance(body, str) else json.dumps(body)
    return SimpleNamespace(progress=SimpleNamespace(json=text))


def committed(results: Path) -> list[dict[str, Any]]:
    table = read_results(results)
    assert table is not None and table.schema == SYS_SCHEMA
    return sorted(table.to_pylist(), key=lambda r: (r["query"], r["batch_id"]))


EXPECTED_PACKETS = {
    "query": "packets",
    "batch_id": 12,
    "batch_time": T,
    "max_event_time": dt.datetime(2026, 11, 26, 17, 0, 0, 250_000, tzinfo=dt.UTC),
    "lag_s": 0.75,
    "lag_messages": 35,  # (150 - 120) + (105 - 100)
    "backlog_s": 0.7,  # 35 messages at 50 processed per second
    "input_messages": 40,
    "packets": 40_000,
    "input_messages_per_s": 40.0,
    "processed_messages_per_s": 50.0,
    "packets_per_s": 40_000.0,  # 40,000 packets over the 1 s in which 40 messages arrived
    "batch_ms": 850,
    "batch_utilisation": 0.85,  # of the 1 s trigger
    "stage1_s": 0.5,
    "traffic_s": 0.05,
    "topk_s": 0.1,
    "distinct_s": 0.04,
    "features_s": None,  # the features kind did not run in this batch (not in FIGURES.seconds)
    "joins_s": None,
    "state_rows": None,  # no state operator: the batch kinds keep their state in their own files
    "state_bytes": None,
    "join_state_rows": None,
    "trigger_s": 1.0,
    "watermark_s": 5.0,
    "max_batch_messages": 600,  # [pipeline] max_batch_messages
    "shed_x_left": None,
    "shed_x_right": None,
    "shed_fractions": None,
    "sample_keep": 1.0,  # no drop box: every top-k query exact
    "sample_fractions": None,
    "intake": 1.0,  # no intake drop box: every record decoded
    "sampled": 0,
    "traffic_state_rows": 12,  # the state each kind holds in its own files, as the batch said
    "topk_state_rows": 3_400,
    "distinct_state_rows": 250,
}
EXPECTED_JOINS = {
    "query": "joins",
    "batch_id": 7,
    "batch_time": T + dt.timedelta(seconds=1.5),
    "max_event_time": dt.datetime(2026, 11, 26, 17, 0, 1, 500_000, tzinfo=dt.UTC),
    "lag_s": 1.0,
    "lag_messages": 0,
    "backlog_s": 0.0,
    "input_messages": 60,
    "packets": None,  # the joins query keeps only its sides' packets: it counts none
    "input_messages_per_s": 30.0,
    "processed_messages_per_s": 33.3,
    "packets_per_s": None,
    "batch_ms": 1800,
    "batch_utilisation": 1.8,
    "stage1_s": None,
    "traffic_s": None,
    "topk_s": None,
    "distinct_s": None,
    "features_s": None,
    "joins_s": None,
    "state_rows": 8,
    "state_bytes": 20480,
    "join_state_rows": 340,  # 280 + 20 + 30 + 10
    "trigger_s": 1.0,
    "watermark_s": 5.0,
    "max_batch_messages": 0,  # no [spark] max_offsets_per_trigger: the joins query reads all
    "shed_x_left": 0.5,  # the smallest over the join queries (handshake is unshed: 1)
    "shed_x_right": 0.25,
    "shed_fractions": '{"handshake":[1.0,1.0],"link":[0.5,0.25]}',
    "sample_keep": None,  # the joins query has no drop box (PNI sheds it)
    "sample_fractions": None,
    "intake": None,
    "sampled": None,
    "traffic_state_rows": None,
    "topk_state_rows": None,
    "distinct_state_rows": None,
}


def test_one_row_per_batch_of_each_query_committed_under_its_batch_id(tmp_path: Path) -> None:
    sys = listener(tmp_path, b12=FIGURES)
    results = sys.results
    sys.onQueryProgress(_event(PACKETS))
    sys.onQueryProgress(_event(JOINS))
    assert committed(results) == [EXPECTED_JOINS, EXPECTED_PACKETS]
    # One sink per query, each batch under the query's own batch id.
    assert [f.relative_to(results).as_posix() for f in result_files(results)] == [
        "joins/batch-000007/part-00000.parquet",
        "packets/batch-000012/part-00000.parquet",
    ]
    assert sorted(p.name for p in (results / "packets" / COMMITS).iterdir()) == ["12.json"]
    assert (sys.commits, sys.rows, sys.last_batch_id, sys.malformed, sys.idle) == (2, 2, 7, 0, 0)


def test_the_same_progress_twice_is_one_commit_and_a_new_listener_rewrites_it(tmp_path: Path) -> None:
    sys = listener(tmp_path, b12=FIGURES)
    for _ in range(2):
        sys.onQueryProgress(_event(PACKETS))
    assert sys.commits == 1
    assert committed(sys.results) == [EXPECTED_PACKETS]
    # A restarted driver handles batch 12 again (Spark ran it again): the commit is replaced whole.
    again = listener(tmp_path, b12=BatchFigures(packets=39_000, newest_ns=FIGURES.newest_ns))
    again.onQueryProgress(_event(PACKETS))
    [row] = committed(sys.results)
    assert row["packets"] == 39_000 and row["stage1_s"] is None
    assert sorted(p.name for p in (sys.results / "packets" / COMMITS).iterdir()) == ["12.json"]
    # The next batch: its own commit.
    later = copy.deepcopy(PACKETS) | {"batchId": 13, "timestamp": "2026-11-26T17:00:02.000Z"}
    assert again.handle(later) is not None
    assert [r["batch_id"] for r in committed(sys.results)] == [12, 13]


def test_idle_triggers_are_skipped(tmp_path: Path) -> None:
    """An idle trigger reports the id of the batch to come and no addBatch: nothing committed."""
    sys = listener(tmp_path, b12=FIGURES)
    idle = copy.deepcopy(PACKETS) | {
        "numInputRows": 0,
        "durationMs": {"latestOffset": 2, "triggerExecution": 2},
    }
    sys.onQueryProgress(_event(idle))
    assert (sys.idle, sys.commits) == (1, 0)
    assert read_results(sys.results) is None
    sys.onQueryProgress(_event(PACKETS))  # the batch itself, with the same id, later
    assert committed(sys.results) == [EXPECTED_PACKETS]
    # A batch that ran without input (a no-data batch, to move the watermark) is a batch: kept.
    empty = copy.deepcopy(PACKETS) | {"batchId": 13, "numInputRows": 0, "inputRowsPerSecond": 0.0}
    row = sys.handle(empty)
    assert row is not None and row["packets"] is None and row["input_messages"] == 0


def test_a_first_batch_has_no_input_rate(tmp_path: Path) -> None:
    """Spark reports 0 messages/s for a query's first batch (no trigger before): no packet rate."""
    first = copy.deepcopy(PACKETS) | {"batchId": 0, "inputRowsPerSecond": 0.0}
    row = sys_row(first, Knobs.of(config(tmp_path)), FIGURES)
    assert row is not None and row["input_messages_per_s"] == 0.0 and row["packets_per_s"] is None
    quiet = first | {"numInputRows": 0}
    row = sys_row(quiet, Knobs.of(config(tmp_path)), BatchFigures(packets=0, newest_ns=None))
    assert row is not None and row["packets_per_s"] == 0.0


def test_other_queries_are_ignored(tmp_path: Path) -> None:
    sys = listener(tmp_path)
    other = copy.deepcopy(PACKETS) | {"name": "bench-topk"}
    assert sys.handle(other) is None
    assert (sys.commits, sys.malformed, sys.idle) == (0, 0, 0)
    assert read_results(sys.results) is None


MALFORMED: list[Any] = [
    "{",
    "[1, 2]",
    json.dumps({k: v for k, v in PACKETS.items() if k != "timestamp"}),
    json.dumps({k: v for k, v in PACKETS.items() if k != "durationMs"}),
    json.dumps(PACKETS | {"batchId": "twelve"}),
    json.dumps(PACKETS | {"timestamp": "yesterday"}),
    json.dumps(PACKETS | {"numInputRows": "many"}),
    json.dumps(PACKETS | {"durationMs": [700]}),
    json.dumps(PACKETS | {"stateOperators": {"numRowsTotal": 1}}),
    json.dumps(PACKETS | {"inputRowsPerSecond": {"rate": 1}}),
    json.dumps(JOINS | {"observedMetrics": {"join.link": {"state_left": "lots"}}}),
    json.dumps(JOINS | {"observedMetrics": {"join.link": 3}}),
    json.dumps(PACKETS | {"numInputRows": 2**64}),  # beyond the column's int64
]


def test_malformed_progress_is_skipped_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sys = listener(tmp_path, b12=FIGURES)
    with caplog.at_level(logging.DEBUG, logger="pipeline.sys_stats"):
        for text in MALFORMED:
            sys.onQueryProgress(_event(text))  # never raises
    assert sys.malformed == len(MALFORMED) and sys.commits == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "malformed progress" in warnings[0].getMessage()
    assert read_results(sys.results) is None
    # The listener goes on: the next good progress is committed.
    sys.onQueryProgress(_event(PACKETS))
    assert committed(sys.results) == [EXPECTED_PACKETS]


def test_partial_progress_gives_nulls_not_errors(tmp_path: Path) -> None:
    """What a row needs is the query, batch id, trigger time and durations; the rest may be absent."""
    bare = {k: PACKETS[k] for k in ("name", "batchId", "timestamp")} | {"durationMs": {"addBatch": 1}}
    row = sys_row(bare, Knobs.of(config(tmp_path)))
    assert row is not None
    assert row["batch_ms"] is None and row["lag_messages"] is None and row["max_event_time"] is None
    assert row["lag_s"] is None and row["packets_per_s"] is None and row["backlog_s"] is None


def test_an_event_time_beyond_year_9999_is_unknown_not_an_error(tmp_path: Path) -> None:
    far = copy.deepcopy(JOINS)
    for m in far["observedMetrics"].values():
        m["max_ts_ns"] = 10**25  # not an int64 (Spark cannot send it), but JSON can
    row = sys_row(far, Knobs.of(config(tmp_path)))
    assert row is not None and row["max_event_time"] is None and row["lag_s"] is None


def _offsets(rng: random.Random, partitions: int) -> tuple[dict[str, dict[str, int]], ...]:
    """(end, latest) offsets of two topics, latest at or beyond end."""
    end: dict[str, dict[str, int]] = {}
    latest: dict[str, dict[str, int]] = {}
    for topic in ("a", "b"):
        end[topic], latest[topic] = {}, {}
        for p in range(partitions):
            e = rng.randrange(0, 10**6)
            end[topic][str(p)] = e
            latest[topic][str(p)] = e + rng.choice([0, 0, 1, rng.randrange(0, 5000)])
    return end, latest


@pytest.mark.parametrize("seed", range(20))
def test_kafka_lag_is_the_hand_sum_over_partitions(seed: int) -> None:
    rng = random.Random(seed)
    sources, expected = [], 0
    for _ in range(rng.randrange(1, 3)):
        end, latest = _offsets(rng, rng.randrange(1, 6))
        for topic in end:
            for p in end[topic]:
                expected += latest[topic][p] - end[topic][p]
        # Python's recentProgress holds offsets as JSON text, the listener's JSON as objects.
        as_text = rng.random() < 0.5
        sources.append(
            {
                "endOffset": json.dumps(end) if as_text else end,
                "latestOffset": json.dumps(latest) if rng.random() < 0.5 else latest,
            }
        )
    assert kafka_lag(sources) == expected
    progress = copy.deepcopy(PACKETS) | {"sources": sources}
    row = sys_row(progress, Knobs.of(Config()))
    assert row is not None and row["lag_messages"] == expected


def test_kafka_lag_counts_no_negative_partition_and_no_unknown_one() -> None:
    end = {"t": {"0": 10, "1": 50, "2": 5}}
    latest = {"t": {"0": 12, "1": 40, "3": 99}}  # 1 went back (topic recreated), 2 and 3 in one only
    assert kafka_lag([{"endOffset": end, "latestOffset": latest}]) == 2
    assert kafka_lag([{"endOffset": end}, {"endOffset": "not json", "latestOffset": latest}]) is None
    assert kafka_lag([{"endOffset": {"0": 10}, "latestOffset": {"0": 12}}]) is None  # not Kafka's form
    assert kafka_lag([]) is None


def test_fractions_without_input_come_from_the_control_file_then_the_static_ones(tmp_path: Path) -> None:
    cfg = config(tmp_path).replace(shedding={"x_left": 0.9, "x_right": 0.8})
    quiet = copy.deepcopy(JOINS)
    del quiet["observedMetrics"]["join.link"]  # no link input in this batch
    row = sys_row(quiet, Knobs.of(cfg))
    assert row is not None and json.loads(row["shed_fractions"]) == {
        "handshake": [1.0, 1.0],
        "link": [0.9, 0.8],
    }
    from pipeline.joins import control_file

    write_control(control_file(cfg), {"link": {"x_left": 0.3, "x_right": 0.6}}, batch_id=6)
    row = sys_row(quiet, Knobs.of(cfg))
    assert row is not None and (row["shed_x_left"], row["shed_x_right"]) == (0.3, 0.6)
    assert row["join_state_rows"] == 300 and row["lag_s"] == 1.5  # the handshake's newest: 17:00:01


def test_knobs_in_force_per_query(tmp_path: Path) -> None:
    capped = Knobs.of(config(tmp_path, trigger_s=2.0, watermark_s=3.0, max_batch_messages=250))
    row = sys_row(PACKETS, capped, FIGURES)
    assert row is not None
    assert (row["trigger_s"], row["watermark_s"], row["max_batch_messages"]) == (2.0, 3.0, 250)
    assert row["batch_utilisation"] == pytest.approx(0.425)  # 850 ms of a 2 s trigger
    spark_cap = Knobs.of(config(tmp_path).replace(spark={"max_offsets_per_trigger": 100}))
    assert spark_cap.batch_cap("packets") == spark_cap.batch_cap("joins") == 100


def test_the_sys_kind_follows_every_kind_that_runs_a_query() -> None:
    from netmon.config import RESULT_KINDS
    from pipeline.job import KINDS, ResultKind
    from pipeline.sys_stats import start_sys

    with_query = [k.name for k in KINDS.values() if k.listener is None]
    assert KINDS["sys"].follows == tuple(with_query) == ("traffic", "topk", "distinct", "features", "joins")
    assert KINDS["shedding"].follows == ("joins",)
    assert "sys" in RESULT_KINDS and "sys" in Config().pipeline.kinds  # run (and republished) by default
    with pytest.raises(ValueError, match="follows kinds"):
        ResultKind("x", listener=start_sys)
    with pytest.raises(ValueError, match="follows kinds"):
        ResultKind("y", stream=lambda spark, cfg: {}, follows=("joins",))


def test_a_batch_behind_the_intake_box_says_its_fraction_and_what_it_skipped(tmp_path: Path) -> None:
    figures = BatchFigures(
        packets=40_000, newest_ns=FIGURES.newest_ns, keep={"top-pairs": 0.5, INTAKE: 0.25}, sampled=30_000
    )
    row = sys_row(copy.deepcopy(PACKETS), Knobs.of(config(tmp_path)), figures)
    assert row is not None
    # the rate is the input's: every record read, the skipped ones included
    assert (row["packets"], row["sampled"], row["intake"]) == (40_000, 30_000, 0.25)
    assert row["sample_keep"] == 0.25
    assert json.loads(row["sample_fractions"]) == {"(intake)": 0.25, "top-pairs": 0.5}
