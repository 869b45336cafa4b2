"""The offline top-k query (``analytics.topk_offline``, ``netmon analyze topk``) against brute force."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analytics.topk import SubWindowTopK, format_end
from analytics.topk_offline import OfflineTopK, parse_delay, parse_duration
from netmon.records import ARROW_SCHEMA
from tests.analytics.test_topk import brute_reports

REPO_ROOT = Path(__file__).resolve().parents[2]
CAPTURES = REPO_ROOT.parent / "shared" / "captures"
B_NS = 1_000_000_000


def make_table(n: int, seed: int, *, late: bool = False, jump_s: float = 0) -> pa.Table:
    """Records with the full schema: some without IPs or ports, timestamps with gaps (and late ones).

    ``jump_s``: from the middle record on, the traffic is ``jump_s`` earlier (one large backward
    jump, as a capture whose traffic repeats), and a few records have no timestamp.
    """
    rng = np.random.default_rng(seed)
    steps = rng.choice([0, 10**6, 3 * 10**8, 4 * B_NS], size=n, p=[0.2, 0.5, 0.27, 0.03])
    ts = 1_700_000_000 * B_NS + np.cumsum(steps)
    if late:  # a few timestamps go back by up to 2 s
        back = rng.random(n) < 0.05
        ts = ts - back * rng.integers(0, 2 * B_NS, size=n)
    ts[n // 2 :] -= int(jump_s * B_NS)
    p = 1 / np.arange(1, 9)
    src = [f"192.0.2.{int(x)}" for x in rng.choice(8, size=n, p=p / p.sum())]
    no_ip = rng.random(n) < 0.05
    no_port = rng.random(n) < 0.2
    columns = {
        name: pa.nulls(n, field.type) for name, field in zip(ARROW_SCHEMA.names, ARROW_SCHEMA, strict=True)
    }
    no_ts = (rng.random(n) < 0.01) if jump_s else np.zeros(n, bool)
    columns["ts"] = pa.array(ts, pa.timestamp("ns", tz="UTC"), mask=no_ts)
    columns["wire_len"] = pa.array(rng.integers(60, 1514, size=n), pa.int32())
    columns["src_ip"] = pa.array([None if m else s for s, m in zip(src, no_ip, strict=True)], pa.string())
    columns["dst_ip"] = pa.array(["198.51.100.1"] * n, pa.string())
    columns["proto"] = pa.array(rng.choice([6, 17], size=n), pa.int16())
    ports = rng.choice([53, 80, 443, 8080], size=n)
    columns["dst_port"] = pa.array(
        [None if m else int(x) for x, m in zip(ports, no_port, strict=True)], pa.int32()
    )
    return pa.table(columns, schema=ARROW_SCHEMA)


def rows_of(table: pa.Table, key: tuple[str, ...], weight: str) -> list[tuple[int | None, str | None, int]]:
    """(ts_ns or None, key text or None, weight) of every record, in order — plain Python."""
    cols = {c: table.column(c).to_pylist() for c in (*key, "wire_len")}
    ts = table.column("ts").cast(pa.int64()).to_pylist()
    out = []
    for i in range(table.num_rows):
        values = [cols[c][i] for c in key]
        text = None if any(v is None for v in values) else ",".join(str(v) for v in values)
        out.append((ts[i], text, 1 if weight == "packets" else cols["wire_len"][i]))
    return out


def records_of(table: pa.Table, key: tuple[str, ...], weight: str) -> list[tuple[int, str, int]]:
    """(ts_ns, key text, weight) of the records that have the key, in order — plain Python."""
    cols = {c: table.column(c).to_pylist() for c in (*key, "wire_len")}
    ts = table.column("ts").cast(pa.int64()).to_pylist()
    out = []
    for i in range(table.num_rows):
        values = [cols[c][i] for c in key]
        if any(v is None for v in values):
            continue
        out.append(
            (ts[i], ",".join(str(v) for v in values), 1 if weight == "packets" else cols["wire_len"][i])
        )
    return out


def batches(table: pa.Table, sizes: list[int]) -> list[pa.RecordBatch]:
    out, pos = [], 0
    while pos < table.num_rows:
        size = sizes[len(out) % len(sizes)]
        out.extend(table.slice(pos, size).to_batches())
        pos += size
    return out


def brute_count(records, N, b, k, exact=False):
    subwindows = [[(key, w) for _, key, w in records[i * b : (i + 1) * b]] for i in range(len(records) // b)]
    return brute_reports(subwindows, N // b, k, lambda i: (i + 1) * b, exact=exact)


def brute_time(rows, N_ns, b_ns, k, exact=False, *, delay_ns=0, close_after_ns=None):
    """Reports and late count of the time-based query, record by record (the rule, plain Python).

    ``rows``: (ts or None, key text or None, weight) of every record in input order. A record is
    late when its ts is more than ``delay_ns`` behind the newest ts seen before it (records
    without a key count for the newest ts; without a ts, for nothing). Sub-window i closes once
    the newest ts reaches (i+1)*b + delay; ``close_after_ns``: at the end the newest ts moves to
    ``delay_ns + close_after_ns`` past the last record.
    """
    kept, newest, late = [], None, 0
    for ts, key, w in rows:
        if ts is None:
            continue
        if newest is not None and ts < newest - delay_ns:
            late += key is not None
        elif key is not None:
            kept.append((ts, key, w))
        newest = ts if newest is None else max(newest, ts)
    if not kept:
        return [], late
    if close_after_ns is not None:
        newest += delay_ns + close_after_ns
    first = min(ts // b_ns for ts, _, _ in kept)
    # Every sub-window below (newest - delay) // b is closed, but the empty ones after the last
    # closed one holding a record report nothing yet: they are reported (skipped when their
    # window is empty) when the next sub-window with records closes, as in the pipeline.
    closed = (newest - delay_ns) // b_ns
    stop = max((ts // b_ns for ts, _, _ in kept if ts // b_ns < closed), default=first - 1) + 1
    subwindows = [[] for _ in range(first, stop)]
    for ts, key, w in kept:
        if ts // b_ns < stop:
            subwindows[ts // b_ns - first].append((key, w))
    reports = brute_reports(
        subwindows,
        N_ns // b_ns,
        k,
        lambda i: format_end((first + i + 1) * b_ns),
        exact=exact,
        skip_empty=True,
    )
    return reports, late


@pytest.mark.parametrize("key", [("src_ip",), ("proto", "dst_port"), ("src_ip", "dst_port")])
@pytest.mark.parametrize("weight", ["packets", "bytes"])
@pytest.mark.parametrize("exact", [False, True])
def test_count_based_equals_brute_force(key, weight, exact) -> None:
    table = make_table(2000, seed=len(key) + len(weight))
    records = records_of(table, key, weight)
    expected = brute_count(records, 200, 50, 3, exact=exact)
    for sizes in ([2000], [37, 500, 1], [50]):
        q = OfflineTopK(",".join(key), N=200, b=50, k=3, weight=weight, exact=exact)
        assert list(q.run(batches(table, sizes))) == expected
        assert q.records == len(records) and q.skipped == table.num_rows - len(records) > 0
    # The same as feeding the class record by record.
    alg, per_record = SubWindowTopK(200, 50, 3), []
    for i, (_, k_text, w) in enumerate(records):
        alg.update(k_text, w)
        if (i + 1) % 50 == 0:
            per_record += [r for r in [alg.slide().report()] if r is not None]
    if not exact:
        assert per_record == expected


@pytest.mark.parametrize("late", [False, True])
@pytest.mark.parametrize(("N", "b", "k"), [("3s", "1s", 2), ("2s", "500ms", 1), ("1s", "1s", 3)])
def test_time_based_equals_brute_force(late, N, b, k) -> None:
    table = make_table(1500, seed=7, late=late)
    rows = rows_of(table, ("src_ip",), "bytes")
    n_keyed = sum(key is not None for _, key, _ in rows)
    expected, n_late = brute_time(rows, parse_duration(N), parse_duration(b), k)
    assert (n_late > 0) == late
    for sizes in ([1500], [1, 99, 400]):
        q = OfflineTopK("src_ip", N=N, b=b, k=k, weight="bytes", time_based=True)
        assert list(q.run(batches(table, sizes))) == expected
        assert q.late == n_late and q.records == n_keyed - n_late
    # Windows holding no record occurred and were skipped: some report ends are more than a
    # sub-window apart, and no report is an empty window's.
    ends = [int(np.datetime64(r["end"].rstrip("Z"), "ns").astype(np.int64)) for r in expected]
    assert any(e1 - e0 > parse_duration(b) for e0, e1 in zip(ends, ends[1:], strict=False))
    assert not any(r["items"] == [] and r["delta"] == 0 for r in expected)


@pytest.mark.parametrize("watermark", [0, "1ns", "300ms", "2s", "5s", "60s"])
@pytest.mark.parametrize(("N", "b", "k"), [("4s", "1s", 3), ("2s", "500ms", 2)])
def test_late_is_more_than_the_watermark_behind_the_newest_time(watermark, N, b, k) -> None:
    """Faults issue, item 12: one meaning of late, offline as in the pipeline, whatever the batches.

    Disorder up to 2 s and one 45 s backward jump (the traffic repeats): a record is late when
    its timestamp is more than the watermark delay behind the newest one before it, and a
    sub-window closes once a timestamp reaches its end plus the delay (brute force, record by
    record). The former rule (late: a sub-window below the newest one) kept records up to a
    sub-window behind with no delay, and took no delay at all.
    """
    table = make_table(1500, seed=23, late=True, jump_s=45)
    rows = rows_of(table, ("src_ip",), "packets")
    d = parse_delay(watermark)
    n_keyed = sum(ts is not None and key is not None for ts, key, _ in rows)
    for close_after in (None, B_NS):
        expected, n_late = brute_time(
            rows, parse_duration(N), parse_duration(b), k, exact=True, delay_ns=d, close_after_ns=close_after
        )
        for sizes in ([1500], [1, 99, 400], [7]):
            q = OfflineTopK("src_ip", N=N, b=b, k=k, time_based=True, exact=True, watermark=watermark)
            got = list(q.run(batches(table, sizes), close_after=close_after))
            assert got == expected, (sizes, close_after)
            assert (q.late, q.records, q.skipped) == (n_late, n_keyed - n_late, table.num_rows - n_keyed)
    # The jump makes records late unless the delay covers it; disorder within the delay is kept.
    assert (n_late > 100) == (d < 45 * B_NS) and (n_late == 0) == (d >= 45 * B_NS)
    assert len(expected) > 20


def test_parse_duration() -> None:
    assert parse_duration("10s") == 10 * B_NS
    assert parse_duration("500ms") == B_NS // 2
    assert parse_duration("1m") == 60 * B_NS
    assert parse_duration("2h") == 7200 * B_NS
    assert parse_duration("250us") == parse_duration("250µs") == 250_000
    assert parse_duration("1.25s") == 1_250_000_000
    assert parse_duration(7) == 7
    assert parse_duration(timedelta(seconds=1, microseconds=500)) == 1_000_500_000
    for bad in ("10", "s", "1.5ns", "-1s", "10 parsecs"):
        with pytest.raises(ValueError, match=r"^window: "):
            parse_duration(bad, "window")


def test_parameter_errors() -> None:
    with pytest.raises(ValueError, match=r"^N: a count-based window takes an integer"):
        OfflineTopK("src_ip", N="10s", b=5, k=1)
    with pytest.raises(ValueError, match=r"^weight: expected 'packets' or 'bytes'"):
        OfflineTopK("src_ip", N=10, b=5, k=1, weight="flows")
    with pytest.raises(ValueError, match=r"^key: unknown field 'port'"):
        OfflineTopK("port", N=10, b=5, k=1)
    with pytest.raises(ValueError, match=r"^N: must be a multiple of b"):
        OfflineTopK("src_ip", N="10s", b="3s", k=1, time_based=True)
    with pytest.raises(ValueError, match=r"^watermark: count-based windows have no event time"):
        OfflineTopK("src_ip", N=10, b=5, k=1, watermark="1s")
    with pytest.raises(ValueError, match=r"^watermark: '-1s' is not a duration >= 0"):
        OfflineTopK("src_ip", N="10s", b="1s", k=1, time_based=True, watermark="-1s")
    assert parse_delay("0s") == parse_delay(0) == parse_delay(timedelta(0)) == 0
    assert parse_delay("1.5s") == parse_delay(timedelta(seconds=1.5)) == 1_500_000_000


# -- the command -------------------------------------------------------------------------------------


def invoke(*args: str):
    from cli.main import cli

    return CliRunner().invoke(cli, ["analyze", "topk", *args], catch_exceptions=False)


def test_cli_errors_name_the_option(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(b"")
    result = invoke(str(path), "--key", "src_ip", "--window", "10 s", "--sub-window", "one", "-k", "2")
    assert result.exit_code == 1 and "Error: --sub-window: cannot parse duration 'one'" in result.output
    result = invoke(str(path), "--key", "src_ip", "--window", "ten", "--sub-window", "1", "-k", "2")
    assert result.exit_code == 2 and "--window" in result.output and "number of packets" in result.output
    result = invoke(str(path), "--key", "src_ip", "--window", "10", "--sub-window", "3", "-k", "2")
    assert result.exit_code == 1 and "Error: --window: must be a multiple of b" in result.output
    result = invoke(str(path), "--key", "src_ip", "--window", "10", "--sub-window", "5", "-k", "0")
    assert result.exit_code == 1 and "Error: -k: must be an integer >= 1" in result.output


@pytest.fixture(scope="module")
def echo_table() -> pa.Table:
    path = CAPTURES / "echo-connections.pcap.gz"
    if not path.is_file():
        pytest.skip(f"real capture not found at {path}")
    ingest = pytest.importorskip("ingest")
    if not hasattr(ingest, "read_records"):
        pytest.skip("ingest.read_records is not available yet")
    return pa.Table.from_batches(list(ingest.read_records(path)))


def test_real_capture_count_based_cli(echo_table: pa.Table) -> None:
    path = CAPTURES / "echo-connections.pcap.gz"
    records = records_of(echo_table, ("src_ip",), "packets")
    expected = brute_count(records, 10_000, 1_000, 3)
    result = invoke(str(path), "--key", "src_ip", "--window", "10000", "--sub-window", "1000", "-k", "3")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.splitlines()] == expected
    assert len(expected) == len(records) // 1000 - 9 and any(r["items"] for r in expected)
    table = invoke(
        str(path),
        "--key",
        "src_ip",
        "--window",
        "10000",
        "--sub-window",
        "1000",
        "-k",
        "3",
        "--format",
        "table",
    )
    assert table.output.count("delta") == len(expected)


def test_real_capture_time_based_bytes_tuple_key(echo_table: pa.Table) -> None:
    path = CAPTURES / "echo-connections.pcap.gz"
    records = rows_of(echo_table, ("src_ip", "dst_port"), "bytes")
    span = (records[-1][0] - records[0][0]) / B_NS
    b_ns = max(int(span / 40 * 1000), 1) * 1_000_000  # about 40 sub-windows, whole milliseconds
    expected, n_late = brute_time(records, 4 * b_ns, b_ns, 4)
    args = [
        str(path), "--key", "src_ip,dst_port", "--weight", "bytes", "--window", f"{4 * b_ns}ns",
        "--sub-window", f"{b_ns // 1_000_000}ms", "-k", "4", "--time-based",
    ]  # fmt: skip
    result = invoke(*args, "--keep-open")
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    assert [json.loads(line) for line in lines] == expected and len(expected) > 10
    assert (f"{n_late} late records" in result.output) == (n_late > 0)
    # By default the last sub-window closes too: it ends within [pipeline] traffic_window_s (1 s,
    # more than b) of the last record, so the pipeline closes it at the end of a demo replay.
    assert b_ns <= B_NS
    closed, _ = brute_time(records, 4 * b_ns, b_ns, 4, close_after_ns=B_NS)
    result = invoke(*args)
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    assert [json.loads(line) for line in lines] == closed and len(closed) == len(expected) + 1
