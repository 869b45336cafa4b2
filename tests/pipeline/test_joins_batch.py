"""The joins kind on the shared batch (``pipeline.joins_batch``), without Spark: stage-1 partials
of a real capture cut into micro-batches, against the offline join, across restarts and reruns."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analytics.join_queries import HandshakeQuery, LinkQuery, run_join
from ingest import read_records
from netmon.config import JoinQuery, SheddingConfig
from netmon.results import read_results
from pipeline.joins import join_specs
from pipeline.joins_batch import SharedJoins
from pipeline.partials import decoded_rows, partials_of
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"
HANDSHAKE = JoinQuery(name="handshake", query="handshake", window_s=3.0, strategy="none")
LINK = JoinQuery(
    name="web", query="link", left="dst_port=443", right="dst_port=80", window_s=2.0, strategy="none"
)
PNI = dataclasses.replace(LINK, name="web-pni", strategy="pni")
QUERIES = (HANDSHAKE, LINK, PNI)
SHED = SheddingConfig(x_left=0.5, x_right=0.3, seed=7)


def _records() -> pa.Table:
    return decoded_rows(pa.Table.from_batches(list(read_records(SAMPLE))))


def _batches(n: int) -> list[pa.Table]:
    """The capture in ``n`` micro-batches cut by time (as Kafka offsets of one partition)."""
    rows = _records()
    cuts = [round(i * rows.num_rows / n) for i in range(n + 1)]
    return [rows.slice(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]


def _kind(tmp: Path, snapshot_every: int | None = None) -> SharedJoins:
    kind = SharedJoins(
        QUERIES, join_specs(QUERIES, SHED, lateness_s=5.0), tmp / "results", tmp / "checkpoint", control=None
    )
    if snapshot_every is not None:
        kind.snapshot_every = snapshot_every
    return kind


def _run(kind: SharedJoins, batches: list[pa.Table], first_id: int = 0) -> None:
    for i, batch in enumerate(batches, start=first_id):
        partials = partials_of(batch, kind.specs)
        max_us = pc.max(pc.cast(batch["ts"], pa.int64())).as_py()
        kind.apply(partials, max_us, i)


def _rows(results: Path, query: str, row: str = "match") -> Counter[tuple[Any, ...]]:
    table = read_results(results)
    assert table is not None
    mine = table.filter(pc.and_(pc.equal(table["query"], query), pc.equal(table["row"], row)))
    return Counter(
        zip(
            mine["key"].to_pylist(),
            pc.cast(mine["left_ts"], pa.int64()).to_pylist(),
            pc.cast(mine["right_ts"], pa.int64()).to_pylist(),
            mine["left_src_ip"].to_pylist(),
            mine["right_dst_port"].to_pylist(),
            strict=True,
        )
    )


def _offline(query: HandshakeQuery | LinkQuery) -> Counter[tuple[str, int, int]]:
    out = run_join(query, pa.Table.from_batches(list(read_records(SAMPLE)))).results
    left = out["left_ts"].astype("int64") // 1000
    right = out["right_ts"].astype("int64") // 1000
    return Counter(zip(out["key"], left.tolist(), right.tolist(), strict=True))


def _triples(rows: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for key, n in rows.items():
        out[key[:3]] += n
    return out


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run over the capture in 12 batches; its directory."""
    tmp = tmp_path_factory.mktemp("straight")
    _run(_kind(tmp), _batches(12))
    return tmp


def test_unshed_rows_equal_the_offline_join_whatever_the_batches(straight: Path, tmp_path: Path) -> None:
    for q, offline in (
        (HANDSHAKE, HandshakeQuery(3.0)),
        (LINK, LinkQuery("dst_port=443", "dst_port=80", 2.0)),
    ):
        got = _rows(straight / "results", q.name)
        assert sum(got.values()) > 100, q.name
        assert _triples(got) == _offline(offline), q.name
    # other cuts, same rows
    _run(_kind(tmp_path), _batches(3))
    for q in QUERIES[:2]:
        assert _rows(tmp_path / "results", q.name) == _rows(straight / "results", q.name)


