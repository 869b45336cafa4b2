"""Where results live, and reading them back with pyarrow (no Spark), committed files only.

Spark's file sink records every committed file in ``<dir>/_spark_metadata/`` (one log entry per
batch, compacted every few batches). A file that is not in that log belongs to a batch that did not
commit (e.g. the job was killed mid-batch) and will be rewritten on restart: reading the directory
blindly would count it twice. :func:`read_results` reads exactly the committed files.

A kind whose last stage runs in ``foreachBatch`` (distinct counts) writes ``batch-<id>/`` directories
and names their files in ``<dir>/_commits/<id>.json`` once they are whole (``pipeline.batch_sink``);
the same functions read that log instead.

Compaction (``pipeline.retention``) rewrites the files of many such batches as one file and names it
in a manifest ``<dir>/_compacted/<hour>.json`` together with the batch ids it covers; a reader skips
the commits of covered batches. The commits are read before the manifests and a manifest is in
place before the commits it covers go, so a reader sees each batch's rows once, from its commit or
from the compacted file, at every instant (``docs/results.md``, "Retention and compaction").
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from netmon.config import Config

__all__ = [
    "COMMITS",
    "COMPACTED",
    "PIPELINE_LOCK",
    "RESULT_VERSIONS",
    "SHARED_QUERY",
    "checkpoint_dir",
    "committed_files",
    "compactions",
    "compactions_between",
    "covered_by",
    "is_sink",
    "message_rows",
    "read_results",
    "result_files",
    "result_topic",
    "results_dir",
    "sink_files",
    "status_file",
]

#: ``pipeline.batch_sink``'s commit log, beside the files of a kind written per micro-batch
COMMITS = "_commits"
#: times read_results lists the files again when one went between listing and reading
_READ_ATTEMPTS = 5
#: compaction manifests beside the commit log: ``<hour>.json`` names a compacted file and the
#: batches whose rows it holds (``pipeline.retention``)
COMPACTED = "_compacted"
#: the span of a compaction manifest's rows: the hour it is named after
_HOUR_US = 3_600_000_000
#: the lock a running pipeline holds on its data directory (``<data>/pipeline.lock``)
PIPELINE_LOCK = "pipeline.lock"
#: the pipeline's shared streaming query (one Kafka read for the batch kinds); its checkpoint is
#: ``checkpoint_dir(cfg, SHARED_QUERY)``
SHARED_QUERY = "packets"


def results_dir(cfg: Config, kind: str) -> Path:
    return Path(cfg.paths.data_dir) / "results" / kind


def result_topic(cfg: Config, kind: str) -> str:
    """The Kafka topic a kind's committed rows are republished on: ``<prefix><kind>``."""
    return f"{cfg.kafka.results_topic_prefix}{kind}"


#: the result message versions a consumer reads: ``1`` one row per message, ``2`` JSON Lines
RESULT_VERSIONS = (b"1", b"2")


def message_rows(value: bytes | None, version: bytes | None) -> list[bytes]:
    """The JSON text of each row a result message carries (``docs/results.md``).

    ``version`` is the message's ``netmon.result-version`` header (None: version 1). Raises
    ``ValueError`` naming an unknown version.

    >>> message_rows(b'{"n":1}\\n{"n":2}\\n', b"2")
    [b'{"n":1}', b'{"n":2}']
    >>> message_rows(b'{"n":1}', None)
    [b'{"n":1}']
    """
    if version is None or version == b"1":
        return [value or b""]
    if version == b"2":
        return [line for line in (value or b"").split(b"\n") if line.strip()]
    raise ValueError(f"unknown result version {version[:20]!r}")


def checkpoint_dir(cfg: Config, kind: str) -> Path:
    return Path(cfg.paths.data_dir) / "checkpoints" / kind


def status_file(cfg: Config) -> Path:
    return Path(cfg.paths.data_dir) / "status" / "pipeline.json"


def _log_entries(log_file: Path) -> list[dict]:
    lines = log_file.read_text().splitlines()
    # First line is the log format version ("v1").
    return [json.loads(line) for line in lines[1:] if line.strip()]


def is_sink(directory: Path) -> bool:
    """Whether ``directory`` is one query's output: it has Spark's sink log or netmon's commit log."""
    return (Path(directory) / "_spark_metadata").is_dir() or (Path(directory) / COMMITS).is_dir()


