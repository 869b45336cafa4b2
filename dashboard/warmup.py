"""The dashboard's warm-up: the last 24 h of every kind read into the process's caches before a
user asks for them.

A page's read keeps each file's rows and footer statistics in the dashboard's process
(``dashboard.bounded``: :class:`~dashboard.bounded.Rows`, :class:`~dashboard.bounded.Footers`),
so a redraw reads only the files committed since. But the first visit of a page to a range the
process has not read yet reads every file of it: over a day of one-minute batches, 1,440 files a
kind (2,880 for ``sys``), 3 to 12 s a page. The warm-up does those reads in the server's process,
in a thread of its own, when the server starts (:func:`start`, from ``dashboard.server`` once
Streamlit's runtime exists), so that
they are done when a user arrives: it reads the longest relative range the sidebar offers
(:data:`SECONDS`, ``dashboard.time_range.RELATIVE``) of each kind, up to its newest row, through
the very functions and columns the pages read with (``bounded.newest`` and ``bounded.read_range``
with :data:`READS`' columns: the cache's keys include the columns; for ``sys``, the Resources and
Pipeline pages' ``data_resources.read_recent`` and its commits' cache), so a page finds every
file it needs in the cache. It warms no ``st.cache_data`` entry: those expire after ``refresh_s`` (a few
seconds); what a page costs after them is what a page switch costs.

Then it keeps them warm: every ``[dashboard] refresh_s``, or as much longer as keeps it to a tenth
of a core (:data:`IDLE_FACTOR` times its last pass's time), a kind whose commit logs changed is
read again from its newest row at the last pass (less its batches' disorder): only the new
files, a few stats and the footers of a binary search. A kind whose compacted hours changed is
read again in full (a compaction writes new files). A kind whose directories did not change is
not looked at: over a finished replay, the warm-up costs nothing after its first pass.

**Bounded memory.** The warm-up adds no cache: it fills the process's (at most 1 GiB,
``bounded.Rows``, least recently used out first, counted as the memory the tables hold,
``bounded.table_cost``), and stops once that is full (a pass that made the cache drop tables
warms no further kind: a warm-up larger than the cache would only read its files again and
again). Over a day of per-minute results the last 24 h of every kind counts 150 MB there; the
process grew by 180 MB with the ``sys`` commits' rows (``data_resources.commits``) and the
footers.

**Never in the way.** A page asking for a file the warm-up is reading waits for that read instead
of reading it again (``bounded``'s single flight); an error is logged once (a warning, the first
time that kind fails so) and never raised; on success it says nothing.
"""

from __future__ import annotations

import datetime as dt
import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dashboard import bounded, data_distinct, data_joins, data_resources, data_topk, time_range
from netmon.config import Config
from netmon.results import COMMITS, COMPACTED, results_dir
from netmon.results_range import CommitRows, sinks

__all__ = ["IDLE_FACTOR", "READS", "SECONDS", "Pass", "Warmup", "start"]

log = logging.getLogger(__name__)

#: Each kind the pages read, with the columns they read it with (None: all).
READS: dict[str, list[str] | None] = {
    "traffic": None,  # dashboard.data.traffic
    "topk": data_topk.READ,  # dashboard.data_topk.topk and view
    "distinct": data_distinct.COLUMNS,  # dashboard.data_distinct.distinct_counts
    "joins": data_joins.JOIN_COLUMNS,  # dashboard.data_joins.join_results
    "shedding": None,  # dashboard.data_joins.shedding_stats
    "sys": None,  # dashboard.data_resources (Resources, Pipeline): its commits' rows, and the
    # footers dashboard.data.newest reads to end the pages' range
}
#: The range warmed: the longest relative range of the sidebar (the last 24 h).
SECONDS = max(time_range.RELATIVE.values())
#: After a pass the warm-up sleeps at least this many times as long as the pass took (and at
#: least ``refresh_s``): at most a tenth of a core, whatever the data.
IDLE_FACTOR = 9
#: Imported when the warm-up starts, as the pages import them (about a second on first import).
_LIBRARIES = ("pandas", "plotly.graph_objects", "dashboard.charts", "dashboard.buckets")


