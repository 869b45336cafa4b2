"""A capture file as a stream of large chunks in one reusable buffer, compressed or not.

The readers walk records in ``buf[:n]``; when they reach its end they call :meth:`ChunkSource.refill`
with the number of bytes they consumed, and the unconsumed tail moves to the front before more is
read. Memory stays bounded by the chunk size (plus the largest single record). The buffer always
has :data:`ingest.decode.PAD` spare bytes after ``n`` so the decoder's fixed-width reads stay in it.

Compressed files (gzip, bz2, xz; concatenated members or streams too) go through
:class:`Decompressor`, which never raises: a damaged or cut-short stream ends the data with every
byte the codec could decompress before it found the damage, and a one-line note in
:attr:`ChunkSource.error` naming the offset in the file and in the decompressed data.
"""

from __future__ import annotations

import bz2
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ingest.decode import PAD
from ingest.errors import CaptureError

__all__ = ["DEFAULT_CHUNK_BYTES", "ChunkSource", "Decompressor"]

DEFAULT_CHUNK_BYTES = 8 << 20

#: magic bytes -> compression name (the magic decides, never the file name)
_MAGICS = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}

#: a fresh decompressor of one gzip member, bz2 stream or xz stream
_CODECS: dict[str, Callable[[], Any]] = {
    "gzip": lambda: zlib.decompressobj(wbits=31),  # 31: gzip header and trailer (CRC-32, size) checked
    "bz2": bz2.BZ2Decompressor,
    "xz": lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ),
}

#: what the codecs raise on damaged data (bz2: OSError; zlib.error; lzma.LZMAError)
_CODEC_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


