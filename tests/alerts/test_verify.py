"""The signature check, and the docs that tell receivers how to do it (tested, so they cannot drift)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.defaults import DEFAULT_RULES
from alerts.delivery import post, render
from alerts.rules import RuleEngine
from alerts.verify import SignatureError, sign, verify
from netmon.config import AlertRule, AlertTarget
from tests.alerts.helpers import SECRET, distinct_row
from tests.alerts.receiver import Receiver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def docs_snippet() -> Callable[..., bool]:
    """``verify_netmon`` from the python block after ``<!-- receiver-snippet -->`` in docs/alerts.md."""
    text = DOCS.read_text()
    block = re.search(r"<!-- receiver-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert block, "docs/alerts.md lost its receiver snippet"
    namespace: dict = {}
    exec(compile(block.group(1), str(DOCS), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace["verify_netmon"]


def cases() -> list[tuple[str, dict[str, str], bytes, bool]]:
    body = b'{"status":"firing","subject":"10.0.0.5"}'
    now = int(time.time())
    good = {"X-Netmon-Timestamp": str(now), "X-Netmon-Signature": sign(SECRET, now, body)}
    old = now - 301
    return [
        ("genuine", good, body, True),
        ("genuine, lower-case header names", {k.lower(): v for k, v in good.items()}, body, True),
        ("tampered body", good, body.replace(b"10.0.0.5", b"10.0.0.6"), False),
        ("tampered timestamp", good | {"X-Netmon-Timestamp": str(now - 1)}, body, False),
        (
            "old timestamp, valid signature",
            {"X-Netmon-Timestamp": str(old), "X-Netmon-Signature": sign(SECRET, old, body)},
            body,
            False,
        ),
        (
            "future timestamp",
            {"X-Netmon-Timestamp": str(now + 400), "X-Netmon-Signature": sign(SECRET, now + 400, body)},
            body,
            False,
        ),
        ("wrong secret", good | {"X-Netmon-Signature": sign("other", now, body)}, body, False),
        ("no signature", {"X-Netmon-Timestamp": str(now)}, body, False),
        ("no timestamp", {"X-Netmon-Signature": good["X-Netmon-Signature"]}, body, False),
        ("timestamp not a number", good | {"X-Netmon-Timestamp": "-1"}, body, False),
        (
            "rotated secrets",
            good | {"X-Netmon-Signature": sign("old", now, body) + "," + good["X-Netmon-Signature"]},
            body,
            True,
        ),
    ]


class _CaseInsensitive(dict):
    def get(
        self, key: str, default: object = None
    ) -> object:  # as http.server's and most frameworks' headers
        return next((v for k, v in self.items() if k.lower() == key.lower()), default)


@pytest.mark.parametrize("index", range(len(cases())), ids=[c[0] for c in cases()])
def test_library_and_docs_snippet_agree(index: int) -> None:
    _, headers, body, valid = cases()[index]  # built now: the timestamps are relative to the clock
    snippet = docs_snippet()
    assert snippet(SECRET.encode(), _CaseInsensitive(headers), body) is valid
    if valid:
        verify(SECRET, headers, body)
    else:
        with pytest.raises(SignatureError):
            verify(SECRET, headers, body)


def test_docs_snippet_verifies_real_requests(receivers: Callable[..., Receiver]) -> None:
    receiver = receivers()
    snippet = docs_snippet()
    notes = RuleEngine(DEFAULT_RULES).observe("distinct", distinct_row(24, "34.22.41.40", 305))
    for fmt in ("json", "slack", "pagerduty"):
        target = AlertTarget(name=fmt, url=receiver.url, format=fmt, secret=SECRET, routing_key="R")
        assert post(target, notes[0]).ok
    assert len(receiver.requests) == 3
    for r in receiver.requests:
        assert r.verified and snippet(SECRET.encode(), _CaseInsensitive(r.headers), r.body)
        assert not snippet(SECRET.encode(), _CaseInsensitive(r.headers), r.body + b" ")


def test_docs_json_payload_example_is_what_netmon_sends() -> None:
    text = DOCS.read_text()
    example = json.loads(re.search(r"\*\*`json`\*\*.*?```json\n(.*?)```", text, re.S).group(1))
    rule = next(r for r in DEFAULT_RULES if r.name == "ddos")
    (n,) = RuleEngine([rule]).observe("distinct", distinct_row(24, "34.22.41.40", 305))
    assert render(AlertTarget(name="j", url="http://127.0.0.1:9/"), n) == example


def test_docs_flapping_claim() -> None:
    """docs/alerts.md: flapping every second for an hour, defaults -> 24 notifications, not 3,599."""
    rule = AlertRule(name="d", source="distinct", field="distinct", threshold=200, subject="group")
    rows = [distinct_row(t, "v" if t % 2 else "x", 300 if t % 2 else 1) for t in range(1, 3601)]
    engine, unlimited = RuleEngine([rule]), RuleEngine([AlertRule(**{**rule.__dict__, "cooldown_s": 0})])
    assert sum(len(engine.observe("distinct", r)) for r in rows) == 24
    assert sum(len(unlimited.observe("distinct", r)) for r in rows) == 3599
    assert "24 notifications instead of 3,599" in " ".join(DOCS.read_text().split())


def test_docs_config_examples_load(tmp_path: Path) -> None:
    from netmon.config import load_alerts

    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 2
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block)
        section = load_alerts(path)
        assert section.rules or section.targets
    assert [r.name for r in load_alerts(tmp_path / "example0.toml").rules] == ["big-ddos"]
    assert [t.format for t in load_alerts(tmp_path / "example1.toml").targets] == ["slack", "pagerduty"]
