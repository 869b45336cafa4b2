"""A capture file as a stream of large chunks in one reusable buffer, compressed or not.

The readers walk records in ``buf[:n]``; when they reach its end they call :meth:`ChunkSource.refill`
with the number of bytes they consumed, and the unconsumed tail moves to the front before more is
read. Memory stays bounded by the chunk size (plus the largest single record). The buffer always
has :data:`ingest.decode.PAD` spare bytes after ``n`` so the decoder's fixed-width reads stay in it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ingest.decode import PAD
from ingest.errors import CaptureError

__all__ = ["ChunkSource", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES = 8 << 20

#: magic bytes -> (compression, opener of the decompressed stream over the buffered file)
_COMPRESSED: dict[bytes, tuple[str, Callable[[io.BufferedReader], io.BufferedIOBase]]] = {
    b"\x1f\x8b": ("gzip", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    b"BZh": ("bz2", bz2.BZ2File),
    b"\xfd7zXZ\x00": ("xz", lzma.LZMAFile),
}


class ChunkSource:
    """Read ``path`` (plain, gzip, bz2 or xz, detected by magic) chunk by chunk.

    Attributes
    ----------
    buf : bytearray
        The buffer; ``buf[:n]`` holds stream bytes ``base .. base + n``.
    n, base : int
        Valid bytes in ``buf`` and the stream offset of ``buf[0]``.
    eof : bool
        The stream has no more bytes.
    compression : str or None
        ``"gzip"``, ``"bz2"``, ``"xz"`` or None.
    """

    def __init__(self, path: str | os.PathLike[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.path = str(path)
        self.name = Path(path).name
        self.chunk_bytes = max(int(chunk_bytes), 64)
        try:
            self._raw = open(path, "rb", buffering=0)  # closed by close()
        except OSError as exc:
            raise CaptureError(f"{self.path}: cannot open: {exc.strerror or exc}") from None
        self.size = os.fstat(self._raw.fileno()).st_size
        head = self._raw.read(6)
        self._raw.seek(0)
        self.compression: str | None = None
        self._stream: io.RawIOBase | io.BufferedIOBase = self._raw
        for magic, (name, opener) in _COMPRESSED.items():
            if head.startswith(magic):
                self.compression = name
                self._stream = opener(io.BufferedReader(self._raw, 1 << 20))
        self.buf = bytearray(self.chunk_bytes + PAD)
        self.n = 0
        self.base = 0
        self.eof = False
        #: a one-line note when a compressed stream turned out damaged or cut short
        self.error: str | None = None
        self._fill()

    def where(self, off: int) -> str:
        """``"byte N"`` for buffer offset ``off`` (decompressed position for compressed files)."""
        pos = self.base + off
        return f"byte {pos}" if self.compression is None else f"byte {pos} of the {self.compression} data"

    def array(self) -> np.ndarray:
        """The whole buffer (valid bytes and the padding after them) as ``uint8``."""
        return np.frombuffer(self.buf, np.uint8)

    def view(self) -> memoryview:
        """The valid bytes ``buf[:n]``: struct reads past them raise :class:`struct.error`."""
        return memoryview(self.buf)[: self.n]

    @property
    def position(self) -> int:
        """Bytes of the file on disk read so far (compressed bytes for compressed files)."""
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return self.size

    def refill(self, consumed: int, need: int = 0) -> bool:
        """Drop the first ``consumed`` bytes, then read until ``need`` bytes are held (or a chunk).

        Returns False when nothing could be added (end of stream).
        """
        tail = self.n - consumed
        want = max(self.chunk_bytes, need)
        if want + PAD > len(self.buf):
            grown = bytearray(want + PAD)
            grown[:tail] = self.buf[consumed : self.n]
            self.buf = grown
        elif consumed:
            self.buf[:tail] = self.buf[consumed : self.n]
        self.base += consumed
        self.n = tail
        before = self.n
        self._fill(want)
        return self.n > before

    def _fill(self, want: int | None = None) -> None:
        want = self.chunk_bytes if want is None else want
        view = memoryview(self.buf)
        # Compressed streams in small pieces: a damaged stream loses at most the last piece.
        piece = want if self.compression is None else 1 << 16
        try:
            while self.n < want and not self.eof:
                got = self._stream.readinto(view[self.n : min(want, self.n + piece)])
                if not got:
                    self.eof = True
                else:
                    self.n += got
        except (OSError, EOFError, lzma.LZMAError) as exc:
            # A damaged compressed stream: keep what was decompressed, the reader will see the end.
            self.eof = True
            self.error = f"{self.path}: {self.where(self.n)}: {self.compression} stream damaged: {exc}"
        finally:
            view.release()

    def close(self) -> None:
        if self._stream is not self._raw:
            self._stream.close()
        self._raw.close()
