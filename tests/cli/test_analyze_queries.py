"""``netmon analyze topk|distinct|join --query NAME``: the pipeline's queries, offline.

One vocabulary for offline and streaming: a configured query name runs with the configuration's
parameters (and the pipeline's watermark), a duration window means event time, and the
sub-windows still open at the end of the file close as the pipeline closes them at the end of a
demo replay (``--close-at-end``, the default) or stay open (``--keep-open``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.config import load_config
from netmon.records import ARROW_SCHEMA
from tests.conftest import REPO_ROOT

S = 10**9
T0 = 1_700_000_000  # seconds: the capture's first sub-window starts here
SCANNER, NOISY = "192.0.2.66", "10.0.0.2"


def _iso(seconds: int) -> str:
    return np.datetime_as_string(np.datetime64(seconds, "s"), unit="s") + "Z"


def records() -> pa.Table:
    """100 s of traffic: ``NOISY`` to port 53 every second at x.2 s, ``SCANNER`` once at 0.5 s.

    The last record is at ``T0 + 99.2 s``, so sub-window 99 (1 s sub-windows) holds it.
    """
    rows = [(T0 * S + i * S + S // 5, NOISY, "198.51.100.1", 53) for i in range(100)]
    rows.insert(1, (T0 * S + S // 2, SCANNER, "198.51.100.9", 1000))
    return _table(rows)


def jumped_records() -> pa.Table:
    """A backward jump in event time (faults issue, item 12): the traffic repeats 44.7 s earlier.

    ``NOISY`` every second at x.2 s from 0.2 s to 59.2 s and once at 59.9 s; then the same from
    15.2 s to 74.2 s again.
    """
    rows = [(T0 * S + i * S + S // 5, NOISY, "198.51.100.1", 53) for i in range(60)]
    rows.append((T0 * S + 59 * S + 9 * S // 10, NOISY, "198.51.100.1", 53))
    rows += [(T0 * S + (15 + i) * S + S // 5, NOISY, "198.51.100.1", 53) for i in range(60)]
    return _table(rows)


def _table(rows: list[tuple[int, str, str, int]]) -> pa.Table:
    n = len(rows)
    columns = {f.name: pa.nulls(n, f.type) for f in ARROW_SCHEMA}
    columns["ts"] = pa.array([r[0] for r in rows], ARROW_SCHEMA.field("ts").type)
    columns["src_ip"] = pa.array([r[1] for r in rows], pa.string())
    columns["dst_ip"] = pa.array([r[2] for r in rows], pa.string())
    columns["dst_port"] = pa.array([r[3] for r in rows], pa.int32())
    columns["proto"] = pa.array([17] * n, pa.int16())
    columns["wire_len"] = pa.array([100 + i for i in range(n)], pa.int32())
    return pa.table(columns, schema=ARROW_SCHEMA)


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A capture file whose records are :func:`records`, through a patched ``ingest.read_records``."""
    return _patched(monkeypatch, tmp_path, records())


