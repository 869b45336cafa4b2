"""DataSketches HLL coupons of many strings at once, vectorized with numpy over Arrow string buffers.

A *coupon* is what an Apache DataSketches HLL sketch keeps for one item while it is in LIST/SET
mode, and what it folds into a register in HLL mode. It reproduces the rule of
``hll_sketch.update(str)`` (the C++ library behind the Python ``datasketches`` package) and of
Java's ``HllSketch.update(String)``, which agree:

    Apache DataSketches HLL: coupon = (value << 26) | address, MurmurHash3_x64_128 seed 9001

where ``h1, h2 = MurmurHash3_x64_128(utf8(text), seed=9001)``, ``address = h1 & 0x3FFFFFF`` and
``value = min(nlz64(h2), 62) + 1``. The coupon does not depend on ``lg_k``; a sketch of any
``lg_k`` takes its register index from the address's low ``lg_k`` bits.

Why: building one sketch per (sub-window, group) in Python costs a Python call per item
(``sketch.update``). Computing the coupons of all items of a batch at once lets stage 1 of the
distinct counts (``pipeline.partials``) work on plain uint32 arrays -- deduplicate per group
with numpy, then feed only the distinct coupons -- and skip that per-item call.

Two inputs have no coupon and give ``0`` (never a coupon, as ``value >= 1``): null entries, and
empty strings, which DataSketches ignores (``update("")`` leaves the sketch empty).

>>> from datasketches import hll_sketch
>>> sk = hll_sketch(12)
>>> sk.update("10.0.0.1")
>>> c = coupons(pa.array(["10.0.0.1", None, ""]))
>>> int(c[0]) == int.from_bytes(sk.serialize_compact()[8:12], "little"), c[1:].tolist()
(True, [0, 0])
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["coupons"]

_SEED = np.uint64(9001)  # DataSketches DEFAULT_SEED
_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_M1 = np.uint64(0x52DCE729)
_M2 = np.uint64(0x38495AB5)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_FIVE = np.uint64(5)
_ADDRESS_MASK = np.uint64(0x3FFFFFF)  # KEY_MASK_26
_LOW32 = np.uint64(0xFFFFFFFF)
#: ``_BYTE_MASK[n]`` keeps the low n bytes of a little-endian word (the tail's bytes, not the padding).
_BYTE_MASK = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
#: Items per pass: the ~20 temporaries of a pass stay in the CPU cache instead of main memory.
_CHUNK = 1 << 15


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(k: np.ndarray) -> np.ndarray:
    k ^= k >> np.uint64(33)
    k *= _FMIX1
    k ^= k >> np.uint64(33)
    k *= _FMIX2
    k ^= k >> np.uint64(33)
    return k


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    k1 *= _C1
    k1 = _rotl(k1, 31)
    k1 *= _C2
    return k1


def _mix_k2(k2: np.ndarray) -> np.ndarray:
    k2 *= _C2
    k2 = _rotl(k2, 33)
    k2 *= _C1
    return k2


def _clz64(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of each uint64 (64 for 0), exactly.

    A 32-bit half converts to float64 exactly, so frexp's exponent is its bit length (0 for 0);
    converting the whole 64-bit word could round up to the next power of two.
    """
    hi_len = np.frexp((x >> np.uint64(32)).astype(np.float64))[1]
    lo_len = np.frexp((x & _LOW32).astype(np.float64))[1]
    return np.where(hi_len > 0, 32 - hi_len, 64 - lo_len)


def _murmur_coupons(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Coupons of the byte strings ``data[starts[i]:starts[i] + lengths[i]]``.

    ``words[j]`` is the little-endian uint64 at byte j of the zero-padded data (an unaligned
    view), so reading 16 bytes past any string's last block stays in bounds.
    """
    n = len(starts)
    h1 = np.full(n, _SEED, dtype=np.uint64)
    h2 = h1.copy()
    nblocks = lengths >> 4
    # Body: block b of the strings that have one. All strings share the first blocks' passes, so
    # the loop runs over the longest string's block count, with ever fewer strings.
    for b in range(int(nblocks.max(initial=0))):
        active = nblocks > b
        everyone = bool(active.all())
        idx = slice(None) if everyone else np.flatnonzero(active)
        pos = starts[idx] + 16 * b
        k1 = _mix_k1(words[pos])
        k2 = _mix_k2(words[pos + 8])
        a1 = h1[idx] ^ k1
        a2 = h2[idx]
        a1 = _rotl(a1, 27)
        a1 += a2
        a1 = a1 * _FIVE + _M1
        a2 ^= k2
        a2 = _rotl(a2, 31)
        a2 += a1
        a2 = a2 * _FIVE + _M2
        h1[idx] = a1
        h2[idx] = a2
    # Tail: the last len % 16 bytes, as two words with the bytes beyond the string masked off.
    # A tail half that is absent is 0, and mixing 0 gives 0, so h ^= 0 changes nothing: no branch.
    tail = lengths & 15
    pos = starts + (nblocks << 4)
    k1 = words[pos] & _BYTE_MASK[np.minimum(tail, 8)]
    k2 = words[pos + 8] & _BYTE_MASK[np.maximum(tail - 8, 0)]
    h1 ^= _mix_k1(k1)
    h2 ^= _mix_k2(k2)
    # Finalization.
    ulen = lengths.astype(np.uint64)
    h1 ^= ulen
    h2 ^= ulen
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    value = np.minimum(_clz64(h2), 62) + 1
    return (value.astype(np.uint32) << np.uint32(26)) | (h1 & _ADDRESS_MASK).astype(np.uint32)


def coupons(items: pa.StringArray | pa.LargeStringArray | pa.ChunkedArray) -> np.ndarray:
    """The DataSketches HLL coupon of each string, as uint32; 0 for nulls and empty strings.

    ``items`` is a string or large-string Arrow array, or a chunked array of one of them; a
    slice's ``offset`` is respected. The result has one entry per item, in order.
    """
    if isinstance(items, pa.ChunkedArray):
        items = items.combine_chunks()
    if not isinstance(items, pa.StringArray | pa.LargeStringArray):
        raise TypeError(f"items: expected a string or large_string Arrow array, got {items.type}")
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    _, offsets_buf, data_buf = items.buffers()
    offset_type = np.int64 if isinstance(items, pa.LargeStringArray) else np.int32
    raw_offsets = np.frombuffer(offsets_buf, dtype=offset_type)[items.offset : items.offset + n + 1]
    offsets = raw_offsets.astype(np.int64)
    base = int(offsets[0])
    starts = offsets[:-1] - base
    lengths = offsets[1:] - offsets[:-1]
    # Copy only the bytes this array uses, plus 16 zero bytes: every 16-byte read (a block, or a
    # tail's two words) stays inside the buffer.
    used = int(offsets[-1]) - base
    padded = np.zeros(used + 16, dtype=np.uint8)
    if used:
        padded[:used] = np.frombuffer(data_buf, dtype=np.uint8, count=used, offset=base)
    words = np.ndarray(shape=(used + 9,), dtype="<u8", buffer=padded, strides=(1,))
    out = np.empty(n, dtype=np.uint32)
    with np.errstate(over="ignore"):  # MurmurHash3 arithmetic is modulo 2**64 by design
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            out[lo:hi] = _murmur_coupons(words, starts[lo:hi], lengths[lo:hi])
    # A null slot's offsets may span bytes (Arrow allows it), so nulls are cleared explicitly.
    out[lengths == 0] = 0
    if items.null_count:
        out[~items.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out
