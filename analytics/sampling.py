"""Drop boxes on records: a reproducible Bernoulli sample and the Horvitz–Thompson count it gives.

Seed 000 (Ayad & Naughton, §5.2) places *drop boxes* that keep a fraction x of a stream's tuples
when a plan does not fit its CPU budget; seed 002 (STREAM, §5) asks that an approximate answer
say how approximate it is. This module is the record-level half of that, with no Spark:

- :func:`record_hash` and :func:`sample_mask`: which records a drop box with fraction x keeps.
  The choice is a hash of the record's own fields (event time, length, ports, protocol), not a
  random draw, so a micro-batch that Spark runs again after a failure keeps the same records
  and gives the same answer (the exactly-once contract of ``pipeline.batch_sink``). For a
  record with a hash uniform on [0, 2^64) it is a Bernoulli trial with probability x; records
  with equal fields share their fate (a departure from independent trials, which only matters
  for exact duplicates).
- :func:`intake_lines`: the *intake* drop box, before the decode. When the Kafka read and the
  decode of every record are most of a batch (a flood at several times the sustained rate), no
  box after the decode can bound the load, so one box sits in front of it: it keeps each line of
  a packets message by a hash of its *position* (Kafka partition, offset, line index:
  :func:`position_hash`), so only the kept lines are parsed. Each record is a Bernoulli trial of
  its own — not the message's (cluster sampling of whole messages would leave the intervals
  below far too narrow: a flood's victim has hundreds of records in every message) — and a rerun
  of the batch reads the same positions, so it keeps the same lines. The position hash does not
  read the record's fields, so a query's own box (:func:`record_hash`) after it is an independent
  trial: a record reaches that query with probability ``intake · keep``.
- :func:`scaled`: the Horvitz–Thompson estimate of a count from the kept records, Σ w_i / x,
  rounded to a whole count (the result formats keep counts as integers; the rounding is at most
  half a unit per (sub-window, key) partial, noted as a departure in ``docs/overload.md``).
- :func:`count_interval`: a 95 % interval for a packet count c estimated from a sample at
  fraction x — the score (Wilson) interval of the binomial n ~ B(c, x), solved for c. It is
  wider than the plain normal interval for small samples, where the normal one under-covers.
  With several fractions in one window the smallest is used: the variance Σ c_i(1 − x_i)/x_i is
  at most c(1 − x_min)/x_min, so the interval is conservative.

:class:`ExactSample` is the oracle: the same decisions, made one record at a time in Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = [
    "HASH_FIELDS",
    "Z95",
    "ExactSample",
    "count_interval",
    "intake_lines",
    "position_hash",
    "record_hash",
    "sample_mask",
    "scaled",
    "threshold",
]

#: The record fields the sampling hash reads (``ts`` in microseconds), in this order.
HASH_FIELDS = ("ts", "wire_len", "src_port", "dst_port", "proto")
#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1


def _mix(h: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea, Flood 2014): every input bit reaches every output bit."""
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


def record_hash(
    ts_us: np.ndarray, wire_len: np.ndarray, src_port: np.ndarray, dst_port: np.ndarray, proto: np.ndarray
) -> np.ndarray:
    """A 64-bit hash per record of its :data:`HASH_FIELDS` (nulls given as 0), uint64."""
    with np.errstate(over="ignore"):
        h = _mix(np.asarray(ts_us).astype(np.uint64) + _GOLDEN)
        packed = (
            (np.asarray(wire_len).astype(np.uint64) << np.uint64(40))
            ^ (np.asarray(src_port).astype(np.uint64) << np.uint64(24))
            ^ (np.asarray(dst_port).astype(np.uint64) << np.uint64(8))
            ^ np.asarray(proto).astype(np.uint64)
        )
        return _mix(h ^ packed)


def position_hash(partition: int, offset: int, index: np.ndarray) -> np.ndarray:
    """A 64-bit hash per line ``index`` of the message at (``partition``, ``offset``), uint64."""
    with np.errstate(over="ignore"):
        base = np.array([partition & _MASK], np.uint64) * _GOLDEN + np.uint64(offset & _MASK) + _GOLDEN
        h = _mix(base)[0]
        return _mix(np.asarray(index).astype(np.uint64) ^ h)


