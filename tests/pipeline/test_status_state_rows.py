"""The status file (and so ``netmon_query_state_rows`` on ``/metrics``) says the state each batch
kind holds in its own files: Spark's state store is empty for them, and the figure was 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from netmon.config import Config
from netmon.results import status_file
from pipeline.job import Pipeline


class _Query:
    isActive = True
    recentProgress: list[dict[str, Any]] = [
        {
            "timestamp": "2026-11-27T18:00:00.000Z",
            "batchId": 3,
            "durationMs": {"addBatch": 5, "triggerExecution": 9},
        }
    ]

    def exception(self) -> None:
        return None


class _Kind:
    late_rows = 0

    def __init__(self, state_rows: int | None) -> None:
        self.state_rows = state_rows


class _Joins:
    late_rows = 0

    def __init__(self) -> None:
        self.observed = {
            2: {"join.a": {"state_left": 100, "state_right": 1}},
            3: {"join.a": {"state_left": 7, "state_right": 2}, "join.b": {"state_left": 5, "state_right": 0}},
        }


def test_each_batch_kind_reports_the_state_it_holds(tmp_path: Path) -> None:
    cfg = Config().replace(paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"})
    pipeline = Pipeline(
        spark=cast(Any, None),
        cfg=cfg,
        queries={"packets": cast(Any, _Query())},
        batch_functions={
            "traffic": _Kind(18),
            "topk": _Kind(84_931),
            "distinct": _Kind(None),
            "joins": _Joins(),
        },
        feeds={"packets": ("traffic", "topk", "distinct", "joins")},
    )
    pipeline.poll()
    written = json.loads(status_file(cfg).read_text())["queries"]
    # each kind its own rows; the joins' newest batch's windows (7 + 2 + 5 + 0); none yet: 0
    assert {k: written[k]["state_rows"] for k in written} == {
        "traffic": 18,
        "topk": 84_931,
        "distinct": 0,
        "joins": 14,
    }
    assert all(written[k]["batches"] == 1 for k in written)
