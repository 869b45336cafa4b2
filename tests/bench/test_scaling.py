"""``bench.scaling`` (``netmon bench scaling``): the ratios, the incomplete-drain flags and the
report on made-up drains, and one small real run on a cluster of its own.

The benchmark itself (200,000 packets, 1/2/4 partitions, 2 workers, minutes) is run by hand and
recorded in docs/performance.md, "Scale-out on this machine".
"""

from __future__ import annotations

import pytest

from bench.scaling import BASELINE, add_ratios, bench_scaling, format_report, incomplete, setups

PACKETS = 200_000


def _drain(round_: int, partitions: int, setup: str, seconds: float, counted: int = PACKETS) -> dict:
    return {
        "round": round_,
        "partitions": partitions,
        "setup": setup,
        "seconds": seconds,
        "packets_per_s": round(PACKETS / seconds),
        "load_start": 1.5,
        "load_end": 2.25,
        "executors": 0 if setup == BASELINE else int(setup.split()[0]),
        "counted": counted,
    }


def _report(drains: list[dict]) -> dict:
    return {
        "packets": PACKETS,
        "scenario": "baseline",
        "seed": 4,
        "duration_s": 60.0,
        "partitions": [1, 2],
        "brokers": 1,
        "workers": 2,
        "worker_cores": 1,
        "rounds": 2,
        "cpus": 2,
        "load_at_start": 0.5,
        "load_at_end": 3.0,
        "setups": [{"name": s.name} for s in setups("spark://127.0.0.1:1", 2)],
        "drains": add_ratios(drains),
    }


DRAINS = [
    _drain(1, 1, "local[2]", 16.0),
    _drain(1, 1, "1 worker", 24.0),
    _drain(1, 1, "2 workers", 20.0),
    _drain(1, 2, "local[2]", 20.0),
    _drain(1, 2, "1 worker", 22.0),
    _drain(1, 2, "2 workers", 16.0),
    # round 2: its own baseline, not round 1's
    _drain(2, 1, "local[2]", 10.0),
    _drain(2, 1, "1 worker", 19.0, counted=PACKETS - 1000),
    _drain(2, 1, "2 workers", 20.0),
    _drain(2, 2, "local[2]", 15.0),
    _drain(2, 2, "1 worker", 18.75),
    _drain(2, 2, "2 workers", 17.25),
]


def test_setups_are_local_then_one_to_n_workers_with_as_many_cores() -> None:
    got = setups("spark://127.0.0.1:7077", 3)
    assert [(s.name, s.master, s.cores_max) for s in got] == [
        ("local[2]", "local[2]", None),
        ("1 worker", "spark://127.0.0.1:7077", 1),
        ("2 workers", "spark://127.0.0.1:7077", 2),
        ("3 workers", "spark://127.0.0.1:7077", 3),
    ]


def test_ratio_is_the_time_over_local_of_the_same_round_and_partitions() -> None:
    ratios = {(d["round"], d["partitions"], d["setup"]): d["ratio_to_local"] for d in add_ratios(DRAINS)}
    assert ratios[(1, 1, "local[2]")] == 1.0
    assert ratios[(1, 1, "1 worker")] == 1.5  # 24 / 16
    assert ratios[(1, 1, "2 workers")] == 1.25
    assert ratios[(1, 2, "2 workers")] == 0.8  # faster than local[2]: 16 / 20
    assert ratios[(2, 1, "1 worker")] == 1.9  # 19 / 10, not 19 / 16 (round 1's local[2])
    assert ratios[(2, 2, "1 worker")] == 1.25
    assert ratios[(2, 2, "2 workers")] == 1.15


def test_ratio_without_a_local_drain_is_none() -> None:
    (only,) = add_ratios([_drain(1, 4, "2 workers", 12.0)])
    assert only["ratio_to_local"] is None
    assert "ratio_to_local" not in DRAINS[0]  # the input is left alone


def test_incomplete_drains_are_those_not_counting_every_packet() -> None:
    assert incomplete(DRAINS, PACKETS) == [DRAINS[7]]
    assert incomplete([_drain(1, 1, "local[2]", 5.0, counted=PACKETS + 3)], PACKETS) != []
    assert incomplete(DRAINS[:7], PACKETS) == []


def test_report_lines_table_load_and_incomplete_flag() -> None:
    text = format_report(_report(DRAINS))
    lines = text.splitlines()
    assert lines[0].startswith("netmon bench scaling: 200,000 baseline packets (seed 4, 60 s")
    assert "1 Kafka node and 2 Spark workers of 1 core; 2 rounds" in lines[0]
    row = next(line for line in lines if line.split()[:4] == ["1", "1", "worker", "1"])
    assert row.split()[4:] == ["24.00", "8,333", "1.50", "1.50->2.25", "1", "all"]
    flagged = next(line for line in lines if line.split()[:4] == ["1", "1", "worker", "2"])
    assert flagged.split()[4:7] == ["19.00", "10,526", "1.90"]
    assert flagged.endswith("199,000 of 200,000: INCOMPLETE")
    assert "| partitions | `local[2]` | 1 worker | 2 workers |" in lines
    assert (
        "| 1 | 16.0 / 10.0 s (12.5k / 20.0k) | 24.0 / 19.0 s (8.3k / 10.5k) | 20.0 / 20.0 s (10.0k / 10.0k) |"
    ) in lines
    assert "load average (1 min): 0.50 at the start, 3.00 at the end, 1.50-2.25" in text
    assert lines[-1] == (
        "INCOMPLETE: 1 of 12 drains did not count all 200,000 packets "
        "(round 2, 1 partition, 1 worker: 199,000)"
    )


def test_report_of_complete_drains_says_so() -> None:
    text = format_report(_report(DRAINS[:7]))
    assert text.splitlines()[-1] == "every drain counted all 200,000 packets"
    assert "INCOMPLETE" not in text


@pytest.mark.kafka
@pytest.mark.slow
def test_a_small_run_counts_every_packet_and_its_ratios_are_its_seconds() -> None:
    """20,000 packets into a 2-partition topic, drained on local[2] and on a 1-worker cluster
    (its own, stopped at the end): every packet counted, each ratio the seconds' quotient."""
    report = bench_scaling(packets=20_000, partitions=(2,), workers=1)
    drains = report["drains"]
    assert [(d["partitions"], d["setup"]) for d in drains] == [(2, "local[2]"), (2, "1 worker")]
    assert report["complete"] is True and report["incomplete"] == 0
    assert all(d["counted"] == 20_000 for d in drains)
    local, cluster = drains
    assert local["ratio_to_local"] == 1.0
    assert cluster["ratio_to_local"] == pytest.approx(cluster["seconds"] / local["seconds"], abs=0.001)
    for d in drains:
        assert d["packets_per_s"] == round(20_000 / d["seconds"])
        assert d["load_start"] >= 0 and d["load_end"] >= 0
    assert (local["executors"], cluster["executors"]) == (0, 1)
    assert "every drain counted all 20,000 packets" in format_report(report)
