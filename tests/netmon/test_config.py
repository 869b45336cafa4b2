"""Configuration: defaults, TOML, environment overrides, and errors that name section and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from netmon.cli import cli
from netmon.config import Config, ConfigError, load_config


def test_defaults_are_secure_and_outside_the_repository() -> None:
    cfg = load_config(None, env={})
    assert cfg.kafka.host == "127.0.0.1" and cfg.dashboard.host == "127.0.0.1"
    assert cfg.kafka.bootstrap == "127.0.0.1:9092"
    repo = Path(__file__).resolve().parents[2]
    for p in (cfg.paths.state_dir, cfg.paths.data_dir, cfg.paths.cache_dir):
        assert repo not in p.parents


def test_file_and_environment_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text('[kafka]\nport = 9999\n[pipeline]\nwatermark_s = 2\n[paths]\ndata_dir = "/srv/a"\n')
    env = {
        "NETMON_CONFIG": str(toml),
        "NETMON_DATA_DIR": str(tmp_path / "d"),
        "NETMON_BOOTSTRAP_SERVERS": "k:1",
    }
    cfg = load_config(None, env=env)
    assert cfg.kafka.port == 9999 and cfg.kafka.bootstrap == "k:1"
    assert cfg.pipeline.watermark_s == 2.0 and isinstance(cfg.pipeline.watermark_s, float)
    assert cfg.paths.data_dir == tmp_path / "d"  # the environment wins over the file
    assert cfg.source == toml


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[kafka]\nprot = 1\n", "[kafka]: unknown key 'prot'"),
        ("[kafak]\nport = 1\n", "unknown section [kafak]"),
        ('[kafka]\nport = "9092"\n', "[kafka].port: expected int, got str"),
        ("[kafka\n", "invalid TOML"),
    ],
)
def test_errors_name_section_and_key(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(toml, env={})
    assert message in str(err.value) and str(toml) in str(err.value)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_replace_and_round_trip_to_dict() -> None:
    cfg = Config().replace(kafka={"port": 1234})
    assert cfg.kafka.port == 1234 and cfg.to_dict()["kafka"]["port"] == 1234


def test_config_show_cli(tmp_path: Path) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text("[spark]\nshuffle_partitions = 7\n")
    result = CliRunner().invoke(
        cli, ["--config", str(toml), "config", "show", "--json"], env={"NETMON_CONFIG": ""}
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["spark"]["shuffle_partitions"] == 7
    bad = CliRunner().invoke(cli, ["--config", str(tmp_path / "x.toml"), "config", "show"])
    assert bad.exit_code == 1 and "configuration file not found" in bad.output


def test_query_tables_parse_and_show_round_trips(tmp_path: Path) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text('[[queries.topk]]\nname = "ports"\nkey = "proto,dst_port"\nk = 5\n')
    cfg = load_config(toml, env={})
    assert [q.name for q in cfg.queries.topk] == ["ports"] and cfg.queries.topk[0].k == 5
    assert cfg.queries.distinct  # built-in defaults stay when only topk is given
    args = ["--config", str(toml), "config", "show"]
    shown = CliRunner().invoke(cli, args, env={"NETMON_CONFIG": ""}).output
    again = tmp_path / "again.toml"
    again.write_text(shown)
    assert load_config(again, env={}).queries == cfg.queries


def test_query_errors(tmp_path: Path) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text('[[queries.topk]]\nkey = "src_ip"\n')
    with pytest.raises(ConfigError, match=r"queries\]\.topk\[0\]: missing required key 'name'"):
        load_config(toml, env={})
    toml.write_text('[[queries.topk]]\nname = "a"\n[[queries.topk]]\nname = "a"\n')
    with pytest.raises(ConfigError, match="unique"):
        load_config(toml, env={})