class Decompressor:
    """The decompressed bytes of a gzip, bz2 or xz file, in pieces; damage ends them, never raises.

    Compressed input is fed in pieces of ``in_piece`` bytes and every call returns at most
    ``out_piece`` bytes, so memory stays bounded even for a highly compressible stream. When the
    codec reports damage, the piece it was fed is fed again one byte at a time from the state
    before it (a copy of it for gzip; bz2 and xz have no copy, so their member is decompressed
    again up to there), so exactly the bytes the codec can decompress before the damaged byte
    come out: nothing readable is lost. :attr:`error` then says where, and the pieces end.

    Concatenated gzip members and bz2/xz streams are read in turn; zero bytes between them
    (padding) are skipped. A file that ends inside a member is "cut short" (an error too).

    Examples
    --------
    >>> import gzip, io, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.gz"
    >>> data = gzip.compress(b"hello " * 1000)
    >>> _ = path.write_bytes(data[:-30] + b"junk" * 10)  # damaged near its end
    >>> with open(path, "rb", buffering=0) as f:
    ...     dec = Decompressor(f, "gzip", str(path))
    ...     out = b"".join(dec.pieces())
    >>> out == (b"hello " * 1000)[: len(out)], dec.error is not None
    (True, True)
    """

    def __init__(
        self,
        raw: BinaryIO,
        compression: str,
        path: str,
        *,
        in_piece: int = 1 << 16,
        out_piece: int = 1 << 18,
    ) -> None:
        self.raw = raw
        self.compression = compression
        self.path = path
        self.in_piece = int(in_piece)
        self.out_piece = int(out_piece)
        self._new = _CODECS[compression]
        #: decompressed bytes handed out so far
        self.out_total = 0
        #: one line when the stream turned out damaged or cut short (then the pieces ended)
        self.error: str | None = None

    # ------------------------------------------------------------------------------------------
    def _read_at(self, offset: int, size: int) -> bytes:
        """``size`` bytes of the file from ``offset`` (fewer at its end)."""
        self.raw.seek(offset)
        out = bytearray()
        while len(out) < size:
            got = self.raw.read(size - len(out))
            if not got:
                break
            out += got
        return bytes(out)

    def _drain(self, dec: Any, data: bytes) -> Iterator[bytes]:
        """Feed ``data`` to ``dec`` and yield its output, ``out_piece`` at most per call, until a
        call gives nothing (all the input is used: a codec may hold bits it works on only when
        called again) or the member ends. Codec errors propagate (the output yielded stays)."""
        limit = self.out_piece
        out = dec.decompress(data, limit)
        yield out
        if self.compression == "gzip":
            while not dec.eof and (out or dec.unconsumed_tail):
                out = dec.decompress(dec.unconsumed_tail, limit)
                yield out
        else:
            while not dec.eof and (out or not dec.needs_input):
                out = dec.decompress(b"", limit)
                yield out

    def _restart(self, start: int, stop: int, produced: int) -> Any:
        """A decompressor in the state it had after the member's bytes ``start..stop`` (which gave
        ``produced`` bytes): bz2 and xz cannot copy their state, so decompress them again."""
        dec = self._new()
        count = 0
        pos = start
        while pos < stop:
            data = self._read_at(pos, min(self.in_piece, stop - pos))
            if not data:
                break
            pos += len(data)
            for out in self._drain(dec, data):
                count += len(out)
        if count != produced:  # pragma: no cover - the codecs are deterministic
            raise RuntimeError(f"{self.compression}: decompressing again gave {count} bytes, not {produced}")
        return dec

    def _damaged(self, offset: int, reason: object) -> str:
        first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
        return (
            f"{self.path}: byte {offset} of the file (byte {self.out_total} of the {self.compression} data): "
            f"{self.compression} stream damaged ({first}); the {self.out_total} bytes decompressed before "
            f"it were read"
        )

    # ------------------------------------------------------------------------------------------
    def pieces(self) -> Iterator[bytes]:
        """Decompressed pieces in order (empty pieces may occur); :attr:`error` is set if damaged."""
        gzip = self.compression == "gzip"
        pending = b""  # input read from the file and not yet fed
        pos = 0  # file offset of pending[0]
        size_seen = 0  # file offset just past the last byte read
        self.raw.seek(0)
        while True:  # one gzip member / bz2 or xz stream per turn
            dec = self._new()
            start = pos
            produced = 0  # bytes this member gave
            good = dec.copy() if gzip else None  # the state after the last fully fed piece
            while not dec.eof:
                if not pending:
                    pending = self._read_at(size_seen, self.in_piece)
                    size_seen += len(pending)
                    if not pending:
                        self.error = self._damaged(pos, "cut short: the file ends inside it")
                        return
                piece, pending = pending[: self.in_piece], pending[self.in_piece :]
                emitted = 0
                try:
                    for out in self._drain(dec, piece):
                        emitted += len(out)
                        produced += len(out)
                        self.out_total += len(out)
                        yield out
                except _CODEC_ERRORS:
                    # Feed the piece again one byte at a time from the state before it: every
                    # byte the codec can decompress before the damaged one comes out.
                    before = produced - emitted
                    dec = good.copy() if good is not None else self._restart(start, pos, before)
                    replayed = 0
                    for i in range(len(piece)):
                        try:
                            for out in self._drain(dec, piece[i : i + 1]):
                                new = out[max(0, emitted - replayed) :]
                                replayed += len(out)
                                if new:
                                    produced += len(new)
                                    self.out_total += len(new)
                                    yield new
                        except _CODEC_ERRORS as again:
                            self.error = self._damaged(pos + i, again)
                            return
                        if dec.eof:
                            pending = piece[i + 1 :] + pending
                            piece = piece[: i + 1]
                            break
                    # (The codecs are deterministic: the same byte fails again. Were it not so,
                    # the piece would now be read after all, and reading would go on.)
                pos += len(piece)
                if gzip and not dec.eof:
                    good = dec.copy()
            # The member ended: what it did not use belongs to the next one.
            unused = dec.unused_data
            pending = unused + pending
            pos -= len(unused)
            while True:  # zero padding between members, and the end of the file
                stripped = pending.lstrip(b"\0")
                pos += len(pending) - len(stripped)
                pending = stripped
                if pending:
                    break
                pending = self._read_at(size_seen, self.in_piece)
                size_seen += len(pending)
                if not pending:
                    return


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
    error : str or None
        One line when a compressed stream turned out damaged or cut short, or the file could not
        be read to its end: the stream then ends with every byte read before that point.
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
        try:
            head = self._raw.read(6)
            self._raw.seek(0)
        except OSError as exc:
            self._raw.close()
            raise CaptureError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        self.compression: str | None = None
        self._pieces: Iterator[bytes] | None = None
        self._decompressor: Decompressor | None = None
        self._piece = memoryview(b"")  # decompressed bytes not yet copied into buf
        for magic, name in _MAGICS.items():
            if head.startswith(magic):
                self.compression = name
                self._decompressor = Decompressor(self._raw, name, self.path)
                self._pieces = self._decompressor.pieces()
        self._read_pos = 0  # compressed bytes consumed (for progress)
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
        if self.compression is not None:
            return self.size if self.eof else min(self._read_pos, self.size)
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
        if self._pieces is not None:
            self._fill_decompressed(want)
            return
        view = memoryview(self.buf)
        try:
            while self.n < want and not self.eof:
                got = self._raw.readinto(view[self.n : want])
                if not got:
                    self.eof = True
                else:
                    self.n += got
        except OSError as exc:  # an I/O error: keep what was read, the reader will see the end
            self.eof = True
            self.error = f"{self.path}: {self.where(self.n)}: read error: {exc.strerror or exc}"
        finally:
            view.release()

    def _fill_decompressed(self, want: int) -> None:
        assert self._pieces is not None and self._decompressor is not None
        while self.n < want and not self.eof:
            if not self._piece:
                try:
                    self._piece = memoryview(next(self._pieces))
                except StopIteration:
                    self.eof = True
                    self.error = self._decompressor.error
                    break
                except OSError as exc:  # reading the compressed file itself failed
                    self.eof = True
                    self.error = f"{self.path}: {self.where(self.n)}: read error: {exc.strerror or exc}"
                    break
                finally:
                    try:
                        self._read_pos = self._raw.tell()
                    except (OSError, ValueError):
                        pass
                continue
            take = min(len(self._piece), want - self.n)
            self.buf[self.n : self.n + take] = self._piece[:take]
            self._piece = self._piece[take:]
            self.n += take

    def close(self) -> None:
        if self._pieces is not None:
            close = getattr(self._pieces, "close", None)
            if close is not None:
                close()
        self._raw.close()
