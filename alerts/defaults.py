"""Built-in alert rules for the sample scenarios, with the measurements behind their thresholds.

They read the result rows of the default queries in ``netmon.config.QueriesConfig`` (distinct
counts: 60 s windows, top-k: 10 s windows, both in 1 s sub-windows), the joins and shedding
rows of ``pipeline.joins`` and the pipeline's own ``sys`` rows (``pipeline.sys_stats``).
Thresholds were set from exact counts over the bundled samples
(``samples/*.pcap``); their background traffic is Zipf-skewed, so one host is always busy.
Baseline maximum vs attack sample:

- ``ddos``: distinct sources per destination (60 s): 92 (a DNS resolver) vs 305 (ddos) and 788
  (syn-flood, spoofed).
- ``port-scan``: distinct destination ports per source (60 s): 330 (a resolver: DNS answers go to
  random client ports) vs 500 (the scanner).
- ``heavy-hitter``: the top source's packet share, windows of >= 500 packets: 0.24 (10 s) vs
  0.79 / 0.51 (10 / 60 s); the port scanner reaches 0.39.
- ``syn-flood``: distinct sources of unanswered SYNs per destination in 10 s: 2 (refused
  connections) vs 428 (syn-flood) and 202 (ddos); the port scan's ~500 unanswered SYNs come from 1.
- ``pipeline-lag``: the ``sys`` rows' ``backlog_s`` (Kafka messages waiting over the rate the query
  processes them): a sample is at most 10,000 records, 10 messages, fewer than the 600 a batch of
  the shared query may read, so its backlog is 0 after the first batch; it grows only while the
  input outruns the pipeline.

A configured ``[[alerts.rules]]`` with the same name replaces a built-in one;
``[alerts] builtin_rules = false`` drops them all.

:data:`DETECTION_RULES` are the rules of issue 20 ("alerts an operator can trust"): they read the
``features`` rows (:mod:`analytics.alert_features`: failed connection attempts per source,
half-open SYNs and fan-in per destination, per ``[alerts] features_window_s`` window), so they
do not depend on the link's rate. ``netmon analyze alerts`` and ``netmon eval alerts`` run them;
the streaming service runs them in place of the four rules of the same names above when the
pipeline publishes ``netmon.features`` (``[pipeline] kinds`` has ``features``:
:func:`service_builtin`; docs/alerts.md, "Streaming").
"""

from __future__ import annotations

from netmon.config import AlertRule, AlertsConfig, Config

__all__ = ["DEFAULT_RULES", "DETECTION_RULES", "effective_rules", "service_builtin"]

