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

The granularity knob (seed 004's CKSV "granularity"): ``netmon tune --granularity QUERY=SECONDS``
writes a top-k query's sub-window into ``<data_dir>/control/granularity.json`` (a distinct
query's as ``distinct/<name>``, as in the windows' file); :class:`GranularityKnobs` decides each
batch's factor ``m`` of one kind's queries (a whole multiple of the configured ``sub_window_s``,
at most ``[resources] sub_window_max_factor``, the window a multiple of it), saved before the
batch like the windows, and the kind's granularity operator (``pipeline.topk``,
``pipeline.distinct``, ``analytics.granularity``) puts it in force at the first instant that is
a multiple of both the old and the new sub-window.
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

__all__ = [
    "KINDS",
    "Grained",
    "GranularityKnobs",
    "WindowKnobs",
    "Windowed",
    "granularity_factor",
    "granularity_file",
    "read_windows",
    "window_file",
    "window_key",
    "write_windows",
]

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


class _Knobs:
    """What :class:`WindowKnobs` and :class:`GranularityKnobs` share: one kind's entries of a
    control file, each problem logged once, and a batch's decision saved before it runs and read
    back by a rerun."""

    #: what stays when the control file cannot be read ("windows", "sub-windows")
    _KEPT = ""

    def __init__(self, queries: Sequence[Any], control: Path | None, directory: Path, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.queries = {q.name: q for q in queries}
        self.control = control
        self.state = BatchState(Path(directory))
        self._refused: set[tuple[Any, ...]] = set()

    def _mine(self, entries: Mapping[str, Any]) -> dict[str, Any]:
        """This kind's entries of ``entries`` (keyed as the control file, :func:`window_key`),
        by query name."""
        return {name: v for key, v in entries.items() for kind, name in [_kind_of(key)] if kind == self.kind}

    def _saved(self, batch_id: int, field: str) -> dict[str, int] | None:
        """The decision saved for batch ``batch_id`` (a rerun), or None."""
        mine = self.state.load(batch_id + 1)
        if mine is not None and mine.get("batch_id") == batch_id:
            return {name: int(v) for name, v in mine[field].items()}
        return None

    def _wanted(self) -> dict[str, float]:
        if self.control is None:
            return {}
        try:
            entries = read_windows(self.control)
        except ConfigError as exc:
            self._refuse(("file", str(exc)), f"{exc}; the configured {self._KEPT} stay")
            return {}
        return self._mine(entries)

    def _refuse(self, what: tuple[Any, ...], message: str) -> None:
        if what not in self._refused:  # once per problem, not once per batch
            self._refused.add(what)
            log.warning(message)


class WindowKnobs(_Knobs):
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

    _KEPT = "windows"

    def __init__(
        self, queries: Sequence[Windowed], control: Path | None, directory: Path, *, kind: str = "topk"
    ) -> None:
        super().__init__(queries, control, directory, kind)
        #: the resource manager's window reduction (query -> seconds): a window is at most this
        self.limits: dict[str, float] = {}

    def limit(self, windows: Mapping[str, float]) -> None:
        """The resource manager's window reduction for the next batch, keyed as the control file
        (:func:`window_key`): this kind's entries become :attr:`limits`."""
        self.limits = self._mine(windows)

    def decide(self, batch_id: int) -> dict[str, int]:
        """The window of every query in batch ``batch_id``, in ns (a rerun reads the saved ones)."""
        saved = self._saved(batch_id, "windows")
        if saved is not None:
            return saved
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


# -- the granularity knob (seed 004's CKSV "granularity", the coarse step) ------------------------


def granularity_file(cfg: Config) -> Path:
    """The control file of the sub-windows wanted (``netmon tune --granularity`` writes it):
    ``<data_dir>/control/granularity.json``, ``{"top-sources": 2, "distinct/ddos": 4}`` (seconds;
    a distinct query's entry is ``distinct/<name>``, :func:`window_key`), replaced atomically and
    read as :func:`read_windows` reads the windows."""
    return Path(cfg.paths.data_dir) / "control" / "granularity.json"


class Grained(Protocol):
    """A query with a granularity knob (``TopKQuery``, ``DistinctQuery``)."""

    @property
    def name(self) -> str: ...
    @property
    def sub_window_s(self) -> float: ...


def granularity_factor(
    q: Grained, seconds: float, window_s: float, max_factor: float, *, label: str = "top-k"
) -> tuple[int, str | None]:
    """``(m, problem)``: the whole factor ``seconds / sub_window_s`` and what makes it refused
    (None: it can be taken at the window ``window_s``); ``label`` names the query's kind.

    >>> from netmon.config import TopKQuery
    >>> q = TopKQuery(name="src", key="src_ip", window_s=6.0, sub_window_s=1.0, k=3)
    >>> granularity_factor(q, 2, 6, 4.0), granularity_factor(q, 4, 6, 4.0)[1]
    ((2, None), "top-k query 'src': sub-window 4 s: the window 6 s is not a multiple of it")
    """
    where = f"{label} query {q.name!r}: sub-window {seconds:g} s"
    b_us, s_us = round(q.sub_window_s * 1e6), round(seconds * 1e6)
    m = s_us // b_us if b_us else 0
    if not (s_us > 0 and abs(seconds * 1e6 - s_us) < 1e-3 and s_us % b_us == 0):
        return m, f"{where} is not a whole multiple of sub_window_s = {q.sub_window_s:g}"
    if m > max_factor:
        limit = f"sub_window_max_factor = {max_factor:g} times sub_window_s = {q.sub_window_s:g}"
        return m, f"{where} is more than {limit}"
    if round(window_s * 1e6) % s_us:
        return m, f"{where}: the window {window_s:g} s is not a multiple of it"
    return m, None


class GranularityKnobs(_Knobs):
    """Each batch's sub-window factors ``m`` (Γ) of one kind's queries, decided once and saved
    before the batch.

    What ``netmon tune --granularity`` asks (:func:`granularity_file`; the kind's entries: a
    top-k query's name, ``distinct/<name>`` for a distinct query), made at least as coarse as the
    resource manager's coarse step (:attr:`floors`, factors); an entry that cannot be taken at
    the batch's window (:func:`granularity_factor`) is logged once and left out, and then the
    query's configured sub-window (``m = 1``) or the manager's floor holds. A batch that Spark
    runs again reads the saved factors, whatever the control file says by then.
    """

    _KEPT = "sub-windows"

    def __init__(
        self,
        queries: Sequence[Grained],
        control: Path | None,
        directory: Path,
        *,
        max_factor: float = 4.0,
        kind: str = "topk",
    ) -> None:
        super().__init__(queries, control, directory, kind)
        self.max_factor = max_factor
        #: the resource manager's coarse step (query -> m): a sub-window is at least this coarse
        self.floors: dict[str, int] = {}

    def floor(self, factors: Mapping[str, int]) -> None:
        """The resource manager's coarse step for the next batch, keyed as the control file
        (:func:`window_key`): this kind's entries become :attr:`floors`."""
        self.floors = {name: int(m) for name, m in self._mine(factors).items()}

    def decide(self, batch_id: int, windows_ns: Mapping[str, int]) -> dict[str, int]:
        """The factor ``m`` of every query in batch ``batch_id`` at its window (a rerun reads the
        saved ones)."""
        saved = self._saved(batch_id, "granularity")
        if saved is not None:
            return saved
        label = KINDS[self.kind][1]
        factors = dict.fromkeys(self.queries, 1)
        for name, seconds in self._wanted().items():
            q = self.queries.get(name)
            if q is None:
                known = ", ".join(sorted(self.queries))
                self._refuse(
                    (name, seconds),
                    f"{self.control}: no {label} query {name!r} ({label} queries: {known}); left out",
                )
                continue
            window_s = windows_ns[name] / _NS
            m, problem = granularity_factor(q, seconds, window_s, self.max_factor, label=label)
            if problem is not None:
                self._refuse((name, seconds, windows_ns[name]), f"{self.control}: {problem}; left out")
                continue
            factors[name] = m
        for name, m in self.floors.items():
            q = self.queries.get(name)
            if q is None or m <= factors[name]:
                continue
            if granularity_factor(q, m * q.sub_window_s, windows_ns[name] / _NS, self.max_factor)[1] is None:
                factors[name] = m
        self.state.save(batch_id, {"batch_id": batch_id, "granularity": factors})
        return factors
