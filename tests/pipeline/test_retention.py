"""Retention and compaction (``pipeline.retention``): compaction keeps every result row exactly —
after it, at every instant during it, after a crash at any step of it and once a later pass
completed it —; retention deletes exactly the rows of files whose rows are all expired, in both
layouts; files already published are not published again."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import netmon.results
from netmon.config import Config
from netmon.results import (
    COMMITS,
    checkpoint_dir,
    compactions,
    read_results,
    result_files,
    results_dir,
    sink_files,
)
from pipeline import retention
from pipeline.batch_sink import write_table
from pipeline.publish import ResultPublisher
from pipeline.retention import KEEP_NEWEST, Maintainer, maintain

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)
HOUR = 3600
#: commits are written this far apart (seconds of file modification time)
GAP_S = 60
MTIME0 = 1_800_000_000.0
#: a wall clock well after every commit
NOW = MTIME0 + 10**6
TS = pa.timestamp("us", tz="UTC")


def _table(rng: random.Random, start_s: float, span_s: float, n: int, column: str = "window_end") -> pa.Table:
    """``n`` result rows with times in ``[start_s, start_s + span_s]`` after :data:`T0`."""
    times = [T0 + dt.timedelta(microseconds=round((start_s + rng.random() * span_s) * 1e6)) for _ in range(n)]
    return pa.table(
        {
            "query": pa.array([rng.choice(["a", "b"]) for _ in range(n)], pa.string()),
            column: pa.array(times, TS),
            "key": pa.array(
                [None if rng.random() < 0.1 else f"k{rng.randint(0, 9)}" for _ in range(n)], pa.string()
            ),
            "count": pa.array([rng.randint(0, 10**9) for _ in range(n)], pa.int64()),
            "share": pa.array([rng.random() for _ in range(n)], pa.float64()),
        }
    )


def _commit(results: Path, batch: int, table: pa.Table) -> None:
    """Commit ``table`` as batch ``batch`` the way the batch kinds do, ``GAP_S`` after the previous one."""
    write_table(table, results, batch)
    stamp = MTIME0 + batch * GAP_S
    os.utime(results / COMMITS / f"{batch}.json", (stamp, stamp))


def _rows(table: pa.Table | None) -> Counter[tuple[Any, ...]]:
    """The rows as a multiset, whatever their order and the order of the columns."""
    if table is None:
        return Counter()
    return Counter(tuple(sorted(row.items())) for row in table.to_pylist())


def _mark_everything(cfg: Config, kind: str) -> set[str]:
    """Mark every committed file of ``kind`` published, with the republisher's own writer."""
    root = results_dir(cfg, kind)
    keys = {f.relative_to(root).as_posix() for f in result_files(root)}
    ResultPublisher(cfg, (kind,))._mark(kind, keys)
    return keys


def _tree(directory: Path) -> set[str]:
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}


