"""EwmaBaseline against brute force: the weighted mean and variance of every value seen, after each update."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from analytics.alert_baseline import EwmaBaseline


def brute(values: list[float], alpha: float, warmup: int) -> tuple[float, float]:
    """Each value's weight written out: w_i * prod_{j>i} (1 - w_j), then the weighted moments."""
    n = len(values)
    w = [1.0 / i if i <= warmup else max(alpha, 1.0 / i) for i in range(1, n + 1)]
    weights = np.array([w[i] * np.prod([1 - w[j] for j in range(i + 1, n)]) for i in range(n)])
    x = np.array(values)
    mean = float((weights * x).sum())
    return mean, float((weights * (x - mean) ** 2).sum())


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("warmup", [1, 3, 10])
def test_mean_and_variance_equal_the_weighted_moments_after_every_update(alpha: float, warmup: int) -> None:
    rng = np.random.default_rng(int(alpha * 100) + warmup)
    values = (rng.lognormal(3, 1, 40) * rng.choice([1, 1, 1, 5], 40)).round(1).tolist()  # skewed, jumps
    b = EwmaBaseline(alpha=alpha, warmup=warmup)
    for i, x in enumerate(values, 1):
        assert b.update(x) is b
        mean, var = brute(values[:i], alpha, warmup)
        assert b.n == i
        assert b.mean == pytest.approx(mean, rel=1e-9)
        assert b.variance == pytest.approx(var, rel=1e-9, abs=1e-9)
        assert b.warm == (i >= warmup)


def test_the_warm_up_is_the_plain_mean_and_population_variance() -> None:
    values = [120.0, 80.0, 101.0, 99.0, 250.0]
    b = EwmaBaseline(alpha=0.01, warmup=5)
    for x in values:
        b.update(x)
    assert b.mean == pytest.approx(statistics.fmean(values))
    assert b.variance == pytest.approx(statistics.pvariance(values))


def test_the_band_is_sd_above_the_mean_but_never_below_min_ratio_times_the_mean() -> None:
    b = EwmaBaseline(warmup=2).update(100).update(110)  # mean 105, sd 5
    assert b.upper(4) == pytest.approx(125)
    assert b.upper(4, min_ratio=2) == pytest.approx(210)
    flat = EwmaBaseline(warmup=2).update(50).update(50)  # sd 0: only the ratio keeps a band
    assert flat.upper(10) == 50 and flat.upper(10, 1.5) == 75


def test_non_finite_values_are_not_learned() -> None:
    b = EwmaBaseline().update(10).update(float("nan")).update(float("inf"))
    assert (b.n, b.mean) == (1, 10)


def test_state_and_bytes_round_trip_and_continue_identically() -> None:
    a = EwmaBaseline(alpha=0.2, warmup=2)
    for x in (5, 7, 30, 6):
        a.update(x)
    b = EwmaBaseline.from_bytes(a.to_bytes())
    c = EwmaBaseline.from_state(a.state(), alpha=0.2, warmup=2)
    assert repr(b) == repr(a) == "EwmaBaseline(alpha=0.2, warmup=2)"
    for x in (9, 100):
        a.update(x), b.update(x), c.update(x)
    assert a.state() == b.state() == c.state()
    with pytest.raises(ValueError, match="not an EwmaBaseline state"):
        EwmaBaseline.from_bytes(b"\x02" + a.to_bytes()[1:])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"warmup": 0}, "warmup"),
        ({"warmup": 2.5}, "warmup"),
    ],
)
def test_parameters_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EwmaBaseline(**kwargs)
