"""analytics.hll_coupons: vectorized coupons equal the ones DataSketches' HLL sketch keeps."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from datasketches import hll_sketch, tgt_hll_type
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.hll_coupons import coupons

_LIST_MODE, _SET_MODE = 0, 1


def compact(items: list[str], lg_k: int = 12) -> bytes:
    sk = hll_sketch(lg_k, tgt_hll_type.HLL_8)
    for s in items:
        sk.update(s)
    return sk.serialize_compact()


def sketch_coupons(items: list[str], lg_k: int = 12) -> list[int]:
    """The coupons a DataSketches HLL sketch fed ``items`` holds, read from its compact bytes.

    Preamble: byte 6 is the LIST count and byte 7's low two bits the mode; LIST coupons start at
    byte 8, SET mode has the count as a little-endian int32 at bytes 8..11 and coupons from 12.
    """
    b = compact(items, lg_k)
    mode = b[7] & 3
    if mode == _LIST_MODE:
        count, start = b[6], 8
    elif mode == _SET_MODE:
        count, start = int.from_bytes(b[8:12], "little"), 12
    else:
        raise AssertionError(f"sketch left coupon mode (mode {mode}); use fewer items")
    return sorted(int.from_bytes(b[i : i + 4], "little") for i in range(start, start + 4 * count, 4))


def one_coupon(text: str, lg_k: int = 12) -> int:
    (c,) = sketch_coupons([text], lg_k)
    return c


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=100), min_size=1, max_size=20))
def test_coupon_equals_datasketches_single_item_sketch(texts):
    got = coupons(pa.array(texts))
    assert got.dtype == np.uint32
    assert got.tolist() == [one_coupon(t) for t in texts]


# Every tail length 0..15 with 0..2 blocks and then some, in 1-, 2-, 3- and 4-byte UTF-8.
EXPLICIT = [
    *("abcdefghijklmnopqrstuvwxyz0123456789.,:;"[:n] for n in range(1, 41)),
    *("é" * n for n in range(1, 41)),
    *("漢" * n for n in range(1, 41)),
    *("😀" * n for n in range(1, 41)),
    "10.0.0.1",
    "2001:db8::1,2001:db8::2,443,51234,6",
    "x" * 1000,
    "é漢😀a" * 250,
    "\x00" * 17,
]


def test_explicit_strings_of_every_length_and_width():
    assert coupons(pa.array(EXPLICIT)).tolist() == [one_coupon(t) for t in EXPLICIT]


@pytest.mark.parametrize("lg_k", [4, 21])
def test_coupons_do_not_depend_on_lg_k(lg_k):
    texts = EXPLICIT[::7]
    assert coupons(pa.array(texts)).tolist() == [one_coupon(t, lg_k) for t in texts]


def test_nulls_and_empty_strings_give_zero():
    arr = pa.array(["a", None, "", "10.0.0.1", None, ""])
    got = coupons(arr)
    assert got.tolist() == [one_coupon("a"), 0, 0, one_coupon("10.0.0.1"), 0, 0]
    assert sketch_coupons([""]) == []  # DataSketches ignores the empty string too
    assert coupons(pa.array([None, None], pa.string())).tolist() == [0, 0]
    assert coupons(pa.array([], pa.string())).shape == (0,)


TEXTS = [
    None if i % 5 == 2 else ("" if i % 7 == 3 else f"10.{i}.{i * 7 % 256}.1" * (1 + i % 4)) for i in range(30)
]


def test_slice_chunked_and_large_string_agree_with_the_plain_array():
    arr = pa.array(TEXTS)
    want = coupons(arr)
    assert want.tolist() == [0 if not t else one_coupon(t) for t in TEXTS]
    assert coupons(arr.slice(3, 10)).tolist() == want[3:13].tolist()
    assert coupons(pa.chunked_array([arr.slice(0, 11), arr.slice(11)])).tolist() == want.tolist()
    large = pa.array(TEXTS, pa.large_string())
    assert coupons(large).tolist() == want.tolist()
    assert coupons(large.slice(3, 10)).tolist() == want[3:13].tolist()
    chunked_slices = pa.chunked_array([large.slice(2, 5), large.slice(20, 4)])
    assert coupons(chunked_slices).tolist() == want[2:7].tolist() + want[20:24].tolist()


def test_rejects_non_string_arrays():
    with pytest.raises(TypeError, match="items"):
        coupons(pa.array([1, 2]))


@pytest.mark.parametrize("n", [1, 5, 100, 300])
def test_union_of_a_groups_coupons_is_the_sketchs_coupon_set(n):
    texts = [f"10.0.{i // 256}.{i % 256},192.168.1.1,{1024 + i},443,6" for i in range(n)]
    assert compact(texts)[7] & 3 == (_LIST_MODE if n <= 7 else _SET_MODE)
    assert np.unique(coupons(pa.array(texts))).tolist() == sketch_coupons(texts)


def test_a_null_slot_spanning_bytes_still_gives_zero():
    # Arrow lets a null slot's offsets span data bytes; only the validity bitmap says it is null.
    offsets = pa.py_buffer(np.array([0, 3, 6], dtype=np.int32).tobytes())
    validity = pa.py_buffer(bytes([0b01]))
    arr = pa.StringArray.from_buffers(2, offsets, pa.py_buffer(b"abcdef"), validity, null_count=1)
    assert coupons(arr).tolist() == [one_coupon("abc"), 0]
