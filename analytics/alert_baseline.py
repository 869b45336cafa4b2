"""A learned normal for one alert subject: exponentially weighted mean and variance with a warm-up.

An alert rule in ``mode = "baseline"`` (docs/alerts.md) keeps one :class:`EwmaBaseline` per
(rule, subject, column) and compares each new value with the band the baseline's history draws,
instead of with one global number. The recursion is the incremental weighted mean and variance of
Finch (2009, eq. 124 and 143): with weight ``w_n`` on the n-th value ``x``,

    d = x - mean;  mean += w_n * d;  var = (1 - w_n) * (var + w_n * d**2)

which is *exactly* the weighted mean and (population) variance of all values seen, each value
``x_i`` weighted ``w_i * prod_{j > i} (1 - w_j)``. During the warm-up (the first ``warmup``
values) ``w_n = 1 / n``, so the baseline is the plain mean and variance of those values; after it
``w_n = max(alpha, 1 / n)``: older values fade with factor ``1 - alpha`` per value, so a subject
whose normal drifts (a server that gets busier) carries its band with it.
"""

from __future__ import annotations

import math
import struct
from typing import Self

__all__ = ["EwmaBaseline"]

_STATE = struct.Struct("<BdIQdd")  # version, alpha, warmup, n, mean, var
_VERSION = 1


class EwmaBaseline:
    """Online mean and variance of one subject's values, equal weights during a warm-up, then EWMA.

    Parameters
    ----------
    alpha
        Weight of each new value once warm (``0 < alpha <= 1``); the memory is about ``1/alpha``
        values.
    warmup
        Values needed before the baseline is :attr:`warm` (>= 1); they are averaged with equal
        weights.

    The band (:meth:`upper`) is ``max(mean + sensitivity * sd, min_ratio * mean)``: the second term
    keeps a subject whose values barely varied so far (a few identical values, ``sd = 0``) from
    alerting on an ordinary wobble.

    Examples
    --------
    >>> b = EwmaBaseline(alpha=0.5, warmup=2)
    >>> for x in (10, 12, 14):
    ...     _ = b.update(x)
    >>> b.n, b.mean, round(b.variance, 3), b.warm
    (3, 12.5, 2.75, True)
    >>> EwmaBaseline.from_bytes(b.to_bytes()).mean
    12.5

    References
    ----------
    T. Finch, "Incremental calculation of weighted mean and variance", University of Cambridge
    Computing Service, 2009, §§ 5-9.
    """

    def __init__(self, alpha: float = 0.1, warmup: int = 3) -> None:
        if not (isinstance(alpha, int | float) and 0 < alpha <= 1):
            raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
        if not (isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 1):
            raise ValueError(f"warmup must be an integer >= 1, got {warmup!r}")
        self.alpha = float(alpha)
        self.warmup = warmup
        self._n = 0
        self._mean = 0.0
        self._var = 0.0

    def __repr__(self) -> str:
        return f"EwmaBaseline(alpha={self.alpha!r}, warmup={self.warmup!r})"

    def update(self, x: float) -> Self:
        """Learn one value (non-finite values are ignored: they carry no level)."""
        if not math.isfinite(x):
            return self
        self._n += 1
        w = 1.0 / self._n if self._n <= self.warmup else max(self.alpha, 1.0 / self._n)
        d = x - self._mean
        self._mean += w * d
        self._var = (1.0 - w) * (self._var + w * d * d)
        return self

    # --- queries ------------------------------------------------------------------------------

    @property
    def n(self) -> int:
        """Values learned so far."""
        return self._n

    @property
    def mean(self) -> float:
        return self._mean

    @property
    def variance(self) -> float:
        return max(self._var, 0.0)  # rounding can leave -1e-17

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)

    @property
    def warm(self) -> bool:
        """The warm-up is over: the band means something."""
        return self._n >= self.warmup

    def upper(self, sensitivity: float, min_ratio: float = 1.0) -> float:
        """The top of the normal band: ``max(mean + sensitivity * sd, min_ratio * mean)``."""
        return max(self._mean + sensitivity * self.sd, min_ratio * self._mean)

    # --- state --------------------------------------------------------------------------------

    def state(self) -> list[float]:
        """``[n, mean, variance]``: the learned part, as JSON-friendly numbers."""
        return [float(self._n), self._mean, self._var]

    @classmethod
    def from_state(cls, state: list[float], *, alpha: float = 0.1, warmup: int = 3) -> EwmaBaseline:
        """A baseline with these parameters continuing from :meth:`state`."""
        n, mean, var = state
        b = cls(alpha=alpha, warmup=warmup)
        b._n, b._mean, b._var = int(n), float(mean), float(var)
        return b

    def to_bytes(self) -> bytes:
        """Parameters and state with a version byte (little-endian, 37 bytes)."""
        return _STATE.pack(_VERSION, self.alpha, self.warmup, self._n, self._mean, self._var)

    @classmethod
    def from_bytes(cls, data: bytes) -> EwmaBaseline:
        if len(data) != _STATE.size or data[0] != _VERSION:
            raise ValueError(f"not an EwmaBaseline state (version {_VERSION}, {_STATE.size} bytes)")
        _, alpha, warmup, n, mean, var = _STATE.unpack(data)
        return cls.from_state([n, mean, var], alpha=alpha, warmup=warmup)
