"""The join operator hands its results back to Spark in bounded frames (no 1 GiB Arrow batch)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import pipeline.join_state as join_state
from pipeline.join_state import INPUT_COLUMNS, JoinBucket, JoinProcessor, JoinSpec

SPEC = JoinSpec(
    name="link",
    kind="link",
    window_left_s=30.0,
    window_right_s=30.0,
    lateness_s=5.0,
    strategy="none",
    x_left=1.0,
    x_right=1.0,
    seed=0,
    track_unmatched=False,
)


class _Value:
    """A ValueState stand-in for the processor's one state value (no Spark in this test)."""

    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple[Any, ...]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value


class _Handle:
    def __init__(self) -> None:
        self.state = _Value()

    def getValueState(self, name: str, schema: str) -> _Value:  # noqa: N802 - Spark's API
        return self.state


def _rows(n_left: int, n_right: int) -> pd.DataFrame:
    """Many-to-many on one key: n_left × n_right results."""
    t0 = pd.Timestamp("2024-05-01T12:00:00Z")
    sides = [True] * n_left + [False] * n_right
    frame = pd.DataFrame(
        {
            "query": "link",
            "bucket": 0,
            "is_left": sides,
            "ts": [t0 + pd.Timedelta(milliseconds=i) for i in range(len(sides))],
            "key": "10.1.0.7",
            "src_ip": "10.1.0.7",
            "dst_ip": "10.0.0.1",
            "src_port": 40000,
            "dst_port": [443 if s else 80 for s in sides],
            "iface": None,
        }
    )
    return frame[list(INPUT_COLUMNS)]


def test_results_leave_in_frames_of_at_most_the_chunk_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join_state, "OUTPUT_CHUNK_ROWS", 100)
    processor = JoinProcessor({"link": SPEC})
    processor.init(_Handle())
    rows = _rows(30, 25)
    frames = list(processor.handleInputRows(("link", 0), iter([rows]), None))  # type: ignore[arg-type]
    *results, summary = frames
    assert [len(f) for f in results] == [100] * 7 + [50]
    expected, stats = JoinBucket(SPEC, 0).process(rows)
    assert stats.results == len(expected) == 750
    got = pd.concat(results, ignore_index=True)
    pd.testing.assert_frame_equal(got, expected)
    assert int(summary["results"].iloc[0]) == 750
