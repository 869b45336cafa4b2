"""``[resources]``: the machine's budgets for the queries, and the default QoS ranges of their knobs.

The budgets are what ``netmon explain`` checks the cost model's estimates against (seed 000 §4,
(AN-15) and (AN-17); seed 004 §4.3, budgets C and M). The CPU budget is in CPU seconds per second
(1.0 = one core kept busy), the memory budget in bytes (``"512m"``, ``"2g"``, ``"65536"``). A
``reserve`` is kept free of both for bursts and adaptation delays (seed 004 §4.1), so a plan fits
when its estimate is at most ``(1 - reserve) · budget`` (seed 000's headroom, §4: "to keep 20 %
spare, use the bound 0.8").

The QoS ranges bound what a resource manager may do to a query that does not fit, relative to the
query's configured values: a window may shrink to
``window_min_fraction`` of its configured length, a sub-window (the granularity) may coarsen to
``sub_window_max_factor`` times its configured length, and sampling may keep no less than
``keep_min`` of the records (seed 000 §5.2, the lower bound ℓ_k of a drop box), or per query
``keep_min_by_query``; ``importance`` weights a query's answer (seed 002's weighted queries). The
running manager (``pipeline.resource_manager``) also reads these from a control file a user may
change at run time (``netmon tune``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from netmon.config.checks import expect, positive

__all__ = ["ResourcesConfig", "parse_bytes"]

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int | None:
    """``"512m"`` → 536870912 bytes (binary units k, m, g, t; a plain number is bytes); None if not a size.

    >>> parse_bytes("2g"), parse_bytes("1.5k"), parse_bytes("64"), parse_bytes("lots")
    (2147483648, 1536, 64, None)
    """
    found = _SIZE.match(text)
    if not found:
        return None
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


@dataclass(frozen=True, kw_only=True)
class ResourcesConfig:
    """The budgets and QoS ranges: ``[resources]``."""

    #: CPU seconds per second the queries may use (1.0 = one core; 2.0 = two cores)
    cpu_budget: float = 1.0
    #: bytes of operator state the queries may hold, e.g. "512m"
    memory_budget: str = "512m"
    #: the share of both budgets kept free (bursts, adaptation delays): 0 <= reserve < 1
    reserve: float = 0.2
    #: the shortest window a query may be cut to, as a fraction of its configured window_s
    window_min_fraction: float = 0.25
    #: the coarsest sub-window a query may use, as a multiple of its configured sub_window_s
    sub_window_max_factor: float = 4.0
    #: seed 004 §4.3's coarse step, ``p``: the manager tries f = (p − j)/p, j = 0..p, for the
    #: ranged top-k and distinct queries' sub-windows before it reduces windows (0: no coarse step)
    granularity_steps: int = 2
    #: the lowest sampling fraction a drop box may keep (seed 000 §5.2, lower bound ℓ)
    keep_min: float = 0.1
    #: run the resource manager (pipeline.resource_manager): under overload, drop boxes before
    #: the packet-weighted top-k queries, their rows marked approximate. Off by default: a replay
    #: that falls behind should wait for exact answers; a live monitor should not fall behind.
    manage: bool = False
    #: seed 002's weighted queries: the value of a query's answer per unit kept, by query name
    #: (default 1); the manager's knapsack keeps the more important queries whole first
    importance: dict[str, float] = field(default_factory=dict)
    #: per-query lowest fraction, by query name (default ``keep_min``): 1 exempts a query
    keep_min_by_query: dict[str, float] = field(default_factory=dict)
    #: the lowest fraction of records the intake drop box keeps before the decode, used only when
    #: every query's drop box at its floor is not enough (1: never sample before the decode)
    intake_min: float = 0.0625
    #: when > 0, ``netmon pipeline`` admits the configured queries at this input rate (packets/s)
    #: and refuses, in one line each, those whose estimate does not fit the budgets (seed 004 §4.1)
    admission_rate_pps: float = 0.0

    def __post_init__(self) -> None:
        where = "[resources]"
        positive(where, "cpu_budget", self.cpu_budget)
        size = parse_bytes(self.memory_budget) if isinstance(self.memory_budget, str) else None
        expect(bool(size), where, "memory_budget", "a size such as '512m' or '2g'", self.memory_budget)
        ok = isinstance(self.reserve, float | int) and 0 <= self.reserve < 1
        expect(ok, where, "reserve", "a fraction in [0, 1)", self.reserve)
        frac = self.window_min_fraction
        ok = isinstance(frac, float | int) and math.isfinite(frac) and 0 < frac <= 1
        expect(ok, where, "window_min_fraction", "a fraction in (0, 1]", frac)
        factor = self.sub_window_max_factor
        ok = isinstance(factor, float | int) and math.isfinite(factor) and factor >= 1
        expect(ok, where, "sub_window_max_factor", "a number >= 1", factor)
        steps = self.granularity_steps
        ok = isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0
        expect(ok, where, "granularity_steps", "an integer >= 0", steps)
        ok = isinstance(self.keep_min, float | int) and 0 < self.keep_min <= 1
        expect(ok, where, "keep_min", "a fraction in (0, 1]", self.keep_min)
        ok = isinstance(self.intake_min, float | int) and not isinstance(self.intake_min, bool)
        expect(ok and 0 < self.intake_min <= 1, where, "intake_min", "a fraction in (0, 1]", self.intake_min)
        expect(isinstance(self.manage, bool), where, "manage", "true or false", self.manage)
        for name, value in self.importance.items():
            ok = isinstance(value, float | int) and not isinstance(value, bool) and math.isfinite(value)
            expect(ok and value >= 0, where, f"importance.{name}", "a number >= 0", value)
        for name, value in self.keep_min_by_query.items():
            ok = isinstance(value, float | int) and not isinstance(value, bool) and 0 < value <= 1
            expect(ok, where, f"keep_min_by_query.{name}", "a fraction in (0, 1]", value)
        rate = self.admission_rate_pps
        ok = isinstance(rate, float | int) and math.isfinite(rate) and rate >= 0
        expect(ok, where, "admission_rate_pps", "a rate >= 0 (0: no admission check)", rate)

    def keep_min_of(self, query: str) -> float:
        """The lowest fraction query ``query``'s drop box may keep."""
        return float(self.keep_min_by_query.get(query, self.keep_min))

    @property
    def memory_bytes(self) -> int:
        """``memory_budget`` in bytes."""
        return parse_bytes(self.memory_budget) or 0

    @property
    def cpu_bound(self) -> float:
        """The CPU an admitted plan may use: ``(1 - reserve) · cpu_budget``."""
        return (1.0 - self.reserve) * self.cpu_budget

    @property
    def memory_bound(self) -> float:
        """The state an admitted plan may hold, bytes: ``(1 - reserve) · memory_budget``."""
        return (1.0 - self.reserve) * self.memory_bytes
