"""The dashboard's tables: a frame put in the page as HTML, built by a few lines of script.

Why not ``st.dataframe``: its data grid is code the frontend loads the first time a tab shows a
table, and a page opened in a new tab paid about 0.3 s for it (measured in Chromium on this
2-core machine, new tabs of one browser, 10 in turn each: a page with four metrics, two Chart.js
charts and a table, median 2.43 s with ``st.dataframe``, 2.11 s with this table, 1.86 s with
neither; docs/dashboard.md). Issue 21's budget is 2 s a page. ``st.html`` is already in every
page for the charts (``dashboard.chartjs``), so a table costs the frontend nothing new.

:func:`page` writes a scrolling box (its header row kept in view), the frame as JSON (``<``
escaped: no text in it can end the script element) with each column's format, and the script
``static/netmon-table.js`` inlined (it defines ``netmonTable`` once per tab): the script builds
the rows, cells as text, never HTML, and a click on a column's name sorts by it (again: the
other way; empty cells last). A table shows at most ``max_rows`` rows and says so; what is lost
against the data grid is its column resizing, search and download.

:func:`embedded` reads the frame back from the HTML (for tests and checks): what the browser is
given.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import streamlit as st

from dashboard.chartjs import is_time, json_values

__all__ = ["MAX_ROWS", "Format", "embedded", "page", "show", "spec"]

#: The rows a table shows at most (the first ones, in the frame's order).
MAX_ROWS = 1000
#: How a column's values are written: ``time`` (epoch ms, shown in UTC), ``percent`` (a
#: fraction, shown ×100 with one decimal), or as they are (numbers with thousands separators).
Format = Literal["time", "percent", "plain"]
_MARK = "netmon-table-data"
_DATA = re.compile(r'<script type="application/json" id="' + _MARK + r'-[\w-]*">(.*?)</script>', re.S)


def _script() -> str:
    """``static/netmon-table.js`` without its comment lines. Streamlit sanitizes ``st.html`` with
    DOMPurify, which drops a script whose text holds ``<`` followed by a letter or ``/`` (its
    guard against markup hidden in text): the table would never be built, silently."""
    path = Path(__file__).parent / "static" / "netmon-table.js"
    lines = path.read_text(encoding="utf-8").splitlines()
    code = "\n".join(line for line in lines if not line.lstrip().startswith("//"))
    if re.search(r"<[/\w]", code):
        raise ValueError(
            f"{path.name}: a '<' followed by a letter or '/' in the code; DOMPurify would drop it"
        )
    return code


_SCRIPT = _script()
_STYLE = (
    "<style>"
    ".netmon-table{font-size:14px;margin-bottom:1rem}"
    ".netmon-table-scroll{max-height:400px;overflow:auto;"
    "border:1px solid rgba(49,51,63,.2);border-radius:.5rem}"
    ".netmon-table table{border-collapse:collapse;width:100%;margin:0}"
    ".netmon-table th{position:sticky;top:0;background:#f0f2f6;cursor:pointer;text-align:left;"
    "font-weight:600;white-space:nowrap;padding:4px 8px;border-bottom:1px solid rgba(49,51,63,.2)}"
    ".netmon-table th[data-sorted=up]::after{content:' ▲'}"
    ".netmon-table th[data-sorted=down]::after{content:' ▼'}"
    ".netmon-table td{padding:3px 8px;border-bottom:1px solid rgba(49,51,63,.08);white-space:nowrap}"
    ".netmon-table th.num{text-align:right}"
    ".netmon-table td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".netmon-table-note{color:rgba(49,51,63,.6);font-size:12px}"
    "</style>"
)


def _column(values: pd.Series) -> tuple[list[Any], Format]:
    """A column's values as JSON values (datetimes as epoch ms, NaN/NaT as null) and its format."""
    seq = values.to_numpy()
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        seq = values.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    if is_time(seq):
        if not (isinstance(seq, np.ndarray) and np.issubdtype(seq.dtype, np.datetime64)):
            seq = pd.to_datetime(pd.Series(seq), utc=True).dt.tz_localize(None).to_numpy()
        return json_values(seq), "time"
    return json_values(seq), "plain"


def spec(
    df: pd.DataFrame, formats: Mapping[str, Format] | None = None, max_rows: int = MAX_ROWS
) -> dict[str, Any]:
    """What :func:`page` embeds: the columns' names, the first ``max_rows`` rows (lists of JSON
    values), each column's format (``formats`` over the one the column's type implies) and the
    frame's row count."""
    shown = df.head(max_rows)
    columns: list[list[Any]] = []
    kinds: list[Format] = []
    for name in shown.columns:
        values, kind = _column(shown[name])
        columns.append(values)
        kinds.append((formats or {}).get(str(name), kind))
    return {
        "columns": [str(c) for c in shown.columns],
        "formats": kinds,
        "rows": [list(row) for row in zip(*columns, strict=True)]
        if columns
        else [[] for _ in range(len(shown))],
        "total": len(df),
    }


def page(
    df: pd.DataFrame,
    formats: Mapping[str, Format] | None = None,
    *,
    max_rows: int = MAX_ROWS,
    table_id: str = "0",
) -> str:
    """The table's HTML, put in the page itself (``st.html``): see the module's doc."""
    text = json.dumps(spec(df, formats, max_rows), separators=(",", ":"), allow_nan=False).replace(
        "<", "\\u003c"
    )
    ident = re.sub(r"[^A-Za-z0-9_-]", "", table_id)
    return (
        _STYLE + f'<div class="netmon-table" id="netmon-table-{ident}" data-netmon-table="{ident}">'
        '<div class="netmon-table-scroll"></div><div class="netmon-table-note"></div></div>'
        f'<script type="application/json" id="{_MARK}-{ident}">{text}</script>'
        f"<script>{_SCRIPT}\nnetmonTable('{ident}');</script>"
    )


def embedded(body: str) -> pd.DataFrame:
    """The frame a table's HTML (:func:`page`) shows, its time columns as UTC datetimes: for
    tests and checks."""
    found = _DATA.search(body)
    if found is None:
        raise ValueError("not a table: no data in it")
    data = json.loads(found.group(1))
    df = pd.DataFrame(data["rows"], columns=data["columns"])
    for name, kind in zip(data["columns"], data["formats"], strict=True):
        if kind == "time":
            df[name] = pd.to_datetime(df[name], unit="ms", utc=True)
    return df


def show(df: pd.DataFrame, formats: Mapping[str, Format] | None = None, *, max_rows: int = MAX_ROWS) -> None:
    """Put ``df`` in the page as a table (its index left out), at most ``max_rows`` rows."""
    # Our own HTML and data (JSON, escaped; cells written as text), so the page may run its script.
    st.html(
        page(df, formats, max_rows=max_rows, table_id=uuid.uuid4().hex[:12]), unsafe_allow_javascript=True
    )
