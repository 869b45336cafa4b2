"""A block of raw frames found by a format reader, ready for the header decoder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FrameBlock"]


@dataclass
class FrameBlock:
    """Frames lying in one buffer, in file order (all arrays have one entry per frame).

    ``buf`` is only valid until the reader is asked for its next block.
    """

    buf: np.ndarray  #: ``uint8``, with :data:`ingest.decode.PAD` spare bytes after the last frame
    data_start: np.ndarray  #: int64 offset of each frame in ``buf``
    cap_len: np.ndarray  #: int64 captured length
    wire_len: np.ndarray  #: int64 original length
    ts_ns: np.ndarray  #: int64 nanoseconds since the epoch
    linktype: int | np.ndarray  #: one link type, or one per frame
    iface: str | tuple[Sequence[str], np.ndarray]  #: one name, or ``(names, index per frame)``