@pytest.fixture
def jumped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A capture file whose records are :func:`jumped_records`."""
    return _patched(monkeypatch, tmp_path, jumped_records())


def _patched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, table: pa.Table) -> str:
    import ingest

    def read_records(path: object, columns: tuple[str, ...] | None = None, **kw: object):
        t = table.select(list(columns)) if columns else table
        return iter(t.to_batches(max_chunksize=16))

    monkeypatch.setattr(ingest, "read_records", read_records, raising=False)
    path = tmp_path / "synthetic.pcap"
    path.write_bytes(b"not read")
    return str(path)


@pytest.fixture
def config(tmp_path: Path):
    """``write(toml)`` -> the ``--config`` arguments for a netmon.toml holding ``toml``."""

    def write(text: str) -> list[str]:
        path = tmp_path / "netmon.toml"
        path.write_text(text)
        return ["--config", str(path)]

    return write


def run(*args: str, config: list[str] = ()) -> list[str]:
    """``netmon [--config ...] analyze ARGS``: its stdout lines (exit code 0 asserted)."""
    result = CliRunner().invoke(cli, [*config, "analyze", *args], env={"NETMON_CONFIG": None})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def invoke(*args: str, config: list[str] = ()):
    return CliRunner().invoke(cli, [*config, "analyze", *args], env={"NETMON_CONFIG": None})


def ends(lines: list[str]) -> list[str]:
    return [json.loads(line)["end"] for line in lines]


def with_group(lines: list[str], group: str) -> list[str]:
    """The report ends whose groups include ``group`` (distinct)."""
    return [r["end"] for r in map(json.loads, lines) if any(g["group"] == group for g in r["groups"])]


# -- --query NAME: the configured pipeline queries -----------------------------------------------------


def test_distinct_pipeline_query_equals_its_parameters_and_has_a_60_s_window(capture: str) -> None:
    q = next(q for q in load_config(None, env={}).queries.distinct if q.name == "scan-ports-per-source")
    explicit = run(
        "distinct", capture, "--count", q.count, "--group-by", q.group_by, "--window", f"{q.window_s}s",
        "--sub-window", f"{q.sub_window_s}s", "--lg-k", str(q.lg_k), "--top", str(q.top),
        "--watermark", f"{load_config(None, env={}).pipeline.watermark_s}s",
    )  # fmt: skip
    named = run("distinct", capture, "--query", "scan-ports-per-source")
    assert named == explicit and len(named) > 60
    # The scanner's one packet (sub-window 0) is in the windows ending 1 s ... 60 s later: 60 s windows.
    assert with_group(named, SCANNER) == [_iso(T0 + i) for i in range(1, 61)]
    # The built-in offline query of the same meaning keeps its own 10 s window.
    assert with_group(run("distinct", capture, "--query", "port-scan"), SCANNER) == [
        _iso(T0 + i) for i in range(1, 11)
    ]


def test_distinct_configured_name_wins_over_a_built_in_one(capture: str, config) -> None:
    toml = (
        '[[queries.distinct]]\nname = "port-scan"\ncount = "dst_port"\ngroup_by = "src_ip"\nwindow_s = 20.0\n'
    )
    lines = run("distinct", capture, "--query", "port-scan", config=config(toml))
    assert with_group(lines, SCANNER) == [_iso(T0 + i) for i in range(1, 21)]
    # Explicit options override the configured ones.
    lines = run("distinct", capture, "--query", "port-scan", "--window", "5s", config=config(toml))
    assert with_group(lines, SCANNER) == [_iso(T0 + i) for i in range(1, 6)]
    help_text = invoke("distinct", "--help").output
    assert "both a configured and a built-in query means the configured one" in " ".join(help_text.split())


def test_topk_pipeline_query_equals_its_parameters(capture: str, config) -> None:
    q = next(q for q in load_config(None, env={}).queries.topk if q.name == "top-sources")
    explicit = run(
        "topk", capture, "--key", q.key, "--weight", q.weight, "--window", f"{q.window_s}s",
        "--sub-window", f"{q.sub_window_s}s", "-k", str(q.k),
        "--watermark", f"{load_config(None, env={}).pipeline.watermark_s}s",
    )  # fmt: skip
    named = run("topk", capture, "--query", "top-sources")
    assert named == explicit and len(named) > 50
    # The pipeline's watermark delay (5 s) keeps the last sub-windows open, as for distinct.
    kept = run("topk", capture, "--query", "top-sources", "--keep-open")
    assert ends(kept)[-1] == _iso(T0 + 94) and named[: len(kept)] == kept
    # A full window holds one packet a second of NOISY: the window is 10 s.
    first = json.loads(named[0])
    assert first["end"] == _iso(T0 + 10) and {"key": NOISY, "count": 10} in first["items"]
    # A query from the configuration file, by bytes, 6 s windows of 2 s sub-windows, k = 1.
    toml = (
        '[[queries.topk]]\nname = "wide"\nkey = "dst_ip"\nweight = "bytes"\n'
        "window_s = 6.0\nsub_window_s = 2.0\nk = 1\n"
    )
    named = run("topk", capture, "--query", "wide", config=config(toml))
    explicit = run(
        "topk",
        capture,
        "--key",
        "dst_ip",
        "--weight",
        "bytes",
        "--window",
        "6s",
        "--sub-window",
        "2s",
        "-k",
        "1",
    )
    assert named == explicit
    assert ends(named)[:2] == [_iso(T0 + 6), _iso(T0 + 8)]
    # Options override the query's.
    assert ends(run("topk", capture, "--query", "wide", "--window", "4s", config=config(toml)))[0] == _iso(
        T0 + 4
    )


def test_join_pipeline_query_equals_its_parameters(config) -> None:
    sample = str(REPO_ROOT / "samples" / "syn-flood.pcap")
    default = run("join", sample, "--query", "handshake")
    assert default == run("join", sample, "--query", "handshake", "--window", "3s", "--lateness", "5s")
    # A configured handshake query with a 20 ms window: the configured name wins over the built-in.
    toml = '[[queries.join]]\nname = "handshake"\nwindow_s = 0.02\n'
    short = run("join", sample, "--query", "handshake", config=config(toml))
    assert short == run("join", sample, "--query", "handshake", "--window", "20ms")
    assert 0 < len(short) < len(default)
    # A configured link query: kind, filters, keys and window from the configuration.
    toml = (
        '[[queries.join]]\nname = "to-and-from-80"\nquery = "link"\nleft = "dst_port=80"\n'
        'right = "src_port=80"\nkey = "src_ip,src_port"\nright_key = "dst_ip,dst_port"\nwindow_s = 0.5\n'
    )
    link = run("join", sample, "--query", "to-and-from-80", config=config(toml))
    assert link == run(
        "join", sample, "--query", "link", "--left", "dst_port=80", "--right", "src_port=80",
        "--key", "src_ip,src_port", "--right-key", "dst_ip,dst_port", "--window", "500ms",
    )  # fmt: skip
    assert link


@pytest.mark.parametrize(
    ("command", "known"),
    [
        (
            "topk",
            "configured [[queries.topk]]: top-sources, top-destinations-bytes, top-pairs, top-dst-ports",
        ),
        (
            "distinct",
            "scan-ports-per-source, scan-hosts-per-source, flows-per-protocol; built-in: ddos, port-scan",
        ),
        ("join", "configured [[queries.join]]: handshake; built-in: handshake, link"),
    ],
)
def test_an_unknown_name_is_a_one_line_usage_error_listing_the_known_ones(
    capture: str, command: str, known: str
) -> None:
    result = invoke(command, capture, "--query", "nope")
    assert result.exit_code == 2
    assert result.output.splitlines() == [result.output.strip()]
    assert result.output.startswith("Error: --query: unknown query 'nope' (") and known in result.output


# -- a duration window means event time ------------------------------------------------------------------


def test_topk_duration_window_implies_time_based(capture: str) -> None:
    implied = run("topk", capture, "--key", "src_ip", "--window", "10s", "--sub-window", "1s", "-k", "2")
    flagged = run(
        "topk", capture, "--key", "src_ip", "--window", "10s", "--sub-window", "1s", "-k", "2", "--time-based"
    )
    assert implied == flagged and ends(implied)[0] == _iso(T0 + 10)
    # Plain integers still mean packets.
    counted = run("topk", capture, "--key", "src_ip", "--window", "20", "--sub-window", "10", "-k", "2")
    assert ends(counted)[:2] == [20, 30]
    # Neither a number nor a duration: a usage error naming both forms.
    bad = invoke("topk", capture, "--key", "src_ip", "--window", "ten", "--sub-window", "1", "-k", "2")
    assert bad.exit_code == 2 and "a number of packets, or a duration" in bad.output


# -- one meaning of late ---------------------------------------------------------------------------------


def test_late_is_more_than_the_watermark_behind_the_newest_time(jumped: str) -> None:
    # After 59.9 s the traffic goes back to 15.2 s. With the pipeline's 5 s delay (a configured
    # query's default) the records before 54.9 s are late: 15.2 ... 54.2 s, 40 of them; with no
    # delay (the default otherwise) those before 59.9 s: 45. The same for top-k and distinct.
    topk = ("topk", jumped, "--key", "src_ip", "--window", "10s", "--sub-window", "1s", "-k", "2")
    cases = [
        (("topk", jumped, "--query", "top-sources"), 40),
        ((*topk, "--watermark", "5s"), 40),
        ((*topk, "--watermark", "5"), 40),  # a bare number: seconds, as for distinct
        ((*topk, "--watermark", "0s"), 45),
        (topk, 45),
    ]
    for args, late in cases:
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert f"netmon: {late} late records" in result.stderr, (args, result.stderr)
    distinct = ("distinct", jumped, "--count", "src_ip", "--group-by", "dst_ip")
    cases = [
        (("distinct", jumped, "--query", "scan-ports-per-source"), 40),
        ((*distinct, "--watermark", "5s"), 40),
        ((*distinct, "--watermark", "0"), 45),
        (distinct, 45),
    ]
    for args, late in cases:
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert f"{late} records were more than the watermark delay behind" in result.stderr, args
    bad = invoke(*topk, "--watermark", "-1s")
    assert bad.exit_code == 2 and "--watermark" in bad.output and "not a duration >= 0" in bad.output


def test_join_drops_the_late_records_before_the_join(jumped: str, config) -> None:
    # As for top-k and distinct: 40 records late with a configured query's 5 s ([pipeline]
    # watermark_s) or with --lateness 5s; 45 with a built-in query's 0.
    link = ("join", jumped, "--query", "link", "--left", "dst_port=53", "--right", "dst_port=53")
    toml = config(
        '[[queries.join]]\nname = "dns"\nquery = "link"\nleft = "dst_port=53"\nright = "dst_port=53"\n'
    )
    cases = [
        (("join", jumped, "--query", "dns"), toml, 40),
        ((*link, "--lateness", "5s"), [], 40),
        ((*link, "--format", "table"), [], 45),
        (link, [], 45),
    ]
    for args, cfg, late in cases:
        result = invoke(*args, config=cfg)
        assert result.exit_code == 0, result.output
        assert (
            f"netmon: {late} late records (more than the watermark delay behind the newest timestamp "
            "before them) dropped"
        ) in result.stderr, (args, result.stderr)
        assert json.loads(result.stderr.splitlines()[-1])["late_dropped"] == late, args
    # No row of a late record: ids are row numbers, and with no delay rows 61 .. 105 (15.2 s to
    # 59.2 s, after 59.9 s) are late.
    lines = [json.loads(line) for line in run(*link, "--window", "500ms")]
    ids = {x["left_id"] for x in lines} | {x["right_id"] for x in lines}
    assert lines and not ids & set(range(61, 106)) and {60, 106} <= ids


# -- the end of the file ---------------------------------------------------------------------------------


def test_topk_closes_the_last_sub_window_at_the_end_unless_kept_open(capture: str) -> None:
    args = ("topk", capture, "--key", "src_ip", "--window", "10s", "--sub-window", "1s", "-k", "2")
    closed, kept = run(*args), run(*args, "--keep-open")
    assert run(*args, "--close-at-end") == closed
    # Sub-window 99 holds the last record (99.2 s): it closes at the end, as in the pipeline.
    assert ends(closed)[-1] == _iso(T0 + 100) and ends(kept)[-1] == _iso(T0 + 99)
    assert closed[:-1] == kept
    # Count-based windows close only when full: the flag does not apply.
    counted = ("topk", capture, "--key", "src_ip", "--window", "20", "--sub-window", "10", "-k", "2")
    assert run(*counted) == run(*counted, "--keep-open")


def test_distinct_closes_what_the_pipeline_closes_after_a_demo_replay(capture: str, config) -> None:
    closed = run("distinct", capture, "--query", "scan-ports-per-source")
    kept = run("distinct", capture, "--query", "scan-ports-per-source", "--keep-open")
    # The 5 s watermark keeps the last sub-windows open; the demo's final watermark message puts
    # the pipeline's watermark traffic_window_s (1 s) past the last record (99.2 s): ends <= 100.2 s.
    assert ends(kept)[-1] == _iso(T0 + 94) and ends(closed)[-1] == _iso(T0 + 100)
    assert closed[: len(kept)] == kept
    # With [pipeline] traffic_window_s = 0.5 the watermark ends at 99.7 s: sub-window 99 stays open.
    short = run(
        "distinct", capture, "--query", "scan-ports-per-source",
        config=config("[pipeline]\ntraffic_window_s = 0.5\n"),
    )  # fmt: skip
    assert ends(short)[-1] == _iso(T0 + 99)


def test_join_with_no_tuple_on_either_side_reports_an_empty_run(jumped: str) -> None:
    # The capture holds DNS (UDP) traffic: no record on either side of a port-443/80 link join.
    # Before the fix, run_join had no batch statistics and the command died with a traceback.
    result = invoke("join", jumped, "--query", "link", "--left", "dst_port=443", "--right", "dst_port=80")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    summary = json.loads(result.stderr.splitlines()[-1])
    assert summary["n_left"] == summary["n_right"] == summary["results"] == 0
