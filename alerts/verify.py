"""Signing webhook requests, and the receiver's check (``docs/alerts.md`` shows the same check).

Each POST carries::

    X-Netmon-Timestamp: <unix seconds>
    X-Netmon-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>
    Idempotency-Key:    <event id>

A receiver recomputes the HMAC over the timestamp header, a dot and the raw body bytes exactly as
received, compares it in constant time, and rejects a timestamp more than ``tolerance_s`` away from
its own clock, so a captured request cannot be replayed later. Only the standard library is used:
receivers can copy this module.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

__all__ = [
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "SignatureError",
    "sign",
    "verify",
]

TIMESTAMP_HEADER = "X-Netmon-Timestamp"
SIGNATURE_HEADER = "X-Netmon-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"


class SignatureError(ValueError):
    """The request is not authentic or is too old; the message says which check failed."""


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def sign(secret: str | bytes, timestamp: int | str, body: bytes) -> str:
    """The signature header value for ``body`` sent at ``timestamp``.

    >>> sign("s3cret", 1700000000, b'{"status":"firing"}')
    'v1=...'
    """
    mac = hmac.new(_key(secret), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if value is None:  # a plain dict: look the name up case-insensitively
        value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    if value is None:
        raise SignatureError(f"missing {name} header")
    return value


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> int:
    """Check a request's signature and age; return its timestamp or raise :class:`SignatureError`.

    ``headers`` may be any mapping (``http.server``'s message, a dict); ``body`` the raw bytes as
    received (do not re-serialize parsed JSON: the signature covers the exact bytes).

    >>> body = b'{"status":"firing"}'
    >>> verify("s3cret", {"X-Netmon-Timestamp": "1700000000",
    ...                   "X-Netmon-Signature": sign("s3cret", 1700000000, body)}, body, now=1700000010)
    1700000000
    """
    raw_ts = _header(headers, TIMESTAMP_HEADER)
    if not (raw_ts.isascii() and raw_ts.isdigit()):
        raise SignatureError(f"{TIMESTAMP_HEADER} is not a unix time in seconds: {raw_ts[:40]!r}")
    timestamp = int(raw_ts)
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > tolerance_s:
        raise SignatureError(f"timestamp outside the tolerance: {age:+.0f} s (allowed ±{tolerance_s:g} s)")
    expected = sign(secret, raw_ts, body)
    # The header may list several signatures ("v1=..,v1=..") while a sender rotates its secret.
    offered = [s.strip() for s in _header(headers, SIGNATURE_HEADER).split(",")]
    if not any(hmac.compare_digest(expected, s) for s in offered):
        raise SignatureError("signature mismatch")
    return timestamp
