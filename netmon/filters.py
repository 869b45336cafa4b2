"""The ``--filter`` expression: a small boolean grammar over record fields, evaluated with pyarrow.

Grammar (keywords are case-insensitive)::

    expr       := term ("or" term)*
    term       := factor ("and" factor)*
    factor     := "not" factor | "(" expr ")" | comparison
    comparison := FIELD OP VALUE          OP: = == != < <= > >=

``FIELD`` is a record column (``proto``, ``dst_port``, ``src_ip``, ``tcp_flags``, ``vlan``, ``iface``,
...) or an alias matching either direction: ``port`` (``src_port`` or ``dst_port``), ``ip`` / ``host``
(``src_ip`` or ``dst_ip``). Values are decimal or ``0x`` integers; ``proto`` also takes the names
``tcp``, ``udp``, ``icmp``, ``icmpv6``, ``gre``, ``esp``, ``ah``, ``sctp``, ``igmp``; the IP fields
take an address or a CIDR network (IPv4 or IPv6), compared on the address, not the text, and only
with ``=`` / ``!=``. ``iface`` takes text.

A comparison with a null field (``dst_port`` of an ICMP packet) is false, and ``!=`` is exactly
``not =``: ``dst_port!=80`` keeps ICMP packets.

Evaluation is vectorised: numeric comparisons are pyarrow compute kernels; an address or CIDR test
runs once per distinct address of the batch, then ``is_in`` maps it onto the rows.

Examples
--------
>>> import pyarrow as pa
>>> f = parse_filter("proto=tcp and (dst_port=80 or dst_port=443) and not src_ip=10.0.0.0/8")
>>> str(f)
'((proto = 6 and (dst_port = 80 or dst_port = 443)) and not src_ip = 10.0.0.0/8)'
>>> batch = pa.RecordBatch.from_pydict({
...     "proto": pa.array([6, 6, 17, 6], pa.int16()),
...     "dst_port": pa.array([80, 443, 53, 80], pa.int32()),
...     "src_ip": ["192.0.2.1", "10.1.2.3", "192.0.2.1", "2001:db8::1"]})
>>> f.mask(batch).to_pylist()
[True, False, False, True]
>>> parse_filter("proto=tpc")
Traceback (most recent call last):
...
netmon.filters.FilterError: bad filter at column 7 ('tpc'): unknown protocol name (known: ah, esp, ...)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from netmon.records import ARROW_SCHEMA

__all__ = ["FilterError", "PacketFilter", "parse_filter", "PROTOCOL_NUMBERS"]

#: Protocol names ``proto`` accepts.
PROTOCOL_NUMBERS = {
    "icmp": 1,
    "igmp": 2,
    "tcp": 6,
    "udp": 17,
    "gre": 47,
    "esp": 50,
    "ah": 51,
    "icmpv6": 58,
    "sctp": 132,
}
_IP_FIELDS = ("src_ip", "dst_ip")
_TEXT_FIELDS = ("iface",)
_NUMERIC_FIELDS = tuple(f.name for f in ARROW_SCHEMA if pa.types.is_integer(f.type) and f.name not in ("ts",))
_ALIASES = {"port": ("src_port", "dst_port"), "ip": _IP_FIELDS, "host": _IP_FIELDS}
_OPS = {
    "=": "equal",
    "==": "equal",
    "!=": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}
_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|<=|>=|=|<|>)|(?P<paren>[()])|(?P<word>[A-Za-z0-9_.:/\-]+)|(?P<bad>\S))"
)


class FilterError(ValueError):
    """A filter expression that does not parse; the message names the column and token."""


class PacketFilter:
    """A compiled filter: ``mask(batch)`` gives a boolean array, ``apply(batch)`` the kept rows."""

    def __init__(self, node: _Node, text: str) -> None:
        self._node = node
        self.text = text

    def mask(self, batch: pa.RecordBatch | pa.Table) -> pa.BooleanArray:
        """Rows of ``batch`` the filter keeps (no nulls)."""
        out = self._node.eval(batch)
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of ``batch`` the filter keeps."""
        return batch.filter(self.mask(batch))

    def __str__(self) -> str:
        return str(self._node)

    def __repr__(self) -> str:
        return f"parse_filter({self.text!r})"


# --- expression tree ---------------------------------------------------------------------------


