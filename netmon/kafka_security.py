"""Kafka authentication and TLS for every client netmon opens, from ``[kafka]`` (docs/security.md).

:func:`client_options` gives the keyword arguments of kafka-python's ``KafkaProducer``,
``KafkaConsumer`` and ``KafkaAdminClient``; :func:`spark_options` the ``kafka.*`` options of Spark's
Kafka source. Both read the SASL password from the environment variable ``[kafka]
sasl_password_env`` names when they are called (the password is never in the file): a variable
that is not set is a one-line :class:`~netmon.config.ConfigError` naming it.

The password travels only inside the returned values: kafka-python's ``sasl_plain_password`` is a
:class:`Secret` (a ``str`` whose ``repr`` is ``'***'``, so a logged options dict shows no
password), and Spark's ``kafka.sasl.jaas.config`` is redacted by Spark in its logs and plans.

Spark reads PEM files natively (Kafka clients >= 2.7): the CA file as a PEM truststore
(``kafka.ssl.truststore.type=PEM``, ``kafka.ssl.truststore.location``), so on a cluster it must be
at the same path on the executors. A client certificate (mutual TLS) is a PEM keystore: the
``ssl_certfile`` itself when it holds the key too, else the chain and the key inline
(``kafka.ssl.keystore.certificate.chain``, ``kafka.ssl.keystore.key``); Spark needs the key as
unencrypted PKCS#8 (``BEGIN PRIVATE KEY``).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netmon.config.checks import ConfigError
from netmon.config.sections import KafkaConfig

__all__ = [
    "Secret",
    "client_options",
    "diagnose",
    "jaas_config",
    "jaas_quote",
    "password",
    "spark_options",
]

#: the JAAS login module of each SASL mechanism (Kafka's Java client, as Spark's source uses it)
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_PEM_KEY = re.compile(r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----\s*", re.S)


class Secret(str):
    """A string that never shows itself in a ``repr`` (and so in a logged dict or exception)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"


def password(kafka: KafkaConfig) -> Secret:
    """The SASL password, read now from ``$<sasl_password_env>``; ConfigError when it is unset or empty."""
    name = kafka.sasl_password_env
    value = os.environ.get(name, "") if name else ""
    if not value:
        raise ConfigError(
            f"[kafka] sasl_password_env: expected an environment variable holding the SASL password, "
            f"got {name!r}, which is not set or empty"
        )
    return Secret(value)


def _path(value: str) -> str:
    return str(Path(value).expanduser())


def client_options(kafka: KafkaConfig) -> dict[str, Any]:
    """kafka-python keyword arguments for ``[kafka]``'s security settings (``{}``: PLAINTEXT).

    >>> client_options(KafkaConfig())
    {}
    """
    if kafka.security_protocol == "PLAINTEXT":
        return {}
    options: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.sasl:
        options |= {
            "sasl_mechanism": kafka.sasl_mechanism,
            "sasl_plain_username": kafka.sasl_username,
            "sasl_plain_password": password(kafka),
        }
    if kafka.tls:
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(kafka, key):
                options[key] = _path(getattr(kafka, key))
    return options


