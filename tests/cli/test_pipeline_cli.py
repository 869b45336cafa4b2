"""``netmon pipeline``: one line without a broker (before Spark starts) or when a query fails; a
clean stop on Ctrl-C while a batch runs; ``--reset KIND`` removes exactly that kind's results and
state, and the pipeline starts again after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.config import Config, load_config
from netmon.results import COMMITS, SHARED_QUERY, checkpoint_dir, results_dir, status_file
from tests.conftest import REPO_ROOT, free_port

NETMON = Path(sys.executable).with_name("netmon")
SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"  # 10,000 packets over ~60 s


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
def test_a_failing_query_stops_the_pipeline_and_exits_1_naming_it(
    kafka_bootstrap: str, netmon_config: Config, tmp_path: Path
) -> None:
    config = _config(tmp_path, kafka_bootstrap)
    cfg = load_config(config, env={})
    # A poisoned checkpoint: the shared query (every kind, the joins included) starts, then dies
    # reading its offset log.
    shared = checkpoint_dir(cfg, SHARED_QUERY)
    (shared / "offsets").mkdir(parents=True)
    (shared / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    (shared / "offsets" / "0").write_text("v1\n{garbage\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env.update(NETMON_CONFIG=str(config), NETMON_CACHE_DIR=str(netmon_config.paths.cache_dir))
    proc = subprocess.run(
        [str(NETMON), "pipeline", "--quiet"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    # One line of ours; Spark's JVM logs the failure on the same stderr, in its own time.
    ours = [line for line in proc.stderr.splitlines() if line.startswith("netmon pipeline: error:")]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert ours[0].startswith(f"netmon pipeline: error: query {SHARED_QUERY} failed: Unexpected character")
    assert ours[0].endswith("; the pipeline stopped")
    assert "Traceback" not in proc.stderr
    # Every kind ran on that query, and was stopped before the exit.
    status = json.loads(status_file(cfg).read_text())["queries"]
    assert set(status) >= {"topk", "joins"} and not any(q["active"] for q in status.values())


# -- Ctrl-C while a batch runs ---------------------------------------------------------------------


def _batch_config(tmp_path: Path, bootstrap: str, topic: str) -> Path:
    """A netmon.toml for the batch kinds only (the shared query), this test's dirs and topic."""
    path = tmp_path / "netmon.toml"
    path.write_text(
        f"""
[paths]
data_dir = "{tmp_path / "data"}"
state_dir = "{tmp_path / "state"}"
[kafka]
bootstrap_servers = "{bootstrap}"
packets_topic = "{topic}"
results_topic_prefix = "{topic}."
partitions = 1
[pipeline]
kinds = ["traffic", "topk", "distinct"]
publish_results = false
trigger_s = 1.0
[spark]
master = "local[2]"
"""
    )
    return path


def _fill(bootstrap: str, topic: str, loops: int = 1, start_ns: int | None = None) -> int:
    from ingest.replay import ReplayOptions, replay

    opts = ReplayOptions(loop=loops, start_ns=start_ns, close_windows_s=6.0, records_per_message=200)
    summary = replay(SAMPLE, bootstrap=bootstrap, topic=topic, options=opts, partitions=1, progress=False)
    assert summary.produced == summary.acknowledged
    return int(summary.acknowledged)


