"""Every algorithm class in ``analytics`` (a ``Base`` subclass): what the style guide asks of all.

Each cites its paper in a ``References`` docstring section, and no constructor takes a mutable
default (it would be shared by every instance and by ``clone()``).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

import analytics
from analytics._base import Base


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
