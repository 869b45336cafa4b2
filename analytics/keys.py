"""Query keys and weights over packet records: one canonical text per key, shared by every engine.

A key is one record column or a tuple of columns (``"src_ip"``, ``"src_ip,dst_ip"``,
``"proto,dst_port"``). Its canonical text is the columns' text forms joined by ``,`` (IPv6
addresses contain ``:``, never ``,``): ``"10.0.0.1,192.0.2.7"``, ``"6,80"``. Spark produces the
same text with ``concat_ws(",", ...)`` over the same columns cast to string, so offline and
streaming answers compare exactly. A record missing any of the key's fields (e.g. no ports) has a
null key and is skipped by that query.

:func:`key_codes` gives the same keys as integer codes into the batch's distinct key texts, for
counting with numpy; the texts are made once per distinct key, by :func:`key_text`.

Arrays are built from and read into numpy through their buffers, never with ``pa.array`` or
``to_numpy``: pyarrow imports pandas (a quarter of a second) the first time it converts either way.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from netmon.columns import parse_key

__all__ = ["KEY_SEPARATOR", "as_numpy", "key_codes", "key_text", "parse_key", "weight_values", "weights"]

KEY_SEPARATOR = ","

#: The separator as an Arrow scalar, made from buffers (``pa.scalar`` would import pandas).
_SEPARATOR = pa.Array.from_buffers(
    pa.string(),
    1,
    [
        None,
        pa.py_buffer(struct.pack("<ii", 0, len(KEY_SEPARATOR.encode()))),
        pa.py_buffer(KEY_SEPARATOR.encode()),
    ],
)[0]


def key_text(batch: pa.RecordBatch | pa.Table, fields: Sequence[str]) -> pa.Array:
    """The canonical key text per record; null where any key field is null.

    >>> t = pa.table({"proto": pa.array([6, 17], pa.int16()), "dst_port": pa.array([80, None], pa.int32())})
    >>> key_text(t, ("proto", "dst_port")).to_pylist()
    ['6,80', None]
    """
    parts = [pc.cast(batch.column(f), pa.string()) for f in fields]
    if len(parts) == 1:
        out = parts[0]
    else:
        out = pc.binary_join_element_wise(*parts, _SEPARATOR, null_handling="emit_null")
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def weights(batch: pa.RecordBatch | pa.Table, weight: str) -> pa.Array:
    """Per-record weight: ``"packets"`` (1 each) or ``"bytes"`` (``wire_len``)."""
    if weight == "packets":
        return pa.Array.from_buffers(
            pa.int64(), batch.num_rows, [None, pa.py_buffer(np.ones(batch.num_rows, np.int64))]
        )
    if weight == "bytes":
        col = pc.cast(batch.column("wire_len"), pa.int64())
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    raise ValueError(f"weight: expected 'packets' or 'bytes', got {weight!r}")


def weight_values(batch: pa.RecordBatch | pa.Table, weight: str) -> np.ndarray | None:
    """:func:`weights` as ``int64`` numpy, a null weight as 0; None for ``"packets"`` (1 each)."""
    if weight == "packets":
        return None
    values, valid = as_numpy(weights(batch, weight))
    return values if valid is None else np.where(valid, values, 0)


def as_numpy(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer (or timestamp) array's values as numpy (no copy) and its validity (None: no nulls).

    The values at null positions are undefined.

    >>> as_numpy(pa.array([3, None, 5], pa.int16()))[1].tolist()
    [True, False, True]
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    type_ = array.type
    dtype = np.dtype(np.int64) if pa.types.is_timestamp(type_) else np.dtype(type_.to_pandas_dtype())
    n = len(array)
    if dtype.kind not in "iu" or type_.bit_width != dtype.itemsize * 8:
        raise TypeError(f"as_numpy: not a fixed-width integer array: {type_}")
    if n == 0:
        return np.zeros(0, dtype), None
    values = np.frombuffer(array.buffers()[1], dtype, n, array.offset * dtype.itemsize)
    if not array.null_count:
        return values, None
    bits = np.frombuffer(array.buffers()[0], np.uint8)
    valid = np.unpackbits(bits, count=array.offset + n, bitorder="little")[array.offset :].view(bool)
    return values, valid


def key_codes(
    batch: pa.RecordBatch | pa.Table, fields: Sequence[str]
) -> tuple[np.ndarray, np.ndarray | None, pa.Array]:
    """The key of every record as a code into the batch's distinct key texts.

    Returns ``(codes, valid, texts)``: ``texts`` is a string array without duplicates or nulls, and
    for every record with the key (``valid``; None when all have it) ``texts[codes[i]]`` equals
    ``key_text(batch, fields)[i]``. Codes of the other records are undefined. The texts are made by
    :func:`key_text` once per distinct combination of field values, not once per record.

    >>> t = pa.table({"proto": pa.array([6, 17, 6], pa.int16()),
    ...               "dst_port": pa.array([80, None, 80], pa.int32())})
    >>> codes, valid, texts = key_codes(t, ("proto", "dst_port"))
    >>> [texts[int(c)].as_py() for c, v in zip(codes, valid) if v]
    ['6,80', '6,80']
    """
    n = batch.num_rows
    columns = [batch.column(f) for f in fields]
    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    try:
        encoded = [c.dictionary_encode() for c in columns]
        parts = [as_numpy(e.indices) for e in encoded]
    except (pa.ArrowException, TypeError):  # a type without a hash kernel: per-record texts
        return _text_codes(key_text(batch, fields))
    if len(fields) == 1 and pa.types.is_string(columns[0].type):
        return parts[0][0], parts[0][1], encoded[0].dictionary
    sizes = [len(e.dictionary) for e in encoded]
    if 0 in sizes:  # a field null everywhere: no record has the key
        return np.zeros(n, np.int64), np.zeros(n, bool), key_text(batch.slice(0, 0), fields)
    if math.prod(sizes) >= 2**62:
        return _text_codes(key_text(batch, fields))
    valid: np.ndarray | None = None
    for _, v in parts:
        if v is not None:
            valid = v if valid is None else valid & v
    if len(fields) == 1:
        codes = parts[0][0]
        distinct = [encoded[0].dictionary]
    else:
        # Mixed radix over the fields' dictionary indices, then the distinct combinations.
        combined = np.zeros(n, np.int64)
        for (field_codes, _), size in zip(parts, sizes, strict=True):
            combined *= size
            combined += field_codes
        if valid is not None:
            combined[~valid] = 0
        enc = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(combined)]).dictionary_encode()
        codes = as_numpy(enc.indices)[0]
        rest = as_numpy(enc.dictionary)[0].copy()
        indices = []
        for size in reversed(sizes):
            rest, index = np.divmod(rest, size)
            indices.append(index)
        distinct = [
            e.dictionary.take(pa.Array.from_buffers(pa.int64(), len(i), [None, pa.py_buffer(i)]))
            for e, i in zip(encoded, reversed(indices), strict=True)
        ]
    texts = key_text(pa.RecordBatch.from_arrays(distinct, names=list(fields)), fields)
    # Different field values can join to the same text (a ',' inside a string field): merge them.
    merged = texts.dictionary_encode()
    if len(merged.dictionary) < len(texts):
        codes = as_numpy(merged.indices)[0][codes]
        texts = merged.dictionary
    return codes, valid, texts


def _text_codes(keys: pa.Array) -> tuple[np.ndarray, np.ndarray | None, pa.Array]:
    encoded = keys.dictionary_encode()
    codes, valid = as_numpy(encoded.indices)
    return codes, valid, encoded.dictionary
