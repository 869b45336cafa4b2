"""A block of raw frames found by a format reader, ready for the header decoder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FrameBlock"]


@dataclass
class FrameBlock:
    """Frames lying in one buffer, in file order (all arrays have one entry per frame).

    ``buf`` is only valid until the reader is asked for its next block. A timestamp the reader
    could not represent (an overflowing pcapng resolution or offset) is -1.
    """

    buf: np.ndarray  #: ``uint8``, with :data:`ingest.decode.PAD` spare bytes after the last frame
    data_start: np.ndarray  #: int64 offset of each frame in ``buf``
    cap_len: np.ndarray  #: int64 captured length
    wire_len: np.ndarray  #: int64 original length
    ts_ns: np.ndarray  #: int64 nanoseconds since the epoch
    linktype: int | np.ndarray  #: one link type, or one per frame
    iface: str | tuple[Sequence[str], np.ndarray]  #: one name, or ``(names, index per frame)``
    header: int = 0  #: bytes of the packet's record or block header before its data (for messages)

    def __len__(self) -> int:
        return len(self.data_start)

    def select(self, keep: np.ndarray) -> FrameBlock:
        """The frames at the indices ``keep`` (in that order), same buffer."""
        linktype = self.linktype if np.ndim(self.linktype) == 0 else np.asarray(self.linktype)[keep]
        iface = (
            self.iface if isinstance(self.iface, str) else (self.iface[0], np.asarray(self.iface[1])[keep])
        )
        return FrameBlock(
            buf=self.buf,
            data_start=self.data_start[keep],
            cap_len=self.cap_len[keep],
            wire_len=self.wire_len[keep],
            ts_ns=self.ts_ns[keep],
            linktype=linktype,
            iface=iface,
            header=self.header,
        )
