"""The join operator's state per query, and its rows in and out.

``pipeline.joins_batch`` stages every join query (``pipeline.joins.stage_rows``: filters, key
text) and hands each query's rows of a micro-batch to its :class:`JoinBucket`. One call handles
all the keys that arrived in the batch, vectorised: the bucket only marshals — rows to
:meth:`analytics.join.SymmetricHashJoin.process_batch` and the results back to rows.
``JoinBucket`` is the algorithm's state (the join's ``to_bytes`` and its shedder's ``to_bytes``,
random generator included), saved with the batch: a restart resumes the windows exactly. (The
name is from the streaming query it served before, which kept one per hash bucket of keys in
Spark's state store; the joins kind keeps one per query, bucket 0.)

Each call yields two kinds of rows (``row``): ``match`` (one join result) and ``unmatched`` (a
left tuple that expired without a partner — for the handshake query an unanswered SYN), and the
batch's :class:`analytics.join.BatchStats`; :data:`STATS_COLUMNS` names the statistics the
shedding controller and the ``sys`` rows read.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from analytics.join import BatchStats, SymmetricHashJoin
from analytics.shedding import LoadShedder

__all__ = [
    "INPUT_COLUMNS",
    "PAIR_COLUMNS",
    "PAYLOAD",
    "STATS_COLUMNS",
    "JoinBucket",
    "JoinSpec",
]

#: Record columns each side carries to the output (as ``left_<name>`` / ``right_<name>``).
PAYLOAD: dict[str, str] = {
    "src_ip": "STRING",
    "dst_ip": "STRING",
    "src_port": "INT",
    "dst_port": "INT",
    "iface": "STRING",
}
#: The staged rows the operator receives (grouped by ``query, bucket``).
INPUT_COLUMNS = ("query", "bucket", "is_left", "ts", "key", *PAYLOAD)

#: A result row: the query and its kind (``handshake`` or ``link``), the row kind, the key, both
#: sides' times and records, and the delay ``right_ts - left_ts`` (the handshake RTT).
#: ``unmatched`` rows fill the left side only.
PAIR_COLUMNS: dict[str, str] = {
    "query": "STRING",
    "kind": "STRING",
    "row": "STRING",
    "bucket": "INT",
    "key": "STRING",
    "left_ts": "TIMESTAMP",
    "right_ts": "TIMESTAMP",
    "delay_s": "DOUBLE",
    **{f"left_{k}": v for k, v in PAYLOAD.items()},
    **{f"right_{k}": v for k, v in PAYLOAD.items()},
}
#: A ``stats`` row: the bucket's BatchStats of the call, the fractions it used, its time range.
STATS_COLUMNS: dict[str, str] = {
    **{
        name: "BIGINT"
        for name in (
            "n_left",
            "n_right",
            "inserted_left",
            "inserted_right",
            "probed_left",
            "probed_right",
            "expired_left",
            "expired_right",
            "late",
            "results",
            "state_left",
            "state_right",
        )
    },
    **{
        name: "DOUBLE"
        for name in (
            "unshed_estimate",
            "update_s",
            "probe_s",
            "shed_s",
            "total_s",
            "busy_s",
            "x_left",
            "x_right",
        )
    },
    #: the batch's time range in the bucket
    "min_ts_ns": "BIGINT",
    "max_ts_ns": "BIGINT",
}

_NULL_INT = -1  # payload integers travel through the join state as int64 with this for null


class JoinSpec(NamedTuple):
    """One join query as the operator runs it (plain values, shipped to the Python workers)."""

    name: str
    #: the built-in query: "handshake" or "link"
    kind: str
    window_left_s: float
    window_right_s: float
    #: how late a tuple may be and still join exactly (the pipeline's watermark delay)
    lateness_s: float
    #: none, cf, inp or pni
    strategy: str
    #: fractions used until the controller writes its own
    x_left: float
    x_right: float
    seed: int
    #: report left tuples that expire without a partner (``unmatched`` rows)
    track_unmatched: bool


def bucket_seed(seed: int, query: str, bucket: int) -> int:
    """The shedder seed of one bucket: a keyed BLAKE2b of (seed, query, bucket), stable everywhere.

    >>> bucket_seed(0, "handshake", 3) == bucket_seed(0, "handshake", 3) != bucket_seed(0, "handshake", 4)
    True
    """
    digest = hashlib.blake2b(f"{seed}/{query}/{bucket}".encode(), digest_size=8, key=b"netmon-join").digest()
    return int.from_bytes(digest, "little")


class JoinBucket:
    """The join state of one (query, bucket): a :class:`SymmetricHashJoin` and its shedder.

    :meth:`process` takes the bucket's staged rows of one micro-batch (``INPUT_COLUMNS``) and the
    fractions to apply, and returns the result rows (``PAIR_COLUMNS``) and the batch's statistics.

    >>> spec = JoinSpec("q", "link", 2.0, 2.0, 0.0, "none", 1.0, 1.0, 0, False)
    >>> rows = pd.DataFrame({"is_left": [True, False], "key": ["a", "a"],
    ...     "ts": pd.to_datetime([0, 1_000_000_000], utc=True),
    ...     "src_ip": ["10.0.0.1", "10.0.0.2"], "dst_ip": ["10.0.0.9"] * 2,
    ...     "src_port": [1, None], "dst_port": [80, 80], "iface": ["eth0", "eth1"]})
    >>> out, stats = JoinBucket(spec, bucket=0).process(rows)
    >>> out[["key", "delay_s", "left_iface", "right_src_port"]].values.tolist(), stats.results
    ([['a', 1.0, 'eth0', <NA>]], 1)
    """

    _VERSION = 1

    def __init__(
        self,
        spec: JoinSpec,
        bucket: int,
        *,
        join: SymmetricHashJoin | None = None,
        shedder: LoadShedder | None = None,
    ) -> None:
        self.spec = spec
        self.bucket = int(bucket)
        if shedder is None and spec.strategy != "none":
            shedder = LoadShedder(
                spec.strategy, spec.x_left, spec.x_right, seed=bucket_seed(spec.seed, spec.name, bucket)
            )
        self._shedder = shedder
        self._join = join or SymmetricHashJoin(
            spec.window_left_s,
            spec.window_right_s,
            shedder=shedder,
            lateness_s=spec.lateness_s,
            track_unmatched=spec.track_unmatched,
        )
        self._join.shedder = shedder

    @property
    def join(self) -> SymmetricHashJoin:
        return self._join

    def process(
        self, rows: pd.DataFrame, x_left: float | None = None, x_right: float | None = None
    ) -> tuple[pd.DataFrame, BatchStats]:
        """Join one micro-batch of the bucket; ``x_left``/``x_right`` default to the spec's."""
        frames, stats = self.process_frames(rows, x_left, x_right)
        return pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True), stats

    def process_frames(
        self, rows: pd.DataFrame, x_left: float | None = None, x_right: float | None = None
    ) -> tuple[list[pd.DataFrame], BatchStats]:
        """:meth:`process` with the ``match`` and ``unmatched`` rows as separate frames: a caller
        that turns them into Arrow need not concatenate them in pandas first (which tests every
        value of the other kind's all-null columns: 75 % of a flood's batch, measured)."""
        if self._shedder is not None:
            xl = self.spec.x_left if x_left is None else x_left
            xr = self.spec.x_right if x_right is None else x_right
            self._shedder.set_fractions(min(1.0, max(0.0, xl)), min(1.0, max(0.0, xr)))
        rows = _canonical_order(rows)
        left = rows[rows["is_left"].to_numpy(dtype=bool)]
        right = rows[~rows["is_left"].to_numpy(dtype=bool)]
        out = self._join.process_batch(
            left["ts"],
            left["key"].to_numpy(dtype=object),
            right["ts"],
            right["key"].to_numpy(dtype=object),
            left_payload=_payload(left),
            right_payload=_payload(right),
        )
        stats = self._join.last_stats
        assert stats is not None
        frames = [_pairs(self.spec, self.bucket, out)]
        if self.spec.track_unmatched:
            gone = self._join.expired_unmatched()
            if len(gone):
                gone = gone[gone["side"] == "left"]
            if len(gone):
                frames.append(_unmatched(self.spec, self.bucket, gone))
        return frames, stats

    def advance(self, clock_ns: int) -> pd.DataFrame | None:
        """Move the join's clock to ``clock_ns`` without tuples (``SymmetricHashJoin.advance``);
        the ``unmatched`` rows of the left tuples that expired (None: the clock did not move)."""
        before = self._join.clock
        self._join.advance(clock_ns)
        if self._join.clock == before:
            return None
        if not self.spec.track_unmatched:
            return _output({}, 0)
        gone = self._join.expired_unmatched()
        gone = gone[gone["side"] == "left"] if len(gone) else gone
        return _unmatched(self.spec, self.bucket, gone) if len(gone) else _output({}, 0)

    def to_bytes(self) -> bytes:
        """``B`` version, ``Q`` length + the join's bytes, then the shedder's bytes (may be empty)."""
        join = self._join.to_bytes()
        shedder = self._shedder.to_bytes() if self._shedder is not None else b""
        return struct.pack("<BQ", self._VERSION, len(join)) + join + shedder

    @classmethod
    def from_bytes(cls, data: bytes, spec: JoinSpec, bucket: int) -> JoinBucket:
        """Rebuild a bucket; ``spec`` must have the windows the state was made with."""
        version, size = struct.unpack_from("<BQ", data, 0)
        if version != cls._VERSION:
            raise ValueError(f"data: unsupported JoinBucket state version {version}")
        join = SymmetricHashJoin.from_bytes(data[9 : 9 + size])
        if (join.window_left_s, join.window_right_s) != (spec.window_left_s, spec.window_right_s):
            raise ValueError(
                f"join query {spec.name!r}: the checkpoint's windows are "
                f"({join.window_left_s}, {join.window_right_s}) s but the query asks for "
                f"({spec.window_left_s}, {spec.window_right_s}) s: delete the joins checkpoint (and "
                "results) to change a query's window"
            )
        rest = data[9 + size :]
        shedder = LoadShedder.from_bytes(rest) if rest and spec.strategy != "none" else None
        if shedder is not None and shedder.strategy != spec.strategy:
            shedder = None  # the strategy changed: start a fresh generator for the new one
        return cls(spec, bucket, join=join, shedder=shedder)


