"""The end of ``netmon replay`` and ``netmon capture``: print the summary, pick the exit code.

Both produce records into Kafka and end the same way: the summary (text or JSON), then exit 2
for a bad input (``summary.error``), 1 when the broker did not acknowledge every record, 130
when interrupted, else 0.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

__all__ = ["fail", "finish"]


def fail(command: str, message: str, code: int) -> NoReturn:
    """One line on stderr, ``netmon COMMAND: error: MESSAGE``, and exit with ``code``."""
    click.echo(f"netmon {command}: error: {message}", err=True)
    sys.exit(code)


def finish(command: str, summary: Any, *, as_json: bool, quiet: bool) -> None:
    """Print ``summary`` (``to_dict()`` as JSON, or ``lines()`` unless quiet) and exit as above."""
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
    elif not quiet:
        click.echo("\n".join(summary.lines()))
    if getattr(summary, "error", None):
        fail(command, summary.error, 2)
    if summary.failed or summary.acknowledged < summary.produced:
        unacknowledged = summary.produced - summary.acknowledged
        fail(command, f"{unacknowledged:,} of {summary.produced:,} records not acknowledged", 1)
    if summary.interrupted:
        sys.exit(130)