DEFAULT_RULES: tuple[AlertRule, ...] = (
    AlertRule(
        name="ddos",
        source="distinct",
        query="ddos-sources-per-destination",
        field="distinct",
        op=">",
        threshold=200,
        subject="group",
        subject_label="victim",
        severity="critical",
        labels={"scenario": "ddos"},
        summary="victim {subject} is hit by {value} distinct sources in the window (> {threshold})",
        description=(
            "Many sources converge on one destination. Baseline peak is 92 distinct sources (a DNS "
            "resolver); the ddos sample's victim reaches 305 and the spoofed syn-flood 788."
        ),
    ),
    AlertRule(
        name="port-scan",
        source="distinct",
        query="scan-ports-per-source",
        field="distinct",
        op=">",
        threshold=400,
        subject="group",
        subject_label="scanner",
        severity="warning",
        labels={"scenario": "port-scan"},
        summary="{subject} touched {value} distinct destination ports in the window (> {threshold})",
        description=(
            "One source probes many ports. DNS resolvers answer to random client ports (330 distinct in "
            "the baseline's 60 s window), so the threshold sits above that; the sample's scanner probes "
            "500. Add busy resolvers to `ignore` on larger networks, or count SYNs only in the query."
        ),
    ),
    AlertRule(
        name="syn-flood",
        source="joins",
        # under the intake drop box a SYN kept whose SYN-ACK was skipped is reported unanswered:
        # rows read from a sample (their ``keep`` below 1, pipeline.joins_batch) are skipped
        exact_only=True,
        where={"kind": "handshake", "row": "unmatched"},
        aggregate="distinct",
        field="left_src_ip",
        window_s=10,
        lateness_s=5,
        time_field="left_ts",
        op=">",
        threshold=50,
        subject="left_dst_ip",
        subject_label="destination",
        severity="critical",
        labels={"scenario": "syn-flood"},
        summary="{subject} has half-open SYNs from {value} distinct sources in 10 s (> {threshold})",
        description=(
            "SYNs the handshake join never matched with a SYN-ACK (rows kind=handshake, row=unmatched), "
            "counted per destination by distinct source in 10 s windows. The syn-flood sample reaches 428 "
            "sources per window (spoofed), the ddos sample 202; a port scan leaves hundreds of unanswered "
            "SYNs from one source (1 here) and the baseline at most 2 (refused connections)."
        ),
    ),
    AlertRule(
        name="heavy-hitter",
        source="topk",
        query="top-sources",
        field="share",
        op=">",
        threshold=0.45,
        where={"total": ">= 500"},
        subject="key",
        subject_label="source",
        for_s=5,
        severity="warning",
        labels={"scenario": "heavy-hitter-burst"},
        summary="{subject} sends {value} of all packets in the window (> {threshold})",
        description=(
            "One source takes a large share of the link for at least 5 s. The busiest baseline host "
            "peaks at 24 % of a 10 s window (Zipf-skewed clients), the burst sample's sender at 79 % "
            "(51 % over 60 s); the port scanner stays at 39 %. Windows under 500 packets are ignored: "
            "with a handful of packets any host has a large share."
        ),
    ),
    AlertRule(
        name="pipeline-overload",
        source="shedding",
        field="utilisation",
        op=">",
        threshold=0.9,
        for_s=30,
        time_field="batch_time",
        severity="warning",
        labels={"component": "pipeline"},
        summary="the join uses {value} of its CPU budget (> {threshold}) and sheds load",
        description=(
            "The join operator has used over 90 % of its trigger interval for 30 s of wall-clock batch "
            "time (batch_time): results are being approximated by load shedding. Short spikes are "
            "normal; sustained overload is not."
        ),
    ),
    AlertRule(
        name="pipeline-lag",
        source="sys",
        field="backlog_s",
        op=">",
        threshold=30,
        for_s=60,
        time_field="batch_time",
        severity="warning",
        labels={"component": "pipeline"},
        summary="query {subject} needs {value} s to read what waits in Kafka (> {threshold} s)",
        description=(
            "A pipeline query has fallen behind its input for 60 s of wall-clock batch time "
            "(batch_time): at the pace it processes messages, what waits in Kafka (latest minus read "
            "offsets) takes over 30 s to read. It reads backlog_s, not lag_s (batch time minus the "
            "newest event time): a replayed capture keeps its own timestamps, so lag_s is years on every "
            "replay that is not --rebase-time'd. A live capture or a paced replay keeps up (backlog "
            "near 0); a fast replay of a capture larger than a few batches fires it until it caught up."
        ),
    ),
    AlertRule(
        name="link-rate",
        source="traffic",
        field="packets_per_s",
        aggregate="sum",
        op=">",
        threshold=100_000,
        severity="info",
        labels={"component": "link"},
        summary="{value} packets/s over all protocols (> {threshold})",
        description=(
            "Total packet rate above 100k/s: a capacity signal, not an attack detector. Set the "
            "threshold from your link (the samples run at 40-170 packets/s)."
        ),
    ),
)


