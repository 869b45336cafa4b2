"""The detection features (kind ``features``) on the shared micro-batch: the rows the alert rules read.

:class:`SlidingFeatures` writes, per closed window, exactly the rows
:func:`analytics.alert_features.feature_rows` writes for the same packets (docs/alerts.md,
"Detection"): one row per tumbling window (``[alerts] features_window_s``, aligned like Spark's
windows) and source (``query = "src"``) or destination (``query = "dst"``), the leaders of
``[alerts] features_top`` per ranked column, SYN fates read within ``[alerts] features_timeout_s``.

Stage 1, in the tasks (``pipeline.partials``), sends only what the features need:

- ``features/pairs``: packets per (window, destination, source) — a counting query keyed by
  ``dst_ip,src_ip`` (records without both addresses are skipped, as offline), deduplicated in the
  task and summed over the tasks on the driver; a window's sources, its packets per source and per
  destination and its total all follow from it;
- ``features/control``: the control records themselves (TCP SYNs, SYN-ACKs and RSTs, ICMP
  unreachables, :func:`analytics.alert_features.control_mask`): per task one partial row whose
  binary ``sketch`` column holds them as an Arrow IPC stream (``RowsSpec``), and whose ``sw`` is
  the newest event time of the task's records with both addresses.

The driver keeps a buffer beside the checkpoint, one version per batch (``pipeline.batch_state``
for the watermark and the newest record, Arrow IPC files ``pairs-<id>.arrow`` and
``control-<id>.arrow`` for the rows, kept in memory too): the pair counts and control records of
the windows not closed yet, among them the SYNs whose fate is not known yet. The batch moves the
watermark to its event time (the slowest Kafka partition's newest,
``pipeline.partials.merge_partials``) minus ``[pipeline] watermark_s``, in milliseconds and never
back, as the other batch kinds do. A window
is **closed** when the watermark reaches its end plus the timeout: every answer to its SYNs is then
in (a packet arriving later is older than the watermark, so late). The closed windows' rows are
computed from the buffer with :func:`analytics.alert_features.features_of` and committed with the
batch (``pipeline.batch_sink``); their buffer rows go. A row of an already closed window is late:
its packets are counted (``late_rows``) and left out. A batch that Spark runs again starts from the
version before it and rewrites the same rows.

One departure at the end of a stream: a SYN whose timeout runs past the newest record seen when
its window closes has no known fate and is left out, as :func:`feature_rows` leaves it out at the
end of a capture. Only a stream closed by a watermark control message (``netmon replay
--close-at-end``) closes such a window; records that come after that do not reopen it.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from analytics.alert_features import (
    FEATURE_COLUMNS,
    control_records,
    features_of,
)
from netmon.config import Config
from netmon.records import ARROW_SCHEMA
from pipeline.batch_sink import write_table
from pipeline.batch_state import BatchState, read_arrow, write_arrow
from pipeline.partials import INTAKE, CountSpec, RowsSpec, rows_of

__all__ = [
    "CONTROL_SPEC",
    "DST_COLUMNS",
    "OUTPUT_SCHEMA",
    "PAIRS_SPEC",
    "SRC_COLUMNS",
    "SlidingFeatures",
    "build_features_batch",
]

log = logging.getLogger(__name__)

#: The stage-1 query names of the features kind (``pipeline.partials``).
PAIRS_SPEC = "features/pairs"
CONTROL_SPEC = "features/control"

_TS = pa.timestamp("us", tz="UTC")
#: The columns of a ``src`` row after ``query, window_start, window_end, subject``.
SRC_COLUMNS = (
    "packets",
    "attempts",
    "failed",
    "total",
    "share",
    "fail_ratio",
    "vertical_host",
    "vertical",
    "horizontal_port",
    "horizontal",
)
#: The columns of a ``dst`` row after ``query, window_start, window_end, subject``.
DST_COLUMNS = ("packets", "sources", "syn", "half_open", "half_open_sources", "half_open_ratio")

#: The rows of ``results/features/``: both families in one table, the other family's columns null.
OUTPUT_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("window_start", _TS),
        ("window_end", _TS),
        ("subject", pa.string()),
        ("packets", pa.int64()),
        ("total", pa.int64()),
        ("share", pa.float64()),
        ("attempts", pa.int64()),
        ("failed", pa.int64()),
        ("fail_ratio", pa.float64()),
        ("vertical", pa.int64()),
        ("vertical_host", pa.string()),
        ("horizontal", pa.int64()),
        ("horizontal_port", pa.int64()),
        ("sources", pa.int64()),
        ("syn", pa.int64()),
        ("half_open", pa.int64()),
        ("half_open_sources", pa.int64()),
        ("half_open_ratio", pa.float64()),
        # 1: every record of the window read; below: the intake drop box's smallest fraction over
        # the window (its counts scaled, its failures and half-open SYNs inflated: answers are
        # dropped too; the scan and SYN-flood rules skip such rows, ``exact_only``)
        ("keep", pa.float64()),
    ]
)

#: The buffered pair counts: window index, ``dst,src`` key text, packets.
_PAIRS = pa.schema([("w", pa.int64()), ("key", pa.string()), ("packets", pa.int64())])
#: The record columns a control row carries after its ``ts`` (µs).
_CONTROL_FIELDS = FEATURE_COLUMNS[1:]
#: The buffered control records: ``ts`` in µs, then the record columns.
_CONTROL = pa.schema([("ts", pa.int64()), *(ARROW_SCHEMA.field(name) for name in _CONTROL_FIELDS)])


class SlidingFeatures:
    """The features kind on each micro-batch (module docstring).

    Parameters
    ----------
    results, checkpoint
        ``results/features/`` and the kind's checkpoint directory (its state in ``state/``, the
        buffer in ``pairs-<id>.arrow`` and ``control-<id>.arrow``).
    window_s, timeout_s, top
        ``[alerts] features_window_s``, ``features_timeout_s`` and ``features_top``.
    watermark_ms
        The watermark delay, ``[pipeline] watermark_s`` in milliseconds.
    """

    def __init__(
        self,
        results: Path,
        checkpoint: Path,
        *,
        window_s: float,
        timeout_s: float,
        top: int,
        watermark_ms: int,
    ) -> None:
        self.window_us = round(window_s * 1_000_000)
        self.timeout_us = round(timeout_s * 1_000_000)
        if self.window_us < 1 or abs(window_s * 1_000_000 - self.window_us) > 1e-6:
            raise ValueError(
                f"[alerts] features_window_s: a positive whole number of microseconds, got {window_s}"
            )
        if self.timeout_us < 0:
            raise ValueError(f"[alerts] features_timeout_s: must be >= 0, got {timeout_s}")
        self.top = top
        self.delay_ms = watermark_ms
        self.results = Path(results)
        self.store = Path(checkpoint)
        self.state = BatchState(self.store / "state")
        #: packets of already closed windows skipped by this process's batches
        self.late_rows = 0
        #: the buffer this process wrote last: its name, pairs and control records
        self._held: tuple[str, pa.Table, pa.Table] | None = None
        #: the intake drop box's fraction in force for the next batch (:meth:`sample`)
        self.intake = 1.0

    def sample(self, keep: dict[str, float]) -> None:
        """The drop boxes' fractions of the next batch: the features read only the intake box's."""
        self.intake = float(keep.get(INTAKE, 1.0))

    @property
    def specs(self) -> tuple[CountSpec | RowsSpec, ...]:
        """Stage 1: packets per (window, ``dst,src``); the control records with both addresses."""
        return (
            CountSpec(PAIRS_SPEC, ("dst_ip", "src_ip"), "packets", self.window_us, intake=self.intake),
            RowsSpec(CONTROL_SPEC, _CONTROL_FIELDS, required=("src_ip", "dst_ip"), select=control_records),
        )

    def _first_open(self, watermark_ms: int | None) -> int | None:
        """The first window the watermark has not closed: windows before it are closed."""
        if watermark_ms is None:
            return None
        return (watermark_ms * 1000 - self.timeout_us) // self.window_us

    def apply(self, partials: pa.Table, max_us: int | None, batch_id: int) -> None:
        """Merge the batch's partials into the buffer; commit the rows of every window that closes."""
        before = self.state.load(batch_id) or {"watermark_ms": None, "newest_us": None, "buffer": None}
        open_before = self._first_open(before["watermark_ms"])
        pairs = partials.filter(pc.equal(partials["query"], PAIRS_SPEC))
        pairs = pa.table({"w": pairs["sw"], "key": pairs["key"], "packets": pairs["records"]}, schema=_PAIRS)
        control, newest_us = rows_of(partials, CONTROL_SPEC)
        late = 0
        if open_before is not None:
            stale = pc.less(pairs["w"], open_before)
            late = pc.sum(pairs["packets"].filter(stale)).as_py() or 0
            pairs = pairs.filter(pc.invert(stale))
            if control is not None:
                control = control.filter(pc.greater_equal(control["ts"], open_before * self.window_us))
        keeps = [(int(lo), int(hi), float(x)) for lo, hi, x in before.get("keeps", [])]
        if self.intake < 1 and max_us is not None:
            # every window this batch's records could reach was read at the fraction
            windows = pairs["w"].to_pylist()
            hi = max_us // self.window_us
            lo = open_before if open_before is not None else min(windows, default=hi)
            keeps.append((lo, hi, self.intake))
        held_pairs, held_control = self._load(before["buffer"])
        pairs = pa.concat_tables([held_pairs, pairs])
        if pairs.num_rows:
            pairs = pairs.group_by(["w", "key"], use_threads=False).aggregate([("packets", "sum")])
            pairs = pa.table(
                {"w": pairs["w"], "key": pairs["key"], "packets": pairs["packets_sum"]}, schema=_PAIRS
            )
        control = pa.concat_tables(
            [held_control, _CONTROL.empty_table() if control is None else control.cast(_CONTROL)]
        )
        newest = before["newest_us"]
        if newest_us is not None:
            newest = newest_us if newest is None else max(newest, newest_us)
        watermark_ms = before["watermark_ms"]
        if max_us is not None:
            moved = max_us // 1000 - self.delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
        first_open = self._first_open(watermark_ms)
        rows = _rows([])
        if first_open is not None:
            closing = pc.less(pairs["w"], first_open)
            if pc.any(closing).as_py():
                # the control records of the closing windows and the answers to their SYNs
                answers = pc.less(control["ts"], first_open * self.window_us + self.timeout_us)
                rows = self._features(pairs.filter(closing), control.filter(answers), newest, first_open)
                rows = rows.set_column(rows.schema.get_field_index("keep"), "keep", self._keep(rows, keeps))
            pairs = pairs.filter(pc.invert(closing))
            control = control.filter(pc.greater_equal(control["ts"], first_open * self.window_us))
        write_table(rows, self.results, batch_id)
        buffer = f"{batch_id:06d}"
        write_arrow(pairs, self.store / f"pairs-{buffer}.arrow")
        write_arrow(control, self.store / f"control-{buffer}.arrow")
        self._held = (buffer, pairs, control)
        if first_open is not None:  # a range matters while a window it reached may still close
            keeps = [r for r in keeps if r[1] >= first_open]
        saved: dict[str, Any] = {"watermark_ms": watermark_ms, "newest_us": newest, "buffer": buffer}
        if keeps:
            saved["keeps"] = [list(r) for r in keeps]
        self.state.save(batch_id, saved)
        self._drop_buffers(keep={buffer, before["buffer"]})
        self.late_rows += late
        log.debug(
            "features batch",
            extra={"batch": batch_id, "rows": rows.num_rows, "buffered": pairs.num_rows, "late": late},
        )

    def _features(
        self, pairs: pa.Table, control: pa.Table, newest_us: int | None, first_open: int
    ) -> pa.Table:
        """The rows of the closed windows (those of ``pairs``) from the buffer."""
        # Arrow columns straight in: the addresses are dictionary-encoded, never Python strings row by row
        dst_src = pc.split_pattern(pairs["key"], ",", max_splits=1)
        frame = {
            "w": pairs["w"],
            "dst": pc.list_element(dst_src, 0),
            "src": pc.list_element(dst_src, 1),
            "packets": pairs["packets"],
        }
        found = features_of(
            frame,
            _control_frame(control),
            window_ns=self.window_us * 1000,
            timeout_ns=self.timeout_us * 1000,
            top=self.top,
            last=None if newest_us is None else newest_us * 1000,
            before=first_open,
            time=lambda ns: ns // 1000,
        )
        return _rows(found)

    def _keep(self, rows: pa.Table, keeps: list[tuple[int, int, float]]) -> pa.Array:
        """Each row's fraction: the smallest of the intake marks reaching its window (1: none)."""
        starts = pc.cast(rows["window_start"], pa.int64()).to_pylist()
        windows = [start // self.window_us for start in starts]
        return pa.array(
            [min((x for lo, hi, x in keeps if lo <= w <= hi), default=1.0) for w in windows], pa.float64()
        )

    def _load(self, buffer: str | None) -> tuple[pa.Table, pa.Table]:
        if buffer is None:
            return _PAIRS.empty_table(), _CONTROL.empty_table()
        if self._held is not None and self._held[0] == buffer:
            return self._held[1], self._held[2]
        return (
            read_arrow(self.store / f"pairs-{buffer}.arrow").cast(_PAIRS),
            read_arrow(self.store / f"control-{buffer}.arrow").cast(_CONTROL),
        )

    def _drop_buffers(self, keep: set[str | None]) -> None:
        """Delete the buffers no kept state version names."""
        for path in [*self.store.glob("pairs-*"), *self.store.glob("control-*")]:
            if path.stem.split("-", 1)[1] not in keep:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def _control_frame(control: pa.Table) -> dict[str, pa.ChunkedArray]:
    """Buffered control records as :data:`analytics.alert_features.CONTROL_COLUMNS` (``t`` in ns,
    nulls -1), Arrow columns."""
    columns = {"t": pc.multiply(control["ts"], 1000), "src": control["src_ip"], "dst": control["dst_ip"]}
    for column, name in (
        ("proto", "proto"),
        ("src_port", "sport"),
        ("dst_port", "dport"),
        ("tcp_flags", "flags"),
        ("icmp_type", "icmp"),
    ):
        columns[name] = control[column].fill_null(-1).cast(pa.int64())
    return columns


def _rows(found: list[dict[str, Any]]) -> pa.Table:
    """Feature rows (window bounds in µs) as ``OUTPUT_SCHEMA``."""
    return pa.Table.from_pylist(found, schema=OUTPUT_SCHEMA)


def build_features_batch(cfg: Config, results: Path, checkpoint: Path) -> SlidingFeatures:
    """The features kind's function on the shared micro-batch (its settings: ``[alerts]``)."""
    return SlidingFeatures(
        results,
        checkpoint,
        window_s=cfg.alerts.features_window_s,
        timeout_s=cfg.alerts.features_timeout_s,
        top=cfg.alerts.features_top,
        watermark_ms=round(cfg.pipeline.watermark_s * 1000),
    )
