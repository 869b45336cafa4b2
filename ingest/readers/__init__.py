"""Capture-file readers: classic pcap and pcapng, plain or compressed, to record batches.

The format is detected from the first bytes, never from the name: gzip, bz2 and xz are
decompressed on the fly, then the pcap or pcapng magic decides the reader. The file is read in
large chunks into one reused buffer (bounded memory, never the whole file); each chunk's
frames are decoded at once by :func:`ingest.decode.decode_headers`.

Examples
--------
>>> import pathlib, struct, tempfile
>>> frame = bytes.fromhex("ffffffffffff0200000000010800"
...                       "4500001c0001000040110000c0000201c0000202" "0035d43100080000")
>>> path = pathlib.Path(tempfile.mkdtemp()) / "one.pcap"
>>> _ = path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
...                      + struct.pack("<IIII", 1_700_000_000, 250_000, 42, 42) + frame)
>>> reader = read_records(path)
>>> [batch.to_pylist()[0]["dst_port"] for batch in reader]
[54321]
>>> reader.summary.frames, reader.summary.records, reader.summary.skipped
(1, 1, {})
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from types import TracebackType

import numpy as np
import pyarrow as pa

from ingest.decode import (
    MAX_TS_NS,
    TRANSPORT_FIELDS,
    build_batch,
    decode_headers,
    impossible_frames,
    projected_schema,
)
from ingest.errors import CaptureError
from ingest.readers._source import DEFAULT_CHUNK_BYTES, ChunkSource
from ingest.readers.frames import FrameBlock
from ingest.readers.pcap import MAGICS as PCAP_MAGICS
from ingest.readers.pcap import PcapReader
from ingest.readers.pcapng import MAGIC as PCAPNG_MAGIC
from ingest.readers.pcapng import PcapngReader
from ingest.readers.summary import ReadSummary

__all__ = ["CaptureReader", "ReadSummary", "read_records"]

_OTHER_MAGICS = {
    b"\xa1\xb2\xcd\x34": "a modified (Kuznetzov) pcap, not supported",
    b"\x34\xcd\xb2\xa1": "a modified (Kuznetzov) pcap, not supported",
    b"PK\x03\x04": "a zip archive; unpack it first",
    b"\x28\xb5\x2f\xfd": "zstd-compressed; decompress it first",
}


def read_records(
    path: str | os.PathLike[str],
    *,
    batch_size: int = 65536,
    iface: str | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    columns: Sequence[str] | None = None,
) -> CaptureReader:
    """Open a capture file and return an iterable of record batches (see :class:`CaptureReader`).

    Parameters
    ----------
    path : str or os.PathLike
        A ``.pcap`` or ``.pcapng`` file, optionally gzip/bz2/xz-compressed (detected by magic).
    batch_size : int
        Most records per batch.
    iface : str, optional
        The ``iface`` column of every record (default: pcapng ``if_name`` or interface index,
        ``"0"`` for classic pcap). ``,`` and line breaks become ``_``.
    chunk_bytes : int
        Bytes read per chunk: memory stays a few times this, whatever the file size.
    columns : sequence of str, optional
        Only these record columns, in this order (default: every column of
        :data:`netmon.records.ARROW_SCHEMA`). The others are not built (nor the transport header
        read, if no column needs it), which saves time when a query needs a few. The records and
        the summary are the same.

    Raises
    ------
    CaptureError
        The file cannot be opened, or is not a capture (unknown magic), or its header is bad, or
        (classic pcap) its link type is not supported, or its compressed stream is damaged before
        anything could be read.
    """
    return CaptureReader(path, batch_size=batch_size, iface=iface, chunk_bytes=chunk_bytes, columns=columns)


class CaptureReader:
    """Record batches of one capture, in file order: exactly :data:`netmon.records.ARROW_SCHEMA`
    (:attr:`schema`; only the ``columns`` asked for, if given).

    Iterate once. :attr:`summary` is updated as the batches come (counts may run one chunk ahead
    of the batches handed out) and is final when iteration ends. A damaged file raises
    :class:`~ingest.errors.CaptureError` after every batch before the damage was yielded; a
    damaged or cut-short compressed stream ends the batches with a warning instead (every packet
    the codec could decompress before it is read). Packets with an impossible timestamp or
    lengths are skipped and counted (``bad_timestamp``, ``bad_length``), never yielded.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 65536,
        iface: str | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        columns: Sequence[str] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.schema = projected_schema(columns)
        self.columns = None if columns is None else tuple(self.schema.names)
        self._transport = columns is None or any(c in TRANSPORT_FIELDS for c in self.schema.names)
        self.path = str(path)
        self.batch_size = int(batch_size)
        self.iface = iface
        self.summary = ReadSummary()
        self._src = ChunkSource(path, chunk_bytes)
        self.summary.compression = self._src.compression
        self._iterated = False
        try:
            self._format = self._open_format()
        except BaseException:
            self._src.close()
            raise

    def _open_format(self) -> PcapReader | PcapngReader:
        src = self._src
        magic = bytes(src.buf[: min(src.n, 4)])
        try:
            if magic in PCAP_MAGICS:
                return PcapReader(src)
            if magic == PCAPNG_MAGIC:
                return PcapngReader(src)
        except CaptureError as exc:
            if src.error:  # the file header is cut by a damaged stream: say so
                raise CaptureError(f"{exc}; {src.error}") from None
            raise
        if src.error and src.n < 4:
            raise CaptureError(f"{src.error}; nothing readable before it")
        after = f" after {src.compression} decompression" if src.compression else ""
        if src.n == 0:
            raise CaptureError(f"{src.path}: byte 0: empty{after}, not a capture file")
        head = bytes(src.buf[: min(src.n, 8)])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in head)
        hint = _OTHER_MAGICS.get(magic, "expected a pcap or pcapng magic")
        damage = f"; {src.error}" if src.error else ""
        found = f"starts with {head.hex(' ')} ({text!r})"
        raise CaptureError(f"{src.path}: byte 0: not a capture file{after}: {found}; {hint}{damage}")

    @property
    def file_size(self) -> int:
        """Size of the file on disk."""
        return self._src.size

    @property
    def file_position(self) -> int:
        """Bytes of the file on disk read so far (for progress; compressed bytes if compressed)."""
        return self._src.position

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._iterated:
            raise RuntimeError(f"{self.path}: a CaptureReader can be iterated only once")
        self._iterated = True
        return self._batches()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        summary = self.summary
        last_ts: int | None = None
        try:
            for block in self._format.blocks(summary):
                bad, reasons = impossible_frames(block.ts_ns, block.cap_len, block.wire_len)
                if bad is not None:
                    summary.frames += int(np.count_nonzero(bad))
                    self._note_impossible(block, bad, reasons)
                    block = block.select(np.flatnonzero(~bad))
                    if not len(block):
                        continue
                cols = decode_headers(
                    block.buf, block.data_start, block.cap_len, block.linktype, transport=self._transport
                )
                summary.frames += len(block.data_start)
                summary.records += len(cols)
                summary.add_skipped(cols.skipped)
                summary.non_first_fragments += cols.non_first_fragments
                summary.l4_truncated += cols.l4_truncated
                if not len(cols):
                    continue
                ts = block.ts_ns[cols.index]
                summary.ts_backwards += int(np.count_nonzero(ts[1:] < ts[:-1]))
                if last_ts is not None and ts[0] < last_ts:
                    summary.ts_backwards += 1
                last_ts = int(ts[-1])
                iface = block.iface if self.iface is None else self.iface
                batch = build_batch(cols, block.ts_ns, block.cap_len, block.wire_len, iface, self.columns)
                for start in range(0, batch.num_rows, self.batch_size):
                    yield batch.slice(start, self.batch_size)
        finally:
            self._src.close()

    def _note_impossible(self, block: FrameBlock, bad: np.ndarray, reasons: dict[str, int]) -> None:
        """Count frames with impossible metadata as skipped; warn once per reason, naming the first."""
        summary = self.summary
        first_time = {r for r in reasons if r not in summary.skipped}
        summary.add_skipped(reasons)
        for i in np.flatnonzero(bad).tolist():
            if not first_time:
                break
            ts, cap, wire = int(block.ts_ns[i]), int(block.cap_len[i]), int(block.wire_len[i])
            reason = "bad_timestamp" if ts < 0 or ts > MAX_TS_NS else "bad_length"
            if reason not in first_time:
                continue
            first_time.discard(reason)
            if reason == "bad_timestamp":
                what = (
                    f"an impossible timestamp ({ts} ns since the epoch: after 2200)"
                    if ts >= 0
                    else "an impossible timestamp (before 1970, after 2200, or beyond what its interface's "
                    "if_tsresol/if_tsoffset can represent)"
                )
            else:
                what = f"impossible lengths (captured {cap}, original {wire})"
            where = self._src.where(int(block.data_start[i]) - block.header)
            summary.warnings.append(
                f"{self.path}: {where}: packet with {what}; skipped, and every such packet is counted "
                f"as {reason}"
            )

    def close(self) -> None:
        """Close the file (iteration closes it at its end)."""
        self._src.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
