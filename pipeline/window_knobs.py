"""Window sizes changed at run time (seed 004's window knob, issue 18 item 4).

``netmon tune --window QUERY=SECONDS`` writes the windows wanted into a control file,
``<data_dir>/control/windows.json`` (``{"top-sources": 30, "distinct/ddos": 120}``), replaced
atomically. The running pipeline reads it at each micro-batch (and the resource manager's window
reduction, ``limits``: a window is at most the manager's): a top-k query whose window differs is
resized at the batch boundary (``analytics.topk.SubWindowTopK.resize``), a distinct query's
sub-window sketches are united over the new span from that boundary on
(``analytics.sketch_carry.SlidingCoupons.resize``, ``pipeline.distinct``), without a restart.
Each batch's windows are saved under its id *before* it runs (:class:`WindowKnobs`), so a batch
that Spark runs again applies the same ones and writes the same rows, whatever the control file
says by then.

One file serves both kinds: a top-k query's entry is its name, a distinct query's is
``distinct/<name>`` (:func:`window_key`; the names of the two kinds may coincide). Each kind
reads its own entries and leaves the other's alone.

A file that cannot be read, a query that is not one of the kind's, or a window its query cannot
take (not a multiple of the sub-window, outside ``window_range_s``) is logged once and left out:
a knob never stops the pipeline. Without an entry a query runs with its configured ``window_s``
(so a window changed in the configuration takes effect at a restart the same way).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from analytics.window_plan import DISTINCT_PREFIX, window_key
from netmon.config import Config
from netmon.config.checks import ConfigError
from pipeline.batch_state import BatchState

__all__ = ["KINDS", "Windowed", "WindowKnobs", "read_windows", "window_file", "window_key", "write_windows"]

log = logging.getLogger(__name__)

_NS = 1_000_000_000

#: The kinds with a window knob -> the prefix of their entries in the control file, and how a
#: message names their queries.
KINDS = {"topk": ("", "top-k"), "distinct": (DISTINCT_PREFIX, "distinct")}


class Windowed(Protocol):
    """A query with a window knob (``TopKQuery``, ``DistinctQuery``)."""

    @property
    def name(self) -> str: ...
    @property
    def window_s(self) -> float: ...
    def window_problem(self, window_s: float) -> str | None: ...


def _kind_of(key: str) -> tuple[str, str]:
    """``(kind, query name)`` of a control file entry."""
    for kind, (prefix, _) in KINDS.items():
        if prefix and key.startswith(prefix):
            return kind, key.removeprefix(prefix)
    return "topk", key


def window_file(cfg: Config) -> Path:
    """The control file of the windows wanted (``netmon tune --window`` writes it)."""
    return Path(cfg.paths.data_dir) / "control" / "windows.json"


def read_windows(path: Path) -> dict[str, float]:
    """The windows wanted, query -> seconds; ``{}`` without a file. Raises ``ConfigError`` on a
    file that is not a JSON object of numbers."""
    try:
        body = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a JSON object of windows ({exc})") from None
    if not isinstance(body, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in body.values()
    ):
        raise ConfigError(f"{path}: expected a JSON object of query names to seconds, got {body!r}")
    return {str(name): float(seconds) for name, seconds in body.items()}


def write_windows(path: Path, windows: Mapping[str, float]) -> None:
    """Replace the control file atomically (a reader sees the old or the new, never a part)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(windows), indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


class WindowKnobs:
    """Each batch's windows (ns per query), decided once and saved before the batch runs.

    Parameters
    ----------
    queries
        The kind's queries; each runs with its ``window_s`` unless the control file says otherwise.
    control
        The control file (:func:`window_file`); None: the configured windows only.
    directory
        Where the decisions are saved (``pipeline.batch_state``), beside the kind's checkpoint.
    kind
        ``"topk"`` or ``"distinct"``: which entries of the control file are the kind's.
    """

    def __init__(
        self, queries: Sequence[Windowed], control: Path | None, directory: Path, *, kind: str = "topk"
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.queries = {q.name: q for q in queries}
        self.control = control
        self.state = BatchState(Path(directory))
        self._refused: set[tuple[str, Any]] = set()
        #: the resource manager's window reduction (query -> seconds): a window is at most this
        self.limits: dict[str, float] = {}

    def limit(self, windows: Mapping[str, float]) -> None:
        """The resource manager's window reduction for the next batch, keyed as the control file
        (:func:`window_key`): this kind's entries become :attr:`limits`."""
        self.limits = {
            name: s for key, s in windows.items() for kind, name in [_kind_of(key)] if kind == self.kind
        }

    def decide(self, batch_id: int) -> dict[str, int]:
        """The window of every query in batch ``batch_id``, in ns (a rerun reads the saved ones)."""
        mine = self.state.load(batch_id + 1)
        if mine is not None and mine.get("batch_id") == batch_id:
            return {name: int(ns) for name, ns in mine["windows"].items()}
        windows = {name: round(q.window_s * _NS) for name, q in self.queries.items()}
        for name, seconds in self._wanted().items():
            q = self.queries.get(name)
            label = KINDS[self.kind][1]
            problem = (
                f"no {label} query {name!r} ({label} queries: {', '.join(sorted(self.queries))})"
                if q is None
                else q.window_problem(seconds)
            )
            if problem is not None:
                self._refuse((name, seconds), f"{self.control}: {problem}; left out")
                continue
            assert q is not None
            windows[name] = round(seconds * _NS)
        for name, seconds in self.limits.items():
            q = self.queries.get(name)
            # the manager picks multiples in the query's range (analytics.window_plan): checked
            # again, as a knob from any source, and left out when it cannot be taken
            if q is not None and q.window_problem(seconds) is None:
                windows[name] = min(windows[name], round(seconds * _NS))
        self.state.save(batch_id, {"batch_id": batch_id, "windows": windows})
        return windows

    def _wanted(self) -> dict[str, float]:
        if self.control is None:
            return {}
        try:
            entries = read_windows(self.control)
        except ConfigError as exc:
            self._refuse(("file", str(exc)), f"{exc}; the configured windows stay")
            return {}
        mine = {}
        for key, seconds in entries.items():
            kind, name = _kind_of(key)
            if kind == self.kind:
                mine[name] = seconds
        return mine

    def _refuse(self, what: tuple[str, Any], message: str) -> None:
        if what not in self._refused:  # once per problem, not once per batch
            self._refused.add(what)
            log.warning(message)
