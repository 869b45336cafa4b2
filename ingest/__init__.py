"""Ingest: capture files and live frames to packet-header records (and on to Kafka).

The names below are imported on first use (PEP 562), so ``import ingest`` stays cheap and a
module that is not there yet never breaks the others.

Floor 1 of the house (README, "Architecture"): it stands on ``netmon`` only.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ARROW_SCHEMA",
    "CaptureError",
    "CaptureReader",
    "ReadSummary",
    "decode_frames",
    "read_records",
]

_LAZY = {
    "ARROW_SCHEMA": "netmon.records",
    "CaptureError": "ingest.errors",
    "CaptureReader": "ingest.readers",
    "ReadSummary": "ingest.readers",
    "decode_frames": "ingest.decode",
    "read_records": "ingest.readers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ingest' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
