"""Load shedding for the window join: per-tuple insert/probe decisions (seed 003 §3.2.2, §3.3).

Every arriving tuple of a symmetric hash join does two independent things: it *probes* the opposite
window (producing results) and it is *inserted* into its own window (so later arrivals can find it).
A strategy decides both per tuple:

=============  =======================================  =======================================
strategy       insert                                   probe
=============  =======================================  =======================================
``none``       always                                   always
``cf``         with probability x (same coin as probe)  with probability x (same coin)
``inp``        always                                   with probability x
``pni``        with probability x                       always
``max-subset`` per key: 1, 0, or PNI on one key         same
=============  =======================================  =======================================

x is ``x_left`` for left tuples and ``x_right`` for right tuples. A result pair (earlier tuple ``e``,
later tuple ``l``) is produced iff ``e`` was inserted and ``l`` probes, so its probability is
``p_insert(e)·p_probe(l)``; :class:`Decisions` carries both probabilities for Horvitz-Thompson
estimates of the unshed output. Randomness comes only from ``seed``: one uniform draw per tuple, in
processing order, so a run is reproducible and independent of how the stream is cut into batches.

:class:`OnlineMaxSubset` is Figure 2 of the paper (semantic shedding): the frequency model
``f_L(v)``, ``f_R(v)`` is estimated from the tuples of the last ``history_s`` seconds; components
(join-key values) are admitted in decreasing order of ``P(v) = λ_out(v)/C(v)`` (eqs. 5-8) while the
budget lasts; the first one that does not fit gets PNI with the remaining budget (line 14: the best
random strategy, §3.3.1); the rest are dropped. Its strategy name is ``max-subset`` when the model
includes the micro-batch being decided (the default) and ``max-subset-prior`` when it holds earlier
batches only.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol, Self

import numpy as np

from analytics._base import Base
from analytics.join_cost import JoinCostModel

__all__ = ["RANDOM_STRATEGIES", "Decisions", "LoadShedder", "MaxSubsetPlan", "OnlineMaxSubset", "Shedder"]

#: The random strategies (seed 003 §3.3) that :class:`LoadShedder` implements.
RANDOM_STRATEGIES: tuple[str, ...] = ("none", "cf", "inp", "pni")

_VERSION = 1


@dataclass(frozen=True)
class Decisions:
    """Per-tuple shedding decisions and their probabilities, aligned with the tuples passed in."""

    insert: np.ndarray
    probe: np.ndarray
    p_insert: np.ndarray
    p_probe: np.ndarray

    @classmethod
    def keep_all(cls, n: int) -> Decisions:
        """No shedding: every tuple is inserted and probes."""
        ones = np.ones(n, dtype=bool)
        return cls(ones, ones.copy(), np.ones(n), np.ones(n))


class Shedder(Protocol):
    """What :class:`analytics.join.SymmetricHashJoin` needs from a shedding strategy."""

    strategy: str

    def decide(self, is_left: np.ndarray, codes: np.ndarray, ts: np.ndarray) -> Decisions:
        """Decisions for tuples given in processing order (side flags, key codes, ns timestamps)."""
        ...


def _fraction(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: expected a fraction in [0, 1], got {value!r}")
    return value


def _decide_random(
    strategy: str, u: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Insert/probe flags and probabilities for uniforms ``u`` and per-tuple fractions ``x``."""
    coin = u < x
    ones_b = np.ones(len(u), dtype=bool)
    ones_p = np.ones(len(u))
    if strategy == "none":
        return ones_b, ones_b.copy(), ones_p, ones_p.copy()
    if strategy == "cf":
        return coin, coin.copy(), x.copy(), x.copy()
    if strategy == "inp":
        return ones_b, coin, ones_p, x.copy()
    return coin, ones_b, x.copy(), ones_p  # pni


