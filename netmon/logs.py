"""Logging: quiet by default (warnings only), ``-v`` for info, ``-vv`` for debug, optional JSON lines.

Library modules log through ``logging.getLogger(__name__)`` with structured ``extra`` fields; user
facing progress goes to stderr through :func:`progress_line`, not through logging.
"""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["JsonFormatter", "setup_logging"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD)
        base = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
        return f"{base} {extra}" if extra else base


def setup_logging(verbosity: int = 0, *, json_lines: bool = False) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else _KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Client libraries log every refused connection while a broker starts: only at -vv.
    for noisy in ("kafka", "py4j", "streamlit"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= 2 else logging.CRITICAL)
