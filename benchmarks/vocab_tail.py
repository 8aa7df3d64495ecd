"""How much of a drafter's probability lies outside its training vocabulary (``--train-vocab N``: the N most
frequent answer tokens plus each batch's labels), and what that tail does at inference, where the engine reads
the full vocabulary: the shift of the log-prob normaliser (LiLiCorr's log-prob features), how often the top-K
lattice or the argmax differs, how concentrated the tail is, and the T = 1 acceptance Σ min(p, q) per slot of
the drafter's softmax against the target's teacher-forced distribution, as drafted and with the tail removed.

Why: a training vocabulary never pushes the other tokens down (docs/guide/training.md, "Throughput options");
``--train-vocab-negatives`` is the fix this measures the need for.

    python benchmarks/vocab_tail.py --draft models/smollm2-dflash \\
        --data data/regen-smollm2/sharegpt-first-greedy.safetensors --features data/cache/features-smollm2-first-greedy
"""

from __future__ import annotations

import argparse

import torch

from lilicorr.checkpoint import load_draft
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.batches import Batches
from lilicorr.training.draft import DraftStep, frequent_tokens
from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.losses import sample_anchors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draft", nargs="+", default=["models/smollm2-dflash"])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--data", required=True)
    ap.add_argument("--features", default=None)
    ap.add_argument("--rows", type=int, default=0, help="rows of --data (0: all); the first 64 are skipped")
    ap.add_argument("--train-vocab", type=int, default=8192)
    ap.add_argument("--batches", type=int, default=4, help="batches of 8 rows × 16 blocks")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rt = TargetRuntime.load(args.target)
    for folder in args.draft:
        model = load_draft(folder, rt.model.config)
        cfg = DraftTrainConfig(target=args.target, data=args.data, out="", mode="dflash", features=args.features,
                               max_sequences=args.rows, batch_size=8)  # fmt: skip
        batches = Batches(cfg, model.cfg.target_layer_ids, "cpu")
        frequent = frequent_tokens(batches.tokens[64:], batches.mask[64:], args.train_vocab, model.cfg.vocab_size)
        step = DraftStep(cfg, rt, model)
        model.eval()  # full vocabulary, as the engine drafts
        gen = torch.Generator().manual_seed(0)
        shift, lattice, argmax, ov_full, ov_cut, t_out = [], [], [], [], [], []
        tail = torch.zeros(model.cfg.vocab_size)
        with torch.no_grad():
            for _ in range(args.batches):
                idx = torch.randint(64, len(batches), (8,), generator=gen)
                tk, mk, feats = batches.get(idx)
                anchors, valid = sample_anchors(mk, 16, model.cfg.block_size, gen)
                bp = step.block_pass(tk, anchors, valid, feats)
                z = bp.logits.float()[bp.valid]  # [m, S, V]
                kept = torch.zeros(model.cfg.vocab_size, dtype=torch.bool)
                kept[torch.unique(torch.cat([frequent, bp.labels.flatten()]))] = True
                z_kept = z.masked_fill(~kept, -torch.inf)  # what training's softmax sees
                shift.append(torch.logsumexp(z, -1) - torch.logsumexp(z_kept, -1))
                top = z.topk(args.topk, -1).indices
                lattice.append((top != z_kept.topk(args.topk, -1).indices).any(-1).float())
                argmax.append((~kept[z.argmax(-1)]).float())
                q = z.softmax(-1)
                tail += (q * (~kept)).sum((0, 1))
                p = bp.target_logits(rt).float()[bp.valid].softmax(-1)  # the target's distribution at each slot
                cut = q * kept
                cut = cut / cut.sum(-1, keepdim=True)
                ov_full.append(torch.minimum(p, q).sum(-1))
                ov_cut.append(torch.minimum(p, cut).sum(-1))
                t_out.append((p * ~kept).sum(-1))
        s = torch.cat(shift).flatten()
        top = tail.topk(2000).values.cumsum(0) / tail.sum()
        print(f"{folder} (training vocabulary {args.train_vocab} + labels, {s.numel()} slots):")
        outside, target_outside = float((1 - torch.exp(-s)).mean()), float(torch.cat(t_out).mean())
        print(f"  mass outside: drafter {outside:.3f}, target {target_outside:.3f};"
              f" normaliser shift mean {float(s.mean()):.3f} nats, median {float(s.median()):.3f},"
              f" p90 {float(s.quantile(0.9)):.3f}")  # fmt: skip
        print(f"  top-{args.topk} lattice differs on {float(torch.cat(lattice).mean()):.3f} of slots, argmax outside on"
              f" {float(torch.cat(argmax).mean()):.3f}; the tail's top 100 / 500 / 2000 tokens hold"
              f" {float(top[99]):.2f} / {float(top[499]):.2f} / {float(top[1999]):.2f} of it")  # fmt: skip
        print("  T=1 acceptance per slot Σ min(p, q):", [round(float(x), 3) for x in torch.cat(ov_full).mean(0)])
        print("    with the tail removed:           ", [round(float(x), 3) for x in torch.cat(ov_cut).mean(0)])


if __name__ == "__main__":
    main()
