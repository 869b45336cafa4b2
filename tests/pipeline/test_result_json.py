"""Column-wise JSON text of result rows equals ``json.dumps`` of each row (the oracle), and the
republisher's messages cut the text at row boundaries without losing or repeating a byte."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netmon.results import message_rows
from pipeline.publish import MESSAGE_BYTES, _messages
from pipeline.result_json import json_lines, row_to_json

_US = 1_000_000
# Python's datetimes: years 1 to 9999
_LOW = int((dt.datetime(1, 1, 1, tzinfo=dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds())
_HIGH = int(
    (
        dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    ).total_seconds()
)

texts = st.one_of(
    st.text(max_size=12),  # any code point: \uXXXX escapes, control characters
    st.text(alphabet='ab."\\:/ 0123456789', max_size=12),  # the column-wise path: quotes, backslashes
    st.sampled_from(["10.0.0.53", "top-src", "udp/53"]),
)
numbers = st.integers(-(2**62), 2**62)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**17), 10**17).map(float))
seconds = st.integers(_LOW, _HIGH)
micros = st.one_of(st.just(0), st.integers(0, _US - 1))


def _column(kind: str, n: int, draw: st.DrawFn) -> pa.Array:
    def maybe(values: st.SearchStrategy) -> list:
        return draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n))

    if kind == "string":
        return pa.array(maybe(texts), pa.string())
    if kind == "int32":
        return pa.array(maybe(st.integers(-(2**31), 2**31 - 1)), pa.int32())
    if kind == "int64":
        return pa.array(maybe(numbers), pa.int64())
    if kind == "double":
        return pa.array(maybe(floats), pa.float64())
    if kind == "bool":
        return pa.array(maybe(st.booleans()), pa.bool_())
    values = [None if v is None else v[0] * _US + v[1] for v in maybe(st.tuples(seconds, micros))]
    if kind == "us-naive":
        return pa.array(values, pa.timestamp("us"))
    if kind == "ms":
        return pa.array([None if v is None else v // 1000 for v in values], pa.timestamp("ms", tz="UTC"))
    return pa.array(values, pa.timestamp("us", tz="UTC"))


KINDS = ("string", "int32", "int64", "double", "bool", "us-utc", "us-naive", "ms")


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 12))
    names = draw(
        st.lists(st.sampled_from(["query", "window_end", "key", "count", 'a"b', "z", "é"]), unique=True)
    )
    return (
        pa.table({name: _column(draw(st.sampled_from(KINDS)), n, draw) for name in names})
        if names
        else pa.table({})
    )


@settings(max_examples=400, deadline=None)
@given(tables())
def test_each_line_is_json_dumps_of_its_row(table: pa.Table) -> None:
    lines = json_lines(table).to_pylist() if table.num_columns else []
    assert lines == [row_to_json(row).decode() + "\n" for row in table.to_pylist()]


def test_a_result_table_is_encoded_column_wise_and_equal_to_the_oracle() -> None:
    # the shape the republisher sends by the million: repeated names and window ends
    n = 5_000
    table = pa.table(
        {
            "query": [["top-src", "top-dst", 'odd "q"\\'][i % 3] for i in range(n)],
            "window_end": pa.array(
                [(i // 20) * _US + (i % 2) * 250_000 for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "rank": pa.array([i % 20 for i in range(n)], pa.int32()),
            "key": [None if i % 97 == 0 else f"10.0.{i % 256}.{i % 7}" for i in range(n)],
            "count": [n - i for i in range(n)],
            "share": [i / 7 for i in range(n)],
        }
    )
    assert json_lines(table).to_pylist() == [row_to_json(row).decode() + "\n" for row in table.to_pylist()]


def test_binary_columns_are_left_out() -> None:
    table = pa.table({"sketch": pa.array([b"\x01\x02", b""], pa.binary()), "n": [1, 2]})
    assert json_lines(table).to_pylist() == ['{"n":1}\n', '{"n":2}\n']


@pytest.mark.parametrize("sizes", [[10] * 100, [MESSAGE_BYTES // 3] * 7, [5, MESSAGE_BYTES * 2, 5, 7], [1]])
def test_messages_cut_at_rows_and_keep_every_byte(sizes: list[int]) -> None:
    lines = pa.array([json.dumps({"i": i, "pad": "x" * size}) + "\n" for i, size in enumerate(sizes)])
    messages = list(_messages(lines.slice(0)))
    assert b"".join(value for _, _, value in messages) == "".join(lines.to_pylist()).encode()
    assert [m[0] for m in messages] == [0] + [m[1] for m in messages[:-1]]  # consecutive, no gap
    assert messages[-1][1] == len(sizes)
    for first, end, value in messages:
        rows = message_rows(value, b"2")
        assert [json.loads(r)["i"] for r in rows] == list(range(first, end))
        assert len(value) <= MESSAGE_BYTES or end - first == 1  # only a single long row goes over
    # a message is as full as the next row allows
    for (_, end, value), _next in zip(messages, messages[1:], strict=False):
        assert len(value) + len(lines[end].as_py()) > MESSAGE_BYTES


def test_messages_of_a_sliced_array_start_at_its_first_row() -> None:
    lines = pa.array([f'{{"i":{i}}}\n' for i in range(10)])
    assert [v for _, _, v in _messages(lines.slice(4, 3))] == [b'{"i":4}\n{"i":5}\n{"i":6}\n']
