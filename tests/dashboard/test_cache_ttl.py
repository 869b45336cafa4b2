"""The dashboard's cached reads expire with ``[dashboard] refresh_s`` (no browser, no Spark)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import streamlit as st

from dashboard import data, data_alerts, data_distinct, data_joins, data_resources, data_topk


def _use_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refresh_s: float) -> None:
    """Point the dashboard (``NETMON_CONFIG``) at a configuration with ``refresh_s``, and reload it."""
    toml = tmp_path / f"netmon-{refresh_s:g}.toml"
    toml.write_text(
        "[paths]\n"
        f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n"
        f"state_dir = {json.dumps(str(tmp_path / 'state'))}\n\n"
        f"[dashboard]\nrefresh_s = {refresh_s}\n"
    )
    monkeypatch.setenv("NETMON_CONFIG", str(toml))
    for var in ("NETMON_DATA_DIR", "NETMON_STATE_DIR", "NETMON_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    data.config.clear()  # loaded once per process: reload with this environment


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    data.config.clear()
    yield
    st.cache_data.clear()
    data.config.clear()


def test_ttl_comes_from_refresh_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_config(tmp_path, monkeypatch, refresh_s=7)
    assert data.config().dashboard.refresh_s == 7
    # just under the redraw period, so every redraw reads what was committed since the last one
    assert data.cache_ttl() == 6.5
    _use_config(tmp_path, monkeypatch, refresh_s=0.5)
    assert data.cache_ttl() == 1.0  # at least a second


def test_every_results_read_is_cached_with_the_configured_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    #: the reads of a time range (every results read)
    reads: list[Callable[[str, dt.datetime, dt.datetime], Any]] = [
        data.traffic,
        data_topk.topk,
        data_distinct.distinct_counts,
        data_joins.join_results,
        data_joins.shedding_stats,
        data_resources.sys_between,
    ]
    outbox_reads: list[Callable[[str], Any]] = [
        data_alerts.alerts,
        data_alerts.dead_letters,
        data_alerts.counts,
    ]
    passed: list[tuple[str, dict[str, Any]]] = []

    def spy(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            passed.append((fn.__name__, kwargs))
            return fn  # not cached: every call reads

        return decorate

    monkeypatch.setattr(st, "cache_data", spy)

    def read_all() -> None:
        cfg = data.config()
        end = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
        for read in reads:
            read(str(cfg.paths.data_dir), end - dt.timedelta(minutes=15), end)  # no results yet: empty
        data.newest(str(cfg.paths.data_dir), "traffic")  # where a relative range ends: None yet
        data_resources.sys_stats(str(cfg.paths.data_dir), 900.0)
        for read_outbox in outbox_reads:
            read_outbox(str(cfg.paths.state_dir))

    _use_config(tmp_path, monkeypatch, refresh_s=5)
    read_all()
    _use_config(tmp_path, monkeypatch, refresh_s=7)  # reloaded: every read gets a cache with the new TTL
    passed.clear()
    read_all()
    assert [name for name, _ in passed] == [
        *(f.__name__ for f in reads),
        "newest",
        "sys_stats",
        *(f.__name__ for f in outbox_reads),
    ]
    assert {kw["ttl"] for _, kw in passed} == {data.cache_ttl()} == {6.5}


def test_reads_are_cached_until_the_configuration_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    @data.cached()
    def read(data_dir: str) -> int:
        calls.append(data_dir)
        return len(calls)

    _use_config(tmp_path, monkeypatch, refresh_s=7)
    assert read("a") == read("a") == 1 and read("b") == 2  # cached per argument
    _use_config(tmp_path, monkeypatch, refresh_s=9)
    assert read("a") == 3  # a new TTL, a new cache
    assert calls == ["a", "b", "a"]


def test_no_results_read_has_a_literal_ttl() -> None:
    """Only the offline evaluation tables (files in the repository) keep a fixed TTL."""
    dashboard = Path(data.__file__).parent
    literal = [
        f"{path.name}:{n}"
        for path in sorted(dashboard.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "cache_data(ttl=" in line and "cache_data(ttl=ttl" not in line
    ]
    assert literal == [f"data_joins.py:{_line_of(dashboard / 'data_joins.py', 'def shedding_eval') - 1}"]


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)
