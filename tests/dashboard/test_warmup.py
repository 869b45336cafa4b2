"""The dashboard's warm-up (``dashboard.warmup``): after it, the pages' reads of the last 24 h open
no Parquet file and return what an uncached read returns; later passes read only the new files;
errors are said once and never raised; a file asked for by two threads at once is read once.

The day is ``bench.dashboard_day``'s (every kind, written the pipeline's way), a batch every
30 minutes so that it is written in a second.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench.dashboard_day import DaySize, write_day
from dashboard import bounded, data, data_distinct, data_joins, data_resources, data_topk, server, warmup
from netmon.config import Config
from netmon.results import results_dir
from netmon.results_range import CommitRows
from pipeline.batch_sink import write_table

SMALL = DaySize(batch_s=1800, slide_s=900, topk_rows=10, distinct_rows=6, joins_file_s=1800)
KINDS = ("traffic", "topk", "distinct", "joins", "shedding", "sys")


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Config:
    root = tmp_path_factory.mktemp("warmup")
    write_day(root / "data", root / "state", size=SMALL)
    return Config().replace(paths={"data_dir": root / "data", "state_dir": root / "state"})


@pytest.fixture
def process_cache(monkeypatch: pytest.MonkeyPatch, day: Config) -> bounded.Footers:
    """A fresh process-wide cache (``bounded.footers()``), and the app's configuration on the day."""
    footers = bounded.Footers()
    monkeypatch.setattr(bounded, "_FOOTERS", footers)
    monkeypatch.setattr(data_resources, "_ROWS", CommitRows())
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(day.paths.data_dir))
    monkeypatch.setenv("NETMON_STATE_DIR", str(day.paths.state_dir))
    data.config.clear()
    yield footers
    data.config.clear()


def _uncached(read: Any) -> Any:
    """A read of the pages without its ``st.cache_data`` layer (``dashboard.data.cached``)."""
    return read.__wrapped__


