"""The features kind without Spark: stage-1 partials of random micro-batch cuts in, committed rows out.

``SlidingFeatures`` is fed the partials of a generated capture cut into random micro-batches (each
batch's rows split over tasks as the shared query hands them over), with a batch run twice and a
restart from the persisted buffer in the middle. Its rows must be exactly what
``analytics.alert_features.feature_rows`` writes for the whole capture: every row when the stream
ends with a watermark far past the last record (every window closes), and the rows of the closed
windows when it ends with the replay's closing message. The same rows, republished as JSON and
read by the alert service, must raise the episodes ``netmon analyze alerts`` prints.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from alerts.defaults import DETECTION_RULES
from alerts.offline import FEATURES, analyze_capture, episodes_from_rows
from alerts.service import AlertService, result_topic
from analytics.alert_features import _iso, feature_rows
from ingest.generate import generate
from ingest.readers import read_records
from netmon.config import AlertsConfig, Config
from netmon.records import ARROW_SCHEMA
from netmon.results import read_results
from pipeline.features import DST_COLUMNS, SRC_COLUMNS, SlidingFeatures
from pipeline.partials import merge_partials, partials_of
from pipeline.publish import RESULT_VERSION
from pipeline.result_json import json_lines
from tests.alerts.helpers import assert_outbox_episodes
from tests.alerts.test_service_rows import FakeConsumer

S = 1_000_000  # microseconds per second
WATERMARK_MS = 5000
#: the decoded rows stage 1 reads (pipeline.partials.ROW_SCHEMA): ts in µs, a control flag, the record
ROW_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("is_control", pa.bool_()),
        *list(ARROW_SCHEMA)[1:],
    ]
)


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for scenario, packets in (("port-scan", 20_000), ("syn-flood", 20_000), ("ddos", 60_000)):
        path = tmp_path_factory.mktemp("features") / f"{scenario}.pcap"
        generate(path, scenario=scenario, packets=packets, seed=11, duration_s=60)
        out[scenario] = path
    return out


def decoded(path: Path, *, extra: bool = True) -> pa.Table:
    """The capture's records as decoded rows; ``extra``: plus records without addresses and a TCP
    record without flags (which the features treat as offline: skipped, and a SYN-ACK)."""
    table = pa.Table.from_batches(list(read_records(path)))
    if extra:
        rows = table.slice(0, 3).to_pylist()
        for i, row in enumerate(rows):
            row["ts"] += dt.timedelta(seconds=20 + i)
        rows[0]["src_ip"] = rows[1]["dst_ip"] = None
        rows[2] |= {"proto": 6, "tcp_flags": None}
        table = pa.concat_tables([table, pa.Table.from_pylist(rows, schema=table.schema)])
        table = table.sort_by("ts")
    us = pa.array(table["ts"].cast(pa.int64()).to_numpy() // 1000, pa.int64()).cast(
        ROW_SCHEMA.field("ts").type
    )
    columns = [us, pa.array(np.zeros(table.num_rows, bool)), *table.columns[1:]]
    return pa.Table.from_arrays(columns, schema=ROW_SCHEMA)


def control(ts_us: int) -> pa.Table:
    """A watermark control row at ``ts_us``."""
    return pa.Table.from_pylist([{"ts": ts_us, "is_control": True}], schema=ROW_SCHEMA)


def cuts(rows: pa.Table, seed: int, n: int = 14) -> list[pa.Table]:
    """The rows in random micro-batches (some empty), in order."""
    rng = np.random.default_rng(seed)
    points = sorted(set(rng.integers(0, rows.num_rows, n).tolist()) | {0, rows.num_rows})
    return [rows.slice(a, b - a) for a, b in zip(points, points[1:], strict=False)] + [rows.slice(0, 0)]


def apply_one(kind: SlidingFeatures, rows: pa.Table, batch_id: int, *, split: int = 3) -> None:
    """One batch as ``split`` tasks' partials, merged, then ``kind.apply`` (as SharedBatch does)."""
    size = max(1, -(-rows.num_rows // split))
    tasks = rows.to_batches(max_chunksize=size) or [pa.RecordBatch.from_pylist([], schema=ROW_SCHEMA)]
    partials, max_us = merge_partials(pa.concat_tables([partials_of(t, kind.specs) for t in tasks]))
    kind.apply(partials, max_us, batch_id)


def run(kind_of: Any, batches: list[pa.Table], *, rerun: int, restart: int) -> None:
    """Feed ``batches``; batch ``rerun`` runs twice (cut otherwise); a new process takes over at
    batch ``restart`` (from the persisted state), running the batch before it again first."""
    kind = kind_of()
    for batch_id, rows in enumerate(batches):
        if batch_id == restart:
            kind = kind_of()
            apply_one(kind, batches[batch_id - 1], batch_id - 1, split=1)
        apply_one(kind, rows, batch_id)
        if batch_id == rerun:
            apply_one(kind, rows, batch_id, split=5)


def as_feature_rows(table: pa.Table | None) -> list[dict[str, Any]]:
    """Committed rows as ``feature_rows`` writes them: the family's columns, ISO-8601 times."""
    out = []
    for row in [] if table is None else table.to_pylist():
        columns = SRC_COLUMNS if row["query"] == "src" else DST_COLUMNS
        out.append(
            {
                "query": row["query"],
                "window_start": _iso(_ns(row["window_start"])),
                "window_end": _iso(_ns(row["window_end"])),
                "subject": row["subject"],
                **{c: row[c] for c in columns},
            }
        )
    return out


def order(row: dict[str, Any]) -> tuple[int, str, str]:
    """Rows by window, query, subject (``feature_rows`` sorts the ISO text: 1.5 s before 1 s)."""
    end = dt.datetime.fromisoformat(row["window_end"].replace("Z", "+00:00"))
    return _ns(end), row["query"], row["subject"]


def _ns(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000


def records_of(rows: pa.Table) -> pa.Table:
    """Decoded rows back as records (ns), the input of ``feature_rows``."""
    table = rows.drop_columns(["is_control"])
    ns = pa.array(table["ts"].cast(pa.int64()).to_numpy() * 1000, pa.int64()).cast(
        ARROW_SCHEMA.field("ts").type
    )
    return table.set_column(0, ARROW_SCHEMA.field("ts"), ns)


def kind_factory(tmp_path: Path, **settings: Any) -> Any:
    options = {"window_s": 5.0, "timeout_s": 3.0, "top": 100} | settings
    return lambda: SlidingFeatures(
        tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS, **options
    )


@pytest.mark.parametrize(
    ("scenario", "seed", "settings"),
    [
        ("port-scan", 1, {}),
        ("syn-flood", 2, {}),
        ("port-scan", 3, {"window_s": 2.0, "timeout_s": 1.0, "top": 5}),
        ("syn-flood", 4, {"window_s": 0.5, "timeout_s": 0.0, "top": 3}),
    ],
)
def test_every_row_of_feature_rows_whatever_the_cuts_reruns_and_restarts(
    captures: dict[str, Path], tmp_path: Path, scenario: str, seed: int, settings: dict[str, Any]
) -> None:
    rows = decoded(captures[scenario])
    batches = cuts(rows, seed)
    # A watermark far past the last record: every window closes.
    last_us = int(rows["ts"].cast(pa.int64())[-1].as_py())
    batches[-1] = control(last_us + 100 * S)
    make = kind_factory(tmp_path, **settings)
    run(make, batches, rerun=3, restart=len(batches) // 2)
    got = as_feature_rows(read_results(tmp_path / "results"))
    expected = feature_rows([records_of(rows)], **settings)
    assert len(expected) > 100
    assert sorted(got, key=order) == sorted(expected, key=order)
    # The restart left only the buffers of the last state version and the one before.
    assert len(list((tmp_path / "checkpoint").glob("pairs-*"))) <= 2


def test_the_replays_closing_message_writes_the_windows_it_closes(
    captures: dict[str, Path], tmp_path: Path
) -> None:
    rows = decoded(captures["port-scan"])
    batches = cuts(rows, 5)
    last_us = int(rows["ts"].cast(pa.int64())[-1].as_py())
    # netmon replay --close-at-end: watermark_s + traffic_window_s (1 s) past the last record
    watermark_us = (last_us + WATERMARK_MS * 1000 + S) // 1000 * 1000 - WATERMARK_MS * 1000
    batches[-1] = control(last_us + WATERMARK_MS * 1000 + S)
    run(kind_factory(tmp_path), batches, rerun=1, restart=7)
    got = as_feature_rows(read_results(tmp_path / "results"))
    closed = (watermark_us - 3 * S) // (5 * S)  # windows before this one are closed
    expected = [r for r in feature_rows([records_of(rows)]) if r["window_end"] <= _iso(closed * 5 * S * 1000)]
    assert got == expected
    first = int(rows["ts"].cast(pa.int64())[0].as_py()) // (5 * S)
    assert closed <= last_us // (5 * S)  # the last windows stay open: their SYNs' fates are not known
    assert {r["window_end"] for r in got} == {_iso((w + 1) * 5 * S * 1000) for w in range(first, closed)}


def test_rows_of_windows_already_closed_are_late(tmp_path: Path, captures: dict[str, Path]) -> None:
    rows = decoded(captures["port-scan"], extra=False)
    early, late = rows.slice(0, 5000), rows.slice(0, 100)  # the same records again, long closed
    make = kind_factory(tmp_path)
    kind = make()
    apply_one(kind, early, 0)
    apply_one(kind, control(int(rows["ts"].cast(pa.int64())[4999].as_py()) + 60 * S), 1)
    written = read_results(tmp_path / "results")
    apply_one(kind, late, 2)
    assert kind.late_rows == 100
    assert read_results(tmp_path / "results") == written
    assert as_feature_rows(written) == feature_rows([records_of(early)])


# -- the alert service on the rows the pipeline publishes ----------------------------------------


def _messages(table: pa.Table) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """The committed rows as the republisher sends them: JSON Lines, result version 2, by time."""
    table = table.sort_by([("window_end", "ascending")])
    lines = json_lines(table).to_pylist()
    headers = [("netmon.kind", FEATURES.encode()), ("netmon.result-version", str(RESULT_VERSION).encode())]
    return [("".join(lines[i : i + 300]).encode(), list(headers)) for i in range(0, len(lines), 300)]


@pytest.mark.parametrize("scenario", ["ddos", "port-scan"])
def test_the_service_on_the_published_rows_raises_the_offline_episodes(
    captures: dict[str, Path], netmon_config: Config, tmp_path: Path, scenario: str
) -> None:
    state_cfg = netmon_config.replace(paths={"state_dir": tmp_path / "state"})
    path = captures[scenario]
    alerts = AlertsConfig()
    rows = decoded(path, extra=False)
    batches = cuts(rows, 6)
    last_us = int(rows["ts"].cast(pa.int64())[-1].as_py())
    batches[-1] = control(last_us + 100 * S)
    run(kind_factory(tmp_path), batches, rerun=2, restart=5)
    table = read_results(tmp_path / "results")
    assert table is not None
    offline = analyze_capture([path], DETECTION_RULES, alerts)
    assert offline and offline == episodes_from_rows(DETECTION_RULES, FEATURES, as_feature_rows(table))
    topic = result_topic(state_cfg, FEATURES)
    consumer = FakeConsumer()
    for i, message in enumerate(_messages(table)):
        consumer.add(topic, i, [message])
    service = AlertService(state_cfg, alerts, rules=DETECTION_RULES).open(consumer=consumer)
    try:
        while consumer.batches:
            service.poll_once(0)
        assert service.totals.bad == 0
    finally:
        service.close()
    assert_outbox_episodes(state_cfg.paths.state_dir, offline)


def test_a_window_row_is_published_as_json_with_the_feature_columns(tmp_path: Path) -> None:
    """A committed row's JSON: the family's columns as feature_rows has them, the other family null."""
    make = kind_factory(tmp_path, window_s=1.0, timeout_s=0.5)
    t0 = 1_700_000_000 * S
    names = ("ts", "src_ip", "dst_ip", "src_port", "dst_port", "tcp_flags")
    records = [  # a SYN to port 22, refused by a RST
        (t0, "6.6.6.6", "10.0.0.1", 999, 22, 0x02),
        (t0 + 1000, "10.0.0.1", "6.6.6.6", 22, 999, 0x14),
    ]
    table = pa.Table.from_pylist(
        [dict(zip(names, r, strict=True)) | {"proto": 6, "is_control": False} for r in records],
        schema=ROW_SCHEMA,
    )
    kind = make()
    apply_one(kind, table, 0)
    apply_one(kind, control(t0 + 10 * S), 1)
    rows = [json.loads(line) for line in json_lines(read_results(tmp_path / "results")).to_pylist()]
    scanner = next(r for r in rows if r["query"] == "src" and r["subject"] == "6.6.6.6")
    assert scanner["window_end"] == "2023-11-14T22:13:21Z"
    assert (scanner["attempts"], scanner["failed"], scanner["vertical"], scanner["vertical_host"]) == (
        1, 1, 1, "10.0.0.1",
    )  # fmt: skip
    assert scanner["sources"] is None and scanner["half_open"] is None
    assert as_feature_rows(read_results(tmp_path / "results")) == feature_rows(
        [records_of(table)], window_s=1.0, timeout_s=0.5
    )
