"""The time range every page reads: one picker in the sidebar, kept across pages.

Relative ranges (the last 5 or 15 minutes, 1, 6 or 24 hours) end at the newest row of the page's
kind: the data's own time, not the wall clock, since a replayed capture's results lie in the past
(event time for traffic, top-k, distinct counts and joins; the batches' trigger time for the
pipeline's own statistics and the shedding controller's). An absolute range is a start and an end
(UTC). The choice is kept in ``st.session_state`` (:data:`KEPT`), not only in the widgets' state,
which do not follow the user from page to page (each page's widgets are its own): every page
draws the picker set from the kept choice, and the widgets' callbacks change it. The default is
the last 15 minutes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import streamlit as st

__all__ = ["ABSOLUTE", "DEFAULT", "KEPT", "RELATIVE", "TimeRange", "describe", "picker"]

#: The relative ranges: label -> seconds back from the newest row.
RELATIVE: dict[str, float] = {
    "last 5 min": 300.0,
    "last 15 min": 900.0,
    "last 1 h": 3600.0,
    "last 6 h": 6 * 3600.0,
    "last 24 h": 24 * 3600.0,
}
#: The choice of a start and an end.
ABSOLUTE = "absolute"
#: The session-state key of the range in force (a :class:`TimeRange`).
KEPT = "netmon.time_range"
#: The widgets' keys.
_CHOICE = "netmon.time_range.choice"
_START_DATE, _START_TIME = "netmon.time_range.start_date", "netmon.time_range.start_time"
_END_DATE, _END_TIME = "netmon.time_range.end_date", "netmon.time_range.end_time"
_ABSOLUTE_KEYS = (_START_DATE, _START_TIME, _END_DATE, _END_TIME)
#: The relative range in force when "absolute" was chosen (an absolute range starts from it).
_BEFORE = "netmon.time_range.before"
#: Set by a change that put the end before the start (they were swapped): said once.
_SWAPPED = "netmon.time_range.swapped"


@dataclass(frozen=True)
class TimeRange:
    """A relative range (``seconds`` back from the newest row) or an absolute one (``start`` to
    ``end``, tz-aware, inclusive)."""

    seconds: float | None = 900.0
    start: dt.datetime | None = None
    end: dt.datetime | None = None

    @property
    def label(self) -> str:
        """The picker's option: ``"last 15 min"``, ``"absolute"``."""
        if self.seconds is None:
            return ABSOLUTE
        return next((k for k, v in RELATIVE.items() if v == self.seconds), f"last {self.seconds:g} s")

    def span(self, newest: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
        """``(start, end)`` to read: a relative range ends at ``newest`` (None: nothing to read).

        >>> t = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
        >>> [f"{x:%H:%M}" for x in TimeRange(900).span(t)]
        ['11:45', '12:00']
        >>> TimeRange(900).span(None) is None
        True
        >>> TimeRange(None, t, t + dt.timedelta(hours=1)).span(None)[1].hour
        13
        """
        if self.seconds is None:
            if self.start is None or self.end is None:
                return None
            return self.start, self.end
        if newest is None:
            return None
        return newest - dt.timedelta(seconds=self.seconds), newest


#: The range before any choice.
DEFAULT = TimeRange(RELATIVE["last 15 min"])


def describe(span: tuple[dt.datetime, dt.datetime]) -> str:
    """``"2024-05-01 11:45:00 – 12:00:00 UTC"`` (the date once when both ends share it).

    >>> t = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    >>> describe((t - dt.timedelta(minutes=15), t))
    '2024-05-01 11:45:00 – 12:00:00 UTC'
    """
    start, end = (t.astimezone(dt.UTC) for t in span)
    tail = f"{end:%H:%M:%S}" if start.date() == end.date() else f"{end:%Y-%m-%d %H:%M:%S}"
    return f"{start:%Y-%m-%d %H:%M:%S} – {tail} UTC"


def _minutes(span: tuple[dt.datetime, dt.datetime]) -> TimeRange:
    """An absolute range of whole minutes (the inputs' step) holding ``span``."""
    start = span[0].astimezone(dt.UTC).replace(second=0, microsecond=0)
    end = span[1].astimezone(dt.UTC)
    if end.second or end.microsecond:
        end = end.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    return TimeRange(None, start, end)


def _on_choice() -> None:
    """The radio changed: a relative range, or an absolute one to start from the range before."""
    choice = st.session_state.get(_CHOICE)
    kept: TimeRange = st.session_state.get(KEPT, DEFAULT)
    if choice == ABSOLUTE:
        if kept.seconds is not None:
            st.session_state[_BEFORE] = kept
            st.session_state[KEPT] = TimeRange(None)  # its ends: the page's span of the range before
    elif choice in RELATIVE:
        st.session_state[KEPT] = TimeRange(RELATIVE[str(choice)])


def _on_absolute() -> None:
    """A start or an end changed: the absolute range they make (swapped when the wrong way round)."""
    start_date, start_time, end_date, end_time = (st.session_state.get(k) for k in _ABSOLUTE_KEYS)
    if not (isinstance(start_date, dt.date) and isinstance(end_date, dt.date)):
        return  # being cleared
    begin = dt.datetime.combine(start_date, _time(start_time), tzinfo=dt.UTC)
    finish = dt.datetime.combine(end_date, _time(end_time), tzinfo=dt.UTC)
    if finish < begin:
        begin, finish = finish, begin
        st.session_state[_SWAPPED] = True
    st.session_state[KEPT] = TimeRange(None, begin, finish)


def _time(value: object) -> dt.time:
    return value if isinstance(value, dt.time) else dt.time()


def picker(newest: dt.datetime | None, time: str = "event time") -> TimeRange:
    """Draw the range picker in the sidebar and return the range in force (kept across pages).

    ``newest``: the newest row of the page's kind, where an absolute range starts from when it is
    first chosen (the relative range in force, made absolute); ``time``: what the page's time is.

    The range in force (:data:`KEPT`) is the truth: each run sets the widgets from it before
    drawing them (a page's widgets are new ones, which would start from their defaults), and
    their callbacks change it.
    """
    kept: TimeRange = st.session_state.get(KEPT, DEFAULT)
    if kept.seconds is None and kept.span(None) is None:
        before: TimeRange = st.session_state.get(_BEFORE, DEFAULT)
        span = before.span(newest) or DEFAULT.span(dt.datetime.now(dt.UTC))
        assert span is not None
        kept = _minutes(span)
    if kept.label not in (*RELATIVE, ABSOLUTE):
        kept = DEFAULT
    st.session_state[KEPT] = kept
    st.session_state[_CHOICE] = kept.label
    bar = st.sidebar
    bar.radio(
        f"Time range ({time})",
        [*RELATIVE, ABSOLUTE],
        key=_CHOICE,
        on_change=_on_choice,
        help="Relative ranges end at the newest result of the page (the data's time, not the clock's).",
    )
    if kept.seconds is None and kept.start is not None and kept.end is not None:
        start, end = kept.start.astimezone(dt.UTC), kept.end.astimezone(dt.UTC)
        for key, value in zip(
            _ABSOLUTE_KEYS, (start.date(), start.time(), end.date(), end.time()), strict=True
        ):
            st.session_state[key] = value
        lowest, highest = dt.date(1970, 1, 1), dt.date(2200, 1, 1)
        c1, c2 = bar.columns(2)
        c1.date_input(
            "Start (UTC)", key=_START_DATE, min_value=lowest, max_value=highest, on_change=_on_absolute
        )
        c2.time_input("at", key=_START_TIME, step=60, on_change=_on_absolute)
        c1, c2 = bar.columns(2)
        c1.date_input("End (UTC)", key=_END_DATE, min_value=lowest, max_value=highest, on_change=_on_absolute)
        c2.time_input("at ", key=_END_TIME, step=60, on_change=_on_absolute)
        if st.session_state.pop(_SWAPPED, False):
            bar.warning("The end was before the start: the two are swapped.")
    return kept
