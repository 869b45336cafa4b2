"""Where results live, and reading them back with pyarrow (no Spark), committed files only.

Spark's file sink records every committed file in ``<dir>/_spark_metadata/`` (one log entry per
batch, compacted every few batches). A file that is not in that log belongs to a batch that did not
commit (e.g. the job was killed mid-batch) and will be rewritten on restart: reading the directory
blindly would count it twice. :func:`read_results` reads exactly the committed files.

A kind whose last stage runs in ``foreachBatch`` (distinct counts) writes ``batch-<id>/`` directories
and names their files in ``<dir>/_commits/<id>.json`` once they are whole (``pipeline.batch_sink``);
the same functions read that log instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from netmon.config import Config

__all__ = [
    "COMMITS",
    "PIPELINE_LOCK",
    "RESULT_VERSIONS",
    "SHARED_QUERY",
    "checkpoint_dir",
    "committed_files",
    "is_sink",
    "message_rows",
    "read_results",
    "result_files",
    "result_topic",
    "results_dir",
    "status_file",
]

#: ``pipeline.batch_sink``'s commit log, beside the files of a kind written per micro-batch
COMMITS = "_commits"
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


def _batch_commits(log: Path) -> list[Path]:
    """The files named by ``pipeline.batch_sink``'s commit log (one JSON file per batch)."""
    files: list[Path] = []
    for entry in sorted(log.glob("*.json")):
        try:
            names = json.loads(entry.read_text())["files"]
        except (OSError, ValueError, KeyError):
            continue  # a commit being replaced: its batch is read once it is whole
        files.extend(log.parent / name for name in names)
    return sorted(f for f in files if f.exists())


def committed_files(directory: Path) -> list[Path]:
    """The Parquet files of ``directory`` that its sink logs say are committed.

    A directory may hold both logs: Spark's file sink wrote it before the kind moved to the
    shared micro-batch (``pipeline.job``), netmon's commit log since; both are read.
    """
    files = _batch_commits(Path(directory) / COMMITS) if (Path(directory) / COMMITS).is_dir() else []
    return files + _sink_files(Path(directory))


def _sink_files(directory: Path) -> list[Path]:
    """The files Spark's file sink log (``_spark_metadata``) names as committed."""
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
    """
    files = result_files(directory)
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files], promote_options="default")