@dataclass
class Pass:
    """One pass of the warm-up: the kinds read (in full or since the last pass), the files whose
    rows were read (not from the cache), and its seconds."""

    full: list[str] = field(default_factory=list)
    since: list[str] = field(default_factory=list)
    files: int = 0
    seconds: float = 0.0
    #: the cache dropped tables during the pass: it stopped there
    overflowed: bool = False


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class Warmup:
    """The warm-up of one data directory (``cfg.paths.data_dir``) into ``footers`` (default: the
    process's, ``bounded.footers()``); :meth:`run` is one pass, :meth:`loop` passes until stopped."""

    def __init__(
        self,
        cfg: Config,
        *,
        footers: bounded.Footers | None = None,
        commits: CommitRows | None = None,
        seconds: float = SECONDS,
    ) -> None:
        # The pages' own construction of the directories (dashboard.data.read_range): the
        # cache's keys are the files' paths as strings.
        data_dir = str(cfg.paths.data_dir)
        self.cfg = cfg.replace(paths={"data_dir": Path(data_dir)})
        self.footers = bounded.footers() if footers is None else footers
        #: the Resources page's cache of the ``sys`` commits' rows (default: the process's)
        self.commits = data_resources.commits() if commits is None else commits
        self.seconds = seconds
        #: each kind's newest row at its last pass (the next pass reads from there)
        self._newest: dict[str, dt.datetime] = {}
        #: each kind's directories' times at its last pass: (commit logs, compacted hours)
        self._seen: dict[str, tuple[tuple[int | None, ...], tuple[int | None, ...]]] = {}
        self._logged: set[tuple[str, str]] = set()
        self._full = False  # the cache overflowed once: no kind is warmed in full again

    def _times(self, kind: str) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
        """The modification times of ``kind``'s directories: its sinks and their commit logs
        (a batch committed or removed), and their compacted hours (a compaction)."""
        directory = results_dir(self.cfg, kind)
        found = sinks(directory)
        commits = (_mtime(directory), *(_mtime(s) for s in found), *(_mtime(s / COMMITS) for s in found))
        return commits, tuple(_mtime(s / COMPACTED) for s in found)

    def run(self) -> Pass:
        """One pass over :data:`READS` (never raises: a kind's error is logged once)."""
        began = time.perf_counter()
        out = Pass()
        read, evicted = self.footers.rows.read, self.footers.rows.evicted
        parsed = self.commits.parsed
        for kind, columns in READS.items():
            try:
                how = self._warm(kind, columns)
            except Exception as exc:  # never in the page's way: said once, tried again next pass
                self._say(kind, exc)
                continue
            if how == "full":
                out.full.append(kind)
            elif how == "since":
                out.since.append(kind)
            if self.footers.rows.evicted != evicted:
                out.overflowed = self._full = True
                self._say(
                    "cache",
                    f"the last {self.seconds / 3600:g} h of results hold more than the row cache "
                    f"({self.footers.rows.max_bytes >> 20} MB): warmed up to {kind}",
                )
                break
        out.files = self.footers.rows.read - read + self.commits.parsed - parsed
        out.seconds = time.perf_counter() - began
        return out

    def _warm(self, kind: str, columns: list[str] | None) -> str:
        """Read ``kind``'s range into the cache: ``"full"`` (the whole range), ``"since"`` (from
        its newest row at the last pass) or ``""`` (nothing changed, or nothing to read)."""
        times = self._times(kind)
        seen = self._seen.get(kind)
        if seen == times:
            return ""
        directory = results_dir(self.cfg, kind)
        column = bounded.TIME_COLUMNS[kind]
        disorder_s = bounded.batch_disorder_s(self.cfg, kind)
        by = bounded.COMPACTION_COLUMNS[kind]
        newest = bounded.newest(
            directory, column, compacted_by=by, footers=self.footers, disorder_s=disorder_s
        )
        if newest is None:
            self._seen[kind] = times
            return ""
        start = newest - dt.timedelta(seconds=self.seconds)
        before = self._newest.get(kind)
        full = before is None or seen is None or seen[1] != times[1]
        if full and self._full:
            return ""
        if not full and before is not None:
            start = max(start, before - dt.timedelta(seconds=disorder_s))
        if kind == "sys":  # the Resources and Pipeline pages' reader (dashboard.data_resources)
            if full:
                data_resources.read_recent(directory, self.seconds, cache=self.commits)
            else:
                data_resources.read_between(directory, start, newest, cache=self.commits)
        else:
            bounded.read_range(
                directory,
                column,
                start,
                newest,
                columns,
                compacted_by=by,
                footers=self.footers,
                disorder_s=disorder_s,
            )
        self._newest[kind], self._seen[kind] = newest, times
        return "full" if full else "since"

    def _say(self, kind: str, problem: object) -> None:
        """Log ``problem`` once (a warning); the same problem again is not said."""
        text = f"{type(problem).__name__}: {problem}" if isinstance(problem, Exception) else str(problem)
        if (kind, text) in self._logged:
            return
        self._logged.add((kind, text))
        log.warning("dashboard warm-up (%s): %s", kind, text)

    def loop(self, stop: threading.Event, refresh_s: float) -> None:
        """Passes until ``stop`` is set: the first at once (the libraries the pages import first),
        then each after ``refresh_s`` or :data:`IDLE_FACTOR` times the last pass's time."""
        for name in _LIBRARIES:
            try:
                importlib.import_module(name)
            except Exception as exc:
                self._say("import", exc)
        while not stop.is_set():
            done = self.run()
            stop.wait(max(refresh_s, IDLE_FACTOR * done.seconds))


def start(cfg: Config) -> tuple[Warmup, threading.Event]:
    """Start the warm-up of ``cfg``'s data directory in a daemon thread (it ends with the
    process); the warm-up and the event that stops it."""
    warm, stop = Warmup(cfg), threading.Event()
    thread = threading.Thread(
        target=warm.loop, args=(stop, cfg.dashboard.refresh_s), name="netmon-dashboard-warmup", daemon=True
    )
    thread.start()
    return warm, stop
