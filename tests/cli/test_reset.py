"""``netmon reset``: what it removes (results, checkpoints, Kafka topics on the real broker), the
confirmation, and the refusal while a pipeline runs on the data directory."""

from __future__ import annotations

import fcntl
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.kafka_admin import ensure_topic


def _setup(tmp_path: Path, bootstrap: str) -> tuple[Path, Path, str]:
    prefix = f"test.reset.{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        f'[paths]\ndata_dir = "{data}"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\npackets_topic = "{prefix}"\n'
        f'results_topic_prefix = "{prefix}."\n'
    )
    for part in (
        "results/traffic/part-0.parquet",
        "results/topk/part-0.parquet",
        "checkpoints/packets/offsets/0",
    ):
        (data / part).parent.mkdir(parents=True, exist_ok=True)
        (data / part).write_text("x")
    (data / "checkpoints" / "traffic").mkdir()
    for topic in (prefix, f"{prefix}.traffic", f"{prefix}.topk"):
        ensure_topic(bootstrap, topic, 1)
    return toml, data, prefix


def _topics(bootstrap: str, prefix: str, settle_s: float = 10.0, expect: set[str] | None = None) -> set[str]:
    from kafka import KafkaAdminClient

    deadline = time.monotonic() + settle_s
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        while True:  # deletion is asynchronous
            found = {t for t in admin.list_topics() if t.startswith(prefix)}
            if found == expect or time.monotonic() > deadline:
                return found
            time.sleep(0.3)
    finally:
        admin.close()


@pytest.mark.kafka
def test_reset_all_with_topics_removes_everything(kafka_bootstrap: str, tmp_path: Path) -> None:
    toml, data, prefix = _setup(tmp_path, kafka_bootstrap)
    result = CliRunner().invoke(cli, ["--config", str(toml), "reset", "--topics", "--yes"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "netmon reset all removes:"
    assert f"  {data / 'results' / 'traffic'}" in lines
    assert f"  Kafka topic {prefix}" in lines
    assert f"deleted Kafka topic {prefix}.traffic" in lines
    assert sorted(p.name for p in (data / "results").iterdir()) == []
    assert sorted(p.name for p in (data / "checkpoints").iterdir()) == []
    assert _topics(kafka_bootstrap, prefix, expect=set()) == set()


@pytest.mark.kafka
def test_reset_one_kind_asks_first_and_keeps_the_others(kafka_bootstrap: str, tmp_path: Path) -> None:
    toml, data, prefix = _setup(tmp_path, kafka_bootstrap)
    args = ["--config", str(toml), "reset", "--kind", "traffic", "--topics"]
    declined = CliRunner().invoke(cli, args, input="n\n")
    assert declined.exit_code == 1
    assert declined.output.splitlines()[-1] == "netmon reset: error: declined; nothing removed"
    assert (data / "results" / "traffic").exists()
    done = CliRunner().invoke(cli, args, input="y\n")
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in (data / "results").iterdir()) == ["topk"]
    assert sorted(p.name for p in (data / "checkpoints").iterdir()) == ["packets"]
    # the packets topic stays: the shared query's checkpoint still points into it
    remaining = {prefix, f"{prefix}.topk"}
    assert _topics(kafka_bootstrap, prefix, expect=remaining) == remaining


def test_reset_is_refused_while_a_pipeline_runs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "results" / "traffic").mkdir(parents=True)
    env = {"NETMON_DATA_DIR": str(data), "NETMON_STATE_DIR": str(tmp_path / "state")}
    with (data / "pipeline.lock").open("w") as lock:
        lock.write("4242\n")
        lock.flush()
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        result = CliRunner().invoke(cli, ["reset", "--kind", "traffic", "--yes"], env=env)
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"netmon reset: error: refused: a pipeline is running on the data directory {data} "
        "(pid 4242); stop it first"
    )
    assert (data / "results" / "traffic").is_dir()
    nothing = CliRunner().invoke(cli, ["reset", "--kind", "topk", "--yes"], env=env)
    assert nothing.exit_code == 0
    assert nothing.output.strip() == f"netmon reset: nothing to remove under {data}"


@pytest.mark.kafka
def test_reset_joins_with_topics_removes_the_shedding_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    # the shedding controller's fractions and rows belong to the joins' state: they go along; the
    # sys rows are the shared query's (its batch ids go on), they stay
    toml, _, prefix = _setup(tmp_path, kafka_bootstrap)
    for kind in ("joins", "shedding", "sys"):
        ensure_topic(kafka_bootstrap, f"{prefix}.{kind}", 1)
    result = CliRunner().invoke(cli, ["--config", str(toml), "reset", "--kind", "joins", "--topics", "--yes"])
    assert result.exit_code == 0, result.output
    for kind in ("joins", "shedding"):
        assert f"deleted Kafka topic {prefix}.{kind}" in result.output
    assert f"{prefix}.sys" not in result.output
    kept = {prefix, f"{prefix}.traffic", f"{prefix}.topk", f"{prefix}.sys"}
    assert _topics(kafka_bootstrap, prefix, expect=kept) == kept
