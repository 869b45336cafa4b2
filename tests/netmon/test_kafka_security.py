"""Kafka authentication and TLS (faults issue, item 6), on a real broker with a SASL_SSL listener.

The broker is ``netmon broker start --secure`` (:meth:`netmon.broker.LocalBroker.start` with
``secure=True``) in a temporary state directory: its certificate is made there by ``keytool`` and
its user's password comes from an environment variable, as for a user. With the right keys every
client netmon opens works — the replay's producer, the pipeline's Spark source and its result
publisher, the alert service's consumer and the admin helpers; with a wrong password, without
trust in the broker's certificate, or without security, each fails at once with one line saying
why (never with the password in it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from netmon.broker import LocalBroker
from netmon.config import Config, ConfigError, KafkaConfig
from netmon.kafka_security import Secret, client_options, jaas_config, spark_options
from tests.conftest import REPO_ROOT, free_port

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"
PASSWORD_ENV = "NETMON_TEST_KAFKA_PASSWORD"
#: quotes, a backslash, spaces and a non-ASCII letter: escaped in server.properties and JAAS lines
PASSWORD = 'pa "ss" \\ wörd'
WRONG_ENV = "NETMON_TEST_KAFKA_WRONG_PASSWORD"


@dataclasses.dataclass
class Secured:
    broker: LocalBroker
    #: the clients' configuration: SASL_SSL, SCRAM-SHA-512, the broker's certificate as CA file
    cfg: Config


@pytest.fixture(scope="module")
def secured(netmon_config: Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secure")
    broker_cfg = netmon_config.replace(
        paths={"state_dir": base / "broker"},
        kafka={
            "port": free_port(),
            "controller_port": free_port(),
            # as netmon.toml says before the first start: no CA file yet (the broker makes it)
            "security_protocol": "SASL_SSL",
            "sasl_username": "netmon",
            "sasl_password_env": PASSWORD_ENV,
        },
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv(PASSWORD_ENV, PASSWORD)
        env.setenv(WRONG_ENV, "not the password")
        broker = LocalBroker(broker_cfg)
        status = broker.start(secure=True)
        try:
            assert status.running and status.security_protocol == "SASL_SSL"
            kafka = dataclasses.asdict(broker.client_kafka("SCRAM-SHA-512"))
            cfg = broker_cfg.replace(
                paths={"state_dir": base / "clients", "data_dir": base / "data"}, kafka=kafka
            )
            yield Secured(broker, cfg)
        finally:
            broker.stop()


def _kafka(cfg: Config, **changes: Any) -> KafkaConfig:
    return dataclasses.replace(cfg.kafka, **changes)


@pytest.mark.kafka
@pytest.mark.spark
def test_replay_pipeline_and_alerts_work_with_the_right_credentials(
    secured: Secured, spark: Any, tmp_path: Path
) -> None:
    from alerts.service import AlertService
    from ingest.producer import PacketProducer
    from ingest.replay import ReplayOptions, replay
    from netmon.config import AlertsConfig
    from netmon.kafka_admin import recreate_topic
    from netmon.results import read_results, results_dir
    from pipeline.job import start_pipeline
    from tests.pipeline.oracle import traffic_per_window

    topic = "netmon.test.secure"
    cfg = secured.cfg.replace(
        paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 1},
    )
    security = client_options(cfg.kafka)
    assert security["security_protocol"] == "SASL_SSL" and security["sasl_mechanism"] == "SCRAM-SHA-512"
    assert PASSWORD not in repr(security)  # a logged options dict shows no password
    recreate_topic(cfg.kafka.bootstrap, topic, 1, security=security)
    # The replay, through a producer with the [kafka] security options.
    expected = traffic_per_window(SAMPLE)
    producer = PacketProducer(cfg.kafka.bootstrap, topic, partitions=1, security=security)
    try:
        opts = ReplayOptions(close_windows_s=cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s)
        summary = replay(
            SAMPLE,
            bootstrap=cfg.kafka.bootstrap,
            topic=topic,
            options=opts,
            producer=producer,
            progress=False,
        )
    finally:
        producer.close()
    assert summary.acknowledged == summary.produced == sum(p for p, _ in expected.values())
    # The pipeline: Spark's Kafka source with the JAAS line and the PEM truststore; the publisher.
    pipeline = start_pipeline(spark, cfg, available_now=True, kinds=("traffic",))
    pipeline.await_termination(300)
    assert pipeline.failed() is None, pipeline.failed()
    pipeline.stop()
    table = read_results(results_dir(cfg, "traffic"))
    assert table is not None
    got = {
        (int(r["window_start"].timestamp() * 1_000_000) * 1000, int(r["proto"])): (r["packets"], r["bytes"])
        for r in table.to_pylist()
    }
    assert got == expected
    # The alert service's consumer reads the republished rows (its group, its own outbox).
    alerts = AlertsConfig(group_id="alerts-secure-test", poll_s=0.2)
    service = AlertService(cfg, alerts).open()
    try:
        rows = 0
        for _ in range(100):
            rows += service.poll_once(0.2).rows
            if rows >= len(got):
                break
    finally:
        service.close()
    assert rows == len(got)


@pytest.mark.kafka
def test_every_mechanism_logs_in_and_the_cli_says_what_clients_need(secured: Secured) -> None:
    from cli.main import cli
    from netmon.kafka_admin import check_reachable

    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        check_reachable(
            secured.cfg.kafka.bootstrap,
            security=client_options(_kafka(secured.cfg, sasl_mechanism=mechanism)),
        )
    # `netmon broker start --secure` on the running broker: harmless, and prints the client keys.
    k = secured.broker.cfg.kafka
    toml = secured.broker.home.parent / "netmon.toml"
    toml.write_text(
        f"[kafka]\nport = {k.port}\ncontroller_port = {k.controller_port}\n"
        f'security_protocol = "SASL_SSL"\nsasl_username = "netmon"\nsasl_password_env = "{PASSWORD_ENV}"\n'
    )
    env = {
        "NETMON_CONFIG": str(toml),
        "NETMON_STATE_DIR": str(secured.broker.home.parent),
        "NETMON_BOOTSTRAP_SERVERS": "",
        PASSWORD_ENV: PASSWORD,
    }
    result = CliRunner().invoke(cli, ["broker", "start", "--secure"], env=env)
    assert result.exit_code == 0, result.output
    assert "(SASL_SSL)" in result.output and PASSWORD not in result.output
    assert 'security_protocol = "SASL_SSL"' in result.output
    assert f'ssl_cafile = "{secured.broker.ca_file}"' in result.output
    # Without --secure while the secure one runs: a one-line refusal, nothing started.
    plain = CliRunner().invoke(cli, ["broker", "start"], env=env)
    assert plain.exit_code == 1 and "already running with --secure" in plain.output
    status = CliRunner().invoke(cli, ["broker", "status"], env=env)
    assert "(SASL_SSL)" in status.output


@pytest.mark.kafka
def test_wrong_credentials_no_trust_and_no_security_fail_in_one_line(secured: Secured) -> None:
    from alerts.service import AlertService
    from ingest.producer import BrokerUnavailable, PacketProducer
    from netmon.config import AlertsConfig
    from netmon.kafka_admin import KafkaSecurityError, KafkaUnreachable, check_reachable, ensure_topic

    cfg = secured.cfg
    bootstrap = cfg.kafka.bootstrap
    wrong = _kafka(cfg, sasl_password_env=WRONG_ENV)
    # The producer (replay, capture): BrokerUnavailable naming the refused login.
    with pytest.raises(BrokerUnavailable) as err:
        PacketProducer(bootstrap, "netmon.test.refused", security=client_options(wrong), timeout_s=2)
    _one_line(err.value, "refused the SASL login of 'netmon' (SCRAM-SHA-512): Authentication failed")
    # The alert service's consumer group: a KafkaError (`netmon alerts run` prints it in one line).
    alerts = AlertsConfig(group_id="alerts-refused", poll_s=0.2)
    service = AlertService(cfg.replace(kafka={"sasl_password_env": WRONG_ENV}), alerts)
    with pytest.raises(KafkaSecurityError) as err:
        service.open()
    service.close()
    _one_line(err.value, "refused the SASL login")
    # PLAIN: the broker's own words.
    plain = dataclasses.replace(wrong, sasl_mechanism="PLAIN")
    with pytest.raises(KafkaSecurityError) as err:
        ensure_topic(bootstrap, "netmon.test.refused", security=client_options(plain), timeout_s=2)
    _one_line(
        err.value, "refused the SASL login of 'netmon' (PLAIN): Authentication failed: Invalid username"
    )
    # No trust in the broker's certificate (the system's CAs do not know it).
    untrusted = _kafka(cfg, ssl_cafile="")
    with pytest.raises(KafkaUnreachable) as err:
        check_reachable(bootstrap, timeout_s=2, security=client_options(untrusted))
    _one_line(err.value, f"TLS handshake with {bootstrap} failed: self-signed certificate")
    # A client without TLS.
    bare = _kafka(cfg, security_protocol="SASL_PLAINTEXT", ssl_cafile="")
    with pytest.raises(KafkaSecurityError) as err:
        ensure_topic(bootstrap, "netmon.test.refused", security=client_options(bare), timeout_s=2)
    _one_line(err.value, "does the broker expect TLS?")
    # A named but unset password variable: a configuration error naming it, before any connection.
    with pytest.raises(ConfigError) as err:
        client_options(_kafka(cfg, sasl_password_env="NETMON_TEST_UNSET_VARIABLE"))
    _one_line(
        err.value, "[kafka] sasl_password_env: expected an environment variable holding the SASL password"
    )
    assert "NETMON_TEST_UNSET_VARIABLE" in str(err.value)


@pytest.mark.kafka
@pytest.mark.spark
def test_the_pipeline_with_a_wrong_password_fails_naming_the_refusal(
    secured: Secured, spark: Any, tmp_path: Path
) -> None:
    from pipeline.job import start_pipeline

    cfg = secured.cfg.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={"packets_topic": "netmon.test.secure", "sasl_password_env": WRONG_ENV},
        pipeline={"publish_results": False},
    )
    from pyspark.errors import StreamingQueryException

    pipeline = start_pipeline(spark, cfg, available_now=True, kinds=("traffic",))
    try:
        with pytest.raises(StreamingQueryException) as err:
            pipeline.await_termination(120)
        failed = pipeline.failed()
    finally:
        pipeline.stop()
    assert failed is not None and "\n" not in failed
    assert "SaslAuthenticationException: Authentication failed" in failed, failed
    # Spark's whole report (plan and options included) shows no password: the JAAS line is redacted.
    assert "not the password" not in str(err.value) and "not the password" not in failed


def _one_line(exc: BaseException, expected: str) -> None:
    message = str(exc)
    assert expected in message, message
    assert "\n" not in message and PASSWORD not in message and "not the password" not in message


# -- the options themselves (no broker) ---------------------------------------------------------


def test_plaintext_gives_no_options() -> None:
    assert client_options(KafkaConfig()) == {} and spark_options(KafkaConfig()) == {}


def test_client_and_spark_options_of_sasl_ssl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("NETMON_TEST_PW", PASSWORD)
    kafka = KafkaConfig(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="ops",
        sasl_password_env="NETMON_TEST_PW",
        ssl_cafile=str(ca),
    )
    options = client_options(kafka)
    assert options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "ops",
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(ca),
    }
    assert isinstance(options["sasl_plain_password"], Secret) and PASSWORD not in repr(options)
    spark = spark_options(kafka)
    assert spark == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ops" password="pa \\"ss\\" \\\\ wörd";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
    }
    assert jaas_config("PLAIN", "u", "p").startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    )


def test_a_client_certificate_becomes_a_pem_keystore(tmp_path: Path) -> None:
    cert = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n"
    key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
    (tmp_path / "client.pem").write_text(cert)
    (tmp_path / "client.key").write_text(key)
    (tmp_path / "both.pem").write_text(key + cert)
    (tmp_path / "rsa.key").write_text(key.replace("PRIVATE", "RSA PRIVATE"))
    ssl = {"security_protocol": "SSL", "ssl_certfile": str(tmp_path / "client.pem")}
    separate = spark_options(KafkaConfig(**ssl, ssl_keyfile=str(tmp_path / "client.key")))
    assert separate["kafka.ssl.keystore.type"] == "PEM"
    assert separate["kafka.ssl.keystore.certificate.chain"] == cert.strip()
    assert separate["kafka.ssl.keystore.key"] == key.strip()
    both = spark_options(KafkaConfig(security_protocol="SSL", ssl_certfile=str(tmp_path / "both.pem")))
    assert both["kafka.ssl.keystore.location"] == str(tmp_path / "both.pem")
    assert "kafka.ssl.keystore.key" not in both
    with pytest.raises(ConfigError, match=r"\[kafka\] ssl_keyfile: expected an unencrypted PKCS#8 key"):
        spark_options(KafkaConfig(**ssl, ssl_keyfile=str(tmp_path / "rsa.key")))
    assert client_options(KafkaConfig(**ssl, ssl_keyfile=str(tmp_path / "client.key")))["ssl_keyfile"] == str(
        tmp_path / "client.key"
    )
