"""The one fatal error of the capture readers."""

from __future__ import annotations

__all__ = ["CaptureError"]


class CaptureError(ValueError):
    """Fatal bad input: the message is one line naming the file, the byte offset and the problem.

    Examples
    --------
    >>> raise CaptureError("x.pcap: byte 0: not a capture file (magic 3c 68 74 6d)")
    Traceback (most recent call last):
    ...
    ingest.errors.CaptureError: x.pcap: byte 0: not a capture file (magic 3c 68 74 6d)
    """