def jaas_quote(value: str) -> str:
    """A JAAS option value: double-quoted; backslash, quote and line breaks escaped as Java's
    ``StreamTokenizer`` (Kafka's JAAS parser) reads them."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def jaas_config(mechanism: str, username: str, secret: str) -> str:
    """Kafka's ``sasl.jaas.config`` line for a SASL client (``PlainLoginModule`` or
    ``ScramLoginModule``). It holds the password: never log it."""
    return (
        f"{_LOGIN_MODULES[mechanism]} required username={jaas_quote(username)} password={jaas_quote(secret)};"
    )


def _read(key: str, value: str) -> str:
    try:
        return Path(value).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"[kafka] {key}: expected a readable PEM file, got {value!r} ({exc})") from None


def spark_options(kafka: KafkaConfig) -> dict[str, str]:
    """The Spark Kafka source's ``kafka.*`` options for ``[kafka]``'s security settings
    (``{}``: PLAINTEXT). The JAAS line holds the password: never log these values.

    >>> spark_options(KafkaConfig())
    {}
    """
    if kafka.security_protocol == "PLAINTEXT":
        return {}
    options = {"kafka.security.protocol": kafka.security_protocol}
    if kafka.sasl:
        options |= {
            "kafka.sasl.mechanism": kafka.sasl_mechanism,
            "kafka.sasl.jaas.config": jaas_config(kafka.sasl_mechanism, kafka.sasl_username, password(kafka)),
        }
    if kafka.tls and kafka.ssl_cafile:
        options |= {
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": _path(kafka.ssl_cafile),
        }
    if kafka.tls and kafka.ssl_certfile:
        options |= _keystore(kafka)
    return options


def _keystore(kafka: KafkaConfig) -> dict[str, str]:
    """A PEM keystore for the client certificate: the file itself when it holds the key too (no
    ``ssl_keyfile``), else the certificate chain and the key inline (a PEM keystore file holds both)."""
    chain = _read("ssl_certfile", kafka.ssl_certfile)
    key_text = _read("ssl_keyfile", kafka.ssl_keyfile) if kafka.ssl_keyfile else chain
    key = _PEM_KEY.search(key_text)
    if key is None or key.group(1) != "":
        found = f"a {key.group(1)}PRIVATE KEY" if key else "no private key"
        raise ConfigError(
            f"[kafka] {'ssl_keyfile' if kafka.ssl_keyfile else 'ssl_certfile'}: expected an unencrypted "
            f"PKCS#8 key (BEGIN PRIVATE KEY) for Spark's Kafka source, got {found} "
            "(openssl pkcs8 -topk8 -nocrypt converts one)"
        )
    if not kafka.ssl_keyfile:
        return {"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": _path(kafka.ssl_certfile)}
    return {
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": _PEM_KEY.sub("", chain).strip(),
        "kafka.ssl.keystore.key": key.group(0).strip(),
    }


def diagnose(bootstrap: str, options: Mapping[str, Any], timeout_s: float = 5.0) -> str | None:
    """Why a kafka-python client with ``options`` (:func:`client_options`) gets no answer from the
    first broker of ``bootstrap``, in one line; None when nothing is found.

    kafka-python retries a refused TLS handshake or SASL login until its timeout and then reports
    only the timeout; this makes one connection itself, blocking: the TLS handshake with the same
    trust settings, then the SASL handshake and login with kafka-python's own mechanisms, and
    returns the first refusal with the broker's reason. A plaintext client the broker hangs up on
    is told so (the broker may expect TLS or SASL). The password is never in the result.
    """
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    host = host.strip("[]")
    where = f"{host}:{port}"
    protocol = str(options.get("security_protocol", "PLAINTEXT"))
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except (OSError, ValueError):
        return None  # nothing listens: the caller's own error says so
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        if protocol in ("SSL", "SASL_SSL"):
            try:
                sock = _tls_context(options).wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as exc:
                return (
                    f"TLS handshake with {where} failed: {exc.verify_message} (is the broker's CA in "
                    "[kafka] ssl_cafile?)"
                )
            except (ssl.SSLError, OSError) as exc:
                return f"TLS handshake with {where} failed: {getattr(exc, 'reason', None) or exc}"
            stack.callback(sock.close)
        try:
            if protocol.startswith("SASL_"):
                return _sasl_login(sock, where, options)
            return _requests(sock, where, protocol)
        except (OSError, ValueError, TypeError) as exc:
            return f"Kafka at {where}: {protocol} connection failed ({type(exc).__name__}: {exc})"
        except Exception as exc:  # noqa: BLE001 - kafka-python's protocol errors: reported, not raised
            return f"Kafka at {where}: {protocol} connection failed ({type(exc).__name__})"


def _tls_context(options: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS settings kafka-python uses for these options (``KafkaSSLTransport``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = bool(options.get("ssl_check_hostname", True))
    if options.get("ssl_cafile"):
        ctx.load_verify_locations(options["ssl_cafile"])
    else:
        ctx.load_default_certs()
    if options.get("ssl_certfile"):
        ctx.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"), options.get("ssl_password"))
    return ctx


def _call(sock: socket.socket, parser: Any, request: Any) -> Any:
    """Send one request and read its response (ConnectionError if the broker hangs up first)."""
    parser.send_request(request)
    sock.sendall(parser.send_bytes())
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the broker closed the connection")
        for _, response in parser.receive_bytes(data):
            return response


def _requests(sock: socket.socket, where: str, protocol: str) -> str | None:
    """ApiVersions, then Metadata (which a SASL listener refuses before a login)."""
    from kafka.errors import KafkaProtocolError
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id="netmon-diagnose")
    expects = "SASL" if protocol == "SSL" else "TLS or SASL"
    hint = f"does the broker expect {expects}? ([kafka] security_protocol = {protocol})"
    try:
        _call(sock, parser, ApiVersionsRequest(version=0))
    except (ConnectionError, KafkaProtocolError):
        return f"Kafka at {where} refused a {protocol} request: {hint}"
    try:
        _call(sock, parser, MetadataRequest(topics=[], allow_auto_topic_creation=False, version=4))
    except (ConnectionError, KafkaProtocolError):
        return f"Kafka at {where} closed the {protocol} connection before any metadata: {hint}"
    return None


def _sasl_login(sock: socket.socket, where: str, options: Mapping[str, Any]) -> str | None:
    from kafka.errors import KafkaProtocolError
    from kafka.net.sasl import get_sasl_mechanism
    from kafka.protocol.parser import KafkaProtocol
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    name, user = str(options.get("sasl_mechanism")), options.get("sasl_plain_username")
    protocol = options.get("security_protocol")
    parser = KafkaProtocol(client_id="netmon-diagnose")
    try:
        handshake = _call(sock, parser, SaslHandshakeRequest(mechanism=name, version=1))
    except (ConnectionError, KafkaProtocolError):
        expects = "TLS" if protocol == "SASL_PLAINTEXT" else "another protocol"
        return (
            f"Kafka at {where} refused the SASL handshake: does the broker expect {expects}? "
            f"([kafka] security_protocol = {protocol})"
        )
    if handshake.error_code or name not in handshake.mechanisms:
        offered = ", ".join(handshake.mechanisms) or "none"
        return (
            f"Kafka at {where} does not offer SASL mechanism {name} (it offers {offered}; "
            "[kafka] sasl_mechanism)"
        )
    mechanism = get_sasl_mechanism(name)(host=where.rpartition(":")[0], **options)
    while not mechanism.is_done():
        try:
            response = _call(
                sock, parser, SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes(), version=1)
            )
        except ConnectionError:
            return f"Kafka at {where} closed the connection during the SASL login of {user!r} ({name})"
        if response.error_code:
            return f"Kafka at {where} refused the SASL login of {user!r} ({name}): {response.error_message}"
        mechanism.receive(response.auth_bytes)
    if not mechanism.is_authenticated():
        return f"Kafka at {where}: the SASL login of {user!r} ({name}) did not complete"
    return None
