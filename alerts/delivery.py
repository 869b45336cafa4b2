"""Webhook delivery: payload formats, routing, signed POSTs, retries with backoff, dead letters.

Each POST is signed in the target's scheme (``signature``, see :mod:`alerts.verify`): by default
Standard Webhooks (``webhook-id`` = the notification's ``event_id``, ``webhook-timestamp`` fresh
per attempt, ``webhook-signature``), or netmon's own ``X-Netmon-Timestamp`` and
``X-Netmon-Signature``. Every request also carries ``Idempotency-Key`` (the ``event_id``:
receivers dedupe on it, since delivery is at least once), ``X-Netmon-Alert-Id`` and
``X-Netmon-Event``. A target without a secret is sent unsigned (the service warns at start).

``timeout_s`` bounds the whole request: connecting, sending and reading the answer share one
deadline, so a receiver that trickles its answer cannot hold a delivery thread longer.

A 2xx answer is a delivery. A timeout, connection error, 408, 425, 429 or 5xx is retried after
``retry_initial_s · 2^(attempt-1)`` seconds (at most ``retry_max_s``, times a random factor in
``[1 - retry_jitter, 1]``; a ``Retry-After`` answer is honoured) until ``max_age_s`` after the
event was written; then, or at once for any other answer (a 401 from a wrong secret, a redirect)
or for an error that retrying cannot fix (a URL the HTTP client refuses), the delivery becomes a
dead letter until ``netmon alerts retry``. Every exception of one attempt is a failed attempt
with a one-line reason, never an escape. After a failure the target is left alone until that
retry time, so a receiver that is down is not hammered.

Secrets never reach logs or the outbox: errors are logged with the target's name and host only,
and any URL, secret or routing key text in an error message is masked.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import logging
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alerts.outbox import Delivery, Outbox
from alerts.rules import Notification, iso
from alerts.verify import IDEMPOTENCY_HEADER, signature_headers
from netmon.config import SEVERITIES, AlertsConfig, AlertTarget, ConfigError

__all__ = [
    "Attempt",
    "Deliverer",
    "PassResult",
    "backoff_s",
    "build_test_alert",
    "check_targets",
    "encode",
    "host_of",
    "post",
    "redact",
    "render",
    "request_headers",
    "routed",
    "routes",
    "send_test_alert",
]

log = logging.getLogger(__name__)

USER_AGENT = "netmon-alerts/1"
_RETRYABLE = {408, 425, 429}


# --- routing and payloads ---------------------------------------------------------------------


def routed(target: AlertTarget, n: Notification) -> bool:
    """Does ``n`` go to ``target``? Enabled, severity at least ``min_severity``, rule and labels match."""
    if not target.enabled:
        return False
    if n.severity in SEVERITIES and SEVERITIES.index(n.severity) < SEVERITIES.index(target.min_severity):
        return False
    if target.rules and n.rule not in target.rules:
        return False
    return all(n.labels.get(k) == v for k, v in target.labels.items())


def routes(targets: Sequence[AlertTarget], n: Notification) -> list[str]:
    return [t.name for t in targets if routed(t, n)]


def _slack_text(n: Notification) -> str:
    mark = {"firing": ":rotating_light:", "resolved": ":white_check_mark:"}.get(n.status, ":bell:")
    since = f" since {iso(n.first_seen)}" if n.first_seen is not None and n.status == "firing" else ""
    extra = f" ({n.suppressed} flaps held back)" if n.suppressed else ""
    return f"{mark} {n.summary}{since}{extra}"


def render(target: AlertTarget, n: Notification) -> dict[str, Any]:
    """The JSON payload of ``n`` in the target's format."""
    if target.format == "slack":
        return {"text": _slack_text(n)}
    if target.format == "pagerduty":
        event: dict[str, Any] = {
            "routing_key": target.routing_key_value(),
            "event_action": "resolve" if n.status == "resolved" else "trigger",
            "dedup_key": n.alert_id,
            "client": "netmon",
        }
        if n.status != "resolved":
            event["payload"] = {
                "summary": n.summary[:1024],
                "source": n.subject or "netmon",
                "severity": n.severity if n.severity in SEVERITIES else "info",
                "timestamp": iso(n.at),
                "component": n.query or n.source,
                "group": n.rule,
                "class": n.source,
                "custom_details": {
                    k: v for k, v in n.to_dict().items() if k not in ("summary", "labels", "version")
                }
                | {"labels": n.labels},
            }
        return event
    return n.to_dict()


