"""pcapng: sections (SHB), interfaces (IDB) and packets (EPB, SPB, obsolete PB).

Each section has its own byte order and interfaces; each interface its own link type, timestamp
resolution (``if_tsresol``), offset (``if_tsoffset``) and name (``if_name``). Runs of Enhanced
Packet Blocks are walked in a tight loop (one ``unpack_from`` per block) and checked and read with
numpy afterwards; every other block goes through the per-block path.

A damaged block (impossible length, or a trailing length that does not match) is skipped: the
reader looks for the next block with a known type and matching lengths, says so in a warning and
goes on. Only when no such block follows does it raise :class:`~ingest.errors.CaptureError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ingest.decode import MAX_TS_NS, SUPPORTED_LINKTYPES
from ingest.errors import CaptureError
from ingest.readers._source import ChunkSource
from ingest.readers.frames import FrameBlock
from ingest.readers.summary import ReadSummary

__all__ = ["MAGIC", "PcapngReader"]

MAGIC = b"\x0a\x0d\x0d\x0a"
SHB, IDB, OPB, SPB, EPB = 0x0A0D0D0A, 1, 2, 3, 6
#: block types a resynchronisation may land on
_KNOWN = np.array([SHB, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xBAD, 0x40000BAD], np.uint32)
#: a larger block is taken for a damaged length
MAX_BLOCK = 64 << 20
_ORDERS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}


@dataclass
class _Interface:
    linktype: int
    snaplen: int
    name: str
    ts_base: int = 10  #: resolution ``ts_base ** -ts_exp`` seconds
    ts_exp: int = 6
    ts_offset_s: int = 0

    def tick_range(self) -> tuple[int, int]:
        """The timestamps (in ticks) that fall in 1970-01-01 .. :data:`~ingest.decode.MAX_TS_NS`.

        Nanoseconds are ``floor(ticks * 1e9 / base**exp) + offset * 1e9``, which only grows with
        ``ticks``, so the valid ticks are one interval; computed with Python integers (exact
        for any resolution and offset). ``lo > hi`` when no tick is valid.
        """
        scale = self.ts_base**self.ts_exp
        offset_ns = self.ts_offset_s * 1_000_000_000
        low, high = -offset_ns, MAX_TS_NS - offset_ns  # allowed values of floor(ticks * 1e9 / scale)
        lo = max(0, -((-low * scale) // 1_000_000_000))  # smallest ticks with floor(...) >= low
        hi = min(2**64 - 1, -((-(high + 1) * scale) // 1_000_000_000) - 1)  # largest with floor(...) <= high
        return lo, hi

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Timestamps in this interface's units (``uint64``) to nanoseconds since the epoch (int64).

        Exact: ``floor(ticks * 1e9 / base**exp) + offset * 1e9``. A time before the epoch or after
        :data:`~ingest.decode.MAX_TS_NS` (an impossible ``if_tsresol``/``if_tsoffset``, or a
        damaged timestamp; the 64-bit arithmetic would wrap) is -1.
        """
        ticks = np.asarray(ticks, np.uint64)
        lo, hi = self.tick_range()
        if lo > hi:
            return np.full(len(ticks), -1, np.int64)
        ok = (ticks >= np.uint64(lo)) & (ticks <= np.uint64(hi))
        # Arithmetic modulo 2**64 (uint64 wraps) gives the exact result wherever it is in range:
        # only additions and multiplications may wrap; the divisions and shifts work on exact values.
        k = self.ts_exp
        giga = np.uint64(1_000_000_000)
        if self.ts_base == 10:
            if k <= 9:
                raw = ticks * np.uint64(10 ** (9 - k))
            elif k - 9 < 20:
                raw = ticks // np.uint64(10 ** (k - 9))
            else:  # a unit far below a nanosecond: every 64-bit count is under one
                raw = np.zeros(len(ticks), np.uint64)
        elif k < 32:
            whole = ticks >> np.uint64(k)
            frac = ticks & np.uint64((1 << k) - 1)  # < 2**31: frac * 1e9 fits
            raw = whole * giga + ((frac * giga) >> np.uint64(k))
        else:  # ticks * 1e9 = x * 2**32 + (under 2**32), so floor(ticks * 1e9 / 2**k) = x >> (k - 32)
            x = (ticks >> np.uint64(32)) * giga + (((ticks & np.uint64(0xFFFFFFFF)) * giga) >> np.uint64(32))
            raw = x >> np.uint64(k - 32) if k - 32 < 64 else np.zeros(len(ticks), np.uint64)
        if self.ts_offset_s:
            raw = raw + np.uint64((self.ts_offset_s * 1_000_000_000) % 2**64)
        ns = raw.view(np.int64)
        if not ok.all():
            ns = np.where(ok, ns, -1)
        return ns


