"""Query keys and weights over packet records: one canonical text per key, shared by every engine.

A key is one record column or a tuple of columns (``"src_ip"``, ``"src_ip,dst_ip"``,
``"proto,dst_port"``). Its canonical text is the columns' text forms joined by ``,`` (IPv6
addresses contain ``:``, never ``,``): ``"10.0.0.1,192.0.2.7"``, ``"6,80"``. Spark produces the
same text with ``concat_ws(",", ...)`` over the same columns cast to string, so offline and
streaming answers compare exactly. A record missing any of the key's fields (e.g. no ports) has a
null key and is skipped by that query.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ingest.schema import RECORD_COLUMNS

__all__ = ["KEY_SEPARATOR", "key_text", "parse_key", "weights"]

KEY_SEPARATOR = ","

_NOT_KEYS = {"ts"}


def parse_key(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"src_ip,dst_ip"`` or ``("src_ip", "dst_ip")`` -> validated tuple of column names.

    >>> parse_key("proto, dst_port")
    ('proto', 'dst_port')
    """
    fields = tuple(f.strip() for f in (spec.split(",") if isinstance(spec, str) else spec) if f.strip())
    if not fields:
        raise ValueError("key: empty key specification")
    for f in fields:
        if f not in RECORD_COLUMNS or f in _NOT_KEYS:
            allowed = ", ".join(c for c in RECORD_COLUMNS if c not in _NOT_KEYS)
            raise ValueError(f"key: unknown field {f!r} (one of: {allowed})")
    return fields


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
        out = pc.binary_join_element_wise(*parts, KEY_SEPARATOR, null_handling="emit_null")
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def weights(batch: pa.RecordBatch | pa.Table, weight: str) -> pa.Array:
    """Per-record weight: ``"packets"`` (1 each) or ``"bytes"`` (``wire_len``)."""
    if weight == "packets":
        return pa.array([1] * batch.num_rows, pa.int64())
    if weight == "bytes":
        col = pc.cast(batch.column("wire_len"), pa.int64())
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    raise ValueError(f"weight: expected 'packets' or 'bytes', got {weight!r}")
