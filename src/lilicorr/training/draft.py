"""Train DFlash drafters and LiLiCorr heads against a frozen target (``lilicorr train draft``).

Modes:
- ``dflash``: backbone only, same-position CE with slot decay over many random anchor blocks of
  each sequence in one forward;
- ``lilicorr``: backbone and head jointly from step 0 (DFlash loss + head loss); gradient reaches
  the backbone through the pass hidden states, the live candidate log-probs and the anchor;
- ``head``: the head alone on a frozen backbone (e.g. an existing DFlash drafter, ``--init``).

The target runs online (taps and final hidden state under ``no_grad``) or is read back from a
feature cache (``--features``, made once by ``lilicorr data features`` and shared by every drafter
trained on the same data). Optimiser state and master weights are fp32; forwards use bf16
autocast (``--fp32`` where bf16 matmuls are slow, e.g. CPUs without AMX/AVX512-bf16).
Under ``torchrun`` each process takes a slice of the global
batch (sampled identically everywhere) and losses are divided by global denominators, so N
processes reproduce one process at the same global batch.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist

from lilicorr.checkpoint import save_draft
from lilicorr.models.backbone import training_block_mask
from lilicorr.models.draft import DraftModel
from lilicorr.runtime.dtype import cpu_has_fast_bf16
from lilicorr.runtime.runtime import TargetRuntime, resolve_device
from lilicorr.training.batches import Batches, training_rows
from lilicorr.training.draft_config import DraftTrainConfig, build_model, lr_at, progress
from lilicorr.training.losses import (
    block_labels,
    block_metrics,
    sample_anchors,
)
from lilicorr.training.modes import get_mode
from lilicorr.training.objectives import BlockPass, Objective, vocab_logits
from lilicorr.training.run import TrainRun
from lilicorr.training.validation import validate


class DraftStep:
    """One forward over a batch of sequences: the backbone's blocks once, then the mode's objectives
    (``training/objectives.py``), as loss sums and the pieces metrics need."""

    def __init__(self, cfg: DraftTrainConfig, target: TargetRuntime, model: DraftModel, arm=None):
        self.cfg, self.target, self.model, self.arm = cfg, target, model, arm
        self.block = model.cfg.block_size
        self.objectives: list[Objective] = get_mode(cfg.mode).objectives(cfg.freeze_backbone, arm)
        self.frequent: torch.Tensor | None = None  # [N] token ids always in the training vocabulary
        self.negatives = torch.Generator()  # its own stream (anchors stay as without), seeded per step
        self.seed_negatives(0)

    def seed_negatives(self, step: int) -> None:
        """The sampled negatives of optimiser step ``step`` are a function of (seed, step): a resumed run draws
        exactly what the uncut run drew, with no generator state to checkpoint."""
        self.negatives.manual_seed(self.cfg.seed * 1_000_003 + 7919 + step)

    def training_vocab(self, labels: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Sorted token ids the logits are computed over while training, and their logit offsets: the
        ``train_vocab`` most frequent answer tokens plus every label of this batch (offset 0), so each CE is
        exact over that set, and with ``train_vocab_negatives`` R uniform samples of the other tokens (offset
        log(others / R): each stands for the others like it, so the normaliser estimates the full one).
        ``(None, None)``: the full vocabulary (validation always, so curves measure what the engine drafts)."""
        if self.frequent is None or not self.model.training:
            return None, None
        kept = torch.unique(torch.cat([self.frequent.to(labels.device), labels.flatten()]))  # sorted
        r = self.cfg.train_vocab_negatives
        if not r:
            return kept, None
        rest = torch.ones(self.model.cfg.vocab_size, dtype=torch.bool, device=kept.device)
        rest[kept] = False
        rest = rest.nonzero().squeeze(1)  # [V − V'] the tokens outside the kept set
        r = min(r, len(rest))
        neg = rest[torch.randperm(len(rest), generator=self.negatives)[:r].to(rest.device)]
        vocab, order = torch.sort(torch.cat([kept, neg]))
        offset = torch.zeros(len(vocab), device=kept.device)
        offset[len(kept) :] = math.log(len(rest) / r)
        return vocab, offset[order]

    def block_pass(self, tokens: torch.Tensor, anchors: torch.Tensor, valid: torch.Tensor, feats=None) -> BlockPass:
        """The drafted blocks ``[anchor, MASK × (B−1)]`` at every anchor, in one non-causal pass."""
        cfg, model, target, blk = self.cfg, self.model, self.target, self.block
        b, t = tokens.shape
        n = anchors.shape[1]
        dev = tokens.device
        if feats is None:
            from lilicorr.features.cache import target_features

            taps, final = target_features(target.model, tokens, model.cfg.target_layer_ids)
        else:
            taps, final = (f.to(dev, non_blocking=True) for f in feats)
        taps = taps.float() if not cfg.bf16 else taps
        with (
            torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.bf16),
            torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.backbone_frozen),
        ):
            ctx = model.fuse(taps)  # [b, t, H]
            pos = torch.arange(t, device=dev).expand(b, t)
            kv = model.context_kv(ctx, pos)
            block_ids = torch.full((b, n, blk), model.cfg.mask_token_id, device=dev)
            block_ids[:, :, 0] = torch.gather(tokens, 1, anchors)
            emb = target.embed_tokens(block_ids.flatten(1))  # [b, n·B, H]
            bpos = (anchors[..., None] + torch.arange(blk, device=dev)).flatten(1)
            hidden = model(emb, bpos, kv, training_block_mask(anchors, t, blk), blk).view(b, n, blk, -1)
            ph = hidden[:, :, 1:]  # [b, n, S, H] pass hidden (after norm)
            labels = block_labels(tokens, anchors, blk).flatten(0, 1)  # [M, S] token ids
            vocab, offset = self.training_vocab(labels)
            logits = vocab_logits(target, ph, vocab)  # [b, n, S, V], or [b, n, S, V'] over the training vocabulary
            if vocab is not None:
                labels = torch.searchsorted(vocab, labels)  # ids -> positions in ``vocab``
        return BlockPass(
            ph, logits.flatten(0, 1), ctx, final, labels, valid.flatten(), tokens, anchors, blk, vocab, offset
        )

    def __call__(
        self,
        tokens: torch.Tensor,
        loss_mask: torch.Tensor,
        anchors: torch.Tensor,
        valid: torch.Tensor,
        want_metrics: bool = False,
        feats: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """``feats``: cached (taps ``[b, t, F·H]``, final hidden ``[b, t, H]``); None runs the target."""
        bp = self.block_pass(tokens, anchors, valid, feats)
        res: dict[str, torch.Tensor] = {}
        for objective in self.objectives:
            res.update(objective(self, bp, want_metrics))
        ids, walk_ids = res.pop("lattice_ids", None), res.pop("walk_ids", None)
        if want_metrics:
            # the target's own next-token logits at each slot (teacher forced): T = 1 acceptance of the draft
            metrics = block_metrics(bp.logits, bp.labels, bp.valid, ids, walk_ids, bp.target_logits(self.target))
            res.update({f"m_{k}": v for k, v in metrics.items()})
        return res


def frequent_tokens(tokens: torch.Tensor, mask: torch.Tensor, n: int, vocab_size: int) -> torch.Tensor:
    """The ``n`` most frequent supervised tokens of the training rows, as token ids ``[n]``."""
    counts = torch.bincount(tokens[mask].flatten(), minlength=vocab_size)
    return torch.topk(counts, min(n, vocab_size)).indices.sort().values


def _param_groups(trainable: torch.nn.ModuleDict) -> list[list[torch.nn.Parameter]]:
    """Backbone parameters, then head / arm parameters (the two clip groups of ``clip_per_module``)."""
    head, backbone = [], []
    for name, p in trainable.named_parameters():
        (head if name.startswith(("draft.lilicorr.", "arm.")) else backbone).append(p)
    return [backbone, head]


def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        x = x.detach().clone()
        dist.all_reduce(x)
    return x


def combine_losses(res: dict[str, torch.Tensor], cfg: DraftTrainConfig) -> torch.Tensor:
    """Loss of this process's slice, normalised by the global denominators."""
    loss = torch.zeros((), device=next(iter(res.values())).device)
    if "dflash_sum" in res:
        loss = loss + res["dflash_sum"] / _all_reduce(res["dflash_den"]).clamp_min(1e-6)
    if "head_sum" in res:
        loss = loss + res["head_sum"] / _all_reduce(res["head_den"]).clamp_min(1.0)
    return loss


def train_draft(cfg: DraftTrainConfig, resume: bool = False) -> dict:
    cfg.validate()
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    device = resolve_device(cfg.device)
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // world))
    if cfg.bf16 and device == "cpu" and not cpu_has_fast_bf16() and rank == 0:  # said once, not silently slow
        print("note: bf16 autocast on a CPU without AMX-bf16 or AVX512-BF16 emulates every bf16 matmul (≈ 5× slower "
              "than fp32 on a 2-core AVX2 EPYC): pass --fp32 here", flush=True)  # fmt: skip
    if cfg.batch_size % world:
        raise ValueError(f"batch_size {cfg.batch_size} must be divisible by the number of processes {world}")
    run_dir = Path(cfg.run_dir or f"runs/{Path(cfg.out).name}")
    run_dir.mkdir(parents=True, exist_ok=True)
    target = TargetRuntime.load(cfg.target)
    for p in target.model.parameters():
        p.requires_grad_(False)
    model = build_model(cfg, target)
    mode = get_mode(cfg.mode)
    target.model.to(device)
    model.to(device)
    batches = Batches(cfg, model.cfg.target_layer_ids, device)
    n_val = min(cfg.val_sequences, len(batches) // 5)
    val_idx = torch.arange(n_val)
    # the first n_val rows (prompts) are held out, with or without --val-data; --train-rows picks among the rest
    train_rows = training_rows(batches.sampled, n_val, cfg.train_rows)  # [rows that train]: indices into batches
    train_mask = batches.mask[train_rows]
    val_batches = batches
    if cfg.val_data:  # e.g. fixed answers trained, validated on what the target itself says to the same prompts
        val_cfg = replace(cfg, data=cfg.val_data, features=cfg.val_features, max_sequences=n_val)
        val_batches = Batches(val_cfg, model.cfg.target_layer_ids, device)
    if cfg.backbone_frozen:
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("lilicorr.") and mode.head)
    arm = None
    if mode.arm is not None:
        from lilicorr.models.arms import build_arm

        torch.manual_seed(cfg.seed + 2)
        arm = build_arm(mode.arm, model.cfg.vocab_size, model.cfg.hidden_size, cfg.arm_rank, cfg.candidate_topk)
        arm.to(device)
    trainable = torch.nn.ModuleDict({"draft": model, **({"arm": arm} if arm is not None else {})})
    params = [p for p in trainable.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    config = asdict(cfg)  # checked on resume and logged
    run = TrainRun(
        run_dir,
        trainable,
        opt,
        gen,
        cfg.steps,
        f"train {cfg.mode}",
        cfg.checkpoint_minutes,
        resume,
        is_main=rank == 0,
        config=config,
    )
    run.event(
        {"event": "start", "config": config, "world": world, "params": sum(p.numel() for p in model.parameters())}
    )
    step_fn = DraftStep(cfg, target, model, arm)
    if cfg.train_vocab:
        step_fn.frequent = frequent_tokens(
            batches.tokens[train_rows], train_mask, cfg.train_vocab, model.cfg.vocab_size
        )
    clip_groups = [g for g in ([p for p in grp if p.requires_grad] for grp in _param_groups(trainable)) if g]
    per_rank = cfg.batch_size // world
    trainable.train()
    while not run.done and not (cfg.stop_at and run.step >= cfg.stop_at):  # a campaign's segment ends
        for g in opt.param_groups:
            g["lr"] = lr_at(run.step, cfg, run.state["elapsed_s"])
        idx = torch.randint(len(train_rows), (cfg.batch_size,), generator=gen)  # global batch, same on every rank
        anchors, valid = sample_anchors(train_mask[idx], cfg.anchors, step_fn.block, gen)
        sl = slice(rank * per_rank, (rank + 1) * per_rank)
        tk, mk, feats = batches.get(train_rows[idx[sl]], int(anchors.max()) + step_fn.block)  # up to the last block
        step_fn.seed_negatives(run.step)
        res = step_fn(tk, mk, anchors[sl].to(device), valid[sl].to(device), feats=feats)
        loss = combine_losses(res, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            for p in params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
        if cfg.clip_per_module:
            norms = [torch.nn.utils.clip_grad_norm_(g, cfg.grad_clip) for g in clip_groups]
            gnorm = torch.stack(norms).norm()  # logged as the global norm before clipping
        else:
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        global_loss = float(_all_reduce(loss.detach()))
        # supervised positions so far (every valid block's slots, global batch): the x-axis of learning curves
        run.state["positions"] = run.state.get("positions", 0) + int(valid.sum()) * (step_fn.block - 1)
        spent = torch.tensor(float(progress(run.step + 1, time.time() - run.t0, cfg) >= 1.0))
        if float(_all_reduce(spent)) > 0:  # every rank stops at the same step
            run.total_steps = run.step + 1  # the budget is spent: this step is the last (and is validated)
        run.finish_step(
            {
                "loss": round(global_loss, 5),
                "gnorm": round(float(gnorm), 4),
                "lr": opt.param_groups[0]["lr"],
                "positions": run.state["positions"],
            },  # fmt: skip
            validate=(lambda: validate(step_fn, val_batches, val_idx, cfg)) if n_val else None,
            val_every=cfg.val_every,
        )
    run.close()
    state = run.state
    summary = {
        "mode": cfg.mode,
        "steps": state["step"],
        "wall_time_s": round(state["elapsed_s"], 1),
        "final_val": run.last_val,
        "world": world,
        "threads": torch.get_num_threads(),
        "segments": state["segments"],  # [{from_step, threads}] per start or resume
        "config": asdict(cfg),
    }
    if rank == 0:
        model.cpu()
        save_draft(model, cfg.out, extra_files={"training_summary.json": json.dumps(summary, indent=2) + "\n"})
        if arm is not None:
            from lilicorr.models.arms import save_arm

            save_arm(
                arm.cpu(),
                Path(cfg.out),
                {
                    "vocab": model.cfg.vocab_size,
                    "hidden": model.cfg.hidden_size,
                    "rank": cfg.arm_rank,
                    "k": cfg.candidate_topk,
                },
            )
        run.event({"event": "done", **{k: v for k, v in summary.items() if k != "config"}})
    if world > 1:
        dist.barrier()
    return summary