@pytest.mark.parametrize("every", [1, 2, 3, 10])
def test_a_restart_and_a_rerun_give_the_rows_of_a_straight_run(
    straight: Path, tmp_path: Path, every: int
) -> None:
    """A new process (nothing held in memory) goes on from the saved state — a snapshot and the
    batches since, replayed — and a batch run again (same id, same input) after a crash rewrites
    the same rows, PNI's random choices included; with a snapshot every ``every`` batches, so the
    restarts fall on a snapshot, between snapshots, and before the first."""
    batches = _batches(12)
    _run(_kind(tmp_path, every), batches[:5])
    _run(_kind(tmp_path, every), batches[4:7], first_id=4)  # restart; batch 4 runs again
    kind = _kind(tmp_path, every)
    _run(kind, batches[7:], first_id=7)
    _run(kind, batches[11:], first_id=11)  # the last batch again, in the same process
    _run(_kind(tmp_path, every), batches[11:], first_id=11)  # and once more after a restart
    for q in QUERIES:
        for row in ("match", "unmatched"):
            got, expected = _rows(tmp_path / "results", q.name, row), _rows(straight / "results", q.name, row)
            assert got == expected, (q, row)
    shed, full = _rows(straight / "results", PNI.name), _rows(straight / "results", LINK.name)
    assert 0 < sum(shed.values()) < sum(full.values()) and not shed - full
    # two snapshots at most are kept on disk, and the deltas since the older one
    assert len(list((tmp_path / "checkpoint").glob("state-*.arrow"))) <= 2
    assert len(list((tmp_path / "checkpoint").glob("delta-*.arrow"))) < every


def test_unanswered_syns_are_reported_and_the_statistics_kept(straight: Path) -> None:
    answered = {k[:2] for k in _rows(straight / "results", HANDSHAKE.name)}
    unmatched = _rows(straight / "results", HANDSHAKE.name, "unmatched")
    assert unmatched and not {k[:2] for k in unmatched} & answered


def test_statistics_per_batch_feed_the_controller(tmp_path: Path) -> None:
    kind = _kind(tmp_path)
    _run(kind, _batches(4))
    assert list(kind.observed) == [0, 1, 2, 3]
    total = Counter[str]()
    for observed in kind.observed.values():
        for name, m in observed.items():
            if m["n_left"] + m["n_right"]:
                assert m["x_left"] == (SHED.x_left if name == "join.web-pni" else 1.0)
                total[name] += m["results"]
    # every query's held windows, input or not (the sys rows' join_state_rows)
    last = kind.observed[3]
    assert set(last) == {f"join.{q.name}" for q in QUERIES}
    assert sum(m["state_left"] + m["state_right"] for m in last.values()) > 0
    got = read_results(tmp_path / "results")
    assert got is not None
    for q in QUERIES:
        assert total[f"join.{q.name}"] == sum(_rows(tmp_path / "results", q.name).values())


def test_every_syn_is_answered_or_reported_once_when_the_stream_closes(tmp_path: Path) -> None:
    """The batch's event time moves every query's clock: after the capture, a batch that carries
    only a watermark far ahead (``netmon replay`` closing its windows) expires every SYN still
    held. Each SYN of the capture is then exactly once either answered (a match row) or reported
    unanswered; the oracle is the capture's SYNs, staged independently."""
    from pipeline.joins import stage_rows

    kind = _kind(tmp_path)
    batches = _batches(6)
    _run(kind, batches)
    end = pc.max(pc.cast(batches[-1]["ts"], pa.int64())).as_py()
    nothing = partials_of(_records().slice(0, 0), kind.specs)
    kind.apply(nothing, end + 3_600_000_000, len(batches))
    syns = stage_rows(_records(), (HANDSHAKE,))
    syns = syns.filter(syns["is_left"])
    expected = Counter(zip(syns["key"].to_pylist(), pc.cast(syns["ts"], pa.int64()).to_pylist(), strict=True))
    table = read_results(tmp_path / "results")
    assert table is not None
    mine = table.filter(pc.equal(table["query"], HANDSHAKE.name))
    answered = set(
        zip(
            mine.filter(pc.equal(mine["row"], "match"))["key"].to_pylist(),
            pc.cast(mine.filter(pc.equal(mine["row"], "match"))["left_ts"], pa.int64()).to_pylist(),
            strict=True,
        )
    )
    unanswered = mine.filter(pc.equal(mine["row"], "unmatched"))
    times = pc.cast(unanswered["left_ts"], pa.int64()).to_pylist()
    reported = Counter(zip(unanswered["key"].to_pylist(), times, strict=True))
    assert reported and answered
    assert not set(reported) & answered
    # each SYN once: answered ones (a SYN may be answered more than once) or reported
    assert reported + Counter({k: n for k, n in expected.items() if k in answered}) == expected
    # the last batch held no records, yet reported SYNs: the clock moved without tuples
    assert (tmp_path / "results" / f"batch-{len(batches):06d}" / "part-00000.parquet").exists()


