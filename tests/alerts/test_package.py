"""The alerts package's public surface: every ``__all__`` name exists; no secrets in reprs."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

import alerts

MODULES = [
    "alerts.config",
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


def test_package_imports_no_netmon_module() -> None:
    """netmon.config imports alerts.config, so the package must not import netmon at import time."""
    import subprocess
    import sys

    code = "import sys, alerts; print(sorted(m for m in sys.modules if m.split('.')[0] == 'netmon'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_secret_fields_are_hidden_from_repr() -> None:
    hidden = {f.name for f in dataclasses.fields(alerts.AlertTarget) if not f.repr}
    assert hidden == {"url", "secret", "routing_key"}
