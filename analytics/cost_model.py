"""The cost model of netmon's queries: CPU seconds per second and state bytes at an input rate.

For each query kind (traffic, top-k, distinct, join) :class:`CostModel` estimates, from the input
rate λ (packets per second), the key and group cardinalities of the traffic and the query's knobs
(window N, sub-window g, k, lg_k), the operations per second each stage performs, their CPU cost
(a utilization: CPU seconds per second, seed 000 §3.1) and the state the query holds. The per-
operation constants are measured on this machine by ``netmon bench calibrate`` and stored in the
state directory (:func:`calibration_file`); without a calibration the built-in
:data:`DEFAULT_CONSTANTS` are used and :attr:`CostConstants.source` says ``"defaults"``.

Where each formula comes from (``docs/overload.md`` has the full table):

- distinct keys in a sub-window of ``n = λ·g`` records over ``K`` equally likely keys:
  ``D(n, K) = K·(1 − e^(−n/K))``, the Poisson ("large X") form of seed 004's occupancy argument
  behind (CKSV-5) and (CKSV-15) (digest B.8 recommends it over the printed ``(1 − 1/d)^g``);
- the join: seed 003's eq. (2) ``(λ_L + λ_R)·C_u + λ_out·C_p`` (= (AN-9) with C_u = C_I + C_V),
  computed by :class:`analytics.join_cost.JoinCostModel`; its state (CKSV-9) with the interval
  length ``l = T + watermark`` (digest C.4: Spark keeps join rows for the window plus the
  watermark delay, and the state is purged once per micro-batch, so (9)'s slack term
  ``d_j/(2·d_i)`` for input-triggered purges is left out: both departures from the paper);
- the stream characteristics (d, l, g) of seed 004 §3.3, Cost Formulas (1)–(4) and (7):
  :class:`StreamCharacteristics`, which agree with seed 000's (AN-1)–(AN-4) under λ = 1/d, W = l/d;
- traffic, top-k and distinct are netmon's own operators (not the papers' Algorithm 1): their
  formulas count the work of the single-pass stage 1 (one key + group-by per record and query)
  and of the sub-window merges (Golab Alg. 6; HLL unions), in the same style as (CKSV-16)–(19):
  events per second times a calibrated cost per event.

Traffic is assumed uniform over the keys (seed 004 §3.1 assumes uniform groups, digest B.10-13):
skewed keys make the distinct-key counts, and so the estimates, upper bounds.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analytics._base import Base
from analytics.join_cost import JoinCostModel
from analytics.plan import FractionalKnapsack
from netmon.config import Config, DistinctQuery, JoinQuery, TopKQuery

__all__ = [
    "CALIBRATION_FILE",
    "DEFAULT_CONSTANTS",
    "CostConstants",
    "CostModel",
    "Estimate",
    "SamplingPlan",
    "StreamCharacteristics",
    "Workload",
    "calibration_file",
    "distinct_keys",
    "distinct_keys_skewed",
    "fill_seconds",
    "key_codes",
    "key_profile",
    "load_constants",
    "occupancy_curve",
    "place_sampling",
    "save_constants",
    "workload_fields",
    "workload_keys",
    "workload_of",
]

#: Where ``netmon bench calibrate`` writes the constants, under ``[paths] state_dir``.
CALIBRATION_FILE = Path("calibration") / "cost-model.json"


@dataclass(frozen=True, kw_only=True)
class CostConstants:
    """Seconds per operation and bytes per state entry, measured by ``netmon bench calibrate``."""

    #: stage 1: one record read from its Kafka message and decoded (the shared pass every
    #: kind's stage 1 reads: ``pipeline.partials.decode_messages``), seconds
    decode_row_s: float = 1.0e-6
    #: stage 1: one record through one counting query (key text + group-by), seconds
    count_row_s: float = 5.0e-8
    #: stage 1: one (sub-window, key) partial row produced and merged, seconds
    count_group_s: float = 2.0e-7
    #: Golab Alg. 6: one key of a closed sub-window through the top-k selection and counters, seconds
    topk_key_s: float = 3.0e-7
    #: distinct: one distinct (group, item) of a sub-window into its HLL sketch, seconds
    sketch_item_s: float = 3.0e-7
    #: distinct: one sub-window sketch united into a window's answer, seconds
    sketch_union_s: float = 1.0e-6
    #: join C_u: insert one tuple and later expire it (seed 003; (AN-9) C_I + C_V), seconds
    join_update_s: float = 5.0e-7
    #: join C_p: probe for and produce one result, seconds
    join_probe_s: float = 5.0e-7
    #: the joins kind on the driver, around C_u and C_p: one tuple staged (Arrow to the join's
    #: arrays, its payload, the state files) and one result row written (a match, or a SYN left
    #: unanswered), seconds (``pipeline.joins_batch``; no seed names them)
    join_stage_s: float = 0.0
    join_row_s: float = 0.0
    #: one aggregate row of state (traffic window, partial count), bytes
    row_bytes: float = 40.0
    #: one (key, count) pair of Alg. 6's state, bytes
    topk_entry_bytes: float = 32.0
    #: one register of a dense HLL sketch, bytes (2^lg_k registers)
    hll_register_bytes: float = 1.0
    #: one coupon of a sparse HLL sketch (one distinct item), bytes
    hll_coupon_bytes: float = 10.0
    #: an HLL sketch's fixed header, bytes
    hll_header_bytes: float = 40.0
    #: one stored join tuple, bytes
    join_tuple_bytes: float = 48.0
    # -- measured in the running pipeline (``netmon bench calibrate --pipeline``) ---------------
    # The constants above time netmon's own operations one by one, as the seeds' formulas count
    # them per tuple. A micro-batch also costs something whatever it holds (a Spark job's
    # scheduling and its tasks' start, each kind's commit and state version), and around the
    # counted operations the pipeline does work no formula names (the JVM's Kafka read, Arrow
    # conversions, the join's staging of tuples on the driver). Both are fitted on the pipeline's
    # own ``sys`` rows over batches of different sizes: ``fixed + per_packet·packets`` per part.
    #: seconds per micro-batch of the shared pass in the tasks (stage 1), whatever it holds
    stage1_batch_s: float = 0.0
    #: seconds per micro-batch of each kind's driver part, whatever it holds
    traffic_batch_s: float = 0.0
    topk_batch_s: float = 0.0
    distinct_batch_s: float = 0.0
    features_batch_s: float = 0.0
    joins_batch_s: float = 0.0
    #: the pipeline's measured per-packet cost of each part over the formulas' estimate at the
    #: calibration workload (1: the formulas as they are)
    stage1_factor: float = 1.0
    traffic_factor: float = 1.0
    topk_factor: float = 1.0
    distinct_factor: float = 1.0
    joins_factor: float = 1.0
    features_factor: float = 1.0
    #: the alert features' driver part per packet, besides :meth:`CostModel.features` (written by
    #: calibrations before the features had a formula; 0 since)
    features_row_s: float = 0.0
    #: seconds per micro-batch outside every part (Spark's offsets, commit and progress), and per
    #: packet: they time no query, but lengthen a batch (:meth:`CostModel.batch_period`)
    other_batch_s: float = 0.0
    other_row_s: float = 0.0
    #: "defaults", or how and when they were measured
    source: str = "defaults"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostConstants:
        """From :meth:`to_dict`'s form; unknown keys are an error naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"cost constants: unknown key {unknown[0]!r}")
        values = dict(data)
        for name, value in values.items():
            if name != "source" and not (
                isinstance(value, int | float) and value >= 0 and math.isfinite(value)
            ):
                raise ValueError(f"cost constants {name}: expected a number >= 0, got {value!r}")
        return cls(**values)


