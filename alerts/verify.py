"""Signing webhook requests, and the receiver's check, in both signature schemes (docs/alerts.md).

**standard** (the default): `Standard Webhooks <https://www.standardwebhooks.com/>`_::

    webhook-id:        <event id>            (also the idempotency key)
    webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")>

The key is the secret ``whsec_<base64>`` decoded, or a raw secret's bytes, so any Standard
Webhooks library verifies the requests (``standardwebhooks.Webhook("whsec_...")``; a raw secret
as bytes: ``Webhook(b"...")``).

**netmon-v1** (netmon's scheme before Standard Webhooks, ``signature = "netmon-v1"``)::

    X-Netmon-Timestamp: <unix seconds>
    X-Netmon-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>
    Idempotency-Key:    <event id>

A receiver recomputes the HMAC over the raw body bytes exactly as received, compares it in constant
time, and rejects a timestamp more than ``tolerance_s`` away from its own clock, so a captured
request cannot be replayed later. Only the standard library is used: receivers can copy this
module. :func:`verify` raises :class:`SignatureError` (and nothing else) for any missing, odd or
wrong header.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "IDEMPOTENCY_HEADER",
    "ID_HEADER",
    "SCHEMES",
    "SIGNATURE_HEADER",
    "STANDARD_SIGNATURE_HEADER",
    "STANDARD_TIMESTAMP_HEADER",
    "TIMESTAMP_HEADER",
    "SignatureError",
    "sign",
    "sign_standard",
    "signature_headers",
    "standard_key",
    "verify",
]

#: the signature schemes (``[[alerts.targets]] signature``)
SCHEMES = ("standard", "netmon-v1")

ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"

TIMESTAMP_HEADER = "X-Netmon-Timestamp"
SIGNATURE_HEADER = "X-Netmon-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"

_SECRET_PREFIX = "whsec_"
_MAX_HEADER = 8192  # longer header values are not ours
_MAX_SIGNATURES = 16  # several may be offered while a sender rotates its secret


class SignatureError(ValueError):
    """The request is not authentic or is too old; the message says which check failed."""


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def standard_key(secret: str | bytes) -> bytes:
    """The HMAC key of a Standard Webhooks secret: ``whsec_<base64>`` decoded, else the raw bytes.

    >>> standard_key("whsec_c2VjcmV0"), standard_key("secret"), standard_key(b"whsec_x")
    (b'secret', b'secret', b'whsec_x')
    """
    if isinstance(secret, bytes | bytearray):
        return bytes(secret)  # bytes are the key itself, as in the Standard Webhooks libraries
    if not secret.startswith(_SECRET_PREFIX):
        return secret.encode()
    text = secret[len(_SECRET_PREFIX) :]
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a whsec_ secret must be base64 after the prefix") from None
    if not key:
        raise ValueError("a whsec_ secret must not be empty")
    return key


def sign(secret: str | bytes, timestamp: int | str, body: bytes) -> str:
    """The ``X-Netmon-Signature`` value (netmon-v1) for ``body`` sent at ``timestamp``.

    >>> sign("s3cret", 1700000000, b'{"status":"firing"}')
    'v1=...'
    """
    mac = hmac.new(_key(secret), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def sign_standard(secret: str | bytes, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """The ``webhook-signature`` value (Standard Webhooks) for message ``msg_id`` sent at ``timestamp``.

    >>> sign_standard("whsec_c2VjcmV0", "msg_1", 1700000000, b"{}")
    'v1,...'
    """
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(standard_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signature_headers(
    scheme: str, secret: str | bytes, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The id/timestamp/signature headers of one request (no signature when ``secret`` is empty)."""
    if scheme == "standard":
        headers = {ID_HEADER: msg_id, STANDARD_TIMESTAMP_HEADER: str(timestamp)}
        if secret:
            headers[STANDARD_SIGNATURE_HEADER] = sign_standard(secret, msg_id, timestamp, body)
        return headers
    if scheme == "netmon-v1":
        headers = {TIMESTAMP_HEADER: str(timestamp)}
        if secret:
            headers[SIGNATURE_HEADER] = sign(secret, timestamp, body)
        return headers
    raise ValueError(f"unknown signature scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")


# --- the receiver's check -----------------------------------------------------------------------


def _lookup(headers: Mapping[str, Any], name: str) -> Any:
    """The header's raw value (None if absent), case-insensitively, whatever the mapping."""
    try:
        value = headers.get(name)
        if value is None:  # a plain dict: look the name up case-insensitively
            lower = name.lower()
            value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == lower), None)
    except Exception:  # noqa: BLE001 - an odd headers object is a request we cannot check
        raise SignatureError(f"cannot read the {name} header") from None
    return value


