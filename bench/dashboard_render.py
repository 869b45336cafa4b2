"""How long each dashboard page takes to render in a real browser: Chromium driven by Playwright.

Two measures, each against the same budget (``netmon bench dashboard`` reports both):

- **a new tab** (:func:`render_times`): each page opened by its URL in a new tab, in the default
  range (the last 15 minutes). This pays for loading Streamlit's frontend, a new session and
  evaluating Plotly's 4.7 MB module before any chart is drawn: the cost of the first page an
  operator opens, or of a reload.
- **a page switch** (:func:`navigate_times`): the app opened once in one tab, its time range set
  to the last 24 h by the sidebar's radio (the range is kept in the session, not in the URL:
  ``dashboard.time_range``), then each page reached by clicking its link in the sidebar's
  navigation, as an operator moves between pages: no reload, the frontend and Plotly stay
  loaded, the server runs the page's script in the same session. A switch is timed from the
  click to :data:`_SWITCHED`: a script run started after the click has ended, the ``h1`` is the
  new page's title, and :data:`DRAWN` holds (until the new run has replaced them, the previous
  page's elements are still there, drawn, so :data:`DRAWN` alone could be the old page's).

:func:`render_times` starts the Streamlit dashboard (``dashboard.server``, as ``netmon dashboard``
does) on a free port of 127.0.0.1 over a data and a state directory, opens every page of the app
and
measures the seconds from asking for the page's URL to the page being drawn. Each page is opened
in a new tab of one browser context: a new Streamlit session (its own script run, nothing of
another tab's), with the static files (the frontend's code, Plotly's) in the browser's cache, as
for a user who has the dashboard open; the warm-up visit fills that cache.

**When is a page drawn?** When all of these hold at once, checked in the browser at each frame:

- the app's root element (``data-testid="stApp"``) says its script run is over:
  ``data-test-script-state="notRunning"``. Streamlit's frontend sets that attribute from the
  script-run state the server sends: ``initial`` until the first run of the session starts,
  ``running`` while it runs, ``notRunning`` once the server said the run finished (all its
  elements sent). This is the state behind the status widget's "Running..." indicator
  (``stStatusWidget``), which is also required to be gone; unlike the widget, which appears
  only after a delay and fades, the attribute is exact;
- the page's title (an ``h1`` in ``stMain``) is there: the page's own script ran, not only the
  navigation;
- no element is still a placeholder (``stSkeleton``): the frontend draws most kinds of element
  with code it loads on first use, showing a skeleton meanwhile, and it may still be loading
  after the run is over (the elements arrived, not yet drawn);
- every chart has been drawn: each Chart.js chart (``dashboard.chartjs``: a canvas
  ``data-netmon-chart`` its script marks ``data-drawn="1"`` once drawn, after Chart.js has
  loaded) and any Plotly
  chart (``stPlotlyChart``, a figure ``dashboard.chartjs`` could not translate) with its SVG
  (``.main-svg``): charts draw after their element arrives, so the end of the script run alone is
  too early;
- every table has been drawn: each of ``dashboard.tables`` (an element ``data-netmon-table`` its
  script marks ``data-drawn="1"`` once its rows are built) and any ``st.dataframe``
  (``stDataFrame``) with its canvas (the data grid draws on a canvas).

The pages' ``st.fragment(run_every=refresh_s)`` panels rerun every few seconds; the first complete
draw is what is timed. Playwright drives the Chromium the system has (``shutil.which("chromium")``,
Debian's ``chromium`` package: ``scripts/system-deps.sh``), never a browser of its own download.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashboard.server import APP, start_background, wait_healthy
from netmon.config import Config

__all__ = [
    "DRAWN",
    "PageRender",
    "browser",
    "navigate_times",
    "navigate_times_at",
    "pages",
    "render_times",
    "render_times_at",
    "serve",
    "settle",
]

#: The predicate, run in the page, that says it is drawn (see the module's doc).
DRAWN = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')) return false;
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main || !main.querySelector('h1')) return false;
  if (document.querySelector('[data-testid="stSkeleton"]')) return false;
  for (const c of main.querySelectorAll('[data-testid="stPlotlyChart"]'))
    if (!c.querySelector('.main-svg')) return false;
  for (const c of main.querySelectorAll('canvas[data-netmon-chart]'))
    if (c.dataset.drawn !== '1') return false;
  for (const t of main.querySelectorAll('[data-testid="stDataFrame"]'))
    if (!t.querySelector('canvas')) return false;
  for (const t of main.querySelectorAll('[data-netmon-table]'))
    if (t.dataset.drawn !== '1') return false;
  return true;
}"""
#: What a drawn page shows, counted in the page once :data:`DRAWN` holds.
_CONTENT = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const texts = (sel) => [...main.querySelectorAll(sel)].map((e) => e.innerText.trim());
  return {
    title: texts('h1')[0] || '',
    charts: (main.querySelectorAll('[data-testid="stPlotlyChart"] .main-svg').length
      ? main.querySelectorAll('[data-testid="stPlotlyChart"]').length : 0)
      + main.querySelectorAll('canvas[data-netmon-chart][data-drawn="1"]').length,
    tables: main.querySelectorAll('[data-testid="stDataFrame"]').length
      + main.querySelectorAll('[data-netmon-table][data-drawn="1"]').length,
    metrics: main.querySelectorAll('[data-testid="stMetric"]').length,
    exceptions: texts('[data-testid="stException"]'),
    alerts: texts('[data-testid="stAlert"]'),
    range: [...document.querySelectorAll('[data-testid="stSidebar"] label')]
      .filter((l) => l.querySelector('input[type="radio"]:checked'))
      .map((l) => l.innerText.trim())[0] || '',
  };
}"""
#: A page switch is over: the run started after the click (``__netmonArm``) has ended, the title
#: is the new page's (``arguments``: the title), and the page is drawn (:data:`DRAWN`). The title
#: check matters: until the new run has replaced the old page's elements, the old page is still
#: there, drawn.
_SWITCHED = (
    """(title) => {
  const marks = window.__netmonRun;
  if (marks.started === undefined || marks.ended === undefined) return false;
  const h1 = document.querySelector('[data-testid="stMain"] h1');
  if (!h1 || h1.innerText.trim() !== title) return false;
  return ("""
    + DRAWN
    + """)();
}"""
)
#: Installed in each tab before the page's own scripts: notes when a script run starts and ends
#: (``performance.now()``, ms since the tab began loading), for the breakdown of the time: the first
#: run of the tab, or the first after ``window.__netmonArm()`` (called just before a page switch).
_RUN_CLOCK = """(() => {
  const marks = (window.__netmonRun = {});
  let last = null;
  window.__netmonArm = () => {
    marks.armed = performance.now();
    marks.started = marks.ended = undefined;
  };
  new MutationObserver(() => {
    const app = document.querySelector('[data-testid="stApp"]');
    const state = app && app.getAttribute('data-test-script-state');
    if (state === last) return;
    last = state;
    if (state === 'running' && marks.started === undefined) marks.started = performance.now();
    if (state === 'notRunning' && marks.started !== undefined && marks.ended === undefined)
      marks.ended = performance.now();
  }).observe(document, {subtree: true, childList: true, attributes: true,
                        attributeFilter: ['data-test-script-state']});
})();"""
#: ``("pages/traffic.py", "Traffic", ...)`` in ``dashboard/app.py``'s list of pages
_PAGE_ENTRY = re.compile(r'\(\s*"pages/(\w+)\.py"\s*,\s*"([^"]+)"')


@dataclass(frozen=True)
class PageRender:
    """One page opened ``len(seconds)`` times: its title in the app, URL, the seconds until drawn
    each time, and what it showed the last time."""

    name: str
    url: str
    seconds: list[float]
    #: of the last opening: seconds until the script run started (the frontend loaded and
    #: connected), of the run (the server), and from its end to the page drawn (the browser)
    load_s: float = 0.0
    script_s: float = 0.0
    draw_s: float = 0.0
    title: str = ""
    charts: int = 0
    tables: int = 0
    metrics: int = 0
    exceptions: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    #: the sidebar's time range in force when drawn (its radio's choice)
    range: str = ""
    #: page switches only: the seconds of the first, unmeasured visit of the session (the
    #: process's caches cold for that page's range, unless its warm-up has read it), or None
    first_s: float | None = None
    #: the seconds the server took to settle before the first page was opened (:func:`settle`:
    #: its warm-up's first pass), or None when not waited for
    settled_s: float | None = None

    @property
    def median_s(self) -> float:
        """The median of :attr:`seconds` (what a page costs, less the noise of a shared machine).

        >>> PageRender("Traffic", "/", [0.9, 3.0, 1.1]).median_s
        1.1
        """
        return float(statistics.median(self.seconds))


def pages() -> list[tuple[str, str]]:
    """The app's pages as ``(title, url path)``, in its order, read from ``dashboard/app.py``
    (the first page is the default one, at ``/``; the others at ``/<script name>``)."""
    found = _PAGE_ENTRY.findall(APP.read_text())
    return [(title, "" if i == 0 else script) for i, (script, title) in enumerate(found)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(data_dir: Path, state_dir: Path, log_file: Path, *, timeout_s: float = 60.0) -> Iterator[str]:
    """The dashboard over ``data_dir`` and ``state_dir`` on a free port of 127.0.0.1, until the
    block ends; yields its URL."""
    with _serve(data_dir, state_dir, log_file, timeout_s=timeout_s) as (url, _proc):
        yield url


def _cpu_s(pid: int) -> float | None:
    """The CPU seconds (user and system, every thread) process ``pid`` has used (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, *, idle_s: float = 2.0, busy_below: float = 0.05, timeout_s: float = 180.0) -> float:
    """Wait until process ``pid`` (the dashboard's server) is idle: less than ``busy_below`` of a
    core over ``idle_s``, as once its warm-up's first pass is over (``dashboard.warmup``); the
    seconds waited (``timeout_s`` at most: then it returns anyway). A dashboard that has been
    serving is so when a user arrives."""
    began = time.perf_counter()
    last = _cpu_s(pid)
    while time.perf_counter() - began < timeout_s:
        time.sleep(idle_s)
        now = _cpu_s(pid)
        if now is None or last is None or now - last < busy_below * idle_s:
            break
        last = now
    return time.perf_counter() - began - idle_s


