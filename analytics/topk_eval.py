"""Golab's Figure 6.3 reproduced: Algorithm 6 against the exact window counts (``netmon eval topk``).

For each trace, sub-window size ``b`` and list length ``k``: ``starts`` random starting points;
the window of ``N`` packets after each is summarized by :class:`analytics.topk.SubWindowTopK` and
by the DataSketches baseline (:class:`analytics.topk_baselines.FrequentItemsTopK`) and compared
with the window's true source counts (a brute-force ``numpy.bincount``). Per configuration, over
the trials: (a) average delta; (b) items truly above delta; (c) items reported; (d) % of the
above-delta items reported; (e) space in stored key–count pairs; (f) average relative error of the
reported counts (Golab §6.3, Figure 6.3). See ``docs/evaluation.md``.

Departure, for speed only: starting points are drawn at random among the multiples of
``lcm(b_values)`` (500), so the sub-windows of every run lie on one grid and each sub-window's
top-k list is computed once per trace; each algorithm then slides once along the trace and its
report is read where a trial's window ends — the same report a fresh run from that start makes.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics.keys import key_text, parse_key
from analytics.topk import SubWindowTopK
from analytics.topk_baselines import FrequentItemsTopK

__all__ = [
    "ALGORITHMS",
    "EvalResult",
    "run_evaluation",
    "Trace",
    "check_claims",
    "evaluate_trace",
    "default_traces",
    "figure",
    "markdown",
    "summarize",
    "trace_from_batches",
    "window_for",
    "write_csv",
    "write_pngs",
    "zipf_trace",
]

ALGORITHMS = ("alg6", "datasketches")
B_VALUES = (20, 100, 500)
K_VALUES = tuple(range(1, 11))
N_DEFAULT = 100_000


@dataclass(frozen=True)
class Trace:
    """A key stream: ``ids[i]`` indexes ``texts``, which is sorted (id order = key text order)."""

    name: str
    ids: np.ndarray
    texts: tuple[str, ...]
    description: str = ""

    def __len__(self) -> int:
        return len(self.ids)


def zipf_trace(
    n_packets: int,
    *,
    n_keys: int = 1647,
    alpha: float = 1.0,
    burst: float = 1.0,
    spread: float = 8.0,
    seed: int = 0,
    name: str = "",
) -> Trace:
    """Source addresses with Zipf(``alpha``) popularity over ``n_keys`` addresses, seeded.

    ``burst`` > 1: packets come in flows of a geometric number of packets (mean ``burst``), each
    flow's source Zipf-drawn and its packets spread over about ``spread`` times its length,
    interleaved with the neighbouring flows — temporal locality as in real traffic (``spread`` = 1:
    back-to-back runs). ``burst`` = 1: independent packets.
    The 1647 addresses match the number of distinct sources in the thesis' trace (§6.3.1).
    """
    if n_packets < 1 or n_keys < 1 or alpha <= 0 or burst < 1:
        raise ValueError("n_packets, n_keys, alpha, burst: must be positive (burst >= 1)")
    rng = np.random.default_rng(seed)
    p = np.arange(1, n_keys + 1, dtype=float) ** -alpha
    p /= p.sum()
    by_rank = rng.permutation(n_keys)  # popularity rank -> key id (ids are in key text order)
    if burst == 1:
        ids = by_rank[rng.choice(n_keys, size=n_packets, p=p)]
    else:
        n_flows = int(n_packets / burst * 1.2) + 16
        lengths = rng.geometric(1 / burst, size=n_flows)
        lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), n_packets)) + 1]
        sources = by_rank[rng.choice(n_keys, size=len(lengths), p=p)]
        flow = np.repeat(np.arange(len(lengths)), lengths)
        first = np.r_[0, np.cumsum(lengths)[:-1]]
        offset = np.arange(len(flow)) - first[flow]
        when = first[flow] + offset * spread + rng.random(len(flow))
        ids = sources[flow][np.argsort(when, kind="stable")][:n_packets]
    texts = tuple(sorted(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(1, n_keys + 1)))
    kind = "independent packets" if burst == 1 else f"flows of mean {burst:g} packets spread {spread:g}x"
    label = name or f"zipf-{alpha:g}-{'iid' if burst == 1 else f'flows{burst:g}x{spread:g}'}"
    desc = f"generated: {n_packets} packets, Zipf alpha={alpha:g} over {n_keys} sources, {kind}, seed {seed}"
    return Trace(label, ids.astype(np.int32), texts, desc)


def trace_from_batches(name: str, batches: Iterable[pa.RecordBatch], key: str = "src_ip") -> Trace:
    """The key stream of record batches (file order); records without the key are skipped."""
    fields = parse_key(key)
    parts = [key_text(batch, fields) for batch in batches]
    keys = pa.chunked_array(parts, pa.string()).combine_chunks() if parts else pa.array([], pa.string())
    skipped = keys.null_count
    keys = keys.drop_null()
    encoded = pc.dictionary_encode(keys)
    texts = encoded.dictionary.to_pylist()
    order = np.argsort(np.array(texts, dtype=object))
    rank = np.empty(len(texts), np.int32)
    rank[order] = np.arange(len(texts), dtype=np.int32)
    ids = rank[encoded.indices.to_numpy(zero_copy_only=False)] if len(keys) else np.zeros(0, np.int32)
    desc = f"{len(keys)} packets with a {key} ({skipped} without), {len(texts)} distinct"
    return Trace(name, ids.astype(np.int32), tuple(sorted(texts)), desc)


def _subwindow_lists(
    trace: Trace, b: int, k_max: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every full sub-window's top-``k_max`` rows: (sub-window, key id, count, rank), in order."""
    n_sw = len(trace) // b
    ids = trace.ids[: n_sw * b].astype(np.int64)
    n_keys = max(len(trace.texts), 1)
    sw = np.arange(n_sw * b, dtype=np.int64) // b
    uniq, counts = np.unique(sw * n_keys + ids, return_counts=True)
    j, key = uniq // n_keys, uniq % n_keys
    order = np.lexsort((key, -counts, j))  # count descending, then key text (= id) ascending
    j, key, counts = j[order], key[order], counts[order]
    starts = np.flatnonzero(np.r_[True, j[1:] != j[:-1]])
    rank = np.arange(len(j)) - np.repeat(starts, np.diff(np.r_[starts, len(j)]))
    keep = rank < k_max
    return j[keep], key[keep], counts[keep], rank[keep]


