"""A page (``docs/results/smollm2-drafters.md``) and its plots from a bench ``results.json``; never hand-edited."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.bench.runner import markdown_table
from lilicorr.bench.sweep import POOLED, TIERS
from lilicorr.data.atomic import atomic_write_text
from lilicorr.decoding.methods import get_method
from lilicorr.decoding.stats import STAGES


def _save(fig, out_dir: Path, name: str) -> str:
    """Write one figure as a PNG beside the page and close it; returns its file name."""
    import matplotlib.pyplot as plt

    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
    return name


def _plots(results: dict, out_dir: Path, prefix: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    runs = [r for r in results["runs"] if not get_method(r["arm"]["method"]).baseline]
    temps = sorted({r["temperature"] for r in runs})
    # τ by arm and category
    fig, axes = plt.subplots(1, len(temps), figsize=(max(5, 0.5 * len(runs)) * len(temps) / 2 + 2, 4.2), squeeze=False)
    for ax, t in zip(axes[0], temps, strict=True):
        rs = [r for r in runs if r["temperature"] == t]
        cats = sorted({c for r in rs for c in r["tau_by_category"]})
        width = 0.8 / max(1, len(cats))
        for ci, c in enumerate(cats):
            ax.bar(
                [i + ci * width for i in range(len(rs))], [r["tau_by_category"].get(c, 0) for r in rs], width, label=c
            )
        ax.set_xticks(
            [i + width * (len(cats) - 1) / 2 for i in range(len(rs))],
            [r["arm"]["name"] for r in rs],
            rotation=75,
            fontsize=6,
        )
        ax.set_title(f"τ by arm and category, T={t:g}")
        ax.set_ylabel("τ (mean acceptance length)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, out_dir, f"{prefix}tau_by_arm.png"))
    # per-position acceptance, one panel per temperature
    fig, axes = plt.subplots(1, len(temps), figsize=(6 * len(temps), 4.2), squeeze=False)
    for ax, t in zip(axes[0], temps, strict=True):
        for r in (r for r in runs if r["temperature"] == t):
            rate = r["per_position_rate"]
            ax.plot(range(1, len(rate) + 1), rate, marker="o", markersize=3, label=r["arm"]["name"])
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate (unconditional)")
        ax.set_title(f"per-position acceptance, T={t:g}")
        ax.legend(fontsize=6)
    fig.tight_layout()
    files.append(_save(fig, out_dir, f"{prefix}per_position.png"))
    # cycle-time breakdown
    fig, ax = plt.subplots(figsize=(max(7, 0.45 * len(runs)), 4.2))
    labels = [f"{r['arm']['name']}\nT={r['temperature']:g}" for r in runs]
    bottom = [0.0] * len(runs)
    for s in STAGES:
        vals = [r["time_breakdown_s"][s] / max(1e-9, sum(r["time_breakdown_s"].values())) for r in runs]
        ax.bar(labels, vals, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("share of cycle time")
    ax.set_title("draft–verify cycle breakdown")
    ax.tick_params(axis="x", labelsize=6, labelrotation=90)
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    files.append(_save(fig, out_dir, f"{prefix}cycle_breakdown.png"))
    if results.get("sweep"):
        sw = results["sweep"]
        tiers = [t for t in (*TIERS, POOLED) if any(r["tier"] == t for r in sw)]
        lens = sorted({r["input_len"] for r in sw})
        fig, axes = plt.subplots(len(lens), len(tiers), figsize=(4.5 * len(tiers), 3.6 * len(lens)), squeeze=False)
        for ax, (in_len, tier) in zip(axes.flat, [(n, t) for n in lens for t in tiers], strict=True):
            for arm in sorted({r["arm"] for r in sw}):
                pts = sorted(
                    (r["concurrency"], r["tokens_per_s"])
                    for r in sw
                    if r["arm"] == arm and r["tier"] == tier and r["input_len"] == in_len
                )
                ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", label=arm)
            ax.set_xscale("log", base=2)
            ax.set_title(
                f"{tier} prompts, input {in_len}" if tier == POOLED else f"{tier} entropy, input {in_len}", fontsize=9
            )
            ax.set_xlabel("concurrency")
            ax.set_ylabel("output tokens/s")
            ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(_save(fig, out_dir, f"{prefix}throughput.png"))
    return files


def sweep_table(results: dict) -> str:
    sw = results.get("sweep") or []
    if not sw:
        return ""
    arms = sorted({r["arm"] for r in sw})
    lines = [
        "| tier | input | concurrency | " + " | ".join(f"{a} tok/s" for a in arms) + " |",
        "|---|---|---|" + "---|" * len(arms),
    ]
    for key in sorted({(r["tier"], r["input_len"], r["concurrency"]) for r in sw}):
        vals = {r["arm"]: r["tokens_per_s"] for r in sw if (r["tier"], r["input_len"], r["concurrency"]) == key}
        cells = " | ".join(f"{vals.get(a, float('nan')):.1f}" for a in arms)
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells} |")
    return "\n".join(lines) + "\n"


def tier_table(results: dict) -> str:
    """τ per entropy tier (pooled within the tier) for every arm × temperature."""
    runs = [r for r in results["runs"] if not get_method(r["arm"]["method"]).baseline and r.get("tau_by_tier")]
    tiers = [t for t in ("low", "mixed", "high") if any(t in r["tau_by_tier"] for r in runs)]
    if not runs or not tiers:
        return ""
    lines = ["| T | arm | " + " | ".join(f"τ {t} entropy" for t in tiers) + " |", "|---|---|" + "---|" * len(tiers)]
    for r in runs:
        cells = " | ".join(f"{r['tau_by_tier'].get(t, float('nan')):.3f}" for t in tiers)
        lines.append(f"| {r['temperature']:g} | {r['arm']['name']} | {cells} |")
    return "\n".join(lines) + "\n"


def derived_table(results: dict, baselines: list[str] | None) -> str:
    """τ relative to each baseline arm (one column each), and for LiLiCorr arms the share of the oracle
    headroom their walk recovers over their own backbone's per-slot argmax:
    (τ_walk − τ_top1) / (τ_oracle − τ_top1)."""
    baselines = baselines or []
    by = {(r["arm"]["name"], r["temperature"]): r["pooled"]["tau"] for r in results["runs"]}
    lines = [
        "| T | arm | τ | " + "".join(f"τ / {b} | " for b in baselines) + "oracle headroom recovered |",
        "|---|---|---|" + "---|" * len(baselines) + "---|",
    ]
    for r in results["runs"]:
        name, t = r["arm"]["name"], r["temperature"]
        method = get_method(r["arm"]["method"])
        if method.baseline or method.needs_reference:
            continue
        ratios = "".join(f"{by[(name, t)] / by[(b, t)]:.3f} | " if (b, t) in by else "— | " for b in baselines)
        base, at, n = name.partition("@")  # draft-length variants are named ARM@nN, ARM:top1@nN, …
        top1, oracle = by.get((f"{base}:top1{at}{n}", t)), by.get((f"{base}:oracle{at}{n}", 0.0))
        head = (by[(name, t)] - top1) / (oracle - top1) if top1 and oracle and t == 0 and oracle > top1 else None
        lines.append(
            f"| {t:g} | {name} | {by[(name, t)]:.3f} | {ratios}" + (f"{100 * head:.0f} %" if head else "") + " |"
        )
    return "\n".join(lines) + "\n"


def sweep_speedup_table(results: dict, field: str = "tokens_per_s") -> str:
    """Speedup of each arm over AR in the sweep, per input length and concurrency (geometric mean over tiers),
    end to end (``tokens_per_s``) or decode only (``decode_tokens_per_s``); over the AR run paired with the
    cell where there is one (``ar_tokens_per_s``), else over the sweep's AR arm at that point."""
    import math

    sw = [r for r in results.get("sweep") or [] if field in r]
    if not any(r["arm"] == "ar" for r in sw):
        return ""
    ar = {(r["tier"], r["input_len"], r["concurrency"]): r[field] for r in sw if r["arm"] == "ar"}
    arms = sorted({r["arm"] for r in sw} - {"ar"})
    keys = sorted({(r["input_len"], r["concurrency"]) for r in sw})
    lines = ["| input | concurrency | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    for in_len, c in keys:
        cells = []
        for a in arms:
            ratios = [
                r[field] / (r[f"ar_{field}"] if f"ar_{field}" in r else ar[(r["tier"], in_len, c)])
                for r in sw
                if r["arm"] == a
                and r["input_len"] == in_len
                and r["concurrency"] == c
                and (f"ar_{field}" in r or (r["tier"], in_len, c) in ar)
            ]
            g = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
            cells.append(f"{g:.2f}×")
        lines.append(f"| {in_len} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(
    results_path: Path,
    out: Path,
    command: str,
    title: str = "Results",
    baselines: list[str] | None = None,
    notes: Path | None = None,
) -> Path:
    results = json.loads(Path(results_path).read_text())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, out.parent, prefix=out.stem.lower() + "_")
    env = results["environment"]
    lines = [
        f"# {title}",
        "",
        f"Generated by `lilicorr report {results_path} --out {out}"
        + (f" --baseline {' '.join(baselines)}" if baselines else "")
        + (f" --notes {notes}" if notes else "")
        + "` from the bench run below; do not edit by hand.",
        "",
        "```",
        command,
        "```",
        "",
        f"Target `{results['target']}`; drafters {', '.join(f'`{d}`' for d in results['drafts'])}; "
        f"{results['runs'][0]['prompts']} held-out prompts, {results['max_tokens']} new tokens each, batch 1; "
        f"python {env['python']}, torch {env['torch']}, {env['threads']} threads"
        + (f", GOMP_SPINCOUNT={env['gomp_spincount']}" if env.get("gomp_spincount") is not None else "")
        + f", {env['time']}.",
        "",
        markdown_table(results),
        "## Relative to the baselines",
        "",
        derived_table(results, baselines),
        "## By entropy tier",
        "",
        "Tiers split the prompts in thirds by the target's own mean predictive entropy over the prompt.",
        "",
        tier_table(results),
        *(
            [
                "## Throughput sweep",
                "",
                "Output tokens/s with that many requests decoded together (ignore_eos), per prompt tier and "
                "input length; speedups are over AR at the same tier, input and concurrency, geometric mean over "
                "tiers; with a paired AR run (`--paired-ar`) each cell is divided by AR decoding the same batch "
                "just before it. End to end (prefill included):",
                "",
                sweep_speedup_table(results),
                *(
                    [
                        "Decode only (after the prefill, where speculation acts):",
                        "",
                        sweep_speedup_table(results, "decode_tokens_per_s"),
                    ]
                    if any("decode_tokens_per_s" in r for r in results["sweep"])
                    else []
                ),
                sweep_table(results),
            ]
            if results.get("sweep")
            else []
        ),
        *(
            [f"Resumed run: {len(results['resumed'])} pieces were reused from an earlier, interrupted run.", ""]
            if results.get("resumed")
            else []
        ),
        "τ = 1 + accepted / drafts (vLLM's mean acceptance length, bonus token included). Speedups are ratios "
        'to autoregressive decoding measured in the same process on the same prompts; "vs paired AR" divides '
        "by AR decoding each prompt just before the arm does (a shared machine's speed drifts over minutes, so "
        "this is the ratio to trust). `:oracle` picks the "
        "target's token whenever it is in the top-K lattice: the ceiling for any walk over that lattice.",
        "",
        *[f"![{p}]({p})" for p in plots],
        "",
        *(["## Notes", "", Path(notes).read_text().strip(), ""] if notes else []),
    ]
    atomic_write_text(out, "\n".join(lines))
    return out
