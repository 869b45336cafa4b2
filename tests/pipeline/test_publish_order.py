"""Result rows leave for Kafka in event-time order, whatever the order of a batch's files; a file is
marked published once every row is acknowledged, and the mark is durable."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from netmon.config import Config
from netmon.results import COMMITS, checkpoint_dir, message_rows, result_topic, results_dir
from pipeline.publish import _FILE_INDEX, ResultPublisher, _in_time_order


def _t(s: int) -> dt.datetime:
    return dt.datetime(2024, 5, 1, 12, 0, s, tzinfo=dt.UTC)


def test_rows_of_several_files_are_sorted_by_their_time_column_stably() -> None:
    # two partitions' files of one micro-batch, each in its own order; a late partition's row first
    a = pa.table({"query": ["hs", "hs", "hs"], "left_ts": [_t(9), _t(2), _t(5)], "n": [1, 2, 3]})
    b = pa.table({"query": ["hs", "hs"], "left_ts": [_t(5), None], "n": [4, 5]})
    rows = _in_time_order([a, pa.table({"query": pa.array([], pa.string())}), b])
    assert rows.column("n").to_pylist() == [2, 3, 4, 1, 5]  # ties keep file order; no time goes last
    assert rows.column(_FILE_INDEX).to_pylist() == [0, 0, 2, 0, 2]  # each row's file


def test_window_end_wins_over_other_time_columns_and_rows_without_time_keep_their_order() -> None:
    t = pa.table({"window_start": [_t(0), _t(5)], "window_end": [_t(9), _t(3)], "n": [1, 2]})
    assert _in_time_order([t]).column("n").to_pylist() == [2, 1]
    plain = pa.table({"n": [3, 1, 2]})
    assert _in_time_order([plain]).column("n").to_pylist() == [3, 1, 2]
    assert _in_time_order([]).num_rows == 0


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_a_stable_sort_whether_or_not_the_files_are_already_in_order(seed: int) -> None:
    import random

    rng = random.Random(seed)
    tables = []
    for f in range(rng.randint(1, 3)):
        times = [rng.randint(0, 5) for _ in range(rng.randint(0, 8))]
        if rng.random() < 0.5:
            times.sort()  # the usual case: one file per batch, in order
        none = rng.random() < 0.2 and times
        stamps = [None if none and i == 0 else _t(x) for i, x in enumerate(times)]
        tables.append(
            pa.table(
                {
                    "window_end": pa.array(stamps, pa.timestamp("us", tz="UTC")),
                    "n": [(f, i) for i in range(len(times))],
                }
            )
        )
    rows = [(f, r) for f, t in enumerate(tables) for r in t.to_pylist()]
    by_time = sorted(rows, key=lambda fr: (fr[1]["window_end"] is None, fr[1]["window_end"] or _t(0)))
    got = _in_time_order(tables)
    if not rows:
        assert got.num_rows == 0
        return
    assert got.column("n").to_pylist() == [r["n"] for _, r in by_time]
    assert got.column(_FILE_INDEX).to_pylist() == [f for f, _ in by_time]


# --- what is marked published, and how (real broker) ----------------------------------------------


def _commit(results: Path, batch_id: int, table: pa.Table) -> None:
    """A batch as a per-batch kind commits it: ``batch-<id>/part-00000.parquet`` named in ``_commits/``."""
    target = results / f"batch-{batch_id:06d}"
    target.mkdir(parents=True)
    pq.write_table(table, target / "part-00000.parquet")
    (results / COMMITS).mkdir(exist_ok=True)
    (results / COMMITS / f"{batch_id}.json").write_text(
        json.dumps({"batch": batch_id, "files": [f"{target.name}/part-00000.parquet"]})
    )


def _rows(batch: int, n: int) -> pa.Table:
    return pa.table(
        {
            "query": ["q"] * n,
            "window_end": [_t(batch * 10 + i) for i in range(n)],
            "packets": [batch * 100 + i for i in range(n)],
        }
    )


def _published(bootstrap: str, topic: str) -> list[dict]:
    from tests.ingest.kafka_util import consume_all

    messages = consume_all(bootstrap, topic)
    for m in messages:  # version 2: JSON Lines, several rows per message, counted in a header
        headers = dict(m.headers)
        assert headers["netmon.result-version"] == b"2"
        assert int(headers["netmon.rows"]) == len(message_rows(m.value, b"2"))
    return [json.loads(text) for m in messages for text in message_rows(m.value, b"2")]


@pytest.fixture
def publish_cfg(netmon_config: Config, kafka_bootstrap: str, tmp_path: Path) -> Config:
    tag = uuid.uuid4().hex[:8]
    return netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={"bootstrap_servers": kafka_bootstrap, "results_topic_prefix": f"test.publish.{tag}."},
    )


@pytest.mark.kafka
def test_a_file_is_marked_published_only_when_every_row_is_acknowledged(publish_cfg: Config) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    cfg, bootstrap = publish_cfg, publish_cfg.kafka.bootstrap
    topic = result_topic(cfg, "traffic")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        # A topic that refuses every row: each record batch is larger than max.message.bytes.
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": "64"})])
        results = results_dir(cfg, "traffic")
        _commit(results, 0, _rows(0, 3))
        publisher = ResultPublisher(cfg, ("traffic",))
        try:
            assert publisher.publish() == 0
            assert publisher._done("traffic") == set()  # not marked: retried at the next poll
            # The broker takes rows again: the retry publishes the file, then nothing more.
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "1048588"})]
            )
            assert publisher.publish() == 3
            assert publisher.publish() == 0
            rows = _published(bootstrap, topic)
            assert sorted(r["packets"] for r in rows) == [0, 1, 2]  # exactly once
            # A later batch's file has the same name in its own directory: published too, once.
            _commit(results, 1, _rows(1, 2))
            assert publisher.publish() == 2 and publisher.publish() == 0
        finally:
            publisher.close()
    finally:
        admin.close()
    assert sorted(r["packets"] for r in _published(bootstrap, topic)) == [0, 1, 2, 100, 101]
    assert publisher._done("traffic") == {
        "batch-000000/part-00000.parquet",
        "batch-000001/part-00000.parquet",
    }


def test_the_mark_is_fsynced_before_and_after_the_rename(
    publish_cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def spy_replace(src: object, dst: object) -> None:
        events.append(("replace", str(dst)))
        replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    publisher = ResultPublisher(publish_cfg, ("traffic",))
    publisher._mark("traffic", {"a.parquet"})
    state = checkpoint_dir(publish_cfg, "publish")
    assert events == [
        ("fsync", str(state / "traffic.json.tmp")),
        ("replace", str(state / "traffic.json")),
        ("fsync", str(state)),
    ]
    assert publisher._done("traffic") == {"a.parquet"}
