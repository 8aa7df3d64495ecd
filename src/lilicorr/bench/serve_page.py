"""The serving page (``lilicorr bench serve``): a table and a plot panel per metric, arms × concurrency.

Why medians and paired ratios: two runs of the same serving bench on an idle 2-core machine differed by up to
±15 % a cell (docs/results/smollm2-serving-notes.md), so one round cannot tell a 10 % gain from noise. With
``--rounds N`` every level runs N times; the tables show each cell's median over the rounds, and the ratio table
divides each round's figure by plain serving's *in the same round* (the arms of a level run back to back), so the
machine's drift between rounds cancels; it shows the median ratio and its range over the rounds.
"""

from __future__ import annotations

import statistics
from pathlib import Path

METRICS = (
    "output_tok_s", "req_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "tpot_p50", "tpot_p99", "tau",
    "drafting_steps", "corrected_steps", "rss_mib",
)  # fmt: skip
LABELS = {
    "output_tok_s": "output tokens/s",
    "req_s": "requests/s",
    "ttft_p50": "TTFT p50 (s)",
    "ttft_p99": "TTFT p99 (s)",
    "itl_p50": "inter-token latency p50 (s)",
    "itl_p99": "inter-token latency p99 (s)",
    "tpot_p50": "time per output token p50 (s)",
    "tpot_p99": "time per output token p99 (s)",
    "tau": "τ (server counters)",
    "drafting_steps": "share of engine steps that drafted (load policy)",
    "corrected_steps": "share of engine steps with the outcome correction applied (load policy)",
    "rss_mib": "server resident memory (MiB)",
}
BASE = "plain"  # the arm every ratio is taken against
PAIRED = ("output_tok_s", "itl_p99", "tpot_p99")  # the goals' metrics, as ratios to plain serving


def served_nothing(lv: dict) -> bool:
    """Every request of the level failed (a crashed or unreachable server): the level measured no serving, so it
    gives no figure — a 0 tokens/s cell would read as a speed and drag a median or a paired ratio to 0×."""
    return lv.get("requests", 0) > 0 and lv.get("errors", 0) >= lv["requests"]


def median_by_level(levels: list[dict], metric: str) -> dict[int, float]:
    """Concurrency → the metric's median over the rounds that measured it (rounds that served nothing left out)."""
    by_c: dict[int, list[float]] = {}
    for lv in levels:
        if lv.get(metric) is not None and not served_nothing(lv):
            by_c.setdefault(lv["concurrency"], []).append(float(lv[metric]))
    return {c: statistics.median(v) for c, v in by_c.items()}


def paired_ratios(arms: dict[str, list[dict]], metric: str = "output_tok_s") -> dict[str, dict[int, list[float]]]:
    """Arm → concurrency → the metric over plain serving's, one ratio per round both arms ran (same round, same
    level: measured side by side)."""
    base = {(lv["concurrency"], lv.get("round", 0)): lv.get(metric)
            for lv in arms.get(BASE, []) if not served_nothing(lv)}  # fmt: skip
    out: dict[str, dict[int, list[float]]] = {}
    for name, levels in arms.items():
        if name == BASE:
            continue
        for lv in levels:
            b = base.get((lv["concurrency"], lv.get("round", 0)))
            if b and lv.get(metric) is not None and not served_nothing(lv):
                out.setdefault(name, {}).setdefault(lv["concurrency"], []).append(float(lv[metric]) / b)
    return out


def _ratio_cell(xs: list[float] | None) -> str:
    if not xs:
        return ""
    med = f"{statistics.median(xs):.2f}×"
    return med if len(xs) == 1 else f"{med} ({min(xs):.2f}–{max(xs):.2f})"


def _failed_cell(levels: list[dict], c: int) -> str:
    """The cell of a level with no figure: "failed" where every round at it served nothing, else empty."""
    at = [lv for lv in levels if lv["concurrency"] == c]
    return "failed" if at and all(served_nothing(lv) for lv in at) else ""


def requests_per_level(arms: dict) -> str:
    """How many requests each level sent, e.g. "24 at c=1, …, 128 at c=64": the bench sends at least twice the
    concurrency, so a level's load is not the prompt count's (session 36's notes misread 24 prompts as 24
    requests at c=32 and c=64)."""
    per: dict[int, int] = {}
    for lvs in arms.values():
        for lv in lvs:
            if lv.get("requests"):  # older serve.json files did not record it: say nothing rather than 0
                per.setdefault(lv["concurrency"], lv["requests"])
    return ", ".join(f"{n} at c={c}" for c, n in sorted(per.items())) or "not recorded"


