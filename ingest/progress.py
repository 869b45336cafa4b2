"""One-line progress on stderr: the replay progress bar and the live-capture status line.

On a terminal the line is redrawn in place (``\\r``) at most every ``interval_s``; when stderr is
not a terminal (a log file, CI) a plain line is written every ``log_interval_s`` instead, so logs
stay readable. Nothing is written when disabled (``--quiet``).

Examples
--------
>>> format_count(1234567), format_rate(345678.9), format_duration(75)
('1,234,567', '345.7k', '1:15')
>>> print(replay_line(packets=500_000, elapsed_s=2.0, bytes_read=40_000_000, total_bytes=80_000_000))
replay  500,000 pkts  250.0k pkt/s  40.0 MB  50%  ETA 0:02
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = [
    "ProgressLine",
    "capture_line",
    "format_count",
    "format_duration",
    "format_rate",
    "replay_line",
]


def format_count(n: int) -> str:
    return f"{n:,}"


def format_rate(per_s: float) -> str:
    if per_s >= 1e6:
        return f"{per_s / 1e6:.2f}M"
    if per_s >= 1e3:
        return f"{per_s / 1e3:.1f}k"
    return f"{per_s:.0f}"


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def replay_line(
    *,
    packets: int,
    elapsed_s: float,
    bytes_read: int,
    total_bytes: int | None = None,
    fraction: float | None = None,
    label: str = "replay",
) -> str:
    """``replay  N pkts  R pkt/s  M MB  P%  ETA m:ss`` (percentage and ETA when the total is known)."""
    rate = packets / elapsed_s if elapsed_s > 0 else 0.0
    parts = [
        label,
        f"{format_count(packets)} pkts",
        f"{format_rate(rate)} pkt/s",
        f"{bytes_read / 1e6:.1f} MB",
    ]
    if fraction is None and total_bytes:
        fraction = min(1.0, bytes_read / total_bytes)
    if fraction is not None and fraction > 0:
        parts.append(f"{fraction * 100:.0f}%")
        parts.append(f"ETA {format_duration(elapsed_s * (1 - fraction) / fraction)}")
    return "  ".join(parts)


def capture_line(
    *,
    iface: str,
    packets: int,
    records: int,
    produced: int,
    acknowledged: int,
    skipped: int,
    elapsed_s: float,
) -> str:
    """The live-capture status line."""
    rate = packets / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"capture {iface}  {format_count(packets)} pkts  {format_rate(rate)} pkt/s  "
        f"records {format_count(records)}  produced {format_count(produced)}  "
        f"acked {format_count(acknowledged)}  skipped {format_count(skipped)}  {format_duration(elapsed_s)}"
    )


class ProgressLine:
    """A rate-limited status line on ``stream`` (stderr by default)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        interval_s: float = 0.2,
        log_interval_s: float = 5.0,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if self.tty else log_interval_s
        # A terminal shows the first line at once; a log gets its first line after an interval.
        self._last = float("-inf") if self.tty else time.monotonic()
        self._width = 0
        self._shown = False

    def due(self) -> bool:
        """Whether :meth:`show` would draw now (lets callers skip building the text)."""
        return self.enabled and time.monotonic() - self._last >= self.interval_s

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.enabled or not (force or self.due()):
            return
        self._last = time.monotonic()
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown = True

    def close(self, final: str | None = None) -> None:
        """Draw ``final`` (if given) and end the line."""
        if not self.enabled:
            return
        if final is not None:
            self.show(final, force=True)
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
