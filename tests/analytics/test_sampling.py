"""Drop boxes on records (analytics.sampling): the vectorized sample equals its one-record oracle,
keeps the asked fraction, and its Horvitz–Thompson intervals cover the exact counts."""

from __future__ import annotations

import numpy as np
import pytest

from analytics.sampling import (
    ExactSample,
    count_interval,
    record_hash,
    sample_mask,
    scaled,
    threshold,
)


def _records(seed: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "ts": np.sort(rng.integers(1_700_000_000_000_000, 1_700_000_060_000_000, n)),
        "wire_len": rng.integers(40, 1514, n),
        "src_port": rng.integers(0, 65536, n),
        "dst_port": rng.choice([53, 80, 443, 0], n),
        "proto": rng.choice([6, 17, 1], n),
    }


@pytest.mark.parametrize(("seed", "keep"), [(1, 0.1), (2, 0.37), (3, 0.9), (4, 1.0)])
def test_the_vectorized_sample_is_the_oracles_record_by_record(seed: int, keep: float) -> None:
    cols = _records(seed, 3000)
    mask = sample_mask(
        record_hash(*(cols[k] for k in ("ts", "wire_len", "src_port", "dst_port", "proto"))), keep
    )
    rows = [{k: int(v[i]) for k, v in cols.items()} for i in range(3000)]
    kept, total = ExactSample(keep, weight="bytes").update_many(rows).report()
    assert np.flatnonzero(mask).tolist() == kept
    assert int(scaled(cols["wire_len"][mask].sum(), keep)) == total


def test_the_kept_share_is_the_fraction_and_each_record_keeps_its_fate() -> None:
    cols = _records(5, 200_000)
    hashes = record_hash(cols["ts"], cols["wire_len"], cols["src_port"], cols["dst_port"], cols["proto"])
    for keep in (0.05, 0.25, 0.5):
        share = sample_mask(hashes, keep).mean()
        assert abs(share - keep) < 4 * np.sqrt(keep * (1 - keep) / len(hashes)), (keep, share)
    # nested: a record kept at 0.25 is kept at 0.5 (one threshold on one hash)
    assert not (sample_mask(hashes, 0.25) & ~sample_mask(hashes, 0.5)).any()
    # the same record, hashed again (a rerun), has the same hash; a changed field another one
    again = record_hash(cols["ts"], cols["wire_len"], cols["src_port"], cols["dst_port"], cols["proto"])
    assert (again == hashes).all()
    moved = record_hash(cols["ts"] + 1, cols["wire_len"], cols["src_port"], cols["dst_port"], cols["proto"])
    assert (moved != hashes).mean() > 0.999


def test_keep_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="keep: expected a fraction in"):
        threshold(0.0)
    with pytest.raises(ValueError, match="keep: expected a fraction in"):
        threshold(1.5)


@pytest.mark.parametrize("keep", [0.05, 0.2, 0.6])
def test_the_interval_covers_the_true_count_95_percent_of_the_time(keep: float) -> None:
    """Many keys with true counts from 1 to 5,000, sampled by the record hash: the intervals built
    from the scaled counts cover the true count for about 95 % of them (and never far below)."""
    rng = np.random.default_rng(7)
    true = rng.integers(1, 5000, 2000)
    key = np.repeat(np.arange(len(true)), true)
    n = len(key)
    cols = _records(8, n)
    mask = sample_mask(
        record_hash(cols["ts"], cols["wire_len"], cols["src_port"], cols["dst_port"], cols["proto"]), keep
    )
    kept = np.bincount(key[mask], minlength=len(true))
    est = scaled(kept, keep)
    bounds = np.array([count_interval(float(e), keep) for e in est])
    covered = (bounds[:, 0] <= true) & (true <= bounds[:, 1])
    assert covered.mean() >= 0.93, covered.mean()
    # the estimate is unbiased: its total is within a few standard errors of the truth
    se = np.sqrt(true.sum() * (1 - keep) / keep)
    assert abs(int(est.sum()) - int(true.sum())) < 4 * se


def test_exact_answers_are_their_own_interval_and_a_smaller_fraction_widens_it() -> None:
    assert count_interval(1234, 1.0) == (1234.0, 1234.0)
    wide, narrow = count_interval(1000, 0.1), count_interval(1000, 0.5)
    assert wide[0] < narrow[0] < 1000 < narrow[1] < wide[1]