def _skewed_batches(per_message: int = 500) -> list[tuple[pa.Table, int]]:
    """The capture over two Kafka partitions (messages dealt alternately), read unevenly: each batch
    takes three messages of partition 0 and one of partition 1, so partition 0 runs ahead in event
    time, as Spark's offset limit per trigger can split a batch. With each batch its event time as
    ``pipeline.partials.merge_partials`` gives it: the smallest over the partitions in the batch of
    their newest record."""
    rows = _records()
    messages = [rows.slice(i, per_message) for i in range(0, rows.num_rows, per_message)]
    parts: list[list[pa.Table]] = [messages[0::2], messages[1::2]]
    out = []
    while parts[0] or parts[1]:
        taken = [parts[0][:3], parts[1][:1]]
        parts = [parts[0][3:], parts[1][1:]]
        newest = [pc.max(pc.cast(t["ts"], pa.int64())).as_py() for msgs in taken if msgs for t in msgs[-1:]]
        out.append((pa.concat_tables([m for msgs in taken for m in msgs]), min(newest)))
    return out


def test_a_partition_ahead_of_another_loses_no_pair(straight: Path, tmp_path: Path) -> None:
    """Tuples later than the batch's event time wait for it: the join's clock never passes what
    the slower partition has still to bring, so the rows equal a run over the capture in order."""
    batches = _skewed_batches()
    spread = max(pc.max(pc.cast(b["ts"], pa.int64())).as_py() - max_us for b, max_us in batches)
    assert spread > (HANDSHAKE.window_s + 5.0) * 1e6  # partition 0 runs further ahead than T + lateness
    kind = _kind(tmp_path)
    for i, (batch, max_us) in enumerate(batches):
        kind.apply(partials_of(batch, kind.specs), max_us, i)
    for q in QUERIES[:2]:
        assert _rows(tmp_path / "results", q.name) == _rows(straight / "results", q.name), q.name
    # a restart in the middle keeps the tuples that wait (a snapshot every batch: their file)
    again = tmp_path / "again"
    first = _kind(again, snapshot_every=1)
    for i, (batch, max_us) in enumerate(batches[: len(batches) // 2]):
        first.apply(partials_of(batch, first.specs), max_us, i)
    assert list(again.glob("checkpoint/waiting-*.arrow")), "no tuple waited at the restart point"
    restarted = _kind(again)
    for i, (batch, max_us) in enumerate(batches[len(batches) // 2 :], start=len(batches) // 2):
        restarted.apply(partials_of(batch, restarted.specs), max_us, i)
    for q in QUERIES[:2]:
        assert _rows(again / "results", q.name) == _rows(straight / "results", q.name), q.name


def test_rows_a_sample_could_change_carry_its_fraction_and_exact_rows_are_right(tmp_path: Path) -> None:
    """Under the intake drop box the joins read a sample: a SYN whose SYN-ACK was skipped is
    reported unanswered, a pair whose side was skipped is missing. Every row marked exact
    (``keep`` 1) must then be one of the offline join's over the whole capture (the oracle), the
    rows it got wrong must all be marked, and a restart marks the same rows."""
    import numpy as np

    from pipeline.partials import INTAKE

    batches = _batches(8)
    rng = np.random.default_rng(3)
    sampled = {3: 0.5, 4: 0.25}
    cut = [
        b.filter(pa.array(rng.random(b.num_rows) < sampled[i])) if i in sampled else b
        for i, b in enumerate(batches)
    ]
    kind = _kind(tmp_path)
    for i, batch in enumerate(cut):
        if i == 5:
            kind = _kind(tmp_path)  # a restart: the sampled batches are known from the saved state
        kind.sample({INTAKE: sampled[i]} if i in sampled else {})
        kind.apply(partials_of(batch, kind.specs), pc.max(pc.cast(batches[i]["ts"], pa.int64())).as_py(), i)
    table = read_results(tmp_path / "results")
    assert table is not None and "keep" in table.column_names
    mine = table.filter(pc.equal(table["query"], HANDSHAKE.name)).to_pylist()
    assert {r["keep"] for r in mine} == {1.0, 0.5, 0.25}
    offline = run_join(HandshakeQuery(3.0), pa.Table.from_batches(list(read_records(SAMPLE)))).results
    matched = set(zip(offline["key"], (offline["left_ts"].astype("int64") // 1000).tolist(), strict=True))
    micros = [pc.cast(pa.scalar(r["left_ts"]), pa.int64()).as_py() for r in mine]
    wrong = 0
    for r, left_us in zip(mine, micros, strict=True):
        right = (r["key"], left_us) in matched
        is_right = right if r["row"] == "match" else not right
        assert is_right or r["keep"] < 1, r  # a row the sample made wrong is never marked exact
        wrong += not is_right
    assert wrong > 0  # the sample did make rows wrong: the marks were needed
    # rows whose tuples, and the answer an unmatched SYN lacks (within the window, 3 s, and the
    # lateness, 5 s), all precede the first sampled batch by more than the lateness are exact
    first_sampled = pc.min(pc.cast(batches[3]["ts"], pa.int64())).as_py()
    before = [r for r, t in zip(mine, micros, strict=True) if t + 13_000_000 < first_sampled]
    assert before and all(r["keep"] == 1.0 for r in before)
