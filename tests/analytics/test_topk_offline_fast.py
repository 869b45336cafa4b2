"""The numpy counting path of ``OfflineTopK`` gives the reports of the Arrow group-by path it replaced.

``ArrowOfflineTopK`` below is the former ``OfflineTopK.feed`` (per batch: key text per record, an
Arrow group-by per (sub-window, key), sorted by count then key text), kept here as the oracle.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analytics.keys import key_codes, key_text, weights
from analytics.topk_offline import OfflineTopK, _sums, read_topk
from ingest import read_records
from ingest.errors import CaptureError
from tests.analytics.test_topk_offline import CAPTURES, batches, make_table

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO_ROOT / "samples").glob("*.pcap"))
KEYS = ["src_ip", "dst_ip", "src_ip,dst_ip", "dst_port", "proto,dst_port"]


class ArrowOfflineTopK(OfflineTopK):
    """The Arrow group-by implementation of ``feed`` (the reference).

    Lateness and closing (time-based) follow the rule record by record in plain Python: late when
    ``ts < newest_before - watermark``, sub-window ``i`` closed once ``newest >= (i+1)*b + watermark``.
    """

    def feed(self, batch: pa.RecordBatch | pa.Table) -> Iterator[dict[str, Any]]:
        keys = key_text(batch, self._fields)
        valid = pc.is_valid(keys)
        if self.time_based:
            valid = pc.and_(valid, pc.is_valid(batch.column("ts")))
        n_valid = pc.sum(valid).as_py() or 0
        self.skipped += batch.num_rows - n_valid
        w = weights(batch, self.weight)
        if self.time_based:
            newest = getattr(self, "_ref_newest", None)
            late = []
            for t, ok in zip(
                pc.cast(_flat(batch.column("ts")), pa.int64()).to_pylist(), valid.to_pylist(), strict=True
            ):
                late.append(bool(ok and newest is not None and t < newest - self._delay_ns))
                newest = newest if t is None else t if newest is None else max(newest, t)
            self._ref_newest = newest
            self.late += sum(late)
            valid = pc.and_(valid, pc.invert(pa.array(late)))
        keys, w = keys.filter(valid), w.filter(valid)
        if self.time_based:
            ts = pc.cast(_flat(batch.column("ts")).filter(valid), pa.int64()).to_numpy(zero_copy_only=False)
            index = ts // self._b_units
            closable = _NO_TIME if newest is None else (newest - self._delay_ns) // self._b_units - 1
        else:
            index = (self.records + np.arange(len(keys), dtype=np.int64)) // self._b_units
            closable = (self.records + len(keys)) // self._b_units - 1
        self.records += len(index)
        rows = pa.table({"sw": pa.array(index, pa.int64()), "key": keys, "w": w})
        if self._carry is not None:
            rows = pa.concat_tables([self._carry, rows])
        if not rows.num_rows:
            return
        counts = rows.group_by(["sw", "key"], use_threads=False).aggregate([("w", "sum")])
        counts = counts.sort_by([("sw", "ascending"), ("w_sum", "descending"), ("key", "ascending")])
        sw = counts["sw"].to_numpy()
        n_closed = int(np.searchsorted(sw, closable, side="right"))
        tail = counts.slice(n_closed)
        self._carry = tail.rename_columns(["sw", "key", "w"]) if tail.num_rows else None
        if n_closed == 0:
            return
        sw = sw[:n_closed]
        starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]])
        if not self.exact:
            rank = np.arange(n_closed) - np.repeat(starts, np.diff(np.r_[starts, n_closed]))
            keep = np.flatnonzero(rank < self.k)
            sw = sw[keep]
            starts = np.flatnonzero(np.r_[True, sw[1:] != sw[:-1]])
            key_list = counts["key"].take(keep).to_pylist()
            count_list = counts["w_sum"].take(keep).to_pylist()
        else:
            key_list = counts["key"].slice(0, n_closed).to_pylist()
            count_list = counts["w_sum"].slice(0, n_closed).to_pylist()
        ends = np.r_[starts[1:], len(sw)]
        add = self._algorithm.add_subwindow
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            yield from add(dict(zip(key_list[s:e], count_list[s:e], strict=True)), int(sw[s]))


_NO_TIME = -(2**62)


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def run_both(data: list[pa.RecordBatch], **query: Any) -> tuple[Any, Any]:
    fast, ref = OfflineTopK(**query), ArrowOfflineTopK(**query)
    got = list(fast.run(data)), fast.records, fast.skipped, fast.late
    want = list(ref.run(data)), ref.records, ref.skipped, ref.late
    return got, want


QUERIES = [
    {"N": 1000, "b": 100, "k": 3},
    {"N": 10_000, "b": 1000, "k": 10},
    {"N": "10s", "b": "1s", "k": 10, "time_based": True},
    {"N": "2s", "b": "500ms", "k": 1, "time_based": True},
]


@pytest.fixture(scope="module")
def sample_batches() -> dict[tuple[str, int], list[pa.RecordBatch]]:
    return {(p.name, size): list(read_records(p, batch_size=size)) for p in SAMPLES for size in (65536, 999)}


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("weight", ["packets", "bytes"])
def test_samples_equal_the_arrow_path(sample_batches, key: str, weight: str) -> None:
    assert len(SAMPLES) >= 5
    compared = 0
    for data in sample_batches.values():
        for query in QUERIES:
            for exact in (False, True):
                got, want = run_both(data, key=key, weight=weight, exact=exact, **query)
                assert got == want, (key, weight, exact, query)
                compared += len(want[0])
    assert compared > 1000


@pytest.mark.parametrize("key", ["src_ip", "src_ip,dst_ip", "proto,dst_port", "iface,vlan"])
@pytest.mark.parametrize("late", [False, True])
def test_synthetic_batches_equal_the_arrow_path(key: str, late: bool) -> None:
    table = make_table(1200, seed=11, late=late)
    for sizes in ([1200], [1, 7, 50, 400]):
        data = batches(table, sizes)
        for query, weight, exact in [
            ({"N": 200, "b": 50, "k": 3}, "packets", False),
            ({"N": 200, "b": 50, "k": 3}, "bytes", True),
            ({"N": 4, "b": 1, "k": 2}, "bytes", False),  # many sub-windows per batch
            ({"N": "3s", "b": "1s", "k": 2, "time_based": True}, "bytes", False),
            ({"N": "3s", "b": "1s", "k": 2, "time_based": True}, "packets", True),
            ({"N": "2s", "b": "500ms", "k": 1, "time_based": True}, "packets", False),
            # A watermark delay: several sub-windows open at once, records going back into them.
            ({"N": "3s", "b": "1s", "k": 2, "time_based": True, "watermark": "1500ms"}, "bytes", False),
            ({"N": "2s", "b": "500ms", "k": 1, "time_based": True, "watermark": "4s"}, "packets", True),
        ]:
            got, want = run_both(data, key=key, weight=weight, exact=exact, **query)
            assert got == want, (key, sizes, query, weight, exact)
    # A Table (chunked columns) is fed the same way.
    got, want = run_both([table], key=key, N="3s", b="1s", k=2, time_based=True)
    assert got == want


def test_unusual_batches_equal_the_arrow_path() -> None:
    # Nearly every key distinct and 3 records per sub-window: sorting replaces the dense count
    # table, with a sub-window carried across each batch boundary.
    n = 2000
    rng = np.random.default_rng(5)
    keys = pa.array([f"10.0.{i // 256}.{i % 256}" for i in rng.integers(0, 1500, n)])
    batch = pa.record_batch({"src_ip": keys, "wire_len": pa.array(rng.integers(0, 1500, n), pa.int32())})
    data = batches(pa.Table.from_batches([batch]), [700, 650])
    for weight in ("packets", "bytes"):
        for exact in (False, True):
            got, want = run_both(data, key="src_ip", weight=weight, exact=exact, N=9, b=3, k=2)
            assert got == want and len(got[0]) > 600
    # Null and int32 timestamps, and a batch whose records are all late.
    ts = pa.array([5, None, 7, 12, 3, 2, 14, None, 20, 9, 25, 26], pa.int32())
    src = pa.array(["a", "b", None, "a", "b", "a", "c", "c", "a", "b", "b", "a"])
    table = pa.table({"ts": ts, "src_ip": src})
    for sizes in ([12], [4, 2, 6], [1]):
        got, want = run_both(batches(table, sizes), key="src_ip", N=10, b=5, k=1, time_based=True)
        assert got == want
        assert got[1:] == (6, 3, 3) and got[0]  # records, skipped (null ts or key), late


def test_field_values_joining_to_one_text_are_one_key() -> None:
    # ("a,b", "c") and ("a", "b,c") have the same key text "a,b,c": one key, as with per-record texts.
    batch = pa.record_batch(
        {
            "src_ip": ["a,b", "a", "x", "a,b", "x", "a"],
            "iface": ["c", "b,c", "y", "c", "y", "b,c"],
        }
    )
    codes, valid, texts = key_codes(batch, ("src_ip", "iface"))
    assert valid is None and sorted(texts.to_pylist()) == ["a,b,c", "x,y"]
    assert [texts[int(c)].as_py() for c in codes] == key_text(batch, ("src_ip", "iface")).to_pylist()
    got, want = run_both([batch], key="src_ip,iface", N=6, b=6, k=1)
    assert got == want and got[0] == [{"end": 6, "delta": 4, "items": []}]


def test_key_codes_match_key_text_for_every_record() -> None:
    table = make_table(500, seed=3)
    for fields in [("src_ip",), ("proto", "dst_port"), ("dst_port",), ("src_port",), ("src_ip", "iface")]:
        codes, valid, texts = key_codes(table, fields)
        expected = key_text(table, fields).to_pylist()
        mask = [True] * len(codes) if valid is None else valid.tolist()
        got = [texts[int(c)].as_py() if v else None for c, v in zip(codes, mask, strict=True)]
        assert got == expected
        assert len(set(texts.to_pylist())) == len(texts)


def test_large_weights_are_summed_exactly() -> None:
    group = np.array([0, 1, 0, 2, 0])
    w = np.array([2**62, 5, 2**62 - 1, 7, -3], np.int64)
    assert _sums(group, w, 4).tolist() == [2**63 - 4, 5, 7, 0]
    assert _sums(group, np.array([1, 2, 3, 4, 5]), 3).tolist() == [9, 2, 4]
    n = 20
    batch = pa.record_batch(
        {
            "src_ip": pa.array(["a", "b"] * (n // 2)),
            "wire_len": pa.array([2**40 + i for i in range(n)], pa.int64()),
        }
    )
    got, want = run_both([batch.slice(0, 7), batch.slice(7)], key="src_ip", weight="bytes", N=10, b=5, k=1)
    assert got == want and got[0]


@pytest.mark.parametrize("path", [*SAMPLES, *sorted(CAPTURES.glob("*.pcap*"))], ids=lambda p: p.name)
def test_projected_read_equals_the_full_read(path: Path) -> None:
    try:
        full_reader = read_records(path)
    except CaptureError as exc:  # e.g. a link type the reader does not support
        pytest.skip(str(exc))
    full = pa.Table.from_batches(list(full_reader), schema=full_reader.schema)
    for columns in (["src_ip", "ts"], ["wire_len"], ["proto", "dst_port", "iface", "vlan"], ["icmp_code"]):
        reader = read_records(path, columns=columns)
        part = pa.Table.from_batches(list(reader), schema=reader.schema)
        assert part.column_names == columns
        assert part.equals(full.select(columns))
        assert reader.summary == full_reader.summary
    with pytest.raises(ValueError, match="unknown record column"):
        read_records(path, columns=["src_ip", "port"])


def test_offline_query_reads_only_its_columns() -> None:
    assert OfflineTopK("src_ip", N=10, b=5, k=1).columns == ("src_ip",)
    q = OfflineTopK("proto,dst_port", N="10s", b="1s", k=1, weight="bytes", time_based=True)
    assert q.columns == ("proto", "dst_port", "ts", "wire_len")


def test_the_analyze_path_does_not_import_pandas() -> None:
    # pyarrow imports pandas on its first numpy conversion (pa.array, to_numpy): ~0.25 s of start-up.
    code = (
        "import sys\n"
        "from analytics.topk_offline import read_topk\n"
        f"q, reports = read_topk({str(SAMPLES[0])!r}, key='src_ip,dst_port', N='2s', b='1s', k=3,"
        " weight='bytes', time_based=True)\n"
        "assert list(reports)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'pyspark', 'scapy')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert out.stdout.strip() == "[]"
    q, reports = read_topk(SAMPLES[0], key="src_ip", N=1000, b=100, k=3)
    assert list(reports) and q.records
