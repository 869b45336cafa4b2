"""``netmon tune``: the resource manager's knobs written to its control file, checked as the
configuration is, shown with what is overridden, cleared; the running manager reads that file."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli.main import cli
from netmon.config import load_config
from pipeline.resource_manager import control_file, in_force, read_overrides


def _tune(config: Path, *args: str):
    return CliRunner().invoke(cli, ["--config", str(config), "tune", *args])


def _config(tmp_path: Path, manage: bool = True) -> Path:
    path = tmp_path / "netmon.toml"
    path.write_text(
        f'[paths]\ndata_dir = "{tmp_path / "data"}"\n[resources]\nmanage = {str(manage).lower()}\n'
    )
    return path


def test_knobs_are_written_merged_shown_and_cleared(tmp_path: Path) -> None:
    config = _config(tmp_path)
    cfg = load_config(config)
    done = _tune(config, "--cpu-budget", "0.5", "--importance", "top-sources=4")
    assert done.exit_code == 0, done.output
    assert "cpu_budget         0.5 (overridden)" in done.output
    done = _tune(config, "--keep-min-of", "top-pairs=0.5", "--json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)
    assert shown["cpu_budget"] == 0.5 and shown["importance"] == {"top-sources": 4.0}
    assert shown["keep_min_by_query"] == {"top-pairs": 0.5}
    assert shown["overridden"] == ["cpu_budget", "importance", "keep_min_by_query"]
    # what the running manager will read
    res = in_force(cfg, read_overrides(control_file(cfg)))
    assert (res.cpu_budget, res.keep_min_of("top-pairs"), res.keep_min_of("top-sources")) == (0.5, 0.5, 0.1)
    done = _tune(config, "--clear", "--json")
    assert done.exit_code == 0 and json.loads(done.output)["overridden"] == []
    assert not control_file(cfg).exists()


def test_bad_values_are_one_line_errors_and_change_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    cfg = load_config(config)
    assert _tune(config, "--cpu-budget", "2").exit_code == 0
    before = control_file(cfg).read_text()
    for args, message in (
        (("--reserve", "1.5"), "[resources] reserve: expected a fraction in [0, 1), got 1.5"),
        (("--importance", "nosuch=2"), "--importance: no drop box for query 'nosuch'"),
        (("--keep-min-of", "top-pairs"), "--keep-min-of: expected NAME=NUMBER, got 'top-pairs'"),
        (("--keep-min-of", "top-pairs=0"), "keep_min_by_query.top-pairs: expected a fraction in (0, 1]"),
        (("--importance", "top-destinations-bytes=2"), "no drop box for query 'top-destinations-bytes'"),
    ):
        done = _tune(config, *args)
        assert done.exit_code != 0 and message in done.output, (args, done.output)
    assert control_file(cfg).read_text() == before
    control_file(cfg).write_text("[1, 2]")
    done = _tune(config)
    assert done.exit_code != 0 and "expected a JSON object" in done.output and "--clear" in done.output


def test_it_says_when_no_manager_reads_the_knobs(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["--config", str(_config(tmp_path, manage=False)), "tune"])
    assert done.exit_code == 0
    assert "manage is false" in done.output


def test_a_top_k_or_distinct_window_is_checked_written_shown_and_cleared(tmp_path: Path) -> None:
    """``--window QUERY=SECONDS``: what the running pipeline's top-k or distinct kind reads at its
    next batch (``pipeline.window_knobs``); refused with a one-line reason when the query cannot
    take it, or when the name is a query of both kinds and says not which."""
    from pipeline.window_knobs import read_windows, window_file

    config = tmp_path / "netmon.toml"
    config.write_text(
        f'[paths]\ndata_dir = "{tmp_path / "data"}"\n'
        '[[queries.topk]]\nname = "src"\nwindow_s = 10\nsub_window_s = 2\nwindow_range_s = [4, 20]\n'
        '[[queries.topk]]\nname = "dst"\nkey = "dst_ip"\n'
        '[[queries.distinct]]\nname = "ddos"\nwindow_s = 60\nwindow_range_s = [10, 120]\n'
        '[[queries.distinct]]\nname = "dst"\ncount = "src_port"\n'
    )
    cfg = load_config(config)
    done = _tune(config, "--window", "src=6")
    assert done.exit_code == 0, done.output
    assert "window src         6 s (overridden)" in done.output and "window dst         10 s\n" in done.output
    assert "window distinct/ddos 60 s\n" in done.output
    assert "manage is false" not in done.output  # the windows need no resource manager
    assert read_windows(window_file(cfg)) == {"src": 6.0}
    done = _tune(config, "--window", "topk/dst=30", "--window", "ddos=120", "--json")
    shown = json.loads(done.output)
    assert shown["windows"] == {"src": 6.0, "dst": 30.0, "distinct/ddos": 120.0, "distinct/dst": 60.0}
    assert shown["windows_overridden"] == ["distinct/ddos", "dst", "src"]
    # a distinct query's entry is distinct/NAME: the pipeline's distinct kind reads it
    assert _tune(config, "--window", "distinct/dst=30").exit_code == 0
    expected = {"src": 6.0, "dst": 30.0, "distinct/ddos": 120.0, "distinct/dst": 30.0}
    assert read_windows(window_file(cfg)) == expected
    for args, message in (
        (("--window", "src=5"), "window 5 s is not a multiple of sub_window_s = 2"),
        (("--window", "src=24"), "window 24 s is outside window_range_s = [4, 20]"),
        (
            ("--window", "ddos=150"),
            "distinct query 'ddos': window 150 s is outside window_range_s = [10, 120]",
        ),
        (
            ("--window", "ddos=2.5"),
            "distinct query 'ddos': window 2.5 s is not a multiple of sub_window_s = 1",
        ),
        (
            ("--window", "dst=20"),
            "a top-k and a distinct query are named 'dst': say topk/dst or distinct/dst",
        ),
        (
            ("--window", "nosuch=4"),
            "--window: no top-k or distinct query 'nosuch' (queries with a window: src, dst, distinct/ddos, "
            "distinct/dst)",
        ),
        (("--window", "topk/ddos=4"), "--window: no top-k or distinct query 'topk/ddos'"),
        (("--window", "src"), "--window: expected NAME=NUMBER, got 'src'"),
    ):
        done = _tune(config, *args)
        assert done.exit_code != 0 and message in done.output, (args, done.output)
    assert read_windows(window_file(cfg)) == expected  # refused: nothing changed
    assert _tune(config, "--clear").exit_code == 0
    assert not window_file(cfg).exists()


def test_a_top_k_sub_window_is_checked_written_shown_and_cleared(tmp_path: Path) -> None:
    """``--granularity QUERY=SECONDS``: what the running top-k kind's granularity operator reads at
    its next batch (``pipeline.window_knobs.GranularityKnobs``); refused with a one-line reason
    naming the query and the rule when it cannot be taken at the window in force, and a window
    refused when it does not fit the sub-window in force; a refused command writes nothing."""
    from pipeline.window_knobs import granularity_file, read_windows, window_file

    config = tmp_path / "netmon.toml"
    config.write_text(
        f'[paths]\ndata_dir = "{tmp_path / "data"}"\n'
        '[[queries.topk]]\nname = "src"\nwindow_s = 12\nsub_window_s = 1\n'
        '[[queries.topk]]\nname = "dst"\nkey = "dst_ip"\nwindow_s = 16\nsub_window_s = 2\n'
    )
    cfg = load_config(config)
    done = _tune(config, "--granularity", "src=3")
    assert done.exit_code == 0, done.output
    assert "sub-window src     3 s (overridden)" in done.output and "sub-window dst     2 s\n" in done.output
    assert "manage is false" not in done.output  # the sub-windows need no resource manager
    assert read_windows(granularity_file(cfg)) == {"src": 3.0}
    done = _tune(config, "--granularity", "topk/dst=8", "--json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)
    # the configuration's default distinct queries are listed too, as distinct/NAME (not overridden)
    top_k = {key: s for key, s in shown["sub_windows"].items() if not key.startswith("distinct/")}
    assert top_k == {"src": 3.0, "dst": 8.0} and shown["sub_windows_overridden"] == ["dst", "src"]
    for args, message in (
        (
            ("--granularity", "src=2.5"),
            "--granularity: top-k query 'src': sub-window 2.5 s is not a whole multiple",
        ),
        (
            ("--granularity", "src=5"),
            "top-k query 'src': sub-window 5 s is more than sub_window_max_factor = 4",
        ),
        (
            ("--granularity", "dst=6"),
            "top-k query 'dst': sub-window 6 s: the window 16 s is not a multiple of it",
        ),
        (("--granularity", "nosuch=2"), "--granularity: no top-k query 'nosuch' (top-k queries: src, dst)"),
        (("--window", "src=8", "--granularity", "src=3"), "sub-window 3 s: the window 8 s is not a multiple"),
    ):
        done = _tune(config, *args)
        assert done.exit_code != 0 and message in done.output, (args, done.output)
        errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and message in errors[0], done.output  # one line
    assert read_windows(granularity_file(cfg)) == {"src": 3.0, "dst": 8.0}  # refused: nothing changed
    assert not window_file(cfg).exists()  # the refused --window src=8 was not written either
    # A window must fit the sub-window in force (the running kind would otherwise drop it).
    done = _tune(config, "--window", "src=8")
    assert done.exit_code != 0, done.output
    assert (
        "--window: top-k query 'src': window 8 s is not a multiple of its sub-window 3 s in force"
        in done.output
    )
    assert not window_file(cfg).exists()
    done = _tune(config, "--window", "src=9")
    assert done.exit_code == 0, done.output
    assert read_windows(window_file(cfg)) == {"src": 9.0}
    assert _tune(config, "--window", "src=8", "--granularity", "src=2").exit_code == 0  # both at once
    assert read_windows(window_file(cfg)) == {"src": 8.0}
    assert read_windows(granularity_file(cfg)) == {"src": 2.0, "dst": 8.0}
    assert _tune(config, "--clear").exit_code == 0
    assert not granularity_file(cfg).exists()


def test_a_distinct_sub_window_is_checked_written_shown_and_cleared(tmp_path: Path) -> None:
    """``--granularity distinct/NAME=SECONDS``: what the running distinct kind's granularity
    operator reads at its next batch (``pipeline.window_knobs.GranularityKnobs(kind="distinct")``),
    beside a top-k query of the same name; refused with the top-k knob's one-line reasons."""
    from pipeline.window_knobs import granularity_file, read_windows

    config = tmp_path / "netmon.toml"
    config.write_text(
        f'[paths]\ndata_dir = "{tmp_path / "data"}"\n'
        '[[queries.topk]]\nname = "ddos"\nwindow_s = 12\nsub_window_s = 1\n'
        '[[queries.distinct]]\nname = "ddos"\ncount = "src_ip"\ngroup_by = "dst_ip"\n'
        "window_s = 60\nsub_window_s = 2\n"
    )
    cfg = load_config(config)
    done = _tune(config, "--granularity", "distinct/ddos=6")
    assert done.exit_code == 0, done.output
    assert "sub-window distinct/ddos 6 s (overridden)" in done.output
    assert "sub-window ddos    1 s\n" in done.output  # the top-k query of the same name: untouched
    assert read_windows(granularity_file(cfg)) == {"distinct/ddos": 6.0}
    done = _tune(config, "--granularity", "ddos=3", "--json")
    assert done.exit_code == 0, done.output
    shown = json.loads(done.output)
    assert shown["sub_windows"] == {"ddos": 3.0, "distinct/ddos": 6.0}
    assert shown["sub_windows_overridden"] == ["ddos", "distinct/ddos"]
    for args, message in (
        (
            ("--granularity", "distinct/ddos=3"),
            "--granularity: distinct query 'ddos': sub-window 3 s is not a whole multiple of sub_window_s",
        ),
        (
            ("--granularity", "distinct/ddos=10"),
            "distinct query 'ddos': sub-window 10 s is more than sub_window_max_factor = 4",
        ),
        (
            ("--granularity", "distinct/ddos=8"),
            "distinct query 'ddos': sub-window 8 s: the window 60 s is not a multiple of it",
        ),
        (
            ("--window", "distinct/ddos=20", "--granularity", "distinct/ddos=8"),
            "distinct query 'ddos': sub-window 8 s: the window 20 s is not a multiple of it",
        ),
        (
            ("--granularity", "distinct/nosuch=2"),
            "--granularity: no distinct query 'nosuch' (distinct queries: ddos)",
        ),
    ):
        done = _tune(config, *args)
        assert done.exit_code != 0 and message in done.output, (args, done.output)
        errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and message in errors[0], done.output  # one line
    assert read_windows(granularity_file(cfg)) == {"ddos": 3.0, "distinct/ddos": 6.0}  # refused: unchanged
    assert _tune(config, "--clear").exit_code == 0
    assert not granularity_file(cfg).exists()