def _header(headers: Mapping[str, Any], name: str) -> str:
    value = _lookup(headers, name)
    if value is None:
        raise SignatureError(f"missing {name} header")
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            raise SignatureError(f"{name} header is not ASCII") from None
    if not isinstance(value, str):
        raise SignatureError(f"{name} header is not text")
    if len(value) > _MAX_HEADER:
        raise SignatureError(f"{name} header is too long")
    return value


def _timestamp(raw: str, name: str) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise SignatureError(f"{name} is not a unix time in seconds: {raw[:40]!r}")
    return int(raw)


def _fresh(timestamp: int, tolerance_s: float, now: float | None) -> None:
    age = (time.time() if now is None else now) - timestamp
    if not abs(age) <= tolerance_s:
        raise SignatureError(f"timestamp outside the tolerance: {age:+.0f} s (allowed ±{tolerance_s:g} s)")


def _scheme_of(headers: Mapping[str, Any]) -> str:
    if any(_lookup(headers, h) is not None for h in (STANDARD_SIGNATURE_HEADER, ID_HEADER)):
        return "standard"
    if any(_lookup(headers, h) is not None for h in (SIGNATURE_HEADER, TIMESTAMP_HEADER)):
        return "netmon-v1"
    raise SignatureError(f"no signature headers ({STANDARD_SIGNATURE_HEADER} or {SIGNATURE_HEADER})")


def _body(body: bytes | bytearray | memoryview | str) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def verify(
    secret: str | bytes,
    headers: Mapping[str, Any],
    body: bytes | bytearray | memoryview | str,
    *,
    scheme: str | None = None,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> int:
    """Check a request's signature and age; return its timestamp or raise :class:`SignatureError`.

    ``headers`` may be any mapping (``http.server``'s message, a dict); ``body`` the raw bytes as
    received (do not re-serialize parsed JSON: the signature covers the exact bytes). ``scheme``:
    "standard" or "netmon-v1"; None picks it from the headers present (a receiver that knows its
    sender's scheme should name it). Any missing, malformed or wrong header raises
    :class:`SignatureError`, never another exception.

    >>> body = b'{"status":"firing"}'
    >>> verify("s3cret", {"X-Netmon-Timestamp": "1700000000",
    ...                   "X-Netmon-Signature": sign("s3cret", 1700000000, body)}, body, now=1700000010)
    1700000000
    >>> headers = signature_headers("standard", "whsec_c2VjcmV0", "msg_1", 1700000000, body)
    >>> verify("whsec_c2VjcmV0", headers, body, scheme="standard", now=1700000010)
    1700000000
    """
    if scheme is None:
        scheme = _scheme_of(headers)
    if scheme not in SCHEMES:
        raise ValueError(f"unknown signature scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    if not secret:
        raise SignatureError("the receiver's secret is empty: nothing can be verified")
    raw = _body(body)
    if scheme == "netmon-v1":
        raw_ts = _header(headers, TIMESTAMP_HEADER)
        timestamp = _timestamp(raw_ts, TIMESTAMP_HEADER)
        _fresh(timestamp, tolerance_s, now)
        expected = sign(secret, raw_ts, raw)
        # The header may list several signatures ("v1=..,v1=..") while a sender rotates its secret.
        offered = [s.strip() for s in _header(headers, SIGNATURE_HEADER).split(",")[:_MAX_SIGNATURES]]
        if not any(s.isascii() and hmac.compare_digest(expected, s) for s in offered):
            raise SignatureError("signature mismatch")
        return timestamp
    msg_id = _header(headers, ID_HEADER)
    if not msg_id:
        raise SignatureError(f"empty {ID_HEADER} header")
    raw_ts = _header(headers, STANDARD_TIMESTAMP_HEADER)
    timestamp = _timestamp(raw_ts, STANDARD_TIMESTAMP_HEADER)
    _fresh(timestamp, tolerance_s, now)
    try:
        key = standard_key(secret)
    except ValueError as exc:
        raise SignatureError(f"the receiver's secret is unusable: {exc}") from None
    try:
        signed = msg_id.encode() + b"." + raw_ts.encode() + b"." + raw
    except UnicodeEncodeError:
        raise SignatureError(f"{ID_HEADER} header is not text") from None
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    # Space-separated "v1,<base64>" entries; other versions and malformed entries are ignored.
    for entry in _header(headers, STANDARD_SIGNATURE_HEADER).split()[:_MAX_SIGNATURES]:
        version, _, encoded = entry.partition(",")
        if version != "v1" or not encoded.isascii():
            continue
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(digest, candidate):
            return timestamp
    raise SignatureError("signature mismatch")