@contextlib.contextmanager
def _serve(
    data_dir: Path, state_dir: Path, log_file: Path, *, timeout_s: float = 60.0
) -> Iterator[tuple[str, subprocess.Popen]]:
    """:func:`serve`, yielding the server's process too."""
    cfg = Config().replace(paths={"data_dir": Path(data_dir), "state_dir": Path(state_dir)})
    port = _free_port()
    proc = start_background(cfg, log_file, host="127.0.0.1", port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(url, timeout_s):
            raise RuntimeError(
                f"the dashboard did not answer on {url} within {timeout_s:g} s (log: {log_file})"
            )
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def browser() -> str | None:
    """The system's Chromium (``chromium`` on the PATH, or ``$NETMON_CHROMIUM``), or None."""
    return os.environ.get("NETMON_CHROMIUM") or shutil.which("chromium")


def render_times(
    data_dir: Path,
    state_dir: Path,
    log_file: Path,
    *,
    rounds: int = 1,
    timeout_s: float = 60.0,
    warmup: bool = True,
) -> list[PageRender]:
    """Open every page of the dashboard over ``data_dir`` in Chromium, ``rounds`` times (each
    round every page in the app's order); how long each took.

    ``warmup``: first wait for the server to be idle (:func:`settle`: the dashboard's own
    warm-up, ``dashboard.warmup``, has read the last 24 h; :attr:`PageRender.settled_s`) and
    open the default page once, unmeasured, so the Streamlit process has imported the pages'
    libraries (pandas, Plotly) as a dashboard that has been serving has. A page not drawn within
    ``timeout_s`` raises Playwright's ``TimeoutError``. Raises ``RuntimeError`` when there is no
    Chromium.
    """
    with _serve(data_dir, state_dir, log_file) as (url, proc):
        settled = settle(proc.pid) if warmup else None
        found = render_times_at(url, rounds=rounds, timeout_s=timeout_s, warmup=warmup)
        return [dataclasses.replace(r, settled_s=settled) for r in found]


def render_times_at(
    url: str, *, rounds: int = 1, timeout_s: float = 60.0, warmup: bool = True
) -> list[PageRender]:
    """:func:`render_times` against a dashboard already serving at ``url`` (e.g. ``netmon up``'s)."""
    from playwright.sync_api import sync_playwright

    executable = browser()
    if executable is None:
        raise RuntimeError("no Chromium on the PATH (apt-get install chromium; scripts/system-deps.sh)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            context = chromium.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(_RUN_CLOCK)
            if warmup:
                _open(context, url, "", timeout_s)
            times: dict[str, list[float]] = {}
            shown: dict[str, dict[str, Any]] = {}
            for _ in range(rounds):
                for name, path in pages():
                    seconds, shown[name] = _open(context, url, path, timeout_s)
                    times.setdefault(name, []).append(seconds)
            return [PageRender(name, f"{url}/{path}", times[name], **shown[name]) for name, path in pages()]
        finally:
            chromium.close()


def _open(context: Any, url: str, path: str, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Open ``url/path`` in a new tab: the seconds until :data:`DRAWN`, and what it shows."""
    page = context.new_page()
    try:
        began = time.perf_counter()
        page.goto(f"{url}/{path}", wait_until="commit", timeout=timeout_s * 1000)
        page.wait_for_function(DRAWN, polling="raf", timeout=timeout_s * 1000)
        seconds = time.perf_counter() - began
        shown = dict(page.evaluate(_CONTENT))
        marks = page.evaluate("() => [window.__netmonRun.started, window.__netmonRun.ended]")
        if None not in marks:
            # performance.now() counts from the navigation's start, just after ``began``
            started, ended = (float(m) / 1000 for m in marks)
            shown.update(load_s=started, script_s=ended - started, draw_s=max(0.0, seconds - ended))
        return seconds, shown
    finally:
        page.close()


def navigate_times(
    data_dir: Path,
    state_dir: Path,
    log_file: Path,
    *,
    rounds: int = 1,
    time_range: str = "last 24 h",
    timeout_s: float = 60.0,
) -> list[PageRender]:
    """Open the dashboard once, in one tab, set the sidebar's time range to ``time_range`` (its
    radio, as a user does: the range is kept in the session, not the URL), then move to every
    page ``rounds`` times by clicking its link in the sidebar's navigation (no reload: the
    frontend and Plotly stay loaded, Streamlit runs the page's script in the same session); how
    long each switch took, from the click to :data:`_SWITCHED`.

    A first round, unmeasured, visits every page once (:attr:`PageRender.first_s`): as a
    dashboard that has been serving, the process has then imported the pages' libraries and read
    the range's files once. The measured rounds visit the pages in the app's order, each a switch
    from the one before (the first from the last page). Raises ``RuntimeError`` when there is no
    Chromium or a page with a range picker shows another range than ``time_range``.

    The server is first left to settle (:func:`settle`: its warm-up, ``dashboard.warmup``, has
    read the last 24 h; :attr:`PageRender.settled_s`), as a dashboard that has been serving.
    """
    with _serve(data_dir, state_dir, log_file) as (url, proc):
        settled = settle(proc.pid)
        found = navigate_times_at(url, rounds=rounds, time_range=time_range, timeout_s=timeout_s)
        return [dataclasses.replace(r, settled_s=settled) for r in found]


def navigate_times_at(
    url: str, *, rounds: int = 1, time_range: str = "last 24 h", timeout_s: float = 60.0
) -> list[PageRender]:
    """:func:`navigate_times` against a dashboard already serving at ``url`` (e.g. ``netmon up``'s)."""
    from playwright.sync_api import sync_playwright

    executable = browser()
    if executable is None:
        raise RuntimeError("no Chromium on the PATH (apt-get install chromium; scripts/system-deps.sh)")
    listed = pages()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            context = chromium.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(_RUN_CLOCK)
            tab = context.new_page()
            tab.goto(url, wait_until="commit", timeout=timeout_s * 1000)
            tab.wait_for_function(DRAWN, polling="raf", timeout=timeout_s * 1000)
            title = listed[0][0]
            # the range: the sidebar's radio, then wait for the run it starts to be drawn
            radio = tab.locator('[data-testid="stSidebar"] label').filter(
                has=tab.get_by_text(time_range, exact=True)
            )
            _switch(tab, lambda: radio.first.click(), title, timeout_s)
            first: dict[str, float] = {}
            for name, _ in listed[1:] + listed[:1]:
                first[name], _shown = _switch(tab, _clicking(tab, name), name, timeout_s)
            times: dict[str, list[float]] = {}
            shown: dict[str, dict[str, Any]] = {}
            for _ in range(rounds):
                for name, _ in listed[1:] + listed[:1]:
                    seconds, shown[name] = _switch(tab, _clicking(tab, name), name, timeout_s)
                    times.setdefault(name, []).append(seconds)
                    if shown[name].get("range") not in ("", time_range):  # "": no range (Alerts)
                        raise RuntimeError(f"{name} shows the range {shown[name].get('range')!r}")
            out = [
                PageRender(name, f"{url}/{path}", times[name], first_s=first[name], **shown[name])
                for name, path in listed
            ]
        finally:
            chromium.close()
    return out


def _clicking(tab: Any, title: str) -> Any:
    """A click on the sidebar's link to the page ``title``."""
    link = tab.locator('[data-testid="stSidebarNavLink"]').filter(has=tab.get_by_text(title, exact=True))
    return lambda: link.first.click()


def _switch(tab: Any, click: Any, title: str, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """``click()`` in ``tab``: the seconds until the run it starts is over and the page ``title``
    is drawn (:data:`_SWITCHED`), and what it shows, with the breakdown of the time."""
    tab.evaluate("() => window.__netmonArm()")
    began = time.perf_counter()
    click()
    tab.wait_for_function(_SWITCHED, arg=title, polling="raf", timeout=timeout_s * 1000)
    seconds = time.perf_counter() - began
    shown = dict(tab.evaluate(_CONTENT))
    armed, started, ended = tab.evaluate(
        "() => [window.__netmonRun.armed, window.__netmonRun.started, window.__netmonRun.ended]"
    )
    if None not in (armed, started, ended):
        load, run = (float(started) - float(armed)) / 1000, (float(ended) - float(started)) / 1000
        shown.update(load_s=load, script_s=run, draw_s=max(0.0, seconds - load - run))
    return seconds, shown