def _batch_commits(log: Path) -> dict[int, list[str]]:
    """The file names (relative to the log's directory) of each batch in ``pipeline.batch_sink``'s
    commit log (one JSON file per batch, ``<id>.json``)."""
    commits: dict[int, list[str]] = {}
    for entry in sorted(log.glob("*.json")):
        if not entry.stem.isdigit():
            continue
        try:
            commits[int(entry.stem)] = list(json.loads(entry.read_text())["files"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a commit being replaced or removed: its batch is read once it is whole
    return commits


def compactions(directory: Path) -> dict[str, dict[str, Any]]:
    """The compaction manifests of a sink directory by name (``<dir>/_compacted/<name>.json``).

    Each holds ``batches`` (the ids of the batches whose rows it holds, as inclusive ranges
    ``[[first, last], ...]``; their commits are not read) and ``files`` (the compacted files,
    relative to ``directory``), with ``hour``, ``column`` (the time column), ``generation``,
    ``rows``, ``min_us`` and ``max_us`` (event-time bounds, microseconds).
    """
    manifests: dict[str, dict[str, Any]] = {}
    for entry in sorted((Path(directory) / COMPACTED).glob("*.json")):
        manifest = _manifest(entry)
        if manifest is not None:
            manifests[entry.stem] = manifest
    return manifests


def compactions_between(directory: Path, min_us: int, max_us: int) -> dict[str, dict[str, Any]]:
    """The manifests of :func:`compactions` whose rows may lie in ``[min_us, max_us]`` (their time
    column, microseconds since the epoch): those whose ``[min_us, max_us]`` overlaps it.

    Only the manifests of the hours that overlap it are opened (a manifest is named after the
    hour its rows lie in, ``<YYYYMMDD>T<HH>``): the cost follows the range, not the history.
    """
    manifests: dict[str, dict[str, Any]] = {}
    log = Path(directory) / COMPACTED
    try:
        names = sorted(n for n in os.listdir(log) if n.endswith(".json"))
    except OSError:
        return manifests
    for name in names:
        hour_us = _hour_us(name[:-5])
        if hour_us is not None and not (hour_us <= max_us and hour_us + _HOUR_US > min_us):
            continue
        manifest = _manifest(log / name)
        if manifest is None:
            continue
        low, high = manifest.get("min_us"), manifest.get("max_us")
        if low is not None and high is not None and (int(high) < min_us or int(low) > max_us):
            continue
        manifests[name[:-5]] = manifest
    return manifests


def _hour_us(name: str) -> int | None:
    """The start of the hour a manifest is named after, in microseconds (None: not such a name).

    >>> _hour_us("20240501T12"), _hour_us("other")
    (1714564800000000, None)
    """
    try:
        start = dt.datetime.strptime(name, "%Y%m%dT%H").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return round(start.timestamp()) * 1_000_000


def _manifest(entry: Path) -> dict[str, Any] | None:
    """One manifest, its ``batches`` as tuples; None when it went meanwhile (retention)."""
    try:
        manifest = json.loads(entry.read_text())
        manifest["batches"] = [(int(lo), int(hi)) for lo, hi in manifest["batches"]]
        manifest["files"] = [str(f) for f in manifest["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(manifest)


def covered_by(manifests: Iterable[dict[str, Any]]) -> Callable[[int], bool]:
    """Whether a batch id is covered by one of ``manifests`` (:func:`compactions`' values).

    >>> covered = covered_by([{"batches": [(0, 3), (7, 7)]}, {"batches": [(9, 12)]}])
    >>> [b for b in range(14) if covered(b)]
    [0, 1, 2, 3, 7, 9, 10, 11, 12]
    """
    spans = sorted(span for m in manifests for span in m["batches"])
    firsts = [lo for lo, _ in spans]
    lasts = list(itertools.accumulate((hi for _, hi in spans), max))

    def covered(batch: int) -> bool:
        i = bisect.bisect_right(firsts, batch) - 1
        return i >= 0 and lasts[i] >= batch

    return covered


def committed_files(directory: Path) -> list[Path]:
    """The Parquet files of ``directory`` that its sink logs say are committed.

    A directory may hold both logs: Spark's file sink wrote it before the kind moved to the
    shared micro-batch (``pipeline.job``), netmon's commit log since; both are read. A batch
    covered by a compaction manifest is read from the compacted file, not from its commit.
    """
    directory = Path(directory)
    files: list[Path] = []
    if (directory / COMMITS).is_dir():
        # Commits (and whether their files exist) first, manifests second: a manifest is in place
        # before the commits and files it covers go, so one missed here is covered by a manifest
        # read below. A file that goes after this (a compacted file replaced by a later one,
        # files that expired) fails the read, and read_results lists again.
        commits = {
            batch: [directory / n for n in names if (directory / n).exists()]
            for batch, names in _batch_commits(directory / COMMITS).items()
        }
        manifests = list(compactions(directory).values())
        covered = covered_by(manifests)
        files += [f for batch, batch_files in commits.items() if not covered(batch) for f in batch_files]
        files += [directory / n for m in manifests for n in m["files"]]
    return sorted(files) + sink_files(directory)


def sink_files(directory: Path) -> list[Path]:
    """The files Spark's file sink log (``_spark_metadata``) names as committed and that still
    exist (retention deletes expired files without touching Spark's log)."""
    meta = Path(directory) / "_spark_metadata"
    if not meta.is_dir():
        return []
    batches: dict[int, Path] = {}
    for entry in meta.iterdir():
        stem = entry.name.removesuffix(".compact")
        if stem.isdigit():
            batches[int(stem)] = entry
    if not batches:
        return []
    compacts = [b for b, p in batches.items() if p.name.endswith(".compact")]
    start = max(compacts) if compacts else min(batches)
    present: dict[str, bool] = {}
    for batch in sorted(b for b in batches if b >= start):
        for logged in _log_entries(batches[batch]):
            path = unquote(urlparse(logged["path"]).path)
            present[path] = logged.get("action", "add") == "add"
    return sorted(Path(p) for p, kept in present.items() if kept and Path(p).exists())


def result_files(directory: Path) -> list[Path]:
    """The committed files of a result directory: its own sink's, or those of its subdirectories'.

    A kind with several queries keeps one sink per query in a subdirectory.
    """
    directory = Path(directory)
    if is_sink(directory) or not directory.is_dir():
        return committed_files(directory)
    return [f for sub in sorted(directory.iterdir()) if sub.is_dir() for f in committed_files(sub)]


def read_results(directory: Path, columns: list[str] | None = None) -> pa.Table | None:
    """All committed rows of a result directory, or ``None`` when nothing is committed yet.

    A kind with several queries keeps one sink per query in a subdirectory: they are all read.
    A file removed between listing and reading (compaction replaced it, retention expired it) is
    read from the new listing.
    """
    attempts = _READ_ATTEMPTS
    while True:
        files = result_files(directory)
        if not files:
            return None
        try:
            tables = [pq.read_table(f, columns=columns) for f in files]
        except FileNotFoundError:
            attempts -= 1
            if not attempts:
                raise
            continue
        return pa.concat_tables(tables, promote_options="default")