class Opens:
    """Every Parquet file opened from now on (any ``pyarrow.parquet`` entry point)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        parquet_file, read_table = pq.ParquetFile, pq.read_table

        def opening(source: Any, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(Path(source))
            return parquet_file(source, *args, **kwargs)

        def table(source: Any, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(Path(source))
            return read_table(source, *args, **kwargs)

        monkeypatch.setattr(pq, "ParquetFile", opening)
        monkeypatch.setattr(pq, "read_table", table)


def _pages_reads(data_dir: str) -> dict[str, pd.DataFrame]:
    """What each page reads over the last 24 h (the sidebar's longest relative range): the very
    functions the pages call, without ``st.cache_data``'s layer (``__wrapped__``)."""
    seconds = warmup.SECONDS
    out: dict[str, pd.DataFrame] = {}
    reads = {
        "traffic": data.traffic,
        "topk": data_topk.topk,
        "distinct": data_distinct.distinct_counts,
        "joins": data_joins.join_results,
        "shedding": data_joins.shedding_stats,
    }
    for kind, read in reads.items():
        newest = _uncached(data.newest)(data_dir, kind)
        assert newest is not None, kind
        out[kind] = _uncached(read)(data_dir, newest - dt.timedelta(seconds=seconds), newest)
    out["sys"] = _uncached(data_resources.sys_stats)(data_dir, seconds)
    return out


def test_after_the_warm_up_the_pages_reads_open_no_file(day, process_cache, monkeypatch) -> None:
    data_dir = str(day.paths.data_dir)
    want = _pages_reads(data_dir)  # uncached: a cache of its own, dropped
    assert all(len(want[k]) for k in KINDS), {k: len(v) for k, v in want.items()}
    monkeypatch.setattr(bounded, "_FOOTERS", bounded.Footers())
    monkeypatch.setattr(data_resources, "_ROWS", CommitRows())
    done = warmup.Warmup(day).run()
    assert done.full == list(KINDS) and not done.since and not done.overflowed
    assert done.files == bounded.footers().rows.read + data_resources.commits().parsed
    assert data_resources.commits().parsed >= len(want["sys"]) > 0
    opens = Opens(monkeypatch)
    got = _pages_reads(data_dir)
    assert opens.paths == []  # every file the pages need was read by the warm-up
    for kind in KINDS:
        pd.testing.assert_frame_equal(got[kind], want[kind], obj=kind)
    # A second warm-up of the same process finds every file in the cache; a second pass over
    # data that did not change looks at nothing.
    warm = warmup.Warmup(day)
    assert warm.run().files == 0 and opens.paths == []
    nothing = warm.run()
    assert (nothing.full, nothing.since, nothing.files, opens.paths) == ([], [], 0, [])


def test_a_later_pass_reads_only_the_new_files(day, process_cache, tmp_path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(day.paths.data_dir, copy)
    cfg = day.replace(paths={"data_dir": copy})
    warm = warmup.Warmup(cfg, footers=process_cache, commits=CommitRows())
    assert warm.run().full == list(KINDS)
    read = process_cache.rows.read
    # two more traffic batches, committed as the pipeline does, half an hour later each
    traffic = results_dir(cfg, "traffic")
    ids = sorted(int(p.name.split("-")[1]) for p in traffic.glob("batch-*"))
    last = pq.read_table(next((traffic / f"batch-{ids[-1]:06d}").glob("*.parquet")))
    for n in (1, 2):
        step = pa.scalar(dt.timedelta(seconds=SMALL.batch_s * n), pa.duration("us"))
        later = last
        for name in ("window_start", "window_end"):
            later = later.set_column(later.schema.get_field_index(name), name, pc.add(later[name], step))
        write_table(later, traffic, ids[-1] + n)
    done = warm.run()
    assert (done.full, done.since) == ([], ["traffic"])
    assert process_cache.rows.read - read == 2 == done.files
    # the pages' read of the last 24 h now opens nothing
    before = process_cache.rows.read
    newest = _uncached(data.newest)(str(copy), "traffic")
    assert newest == pc.max(later["window_end"]).as_py()
    _uncached(data.traffic)(str(copy), newest - dt.timedelta(days=1), newest)
    assert process_cache.rows.read == before


def test_an_error_is_said_once_and_never_raised(day, process_cache, monkeypatch, caplog) -> None:
    real = bounded.read_range

    def failing(directory: Path, *args: Any, **kwargs: Any) -> Any:
        if Path(directory).name == "topk":
            raise OSError("disk on fire")
        return real(directory, *args, **kwargs)

    monkeypatch.setattr(bounded, "read_range", failing)
    warm = warmup.Warmup(day, footers=process_cache, commits=CommitRows())
    with caplog.at_level(logging.INFO, logger="dashboard.warmup"):
        first = warm.run()
        warm._seen.clear()  # look again at every kind
        warm.run()
    assert "topk" not in first.full and "traffic" in first.full and "sys" in first.full
    said = [r for r in caplog.records if r.name == "dashboard.warmup"]
    assert [r.levelno for r in said] == [logging.WARNING]
    assert "topk" in said[0].getMessage() and "disk on fire" in said[0].getMessage()


def test_a_warm_up_larger_than_the_cache_stops(day, monkeypatch, caplog) -> None:
    footers = bounded.Footers(max_row_bytes=200_000)
    with caplog.at_level(logging.WARNING, logger="dashboard.warmup"):
        done = warmup.Warmup(day, footers=footers, commits=CommitRows()).run()
    assert done.overflowed and len(done.full) < len(KINDS)
    assert footers.rows.bytes <= footers.rows.max_bytes
    assert "row cache" in caplog.records[0].getMessage()


def test_a_file_asked_for_by_two_threads_at_once_is_read_once(day, monkeypatch) -> None:
    rows = bounded.Rows()
    path = next(results_dir(day, "traffic").glob("batch-*/*.parquet"))
    reading, release = threading.Event(), threading.Event()
    opened: list[Path] = []
    parquet_file = pq.ParquetFile

    def slow(source: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(Path(source))
        reading.set()
        release.wait(10)
        return parquet_file(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", slow)
    got: list[Any] = []
    first = threading.Thread(target=lambda: got.append(rows.table(path, None)))
    first.start()
    assert reading.wait(10)
    second = threading.Thread(target=lambda: got.append(rows.table(path, None)))
    second.start()
    time.sleep(0.3)  # the second asks while the first reads (without single flight: it reads too)
    release.set()
    first.join(10)
    second.join(10)
    assert opened == [path] and rows.read == 1
    assert len(got) == 2 and got[0] is got[1]


def test_the_server_process_starts_the_warm_up_then_streamlit(monkeypatch, day) -> None:
    command = server._command(day, "127.0.0.1", 8599)
    assert command[:2] == [sys.executable, "-c"] and command[3:6] == ["streamlit", "run", str(server.APP)]
    calls: list[Any] = []
    started: list[threading.Thread] = []
    start = server._start_warm_up
    monkeypatch.setattr(server, "_start_warm_up", lambda: started.append(start()))
    monkeypatch.setattr(warmup, "start", lambda cfg: calls.append(("warm-up", cfg.paths.data_dir)))
    from streamlit import runtime
    from streamlit.web import cli

    # the warm-up waits for Streamlit's runtime (the pages' caches), which cli.main creates
    monkeypatch.setattr(runtime, "exists", lambda: bool(calls))
    monkeypatch.setattr(cli, "main", lambda prog_name: calls.append(("streamlit", list(sys.argv))))
    monkeypatch.setenv("NETMON_DATA_DIR", str(day.paths.data_dir))
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setattr(sys, "argv", command[1:2] + command[3:])
    server.main()
    started[0].join(30)
    assert calls == [("streamlit", command[3:]), ("warm-up", day.paths.data_dir)]