#: The built-in constants, used only when no calibration exists (``netmon explain`` says so): round
#: values of the order measured on a 2-core development VM, not this machine's.
DEFAULT_CONSTANTS = CostConstants()


def calibration_file(state_dir: str | os.PathLike[str]) -> Path:
    """The calibration file under a state directory (``[paths] state_dir``)."""
    return Path(state_dir) / CALIBRATION_FILE


def load_constants(state_dir: str | os.PathLike[str]) -> CostConstants:
    """The calibrated constants of this machine, or :data:`DEFAULT_CONSTANTS` if none were measured."""
    path = calibration_file(state_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return DEFAULT_CONSTANTS
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: unreadable calibration ({exc}); run netmon bench calibrate again"
        ) from None
    return CostConstants.from_dict(data.get("constants", data))


def save_constants(
    constants: CostConstants, state_dir: str | os.PathLike[str], extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``constants`` (and ``extra`` details of the run) atomically to :func:`calibration_file`."""
    path = calibration_file(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"constants": constants.to_dict(), **(extra or {})}, indent=1))
    tmp.replace(path)
    return path


def distinct_keys(n: float, keys: float) -> float:
    """Expected distinct keys among ``n`` records drawn uniformly from ``keys`` keys: ``K·(1 − e^(−n/K))``.

    The Poisson form of the occupancy count behind (CKSV-5) and (CKSV-15) (digest B.8).

    >>> round(distinct_keys(1000, 1000), 1), distinct_keys(10, 1e12) > 9.99
    (632.1, True)
    """
    if n <= 0 or keys <= 0:
        return 0.0
    return keys * -math.expm1(-n / keys)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What the traffic looks like to the cost model: its rate and its key populations.

    ``key_cardinality`` is the number of distinct values of a query's key field in the traffic
    (a top-k key, a distinct query's counted item), ``group_cardinality`` of a distinct query's
    ``group_by`` field, ``protocols`` of ``proto``; ``key_cardinalities`` overrides them per field
    (:meth:`cardinality`); ``syn_fraction`` and ``synack_fraction`` are the shares of the records on the
    handshake join's two sides, ``link_fraction`` of each side of a link join, whose key matches
    with ``link_selectivity`` (seed 003's f).
    """

    rate_pps: float
    key_cardinality: float = 10_000.0
    group_cardinality: float = 1_000.0
    protocols: float = 4.0
    syn_fraction: float = 0.02
    synack_fraction: float = 0.02
    link_fraction: float = 0.5
    link_selectivity: float = 1e-4
    #: the share of the records the alert features buffer as control records (TCP SYNs, SYN-ACKs,
    #: RSTs, ICMP unreachables: ``analytics.alert_features.control_mask``)
    control_fraction: float = 0.05
    #: measured distinct values of particular record fields, e.g. (("dst_port", 1200.0),)
    key_cardinalities: tuple[tuple[str, float], ...] = ()
    #: measured key frequencies of particular keys (comma-separated fields, as a query names
    #: them): per key, :func:`key_profile`'s ``(probability, keys)`` bins
    key_profiles: tuple[tuple[str, tuple[tuple[float, float], ...]], ...] = ()
    #: measured distinct values among ``n`` consecutive records of particular keys: per key,
    #: :func:`occupancy_curve`'s ``(n, distinct)`` points
    key_curves: tuple[tuple[str, tuple[tuple[float, float], ...]], ...] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name in ("key_cardinalities", "key_profiles", "key_curves"):
                continue
            value = getattr(self, f.name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"Workload {f.name}: expected a finite number >= 0, got {value!r}")

    def cardinality(self, key: str, default: float | None = None) -> float:
        """Distinct values of a key (comma-separated fields): the product over its fields.

        A field's value is its entry in ``key_cardinalities``, else ``protocols`` for ``proto``,
        else ``default`` (``key_cardinality`` when not given).

        >>> Workload(rate_pps=1, key_cardinality=100, protocols=3).cardinality("proto,dst_port")
        300.0
        """
        known = dict(self.key_cardinalities)
        fallback = self.key_cardinality if default is None else default
        total = 1.0
        for name in key.split(","):
            name = name.strip()
            total *= known.get(name, self.protocols if name == "proto" else fallback)
        return total

    def distinct(self, key: str, n: float, default: float | None = None) -> float:
        """Expected distinct values of ``key`` among ``n`` records: on its measured occupancy curve
        when the workload has one (:func:`occupancy_curve`: consecutive records, their skew and
        their locality in time as they are), else over its measured frequencies
        (:func:`distinct_keys_skewed`: skewed, independent), else ``D(n, K)`` over
        :meth:`cardinality`'s ``K`` equally likely values.

        >>> w = Workload(rate_pps=1, key_profiles=(("src_ip", ((0.5, 1.0), (0.005, 100.0))),))
        >>> round(w.distinct("src_ip", 100), 1), round(w.distinct("dst_ip", 100, default=101), 1)
        (40.3, 63.5)
        """
        name = _key_name(key)
        profile = dict(self.key_profiles).get(name)
        curve = dict(self.key_curves).get(name)
        if curve:
            return _on_curve(n, curve, profile)
        if profile is not None:
            return distinct_keys_skewed(n, profile)
        return distinct_keys(n, self.cardinality(key, default))


def _key_name(key: str) -> str:
    """A key as :attr:`Workload.key_profiles` names it: its fields stripped, comma-joined, each
    once (a distinct query's (group, item) pair may name a field twice: ``proto`` and a flow's
    ``proto,src_ip,...``; the pair's values are those of its fields).

    >>> _key_name(" proto, src_ip,proto")
    'proto,src_ip'
    """
    return ",".join(dict.fromkeys(f.strip() for f in key.split(",") if f.strip()))


def distinct_keys_skewed(n: float, profile: Iterable[tuple[float, float]]) -> float:
    """Expected distinct keys among ``n`` independent records when ``c`` keys each have probability
    ``p``, for each ``(p, c)`` of ``profile``: ``Σ c·(1 − e^(−n·p))``.

    The occupancy count behind :func:`distinct_keys` without its uniform keys (seed 004 §3.1
    assumes uniform groups): with equal probabilities ``1/K`` it is ``D(n, K)``. A departure from
    the seed, which network traffic asks for: its keys are skewed, and under ``D(n, K)`` a one-
    second sub-window of a capture's 100,000 source addresses held 7–16 times the keys it did
    (docs/overload.md).

    >>> round(distinct_keys_skewed(1000, [(1 / 1000, 1000)]), 1) == round(distinct_keys(1000, 1000), 1)
    True
    """
    if n <= 0:
        return 0.0
    return float(sum(c * -math.expm1(-n * p) for p, c in profile))


def _on_curve(n: float, curve: Sequence[tuple[float, float]], profile: Any) -> float:
    """``n`` on a measured occupancy curve: log-log between its points; below the first, in
    proportion (a handful of records are nearly all distinct); beyond the last, the last point
    scaled as the frequencies say (:func:`distinct_keys_skewed`, else linearly)."""
    if n <= 0:
        return 0.0
    xs = [x for x, _ in curve]
    ys = [y for _, y in curve]
    if n <= xs[0]:
        return ys[0] * n / xs[0]
    if n >= xs[-1]:
        if profile is None:
            return ys[-1] * n / xs[-1]
        return ys[-1] * distinct_keys_skewed(n, profile) / max(1e-12, distinct_keys_skewed(xs[-1], profile))
    i = bisect.bisect_right(xs, n)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    t = math.log(n / x0) / math.log(x1 / x0)
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def occupancy_curve(
    codes: Any, smallest: int = 16, points_per_octave: int = 2
) -> tuple[tuple[float, float], ...]:
    """Mean distinct values among ``n`` consecutive records of a capture, for ``n`` from
    ``smallest`` to a quarter of the capture on a log scale: ``codes`` holds each record's key
    as an integer, in capture order.

    What a sub-window of ``n`` records holds, measured rather than drawn: a replayed capture's
    sub-window is ``n`` consecutive records, with the traffic's skew and its locality in time (a
    flow's packets come together). Drawn independently from the same frequencies the keys of a
    one-second sub-window came out 3 times too many for the generated ``baseline`` captures'
    addresses (docs/overload.md). A departure from seed 004, which derives the count from
    uniform, independent keys.

    >>> occupancy_curve([i // 4 for i in range(256)], smallest=4, points_per_octave=1)
    ((4.0, 1.0), (8.0, 2.0), (16.0, 4.0), (32.0, 8.0), (64.0, 16.0))
    """
    import numpy as np

    codes = np.asarray(codes)
    out: list[tuple[float, float]] = []
    largest = codes.size // 4
    for j in range(int(points_per_octave * math.log2(max(smallest, largest) / smallest)) + 1):
        n = int(round(smallest * 2 ** (j / points_per_octave)))
        if n > largest or (out and n == out[-1][0]):
            continue
        # at most ~2^20 records a point, spread over the capture: the mean is what is wanted
        chunks = codes.size // n
        step = max(1, chunks // max(8, (1 << 20) // n))
        rows = codes[: chunks * n].reshape(-1, n)[::step]
        ordered = np.sort(rows, axis=1)
        distinct = 1 + np.count_nonzero(ordered[:, 1:] != ordered[:, :-1], axis=1)
        out.append((float(n), float(distinct.mean())))
    return tuple(out)


def key_codes(records: Any, columns: Sequence[str]) -> Any:
    """Each record's key of ``columns`` as an int64 (equal keys, equal codes), in record order."""
    import numpy as np
    import pyarrow.compute as pc

    combined = np.zeros(records.num_rows, np.uint64)
    for name in columns:
        index = pc.dictionary_encode(records[name]).combine_chunks().indices
        values = np.asarray(pc.fill_null(index, -1).to_numpy(zero_copy_only=False), np.int64)
        # a multiplicative mix per field (an odd 64-bit constant): distinct keys collide with
        # probability ~ keys² / 2^64
        combined = combined * np.uint64(0x9E3779B97F4A7C15) + (values + 1).astype(np.uint64)
    return np.unique(combined, return_inverse=True)[1].astype(np.int64)


def key_profile(counts: Any, bins_per_octave: int = 8) -> tuple[tuple[float, float], ...]:
    """A key's frequencies as ``(probability, keys)`` bins: ``counts`` (each key's records, a numpy
    array) grouped by count on a log scale, ``bins_per_octave`` bins per doubling, each bin's keys
    at their mean probability — a few hundred numbers for any number of keys.

    :func:`distinct_keys_skewed` over the bins is within a fraction of a percent of the sum over
    every key (``1 − e^(−np)`` is concave, so a bin's mean errs a little high).

    >>> key_profile([1, 1, 2, 96])
    ((0.01, 2.0), (0.02, 1.0), (0.96, 1.0))
    """
    import numpy as np

    counts = np.asarray(counts, dtype=np.float64)
    counts = counts[counts > 0]
    if counts.size == 0:
        return ()
    total = counts.sum()
    bins = np.floor(np.log2(counts) * bins_per_octave).astype(np.int64)
    order = np.unique(bins, return_inverse=True)[1]
    keys = np.bincount(order).astype(np.float64)
    mean = np.bincount(order, weights=counts) / keys
    return tuple((float(p), float(c)) for p, c in zip(mean / total, keys, strict=True))


def fill_seconds(cfg: Config, kind: str | None = None) -> float:
    """Seconds of event time until a kind's windows hold all they will (``kind`` None: every
    kind's): its queries' longest window (the traffic window for ``traffic``; top-k, distinct,
    join windows) plus the watermark delay. Before that a distinct window's carried coupons and
    store, a top-k window's lists, a join's tuples still grow, and a batch costs less than a
    steady stream's; after it a kind's state holds that much of the stream.

    >>> from netmon.config import Config
    >>> fill_seconds(Config()), fill_seconds(Config(), "topk"), fill_seconds(Config(), "joins")
    (65.0, 15.0, 8.0)
    """
    q = cfg.queries
    windows: dict[str, list[float]] = {
        "traffic": [cfg.pipeline.traffic_window_s],
        "topk": [x.window_s for x in q.topk],
        "distinct": [x.window_s for x in q.distinct],
        "joins": [x.window_s for x in q.join],
    }
    chosen = windows.get(kind, []) if kind is not None else [w for ws in windows.values() for w in ws]
    if not chosen:
        chosen = [w for ws in windows.values() for w in ws]
    return max(chosen) + cfg.pipeline.watermark_s


def workload_fields(cfg: Config) -> list[str]:
    """The record fields whose distinct values the model needs: the top-k keys' fields, the
    distinct queries' counted items' and groups'."""
    fields = [f.strip() for q in cfg.queries.topk for f in q.key.split(",")]
    fields += [
        f.strip() for q in cfg.queries.distinct for f in f"{q.count},{q.group_by}".split(",") if f.strip()
    ]
    return fields


def workload_keys(cfg: Config) -> list[str]:
    """The keys whose sub-windows the model counts on a capture (:func:`occupancy_curve`): the
    top-k keys, the distinct queries' groups and (group, item) pairs, the alert features'
    (destination, source) pairs."""
    keys = [q.key for q in cfg.queries.topk]
    for q in cfg.queries.distinct:
        keys += [q.group_by, f"{q.group_by},{q.count}"] if q.group_by.strip() else [q.count]
    return [*keys, "dst_ip,src_ip"]


def workload_of(
    records: Any, rate_pps: float, fields: Iterable[str] = (), keys: Iterable[str] = ()
) -> Workload:
    """The :class:`Workload` of a capture's records (a pyarrow table of ``netmon.records``
    columns) replayed at ``rate_pps``: each field's distinct values (``fields``, and ``proto``),
    each key's frequencies (``keys``: comma-separated fields, :func:`key_profile`), the shares of
    SYNs and SYN-ACKs (the handshake join's two sides).

    The cardinalities and frequencies are those of the whole capture: the model draws a
    sub-window's records from them, as if the capture's mix held at every instant.
    """
    import numpy as np
    import pyarrow.compute as pc

    n = max(1, records.num_rows)
    known = []
    for name in dict.fromkeys(fields):
        if name in records.column_names and name != "proto":
            known.append((name, float(max(1, pc.count_distinct(records[name]).as_py()))))
    profiles, curves = [], []
    for key in dict.fromkeys(_key_name(k) for k in keys):
        columns = key.split(",")
        if key and all(c in records.column_names for c in columns):
            codes = key_codes(records, columns)
            profiles.append((key, key_profile(np.bincount(codes))))
            curves.append((key, occupancy_curve(codes)))
    flags = pc.fill_null(records["tcp_flags"], 0) if "tcp_flags" in records.column_names else None
    syn = synack = 0.0
    if flags is not None:
        is_syn = pc.equal(pc.bit_wise_and(flags, 0x02), 0x02)
        has_ack = pc.equal(pc.bit_wise_and(flags, 0x10), 0x10)
        syn = float(pc.sum(pc.and_(is_syn, pc.invert(has_ack))).as_py() or 0) / n
        synack = float(pc.sum(pc.and_(is_syn, has_ack)).as_py() or 0) / n
    protocols = (
        float(max(1, pc.count_distinct(records["proto"]).as_py())) if "proto" in records.column_names else 4.0
    )
    control = 0.05
    if {"proto", "tcp_flags", "icmp_type"} <= set(records.column_names):
        from analytics.alert_features import control_records

        control = float(np.count_nonzero(control_records(records))) / n
    return Workload(
        rate_pps=rate_pps,
        protocols=protocols,
        syn_fraction=syn,
        synack_fraction=synack,
        control_fraction=control,
        key_cardinalities=tuple(known),
        key_profiles=tuple(profiles),
        key_curves=tuple(curves),
    )


@dataclass(frozen=True)
class Estimate:
    """One query's estimate: CPU seconds per second, state rows and bytes, and how they arise."""

    kind: str
    query: str
    cpu: float
    state_rows: float
    memory_bytes: float
    #: operations per second by name (the model's event rates, seed 004 §5: counted at runtime)
    ops: dict[str, float] = field(default_factory=dict)
    #: the knobs the estimate was made for (window_s, sub_window_s, k, lg_k, keep ...)
    knobs: dict[str, float] = field(default_factory=dict)
    #: the part of ``cpu`` spent in stage 1, in the tasks of the shared read (the rest runs on
    #: the driver): what the pipeline measures apart (the ``sys`` rows' ``stage1_s``)
    stage1_cpu: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class StreamCharacteristics(Base):
    """A physical stream's (d, l, g): mean start gap, mean interval length, granularity (seed 004 §3).

    The rate is ``1/d`` and the live count ``l/d``. Cost Formulas (1)–(4) and (7) give an
    operator's output characteristics; with λ = 1/d and W = l/d, (4) composed with (2) is seed
    000's (AN-3) and (AN-4) (digest B.4), so one propagator serves both papers.

    Parameters
    ----------
    d
        Mean distance between start timestamps (time units; ``math.inf``: the empty stream).
    l
        Mean interval length (a source's elements last one tick: ``l = 1``).
    g
        Granularity spacing.

    Examples
    --------
    >>> s = StreamCharacteristics(d=0.01, l=10.0, g=1.0)
    >>> s.join(StreamCharacteristics(d=0.01, l=10.0, g=1.0), selectivity=1 / 50).rate
    4000.0

    References
    ----------
    .. [1] M. Cammert, J. Krämer, B. Seeger, S. Vaupel, "A Cost Model for Adaptive Resource
       Management in Data Stream Systems", Univ. Marburg, §3.3 Cost Formulas 1–4, 7; §5 E3.
    """

    def __init__(self, d: float, l: float, g: float = 1.0) -> None:  # noqa: E741 - the paper's l
        if not (d > 0 and l >= 0 and g > 0):
            raise ValueError(f"(d, l, g): expected d > 0, l >= 0, g > 0, got {(d, l, g)!r}")
        self.d, self.l, self.g = float(d), float(l), float(g)

    @property
    def rate(self) -> float:
        """Elements per time unit, ``1/d``."""
        return 0.0 if math.isinf(self.d) else 1.0 / self.d

    @property
    def live(self) -> float:
        """Valid elements at any instant, ``l/d`` (seed 000's W)."""
        return 0.0 if math.isinf(self.d) else self.l / self.d

    def select(self, selectivity: float) -> StreamCharacteristics:
        """(CKSV-2): ``d' = d/sel``; a projection (CKSV-1) is ``select(1)``."""
        if not 0 < selectivity <= 1:
            return StreamCharacteristics(math.inf, 0.0, self.g)
        return StreamCharacteristics(self.d / selectivity, self.l, self.g)

    def union(self, *others: StreamCharacteristics) -> StreamCharacteristics:
        """(CKSV-3): rates add; ``l'`` is the rate-weighted mean of the lengths."""
        parts = [self, *others]
        rate = sum(p.rate for p in parts)
        if rate == 0:
            return StreamCharacteristics(math.inf, 0.0, self.g)
        return StreamCharacteristics(1.0 / rate, sum(p.rate * p.l for p in parts) / rate, self.g)

    def join(self, other: StreamCharacteristics, selectivity: float = 1.0) -> StreamCharacteristics:
        """(CKSV-4), a product then a selection: ``d' = d1·d2/(σ·(l1 + l2))``, ``l' = l1·l2/(l1 + l2)``."""
        span = self.l + other.l
        if span == 0 or selectivity == 0 or math.isinf(self.d) or math.isinf(other.d):
            return StreamCharacteristics(math.inf, 0.0, self.g)
        return StreamCharacteristics(self.d * other.d / (selectivity * span), self.l * other.l / span, self.g)

    def window(self, w: float) -> StreamCharacteristics:
        """(CKSV-7), time window of size w ≫ g: ``d' = g·d/l``, ``l' = ⌊(w+1)/g⌋·g``.

        Seed 004 writes a source element's window as ``[t, t + 1 + w)`` in ticks; the digest (B.10-3)
        notes the ``+1``. For a source (l = g = 1) ``d' = d``.
        """
        return StreamCharacteristics(self.g * self.d / self.l, math.floor((w + 1) / self.g) * self.g, self.g)


def _n_sub(window_s: float, sub_window_s: float) -> float:
    return max(1.0, round(window_s / sub_window_s))


class CostModel(Base):
    """Estimated CPU (seconds per second) and state (rows, bytes) of every configured query.

    Parameters
    ----------
    constants
        The calibrated :class:`CostConstants` (:func:`load_constants`).
    watermark_s
        The pipeline's watermark delay: windows and join tuples stay in state that much longer.

    Examples
    --------
    >>> m = CostModel(DEFAULT_CONSTANTS, watermark_s=5.0)
    >>> e = m.traffic(Workload(rate_pps=10_000, protocols=4), window_s=1.0)
    >>> round(e.cpu, 6), e.state_rows
    (0.000501, 24.0)

    References
    ----------
    .. [1] M. Cammert, J. Krämer, B. Seeger, S. Vaupel, "A Cost Model for Adaptive Resource
       Management in Data Stream Systems", Univ. Marburg, §3.4–3.6, (9)–(19).
    .. [2] A. Ayad, J. F. Naughton, SIGMOD 2004, §3 (utilization, (AN-12), (AN-13)).
    .. [3] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, 2006, §6.2.2.
    """

    def __init__(
        self,
        constants: CostConstants = DEFAULT_CONSTANTS,
        watermark_s: float = 5.0,
        trigger_s: float = 1.0,
        tasks: int = 1,
    ) -> None:
        if not watermark_s >= 0:
            raise ValueError(f"watermark_s: expected a number >= 0, got {watermark_s!r}")
        if not trigger_s > 0:
            raise ValueError(f"trigger_s: expected a number > 0, got {trigger_s!r}")
        self.constants = constants
        if not (isinstance(tasks, int) and tasks >= 1):
            raise ValueError(f"tasks: expected an integer >= 1, got {tasks!r}")
        self.watermark_s = float(watermark_s)
        self.trigger_s = float(trigger_s)
        #: stage 1's tasks per micro-batch (one per Kafka partition): each makes its own partials
        self.tasks = tasks

    @classmethod
    def for_config(cls, cfg: Config, constants: CostConstants = DEFAULT_CONSTANTS) -> CostModel:
        """The model of ``cfg``'s pipeline: its watermark, trigger and Kafka partitions."""
        return cls(
            constants,
            watermark_s=cfg.pipeline.watermark_s,
            trigger_s=cfg.pipeline.trigger_s,
            tasks=cfg.kafka.partitions,
        )

    def _in_pipeline(self, e: Estimate) -> Estimate:
        """``e`` with the pipeline's measured factors applied (``CostConstants.stage1_factor`` to
        its stage-1 part, its kind's factor to the rest); unchanged while both are 1."""
        c = self.constants
        s1 = c.stage1_factor
        rest = float(getattr(c, f"{e.kind}_factor", 1.0))
        if s1 == 1.0 and rest == 1.0:
            return e
        stage1 = e.stage1_cpu * s1
        return dataclasses.replace(e, cpu=stage1 + (e.cpu - e.stage1_cpu) * rest, stage1_cpu=stage1)

    def batch_period(self, kinds: Collection[str], w: Workload, work: float | None = None) -> float:
        """Seconds from one micro-batch to the next: the trigger interval while a batch fits in it,
        else the batch's own length. A batch of ``T`` seconds of input costs ``F + u·T``: ``F`` the
        per-batch terms of every part and :attr:`CostConstants.other_batch_s`, ``u`` the CPU per
        second of every per-record term (``work``: the formulas', decode included; the alert
        features' and ``other_row_s``), so ``T = max(trigger_s, F / (1 − u))`` — infinite when
        ``u ≥ 1`` (the pipeline cannot keep up at any batch size). ``work`` None: the trigger
        interval (the pipeline taken to keep up).

        Not in the seeds, whose operators run per tuple: a micro-batch engine started late (Spark
        starts the next batch at once when one overran its trigger) spreads its fixed costs over
        more input, which a per-second estimate at one batch per trigger over-counts at high
        rates (docs/overload.md).

        >>> c = CostConstants(stage1_batch_s=0.3, other_batch_s=0.1)
        >>> m, w = CostModel(c, trigger_s=1.0), Workload(rate_pps=1)
        >>> m.batch_period(["topk"], w, work=0.5), m.batch_period(["topk"], w, work=0.8)
        (1.0, 2.0)
        """
        if work is None:
            return self.trigger_s
        c = self.constants
        fixed = c.other_batch_s + sum(self._batch_terms(kinds).values())
        u = work + w.rate_pps * (c.other_row_s + (c.features_row_s if "features" in kinds else 0.0))
        if u >= 1.0:
            return math.inf
        return max(self.trigger_s, fixed / (1.0 - u))

    def _batch_terms(self, kinds: Collection[str]) -> dict[str, float]:
        c = self.constants
        out: dict[str, float] = {}
        if set(kinds) & {"traffic", "topk", "distinct", "features", "joins"}:
            out["stage1"] = c.stage1_batch_s
        for kind in ("traffic", "topk", "distinct", "features", "joins"):
            if kind in kinds:
                out[kind] = float(getattr(c, f"{kind}_batch_s"))
        return out

    def overheads(self, kinds: Collection[str], w: Workload, work: float | None = None) -> dict[str, float]:
        """CPU seconds per second each part of the shared query pays besides its queries'
        formulas: ``<part>_batch_s / T`` (one micro-batch per :meth:`batch_period` ``T``; the
        trigger interval when ``work`` is None), and the alert features' ``λ·features_row_s``.
        Parts as the ``sys`` rows time them: ``stage1`` (when any kind reads the packets) and each
        configured kind.

        >>> c = CostConstants(stage1_batch_s=0.2, topk_batch_s=0.05, features_row_s=1e-6)
        >>> CostModel(c, trigger_s=2.0).overheads(["topk", "features"], Workload(rate_pps=1000))
        {'stage1': 0.1, 'topk': 0.025, 'features': 0.001}
        """
        period = self.batch_period(kinds, w, work)
        out = {
            part: (cost / period if math.isfinite(period) else 0.0)
            for part, cost in self._batch_terms(kinds).items()
        }
        if "features" in kinds:
            out["features"] += w.rate_pps * self.constants.features_row_s
        return out

    # -- one query per kind ---------------------------------------------------------------------
    def decode(self, w: Workload) -> Estimate:
        """The shared read and decode every kind of the shared query stands on: ``λ·decode_row_s``.

        Not a query of the seeds: their operators start from decoded tuples. Here every packet is
        a CSV line of a Kafka message, read and parsed once per micro-batch whatever the queries
        (docs/overload.md, "The cost model"); the kind ``stage1`` with the queries' own stage-1
        parts is what the pipeline measures as ``stage1_s``. No state.
        """
        return self._in_pipeline(
            Estimate(
                "stage1",
                "decode",
                cpu=w.rate_pps * self.constants.decode_row_s,
                state_rows=0.0,
                memory_bytes=0.0,
                ops={"decoded_rows": w.rate_pps},
                stage1_cpu=w.rate_pps * self.constants.decode_row_s,
            )
        )

    def traffic(self, w: Workload, window_s: float, name: str = "traffic") -> Estimate:
        """Packets and bytes per (tumbling window, protocol): one counting pass per record.

        CPU ``λ·count_row_s + (P/N)·count_group_s``; state: the windows still open within the
        watermark, ``P·(⌈watermark/N⌉ + 1)`` rows.
        """
        c = self.constants
        groups = min(w.protocols, distinct_keys(w.rate_pps * window_s, w.protocols)) / window_s
        open_windows = math.ceil(self.watermark_s / window_s) + 1
        rows = float(w.protocols * open_windows) if w.rate_pps > 0 else 0.0
        return self._in_pipeline(
            Estimate(
                "traffic",
                name,
                cpu=w.rate_pps * c.count_row_s + groups * c.count_group_s,
                state_rows=rows,
                memory_bytes=rows * c.row_bytes,
                ops={"count_rows": w.rate_pps, "partial_rows": groups},
                knobs={"window_s": window_s},
                stage1_cpu=w.rate_pps * c.count_row_s,
            )
        )

    def topk(self, w: Workload, q: TopKQuery, keep: float = 1.0, m: int = 1) -> Estimate:
        """Golab Alg. 6 over ``N/g`` sub-windows, stage 1 per record, the merge per sub-window key.

        With ``K_g = D(keep·λ·g, K)`` distinct keys in a sub-window: CPU
        ``keep·λ·count_row_s + (K_g/g)·(count_group_s + topk_key_s)``; state (§6.2.2) at most
        ``N/g·min(k, K_g)`` list pairs plus as many global counters, and the partial counts of the
        sub-windows open within the watermark, ``(⌈watermark/g⌉ + 1)·K_g`` rows.

        ``m``: the granularity operator Γ in force (seed 004; ``pipeline.topk``): stage 1 still
        counts per ``b = sub_window_s`` and Γ sums ``m`` of them into a sub-window of ``g = m·b``
        before Alg. 6. Then the lists are ``N/g·min(k, K_g)``, the partial rows stay ``K_b/b`` per
        second (``count_group_s``), the merge takes ``K_g/g`` (``topk_key_s``), and the open
        partial counts are the fine ones of the coarse sub-windows open within the watermark,
        ``(⌈watermark/g⌉ + 1)·m·K_b`` rows. ``m = 1`` is the formula above.
        """
        c, b = self.constants, q.sub_window_s
        g = m * b
        rate = keep * w.rate_pps
        keys = w.cardinality(q.key)
        per_sub = w.distinct(q.key, rate * g)
        per_fine = per_sub if m == 1 else w.distinct(q.key, rate * b)
        n_sub = _n_sub(q.window_s, g)
        listed = n_sub * min(q.k, per_sub)
        entries = listed + min(listed, keys)
        open_rows = (math.ceil(self.watermark_s / g) + 1) * m * per_fine
        return self._in_pipeline(
            Estimate(
                "topk",
                q.name,
                cpu=rate * c.count_row_s + per_fine / b * c.count_group_s + per_sub / g * c.topk_key_s,
                state_rows=entries + open_rows,
                memory_bytes=entries * c.topk_entry_bytes + open_rows * c.row_bytes,
                ops={"count_rows": rate, "partial_rows": per_fine / b, "topk_keys": per_sub / g},
                knobs={"window_s": q.window_s, "sub_window_s": g, "k": q.k, "keep": keep},
                stage1_cpu=w.rate_pps * c.count_row_s,  # the drop box decides after the key text
            )
        )

    def distinct(self, w: Workload, q: DistinctQuery, keep: float = 1.0, m: int = 1) -> Estimate:
        """Per-sub-window HLL sketches per group (stage 1), kept in a store and slid by the carry.

        Stage 1 (in the tasks) sketches each (batch, sub-window, task) *piece* of the stream per
        group: with ``T`` the trigger interval and ``t`` tasks (Kafka partitions) a second of
        stream is ``s = (1/b + 1/T)·t`` pieces of ``n = keep·λ/s`` records, and ``s·G(n)``
        sketches are made and stored (``G``: the groups among ``n`` records,
        :meth:`Workload.distinct`). CPU ``keep·λ·count_row_s + (P_b/b)·sketch_item_s +
        s·G(n)·count_group_s`` in stage 1 (``P_b``: the (group, item) pairs of a sub-window of
        ``b``); on the driver the carry (``analytics.sketch_carry``) merges each closed
        sub-window's coupons once, ``(P_b/b)·sketch_union_s``, and answers each group of a slide,
        ``(G_g/g)·sketch_union_s``. State: the store's sketches, held for ``N + watermark + T``
        (the window and the sub-windows still open, and the batch reaching furthest back),
        ``(N + wm + T)·s·G(n)`` rows of ``header + min(2^lg_k·register, items·coupon)`` bytes.

        A departure from Golab §2.3.4's synopses, which the first version of this formula
        followed (each slide uniting every group's ``N/g`` sketches, held once each): the
        pipeline counts with carried coupons, and stores a sketch per piece, not per sub-window
        (docs/overload.md; counted against the store in tests/analytics/test_cost_model.py).

        ``m``: the granularity operator Γ in force (seed 004; ``pipeline.distinct``): stage 1 and
        the store stay at ``b`` (the store reaches ``(m − 1)·b`` further back) and the answers
        are made per coarse slide of ``g = m·b``.
        """
        c, b = self.constants, q.sub_window_s
        g = m * b
        rate = keep * w.rate_pps
        grouped = bool(q.group_by.strip())
        n_groups = w.cardinality(q.group_by, default=w.group_cardinality) if grouped else 1.0
        pair = f"{q.group_by},{q.count}" if grouped else q.count
        cardinality = w.cardinality(q.count) * n_groups

        def pairs_in(n: float) -> float:
            if _key_name(pair) in dict(w.key_profiles):
                return w.distinct(pair, n)
            return distinct_keys(n, cardinality)

        def groups_in(n: float) -> float:
            if not grouped:
                return min(1.0, n)
            return w.distinct(q.group_by, n, default=w.group_cardinality)

        fine_pairs = pairs_in(rate * b)
        pieces = (1.0 / b + 1.0 / self.trigger_s) * self.tasks
        per_piece = rate / pieces
        piece_groups = groups_in(per_piece)
        stored = pieces * piece_groups  # sketch rows made and stored a second
        answers = groups_in(rate * g) / g
        held_s = q.window_s + self.watermark_s + self.trigger_s + (m - 1) * b
        rows = held_s * stored if rate > 0 else 0.0
        items = pairs_in(per_piece) / piece_groups if per_piece > 0 and piece_groups else 0.0
        sketch_bytes = c.hll_header_bytes + min(2**q.lg_k * c.hll_register_bytes, items * c.hll_coupon_bytes)
        stage1 = rate * c.count_row_s + fine_pairs / b * c.sketch_item_s + stored * c.count_group_s
        return self._in_pipeline(
            Estimate(
                "distinct",
                q.name,
                cpu=stage1 + (fine_pairs / b + answers) * c.sketch_union_s,
                state_rows=rows,
                memory_bytes=rows * sketch_bytes,
                ops={
                    "count_rows": rate,
                    "sketch_items": fine_pairs / b,
                    "sketches_stored": stored,
                    "carried_coupons": fine_pairs / b,
                    "answers": answers,
                },
                knobs={"window_s": q.window_s, "sub_window_s": g, "lg_k": q.lg_k, "keep": keep},
                # the items' coupons and each piece's sketch are made in the tasks (stage 1)
                stage1_cpu=stage1,
            )
        )

    def join(self, w: Workload, q: JoinQuery, x_left: float = 1.0, x_right: float = 1.0) -> Estimate:
        """Seed 003 eq. (2) via :class:`JoinCostModel`; state by (CKSV-9) with ``l = T + watermark``.

        ``handshake``: SYN ⋈ SYN-ACK with ``T_L = window_s``, ``T_R = 0``; each SYN-ACK answers one
        SYN, so ``f = 1/(λ_L·T_L)`` and the output rate is ``λ_R``. ``link``: both sides
        ``link_fraction·λ`` within ``window_s`` both ways, selectivity ``link_selectivity``.
        Shedding by PNI keeps insert fractions ``x_left``, ``x_right`` (seed 003 eqs. 14–15).

        Beside eq. (2), the kind's driver work the seed does not count (``join_stage_s`` per
        tuple staged, ``join_row_s`` per row written, both 0 until calibrated): a SYN flood
        stages and reports every unanswered SYN, which C_u and C_p alone price at a fraction
        of what it costs (docs/overload.md).
        """
        c = self.constants
        if q.query == "handshake":
            lam_l, lam_r = w.syn_fraction * w.rate_pps, w.synack_fraction * w.rate_pps
            t_l, t_r = q.window_s, 0.0
            f = min(1.0, 1.0 / (lam_l * t_l)) if lam_l * t_l > 0 else 0.0
        else:
            lam_l = lam_r = w.link_fraction * w.rate_pps
            t_l = t_r = q.window_s
            f = w.link_selectivity
        model = JoinCostModel(lam_l, lam_r, t_l, t_r, f, cu_s=c.join_update_s, cp_s=c.join_probe_s)
        strategy = "none" if (x_left, x_right) == (1.0, 1.0) else "pni"
        # (CKSV-9) ⌈l/d⌉ per side with d = 1/(x·λ), l = T + watermark, at the end of a batch: the
        # pipeline purges once per micro-batch, not per arrival, so (9)'s slack term d_j/(2·d_i)
        # (mean growth between input-triggered purges) is left out (docs/overload.md).
        rows = float(
            sum(
                math.ceil(x * lam * (t + self.watermark_s))
                for lam, x, t in ((lam_l, x_left, t_l), (lam_r, x_right, t_r))
            )
        )
        # around eq. (2), on the driver: every tuple of a side is staged (shed or not), and every
        # result is a row written; a handshake query also writes each kept SYN left unanswered,
        # so its rows are its kept SYNs (a match or an unmatched row each)
        results = model.output_rate(strategy, x_left, x_right)
        written = x_left * lam_l if q.query == "handshake" else results
        return self._in_pipeline(
            Estimate(
                "joins",
                q.name,
                cpu=model.cost(strategy, x_left, x_right)
                + (lam_l + lam_r) * c.join_stage_s
                + written * c.join_row_s,
                state_rows=rows,
                memory_bytes=rows * c.join_tuple_bytes,
                ops={
                    "inserts": x_left * lam_l + x_right * lam_r,
                    "results": results,
                    "staged": lam_l + lam_r,
                    "rows_written": written,
                },
                knobs={"window_s": q.window_s, "x_left": x_left, "x_right": x_right},
            )
        )

    def features(self, w: Workload, window_s: float, name: str = "features") -> Estimate:
        """The alert features (``pipeline.features``): per tumbling window of ``window_s``, packets
        per (destination, source) and the control records SYN fates are read from.

        Stage 1 counts each task's records per (window, destination, source): ``s = (1/W +
        1/T)·t`` pieces a second (windows of ``W``, batches of ``T``, ``t`` tasks) of ``n = λ/s``
        records, ``s·P(n)`` pair rows (``P``: the (destination, source) pairs among ``n``
        records). CPU ``λ·count_row_s + s·P(n)·count_group_s`` in stage 1; on the driver the pair
        rows summed and buffered, ``s·P(n)·count_group_s``, and the control records staged,
        ``λ·control_fraction·join_stage_s`` (the same Arrow staging as a join's tuples). netmon's
        own kind, no seed's; no state counted (the ``sys`` rows do not measure its buffer).
        """
        c = self.constants
        pieces = (1.0 / window_s + 1.0 / self.trigger_s) * self.tasks
        pairs = pieces * w.distinct("dst_ip,src_ip", w.rate_pps / pieces)
        control = w.rate_pps * w.control_fraction
        stage1 = w.rate_pps * c.count_row_s + pairs * c.count_group_s
        return self._in_pipeline(
            Estimate(
                "features",
                name,
                cpu=stage1 + pairs * c.count_group_s + control * c.join_stage_s,
                state_rows=0.0,
                memory_bytes=0.0,
                ops={"count_rows": w.rate_pps, "pair_rows": pairs, "control_rows": control},
                knobs={"window_s": window_s},
                stage1_cpu=stage1,
            )
        )

    # -- the configuration ----------------------------------------------------------------------
    def estimates(self, cfg: Config, w: Workload, *, decode: bool = False) -> list[Estimate]:
        """One estimate per query the configuration runs (``[pipeline] kinds``), traffic and the
        alert features first;
        ``decode``: the shared read and decode (:meth:`decode`) first of all."""
        kinds = set(cfg.pipeline.kinds)
        out: list[Estimate] = []
        if decode and kinds & {"traffic", "topk", "distinct", "features", "joins"}:
            out.append(self.decode(w))
        if "traffic" in kinds:
            out.append(self.traffic(w, cfg.pipeline.traffic_window_s))
        if "features" in kinds:  # like traffic, always on (the alert rules read it): first
            out.append(self.features(w, cfg.alerts.features_window_s))
        if "topk" in kinds:
            out += [self.topk(w, q) for q in cfg.queries.topk]
        if "distinct" in kinds:
            out += [self.distinct(w, q) for q in cfg.queries.distinct]
        if "joins" in kinds:
            out += [self.join(w, q) for q in cfg.queries.join]
        return out

    @staticmethod
    def totals(estimates: Iterable[Estimate]) -> tuple[float, float]:
        """(AN-12) and (AN-13) over queries: total CPU seconds per second and state bytes."""
        items = list(estimates)
        return sum(e.cpu for e in items), sum(e.memory_bytes for e in items)


@dataclass(frozen=True)
class SamplingPlan:
    """Keep fractions per sampled query, the estimates at those fractions, and whether they fit."""

    keep: dict[str, float]
    estimates: list[Estimate]
    cpu: float
    feasible: bool


def place_sampling(
    model: CostModel,
    cfg: Config,
    w: Workload,
    budget: float,
    keep_min: float | Mapping[str, float] = 0.1,
    weights: Mapping[str, float] | None = None,
    iterations: int = 40,
    eligible: Collection[str] | None = None,
) -> SamplingPlan:
    """Drop boxes before the top-k and distinct queries, placed by seed 000's fractional knapsack.

    Each sampled query q keeps a fraction x_q ≥ ``keep_min`` of the records (§5.2, lower bound
    ℓ; a mapping gives each query its own, absent 0.1) and is worth ``weight_q·x_q`` (issue 2:
    importance); traffic and the joins are not sampled (traffic is exact; the joins shed by PNI).
    The knapsack needs costs linear in x: it is given ``x·cpu_q(1)``, which under-estimates a
    sampled query's cost (its distinct keys per sub-window are concave in x), so the budget is
    tightened by the overshoot and the knapsack solved again until the true estimates fit — a
    departure from the paper, whose costs are linear (tuple windows).
    ``eligible``: the queries that may be sampled (default: every top-k and distinct query); the
    others keep everything.
    """
    full = model.estimates(cfg, w)

    def may(e: Estimate) -> bool:
        return e.kind in ("topk", "distinct") and (eligible is None or e.query in eligible)

    sampled = [e for e in full if may(e)]
    fixed = sum(e.cpu for e in full if not may(e))
    by_name: dict[str, TopKQuery | DistinctQuery] = {q.name: q for q in cfg.queries.topk}
    by_name.update((q.name, q) for q in cfg.queries.distinct)
    wts = [float((weights or {}).get(e.query, 1.0)) for e in sampled]

    def at(keep: Mapping[str, float]) -> list[Estimate]:
        out = []
        for e in full:
            q = by_name.get(e.query)
            if e.query not in keep:
                out.append(e)
            elif e.kind == "topk" and isinstance(q, TopKQuery):
                out.append(model.topk(w, q, keep=keep[e.query]))
            elif e.kind == "distinct" and isinstance(q, DistinctQuery):
                out.append(model.distinct(w, q, keep=keep[e.query]))
            else:
                out.append(e)
        return out

    # per query: its lower bound (a mapping gives each its own; absent: 0.1)
    lower = {
        e.query: float(keep_min.get(e.query, 0.1) if isinstance(keep_min, Mapping) else keep_min)
        for e in sampled
    }
    # the secant of each query's cost between its lower bound and 1: fixed part + slope·x
    low = {e.query: e.cpu for e in at(lower) if e.query in lower}
    slope = [(e.cpu - low[e.query]) / (1 - lower[e.query]) if lower[e.query] < 1 else 0.0 for e in sampled]
    base = fixed + sum(low[e.query] - s * lower[e.query] for e, s in zip(sampled, slope, strict=True))

    def solve(room: float) -> tuple[dict[str, float], list[Estimate], float, bool]:
        sol = FractionalKnapsack(max(room, 0.0)).solve(
            [1.0] * len(sampled), slope, lower=[lower[e.query] for e in sampled], weights=wts
        )
        keep = {e.query: x for e, x in zip(sampled, sol.x, strict=True)}
        ests = at(keep)
        return keep, ests, sum(e.cpu for e in ests), sol.feasible

    keep, ests, total, ok = solve(budget - base)
    if ok and total > budget * (1 + 1e-9):
        # the secant under-estimates a concave cost: bisect on the room given to the knapsack
        # (x grows with the room, and the true cost with x) for the largest room that fits
        lo, hi = 0.0, budget - base
        keep, ests, total, _ = solve(lo)
        for _ in range(iterations):
            mid = (lo + hi) / 2
            k_mid, e_mid, t_mid, _ = solve(mid)
            if t_mid <= budget:
                lo, keep, ests, total = mid, k_mid, e_mid, t_mid
            else:
                hi = mid
    return SamplingPlan(keep, ests, total, total <= budget * (1 + 1e-9))
