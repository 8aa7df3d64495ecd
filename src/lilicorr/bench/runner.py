"""Acceptance and speed of proposal arms on one stack: same target, prompts, process and engine.

Every arm runs through ``SpecEngine`` at batch 1 on the same prompts, and autoregressive decoding
runs in the same process, so speedups are ratios measured side by side (absolute times on a shared
2-core machine are noisy; ratios much less so). At T = 0 every arm's output must equal the
autoregressive output token for token; the report records that check.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from lilicorr.bench.variants import Variant, arm_key, default_variants, variant_engine
from lilicorr.checkpoint import load_draft
from lilicorr.data.atomic import atomic_write_text
from lilicorr.data.chat import row_ids
from lilicorr.decoding.methods import get_method
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.decoding.stats import SpecStats
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.machine import machine_info
from lilicorr.runtime.runtime import TargetRuntime


def run_variant(
    target: TargetRuntime,
    arm: Variant,
    prompts: list[dict],
    temperature: float,
    max_tokens: int,
    drafts: dict,
    references: dict[str, list[int]] | None = None,
    seed: int = 0,
    paired_ar: bool = False,
) -> dict:
    """Decode every prompt at batch 1 with one arm; per-request and pooled figures.

    ``paired_ar``: before each prompt, plain decoding of the same request is timed too, and the arm's
    speedup is over that paired AR time. A shared CPU's speed drifts by tens of percent over minutes
    (docs/results/smollm2-speed-notes.md), so arms timed one after the other
    cannot be compared with one AR run made minutes earlier; prompt-by-prompt pairs can."""
    tok = target.tokenizer

    def requests() -> list[Request]:
        return [
            Request(
                row_ids(tok, p),
                SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed + i, ignore_eos=True),
                id=p["id"],
                eos_ids=frozenset(target.eos_token_ids),
            )
            for i, p in enumerate(prompts)
        ]

    reqs = requests()
    refs = {id(r): references[r.id] for r in reqs} if references else None
    engine = variant_engine(target, arm, drafts, refs)
    ar_engine, ar_reqs, ar_s = (
        (variant_engine(target, Variant("ar", "ar"), drafts, None), requests(), 0.0) if paired_ar else (None, [], 0.0)
    )
    per_request, total_tokens, total_s = [], 0, 0.0
    for i, (p, r) in enumerate(zip(prompts, reqs, strict=True)):
        if ar_engine is not None:
            t0 = time.perf_counter()
            ar_engine.generate([ar_reqs[i]])
            ar_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.generate([r])
        dt = time.perf_counter() - t0
        total_tokens += len(r.output_ids)
        total_s += dt
        per_request.append(
            {
                "id": r.id,
                "category": p.get("category"),
                "tokens": len(r.output_ids),
                "time_s": round(dt, 4),
                **r.stats.as_dict(),
            }
        )
    timer = engine.timer.as_dict()
    cycle = sum(timer.values())
    by_cat: dict[str, SpecStats] = {}
    by_tier: dict[str, SpecStats] = {}
    for p, r in zip(prompts, reqs, strict=True):
        by_cat.setdefault(p.get("category") or "all", SpecStats()).merge(r.stats)
        by_tier.setdefault(p.get("tier") or "all", SpecStats()).merge(r.stats)
    drafted = [x for x in per_request if x["num_drafts"]]
    paired = {}
    if ar_engine is not None:
        ar_tokens = sum(len(r.output_ids) for r in ar_reqs)
        paired = {
            "paired_ar_tokens_per_s": round(ar_tokens / ar_s, 3),
            "speedup_vs_paired_ar": round((total_tokens / total_s) / (ar_tokens / ar_s), 4),
        }
    return {
        "arm": asdict(arm),
        "temperature": temperature,
        "prompts": len(prompts),
        "tokens_per_s": round(total_tokens / total_s, 3),
        **paired,
        "total_tokens": total_tokens,
        "total_s": round(total_s, 3),
        "pooled": engine.stats.as_dict(),
        "tau_mean_per_request": round(sum(x["tau"] for x in drafted) / len(drafted), 4) if drafted else 1.0,
        "per_position_rate": [round(x, 4) for x in engine.stats.per_position_rate],
        "tau_by_category": {c: round(s.tau, 4) for c, s in sorted(by_cat.items())},
        "tau_by_tier": {c: round(s.tau, 4) for c, s in sorted(by_tier.items())},
        "time_breakdown_s": timer,
        "head_walk_share": round((timer["candidates"] + timer["head"] + timer["walk"]) / cycle, 4) if cycle else 0.0,
        "per_request": per_request,
        "outputs": {r.id: r.output_ids for r in reqs},
    }


def environment() -> dict:
    """The machine a result was measured on, with the time (``runtime.machine.machine_info``)."""
    return machine_info(with_time=True)


def run_bench(
    target_dir: str,
    draft_dirs: list[str],
    prompts: list[dict],
    temperatures: list[float],
    max_tokens: int,
    out: Path | None = None,
    arms: list[Variant] | None = None,
    seed: int = 0,
    sweep: dict | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    paired_ar: bool = False,
) -> dict:
    """Every arm × temperature on the prompts (batch 1; ``paired_ar``: each prompt also decoded by AR just
    before the arm, see ``run_variant``; the sweep then pairs each cell with AR too); optionally the throughput sweep
    (``sweep = {"concurrencies": [...], "input_lens": [...], "max_tokens": n, "arms": [names] | None,
    "pooled": bool}``; pooled: one pool of all prompts instead of the three entropy tiers).

    With ``out``, every finished arm × temperature (and sweep cell) is kept under ``out/parts`` and a
    rerun with the same inputs resumes from there (``results["resumed"]`` lists what was reused;
    speedups of reused pieces are still ratios to the AR run of the same piece set).
    """
    from lilicorr.bench.cache import PartCache, fingerprint, weights_id
    from lilicorr.bench.sweep import POOLED, entropy_tiers, throughput_sweep

    torch_dtype = resolve_dtype(dtype)  # target and drafters alike; AR runs in the same dtype
    dtype = str(torch_dtype).removeprefix("torch.")
    target = TargetRuntime.load(target_dir, dtype=torch_dtype, device=device)
    arms = arms or default_variants(draft_dirs)
    drafts = {d: load_draft(d, target.model.config, dtype=torch_dtype) for d in {a.draft for a in arms if a.draft}}
    cache = PartCache(out, fingerprint(target_dir, prompts, max_tokens, seed, dtype, os.environ.get("GOMP_SPINCOUNT")))
    tiers = cache.get("tiers") or entropy_tiers(target, prompts)
    cache.put("tiers", tiers)
    prompts = [{**p, "tier": tiers[p["id"]]} for p in prompts]
    results: dict = {
        "target": target_dir,
        "drafts": draft_dirs,
        "environment": environment(),
        "max_tokens": max_tokens,
        "dtype": dtype,
        "tiers": tiers,
        "paired_ar": paired_ar,
        "runs": [],
    }
    for temp in temperatures:
        ar = cache.get(f"run/ar/T={temp}") or run_variant(
            target, Variant("ar", "ar"), prompts, temp, max_tokens, drafts, seed=seed
        )
        cache.put(f"run/ar/T={temp}", ar)
        results["runs"].append(ar)
        if temp == 0:
            hf = cache.get("hf_generate") or hf_generate_baseline(target, prompts, max_tokens)
            cache.put("hf_generate", hf)
            results["hf_generate"] = {
                "tokens_per_s": hf["tokens_per_s"],
                "engine_ar_tokens_per_s": ar["tokens_per_s"],
                "engine_ar_vs_hf": round(ar["tokens_per_s"] / hf["tokens_per_s"], 4),
                "identical_to_engine_ar": hf["outputs"] == ar["outputs"],
            }
        for arm in tqdm([a for a in arms if not get_method(a.method).baseline], desc=f"arms T={temp}", mininterval=5):
            if get_method(arm.method).needs_reference and temp != 0:
                continue  # the oracle needs the deterministic greedy reference
            if arm.draft_sample_method == "probabilistic" and temp == 0:
                continue  # identical to the greedy draft at T = 0
            key = f"run/{json.dumps([arm_key(arm), weights_id(arm.draft)], sort_keys=True)}/T={temp}"
            key += "/paired" if paired_ar else ""
            res = cache.get(key)
            if res is None:
                try:
                    res = run_variant(
                        target, arm, prompts, temp, max_tokens, drafts, ar["outputs"], seed, paired_ar=paired_ar
                    )
                except Exception as e:  # noqa: BLE001 - one broken arm must not lose the others' figures
                    results.setdefault("errors", []).append({"arm": asdict(arm), "temperature": temp, "error": repr(e)})
                    continue
                res["speedup_vs_ar"] = round(res["tokens_per_s"] / ar["tokens_per_s"], 4)
                if temp == 0:
                    res["identical_to_ar"] = res["outputs"] == ar["outputs"]
                cache.put(key, res)
            results["runs"].append(res)
    if sweep and out is not None:  # the acceptance figures are usable while the (long) sweep runs
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    if sweep:
        keep = set(sweep.get("arms") or [a.name for a in arms]) | {"ar"}
        results["sweep"] = throughput_sweep(
            target,
            [a for a in arms if a.name in keep],
            drafts,
            prompts,
            sweep["concurrencies"],
            sweep["max_tokens"],
            sweep["input_lens"],
            {k: POOLED for k in tiers} if sweep.get("pooled") else tiers,
            cache=cache,
            paired_ar=paired_ar,
        )
    if cache.reused:
        results["resumed"] = cache.reused
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
        atomic_write_text(out / "results.md", markdown_table(results))
    return results


@torch.no_grad()
def hf_generate_baseline(target: TargetRuntime, prompts: list[dict], max_tokens: int) -> dict:
    """transformers' own ``generate()`` (greedy, batch 1, EOS ignored like the bench's AR) on the same
    prompts: the engine's AR must be at least this fast, or a speedup over it would flatter."""
    import copy

    cfg = copy.deepcopy(target.model.generation_config)
    # EOS ignored: an empty list, not None — transformers 5 fills a None eos_token_id from the model config
    # and stopped there, which made the identity check read "NO" for an answer that reached EOS early
    cfg.eos_token_id, cfg.pad_token_id, cfg.do_sample = [], 0, False
    cfg.temperature = cfg.top_p = cfg.top_k = None
    cfg.max_new_tokens, cfg.min_new_tokens = max_tokens, 0
    outputs, n, secs = {}, 0, 0.0
    for p in prompts:
        ids = torch.tensor([row_ids(target.tokenizer, p)])
        t0 = time.perf_counter()
        out = target.model.generate(input_ids=ids, generation_config=cfg)
        secs += time.perf_counter() - t0
        new = out[0, ids.shape[1] :].tolist()
        outputs[p["id"]] = new
        n += len(new)
    return {"tokens_per_s": round(n / secs, 3), "outputs": outputs}


