"""Retention and compaction of the result files (``[retention]``), so disk use reaches a plateau.

A :class:`Maintainer` makes one pass over the kinds' result directories (:meth:`Maintainer.run`);
the pipeline's driver calls :meth:`Maintainer.run_if_due` from its poll loop, every
``[retention] interval_s``, in the thread that publishes results. Per sink (a kind's directory, or
one query's under it), in this order:

1. **finish** what a pass that died left: the commits (and ``batch-<id>/`` files) of batches a
   compaction manifest covers, compacted files no manifest names, temporary files;
2. **retention**: files whose rows are all older than ``results_days`` go, with their commit first
   (netmon's per-batch layout) or alone (Spark's file sink: ``netmon.results.sink_files`` skips a
   file that is gone; Spark's own log is not touched). Spark's sink log itself forgets the files
   written more than ``results_days`` ago at its next compaction (the sink's ``retention`` option,
   ``pipeline.job.file_sink_options``): such a file, in the sink's directory but named by no log
   entry any more and that old by its modification time, goes too (else, a file whose rows were
   not yet old by event time — a replayed capture's — would stay on disk, unread, forever);
3. **compaction**: the batches whose commits are ``compact_after_s`` old (by the wall clock and
   behind the sink's newest commit), not among its :data:`KEEP_NEWEST` newest, already published
   (the republisher's mark), whose rows all lie in one event-time hour that later rows have
   closed, are rewritten as one Parquet file per hour, sorted by time.

Committing a compaction (one hour; ``docs/results.md``, "Retention and compaction"):

a. write ``compacted/<hour>-<gen>.parquet`` (temporary file, fsync, rename): no reader sees it;
b. add it to the republisher's mark as published (same format, same durable replace);
c. replace the manifest ``_compacted/<hour>.json`` (``os.replace``, then fsync the directory): it
   names the file and every batch id whose rows it holds. From this instant readers skip those
   batches' commits and read the file (``netmon.results.committed_files`` reads the commits
   first, the manifests second, so a commit missing from its listing is covered by a manifest);
d. remove the covered commits, then their ``batch-<id>/`` files, then the hour's previous file.

A crash before (c) leaves an unnamed file (and at most a mark entry for it), removed at the next
pass; a crash after (c) leaves hidden commits and files, removed by step 1 of the next pass.
Either way a reader sees the old files or the new one, never both and never neither. An hour
compacted before is compacted again, whole, when a later batch brings more of its rows: the new
manifest covers the old batches and the new ones, and names the new file only.

Ages are event time, by the first of ``window_end``, ``event_time``, ``batch_time``, ``ts``,
``left_ts`` a file has (:data:`pipeline.publish.TIME_COLUMNS`), counted back from the sink's
newest row or the wall clock, whichever is earlier: a replayed capture from years ago is not
deleted as soon as it is written.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from netmon.config import Config
from netmon.results import (
    COMMITS,
    COMPACTED,
    compactions,
    covered_by,
    is_sink,
    result_topic,
    results_dir,
    sink_files,
)
from pipeline.publish import TIME_COLUMNS, fsync_dir, mark_file, read_mark

__all__ = [
    "COMPACTED_FILES",
    "KEEP_NEWEST",
    "MaintenanceReport",
    "Maintainer",
    "apply_topic_retention",
    "maintain",
]

log = logging.getLogger(__name__)

#: the compacted files' directory in a sink, beside ``batch-<id>/``
COMPACTED_FILES = "compacted"
#: a sink's newest commits are never compacted: Spark may run its newest batch again
KEEP_NEWEST = 3
_HOUR_US = 3_600_000_000
_BATCH_DIR = re.compile(r"batch-(\d+)$")


@dataclass
class MaintenanceReport:
    """What one pass did (counts over every kind)."""

    #: batches whose rows went into a compacted file
    compacted_batches: int = 0
    #: compacted files written (one per hour compacted)
    compacted_files: int = 0
    #: result files deleted by retention, and their rows
    expired_files: int = 0
    expired_rows: int = 0
    #: commits without rows removed
    empty_commits: int = 0
    #: files and commits a dead pass had left, removed
    leftovers: int = 0
    #: entries of the republisher's marks dropped (their files are gone)
    dropped_marks: int = 0
    #: one line per sink the pass could not finish (it goes on with the others)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Range:
    """A file's rows and event-time range (microseconds; None without rows or a time column)."""

    rows: int
    column: str | None
    min_us: int | None
    max_us: int | None
    #: rows without a time
    nulls: int


