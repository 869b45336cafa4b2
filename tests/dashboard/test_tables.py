"""The dashboard's tables (``dashboard.tables``): the frame given to the browser is the frame, and
the browser shows it: every cell, sorted on a click as pandas sorts, capped with a note, text never
read as HTML (Chromium driven by Playwright, over the table's HTML alone)."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pandas as pd
import pytest

from bench.dashboard_render import browser
from dashboard import tables

needs_browser = pytest.mark.skipif(
    importlib.util.find_spec("playwright") is None or browser() is None,
    reason="needs Playwright (pip install playwright) and Chromium (apt-get install chromium)",
)


def _frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ints = rng.integers(-(10**9), 10**9, n)
    floats = rng.normal(0, 1000, n)
    floats[rng.random(n) < 0.2] = np.nan
    times = pd.Timestamp("2026-11-27", tz="UTC") + pd.to_timedelta(rng.integers(0, 86_400_000, n), unit="ms")
    words = np.array(["a", "<b>bold</b>", "</script><script>alert(1)</script>", "é ü", "x & y", ""])
    text = pd.Series(words[rng.integers(0, len(words), n)], dtype=object)
    text[rng.random(n) < 0.1] = None
    return pd.DataFrame(
        {
            "count": ints,
            "value": floats,
            "at": times,
            "naive": times.tz_localize(None),
            "key": text,
            "flag": rng.random(n) < 0.5,
            "share": rng.random(n),
        }
    )


@pytest.mark.parametrize("seed", range(5))
def test_the_embedded_frame_is_the_frame(seed: int) -> None:
    df = _frame(seed, 200)
    back = tables.embedded(tables.page(df, {"share": "percent"}))
    assert list(back.columns) == list(df.columns)
    assert back["count"].tolist() == df["count"].tolist()
    assert back["value"].isna().tolist() == df["value"].isna().tolist()
    assert back["value"].dropna().tolist() == df["value"].dropna().tolist()
    assert back["at"].tolist() == df["at"].tolist()
    assert back["naive"].tolist() == df["naive"].dt.tz_localize("UTC").tolist()  # naive: UTC
    assert back["key"].tolist() == df["key"].tolist()
    assert back["flag"].tolist() == df["flag"].tolist() and back["share"].tolist() == df["share"].tolist()
    spec = tables.spec(df, {"share": "percent"})
    assert spec["formats"] == ["plain", "plain", "time", "time", "plain", "plain", "percent"]


def test_rows_are_capped_and_counted() -> None:
    df = _frame(7, 2500)
    spec = tables.spec(df, max_rows=1000)
    assert len(spec["rows"]) == 1000 and spec["total"] == 2500
    assert tables.embedded(tables.page(df))["count"].tolist() == df["count"].head(tables.MAX_ROWS).tolist()
    empty = tables.spec(df.head(0))
    assert empty["rows"] == [] and empty["total"] == 0 and empty["columns"] == list(df.columns)


def test_no_text_ends_the_data_script() -> None:
    df = pd.DataFrame({"key": ["</script><script>alert(1)</script>"]})
    html = tables.page(df, table_id="t")
    data = html.split('id="netmon-table-data-t">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)["rows"] == [["</script><script>alert(1)</script>"]]
    # Streamlit's sanitizer (DOMPurify) drops a script whose text holds "<" and a letter or "/"
    for body in re.findall(r"<script[^>]*>(.*?)</script>", html, re.S):
        assert not re.search(r"<[/\w]", body)
    with pytest.raises(ValueError, match="not a table"):
        tables.embedded("<p>hi</p>")


def _shown(page) -> list[list[str]]:
    return page.evaluate(
        "() => [...document.querySelectorAll('tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )


def _text(v: object, kind: str) -> str:
    """What a cell should show: the browser's formats written again in Python (the oracle)."""
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NaT:
        return "–"
    if kind == "time":
        t = pd.Timestamp(v).tz_localize(None) if pd.Timestamp(v).tzinfo is None else pd.Timestamp(v)
        text = t.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{t.microsecond // 1000:03d}" if t.microsecond else "")
    if kind == "percent":
        assert isinstance(v, (float, np.floating))
        return f"{float(v) * 100:.1f}%"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.3f}".rstrip("0").rstrip(".")
    return str(v)


@needs_browser
def test_the_browser_shows_every_cell_and_sorts_as_pandas() -> None:
    from playwright.sync_api import sync_playwright

    df = _frame(11, 300)[["count", "value", "at", "key", "flag", "share"]]
    kinds = ["plain", "plain", "time", "plain", "plain", "percent"]
    html = "<!doctype html><meta charset=utf-8><body>" + tables.page(df, {"share": "percent"}, max_rows=250)
    shown = df.head(250)

    def expected(frame: pd.DataFrame) -> list[list[str]]:
        return [
            [_text(v, k) for v, k in zip(row, kinds, strict=True)] for row in frame.itertuples(index=False)
        ]

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=browser(), headless=True)
        try:
            page = chromium.new_page()
            alerts: list[str] = []
            page.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))
            page.set_content(html)
            page.wait_for_selector('[data-netmon-table][data-drawn="1"]')
            assert page.evaluate(
                "() => [...document.querySelectorAll('th')].map((th) => th.textContent)"
            ) == list(df.columns)
            assert _shown(page) == expected(shown)
            assert page.inner_text(".netmon-table-note") == "the first 250 of 300 rows"
            for name in ["count", "value", "at", "key"]:
                page.click(f"th:text-is('{name}')")
                asc = shown.sort_values(name, kind="stable", na_position="last")
                assert [r[df.columns.get_loc(name)] for r in _shown(page)] == [
                    r[df.columns.get_loc(name)] for r in expected(asc)
                ], name
                page.click(f"th:text-is('{name}')")
                desc = shown.sort_values(name, ascending=False, kind="stable", na_position="last")
                assert [r[df.columns.get_loc(name)] for r in _shown(page)] == [
                    r[df.columns.get_loc(name)] for r in expected(desc)
                ], name
            assert alerts == [] and page.locator("b").count() == 0  # text, never HTML
        finally:
            chromium.close()