def intake_lines(value: bytes, partition: int, offset: int, keep: float) -> tuple[bytes, int]:
    """The intake drop box on one packets message: its kept lines, and the non-empty lines dropped.

    A line (ending in ``\\n``, or the value's end) is kept when :func:`position_hash` of its index
    is below the fraction's bound; the kept lines keep their order and their bytes.
    """
    if keep >= 1 or not value:
        return value, 0
    buf = np.frombuffer(value, np.uint8)
    ends = np.flatnonzero(buf == 10)
    if buf[-1] != 10:
        ends = np.append(ends, len(buf) - 1)
    kept = sample_mask(position_hash(partition, offset, np.arange(len(ends))), keep)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    content = (lengths > 1) | (buf[ends] != 10)  # an empty line is no record
    dropped = int((content & ~kept).sum())
    if not dropped:
        return value, 0
    return buf[np.repeat(kept, lengths)].tobytes(), dropped


def threshold(keep: float) -> int:
    """The hash bound of fraction ``keep``: a record is kept when its hash is below it."""
    if not (0 < keep <= 1):
        raise ValueError(f"keep: expected a fraction in (0, 1], got {keep!r}")
    return min(int(keep * 2.0**64), _MASK) if keep < 1 else _MASK + 1


def sample_mask(hashes: np.ndarray, keep: float) -> np.ndarray:
    """Which records a drop box keeping ``keep`` of them keeps (all of them at 1)."""
    bound = threshold(keep)
    if bound > _MASK:
        return np.ones(len(hashes), bool)
    return np.asarray(hashes, np.uint64) < np.uint64(bound)


def scaled(total: np.ndarray | float, keep: float) -> np.ndarray:
    """Horvitz–Thompson: a sum over the kept records divided by ``keep``, rounded to whole units."""
    values = np.asarray(total, np.float64)
    return np.rint(values / keep).astype(np.int64) if keep < 1 else values.astype(np.int64)


def count_interval(estimate: float, keep: float, z: float = Z95) -> tuple[float, float]:
    """The (low, high) interval for a count estimated as ``estimate`` from a sample at ``keep``.

    The kept count is n = estimate·keep ~ B(c, keep); the interval is every c with
    ``|n − c·x| ≤ z·sqrt(c·x·(1 − x))`` — the roots of ``x²c² − (2nx + z²x(1−x))c + n² = 0``.
    Exact answers (``keep == 1``) are their own interval.

    >>> count_interval(100, 1.0)
    (100.0, 100.0)
    >>> low, high = count_interval(1000, 0.1); round(low), round(high)
    (831, 1204)
    """
    if keep >= 1:
        return float(estimate), float(estimate)
    x = float(keep)
    n = float(estimate) * x
    b = 2 * n * x + z * z * x * (1 - x)
    root = math.sqrt(max(b * b - 4 * x * x * n * n, 0.0))
    return (b - root) / (2 * x * x), (b + root) / (2 * x * x)


class ExactSample:
    """Oracle of :func:`sample_mask` and :func:`scaled`: one record at a time, Python integers.

    ``update(record)`` feeds one record (a mapping with :data:`HASH_FIELDS`, ``None`` for a null);
    ``report()`` gives the kept records' indices and the scaled sum of ``weight``.
    """

    def __init__(self, keep: float, weight: str = "packets") -> None:
        self.keep = keep
        self.weight = weight
        self._kept: list[int] = []
        self._sum = 0
        self._n = 0

    @staticmethod
    def hash_of(record: Mapping[str, int | None]) -> int:
        def mix(z: int) -> int:
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
            return z ^ (z >> 31)

        def v(name: str) -> int:
            return int(record.get(name) or 0) & _MASK

        h = mix((v("ts") + 0x9E3779B97F4A7C15) & _MASK)
        packed = ((v("wire_len") << 40) ^ (v("src_port") << 24) ^ (v("dst_port") << 8) ^ v("proto")) & _MASK
        return mix(h ^ packed)

    def update(self, record: Mapping[str, int | None]) -> ExactSample:
        if self.keep >= 1 or self.hash_of(record) < threshold(self.keep):
            self._kept.append(self._n)
            self._sum += 1 if self.weight == "packets" else int(record.get("wire_len") or 0)
        self._n += 1
        return self

    def update_many(self, records: Iterable[Mapping[str, int | None]]) -> ExactSample:
        for r in records:
            self.update(r)
        return self

    def report(self) -> tuple[list[int], int]:
        total = self._sum if self.keep >= 1 else round(self._sum / self.keep)
        return list(self._kept), total
