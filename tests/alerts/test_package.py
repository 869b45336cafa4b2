"""The alerts package's public surface: every ``__all__`` name exists; no secrets in reprs."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

import alerts

MODULES = [
    "alerts.rules",
    "alerts.defaults",
    "alerts.outbox",
    "alerts.delivery",
    "alerts.verify",
]


@pytest.mark.parametrize("name", ["alerts", *MODULES])
def test_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__, name
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing: {missing}"


def test_secret_fields_are_hidden_from_repr() -> None:
    hidden = {f.name for f in dataclasses.fields(alerts.AlertTarget) if not f.repr}
    assert hidden == {"url", "secret", "routing_key"}
