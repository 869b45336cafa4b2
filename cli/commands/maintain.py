"""``netmon maintain [--kind K ...]``: one retention and compaction pass over the results, now.

The pipeline runs these passes itself every ``[retention] interval_s`` (``pipeline.retention``);
this command is for a data directory no pipeline runs on: it takes the pipeline's lock on the
data directory and refuses while a pipeline holds it. It prints one line of what the pass did.

Exit codes: 0 done; 1 refused while a pipeline runs, or a sink could not be maintained (one line
each on stderr).
"""

from __future__ import annotations

from pathlib import Path

import click

from cli.commands.produced import fail
from cli.main import pass_config
from netmon.config import RESULT_KINDS, Config


@click.command("maintain")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(RESULT_KINDS),
    help="A result kind to maintain (repeatable; default: [pipeline] kinds).",
)
@pass_config
def command(cfg: Config, kinds: tuple[str, ...]) -> None:
    """Delete expired results and compact small result files ([retention])."""
    from netmon import pidlock
    from netmon.results import PIPELINE_LOCK
    from pipeline.retention import maintain

    try:
        lock = pidlock.take(Path(cfg.paths.data_dir) / PIPELINE_LOCK)
    except pidlock.LockHeld as held:
        fail("maintain", f"refused: a pipeline runs on {cfg.paths.data_dir} (pid {held.holder})", 1)
    try:
        report = maintain(cfg, kinds or cfg.pipeline.kinds)
    finally:
        pidlock.release(lock)
    click.echo(
        f"compacted {report.compacted_batches} batches into {report.compacted_files} files; "
        f"expired {report.expired_files} files ({report.expired_rows} rows); "
        f"removed {report.empty_commits} empty commits, {report.leftovers} leftovers, "
        f"{report.dropped_marks} publish marks"
    )
    for error in report.errors:
        click.echo(f"netmon maintain: error: {error}", err=True)
    if report.errors:
        raise SystemExit(1)
