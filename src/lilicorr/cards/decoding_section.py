"""The "Decoding" section of a drafter's ``MODEL_CARD.md``: every arm of a ``lilicorr bench`` run that ran the
drafter, today's default marked; written with the card (``cards/draft.py``) and rewritten alone by ``lilicorr card
decoding`` when the engine's defaults change after training."""

from __future__ import annotations

import json
from pathlib import Path

from lilicorr.data.atomic import atomic_write_text

_SUFFIXES = (("n", "{} draft tokens"), ("b", "tree budget {}"), ("v", "draft vocabulary {}"))


def arm_label(arm_name: str, model_name: str, method: str) -> str:
    """A bench arm's name as a card's method column: what follows the drafter's name (the method for the plain
    arm), with the variant suffixes spelled out (``@n5`` draft tokens, ``@b16`` tree budget, ``@v8192`` draft
    vocabulary, ``+gate`` the measured draft gate)."""
    name, gate = (arm_name[: -len("+gate")], True) if arm_name.endswith("+gate") else (arm_name, False)
    base, *variants = name.split("@")
    label = base.removeprefix(model_name).removeprefix(":") or method
    notes = [fmt.format(v[1:]) for v in variants for key, fmt in _SUFFIXES if v[:1] == key and v[1:].isdigit()]
    notes += ["draft gate"] if gate else []
    return label + (f" ({', '.join(notes)})" if notes else "")


def is_current_default(arm: dict, model_dir: Path) -> bool:
    """Whether a bench arm (its recorded config) is what the folder runs by default today (``resolve`` of
    ``method: "default"``): a ``:default`` arm measured before the default changed is not."""
    from lilicorr.decoding.config import DEFAULT, SpecConfig, resolve

    d = resolve(SpecConfig(method=DEFAULT), model_dir).asked
    recorded = (
        arm["method"],
        bool(arm.get("enable_adaptive_verification")),
        dict(arm.get("options") or {}),
        bool(arm.get("draft_gate")),
        int(arm.get("draft_vocab_size") or 0),
    )
    return recorded == (d.method, d.enable_adaptive_verification, dict(d.options), d.draft_gate, d.draft_vocab_size)


def _bench_rows(bench: dict, name: str, model_dir: Path | None = None) -> list[str]:
    rows = []
    for r in bench["runs"]:
        base = r["arm"]["name"].split("@")[0].removesuffix("+gate")
        if base == name or base.startswith(f"{name}:"):
            speedup = r.get("speedup_vs_paired_ar") or r["speedup_vs_ar"]
            label = arm_label(r["arm"]["name"], name, r["arm"]["method"])
            if model_dir is not None and is_current_default(r["arm"], model_dir):
                label = f"**today's default**: {label}"
            elif label.startswith("default"):  # measured under an earlier default
                label = label.replace("default", "earlier default", 1)
            rows.append(
                f"| {r['temperature']:g} | {label} "
                f"| {r['pooled']['tau']:.3f} | {r['tau_mean_per_request']:.3f} | {speedup:.2f}× | "
                f"{100 * r['head_walk_share']:.1f} % | {'yes' if r.get('identical_to_ar', True) else 'NO'} |"
            )
    return rows


DECODING_HEADING = "## Decoding (measured with the engine)"


def decoding_section(model_dir: Path, bench: Path, bench_command: str) -> list[str]:
    """The card's "Decoding" lines: every arm of a ``lilicorr bench`` results file that runs this drafter, the
    one that is today's default marked (an arm named ``default`` measured under an earlier one says so)."""
    b = json.loads(Path(bench).read_text())
    n_long = sum(x.get("category") == "long" for x in b["runs"][0].get("per_request", []))
    paired = any(r.get("speedup_vs_paired_ar") for r in b["runs"])
    return [
        "",
        DECODING_HEADING,
        "",
        f"`{bench_command}` — {b['runs'][0]['prompts']} prompts ({_categories(b)})"
        + (f" ({n_long} of them long-context)" if n_long else "")
        + f", {b['max_tokens']} new tokens each, batch 1, {b['environment']['threads']} threads, "
        f"{b.get('dtype', 'auto')} on {b['environment'].get('cpu', 'this machine')}"
        + (" (fast bf16)" if b["environment"].get("fast_bf16") else "")
        + (". Speedup over AR decoding of the same prompt just before each arm (`--paired-ar`)." if paired else ".")
        + (
            " In bf16 a multi-token verify pass and a one-token step round differently, so near-ties can flip"
            " (identity NO); in fp32 the engine is token-identical to AR (the losslessness tests)."
            if b.get("dtype") == "bfloat16"
            else ""
        ),
        "",
        "| T | method | τ pooled | τ per request | speedup vs AR | head+walk share | T=0 identical to AR |",
        "|---|---|---|---|---|---|---|",
        *_bench_rows(b, Path(model_dir).name, Path(model_dir)),
    ]


def replace_decoding_section(model_dir: Path, bench: Path, bench_command: str) -> None:
    """Rewrite only the "Decoding" section of an existing card (training sections untouched): the decoding
    figures follow the engine and its defaults, which change after a drafter is trained."""
    card = model_dir / "MODEL_CARD.md"
    if not card.exists():
        raise FileNotFoundError(f"{card}: no card to update (write one with `lilicorr card draft`)")
    text = card.read_text()
    new = "\n".join(decoding_section(model_dir, bench, bench_command)).strip("\n") + "\n"
    if DECODING_HEADING in text:
        start = text.index(DECODING_HEADING)
        nxt = text.find("\n## ", start + len(DECODING_HEADING))
        text = text[:start] + new + ("\n" + text[nxt + 1 :] if nxt >= 0 else "")
    else:
        vocab = text.find("\n## Draft vocabulary")
        text = text[: vocab + 1] + new + "\n" + text[vocab + 1 :] if vocab >= 0 else text.rstrip("\n") + "\n\n" + new
    atomic_write_text(card, text)


def _categories(bench: dict) -> str:
    counts: dict[str, int] = {}
    for r in bench["runs"][0].get("per_request", []):
        counts[str(r.get("category"))] = counts.get(str(r.get("category")), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
