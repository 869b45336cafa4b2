"""Every algorithm class in ``analytics`` (a ``Base`` subclass): what the style guide asks of all.

Each cites its paper in a ``References`` docstring section, no constructor takes a mutable
default (it would be shared by every instance and by ``clone()``), and the verbs follow the
package's convention: ``update``/``slide``/``merge`` return ``self``, ``report()`` only reads.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, is_dataclass
from typing import Any, Self

import numpy as np
import pandas as pd
import pytest

import analytics
from analytics._base import Base
from analytics.distinct import ExactSlidingDistinct, SubWindowDistinct
from analytics.join import ExactWindowJoin, SymmetricHashJoin
from analytics.shedding import OnlineMaxSubset
from analytics.topk import ExactSlidingTopK, SubWindowTopK
from analytics.topk_baselines import FrequentItemsTopK


def _classes() -> list[type]:
    found: dict[str, type] = {}
    for name in analytics.__all__:
        module = importlib.import_module(f"analytics.{name}")
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Base)
                and obj is not Base
                and not obj.__name__.startswith("_")
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CLASSES = _classes()


def test_the_walk_finds_the_algorithms() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {
        "SubWindowTopK",
        "ExactSlidingTopK",
        "SubWindowDistinct",
        "SymmetricHashJoin",
        "LoadShedder",
    } <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_docstring_cites_its_references(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    assert "References\n----------" in doc, f"{cls.__name__}: no References section"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_no_mutable_constructor_defaults(cls: type) -> None:
    for p in inspect.signature(cls.__init__).parameters.values():
        assert not isinstance(p.default, list | dict | set | bytearray), f"{cls.__name__}({p.name}=...)"


# -- the verb convention (``analytics`` package docstring) ------------------------------------------

#: Verbs that change state and return ``self`` wherever a class defines them.
SELF_VERBS = ("update", "update_many", "update_synopsis", "slide", "merge", "set_fractions")
CONVENTION = ("update", "slide", "merge", "report")
S = 10**9


@dataclass(frozen=True)
class Example:
    """How to build one class and feed it: ``feed(obj, i)`` is one ``update``-family call."""

    make: Callable[[], Any]
    feed: Callable[[Any, int], Any]


def _topk(cls: type) -> Example:
    # b = 1 record per sub-window, so every feed fills the open sub-window (count-based).
    return Example(
        lambda: cls(N=3, b=1, k=1),
        lambda o, i: o.update_many([f"10.0.0.{i % 2}"]) if i % 2 else o.update("10.0.0.9", weight=2),
    )


def _distinct(cls: type) -> Example:
    def feed(o: Any, i: int) -> Any:
        if i % 2:  # the open sub-window's synopsis of "g", united into "h"
            return o.update_synopsis(o.synopsis("g"), group="h")
        return o.update(f"10.0.0.{i}", group="g")

    return Example(lambda: cls(N=2, b=1), feed)


def _join(cls: type) -> Example:
    return Example(lambda: cls(1, 1), lambda o, i: o.update([i * S], ["a"], [i * S + 1], ["a"]))


EXAMPLES: dict[str, Example] = {
    "SubWindowTopK": _topk(SubWindowTopK),
    "ExactSlidingTopK": _topk(ExactSlidingTopK),
    "FrequentItemsTopK": _topk(FrequentItemsTopK),
    "SubWindowDistinct": _distinct(SubWindowDistinct),
    "ExactSlidingDistinct": _distinct(ExactSlidingDistinct),
    "SymmetricHashJoin": _join(SymmetricHashJoin),
    "ExactWindowJoin": _join(ExactWindowJoin),
    "OnlineMaxSubset": Example(
        lambda: OnlineMaxSubset(1.0, 1.0, cu_s=0.01, cp_s=0.01, budget=0.05, seed=1),
        lambda o, i: o.update(
            np.array([True, False, True]), np.array([1, 1, 2 + i], np.uint64), np.array([i, i, i + 1]) * S
        ),
    ),
}


def _state(obj: Any) -> bytes | None:
    return obj.to_bytes() if hasattr(obj, "to_bytes") else None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    if is_dataclass(a):  # e.g. MaxSubsetPlan, with numpy arrays inside
        return repr(a) == repr(b)
    return bool(a == b)


def _drive(example: Example, *, read: bool, steps: int = 5) -> Any:
    """Feed, slide and (``read``) report ``steps`` times, checking what each verb returns."""
    obj = example.make()
    for i in range(-1, steps):
        if i >= 0:
            assert example.feed(obj, i) is obj
            if hasattr(obj, "slide"):
                assert obj.slide() is obj
        if read and hasattr(obj, "report"):
            before = _state(obj)
            first = obj.report()
            assert _state(obj) == before, f"{type(obj).__name__}.report() changed to_bytes()"
            assert _same(obj.report(), first), f"{type(obj).__name__}.report() changed its next answer"
    return obj


def test_every_class_with_a_convention_verb_has_an_example() -> None:
    with_verbs = {c.__name__ for c in CLASSES if any(hasattr(c, v) for v in CONVENTION)}
    assert with_verbs == set(EXAMPLES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_verbs_are_declared_to_return_self_and_feeding_classes_report(cls: type) -> None:
    for verb in SELF_VERBS:
        if hasattr(cls, verb):
            returns = inspect.signature(getattr(cls, verb)).return_annotation
            assert returns in ("Self", Self), f"{cls.__name__}.{verb} -> {returns}"
    if hasattr(cls, "update") or hasattr(cls, "slide"):
        assert hasattr(cls, "report"), f"{cls.__name__}: update() without report()"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_update_slide_merge_return_self_and_report_only_reads(name: str) -> None:
    example = EXAMPLES[name]
    read, unread = _drive(example, read=True), _drive(example, read=False)
    # Reading never changed what the instance does next: a twin never read ends the same.
    assert _state(read) == _state(unread)
    assert _same(read.report(), unread.report())
    if hasattr(read, "merge"):  # same parameters and slide count
        assert read.merge(unread) is read