def encode(payload: dict[str, Any]) -> bytes:
    """Compact, key-sorted JSON bytes: what is signed and sent."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


# --- one POST -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """The outcome of one POST."""

    ok: bool
    status: int | None = None
    error: str | None = None
    #: retrying cannot help (e.g. 401, 404, a redirect): dead-letter at once
    permanent: bool = False
    #: seconds asked for by a ``Retry-After`` header
    retry_after: float | None = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # noqa: D102
        return None  # a redirect would re-send (or drop) a signed body elsewhere: report it instead


class _Deadline(TimeoutError):
    """The request did not complete within the target's ``timeout_s``."""


class _DeadlineSocket:
    """A connected socket whose every send and receive is bounded by one monotonic deadline.

    ``http.client`` reads the answer through ``makefile``; each ``recv_into`` of that file gets
    the time left as its timeout, so the whole answer, however it trickles, ends by the deadline.
    """

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._files = 0
        self._closed = False

    def _arm(self) -> None:
        self._sock.settimeout(_left(self._deadline))

    def sendall(self, data: bytes) -> None:
        self._arm()
        self._sock.sendall(data)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        self._arm()
        return self._sock.recv_into(buffer, nbytes)

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> io.BufferedReader:
        if "w" in mode:
            raise ValueError("a deadline socket reads only")
        self._files += 1
        return io.BufferedReader(_DeadlineReader(self))

    def _release(self) -> None:
        self._files -= 1
        if self._closed and not self._files:
            self._sock.close()

    def close(self) -> None:
        # Like socket.close with makefile()s open: the answer can still be read; the last closes.
        self._closed = True
        if not self._files:
            self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, owner: _DeadlineSocket) -> None:
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._owner.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._owner._release()
        super().close()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline("the request did not complete in time")
    return left


class _DeadlineHTTPConnection(http.client.HTTPConnection):
    """Connect, send and read within the request's deadline (the connect timeout: the time left)."""

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        self.timeout = _left(self._deadline)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _DeadlineHTTPSConnection(http.client.HTTPSConnection):
    """The same over TLS (the handshake, too, within the time left)."""

    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        self.timeout = _left(self._deadline)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(
            functools.partial(_DeadlineHTTPConnection, deadline=self._deadline), req, **kwargs
        )


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        connection = functools.partial(_DeadlineHTTPSConnection, deadline=self._deadline)
        return super().do_open(connection, req, **kwargs)


def _opener(deadline: float) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies from the environment included) with the deadline and no redirects."""
    return urllib.request.build_opener(
        _NoRedirect, _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline)
    )


def redact(text: str, target: AlertTarget) -> str:
    """``text`` with the target's URL (and its path and query), secret and routing key masked."""
    try:
        parts = urllib.parse.urlsplit(target.url)
        pieces = [parts.path if len(parts.path) > 1 else "", parts.query]
    except ValueError:
        pieces = []
    for secret in (target.url, *pieces, target.secret_value(), target.routing_key_value()):
        if secret:
            text = text.replace(secret, "***")
    return text