# -- marshalling ---------------------------------------------------------------------------------
def _canonical_order(rows: pd.DataFrame) -> pd.DataFrame:
    """A deterministic processing order (shuffles deliver rows in any order): time, side, record.

    Ties of time and side are broken by a hash of the row's key and payload, so equal rows stay
    together and the order does not depend on how the rows arrived.
    """
    ts = pd.DatetimeIndex(rows["ts"]).as_unit("ns").asi8
    right = ~rows["is_left"].to_numpy(dtype=bool)
    content = pd.util.hash_pandas_object(rows[["key", *PAYLOAD]], index=False).to_numpy()
    return rows.iloc[np.lexsort((content, right, ts))].reset_index(drop=True)


def _payload(side: pd.DataFrame) -> dict[str, np.ndarray]:
    """Payload columns for the join state: integers as int64 (null = -1), text as objects (null = "")."""
    out: dict[str, np.ndarray] = {}
    for name, kind in PAYLOAD.items():
        col = side[name]
        if kind == "INT":
            out[name] = pd.to_numeric(col).fillna(_NULL_INT).to_numpy(dtype=np.int64)
        else:
            out[name] = col.where(col.notna(), "").to_numpy(dtype=object)
    return out


def _from_payload(values: Any, kind: str) -> Any:
    """Inverse of :func:`_payload`: a nullable Int32 array or an object array with None."""
    arr = np.asarray(values)
    if kind == "INT":
        return pd.arrays.IntegerArray(arr.astype(np.int32), arr == _NULL_INT)
    arr = arr.astype(object)  # a copy: nulling it in place leaves ``values`` alone
    arr[arr == ""] = None
    return arr


