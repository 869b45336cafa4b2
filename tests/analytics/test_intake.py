"""The intake drop box (``analytics.sampling.intake_lines``): each line of a packets message kept by
a hash of its position, against a line-at-a-time oracle in Python integers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.sampling import intake_lines, position_hash

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def oracle_hash(partition: int, offset: int, index: int) -> int:
    return _mix(index ^ _mix((partition * GOLDEN + offset + GOLDEN) & MASK))


def oracle_lines(value: bytes, partition: int, offset: int, keep: float) -> tuple[bytes, int]:
    """Line by line: a line (with its newline) is kept when its position's hash is below keep·2^64."""
    if keep >= 1 or not value:
        return value, 0
    lines = [line + b"\n" for line in value.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # the last piece has no newline (empty when the value ends in one)
    if not lines[-1]:
        lines.pop()
    bound = int(keep * 2.0**64)
    kept, dropped = [], 0
    for i, line in enumerate(lines):
        if oracle_hash(partition, offset, i) < bound:
            kept.append(line)
        elif line != b"\n":
            dropped += 1
    return b"".join(kept), dropped


def records_of(value: bytes) -> list[bytes]:
    """What a decoder reads: the non-empty lines."""
    return [line for line in value.split(b"\n") if line]


lines = st.lists(
    st.one_of(
        st.just(b""),
        st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")).map(lambda b: b.replace(b"\r", b"")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    lines,
    st.booleans(),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.sampled_from([1.0, 0.5, 0.25, 0.125, 0.0625, 0.3]),
)
def test_the_kept_lines_are_the_oracles(
    body: list[bytes], newline_at_end: bool, partition: int, offset: int, keep: float
) -> None:
    value = b"\n".join(body) + (b"\n" if newline_at_end and body else b"")
    got, dropped = intake_lines(value, partition, offset, keep)
    expected, lost = oracle_lines(value, partition, offset, keep)
    assert (records_of(got), dropped) == (records_of(expected), lost)


def test_the_hash_is_the_oracles() -> None:
    rng = np.random.default_rng(1)
    for partition, offset in [(0, 0), (3, 17), (2**31 - 1, 2**62), (1, 123456789)]:
        index = rng.integers(0, 10_000, 50)
        got = position_hash(partition, offset, index).tolist()
        assert got == [oracle_hash(partition, offset, int(i)) for i in index]


def test_the_share_kept_is_the_fraction_and_the_samples_are_nested() -> None:
    value = b"".join(b"%d,x,y\n" % i for i in range(2_000))
    kept = {}
    for keep in (0.5, 0.25, 0.125):
        total = dropped = 0
        kept[keep] = set()
        for offset in range(50):  # 100,000 lines
            out, lost = intake_lines(value, 4, offset, keep)
            total += 2_000
            dropped += lost
            kept[keep] |= {(offset, line) for line in out.splitlines()}
        assert len(kept[keep]) == total - dropped
        # 5 standard deviations of a Binomial(100000, keep)
        assert abs(len(kept[keep]) - keep * total) < 5 * (total * keep * (1 - keep)) ** 0.5
    assert kept[0.125] <= kept[0.25] <= kept[0.5]
    # another offset, another draw: the message's lines are not all kept or all dropped together
    assert 0 < len(intake_lines(value, 4, 99, 0.5)[0].splitlines()) < 2_000
