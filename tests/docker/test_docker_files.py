"""docker/: the image, the compose file and its configuration, checked without a Docker engine.

What a `docker compose up` would trip over first, checked against the project itself: the compose
file parses and uses only Compose attributes; every netmon command line names real subcommands and
options (parsed by netmon's own click CLI); the Spark roles use classes and a launcher the pyspark
package really ships; netmon.toml loads with netmon's own loader and agrees with the compose file
(Kafka address, shared volume paths, dashboard port); only the dashboard is published, on the
host's 127.0.0.1; the Dockerfile installs the project and bakes the jars in, from a pinned base,
as a non-root user.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from cli.main import cli
from netmon.config import Config, load_alerts, load_config

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
NETMON_IMAGE = "netmon:local"

#: The service attributes of the Compose specification (compose-spec.json, compose-go v2.16).
SERVICE_KEYS = frozenset(
    "annotations attach blkio_config build cap_add cap_drop cgroup cgroup_parent command configs "
    "container_name cpu_count cpu_percent cpu_period cpu_quota cpu_rt_period cpu_rt_runtime cpu_shares "
    "cpus cpuset credential_spec depends_on deploy develop device_cgroup_rules devices dns dns_opt "
    "dns_search domainname entrypoint env_file environment expose extends external_links extra_hosts "
    "gpus group_add healthcheck hostname image init ipc isolation label_file labels links logging "
    "mac_address mem_limit mem_reservation mem_swappiness memswap_limit models network_mode networks "
    "oom_kill_disable oom_score_adj pid pids_limit platform ports post_start pre_start pre_stop "
    "privileged profiles provider pull_policy pull_refresh_after read_only restart runtime scale "
    "secrets security_opt shm_size stdin_open stop_grace_period stop_signal storage_opt sysctls tmpfs "
    "tty ulimits umask use_api_socket user userns_mode uts volumes volumes_from working_dir".split()
)
TOP_LEVEL_KEYS = frozenset({"name", "services", "volumes", "secrets", "networks", "configs", "include"})
HEALTHCHECK_KEYS = frozenset({"test", "interval", "timeout", "retries", "start_period", "start_interval"})
CONDITIONS = frozenset({"service_started", "service_healthy", "service_completed_successfully"})
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(us|ms|s|m|h))+$")

#: Spark's standalone daemons and their options (MasterArguments, WorkerArguments; every option
#: takes a value). The Worker's one positional argument is the master URL.
SPARK_CLASSES = {
    "org.apache.spark.deploy.master.Master": {
        "--host",
        "-h",
        "--port",
        "-p",
        "--webui-port",
        "--properties-file",
    },
    "org.apache.spark.deploy.worker.Worker": {
        "--host",
        "-h",
        "--port",
        "-p",
        "--cores",
        "-c",
        "--memory",
        "-m",
        "--work-dir",
        "-d",
        "--webui-port",
        "--properties-file",
    },
}


# --- helpers ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def docker_cfg() -> Config:
    return load_config(DOCKER / "netmon.toml", env={})


def netmon_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in services.items() if svc.get("image") == NETMON_IMAGE}


def mounts(svc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Container path -> (source, mode) of a service's short-syntax volumes."""
    out = {}
    for entry in svc.get("volumes", []):
        parts = entry.split(":")
        assert len(parts) in (2, 3), f"volume {entry!r}: expected SOURCE:TARGET[:MODE]"
        out[parts[1]] = (parts[0], parts[2] if len(parts) == 3 else "rw")
    return out


