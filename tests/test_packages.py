"""Every package's public surface (``__all__``) against its files, and the layering between packages.

The style guide asks for one explicit ``__all__`` per package, checked by a test: here each
package's list is compared with the modules on disk, and each module's own ``__all__`` with what the
module defines. The design card's layering (``analytics`` and ``ingest`` know nothing of Spark;
``analytics`` nothing of Kafka) is checked by importing them in a clean interpreter.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["alerts", "analytics", "bench", "dashboard", "ingest", "netmon", "pipeline"]
#: Packages whose ``__all__`` lists their modules (the others re-export names).
MODULE_LISTS = {"analytics", "bench", "dashboard", "netmon", "pipeline"}
#: Streamlit scripts: importing them runs the page.
SCRIPTS = {"dashboard.app"}


def _modules(package: str) -> list[str]:
    """Every module below ``package`` that imports without side effects."""
    found = [package]
    for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
        if info.name in SCRIPTS or info.name.startswith("dashboard.pages"):
            continue
        found.append(info.name)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_package_all_is_explicit_sorted_and_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names, package
    assert names == sorted(names), f"{package}.__all__ is not sorted"
    for name in names:
        if package in MODULE_LISTS:
            importlib.import_module(f"{package}.{name}")
        else:
            assert hasattr(module, name), f"{package}.{name}"


@pytest.mark.parametrize("package", sorted(MODULE_LISTS))
def test_package_all_lists_every_public_module(package: str) -> None:
    on_disk = {
        info.name
        for info in pkgutil.iter_modules([str(ROOT / package)])
        if not info.name.startswith("_") and f"{package}.{info.name}" not in SCRIPTS and info.name != "pages"
    }
    assert set(importlib.import_module(package).__all__) == on_disk


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_defines_what_its_all_names(package: str) -> None:
    drift = {}
    for name in _modules(package):
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            continue
        if name in MODULE_LISTS:
            continue  # checked above: their lists name modules
        missing = [n for n in exported if not hasattr(module, n)]
        if missing:
            drift[name] = missing
    assert not drift


@pytest.mark.parametrize(
    ("package", "forbidden"), [("analytics", ("pyspark", "kafka")), ("ingest", ("pyspark",))]
)
def test_layering_package_imports_without(package: str, forbidden: tuple[str, ...]) -> None:
    code = (
        "import importlib, json, pkgutil, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(forbidden)!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