class LoadShedder(Base):
    """Random load shedding CF / INP / PNI with insert or probe fractions (seed 003 §3.3).

    Parameters
    ----------
    strategy
        ``"none"``, ``"cf"`` (drop a whole tuple with probability 1 - x), ``"inp"`` (insert all,
        probe with probability x) or ``"pni"`` (probe all, insert with probability x). PNI is the
        best random strategy (Theorem 3; the paper's conclusion names INP by mistake).
    x_left, x_right
        The fractions ``x_L``, ``x_R`` (eqs. 10-15). A controller may change them between batches
        with :meth:`set_fractions`.
    seed
        Seed of the random generator (one uniform per tuple, in processing order).

    Notes
    -----
    Of the ``analytics`` verbs only the shedders' own apply: :meth:`decide` is a batch form (one
    decision per tuple, returned; it advances the generator) and :meth:`set_fractions` a setter
    returning ``self``. A random strategy keeps no window, so there is nothing to ``update``,
    ``slide``, ``merge`` or ``report``.

    Examples
    --------
    >>> s = LoadShedder("pni", x_left=0.5, x_right=1.0, seed=7)
    >>> d = s.decide(np.array([True, True, False, False]), np.zeros(4, np.uint64), np.arange(4))
    >>> d.probe.tolist(), d.insert[2:].tolist(), d.p_insert.tolist()
    ([True, True, True, True], [True, True], [0.5, 0.5, 1.0, 1.0])

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005. §3.3.
    """

    def __init__(
        self, strategy: str = "pni", x_left: float = 1.0, x_right: float = 1.0, seed: int | None = None
    ) -> None:
        if strategy not in RANDOM_STRATEGIES:
            raise ValueError(f"strategy: expected one of {', '.join(RANDOM_STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy
        self.x_left = _fraction("x_left", x_left)
        self.x_right = _fraction("x_right", x_right)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def set_fractions(self, x_left: float, x_right: float) -> Self:
        """Change ``x_L``, ``x_R`` (e.g. a controller's new optimum); applies to later decisions."""
        self.x_left = _fraction("x_left", x_left)
        self.x_right = _fraction("x_right", x_right)
        return self

    def decide(self, is_left: np.ndarray, codes: np.ndarray, ts: np.ndarray) -> Decisions:
        """One uniform draw per tuple (in the given order); flags and probabilities per strategy."""
        is_left = np.asarray(is_left, dtype=bool)
        u = self._rng.random(len(is_left))
        x = np.where(is_left, self.x_left, self.x_right)
        return Decisions(*_decide_random(self.strategy, u, x))

    def to_bytes(self) -> bytes:
        """Parameters and generator state: a version byte, then JSON."""
        state = {"params": self._get_params(), "rng": self._rng.bit_generator.state}
        return bytes([_VERSION]) + json.dumps(state).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LoadShedder:
        """Inverse of :meth:`to_bytes`: the same decisions follow."""
        if not data or data[0] != _VERSION:
            raise ValueError(f"data: unsupported LoadShedder state version {data[:1]!r}")
        state = json.loads(data[1:].decode())
        obj = cls(**state["params"])
        obj._rng.bit_generator.state = state["rng"]
        return obj


@dataclass(frozen=True)
class MaxSubsetPlan:
    """Figure 2's assignment: the known key codes, those admitted fully, the partial one and its PNI x.

    ``unseen`` is the probability given to keys absent from the frequency model: 1 when every
    known component fit the budget, else 0 (they rank last, with an estimated output of 0).
    """

    keys: np.ndarray
    full: np.ndarray
    partial: int | None
    x_left: float
    x_right: float
    unseen: float
    expected_output_rate: float
    expected_cost: float


class OnlineMaxSubset(Base):
    """Semantic load shedding, the Online Max-Subset strategy (seed 003 §3.2.2, Figure 2).

    For each join-key value v, with per-key rates ``λ_L(v) = f_L(v)·λ_L`` and ``λ_R(v)`` estimated
    from the last ``history_s`` seconds: ``λ_out(v) = λ_L(v)·λ_R(v)·(T_L + T_R)`` (eq. 5),
    ``C(v) = (λ_L(v) + λ_R(v))·C_u + λ_out(v)·C_p`` (eq. 7) and ``P(v) = λ_out(v)/C(v)`` (eq. 8).
    Components are admitted in decreasing ``P(v)`` (ties: smaller key code first) while the total
    cost fits ``budget``; the first that does not fit gets PNI with the remaining budget, the rest
    probability 0 (their tuples are neither inserted nor probe).

    At each :meth:`decide` call (one micro-batch) the plan is recomputed. With ``include_batch``
    (default) the batch's keys are added to the model first: a micro-batch engine has the whole
    batch before processing it, so the model covers the last ``history_s`` seconds up to and
    including the batch (partners that arrive in the same batch are known). Without it the model
    covers earlier batches only, as a tuple-at-a-time engine would know it; the first batch, with
    no model yet, is admitted whole. Departures from the paper, which assumes the distribution is
    known: the model is estimated from recent arrivals (a key whose partners arrive only later looks
    like a zero-output component and is shed first); keys absent from the model rank last with an
    estimated output of 0 (admitted only if every known component fits); maintaining the model is
    not charged to the budget.

    Verbs (the ``analytics`` convention): :meth:`update` adds arrivals to the frequency model and
    returns ``self``; the model's window (``history_s``) slides with their clock, so there is no
    ``slide()``, and no ``merge``. :meth:`report` reads the current plan (:meth:`plan`).
    :meth:`decide` is the batch form: it learns the batch (``include_batch``), plans and returns
    one decision per tuple.

    Parameters
    ----------
    window_left_s, window_right_s
        The join's windows ``T_L``, ``T_R`` (seconds).
    cu_s, cp_s
        ``C_u``, ``C_p`` (seconds); a controller may update them (plain attributes).
    budget
        CPU seconds per second available to the join.
    history_s
        Seconds of past input the frequency model uses (default: ``2·max(T_L, T_R)``).
    include_batch
        Whether the model includes the batch being decided (see above).
    seed
        Seed of the random generator used for the partial component.

    Examples
    --------
    Key 1 arrives on both sides, key 2 on the left only (no output): key 1 is kept whole, key 2
    gets PNI on what is left of the budget, unseen keys are dropped.

    >>> ms = OnlineMaxSubset(1.0, 1.0, cu_s=0.01, cp_s=0.01, budget=0.075, history_s=10, seed=1)
    >>> ts = np.arange(40) * 250_000_000                        # 4 tuples/s for 10 s
    >>> left = np.arange(40) % 2 == 0
    >>> codes = np.where(left & (np.arange(40) % 4 == 0), 2, 1).astype(np.uint64)
    >>> d = ms.decide(left, codes, ts)
    >>> p = ms.plan()
    >>> p.full.tolist(), p.partial, p.unseen, round(p.expected_cost, 3)
    ([1], 2, 0.0, 0.075)

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005.
       §3.2.2, eqs. (5)-(8), Figure 2.
    """

    def __init__(
        self,
        window_left_s: float,
        window_right_s: float,
        cu_s: float,
        cp_s: float,
        budget: float,
        history_s: float | None = None,
        include_batch: bool = True,
        seed: int | None = None,
    ) -> None:
        for name, value in (
            ("window_left_s", window_left_s),
            ("window_right_s", window_right_s),
            ("cu_s", cu_s),
            ("cp_s", cp_s),
            ("budget", budget),
        ):
            if not (math.isfinite(float(value)) and float(value) >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if history_s is not None and not (math.isfinite(float(history_s)) and float(history_s) > 0):
            raise ValueError(f"history_s: expected a number > 0 seconds, got {history_s!r}")
        self.window_left_s = float(window_left_s)
        self.window_right_s = float(window_right_s)
        self.cu_s = float(cu_s)
        self.cp_s = float(cp_s)
        self.budget = float(budget)
        self.history_s = history_s
        self.include_batch = bool(include_batch)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self.strategy = "max-subset" if self.include_batch else "max-subset-prior"
        self._history: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()
        self._first_ns: int | None = None
        self._clock_ns: int | None = None

    @property
    def _history_ns(self) -> int:
        h = self.history_s if self.history_s is not None else 2 * max(self.window_left_s, self.window_right_s)
        return max(1, round(h * 1e9))

    def update(self, is_left: np.ndarray, codes: np.ndarray, ts: np.ndarray) -> Self:
        """Add arrivals to the frequency model (:meth:`decide` does it for its batch first)."""
        ts = np.asarray(ts, dtype=np.int64)
        if len(ts) == 0:
            return self
        self._history.append((np.asarray(is_left, dtype=bool), np.asarray(codes, dtype=np.uint64), ts))
        tmin, tmax = int(ts.min()), int(ts.max())
        self._first_ns = tmin if self._first_ns is None else min(self._first_ns, tmin)
        self._clock_ns = tmax if self._clock_ns is None else max(self._clock_ns, tmax)
        horizon = self._clock_ns - self._history_ns
        while self._history and int(self._history[0][2].max()) < horizon:
            self._history.popleft()
        return self

    def plan(self, *, since_ns: int | None = None) -> MaxSubsetPlan:
        """Lines 1-14 of Figure 2 on the current frequency model.

        The model covers the last ``history_s`` seconds, extended back to ``since_ns`` if given
        (:meth:`decide` passes the batch's first timestamp, so a batch longer than the history is
        modelled whole).
        """
        empty = np.zeros(0, dtype=np.uint64)
        if not self._history or self._clock_ns is None or self._first_ns is None:
            return MaxSubsetPlan(empty, empty, None, 1.0, 1.0, 1.0, math.nan, math.nan)
        horizon = self._clock_ns - self._history_ns
        if since_ns is not None:
            horizon = min(horizon, since_ns)
        side = np.concatenate([h[0] for h in self._history])
        codes = np.concatenate([h[1] for h in self._history])
        ts = np.concatenate([h[2] for h in self._history])
        keep = ts >= horizon
        side, codes = side[keep], codes[keep]
        span_s = (self._clock_ns - max(horizon, self._first_ns)) / 1e9
        if span_s <= 0 or len(codes) == 0:
            return MaxSubsetPlan(empty, empty, None, 1.0, 1.0, 1.0, math.nan, math.nan)
        keys, inverse = np.unique(codes, return_inverse=True)
        rate_l = np.bincount(inverse[side], minlength=len(keys)) / span_s
        rate_r = np.bincount(inverse[~side], minlength=len(keys)) / span_s
        t_sum = self.window_left_s + self.window_right_s
        out = rate_l * rate_r * t_sum  # eq. (5)
        cost = (rate_l + rate_r) * self.cu_s + out * self.cp_s  # eq. (7)
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(cost > 0, out / cost, 0.0)  # eq. (8)
        order = np.lexsort((keys, -priority))
        cum = np.cumsum(cost[order])
        n_full = int(np.searchsorted(cum, self.budget * (1 + 1e-12), side="right"))
        full = np.sort(keys[order[:n_full]])
        exp_out = float(out[order[:n_full]].sum())
        exp_cost = float(cum[n_full - 1]) if n_full else 0.0
        if n_full == len(keys):
            return MaxSubsetPlan(keys, full, None, 1.0, 1.0, 1.0, exp_out, exp_cost)
        j = order[n_full]
        model = JoinCostModel(
            rate_l[j], rate_r[j], self.window_left_s, self.window_right_s, 1.0, self.cu_s, self.cp_s
        )
        part = model.optimum("pni", max(0.0, self.budget - exp_cost))
        return MaxSubsetPlan(
            keys,
            full,
            int(keys[j]),
            part.x_left,
            part.x_right,
            0.0,
            exp_out + part.output_rate,
            exp_cost + part.cost,
        )

    def report(self) -> MaxSubsetPlan:
        """The plan on the current frequency model (:meth:`plan` with no argument); reads only."""
        return self.plan()

    def decide(self, is_left: np.ndarray, codes: np.ndarray, ts: np.ndarray) -> Decisions:
        """Lines 15-20 of Figure 2 for one batch's tuples (processing order); the model learns the batch."""
        is_left = np.asarray(is_left, dtype=bool)
        codes = np.asarray(codes, dtype=np.uint64)
        ts = np.asarray(ts, dtype=np.int64)
        if self.include_batch and len(ts):
            self.update(is_left, codes, ts)
            plan = self.plan(since_ns=int(ts.min()))
        else:
            plan = self.plan()
        u = self._rng.random(len(codes))
        prob = np.full(len(codes), plan.unseen)
        prob[np.isin(codes, plan.keys)] = 0.0
        prob[np.isin(codes, plan.full)] = 1.0
        if plan.partial is not None:
            partial = codes == np.uint64(plan.partial)
        else:
            partial = np.zeros(len(codes), dtype=bool)
        whole = prob > 0
        insert, probe = whole.copy(), whole.copy()
        p_insert, p_probe = prob.copy(), prob.copy()
        if partial.any():
            x = np.where(is_left, plan.x_left, plan.x_right)
            ins, prb, pin, ppr = _decide_random("pni", u, x)
            insert[partial], probe[partial] = ins[partial], prb[partial]
            p_insert[partial], p_probe[partial] = pin[partial], ppr[partial]
        if not self.include_batch:
            self.update(is_left, codes, ts)
        return Decisions(insert, probe, p_insert, p_probe)
