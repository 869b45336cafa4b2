"""The --filter grammar: vectorised masks against plain-Python predicates, and its error messages."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pyarrow as pa
import pytest

from ingest import CaptureError, read_records
from ingest.generate import generate
from netmon.filters import FilterError, parse_filter
from netmon.records import ARROW_SCHEMA
from tests.conftest import REPO_ROOT

CAPTURES = REPO_ROOT.parent / "shared" / "captures"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """Generated IPv4 traffic (TCP, UDP/DNS, ICMP) plus real IPv6 and fragment captures when present."""
    path = tmp_path_factory.mktemp("filters") / "sample.pcap"
    generate(path, packets=3000, seed=11)
    batches = list(read_records(path))
    for name in ("communityid-ipv6.pcap", "ipv4-fragmented-1.pcap", "http-vlan-0.pcap"):
        try:
            batches += list(read_records(CAPTURES / name, iface="real"))
        except CaptureError:
            pass  # the shared captures are optional here
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def net(text: str) -> Callable[[str | None], bool]:
    network = ipaddress.ip_network(text, strict=False)

    def inside(ip: str | None) -> bool:
        return ip is not None and ipaddress.ip_address(ip) in network

    return inside


in10 = net("10.0.0.0/8")
in101 = net("10.1.0.0/16")
V6 = "2001:470:e5bf:dead:4957:2174:e82c:4887"
in_v6 = net("2001:470::/32")
CASES: list[tuple[str, Callable[[dict], bool]]] = [
    ("proto=tcp", lambda r: r["proto"] == 6),
    ("proto = 17", lambda r: r["proto"] == 17),
    ("proto==icmp", lambda r: r["proto"] == 1),
    ("PROTO=TCP AND dst_port=443", lambda r: r["proto"] == 6 and r["dst_port"] == 443),
    ("proto=tcp and dst_port=80", lambda r: r["proto"] == 6 and r["dst_port"] == 80),
    ("dst_port!=443", lambda r: r["dst_port"] != 443),  # null ports (ICMP, fragments) kept
    ("not dst_port=443", lambda r: r["dst_port"] != 443),
    ("src_port<1024", lambda r: r["src_port"] is not None and r["src_port"] < 1024),
    ("dst_port>=32768 and dst_port<=60999", lambda r: 32768 <= (r["dst_port"] or 0) <= 60999),
    ("tcp_flags=0x12", lambda r: r["tcp_flags"] == 0x12),
    ("tcp_flags=2 or tcp_flags=18", lambda r: r["tcp_flags"] in (2, 18)),
    ("port=53", lambda r: 53 in (r["src_port"], r["dst_port"])),
    ("port!=53", lambda r: 53 not in (r["src_port"], r["dst_port"])),
    ("src_ip=10.0.0.0/8", lambda r: in10(r["src_ip"])),
    ("src_ip!=10.0.0.0/8", lambda r: not in10(r["src_ip"])),
    ("dst_ip=10.0.0.53", lambda r: r["dst_ip"] == "10.0.0.53"),
    ("ip=10.0.0.53", lambda r: "10.0.0.53" in (r["src_ip"], r["dst_ip"])),
    (
        "host=10.1.0.0/16 and proto=icmp",
        lambda r: (in101(r["src_ip"]) or in101(r["dst_ip"])) and r["proto"] == 1,
    ),
    ("src_ip=2001:470::/32 or dst_ip=2001:470::/32", lambda r: in_v6(r["src_ip"]) or in_v6(r["dst_ip"])),
    (f"src_ip={V6}", lambda r: r["src_ip"] == V6),
    ("ip_version=6", lambda r: r["ip_version"] == 6),
    ("vlan=0", lambda r: r["vlan"] == 0),
    ("iface=real and not proto=tcp", lambda r: r["iface"] == "real" and r["proto"] != 6),
    (
        "(proto=udp or proto=icmp) and not (src_ip=10.0.0.53 or src_ip=10.0.0.54)",
        lambda r: r["proto"] in (17, 1) and r["src_ip"] not in ("10.0.0.53", "10.0.0.54"),
    ),
    ("not not proto=6", lambda r: r["proto"] == 6),
    (
        "proto=tcp or proto=udp and dst_port=53",
        lambda r: r["proto"] == 6 or (r["proto"], r["dst_port"]) == (17, 53),
    ),
    ("wire_len>1000", lambda r: r["wire_len"] > 1000),
    ("ttl<=64 and ttl>32", lambda r: r["ttl"] is not None and 32 < r["ttl"] <= 64),
    ("proto=70000", lambda r: False),
]


@pytest.mark.parametrize(("expr", "predicate"), CASES, ids=[c[0] for c in CASES])
def test_mask_equals_python_predicate(
    records: pa.Table, expr: str, predicate: Callable[[dict], bool]
) -> None:
    rows = records.to_pylist()
    want = [predicate(r) for r in rows]
    got = parse_filter(expr).mask(records).to_pylist()
    assert got == want
    assert 0 < sum(want) < len(want) or expr == "proto=70000" or not CAPTURES.is_dir(), (
        "case does not discriminate"
    )


def test_apply_keeps_the_matching_rows_of_a_batch(records: pa.Table) -> None:
    batch = records.combine_chunks().to_batches()[0]
    kept = parse_filter("proto=udp").apply(batch)
    assert kept.num_rows == sum(r["proto"] == 17 for r in batch.to_pylist())
    assert set(kept.column("proto").to_pylist()) == {17}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "the expression is empty"),
        ("prot=tcp", "column 1 ('prot'): unknown field"),
        ("proto=tpc", "column 7 ('tpc'): unknown protocol name (known: ah, esp, gre, icmp, icmpv6"),
        ("proto tcp", "column 7 ('tcp'): expected an operator"),
        ("proto=", "column 7 (end of expression): expected a value"),
        ("dst_port=eighty", "column 10 ('eighty'): dst_port takes an integer"),
        ("src_ip=10.0.0.300", "column 8 ('10.0.0.300'): not an IP address or CIDR network"),
        ("src_ip<10.0.0.1", "column 7 ('<'): src_ip compares only with = or !="),
        ("(proto=tcp", "column 11 (end of expression): expected ')'"),
        ("proto=tcp)", "column 10 (')'): expected 'and', 'or' or the end"),
        ("proto=tcp and", "column 14 (end of expression): expected a field name"),
        ("proto=tcp && dst_port=80", "column 11 ('&'): unexpected character"),
        ("proto=udp dst_port=53", "column 11 ('dst_port'): expected 'and', 'or'"),
        ("and=1", "column 1 ('and'): expected a field name"),
    ],
)
def test_errors_name_the_column_and_token(expr: str, message: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(expr)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_str_shows_the_parsed_structure() -> None:
    assert str(parse_filter("proto=tcp or proto=udp and port=53")) == (
        "(proto = 6 or (proto = 17 and (src_port = 53 or dst_port = 53)))"
    )