def evaluate_trace(
    trace: Trace,
    *,
    N: int = N_DEFAULT,
    b_values: Sequence[int] = B_VALUES,
    k_values: Sequence[int] = K_VALUES,
    starts: int = 100,
    seed: int = 0,
    algorithms: Sequence[str] = ALGORITHMS,
) -> list[dict[str, Any]]:
    """One row per (algorithm, b, k, starting point) with the measured quantities of Figure 6.3."""
    for b in b_values:
        if N % b:
            raise ValueError(f"b_values: N={N} is not a multiple of b={b}")
    unknown = set(algorithms) - set(ALGORITHMS)
    if unknown:
        raise ValueError(f"algorithms: unknown {sorted(unknown)} (one of {ALGORITHMS})")
    step = math.lcm(*b_values)
    candidates = np.arange(0, len(trace) - N + 1, step)
    if len(candidates) == 0:
        raise ValueError(f"N: the trace {trace.name!r} has {len(trace)} packets, fewer than N={N}")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(candidates, size=min(starts, len(candidates)), replace=False))
    n_keys = max(len(trace.texts), 1)
    true = {int(s): np.bincount(trace.ids[s : s + N], minlength=n_keys) for s in chosen}
    index_of = {text: i for i, text in enumerate(trace.texts)}
    packet_texts = [trace.texts[i] for i in trace.ids] if "datasketches" in algorithms else []
    rows: list[dict[str, Any]] = []
    for b in b_values:
        ends: dict[int, list[int]] = {}
        for s in chosen.tolist():
            ends.setdefault((s + N) // b - 1, []).append(s)
        last = max(ends)
        j, key, counts, rank = _subwindow_lists(trace, b, max(k_values))
        for k in k_values:
            for algorithm in algorithms:
                if algorithm == "alg6":
                    sel = rank < k
                    jk, keys, cnt = j[sel], [trace.texts[i] for i in key[sel]], counts[sel].tolist()
                    bounds = np.searchsorted(jk, np.arange(last + 2)).tolist()
                    alg: SubWindowTopK | FrequentItemsTopK = SubWindowTopK(N, b, k)
                    for sub in range(last + 1):
                        lo, hi = bounds[sub], bounds[sub + 1]
                        alg.add_subwindow(dict(zip(keys[lo:hi], cnt[lo:hi], strict=True)), sub, report=False)
                        if sub in ends:
                            rows.extend(_trials(alg, algorithm, trace, N, b, k, ends[sub], true, index_of))
                else:
                    alg = FrequentItemsTopK(N, b, k)
                    for sub in range(last + 1):
                        alg.update_many(packet_texts[sub * b : (sub + 1) * b]).slide()
                        if sub in ends:
                            rows.extend(_trials(alg, algorithm, trace, N, b, k, ends[sub], true, index_of))
    return rows


def _trials(
    alg: SubWindowTopK | FrequentItemsTopK,
    algorithm: str,
    trace: Trace,
    N: int,
    b: int,
    k: int,
    window_starts: list[int],
    true: dict[int, np.ndarray],
    index_of: dict[str, int],
) -> Iterable[dict[str, Any]]:
    report = alg.report()
    assert report is not None
    delta = report["delta"]
    ids = np.array([index_of[item["key"]] for item in report["items"]], dtype=np.int64)
    est = np.array([item["count"] for item in report["items"]], dtype=np.int64)
    space = alg.space
    for s in window_starts:
        t = true[s]
        above = int(np.count_nonzero(t > delta))
        truth = t[ids]
        hits = int(np.count_nonzero(truth > delta))
        yield {
            "trace": trace.name,
            "algorithm": algorithm,
            "N": N,
            "b": b,
            "k": k,
            "start": s,
            "delta": delta,
            "above": above,
            "reported": len(ids),
            "false_positives": len(ids) - hits,
            "recall": hits / above if above else math.nan,
            "space": space,
            "rel_err": float(np.mean((truth - est) / truth)) if len(ids) else math.nan,
            "max_excess": int((est - truth).max()) if len(ids) else 0,
        }


def summarize(trials: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Average the trials per (trace, algorithm, b, k): the rows of the Figure 6.3 table.

    ``recall_pct`` averages the trials with at least one item above delta, ``rel_err_pct`` the trials
    with at least one item reported (empty cells: no such trial, e.g. k = 1 where nothing can exceed
    delta); ``false_positives`` is a total and ``max_excess`` the largest reported-minus-true count.
    """
    groups: dict[tuple[str, str, int, int, int], list[dict[str, Any]]] = {}
    for t in trials:
        groups.setdefault((t["trace"], t["algorithm"], t["N"], t["b"], t["k"]), []).append(t)
    rows = []
    for (trace, algorithm, n, b, k), ts in groups.items():
        recall = [t["recall"] for t in ts if not math.isnan(t["recall"])]
        rel = [t["rel_err"] for t in ts if not math.isnan(t["rel_err"])]
        rows.append(
            {
                "trace": trace,
                "algorithm": algorithm,
                "N": n,
                "b": b,
                "k": k,
                "trials": len(ts),
                "avg_delta": float(np.mean([t["delta"] for t in ts])),
                "avg_above": float(np.mean([t["above"] for t in ts])),
                "avg_reported": float(np.mean([t["reported"] for t in ts])),
                "recall_pct": 100 * float(np.mean(recall)) if recall else math.nan,
                "avg_space": float(np.mean([t["space"] for t in ts])),
                "rel_err_pct": 100 * float(np.mean(rel)) if rel else math.nan,
                "false_positives": sum(t["false_positives"] for t in ts),
                "max_excess": max(t["max_excess"] for t in ts),
            }
        )
    return rows


def check_claims(rows: Sequence[dict[str, Any]], algorithm: str = "alg6") -> list[tuple[str, bool, str]]:
    """The thesis' claims (§6.3.2–6.3.4) checked per trace: (claim, holds, evidence)."""
    out = []
    for trace in dict.fromkeys(r["trace"] for r in rows):
        rs = [r for r in rows if r["trace"] == trace and r["algorithm"] == algorithm]
        if not rs:
            continue
        n = rs[0]["N"]
        fp = sum(r["false_positives"] for r in rs)
        out.append(
            (f"{trace}: no false positives", fp == 0, f"{fp} false positives in {len(rs)} configurations")
        )
        excess = max(r["max_excess"] for r in rs)
        out.append(
            (f"{trace}: reported counts never exceed true counts", excess <= 0, f"max excess {excess}")
        )
        rec = [r for r in rs if r["k"] >= 3 and not math.isnan(r["recall_pct"])]
        worst = min(rec, key=lambda r: r["recall_pct"], default=None)
        out.append(
            (
                f"{trace}: k >= 3 reports >= 80% of the above-delta items",
                bool(rec) and all(r["recall_pct"] >= 80 for r in rec),
                f"lowest {worst['recall_pct']:.1f}% (b={worst['b']}, k={worst['k']})" if worst else "no data",
            )
        )
        err = [r for r in rs if r["b"] == 20 and r["k"] >= 7 and not math.isnan(r["rel_err_pct"])]
        high = max(err, key=lambda r: r["rel_err_pct"], default=None)
        out.append(
            (
                f"{trace}: b = 20, k >= 7: average relative error < 2%",
                bool(err) and all(r["rel_err_pct"] < 2 for r in err),
                f"highest {high['rel_err_pct']:.2f}% (k={high['k']})" if high else "no data",
            )
        )
        big = max(rs, key=lambda r: r["avg_space"])
        bounded = all(r["avg_space"] <= 2 * r["k"] * n // r["b"] for r in rs)
        coarse = max((r["avg_space"] for r in rs if r["b"] >= 100), default=0.0)
        out.append(
            (
                f"{trace}: space below N and within the O(k·N/b) bound (2·k·N/b pairs)",
                bounded and big["avg_space"] < n,
                f"largest {big['avg_space']:.0f} pairs = {100 * big['avg_space'] / n:.1f}% of N={n} "
                f"(b={big['b']}, k={big['k']}); at most {100 * coarse / n:.1f}% of N for b >= 100",
            )
        )
    return out


_COLUMNS = [
    "trace",
    "algorithm",
    "N",
    "b",
    "k",
    "trials",
    "avg_delta",
    "avg_above",
    "avg_reported",
    "recall_pct",
    "avg_space",
    "rel_err_pct",
    "false_positives",
    "max_excess",
]


def _fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """The summary rows as CSV (empty cells where a metric is undefined)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for r in rows:
            writer.writerow([_fmt(r[c], 4) for c in _COLUMNS])


def markdown(rows: Sequence[dict[str, Any]], checks: Sequence[tuple[str, bool, str]] = ()) -> str:
    """Per trace and algorithm, a Figure 6.3 table (rows b, k); then the claim checks."""
    out = []
    for trace in dict.fromkeys(r["trace"] for r in rows):
        for algorithm in ALGORITHMS:
            rs = [r for r in rows if r["trace"] == trace and r["algorithm"] == algorithm]
            if not rs:
                continue
            n, trials = rs[0]["N"], rs[0]["trials"]
            out.append(f"### {trace} — {algorithm} (N = {n}, {trials} starting points)\n")
            out.append(
                "| b | k | (a) avg δ | (b) above δ | (c) reported | (d) recall % | (e) space "
                "| (f) rel. err % | FP |"
            )
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rs:
                out.append(
                    f"| {r['b']} | {r['k']} | {r['avg_delta']:.1f} | {r['avg_above']:.2f} | "
                    f"{r['avg_reported']:.2f} | {_fmt(r['recall_pct'], 1) or '—'} | {r['avg_space']:.0f} | "
                    f"{_fmt(r['rel_err_pct'], 2) or '—'} | {r['false_positives']} |"
                )
            out.append("")
    if checks:
        out.append("### The thesis' claims (Algorithm 6)\n")
        out.append("| claim | holds | evidence |")
        out.append("|---|:---:|---|")
        for claim, ok, evidence in checks:
            out.append(f"| {claim} | {'yes' if ok else '**no**'} | {evidence} |")
        out.append("")
    return "\n".join(out)


def figure(rows: Sequence[dict[str, Any]], trace: str) -> Any:
    """The six panels of Figure 6.3 for one trace: metric against k, one line per b and algorithm."""
    from plotly.subplots import make_subplots

    panels = [
        ("avg_delta", "(a) average δ"),
        ("avg_above", "(b) items truly above δ"),
        ("avg_reported", "(c) items reported"),
        ("recall_pct", "(d) % of above-δ items reported"),
        ("avg_space", "(e) space (key–count pairs)"),
        ("rel_err_pct", "(f) avg. relative error of reported counts (%)"),
    ]
    fig = make_subplots(rows=2, cols=3, subplot_titles=[title for _, title in panels])
    colors = {20: "#1f77b4", 100: "#ff7f0e", 500: "#2ca02c"}
    n = None
    for algorithm, dash in (("alg6", "solid"), ("datasketches", "dot")):
        for b in dict.fromkeys(r["b"] for r in rows if r["trace"] == trace):
            rs = sorted(
                (r for r in rows if r["trace"] == trace and r["algorithm"] == algorithm and r["b"] == b),
                key=lambda r: r["k"],
            )
            if not rs:
                continue
            n = rs[0]["N"]
            for i, (metric, _) in enumerate(panels):
                fig.add_scatter(
                    x=[r["k"] for r in rs],
                    y=[None if math.isnan(r[metric]) else r[metric] for r in rs],
                    mode="lines+markers",
                    name=f"{'Alg. 6' if algorithm == 'alg6' else 'DataSketches'}, b={b}",
                    legendgroup=f"{algorithm}{b}",
                    showlegend=i == 0,
                    line={"color": colors.get(b), "dash": dash},
                    row=i // 3 + 1,
                    col=i % 3 + 1,
                )
    for i in range(6):
        fig.update_xaxes(title_text="k", dtick=1, row=i // 3 + 1, col=i % 3 + 1)
    fig.update_layout(
        title=f"Figure 6.3 reproduced — {trace} (N = {n}); solid: Algorithm 6, dotted: DataSketches baseline",
        height=760,
        width=1400,
    )
    return fig


@dataclass
class EvalResult:
    """What ``run_evaluation`` measured and wrote."""

    traces: list[Trace]
    rows: list[dict[str, Any]]
    checks: list[tuple[str, bool, str]]
    files: list[Path]


_N_LADDER = (50_000, 20_000, 10_000, 5_000, 2_000, 1_000, 500)


def window_for(n_packets: int, N: int = N_DEFAULT) -> int | None:
    """N for a trace: ``N`` if the trace has >= 5·N packets, else the largest of 50k, 20k, 10k, 5k,
    2k, 1k, 500 that fits four times; None if not even 500 does.

    >>> window_for(500_000), window_for(82_600), window_for(2_400), window_for(751)
    (100000, 20000, 500, None)
    """
    if n_packets >= 5 * N:
        return N
    return next((n for n in _N_LADDER if n < N and 4 * n <= n_packets), None)


def default_traces(packets: int = 500_000, seed: int = 0) -> list[Trace]:
    """The generated traces: Zipf(1.5) over 1647 sources, three degrees of temporal locality.

    Independent packets; flows of ~8 packets interleaved over ~8x their length; flows of ~16
    packets back to back (as a connection-record trace sorted by time, like the thesis' LBL trace).
    """
    return [
        zipf_trace(packets, alpha=1.5, seed=seed),
        zipf_trace(packets, alpha=1.5, burst=8, spread=8, seed=seed + 1),
        zipf_trace(packets, alpha=1.5, burst=16, spread=1, seed=seed + 2),
    ]


def run_evaluation(
    *,
    traces: Sequence[str | Path] = (),
    key: str = "src_ip",
    packets: int = 500_000,
    starts: int = 100,
    N: int = N_DEFAULT,
    seed: int = 0,
    out: Path | None = None,
    log: Any = print,
) -> EvalResult:
    """Evaluate the generated traces and the captures (by ``key``); write CSV, Markdown, figures."""
    import time

    todo = default_traces(packets, seed)
    if traces:
        from ingest import read_records

        for path in traces:
            name = f"{Path(path).name.split('.')[0]}-{'-'.join(parse_key(key))}"
            todo.append(trace_from_batches(name, read_records(path), key))
    rows: list[dict[str, Any]] = []
    used: list[tuple[Trace, int]] = []
    for trace in todo:
        n = window_for(len(trace), N)
        if n is None:
            log(f"skip {trace.name}: {len(trace)} packets, too few for a window of 500 (four times)")
            continue
        began = time.perf_counter()
        rows += summarize(evaluate_trace(trace, N=n, starts=starts, seed=seed))
        used.append((trace, n))
        log(f"{trace.name}: N={n}, {time.perf_counter() - began:.1f} s")
    checks = check_claims(rows)
    files: list[Path] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(rows, out / "topk.csv")
        files.append(out / "topk.csv")
        head = [
            "# Figure 6.3 reproduced (generated by `netmon eval topk`)\n",
            f"Command: `netmon eval topk{''.join(f' --trace {p}' for p in traces)}"
            f"{f' --key {key}' if traces else ''} --packets {packets} --starts {starts} --window {N} "
            f"--seed {seed}`\n",
            "Traces (the generated ones: source IPs):\n",
            *[f"- `{t.name}` (N = {n}): {t.description}" for t, n in used],
            "",
        ]
        (out / "topk.md").write_text("\n".join(head) + "\n" + markdown(rows, checks))
        files.append(out / "topk.md")
        figures = {trace.name: figure(rows, trace.name) for trace, _ in used}
        for name, fig in figures.items():
            html = out / f"topk-{name}.html"
            fig.write_html(html, include_plotlyjs="cdn")
            files.append(html)
        files += write_pngs(figures, out, log)
    return EvalResult([t for t, _ in used], rows, checks, files)


def write_pngs(figures: dict[str, Any], out: Path, log: Any = print) -> list[Path]:
    """``topk-<trace>.png`` per figure (1400 x 760 px), all in one renderer session; [] if it fails.

    Static images need ``kaleido`` >= 1 (``pip install 'netmon[figures]'``) and a Chrome or
    Chromium, which kaleido finds on the PATH (Debian: ``apt-get install chromium``) or at
    ``BROWSER_PATH``. Without them the evaluation still writes its CSV, Markdown and HTML.
    """
    import plotly.io as pio

    paths = [out / f"topk-{name}.png" for name in figures]
    if not paths:
        return []
    try:
        figs = list(figures.values())
        # The layout's size, explicitly: write_images otherwise renders at plotly's 700 x 500.
        width = [fig.layout.width for fig in figs]
        height = [fig.layout.height for fig in figs]
        if hasattr(pio, "write_images"):  # plotly >= 6.1: one browser for all figures
            pio.write_images(figs, paths, scale=1, width=width, height=height)
        else:
            for fig, path, w, h in zip(figs, paths, width, height, strict=True):
                fig.write_image(path, scale=1, width=w, height=h)
    except Exception as exc:  # kaleido and a browser are optional
        why = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        log(
            f"no PNG figures: {type(exc).__name__}: {why[:160]} (they need kaleido >= 1 and Chrome or "
            "Chromium: apt-get install chromium, or BROWSER_PATH=/path/to/chrome)"
        )
        return []
    return paths