def resolve(args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The netmon (sub)command an argv names, the path of names to it, and the args left for it."""
    cmd: click.Command = cli
    ctx = click.Context(cli, info_name="netmon")
    rest, path = list(args), []
    while isinstance(cmd, click.Group):
        assert rest and not rest[0].startswith("-"), f"netmon {' '.join(args)}: expected a subcommand"
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"netmon has no command {' '.join([*path, rest[0]])!r}"
        ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        path.append(rest.pop(0))
        cmd = sub
    return cmd, path, rest


def dockerfile_instructions() -> list[tuple[int, str, str]]:
    """(stage index, INSTRUCTION, arguments) of docker/Dockerfile, continuation lines joined."""
    out, stage, pending = [], -1, ""
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        instruction, _, arguments = pending.strip().partition(" ")
        pending = ""
        if instruction.upper() == "FROM":
            stage += 1
        out.append((stage, instruction.upper(), " ".join(arguments.split())))
    assert not pending, "Dockerfile ends with a line continuation"
    return out


# --- compose.yaml: structure ------------------------------------------------------------------------
def test_compose_files_parse_and_use_only_compose_attributes(compose: dict[str, Any]) -> None:
    assert set(compose) <= TOP_LEVEL_KEYS
    assert set(compose["services"]) == {
        "kafka",
        "spark-master",
        "spark-worker",
        "pipeline",
        "dashboard",
        "alerts",
        "replay",
    }
    override = yaml.safe_load((DOCKER / "compose.alerts.yaml").read_text())
    assert set(override) <= TOP_LEVEL_KEYS
    for name, svc in [*compose["services"].items(), *override["services"].items()]:
        unknown = set(svc) - SERVICE_KEYS
        assert not unknown, f"service {name}: not Compose attributes: {sorted(unknown)}"
        assert "container_name" not in svc, f"service {name}: container_name prevents --scale"
        if "stop_grace_period" in svc:
            assert DURATION.match(svc["stop_grace_period"]), f"service {name}: {svc['stop_grace_period']!r}"
        restart = svc.get("restart", "no")
        assert restart in ("no", "always", "unless-stopped") or restart.startswith("on-failure")


def test_dependencies_exist_are_acyclic_and_wait_for_real_healthchecks(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, svc in services.items():
        for dep, spec in svc.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert set(spec) <= {"condition", "required", "restart"} and spec["condition"] in CONDITIONS
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy: no healthcheck"
            assert not services[dep].get("profiles"), f"{name} depends on {dep}, which only runs in a profile"

    def visit(name: str, seen: tuple[str, ...]) -> None:
        assert name not in seen, f"dependency cycle: {' -> '.join([*seen, name])}"
        for dep in services[name].get("depends_on", {}):
            visit(dep, (*seen, name))

    for name in services:
        visit(name, ())
    assert services["pipeline"]["depends_on"].keys() >= {"kafka", "spark-master", "spark-worker"}


def test_healthchecks_are_well_formed(services: dict[str, dict[str, Any]]) -> None:
    for name in ("kafka", "spark-master", "spark-worker", "pipeline", "dashboard"):
        check = services[name]["healthcheck"]
        assert set(check) <= HEALTHCHECK_KEYS and check["test"][0] == "CMD", name
        for key in ("interval", "timeout", "start_period"):
            assert DURATION.match(check[key]), f"{name} healthcheck {key}: {check[key]!r}"
        if check["test"][1:3] == ["python", "-c"]:
            compile(check["test"][3], f"<{name} healthcheck>", "exec")


# --- compose.yaml: the netmon image's command lines ----------------------------------------------
def test_netmon_services_share_one_image_built_from_the_repository(
    services: dict[str, dict[str, Any]],
) -> None:
    ours = netmon_services(services)
    assert set(ours) == {"spark-master", "spark-worker", "pipeline", "dashboard", "alerts", "replay"}
    for name, svc in ours.items():
        assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}, name
        assert (DOCKER / svc["build"]["context"]).resolve() == REPO
        assert (REPO / svc["build"]["dockerfile"]).is_file()
        assert svc.get("init") is True, f"{name}: an init process reaps Spark's and Streamlit's children"


def test_every_netmon_command_line_is_accepted_by_the_cli(services: dict[str, dict[str, Any]]) -> None:
    runner = CliRunner()
    env = {"NETMON_CONFIG": str(DOCKER / "netmon.toml")}
    checked = 0
    for name, svc in netmon_services(services).items():
        if "entrypoint" in svc:
            continue
        args = svc["command"]
        cmd, path, rest = resolve(args)
        # Options and arguments parse and convert (types, choices, arity) exactly as at run time.
        cmd.make_context(path[-1], list(rest))
        known = {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)}
        used = {a for a in rest if a.startswith("-")}
        assert used <= known, f"{name}: netmon {' '.join(path)} has no option {sorted(used - known)}"
        # And the real command's help (through the root group, with this configuration) lists them.
        result = runner.invoke(cli, [*path, "--help"], env=env)
        assert result.exit_code == 0, result.output
        for opt in used:
            assert opt in result.output, f"{name}: {opt} missing from netmon {' '.join(path)} --help"
        checked += 1
    assert checked == 4  # pipeline, dashboard, alerts run, replay


def test_spark_roles_run_classes_that_pyspark_ships(services: dict[str, dict[str, Any]]) -> None:
    # pip installs pyspark's launcher on PATH (the image's entrypoint override relies on it).
    files = [str(f) for f in importlib.metadata.files("pyspark") or []]
    assert any(f.endswith("bin/spark-class") and not f.startswith("pyspark/") for f in files)
    spark_core = next(
        Path(str(f.locate()))
        for f in importlib.metadata.files("pyspark") or []
        if "jars/spark-core_" in str(f)
    )
    classes = set(zipfile.ZipFile(spark_core).namelist())
    master = services["spark-master"]
    master_options = dict(zip(master["command"][1::2], master["command"][2::2], strict=True))
    for name in ("spark-master", "spark-worker"):
        svc = services[name]
        assert svc["entrypoint"] == ["spark-class"]
        main, *args = svc["command"]
        assert main.replace(".", "/") + ".class" in classes, f"{name}: {main} not in {spark_core.name}"
        positional = []
        while args:
            if args[0].startswith("-"):
                assert args[0] in SPARK_CLASSES[main], f"{name}: {main} has no option {args[0]}"
                assert len(args) > 1 and not args[1].startswith("-"), f"{name}: {args[0]} needs a value"
                args = args[2:]
            else:
                positional.append(args.pop(0))
        expected = [f"spark://{master_options['--host']}:{master_options['--port']}"]
        assert positional == (expected if name == "spark-worker" else []), name
    assert master_options["--host"] == master["hostname"] == "spark-master"
    assert services["pipeline"]["command"][-1] == f"spark://spark-master:{master_options['--port']}"
    # The default work dir is inside the (root-owned) pyspark package: the non-root worker needs its own.
    assert services["spark-worker"]["environment"]["SPARK_WORKER_DIR"].startswith("/tmp/")
    assert services["spark-worker"]["deploy"]["replicas"] == 2


# --- netmon.toml and the compose file agree -------------------------------------------------------
def test_netmon_toml_loads_and_points_at_the_compose_kafka(
    docker_cfg: Config, services: dict[str, dict[str, Any]]
) -> None:
    assert docker_cfg.kafka.bootstrap == "kafka:9092"
    host, port = docker_cfg.kafka.bootstrap.split(":")
    kafka = services["kafka"]
    assert host in services and kafka["hostname"] == host
    env = kafka["environment"]
    assert f"PLAINTEXT://{host}:{port}" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert f"PLAINTEXT://:{port}" in env["KAFKA_LISTENERS"].split(",")
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    for name, svc in netmon_services(services).items():
        assert svc["environment"]["NETMON_CONFIG"] == "/etc/netmon/netmon.toml", name
        assert mounts(svc)["/etc/netmon/netmon.toml"] == ("./netmon.toml", "ro"), name
        assert not any(k.startswith("NETMON_") and k != "NETMON_CONFIG" for k in svc["environment"]), (
            f"{name}: NETMON_* variables would override netmon.toml silently"
        )


def test_kafka_image_is_the_version_netmon_pins(services: dict[str, dict[str, Any]]) -> None:
    pom = (REPO / "netmon" / "jvm" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom).group(1)
    assert services["kafka"]["image"] == f"apache/kafka:{version}"


def test_data_and_state_volumes_are_shared_at_the_configured_paths(
    docker_cfg: Config, compose: dict[str, Any]
) -> None:
    services = compose["services"]
    data, state = str(docker_cfg.paths.data_dir), str(docker_cfg.paths.state_dir)
    assert data == "/var/lib/netmon/data" and state == "/var/lib/netmon/state"
    # Executors (workers) write results and state checkpoints, the driver the sink logs and the
    # shedding control file the executors read: the same volume at the same path, read-write.
    for name in ("pipeline", "spark-worker"):
        assert mounts(services[name])[data] == ("netmon-data", "rw"), name
    assert mounts(services["dashboard"])[data][0] == "netmon-data"
    for name in ("alerts", "dashboard"):
        assert mounts(services[name])[state] == ("netmon-state", "rw"), name
    declared = set(compose["volumes"])
    for name, svc in services.items():
        for source, _ in mounts(svc).values():
            if source.startswith((".", "/")):
                assert source.startswith("./"), f"{name}: bind sources stay relative to docker/"
                assert (DOCKER / source).is_file(), f"{name}: {source} does not exist"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"


def test_only_the_dashboard_is_published_and_only_on_loopback(
    docker_cfg: Config, services: dict[str, dict[str, Any]]
) -> None:
    published = {name: svc["ports"] for name, svc in services.items() if svc.get("ports")}
    assert set(published) == {"dashboard"}
    for name, svc in services.items():
        assert "expose" not in svc and svc.get("network_mode") != "host", name
    port = docker_cfg.dashboard.port
    assert published["dashboard"] == [f"127.0.0.1:{port}:{port}"]
    # Inside the container the server must listen on all interfaces, or the published port is dead.
    assert docker_cfg.dashboard.host == "0.0.0.0"
    assert "--host" not in services["dashboard"]["command"]


def test_the_driver_is_reachable_from_the_executors(services: dict[str, dict[str, Any]]) -> None:
    env = services["pipeline"]["environment"]
    # pipeline/session.py defaults SPARK_LOCAL_IP to 127.0.0.1: executors elsewhere could not
    # connect back. The driver must advertise a name the workers resolve.
    assert env["SPARK_LOCAL_HOSTNAME"] == services["pipeline"]["hostname"] == "pipeline"
    assert not env["SPARK_LOCAL_IP"].startswith("127.")


def test_replay_is_a_one_shot_profile_with_a_bundled_capture(services: dict[str, dict[str, Any]]) -> None:
    replay = services["replay"]
    assert replay["profiles"] == ["replay"] and replay["restart"] == "no"
    capture = replay["command"][1]
    assert capture.startswith("/opt/netmon/samples/")
    assert (REPO / "samples" / Path(capture).name).is_file()
    copies = [a for _, i, a in dockerfile_instructions() if i == "COPY"]
    assert "samples/*.pcap /opt/netmon/samples/" in copies


def test_alert_secrets_come_from_a_mounted_file_and_the_environment() -> None:
    override = yaml.safe_load((DOCKER / "compose.alerts.yaml").read_text())
    alerts = override["services"]["alerts"]
    assert alerts["environment"]["NETMON_ALERTS_CONFIG"] == "/run/secrets/netmon-alerts"
    assert alerts["environment"]["NETMON_WEBHOOK_SECRET"].startswith("${NETMON_WEBHOOK_SECRET:?")
    assert override["secrets"]["netmon-alerts"]["file"] == "./alerts.toml"
    assert "alerts.toml" in (DOCKER / ".gitignore").read_text().split()
    example = load_alerts(DOCKER / "alerts.example.toml")
    assert example.targets and all(t.secret_env and not t.secret for t in example.targets)
    # The committed configuration carries no target (and so no URL or key) at all.
    assert not tomllib.loads((DOCKER / "netmon.toml").read_text()).get("alerts")


# --- Dockerfile ---------------------------------------------------------------------------------------
def test_dockerfile_base_is_pinned_and_matches_the_python_netmon_needs() -> None:
    froms = [a for _, i, a in dockerfile_instructions() if i == "FROM"]
    images = [f.split()[0] for f in froms]
    assert len(images) == 2 and len(set(images)) == 1, "build and runtime stages must share the interpreter"
    m = re.fullmatch(r"python:(3)\.(\d+)(\.\d+)?-slim-bookworm(@sha256:[0-9a-f]{64})?", images[0])
    assert m, f"base image {images[0]!r}: expected python:3.N[.P]-slim-bookworm (a pinned tag)"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = re.fullmatch(r">=\s*3\.(\d+)", requires)
    assert minimum, f"requires-python {requires!r}: update this check"
    assert int(m.group(2)) >= int(minimum.group(1)), f"{images[0]} is older than requires-python {requires}"


def test_dockerfile_installs_the_project_and_bakes_in_the_jars() -> None:
    steps = dockerfile_instructions()
    build = [(i, a) for s, i, a in steps if s == 0]
    runtime = [(i, a) for s, i, a in steps if s == 1]
    runs = [a for i, a in build if i == "RUN"]
    pip = next(k for k, a in enumerate(runs) if a == "pip install .")
    setup = next(k for k, a in enumerate(runs) if a.startswith("netmon setup"))
    assert pip < setup
    assert any("apt-get install" in a and "openjdk-17-jre-headless" in a and "maven" in a for a in runs)
    runtime_runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "openjdk-17-jre-headless" in runtime_runs and "libpcap0.8" in runtime_runs
    assert "maven" not in runtime_runs
    # The project: every package pyproject.toml installs, and the README it names.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    copies = [a.split() for i, a in build if i == "COPY"]
    sources = {src for *srcs, _ in copies for src in srcs}
    assert {*packages, "pyproject.toml", pyproject["project"]["readme"]} <= sources
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    for src in sources:
        assert f"!{src}" in ignore or f"!{src}/" in ignore, f"{src} is excluded from the build context"


def test_dockerfile_runtime_is_non_root_with_the_same_paths_everywhere() -> None:
    steps = dockerfile_instructions()

    def env(stage: int) -> dict[str, str]:
        out = {}
        for s, i, a in steps:
            if s == stage and i == "ENV":
                out.update(dict(pair.split("=", 1) for pair in a.split()))
        return out

    build, runtime = env(0), env(1)
    venv = next(a.split()[-1] for s, i, a in steps if i == "RUN" and "-m venv" in a)
    assert build["NETMON_CACHE_DIR"] == runtime["NETMON_CACHE_DIR"] == "/opt/netmon/cache"
    assert build["PATH"].startswith(f"{venv}/bin:") and runtime["PATH"].startswith(f"{venv}/bin:")
    assert runtime["PYSPARK_PYTHON"] == f"{venv}/bin/python"
    assert ("COPY", "--from=build /opt/netmon /opt/netmon") in [(i, a) for s, i, a in steps if s == 1]
    final = [(i, a) for s, i, a in steps if s == 1]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert json.loads(next(a for i, a in final if i == "ENTRYPOINT")) == ["netmon"]
