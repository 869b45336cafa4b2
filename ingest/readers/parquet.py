"""Captures to one Parquet file of header records, with a summary (what ``netmon parse`` runs), and back.

Batches stream from :func:`ingest.readers.read_records` into a ``pyarrow.parquet.ParquetWriter``
one at a time, so memory stays bounded whatever the capture size. Along the way the report
counts records per IP protocol, distinct sources and the top sources (exact counts).
:func:`read_parquet_records` reads such a file back with today's record types, whichever netmon
version wrote it (``cap_len``/``wire_len`` were int32 before they became int64).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.decode import impossible_frames
from ingest.errors import CaptureError
from ingest.readers import read_records
from netmon.records import ARROW_SCHEMA, conform

__all__ = ["PROTOCOL_NAMES", "ParseReport", "parse_to_parquet", "read_parquet_records"]

log = logging.getLogger(__name__)

#: IP protocol numbers shown by name in the report (others as their number)
PROTOCOL_NAMES = {
    1: "icmp",
    2: "igmp",
    4: "ipip",
    6: "tcp",
    17: "udp",
    41: "ipv6",
    47: "gre",
    50: "esp",
    51: "ah",
    58: "icmpv6",
    59: "ipv6-nonxt",
    89: "ospf",
    103: "pim",
    112: "vrrp",
    132: "sctp",
}


@dataclass
class ParseReport:
    """What :func:`parse_to_parquet` read and wrote."""

    out: str
    files: list[dict[str, Any]] = field(default_factory=list)  #: per file: path and ReadSummary dict
    frames: int = 0
    records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    non_first_fragments: int = 0
    ts_backwards: int = 0
    protocols: dict[str, int] = field(default_factory=dict)  #: records per protocol, most first
    distinct_sources: int = 0
    top_sources: list[tuple[str, int]] = field(default_factory=list)  #: by count, then address
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        out = asdict(self)
        out["top_sources"] = [{"src_ip": ip, "records": n} for ip, n in self.top_sources]
        return out

    def lines(self) -> list[str]:
        """The human summary, one fact per line."""

        def counts(items: dict[str, int]) -> str:
            return ", ".join(f"{k} {v:,}" for k, v in items.items()) or "none"

        names = ", ".join(f["path"] for f in self.files)
        out = [
            f"{self.out}: {self.records:,} records from {self.frames:,} frames ({names})",
            f"skipped: {counts(self.skipped)}",
            f"protocols: {counts(self.protocols)}",
            f"distinct sources: {self.distinct_sources:,}",
            "top sources: " + (", ".join(f"{ip} {n:,}" for ip, n in self.top_sources) or "none"),
        ]
        if self.non_first_fragments:
            out.append(f"non-first fragments (no ports): {self.non_first_fragments:,}")
        if self.ts_backwards:
            out.append(f"timestamps going backwards (kept): {self.ts_backwards:,}")
        out += [f"warning: {w}" for w in self.warnings]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


#: The columns written with dictionary pages: the text ones, whose values repeat.
_DICTIONARY = [f.name for f in ARROW_SCHEMA if pa.types.is_string(f.type)]


def parse_to_parquet(
    paths: list[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    iface: str | None = None,
    top: int = 5,
    batch_size: int = 65536,
) -> ParseReport:
    """Decode every capture in ``paths`` (in order) into one Parquet file at ``out``.

    Raises
    ------
    CaptureError
        A file is not a capture (nothing is written), or is damaged: the Parquet file then holds
        every record read before the damage (it is closed properly).
    """
    for path in paths:  # not a capture, or a bad header: fail before writing anything
        read_records(path, chunk_bytes=4096).close()
    report = ParseReport(out=str(out))
    protocols: Counter[int] = Counter()
    # Per-batch counts of the sources, summed once at the end with pyarrow: a capture with ~1M
    # distinct sources made a Python Counter and its sort half of the whole command's time.
    source_counts: list[pa.Table] = []
    # Dictionary pages only for the text columns (for the integer columns they cost two thirds
    # of the write time and saved little), lz4 pages; the writes run on a thread of their own,
    # beside the decoding (pyarrow releases the GIL while it encodes).
    with (
        pq.ParquetWriter(
            str(out), ARROW_SCHEMA, write_page_checksum=True, compression="lz4", use_dictionary=_DICTIONARY
        ) as writer,
        ThreadPoolExecutor(1, thread_name_prefix="parquet-writer") as pool,
    ):
        pending: deque[Future[None]] = deque()
        for path in paths:
            reader = read_records(path, batch_size=batch_size, iface=iface)
            for batch in reader:
                pending.append(pool.submit(writer.write_batch, batch))
                while len(pending) > 2:  # bounded: at most a few batches wait in memory
                    pending.popleft().result()
                for value, count in _value_counts(batch, "proto"):
                    protocols[value] += count
                counted = pc.value_counts(batch.column("src_ip"))
                source_counts.append(
                    pa.table(
                        {"src_ip": counted.field("values"), "n": pc.cast(counted.field("counts"), pa.int64())}
                    )
                )
            summary = reader.summary
            report.files.append({"path": str(Path(path)), **summary.to_dict()})
            report.frames += summary.frames
            report.records += summary.records
            for reason, count in summary.skipped.items():
                report.skipped[reason] = report.skipped.get(reason, 0) + count
            report.non_first_fragments += summary.non_first_fragments
            report.ts_backwards += summary.ts_backwards
            report.warnings += summary.warnings
        while pending:
            pending.popleft().result()
    report.skipped = dict(sorted(report.skipped.items()))
    report.protocols = {
        PROTOCOL_NAMES.get(proto, str(proto)): n
        for proto, n in sorted(protocols.items(), key=lambda kv: (-kv[1], kv[0]))
    }
    report.distinct_sources, report.top_sources = _top_sources(source_counts, top)
    return report


def _top_sources(parts: list[pa.Table], top: int) -> tuple[int, list[tuple[str, int]]]:
    """Distinct sources (a null source counts as one, as a Counter key did) and the ``top`` most
    frequent, by count descending then address text ascending."""
    if not parts:
        return 0, []
    sources = pa.concat_tables(parts).group_by("src_ip", use_threads=False).aggregate([("n", "sum")])
    keys = [("n_sum", "descending"), ("src_ip", "ascending")]  # both keys: no tie is left unordered
    ranked = sources.take(pc.select_k_unstable(sources, k=min(top, sources.num_rows), sort_keys=keys))
    return sources.num_rows, list(zip(ranked["src_ip"].to_pylist(), ranked["n_sum"].to_pylist(), strict=True))


def _value_counts(batch: Any, column: str) -> list[tuple[Any, int]]:
    counted = pc.value_counts(batch.column(column))
    return list(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True))


#: record columns that were int32 in files written before they became int64; those files hold
#: each unsigned 32-bit value v >= 2**31 as v - 2**32, which a cast back through uint32 restores
_WIDENED = ("cap_len", "wire_len")


def read_parquet_records(path: str | os.PathLike[str], *, columns: Sequence[str] | None = None) -> pa.Table:
    """The records of a Parquet file written by :func:`parse_to_parquet` (``netmon parse``).

    The columns have the types of :data:`netmon.records.ARROW_SCHEMA` whichever version wrote the
    file: older files' int32 ``cap_len``/``wire_len`` are read as the unsigned 32-bit lengths
    they were (an original length of 0xFFFFFFFF was stored as -1) and cast to int64. Records
    whose timestamp or lengths cannot be true (an older reader let them through: see
    :func:`ingest.decode.impossible_frames`) are dropped, with a logged warning counting them.
    Page checksums (written since lengths became int64) are verified.

    Parameters
    ----------
    columns : sequence of str, optional
        Only these record columns, in this order (default: all of them).

    Raises
    ------
    CaptureError
        The file cannot be read as Parquet (damaged: a checksum, a length or a structure does not
        hold), or does not hold the record columns asked for: a one-line message naming the file.
    """
    names = list(ARROW_SCHEMA.names if columns is None else columns)
    checked = [c for c in ("ts", "cap_len", "wire_len") if c not in names]
    try:
        table = pq.read_table(str(path), columns=names + checked, page_checksum_verification=True)
    except FileNotFoundError:
        raise CaptureError(f"{path}: cannot open: No such file or directory") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureError(f"{path}: not a readable Parquet file of records: {first}") from None
    try:
        for name in _WIDENED:
            if table.schema.field(name).type == pa.int32():
                wide = table.column(name).cast(pa.uint32(), safe=False).cast(pa.int64())
                table = table.set_column(table.schema.get_field_index(name), name, wide)
        table = conform(table)
    except (KeyError, ValueError) as exc:
        raise CaptureError(f"{path}: {exc}") from None
    bad, _ = impossible_frames(
        pc.fill_null(table.column("ts").cast(pa.int64()), 0).to_numpy(),
        pc.fill_null(table.column("cap_len"), 0).to_numpy(),
        pc.fill_null(table.column("wire_len"), 0).to_numpy(),
    )
    if bad is not None:
        log.warning(
            "%s: %d records with an impossible timestamp or lengths dropped", path, int(np.count_nonzero(bad))
        )
        table = table.filter(pa.array(~bad))
    return table.select(names)