class _Producer:
    """Acknowledges every message (``pipeline.publish`` checks each future) and keeps the values."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, topic: str, value: bytes, **_: Any) -> Any:
        self.values.append(value)
        return SimpleNamespace(succeeded=lambda: True, exception=None)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def cfg(netmon_config: Config, tmp_path: Path) -> Config:
    return netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        retention={"results_days": 0.0, "compact_after_s": 10 * GAP_S},
    )


def _hours_kind(results: Path, seed: int = 0, per_hour: int = 5) -> pa.Table:
    """Hours 0-3 of ``per_hour`` batches each, every batch inside its hour, then hour 4 with twelve
    batches: the last ten are younger than ``compact_after_s`` behind the newest."""
    rng = random.Random(seed)
    tables = []
    for batch in range(4 * per_hour + 12):
        hour = min(batch // per_hour, 4)
        table = _table(rng, hour * HOUR + 1, HOUR - 2, rng.randint(1, 40))
        _commit(results, batch, table)
        tables.append(table)
    return pa.concat_tables(tables)


# -- compaction keeps every row -------------------------------------------------------------------


def test_compaction_keeps_every_row_and_leaves_one_file_per_closed_hour(cfg: Config) -> None:
    results = results_dir(cfg, "traffic")
    original = _hours_kind(results)
    assert _rows(read_results(results)) == _rows(original)
    _mark_everything(cfg, "traffic")
    report = maintain(cfg, ("traffic",), now=NOW)
    assert _rows(read_results(results)) == _rows(original)  # every row, each once
    assert (report.compacted_files, report.compacted_batches, report.errors) == (4, 20, [])
    files = [f.relative_to(results).as_posix() for f in result_files(results)]
    # hours 0-3: one file each; hour 4 is not closed (no old batch is later), its batches stay
    assert files == [f"batch-{b:06d}/part-00000.parquet" for b in range(20, 32)] + [
        f"compacted/20240501T{h}-0000.parquet" for h in (10, 11, 12, 13)
    ]
    assert sorted(int(p.stem) for p in (results / COMMITS).iterdir()) == list(range(20, 32))
    assert not [p for p in results.iterdir() if p.name.startswith("batch-") and int(p.name[6:]) < 20]
    for name, manifest in compactions(results).items():
        table = pq.read_table(results / manifest["files"][0])
        times = table.column("window_end").to_pylist()
        assert times == sorted(times)  # in time order
        assert {t.strftime("%Y%m%dT%H") for t in times} == {name}
        assert manifest["rows"] == table.num_rows
        hour = int(name[-2:]) - 10
        assert manifest["batches"] == [(5 * hour, 5 * hour + 4)]  # its batches, as a range
    # A second pass has nothing to do.
    again = maintain(cfg, ("traffic",), now=NOW)
    assert (again.compacted_files, again.leftovers, again.empty_commits) == (0, 0, 0)
    assert _rows(read_results(results)) == _rows(original)


def test_late_rows_recompact_their_hour_and_young_or_newest_batches_wait(cfg: Config) -> None:
    results = results_dir(cfg, "traffic")
    rng = random.Random(1)
    original = _hours_kind(results)
    maintain(cfg.replace(pipeline={"publish_results": False}), ("traffic",), now=NOW)
    # Batch 32 brings late rows of hour 2 (compacted already); 33-50 close hour 4 and open hour 5.
    late = _table(rng, 2 * HOUR + 10, 100, 7)
    _commit(results, 32, late)
    more = [_table(rng, 4 * HOUR + 3500, 0, 3)] + [_table(rng, 5 * HOUR + 10, 100, 3) for _ in range(17)]
    for batch, table in enumerate(more, start=33):
        _commit(results, batch, table)
    expected = _rows(pa.concat_tables([original, late, *more]))
    plain = cfg.replace(pipeline={"publish_results": False})
    report = maintain(plain, ("traffic",), now=NOW)
    assert _rows(read_results(results)) == expected
    manifests = compactions(results)
    assert manifests["20240501T12"]["generation"] == 1  # hour 2 again, with batch 32
    assert manifests["20240501T12"]["files"] == ["compacted/20240501T12-0001.parquet"]
    assert not (results / "compacted/20240501T12-0000.parquet").exists()
    assert manifests["20240501T12"]["batches"] == [(10, 14), (32, 32)]
    assert "20240501T14" in manifests and report.compacted_files == 2
    # Hour 5's batches are young (< compact_after_s behind the newest) or the newest three.
    newest = max(int(p.stem) for p in (results / COMMITS).iterdir())
    assert newest == 50 and all((results / COMMITS / f"{b}.json").exists() for b in range(51 - 10, 51))


def test_age_counts_from_the_newest_commit_and_from_the_wall_clock(cfg: Config) -> None:
    results = results_dir(cfg, "traffic")
    original = _hours_kind(results)
    plain = cfg.replace(pipeline={"publish_results": False}, retention={"compact_after_s": 40 * GAP_S})
    # 40 gaps behind the newest commit (31): nothing is that old
    assert maintain(plain, ("traffic",), now=NOW).compacted_files == 0
    # a wall clock behind the commits (files copied, a clock set back): 10 gaps before it are
    # batches 0-5, so hour 0 (closed by batch 5) only
    early = cfg.replace(pipeline={"publish_results": False})
    assert maintain(early, ("traffic",), now=MTIME0 + 15 * GAP_S).compacted_batches == 5
    assert sorted(compactions(results)) == ["20240501T10"]
    assert maintain(early, ("traffic",), now=NOW).compacted_batches == 15
    assert _rows(read_results(results)) == _rows(original)
    off = early.replace(retention={"compact": False})
    _commit(results, 32, _table(random.Random(2), 1, 10, 5))
    assert maintain(off, ("traffic",), now=NOW).compacted_files == 0


def test_only_published_batches_are_compacted_and_nothing_is_published_twice(cfg: Config) -> None:
    results = results_dir(cfg, "topk")
    rng = random.Random(3)
    original = _hours_kind(results)
    publisher = ResultPublisher(cfg, ("topk",), producer=_Producer())
    assert publisher.publish() == original.num_rows
    # Committed after the publish: late rows of hour 2 (batch 32), then hour 5 (33-45).
    late = _table(rng, 2 * HOUR + 5, 60, 6)
    _commit(results, 32, late)
    more = [_table(rng, 5 * HOUR + 5, 600, 4) for _ in range(13)]
    for batch, table in enumerate(more, start=33):
        _commit(results, batch, table)
    expected = _rows(pa.concat_tables([original, late, *more]))
    report = maintain(cfg, ("topk",), now=NOW)
    assert _rows(read_results(results)) == expected
    # hours 0-3 (hour 2 without batch 32, not yet published); hour 4 is closed by no published batch
    assert report.compacted_batches == 20 and sorted(compactions(results)) == [
        "20240501T10",
        "20240501T11",
        "20240501T12",
        "20240501T13",
    ]
    assert (results / COMMITS / "32.json").exists()
    assert publisher.publish() == late.num_rows + sum(t.num_rows for t in more)  # only the new rows
    report = maintain(cfg, ("topk",), now=NOW)
    assert report.compacted_files == 2  # hour 2 again, with batch 32; hour 4, closed by hour 5
    assert compactions(results)["20240501T12"]["batches"] == [(10, 14), (32, 32)]
    assert _rows(read_results(results)) == expected
    assert publisher.publish() == 0
    assert ResultPublisher(cfg, ("topk",), producer=_Producer()).publish() == 0


@pytest.mark.parametrize("seed", range(12))
def test_random_batches_keep_every_row(cfg: Config, seed: int) -> None:
    """Batches anywhere in six hours, some across an hour, some empty, some without a time, some
    not yet published, published or not: every row stays, each once."""
    rng = random.Random(seed)
    results = results_dir(cfg, "sys") / "packets"
    tables = []
    for batch in range(rng.randint(5, 60)):
        kind = rng.random()
        if kind < 0.1:
            table = _table(rng, 0, 1, 0, "batch_time")
        else:
            span = rng.choice([0, 10, 600, 2 * HOUR]) if kind < 0.9 else 0
            table = _table(rng, rng.uniform(0, 6 * HOUR), span, rng.randint(1, 30), "batch_time")
            if kind > 0.97:
                times = table.column("batch_time").to_pylist()
                table = table.set_column(1, "batch_time", pa.array([None, *times[1:]], TS))
        _commit(results, batch, table)
        tables.append(table)
    original = pa.concat_tables(tables)
    root = results_dir(cfg, "sys")
    keys = {f.relative_to(root).as_posix() for f in result_files(root)}
    unpublished = {k for k in keys if rng.random() < 0.2}
    ResultPublisher(cfg, ("sys",))._mark("sys", keys - unpublished)
    tuned = cfg.replace(retention={"compact_after_s": rng.choice([0.0, 5 * GAP_S])})
    maintainer = Maintainer(tuned, ("sys",))
    maintainer.run(now=NOW)
    assert _rows(read_results(root)) == _rows(original)
    for key in unpublished:
        assert (root / key).exists()  # not compacted
    for manifest in compactions(results).values():
        times = pq.read_table(results / manifest["files"][0]).column("batch_time").to_pylist()
        assert len({t.strftime("%Y%m%dT%H") for t in times}) == 1 and None not in times
    # the newest batches are never compacted
    assert all(
        (results / COMMITS / f"{b}.json").exists() for b in range(len(tables) - KEEP_NEWEST, len(tables))
    )
    publisher = ResultPublisher(tuned, ("sys",), producer=_Producer())
    assert publisher.publish() == sum(pq.read_metadata(root / k).num_rows for k in unpublished)
    maintainer.run(now=NOW)  # again: what was just published goes too
    assert _rows(read_results(root)) == _rows(original)
    assert publisher.publish() == 0


# -- a crash at every step ------------------------------------------------------------------------


class Crash(Exception):
    """The process died here."""


def _count_steps(
    monkeypatch: pytest.MonkeyPatch,
    before: Callable[[int], None],
    after: Callable[[], None] = lambda: None,
) -> list[int]:
    """Route every change the pass makes to what readers see through ``before(n)`` (``n``: the
    changes made so far) and ``after()``."""
    done = [0]
    for name in ("_replace", "_unlink", "_rmdir"):
        real = getattr(retention, name)

        def step(*args: Any, _real: Any = real) -> None:
            before(done[0])
            _real(*args)
            done[0] += 1
            after()

        monkeypatch.setattr(retention, name, step)
    return done


def _two_layouts(cfg: Config) -> tuple[pa.Table, pa.Table]:
    """``traffic`` (hours 0-4) and ``sys/packets`` (a second sink), every file published."""
    traffic = _hours_kind(results_dir(cfg, "traffic"), seed=4, per_hour=2)
    sys_table = _hours_kind(results_dir(cfg, "sys") / "packets", seed=5, per_hour=2)
    _mark_everything(cfg, "traffic")
    _mark_everything(cfg, "sys")
    return traffic, sys_table


def test_a_crash_at_every_step_leaves_every_row_and_the_next_pass_completes(
    cfg: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds = ("traffic", "sys")
    traffic, sys_table = _two_layouts(cfg)
    data = Path(cfg.paths.data_dir)
    pristine = tmp_path / "pristine"
    shutil.copytree(data, pristine)
    now = NOW

    def check() -> None:
        assert _rows(read_results(results_dir(cfg, "traffic"))) == _rows(traffic)
        assert _rows(read_results(results_dir(cfg, "sys"))) == _rows(sys_table)

    # The whole pass, with every row checked before every change it makes.
    with monkeypatch.context() as m:
        steps = _count_steps(m, lambda n: check())
        maintain(cfg, kinds, now=now)
    total = steps[0]
    check()
    finished = _tree(data)
    assert total == 2 * (4 * 9 + 1)  # per hour: file, mark, manifest, 2 commits, files, directories
    for crash_at in range(total):
        shutil.rmtree(data)
        shutil.copytree(pristine, data)

        def crash(n: int, at: int = crash_at) -> None:
            if n == at:
                raise Crash(f"died before change {at}")

        with monkeypatch.context() as m:
            _count_steps(m, crash)
            with pytest.raises(Crash):
                maintain(cfg, kinds, now=now)
        check()
        assert ResultPublisher(cfg, kinds, producer=_Producer()).publish() == 0  # nothing new
        report = maintain(cfg, kinds, now=now)
        assert report.errors == []
        check()
        assert _tree(data) == finished, f"crash before change {crash_at}"
        assert ResultPublisher(cfg, kinds, producer=_Producer()).publish() == 0


class _Gate:
    """Lets the compacting thread make its changes only when the test says so."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.allowed = 0
        self.done = 0
        self.finished = False

    def before(self, n: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.allowed > n)

    def after(self) -> None:
        with self.cond:
            self.done += 1
            self.cond.notify_all()

    def advance(self, to: int) -> None:
        with self.cond:
            self.allowed = max(self.allowed, to)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.done >= min(self.allowed, to) or self.finished, timeout=30)


