"""A real webhook receiver for the tests: ``http.server`` on 127.0.0.1 in a thread.

It verifies every request with the documented check (:func:`alerts.verify.verify`, whichever
signature scheme the request carries; or any ``verifier`` given, e.g. the ``standardwebhooks``
library), answers 401 to a bad one, can fail its first N requests with 503, and can be stopped
and started again on the same port (a receiver that is down while netmon restarts). It dedups by
``Idempotency-Key``, as the docs tell receivers to.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alerts.verify import IDEMPOTENCY_HEADER, SignatureError, verify

#: checks one request (headers as received, raw body); raises to reject it
Verifier = Callable[[dict[str, str], bytes], object]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified: bool
    error: str | None
    answered: int
    at: float = field(default_factory=time.time)

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def key(self) -> str | None:
        return self.headers.get(IDEMPOTENCY_HEADER)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """A webhook endpoint; ``url`` is stable across :meth:`stop` / :meth:`start`."""

    def __init__(
        self,
        secret: str,
        *,
        fail_first: int = 0,
        status: int = 200,
        port: int | None = None,
        verifier: Verifier | None = None,
    ):
        self.secret = secret
        self.verifier = verifier or (lambda headers, body: verify(secret, headers, body))
        self.fail_first = fail_first
        self.status = status
        self.port = port or free_port()
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/netmon"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    receiver.verifier(dict(self.headers), body)
                    verified, error = True, None
                except Exception as exc:  # noqa: BLE001 - any failed check is a 401
                    named = isinstance(exc, SignatureError)
                    verified, error = False, str(exc) if named else f"{type(exc).__name__}: {exc}"
                with receiver._lock:
                    failing = len(receiver.requests) < receiver.fail_first
                    code = 401 if not verified else 503 if failing else receiver.status
                    receiver.requests.append(Received(dict(self.headers), body, verified, error, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- what arrived -----------------------------------------------------------------------

    def accepted(self) -> list[Received]:
        """Requests answered 2xx, deduplicated by idempotency key (first copy kept)."""
        seen: dict[str, Received] = {}
        with self._lock:
            for r in self.requests:
                if 200 <= r.answered < 300 and r.key not in seen:
                    seen[r.key or ""] = r
        return list(seen.values())

    def wait_for(self, n: int, timeout_s: float = 20.0) -> list[Received]:
        """Wait until ``n`` distinct idempotency keys were accepted."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.accepted()
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"receiver accepted {len(self.accepted())} distinct events, expected {n}")