DETECTION_RULES: tuple[AlertRule, ...] = (
    AlertRule(
        name="port-scan",
        source="features",
        exact_only=True,  # a record sample drops answers: attempts would look failed
        query="src",
        field="vertical",
        op=">=",
        threshold=15,
        where={"fail_ratio": ">= 0.5"},
        subject="subject",
        subject_label="scanner",
        severity="warning",
        labels={"scenario": "port-scan"},
        summary="{subject} failed to connect to {value} ports of one host in the window (>= {threshold})",
        description=(
            "Vertical scan: distinct ports of one host whose connection attempts from this source "
            "failed (no SYN-ACK, a RST, an ICMP unreachable) in a features window. 15 is Zeek's "
            "port_scan_threshold (scan.zeek, over 5 min); most of the source's attempts must fail "
            "(fail_ratio >= 0.5), which Zeek does not ask: a busy client's few refused connections "
            "are not a scan."
        ),
    ),
    AlertRule(
        name="host-scan",
        source="features",
        exact_only=True,  # a record sample drops answers: attempts would look failed
        query="src",
        field="horizontal",
        op=">=",
        threshold=25,
        where={"fail_ratio": ">= 0.5"},
        subject="subject",
        subject_label="scanner",
        severity="warning",
        labels={"scenario": "host-scan"},
        summary="{subject} failed to connect to {value} hosts on one port in the window (>= {threshold})",
        description=(
            "Horizontal scan: distinct hosts whose connection attempts on one port from this source "
            "failed in a features window. 25 is Zeek's addr_scan_threshold (over 5 min); "
            "fail_ratio >= 0.5 as for port-scan."
        ),
    ),
    AlertRule(
        name="ddos",
        source="features",
        query="dst",
        field="sources",
        mode="baseline",
        also=("packets",),
        min_value=100,
        sensitivity=4.0,
        min_ratio=3.0,
        warmup=3,
        alpha=0.1,
        subject="subject",
        subject_label="victim",
        severity="critical",
        labels={"scenario": "ddos"},
        summary="victim {subject} is hit by {value} distinct sources (its normal band ends at {threshold})",
        description=(
            "Distinct sources and packets toward one destination both rise above that destination's "
            "own learned normal (EWMA, 4 standard deviations and at least 3x the mean) and at least "
            "100 sources. A busy server's ordinary fan-in is its normal, not an attack."
        ),
    ),
    AlertRule(
        name="syn-flood",
        source="features",
        exact_only=True,  # a record sample drops answers: attempts would look failed
        query="dst",
        field="half_open",
        op=">=",
        threshold=100,
        where={"half_open_ratio": ">= 0.5"},
        subject="subject",
        subject_label="destination",
        severity="critical",
        labels={"scenario": "syn-flood"},
        summary="{subject} left {value} SYNs half-open in the window (>= {threshold})",
        description=(
            "Most SYNs to this destination got neither a SYN-ACK nor a RST (half_open_ratio >= 0.5) "
            "and at least 100 did in a features window: its backlog is being filled."
        ),
    ),
    AlertRule(
        name="heavy-hitter",
        source="features",
        query="src",
        field="share",
        mode="baseline",
        also=("packets",),
        min_value=0.45,
        sensitivity=4.0,
        min_ratio=2.0,
        warmup=3,
        alpha=0.1,
        where={"total": ">= 500"},
        subject="subject",
        subject_label="source",
        severity="warning",
        labels={"scenario": "heavy-hitter-burst"},
        summary="{subject} sends {value} of all packets in the window (its normal band ends at {threshold})",
        description=(
            "One source suddenly takes a large share of the link: its share and its packets both rise "
            "above its own learned normal, to at least 45 % of the window's packets. A host that always "
            "dominates (the only server of a small capture, a backup target) is its own normal; windows "
            "under 500 packets are ignored (a handful of packets gives anyone a large share)."
        ),
    ),
)


def service_builtin(cfg: Config) -> tuple[AlertRule, ...]:
    """The built-in rules of the streaming service (``netmon alerts run``) for ``cfg``.

    When the pipeline publishes the ``features`` kind (``[pipeline] kinds`` has it and
    ``publish_results`` is on), :data:`DETECTION_RULES` take the place of the
    :data:`DEFAULT_RULES` of the same names (``ddos``, ``port-scan``, ``syn-flood``,
    ``heavy-hitter``) and the other default rules (the pipeline's own, the link rate) stay;
    otherwise :data:`DEFAULT_RULES`.
    """
    if not (cfg.pipeline.publish_results and "features" in cfg.pipeline.kinds):
        return DEFAULT_RULES
    replaced = {r.name for r in DETECTION_RULES}
    return DETECTION_RULES + tuple(r for r in DEFAULT_RULES if r.name not in replaced)


def effective_rules(
    cfg: AlertsConfig, builtin: tuple[AlertRule, ...] = DEFAULT_RULES
) -> tuple[AlertRule, ...]:
    """The built-in rules (unless disabled), each replaced by a configured rule of the same name,
    then the other configured rules. ``builtin``: :data:`DEFAULT_RULES`, the streaming service's
    (:func:`service_builtin`), or :data:`DETECTION_RULES` (``netmon analyze alerts``)."""
    configured = {r.name: r for r in cfg.rules}
    builtin = tuple(configured.pop(r.name, r) for r in builtin) if cfg.builtin_rules else ()
    return builtin + tuple(r for r in cfg.rules if r.name in configured)
