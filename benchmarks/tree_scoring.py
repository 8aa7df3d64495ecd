"""How a tree's node scores decide what it accepts: DDTree's marginals vs the LiLiCorr lattice scores, at
equal node budget, on the same recorded drafting states (T = 0).

The shipped SmolLM2 pair decodes held-out MT-Bench/HumanEval prompts greedily with the LiLiCorr chain; at
every step the drafter's logits and the head's scores are kept with the target's true continuation (the
greedy output is the same for every lossless method). Each tree builder then runs offline on the same
states, and a tree accepts the longest root path that matches the continuation. The mean of
1 + accepted over states is τ for a method that drafted at exactly these states — the same states for
every scorer, so the comparison is paired and needs no target forwards per variant.

    python benchmarks/tree_scoring.py --draft models/smollm2-lilicorr --budgets 8 16 32
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.data.chat import row_ids
from lilicorr.data.prompt_sets import read_prompt_rows, round_robin
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.methods.ngram import lookup
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.decoding.tree import TokenTree, assemble, build_lattice_tree, build_tree, graft_chain
from lilicorr.models.head import HeadScores
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime


def record_states(target, draft, prompts: list[list[int]], max_tokens: int) -> list[dict]:
    """Run the LiLiCorr chain and keep every drafting state with the continuation that followed it."""
    engine = build_engine(target, SpecConfig(method="lilicorr"), draft)
    proposer, states = engine.proposer, []
    plain = proposer.propose

    def keep(d, temperature, uniforms, timer):
        ids, lp, scores = proposer.lattice(d, timer)
        for r, req in enumerate(d.requests):
            states.append(
                {
                    "request": req,
                    "at": len(req.output_ids),
                    "logits": d.logits[r : r + 1].clone(),
                    "ids": ids[r : r + 1],
                    "lp": lp[r : r + 1],
                    "scores": HeadScores(start=scores.start[r : r + 1], pair=scores.pair[r : r + 1]),
                    "root": d.anchor_tokens[r : r + 1],
                }
            )
        return plain(d, temperature, uniforms, timer)

    proposer.propose = keep
    for p in prompts:
        engine.generate([Request(p, SamplingParams(max_tokens=max_tokens, ignore_eos=True))])
    n = engine.n
    for s in states:
        s["truth"] = s["request"].output_ids[s["at"] : s["at"] + n]
    return [s for s in states if len(s["truth"]) == n]


def accepted(tree: TokenTree, truth: list[int]) -> int:
    """Depth of the deepest root path whose tokens equal the continuation."""
    children: dict[tuple[int, int], int] = {}
    for i in range(1, tree.tokens.shape[1]):
        children.setdefault((int(tree.parents[0, i]), int(tree.tokens[0, i])), i)
    node, depth = 0, 0
    for tok in truth:
        nxt = children.get((node, tok))
        if nxt is None:
            break
        node, depth = nxt, depth + 1
    return depth


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr")
    ap.add_argument("--prompts", default="data/prompts/eval-mt-bench-humaneval.jsonl")
    ap.add_argument("--num-prompts", type=int, default=18)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--budgets", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype("auto")
    target = TargetRuntime.load(args.target, dtype=dtype)
    draft = load_draft(args.draft, target.model.config, dtype=dtype)
    rows = round_robin(read_prompt_rows(args.prompts), args.num_prompts)  # every category, as the bench
    prompts = [row_ids(target.tokenizer, r, chat=True) for r in rows]
    states = record_states(target, draft, prompts, args.max_tokens)
    k = draft.lilicorr.k
    flat = torch.zeros(1)
    builders: dict[str, Callable[[dict, int], TokenTree]] = {
        f"DDTree (top-{k} marginals)": lambda s, b: build_tree(s["logits"], s["root"], b, k),
        "lattice: head conditionals only": lambda s, b: build_lattice_tree(
            s["ids"], flat.expand_as(s["lp"]), s["scores"], s["root"], b
        ),
        "lattice: marginals × head (shipped)": lambda s, b: build_lattice_tree(
            s["ids"], s["lp"], s["scores"], s["root"], b
        ),
    }
    for s in states:  # the request's history at that step (it ends with the pending token)
        req = s["request"]
        s["history"] = req.prompt_ids + req.output_ids[: s["at"]]

    def grafted(build: Callable[[dict, int], TokenTree], k_min: int) -> Callable[[dict, int], TokenTree]:
        def run(s: dict, b: int) -> TokenTree:
            tree = build(s, b)
            chain = lookup(s["history"], len(s["truth"]), 4, k_min, pad=False)
            nodes = [
                (int(tree.tokens[0, i]), int(tree.parents[0, i]), int(tree.depth[0, i]), float(tree.score[0, i]))
                for i in range(1, tree.tokens.shape[1])
            ]
            return assemble([graft_chain(nodes, chain, b)], s["root"], b)

        return run

    shipped = builders["lattice: marginals × head (shipped)"]
    builders["+ prompt lookup (k ≥ 1)"] = grafted(shipped, 1)
    builders["+ prompt lookup (k ≥ 2)"] = grafted(shipped, 2)
    print(f"{args.draft}: {len(states)} drafting states from {len(prompts)} prompts; mean 1 + accepted (τ):")
    print("| budget | " + " | ".join(builders) + " |")
    print("|---|" + "---|" * len(builders))
    for b in args.budgets:
        cells = []
        for build in builders.values():
            tau = 1 + sum(accepted(build(s, b), s["truth"]) for s in states) / len(states)
            cells.append(f"{tau:.3f}")
        print(f"| {b} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