@dataclass
class _Commit:
    batch: int
    names: list[str]
    mtime: float


class Maintainer:
    """Retention and compaction of ``kinds``' results, one pass per :meth:`run`.

    Keeps the event-time ranges of the files it read (by path, size and modification time), so
    a pass reads only the files written since the previous one.
    """

    def __init__(self, cfg: Config, kinds: Iterable[str]) -> None:
        self.cfg = cfg
        self.kinds = tuple(kinds)
        self.last_run: float | None = None
        self._ranges: dict[Path, tuple[tuple[int, int], _Range]] = {}
        self._seen: set[Path] = set()

    def run_if_due(self, now: float | None = None) -> MaintenanceReport | None:
        """:meth:`run` when ``[retention] interval_s`` has passed since the last pass (or none ran)."""
        now = time.time() if now is None else now
        if self.last_run is not None and now - self.last_run < self.cfg.retention.interval_s:
            return None
        return self.run(now)

    def run(self, now: float | None = None) -> MaintenanceReport:
        """One pass over every kind (``now``: the wall clock, seconds since the epoch)."""
        started = time.monotonic()
        now = time.time() if now is None else now
        self.last_run = now
        report = MaintenanceReport()
        self._seen = set()
        for kind in self.kinds:
            root = results_dir(self.cfg, kind)
            published = self._published(kind)
            before = set(published) if published is not None else None
            newest: dict[Path, int] = {}
            for sink in _sinks(root):
                try:
                    newest[sink] = self._sink(sink, root, self._mark_file(kind), now, published, report)
                except (OSError, ValueError, pa.ArrowException) as exc:
                    report.errors.append(f"{sink}: {exc}")
                    log.warning(
                        "retention or compaction failed", extra={"sink": str(sink), "error": str(exc)}
                    )
            if published is not None:
                kept = {key for key in published if not _prunable(root, key, newest)}
                report.dropped_marks += len(published) - len(kept)
                if kept != before:
                    _write_mark(self._mark_file(kind), kept)
        self._ranges = {p: r for p, r in self._ranges.items() if p in self._seen}
        report.seconds = time.monotonic() - started
        if report.compacted_files or report.expired_files or report.leftovers or report.errors:
            log.info("results maintained", extra={k: v for k, v in vars(report).items() if v})
        return report

    # -- the republisher's mark -----------------------------------------------------------------

    def _mark_file(self, kind: str) -> Path:
        return mark_file(self.cfg, kind)

    def _published(self, kind: str) -> set[str] | None:
        """The files the republisher marked published (keys: paths under the kind's results
        directory, as ``pipeline.publish.ResultPublisher`` writes them); None when results are
        not published (nothing to wait for, nothing to mark)."""
        if not self.cfg.pipeline.publish_results:
            return None
        return read_mark(self._mark_file(kind))

    # -- one sink ---------------------------------------------------------------------------------

    def _sink(
        self,
        sink: Path,
        root: Path,
        mark: Path,
        now: float,
        published: set[str] | None,
        report: MaintenanceReport,
    ) -> int:
        """Finish, expire and compact one sink; return its newest batch id (-1: none)."""
        retention = self.cfg.retention
        report.leftovers += _finish(sink)
        commits = _commits(sink)
        spark = sink_files(sink)
        newest = max(commits, default=-1)
        if retention.results_s is not None:
            now_us = round(now * 1e6)
            newest_us = self._newest_us(sink, commits, spark)
            clock_us = now_us if newest_us is None else min(now_us, newest_us)
            self._expire(sink, commits, spark, clock_us - round(retention.results_s * 1e6), report)
            self._forgotten(sink, spark, now - retention.results_s, report)
        if retention.compact:
            self._compact(sink, root, mark, commits, now, published, report)
        return newest

    def _range(self, path: Path) -> _Range:
        """The file's rows and time range, read once per version of the file."""
        stat = path.stat()
        key = (stat.st_size, stat.st_mtime_ns)
        self._seen.add(path)
        cached = self._ranges.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        found = _file_range(path)
        self._ranges[path] = (key, found)
        return found

    def _newest_us(self, sink: Path, commits: dict[int, _Commit], spark: list[Path]) -> int | None:
        """The newest event time of the sink's rows: of its newest commits, compactions and
        Spark files (the latest rows are in the latest files)."""
        found: list[int] = [
            int(m["max_us"]) for m in compactions(sink).values() if m.get("max_us") is not None
        ]
        recent = [c for _, c in sorted(commits.items()) if c.names][-KEEP_NEWEST:]
        files = [sink / n for c in recent for n in c.names]
        files += sorted(spark, key=_mtime)[-KEEP_NEWEST:]
        for file in files:
            try:
                newest = self._range(file).max_us
            except FileNotFoundError:
                continue  # a batch Spark runs again: its writer replaces its files
            if newest is not None:
                found.append(newest)
        return max(found, default=None)

    def _expire(
        self,
        sink: Path,
        commits: dict[int, _Commit],
        spark: list[Path],
        cutoff_us: int,
        report: MaintenanceReport,
    ) -> None:
        """Delete what holds only rows older than ``cutoff_us``: compacted hours (manifest first),
        batches (commit first) and Spark's files."""
        for name, manifest in compactions(sink).items():
            if manifest.get("max_us") is not None and int(manifest["max_us"]) < cutoff_us:
                _unlink(sink / COMPACTED / f"{name}.json")
                for file in manifest["files"]:
                    _unlink(sink / file)
                report.expired_files += len(manifest["files"])
                report.expired_rows += int(manifest.get("rows", 0))
        for batch, commit in sorted(commits.items()):
            ranges = [self._range(sink / n) for n in commit.names if (sink / n).exists()]
            if ranges and all(_older(r, cutoff_us) for r in ranges):
                _unlink(sink / COMMITS / f"{batch}.json")
                _remove_batch(sink, batch, commit.names)
                del commits[batch]
                report.expired_files += len(ranges)
                report.expired_rows += sum(r.rows for r in ranges)
        for path in spark:
            found = self._range(path)
            if _older(found, cutoff_us):
                _unlink(path)
                report.expired_files += 1
                report.expired_rows += found.rows

    def _forgotten(self, sink: Path, spark: list[Path], before: float, report: MaintenanceReport) -> None:
        """Delete the files of a Spark file sink that its log no longer names (its ``retention``
        left them out of a compaction) and that were last modified before ``before``."""
        if not (sink / "_spark_metadata").is_dir():
            return
        named = set(spark)
        for path in sorted(sink.iterdir()):
            if path.name.startswith(("_", ".")) or path in named or not path.is_file():
                continue
            try:
                if path.stat().st_mtime >= before:
                    continue  # a batch being written, or one not committed yet
                rows = self._range(path).rows
            except FileNotFoundError:
                continue
            except (OSError, ValueError, pa.ArrowException):
                rows = 0  # not Parquet, or torn by a batch that died: still the sink's, still old
            _unlink(path)
            _unlink(path.with_name(f".{path.name}.crc"))  # Hadoop's local checksum beside it
            report.expired_files += 1
            report.expired_rows += rows

    def _compact(
        self,
        sink: Path,
        root: Path,
        mark: Path,
        commits: dict[int, _Commit],
        now: float,
        published: set[str] | None,
        report: MaintenanceReport,
    ) -> None:
        """Compact the sink's eligible batches, one event-time hour at a time."""
        retention = self.cfg.retention
        ids = sorted(commits)
        if len(ids) <= KEEP_NEWEST:
            return
        newest_mtime = max(c.mtime for c in commits.values())
        limit = min(now, newest_mtime) - retention.compact_after_s
        manifests = compactions(sink)
        hours: dict[int, list[tuple[_Commit, str]]] = {}
        frontier_us: int | None = None
        for batch in ids[:-KEEP_NEWEST]:
            commit = commits[batch]
            if commit.mtime > limit:
                continue
            files = [sink / n for n in commit.names]
            if published is not None and any(_key(root, f) not in published for f in files):
                continue  # not yet published: compacted, its rows would never be
            ranges = [self._range(f) for f in files] if all(f.exists() for f in files) else None
            if ranges is None:
                continue  # rewritten meanwhile
            if sum(r.rows for r in ranges) == 0:
                _unlink(sink / COMMITS / f"{batch}.json")  # no rows: nothing to keep
                _remove_batch(sink, batch, commit.names)
                report.empty_commits += 1
                continue
            times = [r for r in ranges if r.rows]
            column = times[0].column
            if column is None or any(r.column != column or r.nulls for r in times):
                continue  # no single time column, or rows without a time: left as they are
            low = min(r.min_us for r in times if r.min_us is not None)
            high = max(r.max_us for r in times if r.max_us is not None)
            frontier_us = high if frontier_us is None else max(frontier_us, high)
            if low // _HOUR_US == high // _HOUR_US:
                hours.setdefault(low // _HOUR_US, []).append((commit, column))
        for hour, batches in sorted(hours.items()):
            if frontier_us is None or (hour + 1) * _HOUR_US > frontier_us:
                continue  # the hour is not closed yet: later batches may bring more of its rows
            name = _hour_name(hour)
            old = manifests.get(name)
            column = old["column"] if old else batches[0][1]
            chosen = [c for c, col in batches if col == column]
            if len(chosen) < (1 if old else 2):
                continue  # one batch alone: already one file
            _compact_hour(sink, root, name, chosen, column, old, published, mark)
            report.compacted_batches += len(chosen)
            report.compacted_files += 1


def maintain(cfg: Config, kinds: Iterable[str], now: float | None = None) -> MaintenanceReport:
    """One retention and compaction pass over ``kinds`` (a new :class:`Maintainer` each call: it
    reads every file's time range; the pipeline keeps one and calls ``run_if_due``)."""
    return Maintainer(cfg, kinds).run(now)


# -- the steps (every change to what readers see goes through _replace, _unlink, _rmdir) ----------


def _replace(src: Path, dst: Path) -> None:
    os.replace(src, dst)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass


def _write_durably(target: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp_path)``, fsync it, rename it over ``target``, fsync the directory."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp"
    write(tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    _replace(tmp, target)
    fsync_dir(target.parent)


def _write_mark(path: Path, done: set[str]) -> None:
    """The republisher's mark, in its format (``pipeline.publish.ResultPublisher._mark``)."""
    _write_durably(path, lambda tmp: tmp.write_text(json.dumps(sorted(done))))


def _compact_hour(
    sink: Path,
    root: Path,
    name: str,
    batches: list[_Commit],
    column: str,
    old: dict[str, Any] | None,
    published: set[str] | None,
    mark: Path,
) -> None:
    """Rewrite ``batches`` (and the hour's earlier compacted file) as one file and commit it."""
    sources = [sink / n for n in (old["files"] if old else [])]
    sources += [sink / n for c in sorted(batches, key=lambda c: c.batch) for n in c.names]
    table = pa.concat_tables([pq.read_table(f) for f in sources], promote_options="default")
    table = table.take(pc.sort_indices(table, [(column, "ascending")]))  # a stable sort
    generation = int(old["generation"]) + 1 if old else 0
    file = f"{COMPACTED_FILES}/{name}-{generation:04d}.parquet"
    _write_durably(sink / file, lambda tmp: pq.write_table(table, tmp))
    if pq.read_metadata(sink / file).num_rows != table.num_rows:
        raise ValueError(f"{sink / file}: rows lost in writing")
    if published is not None:
        published.add(_key(root, sink / file))
        _write_mark(mark, published)
    times = pc.min_max(_micros(table.column(column)))
    covered = {b for lo, hi in (old["batches"] if old else []) for b in range(lo, hi + 1)}
    covered |= {c.batch for c in batches}
    manifest = {
        "hour": _hour_iso(name),
        "column": column,
        "generation": generation,
        "batches": _spans(covered),
        "files": [file],
        "rows": table.num_rows,
        "min_us": times["min"].as_py(),
        "max_us": times["max"].as_py(),
    }
    _write_durably(sink / COMPACTED / f"{name}.json", lambda tmp: tmp.write_text(json.dumps(manifest)))
    for c in batches:
        _unlink(sink / COMMITS / f"{c.batch}.json")
    for c in batches:
        _remove_batch(sink, c.batch, c.names)
    for stale in old["files"] if old else []:
        if stale != file:
            _unlink(sink / stale)


def _finish(sink: Path) -> int:
    """Remove what a pass that died left behind: covered commits and their files, compacted files
    no manifest names, temporary files. Returns how many were removed."""
    removed = 0
    manifests = compactions(sink)
    covered = covered_by(manifests.values())
    named = {n for m in manifests.values() for n in m["files"]}
    log_dir = sink / COMMITS
    for entry in sorted(log_dir.iterdir()) if log_dir.is_dir() else []:
        if entry.name.endswith(".json") and entry.stem.isdigit() and covered(int(entry.stem)):
            try:
                names = list(json.loads(entry.read_text())["files"])
            except (OSError, ValueError, KeyError, TypeError):
                names = []
            _unlink(entry)
            _remove_batch(sink, int(entry.stem), names)
            removed += 1
    for entry in sorted(sink.iterdir()):
        found = _BATCH_DIR.match(entry.name)
        if found and covered(int(found.group(1))):
            _remove_batch(sink, int(found.group(1)), [])
            removed += 1
    for directory in (sink / COMPACTED_FILES, sink / COMPACTED):
        for path in sorted(directory.iterdir()) if directory.is_dir() else []:
            orphan = directory.name == COMPACTED_FILES and f"{COMPACTED_FILES}/{path.name}" not in named
            if path.name.endswith(".tmp") or orphan:
                _unlink(path)
                removed += 1
    return removed


def _remove_batch(sink: Path, batch: int, names: list[str]) -> None:
    """A batch's files, then its ``batch-<id>/`` directory (whatever else a writer left in it)."""
    for name in names:
        _unlink(sink / name)
    directory = sink / _batch_dir(batch)
    if directory.is_dir():
        for path in _walk_files(directory):
            _unlink(path)
        for sub in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
            _rmdir(sub)
        _rmdir(directory)


def _walk_files(directory: Path) -> Iterator[Path]:
    for base, _, files in os.walk(directory):
        for name in sorted(files):
            yield Path(base) / name


# -- reading ------------------------------------------------------------------------------------


def _sinks(root: Path) -> list[Path]:
    """A kind's sinks: its directory, or its queries' subdirectories."""
    if is_sink(root):
        return [root]
    if not root.is_dir():
        return []
    return [sub for sub in sorted(root.iterdir()) if sub.is_dir() and is_sink(sub)]


def _commits(sink: Path) -> dict[int, _Commit]:
    """The sink's commits (``pipeline.batch_sink``) by batch id, those a manifest covers left out."""
    covered = covered_by(compactions(sink).values())
    found: dict[int, _Commit] = {}
    log_dir = sink / COMMITS
    for entry in sorted(log_dir.glob("*.json")) if log_dir.is_dir() else []:
        if not entry.stem.isdigit() or covered(int(entry.stem)):
            continue
        try:
            names = list(json.loads(entry.read_text())["files"])
            mtime = entry.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced: next pass
        found[int(entry.stem)] = _Commit(int(entry.stem), names, mtime)
    return found


def _file_range(path: Path) -> _Range:
    """Rows and event-time range of one Parquet file (its time column only is read)."""
    schema = pq.read_schema(path)
    column = next((c for c in TIME_COLUMNS if c in schema.names), None)
    if column is None or not pa.types.is_timestamp(schema.field(column).type):
        return _Range(pq.read_metadata(path).num_rows, None, None, None, 0)
    values = _micros(pq.read_table(path, columns=[column]).column(column))
    bounds = pc.min_max(values)
    return _Range(len(values), column, bounds["min"].as_py(), bounds["max"].as_py(), values.null_count)


def _micros(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A timestamp column as integer microseconds since the epoch (nanoseconds truncated)."""
    unit_type = pa.timestamp("us", column.type.tz)
    return pc.cast(pc.cast(column, unit_type, safe=False), pa.int64())


def _older(found: _Range, cutoff_us: int) -> bool:
    """Whether every row of a file is older than ``cutoff_us`` (a file of no rows is not)."""
    return found.rows > 0 and found.max_us is not None and found.max_us < cutoff_us and not found.nulls


def _spans(batches: set[int]) -> list[list[int]]:
    """Batch ids as inclusive ranges: ``{1, 2, 3, 7}`` → ``[[1, 3], [7, 7]]``."""
    spans: list[list[int]] = []
    for batch in sorted(batches):
        if spans and spans[-1][1] == batch - 1:
            spans[-1][1] = batch
        else:
            spans.append([batch, batch])
    return spans


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _key(root: Path, path: Path) -> str:
    """A file's key in the republisher's mark: its path under the kind's results directory."""
    return path.relative_to(root).as_posix()


def _batch_dir(batch: int) -> str:
    return f"batch-{batch:06d}"


def _hour_name(hour: int) -> str:
    """``20240501T12``: a manifest's name, the hour (hours since the epoch) it covers."""
    return time.strftime("%Y%m%dT%H", time.gmtime(hour * 3600))


def _hour_iso(name: str) -> str:
    return f"{name[0:4]}-{name[4:6]}-{name[6:8]}T{name[9:11]}:00:00Z"


def _prunable(root: Path, key: str, newest: dict[Path, int]) -> bool:
    """Whether a mark entry may go: its file is gone and no writer will write that path again.
    A batch among its sink's newest may be run again by Spark (its writer removes the files,
    then writes them anew): its entry stays, so the rewritten file is not published twice."""
    if (root / key).exists():
        return False
    parts = PurePosixPath(key).parts
    for i, part in enumerate(parts):
        found = _BATCH_DIR.match(part)
        if found:
            sink = root.joinpath(*parts[:i])
            if sink not in newest:
                return not sink.exists()  # a sink the pass could not read keeps its entries
            return int(found.group(1)) <= newest[sink] - KEEP_NEWEST
    return True


# -- Kafka ----------------------------------------------------------------------------------------


def apply_topic_retention(cfg: Config, kinds: Iterable[str], timeout_s: float = 10.0) -> list[str]:
    """Set ``[retention] kafka_retention_hours`` as ``retention.ms`` on the packets topic and (when
    results are published) the kinds' result topics, creating those missing; returns the topics
    set (none when the setting is 0, the broker's own retention).

    Call it at the pipeline's start; Kafka keeps the setting, so once is enough.
    """
    from netmon.kafka_admin import set_topic_retention
    from netmon.kafka_security import client_options

    retention_ms = cfg.retention.kafka_retention_ms
    if retention_ms is None:
        return []
    topics = [cfg.kafka.packets_topic]
    if cfg.pipeline.publish_results:
        topics += [result_topic(cfg, kind) for kind in kinds]
    set_topic_retention(
        cfg.kafka.bootstrap,
        topics,
        retention_ms,
        cfg.kafka.partitions,
        cfg.kafka.replication_factor,
        timeout_s=timeout_s,
        security=client_options(cfg.kafka),
        min_insync_replicas=cfg.kafka.min_insync_replicas,
    )
    return topics
