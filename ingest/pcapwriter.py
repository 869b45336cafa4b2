"""A small classic-pcap writer (struct based, streaming): the sample generator and live capture use it.

Writes the classic libpcap format, little-endian, with microsecond (magic ``a1b2c3d4``) or
nanosecond (magic ``a1b23c4d``) timestamps. Frames longer than ``snaplen`` are cut, and their
original length is kept in the record header.

Examples
--------
>>> import io
>>> sink = io.BytesIO()
>>> with PcapWriter(sink, snaplen=4) as w:
...     w.write(b"abcdefgh", 1_700_000_000_123_456_000)
>>> data = sink.getvalue()
>>> data[:4].hex(), len(data), data[-4:]
('d4c3b2a1', 44, b'abcd')
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["LINKTYPE_ETHERNET", "LINKTYPE_RAW", "PcapWriter"]

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101

_FILE_HEADER = struct.Struct("<IHHiIII")
_RECORD_HEADER = struct.Struct("<IIII")
_MAGIC_US = 0xA1B2C3D4
_MAGIC_NS = 0xA1B23C4D


class PcapWriter:
    """Write frames to a classic pcap file (or an open binary file object).

    Parameters
    ----------
    target
        A path, or a binary file object (left open by :meth:`close`).
    linktype
        The pcap link type of every frame (1: Ethernet, 101: raw IP).
    snaplen
        Frames are cut to this many bytes; the record keeps the original length.
    nanosecond
        Nanosecond timestamps (else microseconds, truncated).
    """

    def __init__(
        self,
        target: str | Path | BinaryIO,
        *,
        linktype: int = LINKTYPE_ETHERNET,
        snaplen: int = 65535,
        nanosecond: bool = False,
    ) -> None:
        if snaplen < 1:
            raise ValueError(f"snaplen must be >= 1, got {snaplen}")
        self.linktype = linktype
        self.snaplen = snaplen
        self.nanosecond = nanosecond
        self.packets = 0
        self.bytes_written = 0
        if isinstance(target, str | Path):
            self._fh: BinaryIO = open(target, "wb")  # noqa: SIM115 - closed in close()
            self._owned = True
        else:
            self._fh = target
            self._owned = False
        self._divisor = 1 if nanosecond else 1000
        self._write(_FILE_HEADER.pack(_MAGIC_NS if nanosecond else _MAGIC_US, 2, 4, 0, 0, snaplen, linktype))

    def _write(self, data: bytes) -> None:
        self._fh.write(data)
        self.bytes_written += len(data)

    def write(self, frame: bytes, ts_ns: int, wire_len: int | None = None) -> None:
        """Append one frame captured at ``ts_ns`` (ns since the epoch); ``wire_len`` defaults to its size."""
        sec, frac = divmod(ts_ns, 1_000_000_000)
        cap = frame if len(frame) <= self.snaplen else frame[: self.snaplen]
        orig = len(frame) if wire_len is None else wire_len
        self._write(_RECORD_HEADER.pack(sec, frac // self._divisor, len(cap), orig) + cap)
        self.packets += 1

    def write_raw(self, records: bytes, count: int) -> None:
        """Append ``count`` records already encoded as pcap record headers + frames (no checks)."""
        self._write(records)
        self.packets += count

    @staticmethod
    def record(frame: bytes, sec: int, frac: int, wire_len: int) -> bytes:
        """One encoded record: header (``sec``, ``frac`` in the file's unit) and the captured bytes."""
        return _RECORD_HEADER.pack(sec, frac, len(frame), wire_len) + frame

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if self._owned and not self._fh.closed:
            self._fh.close()
        elif not self._owned:
            self._fh.flush()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
