"""A batch function's own state, one version per micro-batch, beside the query's checkpoint.

A ``foreachBatch`` function (``pipeline.traffic.SlidingTraffic``, ``pipeline.topk.SlidingTopK``)
keeps what its next batch needs — open windows, merge states, its watermark — as a small JSON
document per batch: ``<dir>/batch-<id>.json``, written whole (tmp + fsync + rename) after the
batch's results are committed. A batch reads the newest version *before* its own id, so a batch
that Spark runs again after a crash (same id, same input) starts from the same state and writes
the same rows and the same version. Versions older than the previous one are deleted once a
newer one exists: the previous stays, a rerun of the current batch needs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["BatchState", "read_arrow", "write_arrow"]


class BatchState:
    """Versions of one function's state: ``load(batch_id)`` the state before it, ``save`` its own."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _versions(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(int(p.stem.removeprefix("batch-")) for p in self.directory.glob("batch-*.json"))

    def load(self, batch_id: int) -> dict[str, Any] | None:
        """The newest state saved by a batch before ``batch_id`` (None: no batch yet)."""
        before = [v for v in self._versions() if v < batch_id]
        if not before:
            return None
        return dict(json.loads((self.directory / f"batch-{before[-1]:06d}.json").read_text()))

    def save(self, batch_id: int, state: dict[str, Any]) -> None:
        """Write batch ``batch_id``'s state atomically, then drop versions older than the one before."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"batch-{batch_id:06d}.json"
        tmp = self.directory / f".batch-{batch_id:06d}.json.tmp"
        with tmp.open("w") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(target)
        versions = self._versions()
        keep = [v for v in versions if v < batch_id][-1:] + [v for v in versions if v >= batch_id]
        for v in versions:
            if v not in keep:
                (self.directory / f"batch-{v:06d}.json").unlink(missing_ok=True)


def write_arrow(table: pa.Table, path: Path) -> None:
    """A batch function's table as an Arrow IPC file, whole: tmp, fsync, rename. The state version
    naming it is saved after it (:meth:`BatchState.save`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        with pa.ipc.new_file(fh, table.schema) as writer:
            writer.write_table(table)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_arrow(path: Path) -> pa.Table:
    """A table :func:`write_arrow` wrote."""
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()
