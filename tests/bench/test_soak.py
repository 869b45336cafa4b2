"""``bench.soak`` (``netmon bench soak``): the plateau rule on known series, and a one-minute soak.

The soak itself (10-30 minutes at 20,000 packets/s) is run by hand and recorded in
``docs/performance.md``; here a one-minute run at 2,000 packets/s through a real broker and the
session's Spark, with retention shortened to seconds, checks that the samples are the run's own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.soak import SoakSettings, disk_bytes, format_report, second_half_growth, soak, verdict


def _least_squares_slope(points: list[tuple[float, float]]) -> float:
    """The slope of the least-squares line, from the normal equations, in plain Python."""
    n = len(points)
    sx = sum(t for t, _ in points)
    sy = sum(v for _, v in points)
    sxx = sum(t * t for t, _ in points)
    sxy = sum(t * v for t, v in points)
    return (n * sxy - sx * sy) / (n * sxx - sx * sx)


def _sse(points: list[tuple[float, float]], slope: float) -> float:
    """Squared error of the best line of that slope (its intercept through the means)."""
    mt = sum(t for t, _ in points) / len(points)
    mv = sum(v for _, v in points) / len(points)
    return sum((v - (mv + slope * (t - mt))) ** 2 for t, v in points)


def _second_half(points: list[tuple[float, int]]) -> list[tuple[float, float]]:
    middle = (points[0][0] + points[-1][0]) / 2
    return [(t, float(v)) for t, v in points if t >= middle]


# Ten minutes sampled every 10 s (bytes): flat with noise, growing linearly, and growing for the
# first four minutes then flat with noise (a sawtooth of retention passes every 30 s).
TIMES = [10.0 * i for i in range(61)]
FLAT = [(t, 500_000_000 + (7_000 if int(t) % 20 else -7_000)) for t in TIMES]
LINEAR = [(t, 100_000_000 + 50_000 * int(t)) for t in TIMES]
PLATEAU = [(t, 12_000_000 * min(int(t), 240) + 3_000_000 * ((int(t) // 10) % 3)) for t in TIMES]


@pytest.mark.parametrize(
    ("points", "expected"), [(FLAT, "plateau"), (LINEAR, "growing"), (PLATEAU, "plateau")]
)
def test_growth_is_the_least_squares_slope_of_the_second_half(
    points: list[tuple[float, int]], expected: str
) -> None:
    growth = second_half_growth(points)
    tail = _second_half(points)
    slope = _least_squares_slope(tail)  # per second
    assert growth == pytest.approx(slope * 60, rel=1e-9, abs=1e-6)
    # It is the minimum: any other slope fits the second half worse.
    for other in (slope * 1.01 + 1e-3, slope * 0.99 - 1e-3):
        assert _sse(tail, other) > _sse(tail, slope)
    assert verdict(growth, points[-1][1]) == expected


def test_known_growths_and_the_threshold() -> None:
    assert second_half_growth(LINEAR) == pytest.approx(50_000 * 60)
    assert second_half_growth(FLAT) == pytest.approx(0, abs=2_000)
    # Flat after four minutes: the first half's growth does not count.
    assert abs(second_half_growth(PLATEAU) or 0) < 1e-3 * 12_000_000 * 60
    # 1 % of the end value per 10 minutes: 100 MB at the end allows 0.1 MB/min.
    assert verdict(99_000.0, 100_000_000) == "plateau"
    assert verdict(101_000.0, 100_000_000) == "growing"
    assert verdict(101_000.0, 100_000_000, threshold_pct=2.0) == "plateau"
    assert verdict(3.0, 0, floor=40) == "plateau"  # a lag near 0 within its floor
    assert verdict(-1e9, 1) == "plateau"  # falling
    assert second_half_growth([(0.0, 1), (10.0, 2), (20.0, 3)]) is None  # two points in the second half
    assert verdict(None, 5) == "too short"


def test_disk_bytes_counts_like_du(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_bytes(b"x" * 10_000)
    (tmp_path / "a" / "b" / "g").write_bytes(b"y" * 100)
    (tmp_path / "a" / "b" / "link").hardlink_to(tmp_path / "a" / "f")  # counted once
    (tmp_path / "a" / "sym").symlink_to(tmp_path / "a" / "f")  # not followed
    assert disk_bytes(tmp_path / "a") == _du(tmp_path / "a") > 10_000
    assert disk_bytes(tmp_path / "missing") == 0


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_a_one_minute_soak_samples_the_run(spark, tmp_path: Path) -> None:
    settings = SoakSettings(
        minutes=1.0,
        pps=2000,
        sample_s=4.0,
        loop_s=10.0,
        retention_s=20.0,
        compact_after_s=5.0,
        interval_s=5.0,
        kafka_retention_s=20.0,
        segment_s=5.0,
    )
    seen: list[dict] = []
    result = soak(settings, spark=spark, progress=seen.append, work=tmp_path / "soak")
    samples = result["samples"]
    assert samples == seen and len(samples) >= 14
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    assert 58 <= samples[-1]["t"] <= 64
    # Every sample measured the processes: the driver, Spark's JVM, the broker's JVM.
    for s in samples:
        assert s["rss driver"] > 0 and s["rss spark jvm"] > 0 and s["rss broker"] > 0
        assert s["fds driver"] > 0 and s["fds spark jvm"] > 0
        parts = [k for k in s if k.startswith("results/")] + ["checkpoints", "control", "data other"]
        assert s["data total"] == sum(s[k] for k in parts)
    assert any(s["lag"] is not None for s in samples)
    assert samples[-1]["results/traffic"] > 0 and samples[-1]["kafka log dir"] > 0
    # The disk figures at the end are what du says of the same directories.
    data, kafka = Path(result["dirs"]["data"]), Path(result["dirs"]["kafka log dir"])
    end = result["end_disk"]
    for kind in result["kinds"]:
        assert end[f"results/{kind}"] == _du(data / "results" / kind) > 0
    assert end["checkpoints"] == _du(data / "checkpoints")
    assert end["data total"] == _du(data)
    assert end["kafka log dir"] == _du(kafka) > 0
    # The producer held its rate and the pipeline read what it sent.
    assert result["produced_pps"] >= 0.5 * settings.pps
    assert 0 < result["processed_packets"] <= result["produced_packets"]
    # Retention ran: the traffic rows left are the last retention_s (+ a pass interval, a batch).
    from netmon.results import read_results

    ends = read_results(data / "results" / "traffic", columns=["window_end"])["window_end"].to_pylist()
    span = (max(ends) - min(ends)).total_seconds()
    assert span <= settings.retention_s + settings.interval_s + 10
    # A verdict for every series but the load average, and the report names them.
    series = result["series"]
    assert {"rss driver", "checkpoints", "kafka log dir", "lag"} <= set(series)
    assert all(e["verdict"] in ("plateau", "growing") for n, e in series.items() if n != "load 1m")
    assert "verdict" not in series["load 1m"]
    report = "\n".join(format_report(result))
    assert "results_days = 0.000231481 (20 s)" in report and "kafka log dir" in report
