"""Sliding-window distinct counts from one mergeable synopsis per sub-window (Golab, §2.3.4).

A periodically sliding window is a circular array of N/b sub-windows; COUNT DISTINCT is holistic,
so each sub-window keeps a synopsis of its own items (an exact set, or a DataSketches HLL sketch)
and the window's answer is the union of its N/b youngest synopses: Golab's *basic interval
synopsis* (thesis §2.3.4, Figure 2.5), with the sketch-per-interval variant the same section
describes. Every packet is touched once, in the sub-window it falls in.

The item encoding is one function, :func:`_sketch_update`: an item is its canonical key text
(:func:`analytics.keys.key_text`), and DataSketches hashes its UTF-8 bytes with MurmurHash3
(seed 9001) exactly as Java's ``HllSketch.update(String)`` does, the call Spark's
``hll_sketch_agg`` makes for a string column. See ``docs/distinct.md`` for the conventions the
Spark side shares.

Every count comes with an interval (:func:`hll_interval`): what the sketch's own error allows,
from the estimate and ``lg_k`` alone, so the streaming rows and the offline reports state the same.
"""

from __future__ import annotations

import math
import struct
from collections import Counter, deque
from collections.abc import Iterable
from functools import cache
from typing import Self, TypeAlias

import numpy as np
from datasketches import hll_sketch, hll_union, tgt_hll_type
from numpy.typing import ArrayLike

from analytics._base import Base

__all__ = [
    "COUPON_RSE",
    "NUM_STD_DEV",
    "ExactSlidingDistinct",
    "SubWindowDistinct",
    "coupon_limit",
    "hll_interval",
    "java_round",
]

#: The register width Spark writes: ``hll_sketch_agg`` and ``hll_union_agg`` both build
#: ``TgtHllType.HLL_8`` sketches and emit ``toUpdatableByteArray()`` (Spark 3.5-4.x source).
HLL_TYPE = tgt_hll_type.HLL_8
#: ``lg_k`` range accepted by DataSketches HLL and by Spark's ``hll_sketch_agg``.
LG_K_MIN, LG_K_MAX = 4, 21

_STATE_VERSION = 1
#: the state while a window grows after :meth:`SubWindowDistinct.resize`: version 1 and the
#: sub-windows held (u32)
_GROWING_VERSION = 2
#: the state with sub-windows of several lengths (the granularity operator Γ, ``slide(m)``):
#: version 2's body, then the number of closed sub-windows (u32) and each one's length in b (u32)
_GRAINED_VERSION = 3
_EXACT_SET_MAGIC = b"NXS"  # + version byte: an exact-set synopsis, see _exact_to_bytes
_EXACT_SET_VERSION = 1
_U32 = struct.Struct("<I")
_STATE_HEAD = struct.Struct("<4sBBBqqq")  # tag, version, exact, lg_k, N, b, slides

#: One sub-window's synopsis of one group: an exact set of key texts, or an HLL sketch.
Synopsis: TypeAlias = set[str] | hll_sketch


def _sketch_update(sketch: hll_sketch, item: str) -> None:
    """Add one item to an HLL sketch: the single place where items are encoded for hashing.

    DataSketches' ``update(str)`` hashes the string's UTF-8 bytes with MurmurHash3_x64_128, seed
    9001, and keeps the coupon ``(min(nlz(h2), 62) + 1) << 26 | (h1 & 0x3FFFFFF)``; empty strings
    are ignored. Java's ``HllSketch.update(String)`` / ``update(byte[])`` do the same, which is
    what Spark's ``hll_sketch_agg`` calls on a UTF8_BINARY string column: the same key text gives
    the same coupons on both sides (``tests/analytics/test_distinct.py`` checks the Python half
    against an independent MurmurHash3). A non-string Spark column (e.g. an INT port) is hashed
    as a long instead, so the streaming side must aggregate the key *text*.
    """
    sketch.update(item)


def java_round(x: float) -> int:
    """Java's ``Math.round``: what Spark's ``hll_sketch_estimate`` returns (a BIGINT)."""
    return math.floor(x + 0.5)


#: The standard deviations of the interval stated with every count: DataSketches' ``num_std_dev``
#: (1, 2 or 3); 2 is about 95 % (95.4 % for a normal error), the level of the sampling interval.
NUM_STD_DEV = 2
#: DataSketches' relative standard error of a coupon-mode (LIST/SET) estimate, ``hll_constants::
#: COUPON_RSE = 0.409 / 2^13``: what coupon collisions leave uncertain once the estimate corrects for
#: their expected number. ``get_upper_bound(n)`` of a coupon-mode sketch is ``estimate / (1 - n *
#: COUPON_RSE)`` (tests: against the library).
COUPON_RSE = 0.409 / 2**13


def coupon_limit(lg_k: int) -> int:
    """The most coupons an HLL_8 sketch of ``lg_k`` keeps before it turns into registers (HLL mode).

    DataSketches' LIST mode holds 7 coupons; below ``lg_k = 8`` the 8th turns it into HLL mode,
    from 8 on it turns into SET mode, which holds ``3/4 * 2^(lg_k - 3)`` (tests: the library).

    >>> coupon_limit(4), coupon_limit(12)
    (7, 384)
    """
    return 7 if lg_k < 8 else 3 << (lg_k - 5)