def markdown_table(results: dict) -> str:
    """One row per arm × temperature; a τ column per prompt category present (code, prose, long …)."""
    cats = sorted({c for r in results["runs"] for c in r["tau_by_category"]})
    lines = [
        "| T | arm | τ pooled | τ per request | "
        + "".join(f"τ {c} | " for c in cats)
        + "tokens/s | speedup vs AR | speedup vs paired AR | head+walk share | T=0 identical to AR |",
        "|---|---|---|---|" + "---|" * len(cats) + "---|---|---|---|---|",
    ]
    for r in results["runs"]:
        by_cat = r["tau_by_category"]
        lines.append(
            f"| {r['temperature']:g} | {r['arm']['name']} | {r['pooled']['tau']:.3f} | {r['tau_mean_per_request']:.3f} "
            + "".join(f"| {by_cat.get(c, float('nan')):.3f} " for c in cats)
            + f"| {r['tokens_per_s']:.1f} | {r.get('speedup_vs_ar', 1.0):.2f}× | "
            + (f"{r['speedup_vs_paired_ar']:.2f}×" if "speedup_vs_paired_ar" in r else "—")
            + f" | {r['head_walk_share'] * 100:.1f} % | "
            f"{'yes' if r.get('identical_to_ar', True) else 'NO'} |"
        )
    hf = results.get("hf_generate")
    if hf:
        lines += [
            "",
            f"transformers `generate()` (greedy, batch 1, same prompts): {hf['tokens_per_s']:.1f} tokens/s; the "
            f"engine's AR {hf['engine_ar_tokens_per_s']:.1f} tokens/s = {hf['engine_ar_vs_hf']:.2f}× of it; "
            f"same tokens: {'yes' if hf['identical_to_engine_ar'] else 'NO'}.",
        ]
    return "\n".join(lines) + "\n"