@pytest.mark.kafka
@pytest.mark.spark
def test_ctrl_c_while_a_batch_runs_stops_after_it_without_a_java_stack_trace(
    kafka_bootstrap: str, netmon_config: Config, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to the process group) while the shared query's batch runs: the batch ends
    and commits, the queries stop, exit 0 — no StackOverflowError from Spark's stop check (which
    a cut batch's long Python error caused), no Java stack trace."""
    from netmon.kafka_admin import recreate_topic

    topic = f"test.pipeline-stop.{uuid.uuid4().hex[:8]}"
    recreate_topic(kafka_bootstrap, topic, 1)
    _fill(kafka_bootstrap, topic, loops=3)
    config = _batch_config(tmp_path, kafka_bootstrap, topic)
    cfg = load_config(config, env={})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env.update(NETMON_CONFIG=str(config), NETMON_CACHE_DIR=str(netmon_config.paths.cache_dir))
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "pipeline"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=REPO_ROOT,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
    try:
        # Batch 0 runs: traffic (the first kind) committed its rows, the shared query not yet.
        traffic_commit = results_dir(cfg, "traffic") / COMMITS / "0.json"
        shared_commit = checkpoint_dir(cfg, "packets") / "commits" / "0"
        deadline = time.monotonic() + 240
        while not traffic_commit.exists():
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "batch 0 did not start"
            time.sleep(0.02)
        assert not shared_commit.exists(), "batch 0 ended before the signal: no batch ran at Ctrl-C"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole group (Spark's JVM ignores SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = stderr.read_text()
    assert code in (0, 130), text[-3000:]
    assert "StackOverflowError" not in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    java_frames = [line for line in text.splitlines() if line.startswith("\tat ")]
    assert len(java_frames) <= 10, text[-3000:]
    assert "stopping pipeline" in text
    # The running batch ended: every kind's rows and the shared query's commit are there.
    assert shared_commit.exists()
    assert (results_dir(cfg, "distinct") / COMMITS / "0.json").exists()
    status = json.loads(status_file(cfg).read_text())["queries"]
    assert status and not any(q["active"] for q in status.values())


# -- --reset KIND ----------------------------------------------------------------------------------

#: What the pipeline writes under the data directory, one file in each place (tests build it),
#: and what an older netmon wrote there for the shedding kind (its own query, statistics files).
WRITTEN = [
    *(f"results/{kind}/{COMMITS}/0.json" for kind in ("traffic", "topk", "distinct", "shedding")),
    *(
        f"results/{kind}/batch-000000/part-00000.parquet"
        for kind in ("traffic", "topk", "distinct", "shedding")
    ),
    "results/joins/handshake/_spark_metadata/0",
    "results/shedding/_spark_metadata/0",
    *(f"results/sys/{query}/{COMMITS}/0.json" for query in ("packets", "joins")),
    *(f"results/sys/{query}/batch-000000/part-00000.parquet" for query in ("packets", "joins")),
    "checkpoints/packets/offsets/0",
    "checkpoints/packets/commits/0",
    "checkpoints/traffic/state/batch-000000.json",
    "checkpoints/topk/state/batch-000000.json",
    "checkpoints/topk/open-000000.parquet",
    "checkpoints/distinct/sketches/batch-000000.json",
    "checkpoints/joins/handshake/offsets/0",
    "checkpoints/shedding/offsets/0",
    *(
        f"checkpoints/publish/{kind}.json"
        for kind in ("traffic", "topk", "distinct", "joins", "shedding", "sys")
    ),
    "control/joins/fractions.json",
    "control/joins/stats/batch-000000000000.json",
    "status/pipeline.json",
]

#: ``--reset`` arguments -> the top-level paths it removes (relative to the data directory).
RESETS = {
    ("traffic",): ["results/traffic", "checkpoints/traffic", "checkpoints/publish/traffic.json"],
    ("topk",): ["results/topk", "checkpoints/topk", "checkpoints/publish/topk.json"],
    ("distinct",): ["results/distinct", "checkpoints/distinct", "checkpoints/publish/distinct.json"],
    ("shedding",): [
        "results/shedding",
        "checkpoints/shedding",
        "checkpoints/publish/shedding.json",
        "control/joins",
    ],
    ("joins",): [
        "results/joins",
        "checkpoints/joins",
        "checkpoints/publish/joins.json",
        "results/shedding",
        "checkpoints/shedding",
        "checkpoints/publish/shedding.json",
        "control/joins",
    ],
    ("sys",): ["results/sys", "checkpoints/publish/sys.json"],
    ("topk", "traffic", "topk"): [
        "results/traffic",
        "checkpoints/traffic",
        "checkpoints/publish/traffic.json",
        "results/topk",
        "checkpoints/topk",
        "checkpoints/publish/topk.json",
    ],
    ("all",): [
        *(
            f"{where}/{k}"
            for k in ("traffic", "topk", "distinct", "joins", "shedding")
            for where in ("results", "checkpoints")
        ),
        "control/joins",
        "results/sys",
        "checkpoints/packets",
        "checkpoints/publish",
    ],
}


def _files(data: Path) -> set[str]:
    """The files under ``data``, but the lock a pipeline or a reset takes (``pipeline.lock``)."""
    return {
        p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file() and p.name != "pipeline.lock"
    }


def _reset_cli(data: Path, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(
        cli,
        ["pipeline", *args],
        input=input,
        env={"NETMON_CONFIG": None, "NETMON_DATA_DIR": str(data), "NETMON_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )


@pytest.mark.parametrize("kinds", list(RESETS), ids=["-".join(k) for k in RESETS])
def test_reset_removes_exactly_the_kinds_results_and_state(tmp_path: Path, kinds: tuple[str, ...]) -> None:
    data = tmp_path / "data"
    for name in WRITTEN:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x")
    before = _files(data)
    gone = RESETS[kinds]
    args = [x for kind in kinds for x in ("--reset", kind)]

    declined = _reset_cli(data, *args, input="n\n")
    assert declined.exit_code == 1, declined.output
    assert "netmon pipeline: error: reset declined; nothing removed" in declined.output
    assert _files(data) == before
    # What it said it would remove: exactly those paths, in that order.
    listed = [line.strip() for line in declined.output.splitlines() if line.startswith("  ")]
    assert listed == [str(data / p) for p in gone]

    done = _reset_cli(data, *args, "--yes")
    assert done.exit_code == 0, done.output
    assert [
        line.removeprefix("removed ") for line in done.output.splitlines() if line.startswith("removed ")
    ] == [str(data / p) for p in gone]
    expected = {f for f in before if not any(f == p or f.startswith(p + "/") for p in gone)}
    assert _files(data) == expected
    assert "status/pipeline.json" in expected
    again = _reset_cli(data, *args, "--yes")
    assert again.exit_code == 0 and "nothing to remove" in again.output


def test_reset_is_refused_while_a_pipeline_holds_the_data_directory(tmp_path: Path) -> None:
    import fcntl

    data = tmp_path / "data"
    (data / "results" / "traffic").mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(data / 'pipeline.lock')!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "f.write('4242\\n'); f.flush(); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        res = _reset_cli(data, "--reset", "traffic", "--yes")
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 1, res.output
    assert f"reset refused: a pipeline is running on the data directory {data} (pid 4242)" in res.output
    assert (data / "results" / "traffic").is_dir()
    # Once the holder is gone, the lock is free again.
    with open(data / "pipeline.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _traffic(cfg: Config) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(window_start_ns, proto): (packets, bytes)}`` of the traffic results, each window once."""
    from netmon.results import read_results

    table = read_results(results_dir(cfg, "traffic"))
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for row in [] if table is None else table.to_pylist():
        key = (int(row["window_start"].timestamp() * 1_000_000) * 1000, int(row["proto"]))
        assert key not in out, f"window {key} written twice"
        out[key] = (int(row["packets"]), int(row["bytes"]))
    return out


def _topk_rows(cfg: Config) -> list[tuple[Any, ...]]:
    from netmon.results import read_results

    table = read_results(results_dir(cfg, "topk"))
    return [] if table is None else sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.kafka
@pytest.mark.spark
def test_reset_of_one_batch_kind_replays_no_other_and_the_pipeline_starts_again(
    spark: Any, kafka_bootstrap: str, netmon_config: Config, tmp_path: Path
) -> None:
    """A real run writes traffic, top-k and distinct counts; ``--reset topk`` removes top-k's results,
    state and publish mark only. The pipeline then starts again: traffic and distinct go on from
    where they were (their earlier files untouched, no window written twice), top-k starts empty
    at the next batch — its rows are those of a run over the packets read after the reset only.
    While the pipeline runs, a reset is refused."""
    from ingest import read_records
    from netmon.kafka_admin import recreate_topic
    from pipeline.job import start_pipeline
    from tests.pipeline.oracle import traffic_per_window

    kinds = ("traffic", "topk", "distinct")
    topic = f"test.pipeline-reset.{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    cfg = netmon_config.replace(
        paths={"data_dir": data},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 1},
        pipeline={"publish_results": True},
    )
    recreate_topic(kafka_bootstrap, topic, 1)
    _fill(kafka_bootstrap, topic)
    first = start_pipeline(spark, cfg, available_now=True, kinds=kinds)
    first.await_termination(300)
    assert first.failed() is None, first.failed()
    first.stop()
    before = {f: (data / f).read_bytes() for f in _files(data)}
    assert any(f.startswith("results/topk/batch-") for f in before)
    assert {"checkpoints/publish/topk.json", "checkpoints/publish/traffic.json"} <= set(before)

    res = _reset_cli(data, "--reset", "topk", "--yes")
    assert res.exit_code == 0, res.output
    gone = ("results/topk", "checkpoints/topk", "checkpoints/publish/topk.json")
    removed = [
        line.removeprefix("removed ") for line in res.output.splitlines() if line.startswith("removed ")
    ]
    assert removed == [str(data / p) for p in gone]
    kept = {f: b for f, b in before.items() if not any(f == p or f.startswith(p + "/") for p in gone)}
    assert {f: (data / f).read_bytes() for f in _files(data)} == kept

    # More packets, two minutes of event time later; the pipeline starts again.
    first_ns = int(next(iter(read_records(SAMPLE))).column("ts")[0].value)
    shift_ns = 120 * 10**9
    _fill(kafka_bootstrap, topic, start_ns=first_ns + shift_ns)
    second = start_pipeline(spark, cfg, kinds=kinds)
    try:
        deadline = time.monotonic() + 300
        while sum(p for p, _ in _traffic(cfg).values()) < 20_000:
            second.poll()
            assert second.failed() is None, second.failed()
            assert time.monotonic() < deadline, "the second capture was not counted"
            time.sleep(1.0)
        refused = _reset_cli(data, "--reset", "traffic", "--yes")
        assert refused.exit_code == 1, refused.output
        assert "reset refused: a pipeline is running on the data directory" in refused.output
    finally:
        second.stop()

    # Traffic: the first capture's windows once (nothing replayed), then the second's.
    oracle = traffic_per_window(SAMPLE)
    assert _traffic(cfg) == oracle | {(w + shift_ns, p): v for (w, p), v in oracle.items()}
    # Traffic and distinct counts: the earlier batches' result files untouched, later batches added.
    for name, body in kept.items():
        if name.startswith("results/"):
            assert (data / name).read_bytes() == body, name
    distinct_commits = sorted((results_dir(cfg, "distinct") / COMMITS).glob("*.json"))
    assert len(distinct_commits) > len([f for f in kept if f.startswith(f"results/distinct/{COMMITS}/")])
    # Top-k: exactly what a run over the second capture alone writes.
    alone_topic = f"{topic}.alone"
    recreate_topic(kafka_bootstrap, alone_topic, 1)
    _fill(kafka_bootstrap, alone_topic, start_ns=first_ns + shift_ns)
    alone = cfg.replace(
        paths={"data_dir": tmp_path / "alone"},
        kafka={"packets_topic": alone_topic},
        pipeline={"publish_results": False},
    )
    reference = start_pipeline(spark, alone, available_now=True, kinds=("topk",))
    reference.await_termination(300)
    assert reference.failed() is None, reference.failed()
    reference.stop()
    rows = _topk_rows(cfg)
    assert rows and rows == _topk_rows(alone)