def host_of(target: AlertTarget) -> str:
    """Scheme, host and port of the target: what logs may show."""
    try:
        parts = urllib.parse.urlsplit(target.url)
        return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "<unparsable url>"


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def request_headers(target: AlertTarget, n: Notification, body: bytes, timestamp: int) -> dict[str, str]:
    """The headers of one POST of ``n`` to ``target``: content, idempotency and the signature scheme's."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        IDEMPOTENCY_HEADER: n.event_id,
        "X-Netmon-Alert-Id": n.alert_id,
        "X-Netmon-Event": n.status,
    }
    return headers | signature_headers(target.signature, target.secret_value(), n.event_id, timestamp, body)


def post(target: AlertTarget, n: Notification, *, now: float | None = None) -> Attempt:
    """POST ``n`` to ``target`` once, signed, with the event id as idempotency key.

    Never raises: whatever goes wrong is a failed :class:`Attempt` with a one-line reason. The
    request as a whole (connect, send, the answer) must finish within ``target.timeout_s``.
    """
    deadline = time.monotonic() + target.timeout_s
    timestamp = int(time.time() if now is None else now)
    try:
        body = encode(render(target, n))
        request = urllib.request.Request(
            target.url, data=body, headers=request_headers(target, n, body, timestamp), method="POST"
        )
        with _opener(deadline).open(request, timeout=target.timeout_s) as response:
            response.read(65536)
            return Attempt(ok=True, status=response.status)
    except urllib.error.HTTPError as exc:
        code = exc.code
        retry_after = _retry_after(exc.headers.get("Retry-After")) if exc.headers else None
        exc.close()
        retryable = code >= 500 or code in _RETRYABLE
        return Attempt(
            ok=False,
            status=code,
            error=_one_line(redact(f"HTTP {code} {exc.reason}", target)),
            permanent=not retryable,
            retry_after=retry_after,
        )
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or time.monotonic() >= deadline:
            reason = f"no complete answer within timeout_s={target.timeout_s:g} s"
            return Attempt(ok=False, error=f"TimeoutError: {reason}")
        return Attempt(ok=False, error=_one_line(redact(f"{type(exc).__name__}: {reason}", target)))
    except Exception as exc:  # noqa: BLE001 - e.g. a URL the HTTP client refuses: retrying cannot help
        return Attempt(
            ok=False, error=_one_line(redact(f"{type(exc).__name__}: {exc}", target)), permanent=True
        )


def check_targets(cfg: AlertsConfig) -> list[str]:
    """Check the enabled targets before the service starts; return the names of unsigned ones.

    Raises :class:`~netmon.config.ConfigError` (one line, naming the target and the variable,
    never a value) when a target's ``secret_env`` names an unset variable.
    """
    unsigned = []
    for target in cfg.targets:
        if not target.enabled:
            continue
        problem = target.secret_problem()
        if problem:
            raise ConfigError(problem)
        if not target.signed:
            unsigned.append(target.name)
    return unsigned


def backoff_s(attempts: int, cfg: AlertsConfig, rng: random.Random) -> float:
    """Delay before the next attempt after ``attempts`` failed ones (exponential, jittered).

    >>> cfg = AlertsConfig(retry_initial_s=1, retry_max_s=10, retry_jitter=0)
    >>> [backoff_s(a, cfg, random.Random(0)) for a in (1, 2, 3, 4, 5)]
    [1.0, 2.0, 4.0, 8.0, 10.0]
    """
    base = min(cfg.retry_max_s, cfg.retry_initial_s * 2 ** max(0, attempts - 1))
    return base * (1.0 - cfg.retry_jitter * rng.random())


# --- the delivery loop --------------------------------------------------------------------------


@dataclass
class PassResult:
    """What one delivery pass did."""

    delivered: int = 0
    retrying: int = 0
    dead: int = 0

    def __iadd__(self, other: PassResult) -> PassResult:
        self.delivered += other.delivered
        self.retrying += other.retrying
        self.dead += other.dead
        return self


class Deliverer:
    """Delivers the outbox's pending notifications: one thread per target in :meth:`start`.

    Parameters
    ----------
    path
        The outbox database.
    cfg
        The alerts section (targets, retry settings).
    seed
        Seeds the jitter (tests); None: from the system.
    """

    def __init__(self, path: str | Path, cfg: AlertsConfig, *, seed: int | None = None) -> None:
        self.path = Path(path)
        self.cfg = cfg
        self.targets = {t.name: t for t in cfg.targets if t.enabled}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._blocked_until: dict[str, float] = {}
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def _jitter(self, attempts: int) -> float:
        with self._lock:
            return backoff_s(attempts, self.cfg, self._rng)

    def deliver_due(
        self, outbox: Outbox, target: str, *, now: float | None = None, force: bool = False
    ) -> PassResult:
        """Attempt every due delivery to ``target`` once, in event order.

        Stops at the first transient failure and leaves the target alone until its retry time
        (``force``: ignore that pause, as ``netmon alerts retry`` does).
        """
        result = PassResult()
        spec = self.targets.get(target)
        if spec is None:
            return result
        clock = time.time if now is None else (lambda: now)
        if not force and clock() < self._blocked_until.get(target, 0.0):
            return result
        while True:
            batch = outbox.due(target, clock())
            if not batch:
                return result
            for d in batch:
                step = self._attempt(outbox, spec, d, clock())
                result += step
                if step.retrying:
                    return result

    def _attempt(self, outbox: Outbox, target: AlertTarget, d: Delivery, now: float) -> PassResult:
        try:
            attempt = post(target, d.notification, now=now)
        except Exception as exc:  # noqa: BLE001 - post reports failures itself; this is the backstop
            attempt = Attempt(
                ok=False, error=_one_line(redact(f"{type(exc).__name__}: {exc}", target)), permanent=True
            )
        where = {"target": target.name, "host": host_of(target), "event_id": d.event_id}
        if attempt.ok:
            outbox.record_attempt(d.event_id, target.name, state="delivered", now=now, status=attempt.status)
            self._blocked_until.pop(target.name, None)
            log.info("alert delivered", extra={**where, "status": attempt.status})
            return PassResult(delivered=1)
        delay = max(self._jitter(d.attempts + 1), attempt.retry_after or 0.0)
        too_old = now + delay > d.created + self.cfg.max_age_s
        if attempt.permanent or too_old:
            if not attempt.permanent:
                why = f"still failing after max_age_s={self.cfg.max_age_s:g}"
            else:
                why = "refused" if attempt.status is not None else "cannot be sent"
            outbox.record_attempt(
                d.event_id,
                target.name,
                state="dead",
                now=now,
                status=attempt.status,
                error=f"{attempt.error} ({why})",
            )
            log.warning("alert delivery dead-lettered", extra={**where, "error": attempt.error, "why": why})
            return PassResult(dead=1)
        outbox.record_attempt(
            d.event_id,
            target.name,
            state="pending",
            now=now,
            status=attempt.status,
            error=attempt.error,
            next_at=now + delay,
        )
        self._blocked_until[target.name] = now + delay
        log.warning(
            "alert delivery failed; will retry",
            extra={**where, "error": attempt.error, "attempt": d.attempts + 1, "retry_in_s": round(delay, 2)},
        )
        return PassResult(retrying=1)

    # --- threads -------------------------------------------------------------------------------

    def wake(self) -> None:
        """New events were written: look for due deliveries now."""
        self._wake.set()

    def start(self) -> Deliverer:
        """One daemon thread per enabled target; :meth:`stop` ends them."""
        with Outbox(self.path) as outbox:
            buried = outbox.bury_unknown_targets(self.targets)
        if buried:
            log.warning("deliveries to unconfigured targets dead-lettered", extra={"count": buried})
        self._stop.clear()
        for name in self.targets:
            thread = threading.Thread(target=self._loop, args=(name,), name=f"alerts-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout_s)
        self._threads.clear()

    def _loop(self, target: str) -> None:
        with Outbox(self.path, durable=False) as outbox:  # attempt records: see Outbox(durable=)
            while not self._stop.is_set():
                try:
                    self.deliver_due(outbox, target)
                except Exception:  # noqa: BLE001 - keep delivering; the outbox keeps the work
                    log.exception("delivery pass failed", extra={"target": target})
                now = time.time()
                due = outbox.next_due(target)
                wake_at = max(due or now + self.cfg.poll_s, self._blocked_until.get(target, 0.0))
                wait = min(self.cfg.poll_s, max(0.02, wake_at - now))
                self._wake.wait(wait)
                self._wake.clear()


# --- test alerts --------------------------------------------------------------------------------


def build_test_alert(target: AlertTarget, now: float | None = None) -> Notification:
    """A notification that says it is a test, for ``netmon alerts test --target NAME``."""
    now = time.time() if now is None else now
    aid = f"test-{target.name}"
    return Notification(
        event_id=f"test:{uuid.uuid4().hex}",
        alert_id=aid,
        episode_id=f"{aid}:{round(now * 1000)}",
        status="test",
        rule="netmon-test",
        source="test",
        query="",
        subject=target.name,
        subject_label="target",
        severity="info",
        field="",
        op="",
        threshold=0.0,
        value=None,
        peak=None,
        first_seen=now,
        last_seen=now,
        at=now,
        summary=f"[info] netmon-test: a test alert for target {target.name}",
        labels={"test": "true"},
    )


def send_test_alert(target: AlertTarget) -> tuple[Notification, Attempt]:
    """Send one test alert now (not through the outbox)."""
    n = build_test_alert(target)
    return n, post(target, n)