#: the reader's moments a test schedules: before it reads the commits, before and after it reads
#: the manifests (``netmon.results``)
READS = {
    "commits then manifests": (("_batch_commits", "enter"), ("compactions", "enter")),
    "manifests then their files": (("compactions", "enter"), ("compactions", "exit")),
}


@pytest.mark.parametrize("reads", sorted(READS))
def test_a_reader_sees_every_row_once_wherever_a_compaction_is_when_it_reads(
    cfg: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: str
) -> None:
    """A compaction runs in another thread and is held after ``a`` changes when the reader
    reaches its first moment, after ``b >= a`` at its second: every pair. The compaction
    compacts an hour and compacts another one again (a new file replaces its old one)."""
    results = results_dir(cfg, "traffic")
    rng = random.Random(6)
    tables = []
    for batch in range(9):  # hours 0, 1 and 2, three batches each
        table = _table(rng, batch // 3 * HOUR + 1, HOUR - 2, rng.randint(1, 9))
        _commit(results, batch, table)
        tables.append(table)
    plain = cfg.replace(retention={"compact_after_s": 0.0})
    _mark_everything(cfg, "traffic")
    assert maintain(plain, ("traffic",), now=NOW).compacted_files == 1  # hour 0
    for batch, start in [(9, 100), (10, 2 * HOUR), (11, 2 * HOUR), (12, 2 * HOUR)]:  # 9: late, hour 0
        table = _table(rng, start, 60, rng.randint(1, 9))
        _commit(results, batch, table)
        tables.append(table)
    _mark_everything(cfg, "traffic")
    original = _rows(pa.concat_tables(tables))
    data = Path(cfg.paths.data_dir)
    pristine = tmp_path / "pristine"
    shutil.copytree(data, pristine)
    with monkeypatch.context() as m:
        counted = _count_steps(m, lambda n: None)
        assert maintain(plain, ("traffic",), now=NOW).compacted_files == 2  # hour 0 again, hour 1
    total = counted[0]
    assert total == 7 + 12 + 1  # hour 0: file, mark, manifest, batch 9, old file; hour 1; mark
    for a in range(total + 1):
        for b in range(a, total + 1):
            shutil.rmtree(data)
            shutil.copytree(pristine, data)
            with monkeypatch.context() as m:
                seen = _read_between(m, plain, results, READS[reads], (a, b), total)
            assert seen == original, (a, b)
    assert _rows(read_results(results)) == original


def _read_between(
    m: pytest.MonkeyPatch,
    cfg: Config,
    results: Path,
    moments: tuple[tuple[str, str], ...],
    schedule: tuple[int, ...],
    total: int,
) -> Counter[tuple[Any, ...]]:
    """The rows :func:`read_results` returns while a compaction runs in another thread: held
    after ``schedule[i]`` changes when the reader reaches the ``i``-th of ``moments`` (in the
    order the reader reaches them)."""
    gate = _Gate()
    _count_steps(m, gate.before, gate.after)
    times = iter(schedule)

    def moment(name: str, when: str) -> None:
        if (name, when) in moments:
            gate.advance(next(times, 0))

    for name in {n for n, _ in moments}:
        real = getattr(netmon.results, name)

        def hooked(*args: Any, _name: str = name, _real: Any = real) -> Any:
            moment(_name, "enter")
            out = _real(*args)
            moment(_name, "exit")
            return out

        m.setattr(netmon.results, name, hooked)

    def compact() -> None:
        try:
            maintain(cfg, ("traffic",), now=NOW)
        finally:
            with gate.cond:
                gate.finished = True
                gate.cond.notify_all()

    worker = threading.Thread(target=compact, daemon=True)
    worker.start()
    try:
        gate.advance(schedule[0])
        return _rows(read_results(results))
    finally:
        gate.advance(total + 1)
        worker.join(30)
        assert not worker.is_alive()


def test_a_file_gone_between_listing_and_reading_is_read_from_a_new_listing(
    cfg: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = results_dir(cfg, "traffic")
    original = _hours_kind(results)
    stale = result_files(results)
    maintain(cfg.replace(pipeline={"publish_results": False}), ("traffic",), now=NOW)
    assert not all(f.exists() for f in stale)
    listings: Iterator[list[Path]] = iter([stale])
    real = netmon.results.result_files
    monkeypatch.setattr(netmon.results, "result_files", lambda d: next(listings, None) or real(d))
    assert _rows(read_results(results)) == _rows(original)


# -- retention ------------------------------------------------------------------------------------


def _expected_after_retention(
    files: list[pa.Table], column: str, cutoff: dt.datetime
) -> Counter[tuple[Any, ...]]:
    """The oracle: the rows of every file (read before) that holds a row at or after ``cutoff``
    (a file goes whole, once every row of it is older)."""
    kept: Counter[tuple[Any, ...]] = Counter()
    for table in files:
        times = table.column(column).to_pylist()
        if any(t is None or t >= cutoff for t in times) or not times:
            kept += _rows(table)
    return kept


@pytest.mark.parametrize("seed", range(8))
def test_retention_deletes_exactly_the_files_whose_rows_are_all_expired(cfg: Config, seed: int) -> None:
    rng = random.Random(seed)
    results = results_dir(cfg, "distinct")
    tables = []
    for batch in range(40):
        start = rng.uniform(0, 10 * 24 * HOUR) if batch >= 6 else 5 * HOUR + 60 * batch  # hour 5: 0-5
        table = _table(rng, start, rng.choice([0, 60, 12 * HOUR]) if batch >= 6 else 30, rng.randint(0, 20))
        _commit(results, batch, table)
        tables.append(table)
    # the newest rows are those of the newest batches (a pipeline's output moves forward)
    last = _table(rng, 10 * 24 * HOUR + 13 * HOUR, 10, 5)  # after every other batch's rows
    _commit(results, 40, last)
    tables.append(last)
    if seed % 2:  # compacted hours expire too, by their manifest
        compact = cfg.replace(pipeline={"publish_results": False}, retention={"compact_after_s": 0.0})
        maintain(compact, ("distinct",), now=NOW)
        assert compactions(results)
    before = [pq.read_table(f) for f in result_files(results)]
    assert _rows(read_results(results)) == _rows(pa.concat_tables(tables))
    newest = max(t for table in tables for t in table.column("window_end").to_pylist())
    days = rng.choice([1.0, 3.0, 5.5])
    keep = cfg.replace(
        pipeline={"publish_results": False}, retention={"results_days": days, "compact": False}
    )
    # the wall clock far ahead: ages count from the newest row (a replayed capture is not wiped)
    report = maintain(keep, ("distinct",), now=newest.timestamp() + 30 * 86400)
    cutoff = newest - dt.timedelta(days=days)
    expected = _expected_after_retention(before, "window_end", cutoff)
    assert _rows(read_results(results)) == expected
    assert report.expired_rows == sum(_rows(pa.concat_tables(tables)).values()) - sum(expected.values())
    assert report.expired_rows > 0
    for table in [pq.read_table(f) for f in result_files(results)]:
        assert max(table.column("window_end").to_pylist()) >= cutoff
    # the wall clock behind the newest row: ages count from the wall clock
    wall = newest - dt.timedelta(days=2)
    before = [pq.read_table(f) for f in result_files(results)]
    maintain(keep, ("distinct",), now=wall.timestamp())
    assert _rows(read_results(results)) == _expected_after_retention(
        before, "window_end", wall - dt.timedelta(days=days)
    )


def _spark_sink(directory: Path, tables: list[pa.Table]) -> list[Path]:
    """A Spark file-sink directory: part files named in ``_spark_metadata/<batch>`` (v1 log)."""
    meta = directory / "_spark_metadata"
    meta.mkdir(parents=True)
    files = []
    for batch, table in enumerate(tables):
        path = directory / f"part-{batch:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(table, path)
        files.append(path)
        entry = {
            "path": path.as_uri(),
            "size": path.stat().st_size,
            "isDir": False,
            "modificationTime": 0,
            "blockReplication": 1,
            "blockSize": 33554432,
            "action": "add",
        }
        (meta / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")
    return files


@pytest.mark.parametrize("seed", range(5))
def test_retention_of_a_spark_file_sink_deletes_its_expired_files_only(cfg: Config, seed: int) -> None:
    rng = random.Random(seed)
    root = results_dir(cfg, "joins")
    tables = [
        _table(rng, day * 86400, rng.choice([0, 3600, 86400]), rng.randint(0, 9), "left_ts")
        for day in range(9)
    ]
    files = _spark_sink(root / "handshake", tables)
    written = [pq.read_table(f) for f in files]
    other = _spark_sink(root / "web", [_table(rng, 8 * 86400, 60, 4, "left_ts")])
    log_before = {p.name: p.read_text() for p in (root / "handshake" / "_spark_metadata").iterdir()}
    newest = max(t for table in tables for t in table.column("left_ts").to_pylist())
    keep = cfg.replace(retention={"results_days": 3.0})
    maintain(keep, ("joins",), now=newest.timestamp() + 86400 * 100)
    cutoff = newest - dt.timedelta(days=3)
    expected = _expected_after_retention(written, "left_ts", cutoff) + _rows(pq.read_table(other[0]))
    assert _rows(read_results(root)) == expected
    assert any(not f.exists() for f in files) and all(f.exists() for f in other)
    assert sink_files(root / "handshake") == [f for f in files if f.exists()]
    # Spark's own log is left as Spark wrote it
    assert {p.name: p.read_text() for p in (root / "handshake" / "_spark_metadata").iterdir()} == log_before


def test_results_kept_forever_with_zero_days(cfg: Config) -> None:
    results = results_dir(cfg, "traffic")
    original = _hours_kind(results)
    report = maintain(cfg.replace(pipeline={"publish_results": False}), ("traffic",), now=1e12)
    assert report.expired_files == 0 and _rows(read_results(results)) == _rows(original)


# -- the republisher's mark stays bounded -----------------------------------------------------------


def test_the_mark_loses_the_entries_of_files_gone_but_not_of_batches_spark_may_run_again(cfg: Config) -> None:
    results = results_dir(cfg, "traffic")
    _hours_kind(results)
    keys = _mark_everything(cfg, "traffic")
    mark = checkpoint_dir(cfg, "publish") / "traffic.json"
    # The newest batch is being run again: its writer removed its file and has not written it yet.
    (results / "batch-000031" / "part-00000.parquet").unlink()
    extra = {"gone-long-ago/part-0.parquet", "batch-000003/part-00000.parquet.old"}
    ResultPublisher(cfg, ("traffic",))._mark("traffic", keys | extra)
    report = maintain(cfg, ("traffic",), now=NOW)
    after = set(json.loads(mark.read_text()))
    compacted = {f"compacted/20240501T{h}-0000.parquet" for h in (10, 11, 12, 13)}
    assert after == {f"batch-{b:06d}/part-00000.parquet" for b in range(20, 32)} | compacted
    assert report.dropped_marks == 20 + len(extra)
    # Without results published, no mark is read or written.
    mark.unlink()
    maintain(cfg.replace(pipeline={"publish_results": False}), ("traffic",), now=NOW)
    assert not mark.exists()


def test_a_pass_runs_again_only_after_its_interval(cfg: Config) -> None:
    maintainer = Maintainer(cfg.replace(retention={"interval_s": 300.0}), ("traffic",))
    assert maintainer.run_if_due(now=1000.0) is not None
    assert maintainer.run_if_due(now=1299.0) is None
    assert maintainer.run_if_due(now=1300.0) is not None


# -- Kafka ----------------------------------------------------------------------------------------


@pytest.fixture
def publish_cfg(netmon_config: Config, kafka_bootstrap: str, tmp_path: Path) -> Config:
    tag = uuid.uuid4().hex[:8]
    return netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={
            "bootstrap_servers": kafka_bootstrap,
            "results_topic_prefix": f"test.retention.{tag}.",
            "packets_topic": f"test.retention.{tag}.packets",
        },
        retention={"results_days": 0.0, "compact_after_s": 10 * GAP_S},
    )


@pytest.mark.kafka
def test_after_compaction_the_publisher_publishes_nothing_new(publish_cfg: Config) -> None:
    from netmon.results import message_rows, result_topic
    from tests.ingest.kafka_util import consume_all

    cfg = publish_cfg
    results = results_dir(cfg, "traffic")
    original = _hours_kind(results)
    publisher = ResultPublisher(cfg, ("traffic",))
    try:
        assert publisher.publish() == original.num_rows
        report = maintain(cfg, ("traffic",), now=NOW)
        assert report.compacted_files == 4
        assert publisher.publish() == 0
        # a new batch is published, alone
        _commit(results, 32, _table(random.Random(9), 4 * HOUR + 100, 10, 3))
        assert publisher.publish() == 3
        assert maintain(cfg, ("traffic",), now=NOW).errors == []
        assert publisher.publish() == 0
    finally:
        publisher.close()
    messages = consume_all(cfg.kafka.bootstrap, result_topic(cfg, "traffic"))
    sent = Counter(
        json.dumps(json.loads(t), sort_keys=True) for m in messages for t in message_rows(m.value, b"2")
    )
    assert sum(sent.values()) == original.num_rows + 3 and max(sent.values()) == 1  # each row once


@pytest.mark.kafka
def test_topic_retention_is_set_on_the_packets_and_result_topics(publish_cfg: Config) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    from netmon.results import result_topic

    cfg = publish_cfg.replace(retention={"kafka_retention_hours": 1.5})
    kinds = ("traffic", "sys")
    admin = KafkaAdminClient(bootstrap_servers=cfg.kafka.bootstrap)
    try:
        # one topic exists already, with another setting of its own that must stay
        existing = result_topic(cfg, "traffic")
        admin.create_topics([NewTopic(existing, 1, 1, topic_configs={"max.message.bytes": "2000000"})])
        assert (
            retention.apply_topic_retention(cfg.replace(retention={"kafka_retention_hours": 0.0}), kinds)
            == []
        )
        topics = retention.apply_topic_retention(cfg, kinds)
        assert topics == [cfg.kafka.packets_topic, existing, result_topic(cfg, "sys")]
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
        flat = _topic_configs(described)
        for topic in topics:
            assert flat[topic]["retention.ms"] == "5400000", topic
        assert flat[existing]["max.message.bytes"] == "2000000"
        # again, with another value: changed in place
        retention.apply_topic_retention(cfg.replace(retention={"kafka_retention_hours": 2}), kinds)
        flat = _topic_configs(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, existing)]))
        assert flat[existing]["retention.ms"] == "7200000"
        # results not published: only the packets topic
        quiet = cfg.replace(pipeline={"publish_results": False})
        assert retention.apply_topic_retention(quiet, kinds) == [cfg.kafka.packets_topic]
    finally:
        admin.close()