@cache
def _hll_rel_err(lg_k: int) -> tuple[float, float]:
    """``(low, high)``: DataSketches' relative error of a settled HLL-mode estimate at :data:`NUM_STD_DEV`.

    ``hll_sketch.get_rel_err(upper_bound, unioned=True, lg_k, num_std_dev)``, the factor behind
    the library's own ``get_lower_bound``/``get_upper_bound``: its measured tables for ``lg_k <=
    12``, ``num_std_dev * 1.03896 / sqrt(2^lg_k)`` above (the non-HIP constant: a settled union is
    out of order, its estimate the composite estimator). The upper one is negative.
    """
    low = hll_sketch.get_rel_err(False, True, lg_k, NUM_STD_DEV)
    high = hll_sketch.get_rel_err(True, True, lg_k, NUM_STD_DEV)
    return float(low), float(high)


def hll_interval(estimates: ArrayLike, lg_k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``, int64: the counts a settled HLL_8 sketch of ``lg_k`` answering ``estimates`` can hold.

    The interval of the sketch's own error, at :data:`NUM_STD_DEV` standard deviations (~95 %),
    from the (rounded) estimate and ``lg_k`` alone, which is what a result row carries:

    * A window whose union stayed in coupon mode (at most :func:`coupon_limit` coupons) answers
      the number of its distinct 32-bit coupons, mapped through DataSketches' coupon table: not
      exact, two items share a coupon with probability about ``2^-26 / 3``, but the table corrects
      for the expected collisions, and DataSketches bounds the rest with :data:`COUPON_RSE`:
      ``estimate / (1 ± 2 COUPON_RSE)``: the collision bound, so a small count is its own interval
      (below).
    * A window in HLL mode: DataSketches' own bounds, ``estimate / (1 + relErr)`` with the relative
      errors of :func:`_hll_rel_err`, the library's ``get_lower_bound(2)``/``get_upper_bound(2)``
      of the window's settled union, less the lower bound's floor at the number of non-zero
      registers, which a row does not carry (leaving it out only widens the interval). The
      library's factor, rather than the textbook ``1.96 * 1.04 / sqrt(2^lg_k)``, because it is
      the library's statement about its own sketch: 2 % wider above ``lg_k = 12``, and below from
      its measured tables, wider where ``1.04/sqrt(k)`` understates the error (+68 %/-41 % at
      ``lg_k = 4``, against ±51 %).
    * The row does not say which mode answered. An HLL-mode union holds more than
      ``coupon_limit(lg_k)`` coupons, hence as many distinct items: so an estimate is read as
      HLL-mode only as far as its HLL interval reaches above that limit, and the interval is the
      hull of both readings, its HLL part floored at ``limit + 1``. Counts below that reach
      keep the coupon interval (the point); those within the HLL error of the limit get the HLL
      upper end (373 .. 384 at ``lg_k = 12``).

    The library's bounds are of its unrounded estimate, which lies within half a unit of the
    reported one (Java's ``Math.round``): the bounds are taken from ``estimate ∓ 0.5``, so the
    interval holds every count the library's own interval holds. The ends are then rounded
    inwards (``ceil``, ``floor``): the true count is an integer, so the rounded interval holds
    exactly the integers the real one does, and it holds the estimate. A coupon-mode count stays
    its own interval up to ~5,000 (where ``2 · COUPON_RSE · estimate`` reaches half a unit).

    >>> [tuple(map(int, b)) for b in zip(*hll_interval([1, 300, 380, 10_000], 12))]
    [(1, 1), (300, 300), (380, 393), (9682, 10329)]
    """
    e = np.asarray(estimates, np.float64)
    below, above = np.maximum(e - 0.5, 0.0), e + 0.5  # where the unrounded estimate lies
    limit = coupon_limit(lg_k)
    spread = NUM_STD_DEV * COUPON_RSE
    low, high = below / (1 + spread), above / (1 - spread)  # coupon mode
    rel_low, rel_high = _hll_rel_err(lg_k)
    hll_low = np.maximum(below / (1 + rel_low), limit + 1)  # HLL mode holds more than the limit
    hll_high = above / (1 + rel_high)
    possible = hll_high >= limit + 1
    low = np.where(possible, np.minimum(low, hll_low), low)
    high = np.where(possible, np.maximum(high, hll_high), high)
    return np.ceil(low).astype(np.int64), np.floor(high).astype(np.int64)


def _check_window(N: int, b: int) -> None:
    for name, v in (("N", N), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if N % b:
        raise ValueError(f"N: window {N} is not a multiple of the sub-window b={b}")


def _check_group_item(item: object, group: object) -> None:
    if not isinstance(item, str):
        raise TypeError(f"item: expected the key text (str), got {type(item).__name__}")
    if not isinstance(group, str):
        raise TypeError(f"group: expected the group text (str), got {type(group).__name__}")


# -- exact-set synopsis bytes --------------------------------------------------------------------


def _exact_to_bytes(items: Iterable[str]) -> bytes:
    """``b"NXS" + version + u32 count + (u32 length + UTF-8)*``, items sorted: canonical bytes."""
    parts = [_EXACT_SET_MAGIC, bytes([_EXACT_SET_VERSION])]
    ordered = sorted(items)
    parts.append(_U32.pack(len(ordered)))
    for it in ordered:
        raw = it.encode("utf-8")
        parts.append(_U32.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def _exact_from_bytes(data: bytes) -> set[str]:
    view = memoryview(bytes(data))
    if len(view) < 8 or bytes(view[:3]) != _EXACT_SET_MAGIC:
        raise ValueError("data: not an exact-set synopsis (expected the NXS header)")
    if view[3] != _EXACT_SET_VERSION:
        raise ValueError(f"data: exact-set synopsis version {view[3]} (expected {_EXACT_SET_VERSION})")
    (count,) = _U32.unpack_from(view, 4)
    pos, out = 8, set()
    try:
        for _ in range(count):
            (n,) = _U32.unpack_from(view, pos)
            if pos + 4 + n > len(view):
                raise ValueError("data: truncated exact-set synopsis")
            out.add(bytes(view[pos + 4 : pos + 4 + n]).decode("utf-8"))
            pos += 4 + n
    except struct.error:
        raise ValueError("data: truncated exact-set synopsis") from None
    if pos != len(view):
        raise ValueError("data: trailing bytes after the exact-set synopsis")
    return out


# -- state framing shared by both classes ------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u32(self, v: int) -> None:
        self.parts.append(_U32.pack(v))

    def blob(self, raw: bytes) -> None:
        self.u32(len(raw))
        self.parts.append(raw)

    def text(self, s: str) -> None:
        self.blob(s.encode("utf-8"))


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.view, self.pos = memoryview(data), pos
        self.version = _STATE_VERSION

    def u32(self) -> int:
        try:
            (v,) = _U32.unpack_from(self.view, self.pos)
        except struct.error:
            raise ValueError("data: truncated state") from None
        self.pos += 4
        return v

    def blob(self) -> bytes:
        n = self.u32()
        if self.pos + n > len(self.view):
            raise ValueError("data: truncated state")
        out = bytes(self.view[self.pos : self.pos + n])
        self.pos += n
        return out

    def text(self) -> str:
        return self.blob().decode("utf-8")

    def end(self) -> None:
        if self.pos != len(self.view):
            raise ValueError("data: trailing bytes after the state")


def _read_head(
    data: bytes, tag: bytes, versions: tuple[int, ...] = (_STATE_VERSION,)
) -> tuple[bool, int, int, int, int, _Reader]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    try:
        got, version, exact, lg_k, N, b, slides = _STATE_HEAD.unpack_from(data, 0)
    except struct.error:
        raise ValueError("data: too short for a distinct-count state") from None
    if got != tag:
        raise ValueError(f"data: not a {tag.decode()} state (tag {got!r})")
    if version not in versions:
        raise ValueError(f"data: state version {version} (expected {_STATE_VERSION})")
    r = _Reader(data, _STATE_HEAD.size)
    r.version = version
    return bool(exact), lg_k, N, b, slides, r


class SubWindowDistinct(Base):
    """Distinct items per group over a sliding window of N/b sub-window synopses (Golab, §2.3.4).

    The window is a circular array of the N/b most recently closed sub-windows (thesis Fig. 2.4).
    Each (sub-window, group) pair keeps one synopsis, an exact set or an HLL sketch. The window's
    answer for a group is the union of its N/b synopses. This is the *basic interval synopsis* of
    §2.3.4 (Fig. 2.5), with the "sketch per interval" option of the same section. COUNT DISTINCT
    is holistic (§2.2.1), so there is no running or subtractable form: a window update drops the
    oldest synopsis and appends the newest, and a query merges at most N/b of them.

    Guarantee. Exact mode returns the true count of distinct items in the window. HLL mode
    returns DataSketches' estimate of the union, with relative standard error about
    1.04/sqrt(2^lg_k) in both directions (not one-sided). It is exact, up to hash collisions,
    while the union is still in coupon (LIST/SET) mode: in our measurements up to about
    2^lg_k/10 items. :meth:`bounds` gives the sketch's confidence interval, and
    :func:`hll_interval` the interval a reported (rounded) estimate carries. Estimates are
    rounded as Spark's ``hll_sketch_estimate`` rounds them (Java ``Math.round``). A window's
    union is *settled* (united with itself) before it is read, so in HLL mode its estimate is
    DataSketches' composite estimator, a function of the registers alone, and never the HIP
    accumulator, whose value depends on the order of the union: any union order, in any engine,
    gives the same answer (Spark: ``hll_sketch_estimate(hll_union(sk, sk))``).

    Departure from the paper: §2.3.4 slides every *s* time units. Here the caller calls
    :meth:`slide` when a sub-window closes, as in Alg. 6 (Ch. 6). ``analytics.distinct_offline``
    decides that from event time. Groups are a GROUP BY the thesis does not have: one synopsis
    per (sub-window, group) pair.

    Window changes (seed 004's window knob, CKSV §4.2; issue 18 item 4): :meth:`resize` sets
    the window to N' sub-windows at a sub-window boundary. A shorter window is in force at once
    (the oldest sub-windows leave); a longer one grows by one sub-window per :meth:`slide`, since
    the sub-windows it would add have expired, and holds N' sub-windows only N' − N slides
    later: fully in force ``max(N, N')`` after the change counted from when the old window began,
    as in the seed. :attr:`window_held` is the span each report held (``N`` unless growing).
    Departure from the seed's join, whose shrink is visible only at ``t + min(w, w')`` (its tuples
    keep the validity they were inserted with): sub-window synopses can leave at once.
    Before the first slide the past is empty traffic, so a window holds ``N`` from the start.

    Verbs (the ``analytics`` convention): ``update``/``update_synopsis`` feed the open sub-window,
    ``slide()`` closes it, ``resize(N)`` changes the window, ``merge(other)`` unions another
    instance's sub-windows, all returning ``self``; ``report()`` reads the window's
    ``{group: estimate}``.

    Parameters
    ----------
    N
        Window length, and ``b`` the sub-window length, in one unit (nanoseconds offline; any
        unit works because only N/b is used here). N must be a multiple of b.
    b
        Sub-window length (Golab ch. 6 notation; §2.3.4 calls it ``s``).
    lg_k
        log2 of the number of HLL registers, 4..21 (Spark's range). The default 12 gives
        about 1.6% standard error and at most 4 KiB per synopsis. It is checked in exact mode too.
    exact
        Keep exact sets instead of sketches: the same interface, and the ``--exact`` mode.

    Examples
    --------
    >>> sw = SubWindowDistinct(N=3, b=1)
    >>> sw.update("10.0.0.1", group="192.0.2.7").update("10.0.0.2", group="192.0.2.7").slide()
    SubWindowDistinct(N=3, b=1, lg_k=12, exact=False)
    >>> sw.update("10.0.0.1", group="192.0.2.7").slide().report()
    {'192.0.2.7': 2}
    >>> sw.slide().slide().report()  # the first sub-window has expired
    {'192.0.2.7': 1}

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University
       of Waterloo, 2006: §2.3.4 (basic interval synopsis, Figs. 2.4-2.5), §2.2.1 (holistic
       aggregates), Ch. 6 Alg. 6 (N, b notation; time-based sub-windows).
    .. [2] P. Flajolet, E. Fusy, O. Gandouet, F. Meunier, "HyperLogLog: the analysis of a
       near-optimal cardinality estimation algorithm", AofA 2007. Apache DataSketches HLL:
       https://datasketches.apache.org/docs/HLL/HLL.html
    """

    _TAG = b"NSWD"

    def __init__(self, N: int, b: int, lg_k: int = 12, exact: bool = False) -> None:
        _check_window(N, b)
        if isinstance(lg_k, bool) or not isinstance(lg_k, int) or not LG_K_MIN <= lg_k <= LG_K_MAX:
            raise ValueError(f"lg_k: expected an integer in {LG_K_MIN}..{LG_K_MAX}, got {lg_k!r}")
        if not isinstance(exact, bool):
            raise ValueError(f"exact: expected True or False, got {exact!r}")
        self.N = N
        self.b = b
        self.lg_k = lg_k
        self.exact = exact
        self._n = N // b
        # The span the window holds, in b: N/b, less while it grows after resize().
        self._held = self._n
        self._open: dict[str, Synopsis] = {}
        self._closed: deque[dict[str, Synopsis]] = deque()
        # Each closed sub-window's length in b (1; m after slide(m): Γ) and their sum.
        self._sizes: deque[int] = deque()
        self._covered = 0
        self._slides = 0
        # Per group: its synopses in the window, oldest first, and its last answer. A slide
        # changes the answer only of groups in the entering or the expiring sub-window.
        self._by_group: dict[str, deque[Synopsis]] = {}
        self._answers: dict[str, int] = {}

    # -- synopsis primitives -------------------------------------------------------------------

    def _new(self) -> Synopsis:
        return set() if self.exact else hll_sketch(self.lg_k, HLL_TYPE)

    def _union_into(self, dst: Synopsis | None, src: Synopsis) -> Synopsis:
        """``dst ∪ src`` (``dst`` first), as Spark's ``HllSketchAgg.merge`` does for HLL."""
        if self.exact:
            out: set[str] = set(dst) if dst is not None else set()
            out |= src
            return out
        u = hll_union(self.lg_k)
        if dst is not None:
            u.update(dst)
        u.update(src)
        return u.get_result(HLL_TYPE)

    def _syn_bytes(self, syn: Synopsis | None) -> bytes:
        if syn is None:
            syn = self._new()
        if isinstance(syn, set):  # exact mode
            return _exact_to_bytes(syn)
        return bytes(syn.serialize_updatable())

    def _syn_from_bytes(self, data: bytes) -> Synopsis:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data: expected bytes, got {type(data).__name__}")
        if self.exact:
            return _exact_from_bytes(bytes(data))
        if bytes(data[:3]) == _EXACT_SET_MAGIC:
            raise ValueError("data: an exact-set synopsis given to an HLL-mode SubWindowDistinct")
        try:
            sk = hll_sketch.deserialize(bytes(data))
        except Exception as exc:  # DataSketches raises several types for bad bytes
            raise ValueError(f"data: not an HLL sketch ({exc})") from None
        if sk.lg_config_k != self.lg_k:
            # hll_union_agg refuses this too, unless allowDifferentLgConfigK.
            raise ValueError(f"data: sketch has lg_k={sk.lg_config_k}, expected {self.lg_k}")
        return sk if sk.tgt_type == HLL_TYPE else self._union_into(None, sk)

    # -- verbs -----------------------------------------------------------------------------------

    def update(self, item: str, group: str = "") -> Self:
        """Add ``item`` (key text) to ``group``'s synopsis in the open sub-window."""
        _check_group_item(item, group)
        if not item:  # DataSketches (and Spark) ignore empty strings; exact mode agrees
            return self
        syn = self._open.get(group)
        if syn is None:
            syn = self._open[group] = self._new()
        if isinstance(syn, set):  # exact mode
            syn.add(item)
        else:
            _sketch_update(syn, item)
        return self

    def update_synopsis(self, data: bytes, group: str = "") -> Self:
        """Union a serialized sub-window synopsis into ``group``'s open one.

        HLL mode takes any DataSketches HLL sketch with the same ``lg_k``, e.g. one row of Spark's
        ``hll_sketch_agg``. Exact mode takes the bytes of :meth:`synopsis`.
        """
        _check_group_item("", group)
        syn = self._syn_from_bytes(data)
        if isinstance(syn, set):  # exact mode
            if not syn:
                return self
        elif syn.is_empty():
            return self
        old = self._open.get(group)
        self._open[group] = syn if old is None else self._union_into(old, syn)
        return self

    def slide(self, m: int = 1) -> Self:
        """Close the open sub-window: it joins the window, and the oldest beyond N/b expires
        (none while a window grows after :meth:`resize`).

        ``m``: the granularity operator Γ (seed 004's CKSV granularity, ``analytics.granularity``):
        the open sub-window is ``m·b`` long, the union of the ``m`` fine sub-windows the caller
        put into it (exact for HLL sketches: a union of the same coupons and registers). The
        window keeps the whole sub-windows that *end* in its last ``N``: a coarse one straddling
        its start stays until it ends out of it, so :attr:`window_held` is a little more than
        ``N`` just after a change to a finer sub-window (departure from the top-k kind's Γ,
        which drops it at once: ``pipeline.distinct`` files a coarse sub-window's sketches
        under its last fine sub-window, see there).

        >>> sw = SubWindowDistinct(N=4, b=1, exact=True)
        >>> _ = sw.update("a").slide(2).update("b").slide(2).update("c").slide()
        >>> sw.report(), sw.window_held  # a's sub-window [0, 2) still ends in [1, 5)
        ({'': 3}, 5)
        >>> sw.update("d").slide().report(), sw.window_held
        ({'': 3}, 4)
        """
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"m: expected a positive number of sub-windows, got {m!r}")
        entering = self._open
        self._closed.append(entering)
        self._sizes.append(m)
        self._covered += m
        for g, syn in entering.items():
            self._by_group.setdefault(g, deque()).append(syn)
            self._answers.pop(g, None)
        self._held = min(self._held + m, self._n)
        self._expire()
        self._open = {}
        self._slides += 1
        return self

    def _expire(self) -> None:
        """Drop the closed sub-windows the window no longer holds, oldest first: those that end
        before its last ``held`` (with sub-windows of one b: beyond the ``held`` newest)."""
        while self._closed and self._covered - self._sizes[0] >= self._held:
            self._covered -= self._sizes.popleft()
            for g in self._closed.popleft():
                mine = self._by_group[g]
                mine.popleft()  # FIFO: a group's oldest synopsis is the expiring sub-window's
                if not mine:
                    del self._by_group[g]
                self._answers.pop(g, None)

    def resize(self, N: int) -> Self:
        """The window is ``N`` from the next :meth:`slide` on (seed 004's window knob).

        Shorter: in force at once, the oldest sub-windows leave now (and :meth:`report` answers
        for the shorter window). Longer: the window grows by one sub-window per slide until it
        holds ``N/b`` (the expired sub-windows do not come back); :attr:`window_held` says what
        it holds meanwhile.

        >>> sw = SubWindowDistinct(N=3, b=1, exact=True)
        >>> for item in "abc":
        ...     _ = sw.update(item).slide()
        >>> sw.resize(1).report(), sw.window_held
        ({'': 1}, 1)
        >>> _ = sw.resize(3).update("d").slide()
        >>> sw.report(), sw.window_held  # c and d: growing
        ({'': 2}, 2)
        """
        _check_window(N, self.b)
        self.N = N
        self._n = N // self.b
        self._held = min(self._held, self._n)
        self._expire()
        return self

    def idle(self, slides: int) -> Self:
        """``slides`` slides of empty sub-windows while the window holds nothing (an offline
        driver's jump over a gap in event time): only what the window holds moves on."""
        if slides <= 0:
            return self
        if not self.is_empty() or self._open:
            raise ValueError("idle: the window or the open sub-window holds items")
        self._closed.clear()
        self._sizes.clear()
        self._covered = 0
        self._held = min(self._held + slides, self._n)
        return self

    @property
    def window_held(self) -> int:
        """The span the window holds (the unit of ``N``): ``N`` except while it grows after
        :meth:`resize`, and a little more just after a change to a finer sub-window while a
        coarse one straddles its start (:meth:`slide`). Before the first slide (and after an
        :meth:`idle`) the past is empty traffic in sub-windows of ``b``."""
        return max(self._covered, self._held) * self.b

    def _reindex(self) -> None:
        self._by_group = {}
        for sub in self._closed:
            for g, syn in sub.items():
                self._by_group.setdefault(g, deque()).append(syn)
        self._answers = {}

    def merge(self, other: SubWindowDistinct) -> Self:
        """Union ``other``'s synopses into this one, sub-window by sub-window.

        Both must have the same parameters and have slid the same number of times, e.g. two
        instances fed disjoint parts (partitions) of one stream on the same slide schedule.
        """
        if not isinstance(other, SubWindowDistinct):
            raise TypeError(f"other: expected a SubWindowDistinct, got {type(other).__name__}")
        if other._get_params() != self._get_params():
            raise ValueError(f"other: parameters differ ({other!r} vs {self!r})")
        if other._held != self._held:
            raise ValueError(f"other: holds {other._held} sub-windows, this one {self._held}")
        if other._slides != self._slides:
            raise ValueError(f"other: has slid {other._slides} times, this one {self._slides}")
        if other._sizes != self._sizes:
            raise ValueError(f"other: sub-windows of {list(other._sizes)} b, this one {list(self._sizes)}")
        for mine, theirs in zip([*self._closed, self._open], [*other._closed, other._open], strict=True):
            for g, syn in theirs.items():
                mine[g] = self._union_into(mine.get(g), syn)
        self._reindex()
        return self

    # -- queries ---------------------------------------------------------------------------------

    def _exact_union(self, group: str) -> set[str]:
        """Exact mode: the union of ``group``'s sets in the window (a probe of <= N/b intervals)."""
        out: set[str] = set()
        return out.union(*self._by_group[group])

    def _sketch_union(self, group: str) -> hll_union:
        """HLL mode: the union of ``group``'s sketches in the window (Golab's probe of <= N/b intervals).

        The union is returned *settled*: united once more with its own result. A union
        whose HLL-mode state came from coupon insertion, or from copying one in-order sketch,
        still carries DataSketches' HIP accumulator, and its estimate depends on the order in
        which the sketches were unioned. Uniting it with itself changes no register and no
        coupon, but marks it out of order, so its estimate becomes the composite estimator: a
        function of the registers (in coupon mode, of the coupon count) alone. Spark's shuffle
        and state store merge in no fixed order; ``hll_sketch_estimate(hll_union(sk, sk))``
        settles the same way there, and both engines give the same answer.
        """
        u = hll_union(self.lg_k)
        for sk in self._by_group[group]:  # oldest sub-window first (any order gives the same settled answer)
            u.update(sk)
        u.update(u.get_result(HLL_TYPE))
        return u

    def _answer(self, group: str) -> int:
        got = self._answers.get(group)
        if got is None:
            if self.exact:
                got = len(self._exact_union(group))
            else:
                got = java_round(self._sketch_union(group).get_estimate())
            self._answers[group] = got
        return got

    def estimate(self) -> dict[str, int]:
        """Distinct items per group over the window (the N/b closed sub-windows).

        Groups with no item in the window are absent. HLL estimates are rounded half up. A
        group's answer is recomputed only after a slide that adds or expires one of its synopses.
        """
        return {g: self._answer(g) for g in self._by_group}

    def report(self) -> dict[str, int]:
        """The window's answer, ``{group: estimate}`` (as :meth:`estimate`); reads only."""
        return self.estimate()

    def bounds(self, num_std_devs: int = 2) -> dict[str, tuple[float, float]]:
        """Per group (lower, upper) at ``num_std_devs`` (1, 2 or 3) standard deviations."""
        if num_std_devs not in (1, 2, 3):
            raise ValueError(f"num_std_devs: expected 1, 2 or 3, got {num_std_devs!r}")
        out: dict[str, tuple[float, float]] = {}
        for g in self._by_group:
            if self.exact:
                n = float(len(self._exact_union(g)))
                out[g] = (n, n)
            else:
                u = self._sketch_union(g)
                out[g] = (u.get_lower_bound(num_std_devs), u.get_upper_bound(num_std_devs))
        return out

    def is_empty(self) -> bool:
        """True when no closed sub-window in the window holds an item."""
        return not self._by_group

    @property
    def slides(self) -> int:
        """Number of sub-windows closed so far."""
        return self._slides

    def synopsis(self, group: str = "", age: int = 0) -> bytes:
        """Serialized synopsis of ``group`` in one sub-window; empty if the group has none there.

        ``age`` 0 is the open sub-window, 1 the newest closed one, up to N/b. HLL mode returns
        the HLL_8 *updatable* serialization, the form Spark's ``hll_sketch_agg`` emits, and
        ``datasketches.hll_sketch.deserialize`` (or Java ``HllSketch.heapify``) reads it.
        """
        subs = self._sub_by_age(age)
        return self._syn_bytes(subs.get(group) if subs is not None else None)

    def _sub_by_age(self, age: int) -> dict[str, Synopsis] | None:
        if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= self._n:
            raise ValueError(f"age: expected an integer in 0..{self._n}, got {age!r}")
        if age == 0:
            return self._open
        return self._closed[-age] if age <= len(self._closed) else None

    # -- state -------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The whole state: header with a version byte, then each sub-window's synopses.

        Synopses keep their updatable form, so a restored instance behaves identically. Version
        1 (the window full), 2 (growing: the span held follows) and, once a sub-window other
        than ``b`` was closed (Γ, :meth:`slide`), 3: the span held, then each closed sub-window's
        length; a state without one is written as before, so older readers still read it.
        """
        grained = any(m != 1 for m in self._sizes)
        if grained:
            version = _GRAINED_VERSION
        else:
            version = _STATE_VERSION if self._held == self._n else _GROWING_VERSION
        head = _STATE_HEAD.pack(self._TAG, version, self.exact, self.lg_k, self.N, self.b, self._slides)
        w = _Writer()
        subs = [*self._closed, self._open]
        w.u32(len(subs))
        for sub in subs:
            w.u32(len(sub))
            for g, syn in sub.items():
                w.text(g)
                w.blob(self._syn_bytes(syn))
        if version != _STATE_VERSION:
            w.u32(self._held)
        if version == _GRAINED_VERSION:
            w.u32(len(self._sizes))
            for m in self._sizes:
                w.u32(m)
        return head + b"".join(w.parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> SubWindowDistinct:
        """Rebuild an instance from :meth:`to_bytes` (every version)."""
        versions = (_STATE_VERSION, _GROWING_VERSION, _GRAINED_VERSION)
        exact, lg_k, N, b, slides, r = _read_head(data, cls._TAG, versions)
        out = cls(N, b, lg_k=lg_k, exact=exact)
        subs: list[dict[str, Synopsis]] = []
        for _ in range(r.u32()):
            sub: dict[str, Synopsis] = {}
            for _ in range(r.u32()):
                g = r.text()
                sub[g] = out._syn_from_bytes(r.blob())
            subs.append(sub)
        if r.version == _GROWING_VERSION:
            out._held = r.u32()
            if not 1 <= out._held < out._n:
                raise ValueError(f"data: {out._held} sub-windows held, expected 1..{out._n - 1}")
        sizes = [1] * max(len(subs) - 1, 0)
        if r.version == _GRAINED_VERSION:
            out._held = r.u32()
            if not 1 <= out._held <= out._n:
                raise ValueError(f"data: {out._held} sub-windows held, expected 1..{out._n}")
            sizes = [r.u32() for _ in range(r.u32())]
            if len(sizes) != len(subs) - 1 or not all(sizes):
                raise ValueError(f"data: {len(sizes)} sub-window lengths for {len(subs) - 1} sub-windows")
        r.end()
        if not subs or (sizes and sum(sizes) - sizes[0] >= out._held):
            raise ValueError(f"data: {len(subs)} sub-windows stored, expected 1..{out._held + 1}")
        out._closed = deque(subs[:-1])
        out._sizes = deque(sizes)
        out._covered = sum(sizes)
        out._open = subs[-1]
        out._slides = slides
        out._reindex()
        return out


class ExactSlidingDistinct(Base):
    """Brute-force oracle for :class:`SubWindowDistinct`: every arrival kept, with multiplicities.

    This is the *counting* duplicate elimination of Golab §3.2.2 and §3.5.2 (the strict
    non-monotonic version). It keeps the multiplicity of each (group, item) pair over the raw
    arrivals in the window: +1 when a sub-window enters, -1 when it expires. A group's answer is
    the number of its items with multiplicity > 0. It is exact, and it needs no synopsis unions,
    so it checks the sub-window unions independently. It stores the whole window (space
    Ω(window), §2.2.1), which is why the synopsis class exists.

    The interface is :class:`SubWindowDistinct`'s, with the same verbs (``update``, ``slide``,
    ``merge``, ``report``) and nouns. Only exact-set
    synopsis bytes are accepted, because a sketch cannot be expanded back into items.

    Parameters
    ----------
    N
        Window length, and ``b`` the sub-window length, in one unit; N a multiple of b.
    b
        Sub-window length.

    Examples
    --------
    >>> ex = ExactSlidingDistinct(N=2, b=1)
    >>> ex.update("a", group="g").update("a", group="g").update("b", group="g").slide().estimate()
    {'g': 2}
    >>> ex.update("b", group="g").slide().slide().estimate()
    {'g': 1}

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University
       of Waterloo, 2006: §3.2.2 and §3.5.2 (counting duplicate elimination), §2.2.1.
    """

    _TAG = b"NXSD"

    def __init__(self, N: int, b: int) -> None:
        _check_window(N, b)
        self.N = N
        self.b = b
        self._n = N // b
        self._open: list[tuple[str, str]] = []
        self._closed: deque[list[tuple[str, str]]] = deque()
        self._mult: Counter[tuple[str, str]] = Counter()
        self._live: Counter[str] = Counter()
        self._slides = 0

    def update(self, item: str, group: str = "") -> Self:
        """Record one arrival of ``item`` in ``group`` (duplicates kept)."""
        _check_group_item(item, group)
        if item:  # empty items ignored, as DataSketches does
            self._open.append((group, item))
        return self

    def update_synopsis(self, data: bytes, group: str = "") -> Self:
        """Add the items of an exact-set synopsis (each once) to ``group``'s open sub-window."""
        _check_group_item("", group)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data: expected bytes, got {type(data).__name__}")
        items = _exact_from_bytes(bytes(data))
        self._open.extend((group, it) for it in sorted(items) if it)
        return self

    def _enter(self, arrivals: list[tuple[str, str]]) -> None:
        for pair in arrivals:
            self._mult[pair] += 1
            if self._mult[pair] == 1:
                self._live[pair[0]] += 1

    def _expire(self, arrivals: list[tuple[str, str]]) -> None:
        for pair in arrivals:
            self._mult[pair] -= 1
            if self._mult[pair] == 0:
                del self._mult[pair]
                self._live[pair[0]] -= 1
                if self._live[pair[0]] == 0:
                    del self._live[pair[0]]

    def slide(self) -> Self:
        """Close the open sub-window: its arrivals enter the window, the oldest's expire."""
        self._closed.append(self._open)
        self._enter(self._open)
        if len(self._closed) > self._n:
            self._expire(self._closed.popleft())
        self._open = []
        self._slides += 1
        return self

    def merge(self, other: ExactSlidingDistinct) -> Self:
        """Add ``other``'s arrivals sub-window by sub-window (same parameters and slide count)."""
        if not isinstance(other, ExactSlidingDistinct):
            raise TypeError(f"other: expected an ExactSlidingDistinct, got {type(other).__name__}")
        if other._get_params() != self._get_params():
            raise ValueError(f"other: parameters differ ({other!r} vs {self!r})")
        if other._slides != self._slides:
            raise ValueError(f"other: has slid {other._slides} times, this one {self._slides}")
        for mine, theirs in zip(self._closed, other._closed, strict=True):
            mine.extend(theirs)
            self._enter(theirs)
        self._open.extend(other._open)
        return self

    def estimate(self) -> dict[str, int]:
        """Distinct items per group over the window; absent groups have none."""
        return dict(self._live)

    def report(self) -> dict[str, int]:
        """The window's answer, ``{group: estimate}`` (as :meth:`estimate`); reads only."""
        return self.estimate()

    def bounds(self, num_std_devs: int = 2) -> dict[str, tuple[float, float]]:
        """Exact: each group's (count, count)."""
        if num_std_devs not in (1, 2, 3):
            raise ValueError(f"num_std_devs: expected 1, 2 or 3, got {num_std_devs!r}")
        return {g: (float(n), float(n)) for g, n in self._live.items()}

    def is_empty(self) -> bool:
        """True when no closed sub-window in the window holds an item."""
        return not self._live

    @property
    def slides(self) -> int:
        """Number of sub-windows closed so far."""
        return self._slides

    def synopsis(self, group: str = "", age: int = 0) -> bytes:
        """The exact-set synopsis of ``group`` in sub-window ``age`` (0 = open, 1 = newest closed)."""
        if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= self._n:
            raise ValueError(f"age: expected an integer in 0..{self._n}, got {age!r}")
        if age == 0:
            sub = self._open
        else:
            sub = self._closed[-age] if age <= len(self._closed) else []
        return _exact_to_bytes({it for g, it in sub if g == group})

    def to_bytes(self) -> bytes:
        """The raw arrivals per sub-window, after a header with a version byte."""
        head = _STATE_HEAD.pack(self._TAG, _STATE_VERSION, True, 0, self.N, self.b, self._slides)
        w = _Writer()
        subs = [*self._closed, self._open]
        w.u32(len(subs))
        for sub in subs:
            w.u32(len(sub))
            for g, it in sub:
                w.text(g)
                w.text(it)
        return head + b"".join(w.parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> ExactSlidingDistinct:
        """Rebuild an instance from :meth:`to_bytes`."""
        _, _, N, b, slides, r = _read_head(data, cls._TAG)
        out = cls(N, b)
        subs = [[(r.text(), r.text()) for _ in range(r.u32())] for _ in range(r.u32())]
        r.end()
        if not subs or len(subs) - 1 > out._n:
            raise ValueError(f"data: {len(subs)} sub-windows stored, expected 1..{out._n + 1}")
        out._closed = deque(subs[:-1])
        for sub in out._closed:
            out._enter(sub)
        out._open = subs[-1]
        out._slides = slides
        return out
