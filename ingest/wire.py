"""The Kafka wire format ``packets-csv`` v1: record batches to messages and back.

One Kafka message carries many packet-header records as newline-separated CSV lines with the
19 columns of :data:`netmon.records.ARROW_SCHEMA` in order (``ts`` as integer nanoseconds, an empty
field for null, no quoting) and three headers: ``netmon.format``, ``netmon.version`` and
``netmon.records``. The layout is specified in ``docs/wire-format.md``.

:func:`encode_messages` is the producer's hot path: one vectorised CSV write per record batch
(pyarrow), then the text is cut into messages at line boundaries found with numpy.
:func:`decode_message` is the exact inverse, for tests and for Python consumers.

Examples
--------
>>> import pyarrow as pa
>>> from netmon.records import ARROW_SCHEMA
>>> row = {name: [None] for name in ARROW_SCHEMA.names}
>>> row.update(ts=[1_700_000_000_123_456_789], cap_len=[74], wire_len=[74], ip_version=[4],
...            src_ip=["10.0.0.1"], dst_ip=["192.0.2.7"], proto=[6], iface=["0"])
>>> batch = pa.RecordBatch.from_pydict(row, schema=ARROW_SCHEMA)
>>> [(value, headers)] = encode_messages(batch, records_per_message=1000)
>>> value
b'1700000000123456789,74,74,4,10.0.0.1,192.0.2.7,6,,,,,,,,,,,,0\\n'
>>> headers
[('netmon.format', b'packets-csv'), ('netmon.version', b'1'), ('netmon.records', b'1')]
>>> decode_message(value, headers).to_batches()[0].equals(batch)
True
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from netmon.records import ARROW_SCHEMA, WIRE_FORMAT, WIRE_VERSION

__all__ = [
    "CONTROL_WATERMARK",
    "HEADER_CONTROL",
    "HEADER_FORMAT",
    "HEADER_RECORDS",
    "HEADER_VERSION",
    "WireFormatError",
    "decode_message",
    "encode_messages",
    "parse_lines",
    "parse_many",
    "is_control",
    "watermark_message",
    "sanitise_iface",
]

HEADER_FORMAT = "netmon.format"
HEADER_VERSION = "netmon.version"
HEADER_RECORDS = "netmon.records"
#: Present only on control messages; ``watermark``: the value is one line, an event time in ns.
HEADER_CONTROL = "netmon.control"
CONTROL_WATERMARK = "watermark"

_FORMAT_BYTES = WIRE_FORMAT.encode()
_VERSION_BYTES = str(WIRE_VERSION).encode()
#: Characters a text field may not carry on the wire (CSV structure, and `"` which CSV readers
#: take for a quote); the producer replaces each with ``_``.
_UNSAFE = r'[,\n\r"]'
_WIRE_SCHEMA = ARROW_SCHEMA.set(0, pa.field("ts", pa.int64()))
_WRITE_OPTIONS = pacsv.WriteOptions(include_header=False, quoting_style="none", batch_size=65536)
_READ_OPTIONS = pacsv.ReadOptions(column_names=list(ARROW_SCHEMA.names), use_threads=False)
_PARSE_OPTIONS = pacsv.ParseOptions(quote_char=False, double_quote=False, newlines_in_values=False)
_CONVERT_OPTIONS = pacsv.ConvertOptions(
    column_types={f.name: f.type for f in _WIRE_SCHEMA},
    null_values=[""],
    strings_can_be_null=True,
    quoted_strings_can_be_null=True,
)


class WireFormatError(ValueError):
    """A Kafka message that is not a valid ``packets-csv`` v1 message (the reason is in the text)."""


def sanitise_iface(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Replace ``,``, ``\\n``, ``\\r`` and ``"`` in a text column with ``_`` (a no-op if none occur).

    >>> sanitise_iface(pa.array(["eth0", "a,b", None])).to_pylist()
    ['eth0', 'a_b', None]
    """
    if len(column) == 0 or not pc.any(pc.match_substring_regex(column, _UNSAFE)).as_py():
        return column
    return pc.replace_substring_regex(column, _UNSAFE, "_")


def _wire_batch(batch: pa.RecordBatch, *, sanitise: bool) -> pa.RecordBatch:
    """``batch`` with ``ts`` as int64 nanoseconds (and, if asked, text fields made CSV-safe)."""
    if batch.schema.names != ARROW_SCHEMA.names:
        raise WireFormatError(
            f"record batch columns {batch.schema.names} differ from the record schema {ARROW_SCHEMA.names}"
        )
    columns = list(batch.columns)
    columns[0] = columns[0].cast(pa.int64())
    if sanitise:
        for i in (4, 5, 18):  # src_ip, dst_ip, iface
            columns[i] = sanitise_iface(columns[i])
    return pa.RecordBatch.from_arrays(columns, schema=_WIRE_SCHEMA)