def _topic_configs(described: Any) -> dict[str, dict[str, str]]:
    """``{topic: {key: value}}`` from kafka-python's ``describe_configs`` answer."""
    out: dict[str, dict[str, str]] = {}
    for name, configs in (described.get("topic") or {}).items():
        out[name] = {k: (v["value"] if isinstance(v, dict) else v) for k, v in configs.items()}
    return out


# -- netmon maintain -------------------------------------------------------------------------------


def test_the_maintain_command_runs_one_pass_and_is_refused_while_a_pipeline_runs(tmp_path: Path) -> None:
    import fcntl

    from click.testing import CliRunner

    from cli.main import cli

    data = tmp_path / "data"
    results = data / "results" / "traffic"
    original = _hours_kind(results)
    for commit in (results / COMMITS).iterdir():  # written a day ago, a minute apart
        stamp = time.time() - 86400 + int(commit.stem) * GAP_S
        os.utime(commit, (stamp, stamp))
    env = {"NETMON_DATA_DIR": str(data), "NETMON_STATE_DIR": str(tmp_path / "state")}
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        "[pipeline]\npublish_results = false\n[retention]\nresults_days = 0\ncompact_after_s = 600\n"
    )
    args = ["--config", str(toml), "maintain", "--kind", "traffic"]
    with (data / "pipeline.lock").open("w") as lock:
        lock.write("4242\n")
        lock.flush()
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        refused = CliRunner().invoke(cli, args, env=env)
    assert refused.exit_code == 1
    assert (
        refused.output.splitlines()[-1]
        == f"netmon maintain: error: refused: a pipeline runs on {data} (pid 4242)"
    )
    assert not compactions(results)
    done = CliRunner().invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == [
        "compacted 20 batches into 4 files; expired 0 files (0 rows); "
        "removed 0 empty commits, 0 leftovers, 0 publish marks"
    ]
    assert _rows(read_results(results)) == _rows(original)


