"""One meaning of *late*: a record more than the watermark delay behind the newest time before it.

The rule of ``docs/reliability.md`` ("One meaning of late"), over records in input order: a record
is late when its event time is more than the watermark delay ``d`` behind the newest event time
seen before it, ``ts < M_before - d``. ``M_before`` is the largest timestamp of the records before
it (late ones included: they never raise it) and of the control times before it
(:meth:`LateRule.advance`: the pipeline's watermark control messages). Nothing comes before the
first record, so it is never late; a record without a timestamp is never late and does not move
``M``.

The rule depends on the order of the records only: fed in chunks cut anywhere, a
:class:`LateRule` flags the same records, since it carries ``M`` from one chunk to the next. It is
the rule the pipeline applies per Kafka partition when it decodes a micro-batch
(``pipeline.partials.decode_messages``, written apart because ``analytics`` knows nothing of the
pipeline; ``tests/pipeline/test_late_rule.py`` holds the two equal). ``netmon analyze join``
applies it through this class (``analytics.join_queries.run_join``'s ``late_after_s``), and so
does ``analytics.topk_offline`` (``OfflineTopK._late``); ``analytics.distinct_offline`` still
carries its own copy of the same few lines.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LateRule"]

#: ``M`` before any record: no timestamp is this small, so nothing compares late against it.
_NEVER = -(2**63)


class LateRule:
    """The late rule over chunks of records in input order (module docstring).

    Parameters
    ----------
    delay_ns
        The watermark delay ``d`` in nanoseconds, ``>= 0`` (the pipeline's is
        ``round([pipeline] watermark_s * 1e9)``).

    Attributes
    ----------
    newest : int or None
        ``M``: the newest event time seen so far (ns); None before the first timestamp.
    late : int
        The records found late so far.

    Examples
    --------
    >>> rule = LateRule(delay_ns=5)
    >>> rule.late_mask(np.array([10, 4, 6, 20])).tolist()
    [False, True, False, False]
    >>> rule.late_mask(np.array([14, 15])).tolist(), rule.newest, rule.late
    ([True, False], 20, 2)
    """

    def __init__(self, delay_ns: int) -> None:
        if isinstance(delay_ns, bool) or not isinstance(delay_ns, int | np.integer) or delay_ns < 0:
            raise ValueError(f"delay_ns: expected an integer number of nanoseconds >= 0, got {delay_ns!r}")
        self.delay_ns = int(delay_ns)
        self.newest: int | None = None
        self.late = 0

    def __repr__(self) -> str:
        return f"LateRule(delay_ns={self.delay_ns!r})"

    def late_mask(self, ts_ns: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Which records of this chunk are late (a boolean mask); moves ``newest`` and ``late`` on.

        ``ts_ns``: the chunk's timestamps (int64 ns) in input order, following the chunks before;
        ``valid``: which records have a timestamp (None: all). A record without one is never late
        and its ``ts_ns`` entry is not read.
        """
        ts = np.asarray(ts_ns, dtype=np.int64)
        if ts.ndim != 1:
            raise ValueError(f"ts_ns: expected one timestamp per record, got shape {ts.shape}")
        if valid is not None:
            valid = np.asarray(valid, dtype=bool)
            if valid.shape != ts.shape:
                raise ValueError(f"valid: expected {len(ts)} flags, got shape {valid.shape}")
            ts = np.where(valid, ts, _NEVER)
        if not len(ts):
            return np.zeros(0, bool)
        # The newest time before each record: the running maximum, shifted by one.
        before = np.empty_like(ts)
        before[0] = _NEVER if self.newest is None else self.newest
        np.maximum.accumulate(ts[:-1], out=before[1:])
        np.maximum(before[1:], before[0], out=before[1:])
        seen = before != _NEVER
        limit = np.subtract(before, self.delay_ns, out=np.zeros_like(before), where=seen)
        late = seen & (ts < limit)
        if valid is not None:
            late &= valid
        self.advance(int(ts.max()))
        self.late += int(np.count_nonzero(late))
        return late

    def advance(self, ts_ns: int) -> None:
        """A time seen without a record (a watermark control message): ``newest`` moves to it if later."""
        ts_ns = int(ts_ns)
        if ts_ns == _NEVER:
            return
        self.newest = ts_ns if self.newest is None else max(self.newest, ts_ns)
