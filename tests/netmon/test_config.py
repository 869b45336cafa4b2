"""Configuration: defaults, TOML, environment overrides, and errors that name section and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.config import Config, ConfigError, DistinctQuery, load_config


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


JOINS_TOML = """
[[queries.join]]
name = "syn"
query = "handshake"
window_s = 2
strategy = "none"

[[queries.join]]
name = "eth0-eth1"
query = "link"
left = "iface=eth0 and proto=tcp"
right = "iface=eth1"
key = "src_ip,dst_ip"
right_key = "dst_ip,src_ip"
window_s = 0.5
strategy = "cf"

[shedding]
cpu_budget = 0.5
budget_scope = "operator"
x_left = 0.9
x_right = 0.7
smoothing = 1
max_step = 0.1
buckets = 4
seed = 42
"""


def test_join_queries_and_shedding_parse(tmp_path: Path) -> None:
    from netmon.config import JoinQuery, SheddingConfig

    toml = tmp_path / "netmon.toml"
    toml.write_text(JOINS_TOML)
    cfg = load_config(toml, env={})
    assert cfg.queries.join == (
        JoinQuery(name="syn", query="handshake", window_s=2.0, strategy="none"),
        JoinQuery(
            name="eth0-eth1",
            query="link",
            left="iface=eth0 and proto=tcp",
            right="iface=eth1",
            key="src_ip,dst_ip",
            right_key="dst_ip,src_ip",
            window_s=0.5,
            strategy="cf",
        ),
    )
    assert isinstance(cfg.queries.join[0].window_s, float)
    assert cfg.shedding == SheddingConfig(
        cpu_budget=0.5,
        budget_scope="operator",
        x_left=0.9,
        x_right=0.7,
        smoothing=1.0,
        max_step=0.1,
        buckets=4,
        seed=42,
    )
    assert cfg.queries.topk == Config().queries.topk  # the other query kinds keep their defaults
    # `netmon config show` prints both sections, and its output loads back to the same values.
    shown = CliRunner().invoke(cli, ["--config", str(toml), "config", "show"], env={"NETMON_CONFIG": ""})
    assert shown.exit_code == 0, shown.output
    assert "\n[shedding]\ncpu_budget = 0.5\n" in shown.output
    assert shown.output.count("\n[[queries.join]]\n") == 2
    again = tmp_path / "again.toml"
    again.write_text(shown.output)
    back = load_config(again, env={})
    assert back.queries == cfg.queries and back.shedding == cfg.shedding


def test_join_and_shedding_defaults() -> None:
    from netmon.config import JoinQuery, SheddingConfig

    cfg = load_config(None, env={})
    assert cfg.queries.join == (JoinQuery(name="handshake"),)
    assert cfg.queries.join[0].strategy == "pni" and cfg.queries.join[0].window_s == 3.0
    assert cfg.shedding == SheddingConfig()
    assert (cfg.shedding.cpu_budget, cfg.shedding.buckets, cfg.shedding.smoothing) == (0.8, 8, 0.5)
    # No join queries at all is allowed (the joins kind then has nothing to run).
    assert Config().replace(queries={"join": ()}).queries.join == ()


_LINK = '[[queries.join]]\nname = "l"\nquery = "link"\nleft = "iface=eth0"\nright = "iface=eth1"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[queries.join]]\nname = "h"\nstrategy = "max-subset"\n',
            "[[queries.join]] 'h' strategy: expected one of none, cf, inp, pni (max-subset runs offline only",
        ),
        ('[[queries.join]]\nname = "h"\nquery = "both"\n', "[[queries.join]] 'h' query: expected one of"),
        ('[[queries.join]]\nname = "h"\nwindow_s = -1\n', "[[queries.join]] 'h' window_s: expected a number"),
        (_LINK.replace("iface=eth1", "ifcae=eth1"), "[[queries.join]] 'l' right: bad filter"),
        (
            _LINK.replace('left = "iface=eth0"\n', ""),
            "[[queries.join]] 'l' left: a link query needs a filter",
        ),
        (_LINK + 'key = "src_ip,nope"\n', "[[queries.join]] 'l' key: key: unknown field 'nope'"),
        (_LINK + 'right_key = "ts"\n', "[[queries.join]] 'l' right_key: key: unknown field 'ts'"),
        (
            '[[queries.join]]\nname = "a"\n[[queries.join]]\nname = "a"\n',
            "[queries].join: query names must be unique, got ['a', 'a']",
        ),
        ('[[queries.join]]\nname = "h"\nwindow = 3\n', "[queries].join[0]: unknown key 'window'"),
        (
            '[[queries.join]]\nname = "h"\ncpu_share = 1.5\n',
            "[[queries.join]] 'h' cpu_share: expected a fraction in (0, 1], got 1.5",
        ),
        (
            '[[queries.join]]\nname = "a"\ncpu_share = 0.6\n[[queries.join]]\nname = "b"\ncpu_share = 0.5\n',
            "[[queries.join]] cpu_share: the shares of the budget sum to more than 1, got [0.6, 0.5]",
        ),
        ('[[queries.join]]\nquery = "handshake"\n', "[queries].join[0]: missing required key 'name'"),
        ('[[queries.join]]\nname = "h"\nwindow_s = "3"\n', "[queries].join[0].window_s: expected float"),
        ("[shedding]\ncpu_budget = 0\n", "[shedding] cpu_budget: expected a fraction > 0, got 0.0"),
        ("[shedding]\ncpu_budget = -0.5\n", "[shedding] cpu_budget: expected a fraction > 0"),
        (
            '[shedding]\nbudget_scope = "cpu"\n',
            "[shedding] budget_scope: expected one of batch, operator, got 'cpu'",
        ),
        ("[shedding]\nx_left = 1.5\n", "[shedding] x_left: expected a fraction in [0, 1], got 1.5"),
        ("[shedding]\nx_right = -0.1\n", "[shedding] x_right: expected a fraction in [0, 1]"),
        ("[shedding]\nsmoothing = 0\n", "[shedding] smoothing: expected a number in (0, 1]"),
        ("[shedding]\nmax_step = 2\n", "[shedding] max_step: expected a number in (0, 1]"),
        ("[shedding]\nbuckets = 0\n", "[shedding] buckets: expected an integer >= 1, got 0"),
        ("[shedding]\nbuckets = 2.5\n", "[shedding].buckets: expected int, got float"),
        ("[shedding]\ncpu_budgt = 0.5\n", "[shedding]: unknown key 'cpu_budgt'"),
    ],
)
def test_join_and_shedding_errors(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(toml, env={})
    assert message in str(err.value)
    assert "\n" not in str(err.value)  # one line
    # The command line reports it as a configuration error, not a traceback.
    result = CliRunner().invoke(cli, ["--config", str(toml), "config", "show"], env={"NETMON_CONFIG": ""})
    assert result.exit_code == 1 and message in result.output


def test_join_settings_are_checked_however_they_are_built() -> None:
    from netmon.config import JoinQuery, QueriesConfig, SheddingConfig

    with pytest.raises(ConfigError, match=r"\[shedding\] cpu_budget"):
        Config().replace(shedding={"cpu_budget": 0.0})
    with pytest.raises(ConfigError, match=r"\[shedding\] x_left"):
        SheddingConfig(x_left=2.0)
    with pytest.raises(ConfigError, match=r"\[\[queries\.join\]\] 'w' right"):
        JoinQuery(name="w", query="link", left="iface=eth0")
    with pytest.raises(ConfigError, match=r"\[\[queries\.join\]\] name: query names must be unique"):
        QueriesConfig(join=(JoinQuery(name="a"), JoinQuery(name="a")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[queries.topk]]\nname = "t"\nk = 0\n', "[[queries.topk]] 't' k: expected an integer >= 1, got 0"),
        (
            '[[queries.topk]]\nname = "t"\nwindow_s = 1.0\nsub_window_s = 0.3\n',
            "[[queries.topk]] 't' window_s: expected a multiple of sub_window_s = 0.3, got 1.0",
        ),
        (
            '[[queries.topk]]\nname = "t"\nsub_window_s = 0.0000005\n',
            "[[queries.topk]] 't' sub_window_s: expected a whole number of microseconds",
        ),
        (
            '[[queries.topk]]\nname = "t"\nkey = "src_ip,nope"\n',
            "[[queries.topk]] 't' key: key: unknown field 'nope'",
        ),
        (
            '[[queries.topk]]\nname = "t"\nweight = "pkts"\n',
            "[[queries.topk]] 't' weight: expected 'packets' or",
        ),
        ('[[queries.topk]]\nname = ""\n', "[[queries.topk]] name: expected a non-empty query name"),
        (
            '[[queries.distinct]]\nname = "d"\nlg_k = 30\n',
            "[[queries.distinct]] 'd' lg_k: expected an integer in 4..21",
        ),
        (
            '[[queries.distinct]]\nname = "d"\ngroup_by = "dts"\n',
            "[[queries.distinct]] 'd' group_by: key: unknown",
        ),
        (
            '[[queries.distinct]]\nname = "d"\nwindow_s = 0\n',
            "[[queries.distinct]] 'd' window_s: expected a number > 0",
        ),
        (
            '[[queries.distinct]]\nname = "d"\nwindow_s = 60\nwindow_range_s = [90, 120]\n',
            "[[queries.distinct]] 'd' window_range_s: expected [min, max] around window_s = 60",
        ),
        (
            '[[queries.distinct]]\nname = "d"\nsub_window_s = 2\nwindow_range_s = [9, 60]\n',
            "[[queries.distinct]] 'd' window_s: expected a multiple of sub_window_s = 2, got 9",
        ),
        ("[kafka]\nport = 70000\n", "[kafka] port: expected a port in 1..65535, got 70000"),
        ("[kafka]\npartitions = 0\n", "[kafka] partitions: expected an integer >= 1, got 0"),
        ("[dashboard]\nport = 0\n", "[dashboard] port: expected a port in 1..65535, got 0"),
        ("[dashboard]\nrefresh_s = 0\n", "[dashboard] refresh_s: expected a number > 0"),
        ('[pipeline]\nkinds = ["trafic"]\n', "[pipeline] kinds: expected kinds among traffic, topk"),
        ("[pipeline]\nwatermark_s = -1\n", "[pipeline] watermark_s: expected a number >= 0"),
        ('[ingest]\ncompression = "brotli"\n', "[ingest] compression: expected one of lz4, zstd"),
        ("[spark]\nshuffle_partitions = 0\n", "[spark] shuffle_partitions: expected an integer >= 1"),
        (
            '[[alerts.targets]]\nname = "t"\nurl = "http://a..b/"\n',
            "[[alerts.targets]] 't' url: expected an http:// or https:// URL with a host name, got '<hidden",
        ),
        (
            '[[alerts.targets]]\nname = "t"\nurl = "https://x:99999/"\n',
            "[[alerts.targets]] 't' url: expected",
        ),
        ('[[alerts.targets]]\nname = "t"\nurl = "ftp://x/"\n', "[[alerts.targets]] 't' url: expected"),
    ],
)
def test_every_value_is_checked_at_load_time(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(toml, env={})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_good_values_load_and_urls_with_ports_and_ipv6_pass(tmp_path: Path) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        '[[queries.topk]]\nname = "t"\nwindow_s = 1.5\nsub_window_s = 0.5\nk = 1\n'
        '[[alerts.targets]]\nname = "a"\nurl = "http://127.0.0.1:8080/hook"\n'
        '[[alerts.targets]]\nname = "b"\nurl = "https://[::1]:9443/h"\n'
    )
    cfg = load_config(toml, env={})
    assert cfg.queries.topk[0].window_s == 1.5 and [t.name for t in cfg.alerts.targets] == ["a", "b"]


def test_one_loader_types_fields_from_annotations_without_eval() -> None:
    import inspect

    import netmon.config.loader as loader

    assert "eval(" not in inspect.getsource(loader)
    assert not hasattr(loader, "_QUERY_TYPES")


def test_record_columns_without_pyarrow_match_the_arrow_schema() -> None:
    from netmon.columns import RECORD_COLUMNS
    from netmon.records import ARROW_SCHEMA

    assert RECORD_COLUMNS == tuple(ARROW_SCHEMA.names)


def test_loading_the_configuration_imports_no_pyarrow() -> None:
    import subprocess
    import sys

    code = "import sys, netmon.config as c; c.load_config(None, env={}); print('pyarrow' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[kafka]\nsecurity_protocol = "TLS"\n',
            "[kafka] security_protocol: expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, got 'TLS'",
        ),
        (
            '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "GSSAPI"\n',
            "[kafka] sasl_mechanism: expected one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got 'GSSAPI'",
        ),
        (
            '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_password_env = "PW"\n',
            "[kafka] sasl_username: expected a user name (SASL_SSL authenticates), got ''",
        ),
        (
            '[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_username = "ops"\n',
            "[kafka] sasl_password_env: expected the name of the environment variable holding the password",
        ),
        (
            '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_username = "ops"\n'
            'sasl_password_env = "my password"\n',
            "[kafka] sasl_password_env: expected the name of the environment variable",
        ),
        (
            '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_username = \'a"b\'\nsasl_password_env = "PW"\n',
            "[kafka] sasl_username: expected a user name",
        ),
        (
            '[kafka]\nsasl_username = "ops"\n',
            "[kafka] sasl_username: expected empty unless security_protocol is SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            '[kafka]\nssl_cafile = "/etc/hostname"\n',
            "[kafka] ssl_cafile: expected empty unless security_protocol is SSL or SASL_SSL",
        ),
        (
            '[kafka]\nsecurity_protocol = "SSL"\nssl_cafile = "/nonexistent/ca.pem"\n',
            "[kafka] ssl_cafile: expected an existing PEM file, got '/nonexistent/ca.pem'",
        ),
        (
            '[kafka]\nsecurity_protocol = "SSL"\nssl_keyfile = "/etc/hostname"\n',
            "[kafka] ssl_keyfile: expected empty unless ssl_certfile is set",
        ),
    ],
)
def test_kafka_security_keys_are_checked_at_load_time(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "netmon.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(toml, env={})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_kafka_security_keys_load_and_show_no_password(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\nsasl_username = "ops"\n'
        f'sasl_password_env = "NETMON_TEST_PW"\nssl_cafile = "{ca}"\n'
    )
    cfg = load_config(toml, env={})
    assert (cfg.kafka.sasl, cfg.kafka.tls) == (True, True)
    shown = cfg.to_dict()["kafka"]
    assert shown["sasl_password_env"] == "NETMON_TEST_PW" and shown["ssl_cafile"] == str(ca)
    assert load_config(None, env={}).kafka.security_protocol == "PLAINTEXT"
    # the file never holds the password: there is no key for it
    toml.write_text('[kafka]\nsasl_password = "x"\n')
    with pytest.raises(ConfigError, match="unknown key 'sasl_password'"):
        load_config(toml, env={})


def test_a_distinct_querys_window_range_bounds_its_run_time_windows(tmp_path: Path) -> None:
    """``window_range_s`` of a distinct query (issue 18 item 4): the windows ``netmon tune
    --window`` may set, checked as a top-k query's."""
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        '[[queries.distinct]]\nname = "d"\nwindow_s = 60\nsub_window_s = 2\nwindow_range_s = [10, 120]\n'
    )
    q = load_config(toml).queries.distinct[0]
    assert q.window_range_s == (10.0, 120.0)
    assert q.window_problem(30) is None and q.window_problem(120) is None
    assert q.window_problem(31) == "distinct query 'd': window 31 s is not a multiple of sub_window_s = 2"
    assert q.window_problem(8) == "distinct query 'd': window 8 s is outside window_range_s = [10, 120]"
    assert DistinctQuery(name="any", window_s=60).window_problem(600) is None  # no range: any multiple