def _csv(batch: pa.RecordBatch) -> memoryview:
    """The batch as unquoted CSV lines. Text with CSV-structural characters is rare (only a
    foreign ``iface`` could hold any): pyarrow refuses it unquoted, and only then is it sanitised."""
    sink = io.BytesIO()
    try:
        pacsv.write_csv(_wire_batch(batch, sanitise=False), sink, _WRITE_OPTIONS)
    except pa.ArrowInvalid:
        sink = io.BytesIO()
        pacsv.write_csv(_wire_batch(batch, sanitise=True), sink, _WRITE_OPTIONS)
    return sink.getbuffer()


def _headers(records: int) -> list[tuple[str, bytes]]:
    return [
        (HEADER_FORMAT, _FORMAT_BYTES),
        (HEADER_VERSION, _VERSION_BYTES),
        (HEADER_RECORDS, str(records).encode()),
    ]


def encode_messages(
    batch: pa.RecordBatch, records_per_message: int
) -> Iterator[tuple[bytes, list[tuple[str, bytes]]]]:
    """Encode ``batch`` as Kafka messages of at most ``records_per_message`` records each.

    Parameters
    ----------
    batch
        Records with the columns of :data:`netmon.records.ARROW_SCHEMA` (in that order).
    records_per_message
        Records per message; the last message of the batch may hold fewer.

    Yields
    ------
    tuple[bytes, list[tuple[str, bytes]]]
        The message value (CSV lines, each ending in ``\\n``) and its Kafka headers.
    """
    if records_per_message < 1:
        raise ValueError(f"records_per_message must be >= 1, got {records_per_message}")
    n = batch.num_rows
    if n == 0:
        return
    text = _csv(batch)
    if n <= records_per_message:
        yield bytes(text), _headers(n)
        return
    # Byte offset just past every records_per_message-th line end.
    line_ends = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == 10)
    if len(line_ends) != n:  # cannot happen: no field holds a newline after sanitising
        raise WireFormatError(f"CSV writer produced {len(line_ends)} lines for {n} records")
    cuts = line_ends[records_per_message - 1 :: records_per_message] + 1
    start = 0
    for end in cuts.tolist():
        yield bytes(text[start:end]), _headers(records_per_message)
        start = end
    rest = n % records_per_message
    if rest:
        yield bytes(text[start:]), _headers(rest)