# -- Spark's own file sink log stays bounded (the joins' sink) ---------------------------------------


def _sink_log(sink: Path) -> dict[str, list[str]]:
    """Spark's sink log: per log file, the names of the files it adds."""
    return {
        entry.name: [Path(json.loads(line)["path"]).name for line in entry.read_text().splitlines()[1:]]
        for entry in sorted((sink / "_spark_metadata").iterdir())
        if not entry.name.startswith(".")
    }


def _numbers(sink: Path) -> list[int]:
    """The ``n`` of every row ``read_results`` reads from ``sink``, sorted."""
    table = read_results(sink)
    return sorted(r["n"] for r in (table.to_pylist() if table is not None else []))


@pytest.mark.spark
@pytest.mark.parametrize("days", [2.0 / 86400, 0.0], ids=["retention-2s", "kept-forever"])
def test_the_file_sink_log_forgets_files_older_than_results_days_at_its_compaction(
    spark: Any, netmon_config: Config, tmp_path: Path, days: float
) -> None:
    """The joins' writer options (``pipeline.job.file_sink_options``) on a real Spark file sink
    compacting its log every 2 batches: the compaction leaves out the file written more than
    ``results_days`` ago (kept with ``results_days = 0``); the maintainer then deletes that file,
    which no log entry names; a file the log names but that is gone is skipped by readers."""
    from pipeline.job import file_sink_options
    from pipeline.retention import maintain

    cfg = netmon_config.replace(paths={"data_dir": tmp_path / "data"}, retention={"results_days": days})
    options = file_sink_options(cfg)
    assert options == ({"retention": "2000ms"} if days else {})
    sink, source = results_dir(cfg, "joins"), tmp_path / "in"
    source.mkdir()
    # one event time for every row, now: retention by event time keeps them all
    when = dt.datetime.now(dt.UTC).replace(microsecond=0)
    schema = pa.schema([("query", pa.string()), ("left_ts", TS), ("n", pa.int64())])

    def batch(n: int) -> Path:
        """One micro-batch of the sink (one new input file, the query run until it is done);
        returns the file it wrote."""
        before = set(sink.glob("part-*")) if sink.is_dir() else set()
        pq.write_table(
            pa.table({"query": ["q"], "left_ts": [when], "n": [n]}, schema=schema), source / f"{n}.parquet"
        )
        query = (
            spark.readStream.schema("query STRING, left_ts TIMESTAMP, n BIGINT")
            .parquet(str(source))
            .writeStream.format("parquet")
            .outputMode("append")
            .options(**options)
            .option("path", str(sink))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        (written,) = set(sink.glob("part-*")) - before
        return written

    key = "spark.sql.streaming.fileSink.log.compactInterval"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, "2")  # batches 1, 3, 5, ... compact the log
    try:
        first = batch(0)
        assert _sink_log(sink) == {"0": [first.name]}
        time.sleep(2.5)  # the first file is now older than the 2 s of the retention
        second = batch(1)
        third = batch(2)
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)
    if days:
        # the compaction (batch 1) names the second file only; the first stays on disk, unread
        assert _sink_log(sink) == {"0": [first.name], "1.compact": [second.name], "2": [third.name]}
        assert sink_files(sink) == sorted([second, third]) and first.exists()
        assert _numbers(sink) == [1, 2]
        report = maintain(cfg, ("joins",))
        assert not first.exists() and second.exists() and third.exists()
        assert (report.expired_files, report.expired_rows) == (1, 1)
    else:
        assert _sink_log(sink) == {
            "0": [first.name],
            "1.compact": [first.name, second.name],
            "2": [third.name],
        }
        assert _numbers(sink) == [0, 1, 2]
    # a file the log names, deleted (as retention does): readers skip it, without an error
    second.unlink()
    assert sink_files(sink) == sorted(f for f in (first, third) if f.exists())
    assert _numbers(sink) == ([2] if days else [0, 2])
