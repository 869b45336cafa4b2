"""``netmon dashboard``: the Streamlit app, bound to 127.0.0.1 unless told otherwise.

Streamlit runs as a child process (:func:`dashboard.server.run_foreground`): SIGTERM or Ctrl-C stop
it too and wait for it, so the port is free when the command exits (exit code 128 + the signal).
"""

from __future__ import annotations

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("dashboard")
@click.option("--host", help="Address to bind (default [dashboard] host, 127.0.0.1).")
@click.option("--port", type=int, help="Port (default [dashboard] port, 8501).")
@pass_config
def command(cfg: Config, host: str | None, port: int | None) -> None:
    """Serve the dashboard over the results in the data directory."""
    from dashboard.server import run_foreground

    raise SystemExit(run_foreground(cfg, host=host, port=port))
