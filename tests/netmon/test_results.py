"""Reading committed results: Spark's sink log and netmon's per-batch commit log, files only once whole."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from netmon.results import committed_files, is_sink, read_results
from pipeline.batch_sink import commit_batch


def _part(directory: Path, name: str, values: list[int]) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"n": values}), directory / name)
    return f"{directory.name}/{name}"


def test_commit_log_names_exactly_the_committed_files(tmp_path):
    out = tmp_path / "distinct"
    first = _part(out / "batch-000000", "part-0.parquet", [1, 2])
    commit_batch(out, 0, [first])
    second = _part(out / "batch-000001", "part-0.parquet", [3])
    # Batch 2 died before its commit: its file is not read.
    _part(out / "batch-000002", "part-0.parquet", [99])
    commit_batch(out, 1, [second])
    commit_batch(out, 3, [])  # a batch that closed no window
    assert is_sink(out)
    assert committed_files(out) == [out / first, out / second]
    assert read_results(out).column("n").to_pylist() == [1, 2, 3]
    # Batch 1 run again after a crash: its directory rewritten, its commit replaced.
    (out / second).unlink()
    third = _part(out / "batch-000001", "part-1.parquet", [3])
    assert committed_files(out) == [out / first]  # between the rewrite and the new commit
    commit_batch(out, 1, [third])
    assert read_results(out).column("n").to_pylist() == [1, 2, 3]


def test_a_results_dir_of_several_sinks_is_read_whole(tmp_path):
    kind = tmp_path / "joins"
    commit_batch(kind / "a", 0, [_part(kind / "a" / "batch-000000", "p.parquet", [1])])
    commit_batch(kind / "b", 0, [_part(kind / "b" / "batch-000000", "p.parquet", [2])])
    assert not is_sink(kind)
    assert sorted(read_results(kind).column("n").to_pylist()) == [1, 2]
