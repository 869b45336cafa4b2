"""SubWindowDistinct and its oracle against brute force: conventions, HLL accuracy, laws, bytes, errors."""

from __future__ import annotations

import math
import random
import struct
from collections import defaultdict

import pytest
from datasketches import hll_sketch, tgt_hll_type
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.distinct import ExactSlidingDistinct, SubWindowDistinct, java_round

# -- independent references -----------------------------------------------------------------------

_M64 = 0xFFFFFFFFFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = k * 0xFF51AFD7ED558CCD & _M64
    k ^= k >> 33
    k = k * 0xC4CEB9FE1A85EC53 & _M64
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes, seed: int) -> tuple[int, int]:
    """MurmurHash3_x64_128 (Appleby), written from the public algorithm for this test."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = seed
    n = len(data)
    for i in range(n // 16):
        k1 = int.from_bytes(data[16 * i : 16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8 : 16 * i + 16], "little")
        h1 ^= _rotl(k1 * c1 & _M64, 31) * c2 & _M64
        h1 = ((_rotl(h1, 27) + h2) * 5 + 0x52DCE729) & _M64
        h2 ^= _rotl(k2 * c2 & _M64, 33) * c1 & _M64
        h2 = ((_rotl(h2, 31) + h1) * 5 + 0x38495AB5) & _M64
    tail = data[16 * (n // 16) :]
    if len(tail) > 8:
        h2 ^= _rotl(int.from_bytes(tail[8:], "little") * c2 & _M64, 33) * c1 & _M64
    if tail:
        h1 ^= _rotl(int.from_bytes(tail[:8], "little") * c1 & _M64, 31) * c2 & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M64
    return h1, (h2 + h1) & _M64


def java_coupon(text: str) -> int:
    """Java ``BaseHllSketch.update(String)``: UTF-8 bytes, seed 9001, ``coupon(hash)``."""
    h0, h1 = murmur3_x64_128(text.encode("utf-8"), 9001)
    lz = 64 - h1.bit_length()
    return ((min(lz, 62) + 1) << 26) | (h0 & 0x3FFFFFF)


def content(data: bytes) -> tuple[str, object]:
    """What an HLL_8 sketch *holds*, independent of insertion order and estimator state.

    Coupon modes (LIST/SET): the set of coupons. HLL mode: the register bytes.
    """
    if data[:3] == b"NXS":  # exact-set synopsis bytes are canonical already
        return "set", data
    pre_ints, lg_k, mode = data[0] & 0x3F, data[3], data[7] & 3
    if mode == 2:
        return "registers", bytes(data[40 : 40 + 2**lg_k])
    n = (len(data) - 4 * pre_ints) // 4
    return "coupons", frozenset(c for c in struct.unpack_from(f"<{n}I", data, 4 * pre_ints) if c)


def brute_force(subs: list[list[tuple[str, str]]], n: int) -> list[dict[str, int]]:
    """After each slide k: distinct items per group over sub-windows k-n+1..k."""
    out = []
    for k in range(len(subs)):
        seen: dict[str, set[str]] = defaultdict(set)
        for sub in subs[max(0, k - n + 1) : k + 1]:
            for g, it in sub:
                if it:
                    seen[g].add(it)
        out.append({g: len(s) for g, s in seen.items()})
    return out


def feed(engine, subs: list[list[tuple[str, str]]]) -> list[dict[str, int]]:
    answers = []
    for sub in subs:
        for g, it in sub:
            engine.update(it, g)
        answers.append(engine.slide().report())
        assert answers[-1] == engine.estimate()  # report() is the window's {group: estimate}
    return answers


def random_subs(
    rng: random.Random, n_subs: int, universe: list[str], groups: list[str], p_empty: float = 0.2
):
    subs = []
    for _ in range(n_subs):
        if rng.random() < p_empty:
            subs.append([])
            continue
        subs.append([(rng.choice(groups), rng.choice(universe)) for _ in range(rng.randint(1, 30))])
    return subs


IPV4 = [f"10.0.{i // 256}.{i % 256}" for i in range(600)]
IPV6 = [f"2001:db8::{i:x}" for i in range(300)] + ["fe80::1%eth0", "::ffff:192.0.2.1", "::"]
TUPLES = [f"10.0.0.{i % 7},192.0.2.{i % 5},6,{40000 + i},443" for i in range(300)]


# -- the item encoding: the same coupons as Java/Spark ----------------------------------------------


def test_item_encoding_is_murmur3_of_utf8_with_seed_9001():
    items = ["10.0.0.1", "2001:db8::1", "fe80::1%eth0", "10.0.0.1,192.0.2.7,6,1234,80", "é", "a" * 37]
    sw = SubWindowDistinct(N=1, b=1, lg_k=12)
    for it in items:
        sw.update(it)
    kind, coupons = content(sw.synopsis(age=0))
    assert kind == "coupons"
    assert coupons == {java_coupon(it) for it in items}


def test_empty_items_are_ignored_in_both_modes_and_by_the_oracle():
    for eng in (SubWindowDistinct(2, 1), SubWindowDistinct(2, 1, exact=True), ExactSlidingDistinct(2, 1)):
        assert eng.update("", "g").update("x", "h").slide().estimate() == {"h": 1}


def test_java_round_is_half_up():
    # Java Math.round: floor(x + 0.5): 2.5 -> 3, -2.5 -> -2, 0.49999 -> 0 (unlike Python's round).
    assert [java_round(x) for x in (2.5, -2.5, 0.49999, 3.5, 1e6 + 0.5)] == [3, -2, 0, 4, 1_000_001]


# -- exact mode and the oracle against brute force ---------------------------------------------------


@pytest.mark.parametrize("universe", [IPV4, IPV6, TUPLES], ids=["ipv4", "ipv6", "tuple"])
@pytest.mark.parametrize("n", [1, 3, 7])
def test_exact_mode_and_oracle_equal_brute_force_after_every_slide(universe, n):
    rng = random.Random(n * 31 + len(universe))
    groups = ["192.0.2.1", "2001:db8::beef", "6", ""]
    subs = random_subs(rng, 40, universe, groups)
    want = brute_force(subs, n)
    assert feed(SubWindowDistinct(N=n * 5, b=5, exact=True), subs) == want
    assert feed(ExactSlidingDistinct(N=n * 5, b=5), subs) == want


def test_empty_sub_windows_expire_the_window():
    sw, ex = SubWindowDistinct(3, 1, exact=True), ExactSlidingDistinct(3, 1)
    subs = [[("g", "a"), ("g", "b")], [], [], [], [("g", "c")]]
    want = [{"g": 2}, {"g": 2}, {"g": 2}, {}, {"g": 1}]
    assert feed(sw, subs) == feed(ex, subs) == want == brute_force(subs, 3)
    assert [sw.is_empty(), ex.is_empty()] == [False, False]
    sw.slide().slide().slide()
    assert sw.is_empty() and sw.estimate() == {}


def test_a_group_in_only_one_sub_window_lives_exactly_n_slides():
    subs = [
        [("x", "1")],
        [("only", "a"), ("only", "b"), ("x", "2")],
        [("x", "3")],
        [("x", "4")],
        [("x", "5")],
    ]
    got = feed(SubWindowDistinct(3, 1, lg_k=8), subs)
    assert ["only" in a for a in got] == [False, True, True, True, False]
    assert got == brute_force(subs, 3)  # small counts: HLL is exact here


def test_hll_equals_exact_for_small_counts_in_coupon_mode():
    # DataSketches HLL stays exact (rounded) while in coupon mode; we check up to 2**lg_k / 16.
    for lg_k in (8, 10, 12):
        for seed in range(3):
            rng = random.Random(seed)
            universe = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(2**lg_k // 16)]
            subs = random_subs(rng, 30, universe, ["a", "b"])
            assert feed(SubWindowDistinct(4, 1, lg_k=lg_k), subs) == brute_force(subs, 4)


@pytest.mark.parametrize("lg_k", [10, 12])
def test_hll_large_counts_within_three_standard_errors(lg_k):
    # Many sliding windows over ~2k..20k distinct items, several seeds. A 3-sigma bound holds for
    # ~99.7% of independent estimates; overlapping windows are correlated, so we ask >= 98% within
    # 3 sigma, mean relative error below one sigma, and nothing beyond 5 sigma.
    sigma = 1.04 / math.sqrt(2**lg_k)
    errors = []
    for seed in range(4):
        rng = random.Random(seed)
        sw, ex = SubWindowDistinct(6, 1, lg_k=lg_k), ExactSlidingDistinct(6, 1)
        for _ in range(14):
            for g, size in (("big", rng.randint(2000, 4000)), ("mid", rng.randint(400, 900))):
                for _ in range(size):
                    item = f"{rng.getrandbits(28)}"
                    sw.update(item, g)
                    ex.update(item, g)
            est, truth = sw.slide().estimate(), ex.slide().estimate()
            assert est.keys() == truth.keys()
            errors += [abs(est[g] - truth[g]) / truth[g] for g in truth if truth[g] > 2**lg_k // 16]
    assert len(errors) > 50
    assert sum(e <= 3 * sigma for e in errors) / len(errors) >= 0.98
    assert sum(errors) / len(errors) <= sigma
    assert max(errors) <= 5 * sigma


def test_bounds_bracket_the_estimate_and_exact_bounds_are_points():
    sw = SubWindowDistinct(2, 1, lg_k=10)
    for i in range(5000):
        sw.update(str(i), "g")
    sw.slide()
    lo, hi = sw.bounds(2)["g"]
    assert lo <= sw.estimate()["g"] <= hi and lo < 5000 < hi
    lo1, hi1 = sw.bounds(1)["g"]
    assert lo <= lo1 and hi1 <= hi
    ex = ExactSlidingDistinct(2, 1).update("a", "g").slide()
    assert (
        ex.bounds()
        == {"g": (1.0, 1.0)}
        == SubWindowDistinct(2, 1, exact=True).update("a", "g").slide().bounds()
    )


# -- merge laws (hypothesis) ------------------------------------------------------------------------

events = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["g1", "g2", "2001:db8::1"]), st.integers(0, 60).map(str)), max_size=15
    ),
    min_size=1,
    max_size=6,
)


def _built(cls_kwargs, subs):
    cls, kwargs = cls_kwargs
    eng = cls(**kwargs)
    for sub in subs[:-1]:
        for g, it in sub:
            eng.update(it, g)
        eng.slide()
    for g, it in subs[-1]:  # the last one stays open: merge covers the open buffer too
        eng.update(it, g)
    eng.estimate()  # answers computed (and cached) before a merge must not survive it
    return eng


def _aligned(*parts):
    """Pad the parts to the same number of sub-windows, so the instances slid equally often."""
    n = max(len(p) for p in parts)
    return [p + [[] for _ in range(n - len(p))] for p in parts]


def _all_synopses(eng, groups=("g1", "g2", "2001:db8::1")):
    n = eng.N // eng.b
    return {(g, age): content(eng.synopsis(g, age)) for g in groups for age in range(n + 1)}


EXACT_KINDS = [
    (SubWindowDistinct, {"N": 4, "b": 2, "exact": True}),
    (ExactSlidingDistinct, {"N": 4, "b": 2}),
]
HLL_KINDS = [
    (SubWindowDistinct, {"N": 6, "b": 2, "lg_k": 4}),
    (SubWindowDistinct, {"N": 6, "b": 2, "lg_k": 8}),
]


@settings(max_examples=60, deadline=None)
@given(a=events, b=events, c=events)
def test_merge_is_associative_commutative_and_equals_one_engine_fed_both_exact(a, b, c):
    a, b, c = _aligned(a, b, c)
    both = [x + y + z for x, y, z in zip(a, b, c, strict=True)]
    for kind in EXACT_KINDS:
        ab_c = _built(kind, a).merge(_built(kind, b)).merge(_built(kind, c))
        a_bc = _built(kind, a).merge(_built(kind, b).merge(_built(kind, c)))
        cba = _built(kind, c).merge(_built(kind, b)).merge(_built(kind, a))
        one = _built(kind, both)
        for eng in (ab_c, a_bc, cba, one):
            eng.slide()
        assert ab_c.estimate() == a_bc.estimate() == cba.estimate() == one.estimate()
        assert one.estimate() == brute_force(both, 2)[-1]
        assert _all_synopses(ab_c) == _all_synopses(cba) == _all_synopses(one)


@settings(max_examples=60, deadline=None)
@given(a=events, b=events, c=events)
def test_merge_is_associative_and_commutative_on_sketch_content(a, b, c):
    # The laws hold on what the synopses hold (coupon sets or register arrays), and so on the
    # answers: a settled union's estimate depends on the registers only.
    a, b, c = _aligned(a, b, c)
    both = [x + y + z for x, y, z in zip(a, b, c, strict=True)]
    for kind in HLL_KINDS:
        ab_c = _built(kind, a).merge(_built(kind, b)).merge(_built(kind, c))
        a_bc = _built(kind, a).merge(_built(kind, b).merge(_built(kind, c)))
        cba = _built(kind, c).merge(_built(kind, b)).merge(_built(kind, a))
        one = _built(kind, both)
        assert _all_synopses(ab_c) == _all_synopses(a_bc) == _all_synopses(cba) == _all_synopses(one)
        for eng in (ab_c, a_bc, cba, one):
            eng.slide()
        assert ab_c.estimate() == a_bc.estimate() == cba.estimate() == one.estimate()


def test_merge_rejects_mismatches():
    a = SubWindowDistinct(4, 2)
    with pytest.raises(ValueError, match="^other: parameters differ"):
        a.merge(SubWindowDistinct(4, 2, lg_k=10))
    with pytest.raises(ValueError, match="^other: has slid 1 times"):
        a.merge(SubWindowDistinct(4, 2).slide())
    with pytest.raises(TypeError, match="^other:"):
        a.merge(ExactSlidingDistinct(4, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^other:"):
        ExactSlidingDistinct(4, 2).merge(a)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^other: has slid"):
        ExactSlidingDistinct(4, 2).merge(ExactSlidingDistinct(4, 2).slide())


# -- bytes ------------------------------------------------------------------------------------------


def _stream(seed: int, n_subs: int = 9):
    rng = random.Random(seed)
    return random_subs(rng, n_subs, IPV4 + IPV6, ["a", "b", "2001:db8::1"], p_empty=0.1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SubWindowDistinct(6, 2, lg_k=4),
        lambda: SubWindowDistinct(6, 2, lg_k=12),
        lambda: SubWindowDistinct(6, 2, exact=True),
        lambda: ExactSlidingDistinct(6, 2),
    ],
    ids=["hll4", "hll12", "exact", "oracle"],
)
def test_state_round_trip_behaves_identically_afterwards(make):
    first, rest = _stream(1)[:5], _stream(2)
    eng = make()
    feed(eng, first)
    eng.update("10.9.9.9", "a")  # something in the open buffer too
    copy = type(eng).from_bytes(eng.to_bytes())
    assert repr(copy) == repr(eng) and copy.slides == eng.slides
    assert copy.to_bytes() == eng.to_bytes()
    assert feed(copy, rest) == feed(eng, rest)
    assert copy.to_bytes() == eng.to_bytes()


@pytest.mark.parametrize("exact", [False, True])
def test_synopsis_bytes_feed_another_instance_to_the_same_answers(exact):
    # The streaming path: sub-window synopses computed elsewhere (Spark's hll_sketch_agg) are
    # unioned by this class with update_synopsis.
    subs = _stream(3, 12)
    src, dst = SubWindowDistinct(6, 2, lg_k=10, exact=exact), SubWindowDistinct(6, 2, lg_k=10, exact=exact)
    groups = ["a", "b", "2001:db8::1"]
    for sub in subs:
        for g, it in sub:
            src.update(it, g)
        for g in groups:
            dst.update_synopsis(src.synopsis(g, age=0), g)
        src.slide()
        dst.slide()
        assert dst.estimate() == src.estimate()
    assert dst.estimate() == brute_force(subs, 3)[-1]


def test_synopsis_accepts_other_register_widths_and_returns_spark_format():
    sk4 = hll_sketch(12, tgt_hll_type.HLL_4)
    for i in range(3000):
        sk4.update(str(i))
    sw = SubWindowDistinct(2, 1).update_synopsis(sk4.serialize_compact(), "g").slide()
    assert sw.estimate() == {"g": java_round(_settled(12, sk4).get_estimate())}
    out = hll_sketch.deserialize(sw.synopsis("g", age=1))
    assert out.tgt_type == tgt_hll_type.HLL_8 and not out.is_compact()  # Spark's updatable HLL_8
    assert hll_sketch.deserialize(sw.synopsis("nobody", age=1)).is_empty()
    assert hll_sketch.deserialize(sw.synopsis("g", age=2)).is_empty()  # not slid that far yet


def test_exact_synopsis_bytes_are_canonical():
    a = SubWindowDistinct(2, 1, exact=True).update("b", "g").update("a", "g")
    b = ExactSlidingDistinct(2, 1).update("a", "g").update("b", "g").update("a", "g")
    assert a.synopsis("g") == b.synopsis("g")
    assert ExactSlidingDistinct(2, 1).update_synopsis(a.synopsis("g"), "h").slide().estimate() == {"h": 2}


# -- parameter and input validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"N": 0, "b": 1}, "^N: expected a positive integer"),
        ({"N": 10, "b": -1}, "^b: expected a positive integer"),
        ({"N": 10.0, "b": 1}, "^N: expected a positive integer"),
        ({"N": True, "b": 1}, "^N: expected a positive integer"),
        ({"N": 10, "b": 3}, "^N: window 10 is not a multiple of the sub-window b=3"),
        ({"N": 10, "b": 1, "lg_k": 3}, "^lg_k: expected an integer in 4..21"),
        ({"N": 10, "b": 1, "lg_k": 22}, "^lg_k: expected an integer in 4..21"),
        ({"N": 10, "b": 1, "lg_k": 12.0}, "^lg_k:"),
        ({"N": 10, "b": 1, "exact": 1}, "^exact: expected True or False"),
    ],
)
def test_constructor_errors_name_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SubWindowDistinct(**kwargs)
    if set(kwargs) <= {"N", "b"}:
        with pytest.raises(ValueError, match=message):
            ExactSlidingDistinct(**kwargs)


def test_input_errors_name_the_argument():
    sw, ex = SubWindowDistinct(4, 2), ExactSlidingDistinct(4, 2)
    for eng in (sw, ex):
        with pytest.raises(TypeError, match="^item:"):
            eng.update(1234, "g")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="^group:"):
            eng.update("x", None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="^age: expected an integer in 0..2"):
            eng.synopsis("g", age=3)
        with pytest.raises(ValueError, match="^num_std_devs:"):
            eng.bounds(4)
        with pytest.raises(TypeError, match="^data:"):
            eng.update_synopsis("not bytes", "g")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^data: sketch has lg_k=10, expected 12"):
        sw.update_synopsis(hll_sketch(10).serialize_updatable(), "g")
    with pytest.raises(ValueError, match="^data: an exact-set synopsis given to an HLL-mode"):
        sw.update_synopsis(SubWindowDistinct(4, 2, exact=True).synopsis(), "g")
    with pytest.raises(ValueError, match="^data: not an HLL sketch"):
        sw.update_synopsis(b"\x00garbage", "g")
    with pytest.raises(ValueError, match="^data: not an exact-set synopsis"):
        ex.update_synopsis(sw.synopsis(), "g")
    with pytest.raises(ValueError, match="^data: truncated exact-set synopsis"):
        ex.update_synopsis(SubWindowDistinct(4, 2, exact=True).update("abc").synopsis()[:-1], "g")


def test_from_bytes_errors():
    good = SubWindowDistinct(4, 2).update("a").to_bytes()
    with pytest.raises(ValueError, match="^data: not a NSWD state"):
        SubWindowDistinct.from_bytes(ExactSlidingDistinct(4, 2).to_bytes())
    with pytest.raises(ValueError, match="^data: state version 9"):
        SubWindowDistinct.from_bytes(good[:4] + b"\x09" + good[5:])
    with pytest.raises(ValueError, match="^data: too short"):
        SubWindowDistinct.from_bytes(good[:10])
    with pytest.raises(ValueError, match="^data: truncated state"):
        SubWindowDistinct.from_bytes(good[:-3])
    with pytest.raises(ValueError, match="^data: trailing bytes"):
        ExactSlidingDistinct.from_bytes(ExactSlidingDistinct(4, 2).to_bytes() + b"x")
    with pytest.raises(TypeError, match="^data: expected bytes"):
        SubWindowDistinct.from_bytes("nope")  # type: ignore[arg-type]


def test_repr_and_clone_come_from_the_parameters():
    sw = SubWindowDistinct(N=60, b=1, lg_k=10, exact=False).update("a").slide()
    assert repr(sw) == "SubWindowDistinct(N=60, b=1, lg_k=10, exact=False)"
    fresh = sw.clone()
    assert repr(fresh) == repr(sw) and fresh.slides == 0 and fresh.is_empty()
    assert repr(ExactSlidingDistinct(4, 2)) == "ExactSlidingDistinct(N=4, b=2)"


def _settled(lg_k: int, *sketches: hll_sketch):
    """A union of ``sketches`` united once more with its own result (Spark: hll_union(sk, sk))."""
    from datasketches import hll_union

    u = hll_union(lg_k)
    for sk in sketches:
        u.update(sk)
    u.update(u.get_result(tgt_hll_type.HLL_8))
    return u


def test_settled_unions_answer_the_same_in_any_order():
    # Unsettled, DataSketches' union estimate depends on the order (HIP accumulator); settled,
    # it is the composite estimator of the registers, the same for every order.
    rng = random.Random(7)
    sketches = []
    for _ in range(60):
        sk = hll_sketch(12, tgt_hll_type.HLL_8)
        for _ in range(20):
            sk.update(str(rng.randrange(3000)))
        sketches.append(sk)
    answers = set()
    for _ in range(10):
        rng.shuffle(sketches)
        answers.add(_settled(12, *sketches).get_estimate())
        sw = SubWindowDistinct(60, 1)
        for sk in sketches:
            sw.update_synopsis(sk.serialize_updatable(), "g").slide()
        answers.add(float(sw.estimate()["g"]))
    assert len({java_round(a) for a in answers}) == 1


@pytest.mark.parametrize("lg_k", [4, 8, 12])
def test_a_group_in_one_sub_window_answers_as_a_union_of_one(lg_k):
    # A group with one synopsis in the window answers as the settled union of that one sketch.
    rng = random.Random(lg_k)
    sw = SubWindowDistinct(3, 1, lg_k=lg_k)
    sizes = {f"g{n}": n for n in (1, 7, 9, 100, 1000, 5000)}
    for g, n in sizes.items():
        for _ in range(n):
            sw.update(str(rng.getrandbits(40)), g)
    sw.slide()
    est, bnd = sw.estimate(), sw.bounds(2)
    for g in sizes:
        u = _settled(lg_k, hll_sketch.deserialize(sw.synopsis(g, age=1)))
        assert est[g] == java_round(u.get_estimate())
        assert bnd[g] == (u.get_lower_bound(2), u.get_upper_bound(2))