class _Node:
    def eval(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class _Compare(_Node):
    field: str
    op: str
    value: int | str

    def eval(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        column = batch.column(self.field)
        if self.op == "!=":
            return pc.invert(pc.fill_null(pc.equal(column, self.value), False))
        return pc.fill_null(getattr(pc, _OPS[self.op])(column, self.value), False)

    def __str__(self) -> str:
        return f"{self.field} {'=' if self.op == '==' else self.op} {self.value}"


@dataclass(frozen=True)
class _InNetwork(_Node):
    field: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    negate: bool

    def eval(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        column = batch.column(self.field)
        net = self.network
        if net.num_addresses == 1:
            hit = pc.fill_null(pc.equal(column, str(net.network_address)), False)
        else:
            matching = [text for text in pc.unique(column).to_pylist() if text and _in(text, net)]
            hit = pc.is_in(column, value_set=pa.array(matching, pa.string()))
        return pc.invert(hit) if self.negate else hit

    def __str__(self) -> str:
        return f"{self.field} {'!=' if self.negate else '='} {self.network}"


def _in(text: str, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(text) in net
    except ValueError:
        return False


@dataclass(frozen=True)
class _Bool(_Node):
    op: str  # "and" | "or"
    left: _Node
    right: _Node

    def eval(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        kernel = pc.and_ if self.op == "and" else pc.or_
        return kernel(self.left.eval(batch), self.right.eval(batch))

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class _Not(_Node):
    inner: _Node

    def eval(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        return pc.invert(self.inner.eval(batch))

    def __str__(self) -> str:
        return f"not {self.inner}"


# --- parser ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # op | paren | word | end
    text: str
    col: int  # 1-based column in the expression


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing whitespace is left
            break
        kind = m.lastgroup or "bad"
        col = m.start(kind) + 1
        if kind == "bad":
            raise FilterError(f"bad filter at column {col} ({m.group(kind)!r}): unexpected character")
        out.append(_Token(kind, m.group(kind), col))
        pos = m.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def error(self, token: _Token, why: str) -> FilterError:
        shown = repr(token.text) if token.kind != "end" else "end of expression"
        return FilterError(f"bad filter at column {token.col} ({shown}): {why}")

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token.kind == "word" and token.text.lower() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> _Node:
        node = self.expr()
        token = self.peek()
        if token.kind != "end":
            raise self.error(token, "expected 'and', 'or' or the end of the expression")
        return node

    def expr(self) -> _Node:
        node = self.term()
        while self.keyword("or"):
            node = _Bool("or", node, self.term())
        return node

    def term(self) -> _Node:
        node = self.factor()
        while self.keyword("and"):
            node = _Bool("and", node, self.factor())
        return node

    def factor(self) -> _Node:
        if self.keyword("not"):
            return _Not(self.factor())
        token = self.peek()
        if token.kind == "paren" and token.text == "(":
            self.take()
            node = self.expr()
            close = self.take()
            if close.kind != "paren" or close.text != ")":
                raise self.error(close, "expected ')'")
            return node
        return self.comparison()

    def comparison(self) -> _Node:
        field = self.take()
        if field.kind != "word" or field.text.lower() in ("and", "or", "not"):
            raise self.error(field, "expected a field name")
        name = field.text.lower()
        known = (*_NUMERIC_FIELDS, *_IP_FIELDS, *_TEXT_FIELDS, *_ALIASES)
        if name not in known:
            raise self.error(field, f"unknown field (known: {', '.join(sorted(known))})")
        op = self.take()
        if op.kind != "op":
            raise self.error(op, "expected an operator (= != < <= > >=)")
        value = self.take()
        if value.kind != "word":
            raise self.error(value, "expected a value")
        fields = _ALIASES.get(name, (name,))
        nodes = [self.leaf(f, op, value) for f in fields]
        if len(nodes) == 1:
            return nodes[0]
        # An alias matches either direction; its negation matches neither.
        if op.text == "!=":
            return _Bool("and", nodes[0], nodes[1])
        return _Bool("or", nodes[0], nodes[1])

    def leaf(self, field: str, op: _Token, value: _Token) -> _Node:
        if field in _IP_FIELDS:
            if op.text not in ("=", "==", "!="):
                raise self.error(op, f"{field} compares only with = or !=")
            try:
                net = ipaddress.ip_network(value.text, strict=False)
            except ValueError:
                raise self.error(value, "not an IP address or CIDR network") from None
            return _InNetwork(field, net, negate=op.text == "!=")
        if field in _TEXT_FIELDS:
            if op.text not in ("=", "==", "!="):
                raise self.error(op, f"{field} compares only with = or !=")
            return _Compare(field, op.text, value.text)
        return _Compare(field, op.text, self.number(field, value))

    def number(self, field: str, token: _Token) -> int:
        text = token.text.lower()
        if field == "proto" and text in PROTOCOL_NUMBERS:
            return PROTOCOL_NUMBERS[text]
        try:
            number = int(text, 16) if text.startswith("0x") else int(text, 10)
        except ValueError:
            if field == "proto" and text.isalpha():
                names = ", ".join(sorted(PROTOCOL_NUMBERS))
                raise self.error(token, f"unknown protocol name (known: {names})") from None
            raise self.error(token, f"{field} takes an integer") from None
        if number < 0:
            raise self.error(token, f"{field} takes a non-negative integer")
        return number


def parse_filter(text: str) -> PacketFilter:
    """Compile a filter expression; :class:`FilterError` names the column and token of a mistake."""
    if not text or not text.strip():
        raise FilterError("bad filter: the expression is empty")
    return PacketFilter(_Parser(text).parse(), text)
