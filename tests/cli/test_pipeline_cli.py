"""``netmon pipeline`` ends in one line: without a broker (before Spark starts), or when a query fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.config import Config, load_config
from netmon.results import checkpoint_dir, status_file
from tests.conftest import free_port

NETMON = Path(sys.executable).with_name("netmon")


def test_pipeline_without_a_broker_says_so_in_one_line_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pipeline.session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started although no broker answers")

    monkeypatch.setattr(pipeline.session, "build_session", no_spark)
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    began = time.monotonic()
    res = CliRunner().invoke(
        cli,
        ["pipeline"],
        env={"NETMON_BOOTSTRAP_SERVERS": bootstrap, "NETMON_CONFIG": None, "NETMON_DATA_DIR": str(tmp_path)},
    )
    assert time.monotonic() - began < 20
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f"netmon pipeline: error: no Kafka broker answers at {bootstrap} within 5s")
    assert "netmon broker start" in lines[0]


def _config(tmp_path: Path, bootstrap: str) -> Path:
    """A netmon.toml: this test's dirs and topics; top-k (the shared query) and the joins."""
    tag = uuid.uuid4().hex[:8]
    path = tmp_path / "netmon.toml"
    path.write_text(
        f"""
[paths]
data_dir = "{tmp_path / "data"}"
state_dir = "{tmp_path / "state"}"
[kafka]
bootstrap_servers = "{bootstrap}"
packets_topic = "test.pipeline-fails.{tag}"
results_topic_prefix = "test.pipeline-fails.{tag}."
[pipeline]
kinds = ["topk", "joins"]
publish_results = false
[spark]
master = "local[1]"
"""
    )
    return path


@pytest.mark.kafka
@pytest.mark.spark
def test_a_failing_query_stops_the_others_and_exits_1_naming_it(
    kafka_bootstrap: str, netmon_config: Config, tmp_path: Path
) -> None:
    config = _config(tmp_path, kafka_bootstrap)
    cfg = load_config(config, env={})
    # A poisoned checkpoint: the joins query starts, then dies reading its offset log.
    joins = checkpoint_dir(cfg, "joins")
    (joins / "offsets").mkdir(parents=True)
    (joins / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    (joins / "offsets" / "0").write_text("v1\n{garbage\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env.update(NETMON_CONFIG=str(config), NETMON_CACHE_DIR=str(netmon_config.paths.cache_dir))
    proc = subprocess.run(
        [str(NETMON), "pipeline", "--quiet"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    # One line of ours; Spark's JVM logs the failure on the same stderr, in its own time.
    ours = [line for line in proc.stderr.splitlines() if line.startswith("netmon pipeline: error:")]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert ours[0].startswith("netmon pipeline: error: query joins failed: Unexpected character")
    assert ours[0].endswith("; the other queries were stopped")
    assert "Traceback" not in proc.stderr
    # The healthy query was running, and was stopped before the exit.
    status = json.loads(status_file(cfg).read_text())["queries"]
    assert set(status) >= {"topk", "joins"} and not any(q["active"] for q in status.values())
