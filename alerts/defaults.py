"""Built-in alert rules for the sample scenarios, with the measurements behind their thresholds.

They read the result rows of the default queries in ``netmon.config.QueriesConfig`` (distinct
counts: 60 s windows, top-k: 10 s windows, both in 1 s sub-windows) and the joins and shedding
rows of ``pipeline.joins``. Thresholds were set from exact counts over the bundled samples
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

A configured ``[[alerts.rules]]`` with the same name replaces a built-in one;
``[alerts] builtin_rules = false`` drops them all.
"""

from __future__ import annotations

from netmon.config import AlertRule, AlertsConfig

__all__ = ["DEFAULT_RULES", "effective_rules"]

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


def effective_rules(cfg: AlertsConfig) -> tuple[AlertRule, ...]:
    """The built-in rules (unless disabled), each replaced by a configured rule of the same name,
    then the other configured rules."""
    configured = {r.name: r for r in cfg.rules}
    builtin = tuple(configured.pop(r.name, r) for r in DEFAULT_RULES) if cfg.builtin_rules else ()
    return builtin + tuple(r for r in cfg.rules if r.name in configured)
