"""The signature check, and the docs that tell receivers how to do it (tested, so they cannot drift)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from alerts.defaults import DEFAULT_RULES
from alerts.delivery import post, render
from alerts.rules import RuleEngine
from alerts.verify import SignatureError, sign, sign_standard, signature_headers, verify
from netmon.config import AlertRule, AlertTarget
from tests.alerts.helpers import SECRET, WHSEC, distinct_row
from tests.alerts.receiver import Receiver

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


def docs_snippet(marker: str = "receiver-snippet", name: str = "verify_netmon") -> Callable[..., bool]:
    """``name`` from the python block after ``<!-- marker -->`` in docs/alerts.md."""
    text = DOCS.read_text()
    block = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert block, f"docs/alerts.md lost its {marker}"
    namespace: dict = {}
    exec(compile(block.group(1), str(DOCS), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace[name]


def standard_snippet() -> Callable[..., bool]:
    return docs_snippet("receiver-snippet-standard", "verify_standard")


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
        target = AlertTarget(
            name=fmt, url=receiver.url, format=fmt, secret=SECRET, routing_key="R", signature="netmon-v1"
        )
        assert post(target, notes[0]).ok
    assert len(receiver.requests) == 3
    for r in receiver.requests:
        assert r.verified and snippet(SECRET.encode(), _CaseInsensitive(r.headers), r.body)
        assert not snippet(SECRET.encode(), _CaseInsensitive(r.headers), r.body + b" ")


@pytest.mark.parametrize("secret", [WHSEC, SECRET], ids=["whsec", "raw"])
def test_docs_standard_snippet_verifies_real_requests(
    secret: str, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(secret)
    snippet = standard_snippet()
    notes = RuleEngine(DEFAULT_RULES).observe("distinct", distinct_row(24, "34.22.41.40", 305))
    for fmt in ("json", "slack", "pagerduty"):
        target = AlertTarget(name=fmt, url=receiver.url, format=fmt, secret=secret, routing_key="R")
        assert post(target, notes[0]).ok
    assert len(receiver.requests) == 3
    for r in receiver.requests:
        assert r.verified and snippet(secret, _CaseInsensitive(r.headers), r.body)
        assert not snippet(secret, _CaseInsensitive(r.headers), r.body + b" ")
        assert not snippet(secret, _CaseInsensitive(r.headers | {"Webhook-Id": "other"}), r.body)


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
    from netmon.config import load_alerts, load_config

    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) == 5
    # "Streaming": leaving the features kind out is a [pipeline] setting, not an alerts section.
    pipeline_block = blocks.pop(3)
    (tmp_path / "pipeline.toml").write_text(pipeline_block)
    assert "features" in load_config(None, env={}).pipeline.kinds  # on by default
    assert "features" not in load_config(tmp_path / "pipeline.toml", env={}).pipeline.kinds
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block)
        section = load_alerts(path)
        assert section.rules or section.targets
    assert [r.name for r in load_alerts(tmp_path / "example0.toml").rules] == ["big-ddos"]
    [stale] = load_alerts(tmp_path / "example1.toml").rules  # the sys rows' lag_s, beside pipeline-lag
    assert (stale.source, stale.field, stale.threshold, stale.time_field) == (
        "sys",
        "lag_s",
        30,
        "batch_time",
    )
    [baseline] = load_alerts(tmp_path / "example2.toml").rules  # "Baseline mode"
    assert (baseline.mode, baseline.also, baseline.min_value, baseline.threshold) == (
        "baseline",
        ("packets",),
        100,
        100,
    )
    example = load_alerts(tmp_path / "example3.toml")
    assert [t.format for t in example.targets] == ["slack", "pagerduty"]
    assert [t.signature for t in example.targets] == ["standard", "standard"] and example.keep_days == 7


# --- Standard Webhooks ---------------------------------------------------------------------------


def standard_cases() -> list[tuple[str, str, dict[str, str], bytes, bool]]:
    body = b'{"status":"firing","subject":"10.0.0.5"}'
    now = int(time.time())
    good = signature_headers("standard", WHSEC, "e1:1:firing", now, body)
    old, raw_good = now - 301, signature_headers("standard", SECRET, "e1:1:firing", now, body)
    return [
        ("genuine", WHSEC, good, body, True),
        ("genuine, raw secret", SECRET, raw_good, body, True),
        (
            "genuine, capitalised header names",
            WHSEC,
            {k.capitalize(): v for k, v in good.items()},
            body,
            True,
        ),
        ("tampered body", WHSEC, good, body.replace(b"10.0.0.5", b"10.0.0.6"), False),
        ("changed id", WHSEC, good | {"webhook-id": "e2:1:firing"}, body, False),
        ("tampered timestamp", WHSEC, good | {"webhook-timestamp": str(now - 1)}, body, False),
        (
            "stale timestamp, valid signature",
            WHSEC,
            signature_headers("standard", WHSEC, "e1:1:firing", old, body),
            body,
            False,
        ),
        (
            "future timestamp",
            WHSEC,
            signature_headers("standard", WHSEC, "e1:1:firing", now + 400, body),
            body,
            False,
        ),
        (
            "wrong secret",
            WHSEC,
            good | {"webhook-signature": sign_standard("whsec_b3RoZXI=", "e1:1:firing", now, body)},
            body,
            False,
        ),
        ("raw secret read as whsec", "whsec_" + SECRET.replace("-", ""), raw_good, body, False),
        ("no signature", WHSEC, {k: v for k, v in good.items() if k != "webhook-signature"}, body, False),
        ("no id", WHSEC, {k: v for k, v in good.items() if k != "webhook-id"}, body, False),
        ("timestamp not a number", WHSEC, good | {"webhook-timestamp": "-1"}, body, False),
        (
            "rotated secrets",
            WHSEC,
            good
            | {
                "webhook-signature": sign_standard("whsec_b2xk", "e1:1:firing", now, body)
                + " "
                + good["webhook-signature"]
            },
            body,
            True,
        ),
        (
            "other versions ignored",
            WHSEC,
            good | {"webhook-signature": "v2,abc " + good["webhook-signature"]},
            body,
            True,
        ),
    ]


@pytest.mark.parametrize("index", range(len(standard_cases())), ids=[c[0] for c in standard_cases()])
def test_standard_library_docs_snippet_and_standardwebhooks_agree(index: int) -> None:
    _, secret, headers, body, valid = standard_cases()[index]
    assert standard_snippet()(secret, _CaseInsensitive(headers), body) is valid
    if valid:
        verify(secret, headers, body, scheme="standard")
        verify(secret, headers, body)  # the scheme picked from the headers
    else:
        with pytest.raises(SignatureError):
            verify(secret, headers, body, scheme="standard")
    try:
        from standardwebhooks import Webhook
    except ImportError:
        return  # tests/alerts/test_standard_webhooks.py says why it is skipped
    hook = Webhook(secret if secret.startswith("whsec_") else secret.encode())
    try:
        hook.verify(body, headers)
        accepted = True
    except Exception:  # noqa: BLE001 - the library raises its own error types
        accepted = False
    assert accepted is valid


ODD_VALUES: list[object] = [
    "",
    "é",
    "v1=é" + "0" * 60,
    "v1,é",
    "v1,!!!not-base64!!!",
    "v1",
    ",",
    "9" * 400,  # an int too large for a float
    "9" * 5000,  # more digits than int() converts
    "١٧٠٠٠٠٠٠٠٠",  # Arabic-Indic digits: isdigit() but not ASCII
    "\udcff",
    b"\xff\xfe",
    b"1700000000",
    1700000000,
    None,
    ["v1,abc"],
    "v1,abc " * 5000,
]


@pytest.mark.parametrize("scheme", ["standard", "netmon-v1"])
@pytest.mark.parametrize("value", ODD_VALUES, ids=[repr(v)[:20] for v in ODD_VALUES])
def test_verify_raises_only_signature_error_on_odd_headers(scheme: str, value: object) -> None:
    """Any odd value in any of the scheme's headers: SignatureError, never TypeError/ValueError/..."""
    body = b'{"status":"firing"}'
    now = int(time.time())
    good = signature_headers(scheme, WHSEC if scheme == "standard" else SECRET, "e1", now, body)
    secret = WHSEC if scheme == "standard" else SECRET
    for name in good:
        headers: dict[str, Any] = {**good, name: value}
        with pytest.raises(SignatureError):
            verify(secret, headers, body, scheme=scheme)
        with pytest.raises(SignatureError):
            verify(secret, headers, body)


def test_verify_odd_secrets_and_mappings() -> None:
    body = b"{}"
    now = int(time.time())
    headers = signature_headers("standard", WHSEC, "e1", now, body)
    for secret in ("", "whsec_!!", "whsec_"):
        with pytest.raises(SignatureError):
            verify(secret, headers, body, scheme="standard")

    class Broken(dict):
        def get(self, key: str, default: object = None) -> object:
            raise KeyError(key)

    with pytest.raises(SignatureError):
        verify(WHSEC, Broken(headers), body)
    with pytest.raises(SignatureError, match="no signature headers"):
        verify(WHSEC, {}, body)
    assert verify(WHSEC, headers, bytearray(body)) == now
