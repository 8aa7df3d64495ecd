"""Throughput sweep (concurrency × input length × entropy tier) and entropy tiers of prompts.

Speculative decoding pays off at low concurrency and fades as the batch grows (the target's
verify pass stops being memory-bound); the sweep shows where each arm stops helping on this
machine. Entropy tiers split prompts by the target's own mean next-token entropy over the prompt,
since acceptance depends on how predictable the continuation is.
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from lilicorr.bench.cache import weights_id
from lilicorr.bench.variants import Variant, arm_key, variant_engine
from lilicorr.data.chat import row_ids
from lilicorr.decoding.methods import get_method
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.decoding.stats import SpecStats
from lilicorr.runtime.cache import pad_right
from lilicorr.runtime.runtime import TargetRuntime

TIERS = ("low", "mixed", "high")
POOLED = "all"  # the sweep's one tier when prompts are not split by entropy


@torch.no_grad()
def entropy_tiers(target: TargetRuntime, prompts: list[dict]) -> dict[str, str]:
    """Prompt id → tier by the target's mean predictive entropy over the prompt (thirds)."""
    tok = target.tokenizer
    ids = [row_ids(tok, p) for p in prompts]
    scores = []
    for i in range(0, len(ids), 8):
        chunk = ids[i : i + 8]
        x, mask = pad_right(chunk)
        logp = torch.log_softmax(target.model(input_ids=x, attention_mask=mask.long()).logits.float(), -1)
        ent = -(logp.exp() * logp).sum(-1)  # [b, len]
        scores += [(float((ent[j] * mask[j]).sum() / mask[j].sum())) for j in range(len(chunk))]
    order = sorted(range(len(prompts)), key=lambda i: scores[i])
    tiers = {}
    for rank, i in enumerate(order):
        tiers[prompts[i]["id"]] = TIERS[min(2, rank * 3 // len(prompts))]
    return tiers


def context_prompts(prompts: list[list[int]], length: int) -> list[list[int]]:
    """Each prompt brought to ``length`` tokens by putting the *other* prompts of the pool before it (as
    earlier turns of a long conversation) and cutting from the left, so it still ends with its own
    question. Repeating a prompt up to the length instead would hand prompt lookup a verbatim copy to
    continue and flatter lookup-based methods; one prompt alone is repeated only when the pool is one."""
    out = []
    for i, p in enumerate(prompts):
        seq, j = list(p), i + 1
        while len(seq) < length:
            seq = prompts[j % len(prompts)] + seq
            j += 1
        out.append(seq[-length:])
    return out


def measure(engine, prompts: list[list[int]], max_tokens: int) -> tuple[float, float, float]:
    """Decode ``prompts`` as one batch (greedy, ignore_eos): tokens/s end to end (prefill included, as
    serving benchmarks count it), tokens/s after the prefill (where speculation acts), and τ."""
    engine.stats = SpecStats()  # τ of this batch alone
    reqs = [Request(list(p), SamplingParams(max_tokens=max_tokens, ignore_eos=True)) for p in prompts]
    t0 = time.perf_counter()
    engine.add(reqs)
    t1 = time.perf_counter()
    first = sum(len(r.output_ids) for r in reqs)  # the prefill's own token per request
    while engine.seqs:
        engine.step()
    end = time.perf_counter()
    n = sum(len(r.output_ids) for r in reqs)
    return n / (end - t0), (n - first) / max(end - t1, 1e-9), engine.stats.tau


def throughput_sweep(
    target: TargetRuntime,
    arms: list[Variant],
    drafts: dict,
    prompts: list[dict],
    concurrencies: list[int],
    max_tokens: int,
    input_lens: list[int],
    tiers: dict[str, str],
    cache=None,
    paired_ar: bool = False,
) -> list[dict]:
    """Greedy tokens/s of each arm at each concurrency (one batch of that many requests), per input length and tier:
    end to end (prefill included, as serving benchmarks count it) and decode only (after the prefill, where
    speculation acts). ``tiers`` maps prompt ids to a tier (``TIERS``, or ``POOLED`` for one pool).

    ``paired_ar``: every cell of a speculative arm is preceded by AR at the same point (``ar_tokens_per_s``).
    ``cache`` (a ``PartCache``) keeps each finished arm × tier × input-length cell for a resumed run.
    """
    tok = target.tokenizer
    rows = []
    # greedy (T = 0) decoding: the oracle needs references and the probabilistic draft equals the greedy one
    arms = [a for a in arms if not get_method(a.method).needs_reference and a.draft_sample_method != "probabilistic"]
    present = [t for t in (*TIERS, POOLED) if t in set(tiers.values())]
    bar = tqdm(total=len(present) * len(input_lens) * len(arms), desc="sweep", mininterval=5)
    for tier in present:
        pool = [p for p in prompts if tiers.get(p["id"]) == tier]
        if not pool:
            continue
        for in_len in input_lens:
            base = context_prompts([row_ids(tok, p) for p in pool], in_len)
            for arm in arms:
                bar.update()
                pair = paired_ar and not get_method(arm.method).baseline
                key = f"sweep/{arm_key(arm)}/{weights_id(arm.draft)}/{tier}/{in_len}/{concurrencies}/{max_tokens}"
                key += "/paired" if pair else ""
                done = cache.get(key) if cache is not None else None
                if done is not None:
                    rows.extend(done)
                    continue
                cell = []
                engine = variant_engine(target, arm, drafts, None)
                ar_engine = variant_engine(target, Variant("ar", "ar"), drafts, None) if pair else None
                for c in concurrencies:
                    batch = [base[i % len(base)] for i in range(c)]
                    row = {"arm": arm.name, "tier": tier, "input_len": in_len, "concurrency": c}
                    if ar_engine is not None:  # the same point decoded by AR just before (a drifting machine)
                        ar_tps, ar_decode, _ = measure(ar_engine, batch, max_tokens)
                        row.update(ar_tokens_per_s=round(ar_tps, 2), ar_decode_tokens_per_s=round(ar_decode, 2))
                    tps, decode, tau = measure(engine, batch, max_tokens)
                    row.update(tokens_per_s=round(tps, 2), decode_tokens_per_s=round(decode, 2), tau=round(tau, 4))
                    cell.append(row)
                if cache is not None:
                    cache.put(key, cell)
                rows.extend(cell)
    bar.close()
    return rows
