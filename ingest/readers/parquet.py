"""Captures to one Parquet file of header records, with a summary (what ``netmon parse`` runs).

Batches stream from :func:`ingest.readers.read_records` into a ``pyarrow.parquet.ParquetWriter``
one at a time, so memory stays bounded whatever the capture size. Along the way the report
counts records per IP protocol, distinct sources and the top sources (exact counts).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.readers import read_records
from netmon.records import ARROW_SCHEMA

__all__ = ["PROTOCOL_NAMES", "ParseReport", "parse_to_parquet"]

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
    sources: Counter[str] = Counter()
    with pq.ParquetWriter(str(out), ARROW_SCHEMA) as writer:
        for path in paths:
            reader = read_records(path, batch_size=batch_size, iface=iface)
            for batch in reader:
                writer.write_batch(batch)
                for value, count in _value_counts(batch, "proto"):
                    protocols[value] += count
                for value, count in _value_counts(batch, "src_ip"):
                    sources[value] += count
            summary = reader.summary
            report.files.append({"path": str(Path(path)), **summary.to_dict()})
            report.frames += summary.frames
            report.records += summary.records
            for reason, count in summary.skipped.items():
                report.skipped[reason] = report.skipped.get(reason, 0) + count
            report.non_first_fragments += summary.non_first_fragments
            report.ts_backwards += summary.ts_backwards
            report.warnings += summary.warnings
    report.skipped = dict(sorted(report.skipped.items()))
    report.protocols = {
        PROTOCOL_NAMES.get(proto, str(proto)): n
        for proto, n in sorted(protocols.items(), key=lambda kv: (-kv[1], kv[0]))
    }
    report.distinct_sources = len(sources)
    report.top_sources = sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return report


def _value_counts(batch: Any, column: str) -> list[tuple[Any, int]]:
    counted = pc.value_counts(batch.column(column))
    return list(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True))
