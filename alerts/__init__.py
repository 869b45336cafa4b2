"""Alert rules over netmon's results, and signed, retried, durable webhook delivery.

``netmon alerts run`` consumes the result topics (``netmon.<kind>``) in a consumer group,
evaluates the rules (:mod:`alerts.rules`), writes every firing and resolution to a SQLite outbox
(:mod:`alerts.outbox`) before it commits its Kafka offsets, and delivers them to webhook targets
(:mod:`alerts.delivery`). Receivers check the signature with :func:`alerts.verify.verify`.
See ``docs/alerts.md``.

This package module imports only the two standard-library modules below, so that
``netmon.config`` can import the configuration classes without a cycle.
"""

from __future__ import annotations

from alerts.config import AlertRule, AlertsConfig, AlertTarget
from alerts.verify import SignatureError, sign, verify

__all__ = ["AlertRule", "AlertTarget", "AlertsConfig", "SignatureError", "sign", "verify"]
