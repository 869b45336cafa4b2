"""``netmon cluster up|down|status``: a local multi-process Kafka + Spark standalone cluster."""

from __future__ import annotations

import json

import click

from cli.main import pass_config
from netmon.config import Config


@click.group("cluster")
def command() -> None:
    """A local cluster of separate JVMs on 127.0.0.1: N Kafka KRaft nodes, a Spark standalone
    master and M workers (docs/deployment.md)."""


def _cluster(cfg: Config):  # noqa: ANN202 - imported lazily
    from netmon.cluster import LocalCluster

    return LocalCluster(cfg)


@command.command("up")
@click.option("--brokers", type=click.IntRange(min=1), default=3, show_default=True, help="Kafka nodes.")
@click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True, help="Spark workers.")
@click.option(
    "--worker-cores",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Cores each worker offers.",
)
@click.option("--worker-memory", default="1g", show_default=True, help="Memory each worker offers.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=180.0,
    show_default=True,
    help="Seconds to wait for every broker in the metadata and every worker ALIVE.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole record as JSON.")
@pass_config
def up(
    cfg: Config,
    brokers: int,
    workers: int,
    worker_cores: int,
    worker_memory: str,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Start the cluster (or reuse the one already up, or restart the one `down` stopped, with its
    storage and ports); print its bootstrap servers and master URL."""
    from netmon.cluster import ClusterError
    from netmon.jvm_deps import JvmDepsError
    from netmon.spark_standalone import SparkStandaloneError

    try:
        record, reused = _cluster(cfg).up(
            brokers, workers, worker_cores=worker_cores, worker_memory=worker_memory, timeout_s=timeout_s
        )
    except (ClusterError, JvmDepsError, SparkStandaloneError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({**record, "reused": reused}, indent=2))
        return
    if reused:
        click.echo(
            f"already up ({record['brokers']} brokers, {record['workers']} workers; "
            "`netmon cluster down` first to change it)"
        )
    elif record.get("restarted"):
        click.echo(
            f"restarted ({record['brokers']} brokers, {record['workers']} workers; the storage, "
            f"ports and cluster id {record['cluster_id']} of the cluster created {record.get('created')})"
        )
    else:
        click.echo(f"up ({record['brokers']} brokers, {record['workers']} workers; new storage)")
    click.echo(f"bootstrap servers: {record['bootstrap_servers']}")
    click.echo(f"spark master:      {record['master_url']} (web UI {record['master_webui']})")
    click.echo("point netmon at it in netmon.toml:")
    click.echo(f'[kafka]\nbootstrap_servers = "{record["bootstrap_servers"]}"')
    click.echo(f'[spark]\nmaster = "{record["master_url"]}"')


@command.command("down")
@click.option(
    "--grace",
    "grace_s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds each process gets after SIGTERM before SIGKILL.",
)
@click.option(
    "--wipe",
    is_flag=True,
    help="Also remove the cluster's storage (Kafka logs, cluster id, ports): the next `up` starts a "
    "new cluster. Without it the next `up` restarts this one with its data.",
)
@pass_config
def down(cfg: Config, grace_s: float, wipe: bool) -> None:
    """Stop the workers, then the master, then the brokers. The storage, cluster id and ports are
    kept for the next `up` unless --wipe."""
    from netmon.cluster import ClusterError

    try:
        lines = _cluster(cfg).down(grace_s, wipe=wipe)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("\n".join(lines))


@command.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_config
def status(cfg: Config, as_json: bool) -> None:
    """Each process (pid, alive, ports), the brokers in the metadata, the workers ALIVE; exits 1
    when a process of the record is dead, 3 when the cluster is not up."""
    st = _cluster(cfg).status()
    click.echo(json.dumps(st.to_dict(), indent=2) if as_json else "\n".join(st.lines()))
    if not st.record:
        raise click.exceptions.Exit(3)
    if not st.up:
        raise click.exceptions.Exit(1)