def _null(kind: str, n: int) -> Any:
    """A typed all-null column (so frames of different row kinds concatenate without casts)."""
    if kind in ("INT", "BIGINT"):
        return pd.arrays.IntegerArray(np.zeros(n, np.int32 if kind == "INT" else np.int64), np.ones(n, bool))
    if kind == "DOUBLE":
        return np.full(n, np.nan)
    if kind == "TIMESTAMP":
        return pd.DatetimeIndex(np.full(n, np.datetime64("NaT"), "datetime64[ns]")).tz_localize("UTC").array
    return np.full(n, None, dtype=object)


def _output(columns: dict[str, Any], n: int) -> pd.DataFrame:
    """The pair columns in order, absent ones typed nulls (frames of both row kinds concatenate
    without casts; an all-None object column would make pandas test every value)."""
    frame = {
        name: columns[name] if name in columns else _null(kind, n) for name, kind in PAIR_COLUMNS.items()
    }
    return pd.DataFrame(frame, index=pd.RangeIndex(n))


def _constant(value: Any, n: int, dtype: Any = object) -> np.ndarray:
    return np.full(n, value, dtype=dtype)


def _pairs(spec: JoinSpec, bucket: int, out: pd.DataFrame) -> pd.DataFrame:
    n = len(out)
    left_ts, right_ts = out["left_ts"].array, out["right_ts"].array
    columns: dict[str, Any] = {
        "query": _constant(spec.name, n),
        "kind": _constant(spec.kind, n),
        "row": _constant("match", n),
        "bucket": _constant(bucket, n, np.int32),
        "key": out["key"].to_numpy(dtype=object),
        "left_ts": left_ts,
        "right_ts": right_ts,
        "delay_s": (right_ts.asi8 - left_ts.asi8) / 1e9 if n else np.zeros(0),
    }
    for side in ("left", "right"):
        for name, kind in PAYLOAD.items():
            columns[f"{side}_{name}"] = _from_payload(out[f"{side}_{name}"], kind)
    return _output(columns, n)


def _unmatched(spec: JoinSpec, bucket: int, gone: pd.DataFrame) -> pd.DataFrame:
    n = len(gone)
    columns: dict[str, Any] = {
        "query": _constant(spec.name, n),
        "kind": _constant(spec.kind, n),
        "row": _constant("unmatched", n),
        "bucket": _constant(bucket, n, np.int32),
        "key": gone["key"].to_numpy(dtype=object),
        "left_ts": pd.DatetimeIndex(gone["ts"]).array,
    }
    for name, kind in PAYLOAD.items():
        columns[f"left_{name}"] = _from_payload(gone[name], kind)
    return _output(columns, n)
