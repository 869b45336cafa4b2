"""Replay pacing: cut record batches into messages and say when (wall clock) each may be sent.

Three modes: as fast as possible (no waiting), the capture's own pacing scaled by ``speed``
(``speed=1`` is the original timing, ``10`` ten times faster), and a fixed rate of ``pps`` records
per second. Pacing is per message, not per packet: in a paced mode a message holds at most
``quantum_s`` of (scaled) time, so its records are early by less than that.

Examples
--------
>>> import numpy as np
>>> clock = FakeClock()
>>> pacer = Pacer(speed=2.0, quantum_s=0.25, clock=clock, sleep=clock.sleep)
>>> ts = np.array([0, 100, 900, 2_000, 2_100], dtype=np.int64) * 1_000_000   # ms -> ns
>>> [(a, b, round(t, 3)) for a, b, t in pacer.chunks(ts, records_per_message=1000)]
[(0, 2, 0.0), (2, 3, 0.45), (3, 5, 1.0)]
>>> [round(pacer.wait(offset), 3) for _, _, offset in pacer.chunks(ts, records_per_message=1000)]
[0.0, 0.45, 0.55]
>>> round(clock.now, 3)
1.0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

__all__ = ["FakeClock", "Pacer"]


class FakeClock:
    """A clock whose ``sleep`` only advances it (for tests and doctests)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Pacer:
    """Message cutting and wall-clock waits for one replay.

    Parameters
    ----------
    speed
        Scale of the capture's own timing (``None``: not paced by timestamps).
    pps
        Fixed rate in records per second (``None``: no fixed rate). At most one of the two.
    quantum_s
        Longest stretch of (scaled) time one message covers in a paced mode.
    clock, sleep
        Monotonic clock and sleep function (injectable for tests).
    """

    def __init__(
        self,
        *,
        speed: float | None = None,
        pps: float | None = None,
        quantum_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed is not None and pps is not None:
            raise ValueError("speed and pps are exclusive: choose one pacing")
        if speed is not None and not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        if pps is not None and not pps > 0:
            raise ValueError(f"pps must be > 0, got {pps}")
        if not quantum_s > 0:
            raise ValueError(f"quantum_s must be > 0, got {quantum_s}")
        self.speed = speed
        self.pps = pps
        self.quantum_s = quantum_s
        self._clock = clock
        self._sleep = sleep
        self._ts0: int | None = None
        self._wall0: float | None = None
        self._sent = 0  # records handed out so far (pps mode)

    @property
    def paced(self) -> bool:
        return self.speed is not None or self.pps is not None

    def chunks(self, ts_ns: np.ndarray, records_per_message: int) -> list[tuple[int, int, float]]:
        """``(start, end, offset_s)`` per message for the next records, whose times are ``ts_ns``.

        ``offset_s`` is when the message is due, in seconds after the first message of the replay.
        """
        n = len(ts_ns)
        if n == 0:
            return []
        if not self.paced:
            return [(a, min(a + records_per_message, n), 0.0) for a in range(0, n, records_per_message)]
        if self.pps is not None:
            size = max(1, min(records_per_message, int(self.pps * self.quantum_s)))
            out = []
            for a in range(0, n, size):
                out.append((a, min(a + size, n), (self._sent + a) / self.pps))
            self._sent += n
            return out
        assert self.speed is not None
        if self._ts0 is None:
            self._ts0 = int(ts_ns[0])
        offset = (ts_ns.astype(np.int64) - self._ts0) / 1e9 / self.speed
        bucket = np.floor(offset / self.quantum_s).astype(np.int64)
        starts = np.flatnonzero(np.diff(bucket) != 0) + 1
        bounds = [0, *starts.tolist(), n]
        out = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            for c in range(a, b, records_per_message):
                out.append((c, min(c + records_per_message, b), max(0.0, float(offset[c]))))
        return out

    def wait(self, offset_s: float) -> float:
        """Sleep until ``offset_s`` after the first call; return the seconds slept."""
        if not self.paced:
            return 0.0
        now = self._clock()
        if self._wall0 is None:
            self._wall0 = now - offset_s
        delay = self._wall0 + offset_s - now
        if delay > 0 and math.isfinite(delay):
            self._sleep(delay)
            return delay
        return 0.0