def watermark_message(event_ns: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A control message that advances the pipeline's event-time watermark to ``event_ns``.

    It carries no packet record (``netmon.records`` is ``0``); consumers count it as control.
    A replay sends one to every partition at its end so the last windows close.

    >>> value, headers = watermark_message(1_700_000_010_000_000_000)
    >>> value, dict(headers)["netmon.control"], dict(headers)["netmon.records"]
    (b'1700000010000000000\\n', b'watermark', b'0')
    """
    return f"{int(event_ns)}\n".encode(), [*_headers(0), (HEADER_CONTROL, CONTROL_WATERMARK.encode())]


def is_control(headers: Sequence[tuple[str, bytes | str]] | Mapping[str, bytes | str] | None) -> bool:
    """Whether a message with these headers is a control message (not packet records)."""
    return HEADER_CONTROL in _header_map(headers)


def _header_map(headers: Sequence[tuple[str, bytes | str]] | Mapping[str, bytes | str] | None) -> dict:
    items = headers.items() if isinstance(headers, Mapping) else (headers or [])
    out: dict[str, str] = {}
    for key, value in items:
        out[key] = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    return out


def decode_message(
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | str]] | Mapping[str, bytes | str] | None,
) -> pa.Table:
    """Decode one ``packets-csv`` v1 message into a table with :data:`ARROW_SCHEMA`.

    A control message (header ``netmon.control``, :func:`watermark_message`) gives an empty table.

    Raises
    ------
    WireFormatError
        On a missing or different ``netmon.format`` / ``netmon.version`` header, a missing or bad
        ``netmon.records`` header, lines that do not parse as records, or a record count that
        differs from ``netmon.records``.
    """
    meta = _header_map(headers)
    fmt, version, records = meta.get(HEADER_FORMAT), meta.get(HEADER_VERSION), meta.get(HEADER_RECORDS)
    if fmt != WIRE_FORMAT:
        raise WireFormatError(f"header {HEADER_FORMAT}={fmt!r}, expected {WIRE_FORMAT!r}")
    if version != str(WIRE_VERSION):
        raise WireFormatError(f"header {HEADER_VERSION}={version!r}, expected '{WIRE_VERSION}'")
    if records is None or not records.isdigit():
        raise WireFormatError(f"header {HEADER_RECORDS}={records!r} is not a record count")
    expected = int(records)
    if HEADER_CONTROL in meta:  # control messages carry no packet records
        return ARROW_SCHEMA.empty_table()
    value = value or b""
    if not value.strip(b"\n"):
        table = _WIRE_SCHEMA.empty_table()
    else:
        try:
            table = pacsv.read_csv(pa.py_buffer(value), _READ_OPTIONS, _PARSE_OPTIONS, _CONVERT_OPTIONS)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise WireFormatError(f"message value is not packets-csv v1 records: {first}") from None
    if table.num_rows != expected:
        raise WireFormatError(
            f"message holds {table.num_rows} records, header {HEADER_RECORDS} says {expected}"
        )
    ts = table.column(0).cast(ARROW_SCHEMA.field("ts").type)
    return table.set_column(0, ARROW_SCHEMA.field("ts"), ts)


#: The integer range of each integer wire column (``ts`` travels as int64 nanoseconds).
_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_lines(value: bytes) -> tuple[pa.Table, int]:
    """The packet records of a message value, leniently: ``(records, malformed lines)``.

    The pipeline's reading of ``docs/wire-format.md``, where one bad line must not cost the good
    ones: a non-empty line is a record when it has exactly 19 fields and its ``ts_ns`` is an
    integer; a field that is not a value of its column's type (``proto=99999``, ``ttl=x``) is
    null, as Spark's ``from_csv`` in ``PERMISSIVE`` mode makes it; every other non-empty line is
    malformed and only counted. The table has the wire columns (``ts`` as int64 nanoseconds).
    Unlike :func:`decode_message` nothing is checked against the headers.

    The common case — every line well formed — is one pyarrow CSV read; only a value that pyarrow
    refuses is parsed line by line.

    >>> good = b"1700000000123456789,74,74,4,10.0.0.1,192.0.2.7,6,,,,,,,,,,,,0\\n"
    >>> table, bad = parse_lines(good + b"x,1\\n" + good.replace(b",6,", b",99999,"))
    >>> table.num_rows, bad, table.column("proto").to_pylist()
    (2, 1, [6, None])
    """
    read = _read_lines(value)
    return read if read is not None else _parse_lines_slowly(value)


def parse_many(values: Sequence[bytes]) -> tuple[pa.Table, int]:
    """:func:`parse_lines` of several message values, in order and concatenated.

    One pyarrow CSV read over all of them (each value ends a line: a value without a final
    newline gets one), about twice as fast per record as a read per 1,000-record message; when
    pyarrow refuses the whole, each value is parsed on its own, so only a refused one is read
    line by line.
    """
    if not values:
        return _WIRE_SCHEMA.empty_table(), 0
    if len(values) == 1:
        return parse_lines(values[0])
    joined = b"".join(v if v.endswith(b"\n") else v + b"\n" for v in values)
    read = _read_lines(joined)
    if read is not None:
        return read
    parts = [parse_lines(v) for v in values]
    return pa.concat_tables([t for t, _ in parts]), sum(bad for _, bad in parts)


def _read_lines(value: bytes) -> tuple[pa.Table, int] | None:
    """:func:`parse_lines`' one pyarrow read, or None when pyarrow refuses the value."""
    invalid = 0

    def skip(_row: object) -> str:
        nonlocal invalid
        invalid += 1
        return "skip"

    options = pacsv.ParseOptions(
        quote_char=False, double_quote=False, newlines_in_values=False, invalid_row_handler=skip
    )
    try:
        table = pacsv.read_csv(pa.py_buffer(value), _READ_OPTIONS, options, _CONVERT_OPTIONS)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if table.num_rows == 0:
        return _WIRE_SCHEMA.empty_table(), invalid
    ts = table.column(0)
    if ts.null_count:
        table = table.filter(pc.is_valid(ts))
        invalid += ts.null_count
    return table.cast(_WIRE_SCHEMA), invalid


def _field(text: str, kind: pa.DataType) -> int | str | None:
    if text == "":
        return None
    if kind == pa.string():
        return text
    if not _INTEGER.fullmatch(text):
        return None
    number, bits = int(text), _INT_BITS[kind]
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None


def _parse_lines_slowly(value: bytes) -> tuple[pa.Table, int]:
    """:func:`parse_lines`, one line at a time (a value with a bad field or bytes that are not UTF-8)."""
    kinds = [field.type for field in _WIRE_SCHEMA]
    rows: list[list[int | str | None]] = []
    malformed = 0
    for line in value.decode("utf-8", "replace").split("\n"):
        if line == "":
            continue
        fields = line.split(",")
        row = [_field(text, kind) for text, kind in zip(fields, kinds, strict=False)]
        if len(fields) != len(kinds) or row[0] is None:
            malformed += 1
            continue
        rows.append(row)
    columns = [pa.array([row[i] for row in rows], kind) for i, kind in enumerate(kinds)]
    return pa.Table.from_arrays(columns, schema=_WIRE_SCHEMA), malformed
