"""What a capture reader saw: counts by outcome, warnings, bytes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ReadSummary"]


@dataclass
class ReadSummary:
    """Counts kept by a reader while it runs (final once iteration ends).

    ``frames == records + sum(skipped.values())`` always holds.

    Examples
    --------
    >>> s = ReadSummary(frames=3, records=2, skipped={"non_ip": 1})
    >>> s.add_skipped({"non_ip": 2, "truncated": 1})
    >>> s.to_dict()["skipped"]
    {'non_ip': 3, 'truncated': 1}
    """

    #: packets (frames) read from the file
    frames: int = 0
    #: frames that became records
    records: int = 0
    #: frames that did not, by reason: ``non_ip``, ``truncated``, ``bad_ip_header``,
    #: ``unsupported_linktype:N``, ``unknown_interface``, and (impossible capture metadata, see
    #: :func:`ingest.decode.impossible_frames`) ``bad_timestamp``, ``bad_length``
    skipped: dict[str, int] = field(default_factory=dict)
    #: records that are non-first IPv4/IPv6 fragments (ports and TCP fields null)
    non_first_fragments: int = 0
    #: records whose TCP/UDP/ICMP header was cut by the snap length (transport fields null)
    l4_truncated: int = 0
    #: records whose timestamp is earlier than the previous record's (kept as they are)
    ts_backwards: int = 0
    #: one line each: truncated last record, skipped corrupt pcapng blocks, a damaged compressed
    #: stream, the first packet with an impossible timestamp / lengths, ...
    warnings: list[str] = field(default_factory=list)
    #: bytes of capture data read (after decompression)
    bytes_read: int = 0
    #: ``"pcap"`` or ``"pcapng"``
    format: str = ""
    #: ``"gzip"``, ``"bz2"``, ``"xz"`` or None
    compression: str | None = None
    #: link types seen (classic pcap: one)
    linktypes: list[int] = field(default_factory=list)

    def add_skipped(self, counts: dict[str, int]) -> None:
        """Add per-reason counts of frames that are not records."""
        for reason, count in counts.items():
            if count:
                self.skipped[reason] = self.skipped.get(reason, 0) + count

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        out = asdict(self)
        out["skipped"] = dict(sorted(out["skipped"].items()))
        return out