def write_serve_page(results: dict, page: Path, command: str) -> Path:
    """The results page: the paired ratio table, a table per metric (medians over rounds), one figure with a
    panel per metric, the failed requests by kind, and the notes companion (``PAGE-notes.md``, written by hand)
    appended when it exists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page.parent.mkdir(parents=True, exist_ok=True)
    arms = results["arms"]
    levels = sorted({lv["concurrency"] for lvs in arms.values() for lv in lvs})
    cfg = results["config"]
    rounds = int(cfg.get("rounds", 1))
    header = "| arm | " + " | ".join(f"c={c}" for c in levels) + " |"
    lines = [
        "# Serving under load",
        "",
        f"Generated by `{command}`." if command else "",
        "",
        f"Target `{cfg['target']}`, {cfg['max_tokens']} output tokens at most, temperatures {cfg['temperatures']} in "
        f"turn, {len(cfg['prompts'])} prompts (ShareGPT, MT-Bench, HumanEval in turn) drawn in turn at every level; "
        f"requests a level (at least twice the concurrency): {requests_per_level(arms)}; "
        "streamed chat completions; ITL is the gap between streamed chunks (a speculative step can send several "
        "tokens at once, so its gaps are fewer and longer), TPOT a request's stream time after its first token over "
        "its tokens after the first (vLLM's definitions; percentiles over requests). All servers stay up for the "
        "whole run; each level runs the arms one after another, the order reversed "
        "at every level, so a drift in the machine's speed reaches every arm alike. "
        + (f"{rounds} rounds of every level: each table cell is the median over the rounds." if rounds > 1 else "")
        + (f" OpenMP: {cfg['openmp']}." if cfg.get("openmp") else ""),
        "",
    ]
    spread = " (range over the rounds)" if rounds > 1 else ""
    for metric in PAIRED:
        ratios = paired_ratios(arms, metric)
        if not ratios:
            continue
        lines += [f"## {LABELS[metric]} × {BASE} serving, paired by round: median{spread}", "", header]
        lines.append("|---|" + "---:|" * len(levels))
        for name in arms:
            if name == BASE:
                continue
            by_c = ratios.get(name, {})
            cells = [_ratio_cell(by_c.get(c)) or _failed_cell(arms[name], c) for c in levels]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    png = page.with_name(f"{page.stem}.png")  # one figure, a panel per metric: one file per page in docs/results
    # a metric no level measured (e.g. TPOT in a run from before it was recorded) gets neither table nor panel
    shown = [m for m in METRICS if any(lv.get(m) is not None for lvs in arms.values() for lv in lvs)]
    rows = (len(shown) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 2.8 * rows), squeeze=False)
    for ax in axes.flatten()[len(shown) :]:
        ax.set_visible(False)
    for metric, ax in zip(shown, axes.flatten(), strict=False):
        lines += [f"## {LABELS[metric]}", "", header, "|---|" + "---:|" * len(levels)]
        for name, lvs in arms.items():
            by_c = median_by_level(lvs, metric)
            cells = [f"{by_c[c]:.4g}" if c in by_c else _failed_cell(lvs, c) for c in levels]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            pts = [(c, by_c[c]) for c in levels if c in by_c]
            if pts:
                ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(LABELS[metric])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
        lines.append("")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    lines += [f"![serving metrics over concurrency]({png.name})", ""]
    errors = sum(lv["errors"] for lvs in arms.values() for lv in lvs)
    lines.append(f"Errors over all arms, levels and rounds: {errors}.")
    for name, lvs in arms.items():
        dead = [f"c={lv['concurrency']}" + (f" round {lv.get('round', 0) + 1}" if rounds > 1 else "")
                for lv in lvs if served_nothing(lv)]  # fmt: skip
        if dead:
            lines.append(f"- **{name} served nothing** (every request failed; no figure taken) at: {', '.join(dead)}")
    for name, lvs in arms.items():
        for lv in lvs:
            where = f"c={lv['concurrency']}" + (f" round {lv['round'] + 1}" if rounds > 1 else "")
            lines += [f"- {name} {where}: {count} × {kind}" for kind, count in lv.get("error_kinds", {}).items()]
    notes = page.with_name(f"{page.stem}-notes.md")  # the reading of the figures, kept by hand beside the page
    if notes.exists():
        lines += ["", "## Notes", "", notes.read_text().strip()]
    page.write_text("\n".join(lines) + "\n")
    return page