@dataclass
class _Section:
    order: str
    index: int
    interfaces: list[_Interface] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.header = struct.Struct(self.order + "II")
        self.u32 = np.dtype(self.order + "u4")


@dataclass
class _Run:
    """Consecutive packet blocks of one kind in one section (offsets in the buffer)."""

    kind: int
    section: _Section
    parts: list[np.ndarray] = field(default_factory=list)


def _walk_epbs(mv: memoryview, off: int, header: struct.Struct) -> tuple[list[int], int]:
    """Offsets of consecutive EPBs from ``off`` that lie complete in ``mv``, and where the walk stopped."""
    unpack = header.unpack_from
    offs: list[int] = []
    app = offs.append
    try:
        while True:  # the hot loop: stops at another block type or the end of mv (struct.error)
            btype, blen = unpack(mv, off)
            if btype != EPB or blen < 32:
                break
            app(off)
            off += blen
    except struct.error:
        pass
    if off > len(mv):  # the last block runs past the buffer
        off = offs.pop()
    return offs, off


class PcapngReader:
    """Validate the first Section Header Block in ``src`` and iterate the file's frame blocks."""

    def __init__(self, src: ChunkSource) -> None:
        self.src = src
        order = _ORDERS.get(bytes(src.buf[8:12])) if src.n >= 12 else None
        if order is None:
            found = bytes(src.buf[8:12]).hex(" ") if src.n >= 12 else "end of file"
            raise CaptureError(f"{src.path}: byte 8: pcapng byte-order magic expected, found {found}")
        self.section = _Section(order, -1)
        self.last_ts = 0

    # ---------------------------------------------------------------------------------------
    def blocks(self, summary: ReadSummary) -> Iterator[FrameBlock]:
        """Frame blocks in file order; damaged blocks are skipped with a warning when possible."""
        src = self.src
        summary.format = "pcapng"
        off = 0
        while True:
            runs: list[_Run] = []
            stop, need, damage = self._scan(off, runs, summary)
            buf = src.array()
            for run in runs:
                yield from self._frames(buf, run, summary)
            summary.bytes_read = src.base + stop
            if damage is None:
                more = src.refill(stop, need)
                stop = 0
                if more:
                    off = 0
                    continue
                if src.n == 0:
                    break
                # The file ends inside a block: cut off, unless valid blocks follow (a damaged length).
                found, _, _ = self._find_block(4, src.base % 4)
                if found is None:
                    summary.warnings.append(
                        f"{src.path}: {src.where(0)}: last block truncated ({src.n} bytes present, "
                        f"{need} needed); ignored"
                    )
                    break
                damage = f"its length {need} runs past the end of the file"
            off = self._resync(stop, damage, summary)
        if src.error:
            summary.warnings.append(src.error)

    # ---------------------------------------------------------------------------------------
    def _scan(self, off: int, runs: list[_Run], summary: ReadSummary) -> tuple[int, int, str | None]:
        """Walk the complete blocks in the buffer from ``off``, collecting packet runs.

        Returns ``(stop, need, damage)``: where the walk stopped, how many bytes the block there
        needs, and why that block is damaged (None if it is only incomplete).
        """
        src = self.src
        mv = src.view()
        n = src.n
        buf = src.array()
        while True:
            sec = self.section
            if off + 12 > n:
                return off, 12, None
            btype, blen = sec.header.unpack_from(mv, off)
            if btype == EPB and blen >= 32:
                offs, stop = _walk_epbs(mv, off, sec.header)
                if offs:
                    starts = np.asarray(offs, np.int64)
                    bad = self._check_epbs(buf, starts, sec)
                    good = starts if bad is None else starts[:bad]
                    if good.size:
                        if not (runs and runs[-1].kind == EPB and runs[-1].section is sec):
                            runs.append(_Run(EPB, sec))
                        runs[-1].parts.append(good)
                    if bad is not None:
                        return int(starts[bad]), 0, self._epb_damage(mv, int(starts[bad]), sec)
                    off = stop
                    continue
            if btype == SHB:
                order = _ORDERS.get(bytes(mv[off + 8 : off + 12]))
                if order is None:
                    return (
                        off,
                        0,
                        f"section header with a bad byte-order magic {bytes(mv[off + 8 : off + 12]).hex()}",
                    )
                blen = struct.unpack_from(order + "I", mv, off + 4)[0]
            else:
                order = sec.order
            if blen < 12 or blen % 4 or blen > MAX_BLOCK:
                return off, 0, f"impossible block length {blen}"
            if off + blen > n:
                return off, blen, None
            trailer = struct.unpack_from(order + "I", mv, off + blen - 4)[0]
            if trailer != blen:
                return off, 0, f"block length {blen} does not match its trailing copy {trailer}"
            problem = self._block(mv, off, btype, blen, order, runs, summary)
            if problem:
                return off, 0, problem
            off += blen

    def _check_epbs(self, buf: np.ndarray, starts: np.ndarray, sec: _Section) -> int | None:
        """Index of the first EPB whose lengths do not hold together, or None."""
        win = np.ndarray(shape=(len(buf) - 27,), dtype="V28", buffer=buf, strides=(1,))
        head = win[starts].view(sec.u32).reshape(-1, 7)
        blen = head[:, 1].astype(np.int64)
        u32 = np.ndarray(shape=(len(buf) - 3,), dtype=sec.u32, buffer=buf, strides=(1,))
        trailer = u32[starts + blen - 4]
        ok = (blen % 4 == 0) & (blen <= MAX_BLOCK) & (trailer == blen) & (head[:, 5] <= blen - 32)
        bad = np.flatnonzero(~ok)
        return int(bad[0]) if bad.size else None

    @staticmethod
    def _epb_damage(mv: memoryview, off: int, sec: _Section) -> str:
        _, blen, _, _, _, cap_len = struct.unpack_from(sec.order + "6I", mv, off)
        if blen % 4 or blen > MAX_BLOCK:
            return f"impossible block length {blen}"
        if cap_len > blen - 32:
            return f"captured length {cap_len} does not fit in the block length {blen}"
        trailer = struct.unpack_from(sec.order + "I", mv, off + blen - 4)[0]
        return f"block length {blen} does not match its trailing copy {trailer}"

    def _block(
        self,
        mv: memoryview,
        off: int,
        btype: int,
        blen: int,
        order: str,
        runs: list[_Run],
        summary: ReadSummary,
    ) -> str | None:
        """Handle one complete, length-checked block; return a problem that makes it damaged."""
        sec = self.section
        if btype == SHB:
            if blen < 28:
                return f"section header too short ({blen} bytes)"
            self.section = _Section(order, sec.index + 1)
        elif btype == IDB:
            if blen < 20:
                return f"interface description too short ({blen} bytes)"
            self._interface(mv, off, blen, summary)
        elif btype in (EPB, OPB, SPB):
            minimum = 16 if btype == SPB else 32
            if blen < minimum:
                return f"packet block too short ({blen} bytes)"
            if btype != SPB:
                cap_len = struct.unpack_from(order + "I", mv, off + 20)[0]
                if cap_len > blen - 32:
                    return f"captured length {cap_len} does not fit in the block length {blen}"
            if not (runs and runs[-1].kind == btype and runs[-1].section is sec):
                runs.append(_Run(btype, sec))
            runs[-1].parts.append(np.array([off], np.int64))
        return None

    def _interface(self, mv: memoryview, off: int, blen: int, summary: ReadSummary) -> None:
        sec = self.section
        linktype, snaplen = struct.unpack_from(sec.order + "HxxI", mv, off + 8)
        iface = _Interface(linktype, snaplen, str(len(sec.interfaces)))
        p, end = off + 16, off + blen - 4
        while p + 4 <= end:
            code, length = struct.unpack_from(sec.order + "HH", mv, p)
            value = bytes(mv[p + 4 : min(p + 4 + length, end)])
            if code == 0:
                break
            if code == 2 and value.rstrip(b"\0"):
                iface.name = value.rstrip(b"\0").decode("utf-8", "replace")
            elif code == 9 and len(value) == 1:
                iface.ts_base = 2 if value[0] & 0x80 else 10
                iface.ts_exp = value[0] & 0x7F
            elif code == 14 and len(value) == 8:
                iface.ts_offset_s = struct.unpack(sec.order + "q", value)[0]
            p += 4 + length + (-length % 4)
        sec.interfaces.append(iface)
        if linktype not in summary.linktypes:
            summary.linktypes.append(linktype)
        if linktype not in SUPPORTED_LINKTYPES:
            summary.warnings.append(
                f"{self.src.path}: {self.src.where(off)}: interface {len(sec.interfaces) - 1} "
                f"({iface.name}) has unsupported link type {linktype}; its packets are skipped"
            )

    # ---------------------------------------------------------------------------------------
    def _frames(self, buf: np.ndarray, run: _Run, summary: ReadSummary) -> Iterator[FrameBlock]:
        """The frame block of one run of packet blocks."""
        sec = run.section
        starts = np.concatenate(run.parts)
        width = 12 if run.kind == SPB else 28
        win = np.ndarray(shape=(len(buf) - width + 1,), dtype=f"V{width}", buffer=buf, strides=(1,))
        raw = win[starts]
        head = raw.view(sec.u32).reshape(len(starts), width // 4)
        if run.kind == SPB:
            ifid = np.zeros(len(starts), np.int64)
            wire = head[:, 2].astype(np.int64)
            cap = np.minimum(wire, head[:, 1].astype(np.int64) - 16)
            if sec.interfaces and sec.interfaces[0].snaplen:
                cap = np.minimum(cap, sec.interfaces[0].snaplen)
            data = starts + 12
        else:
            if run.kind == EPB:
                ifid = head[:, 2].astype(np.int64)
            else:  # obsolete Packet Block: a 16-bit interface id, then 16-bit drop count
                ifid = raw.view(np.dtype(sec.order + "u2")).reshape(len(starts), 14)[:, 4].astype(np.int64)
            cap = head[:, 5].astype(np.int64)
            wire = head[:, 6].astype(np.int64)
            data = starts + 28
        known = ifid < len(sec.interfaces)
        if not known.all():  # the caller counts the frames it decodes; these it never sees
            unknown = int(np.count_nonzero(~known))
            summary.frames += unknown
            summary.add_skipped({"unknown_interface": unknown})
            keep = np.flatnonzero(known)
            starts, head, ifid, cap, wire, data = (a[keep] for a in (starts, head, ifid, cap, wire, data))
            if not len(starts):
                return
        ifaces = sec.interfaces
        used = np.unique(ifid)
        if run.kind == SPB:
            ts = np.full(len(starts), self.last_ts, np.int64)
        else:
            ticks = (head[:, 3].astype(np.uint64) << np.uint64(32)) | head[:, 4].astype(np.uint64)
            if len(used) == 1:
                ts = ifaces[int(used[0])].to_ns(ticks)
            else:
                ts = np.empty(len(starts), np.int64)
                for i in used.tolist():
                    sel = ifid == i
                    ts[sel] = ifaces[i].to_ns(ticks[sel])
            valid = np.flatnonzero(ts >= 0)
            if valid.size:  # a Simple Packet Block takes the last timestamp that was possible
                self.last_ts = int(ts[valid[-1]])
        if len(used) == 1:
            one = ifaces[int(used[0])]
            linktype: int | np.ndarray = one.linktype
            iface: str | tuple[list[str], np.ndarray] = one.name
        else:
            linktype = np.array([f.linktype for f in ifaces], np.int64)[ifid]
            iface = ([f.name for f in ifaces], ifid)
        yield FrameBlock(
            buf=buf,
            data_start=data,
            cap_len=cap,
            wire_len=wire,
            ts_ns=ts,
            linktype=linktype,
            iface=iface,
            header=12 if run.kind == SPB else 28,
        )

    # ---------------------------------------------------------------------------------------
    def _resync(self, damaged: int, why: str, summary: ReadSummary) -> int:
        """Skip from the damaged block at ``damaged`` to the next valid block; return its offset."""
        src = self.src
        first = src.where(damaged)
        skipped_from = src.base + damaged
        align = skipped_from % 4
        start = damaged + 4
        while True:
            found, wait, wait_len = self._find_block(start, align)
            if found is not None:
                summary.warnings.append(
                    f"{src.path}: {first}: damaged pcapng block ({why}); skipped "
                    f"{src.base + found - skipped_from} bytes to the next valid block at {src.where(found)}"
                )
                return found
            if wait is not None:  # a candidate runs past the buffer: bring all of it in
                src.refill(wait, wait_len)
                start = 0
                continue
            if src.eof:
                raise CaptureError(
                    f"{src.path}: {first}: damaged pcapng block ({why}) and no valid block after it; "
                    f"stopped after {summary.frames} packets"
                )
            keep = max(start, src.n - 12)
            keep -= (src.base + keep - align) % 4
            src.refill(keep)
            start = 0

    def _find_block(self, start: int, align: int) -> tuple[int | None, int | None, int]:
        """First offset >= ``start`` (at ``align`` mod 4 in the stream) holding a valid block.

        Returns ``(offset, None, 0)``; or ``(None, offset, length)`` for a candidate that runs
        past the buffer (before the end of the stream); or ``(None, None, 0)``.
        """
        src = self.src
        buf, mv, n, sec = src.array(), src.view(), src.n, self.section
        first = start + (align - (src.base + start)) % 4
        count = (n - 12 - first) // 4 + 1
        if count <= 0:
            return None, None, 0
        words = np.ndarray(shape=(count,), dtype=sec.u32, buffer=buf, offset=first, strides=(4,))
        for i in np.flatnonzero(np.isin(words, _KNOWN)).tolist():
            p = first + 4 * i
            order = sec.order
            if words[i] == SHB:
                order = _ORDERS.get(bytes(mv[p + 8 : p + 12]), "")
                if not order:
                    continue
            blen = struct.unpack_from(order + "I", mv, p + 4)[0]
            if blen < 12 or blen % 4 or blen > MAX_BLOCK:
                continue
            if p + blen > n:
                if src.eof:
                    continue
                return None, p, blen
            if struct.unpack_from(order + "I", mv, p + blen - 4)[0] == blen:
                return p, None, 0
        return None, None, 0
