"""Pre-train a small Qwen3 target LM on the offline corpus (``lilicorr train target``).

The shipped targets are ordinary Hugging Face ``Qwen3ForCausalLM`` folders, so everything
downstream (drafters, vLLM, llama.cpp) treats them exactly like a real Qwen3 checkpoint.
Training is resumable: a checkpoint (weights, optimiser, RNG, counters) is written atomically every
few minutes, and ``--resume`` continues bit-for-bit from the last one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lilicorr.data.atomic import atomic_write_dir
from lilicorr.data.corpus import CATEGORIES, load_manifest
from lilicorr.data.tokens import fixed_windows, sample_windows, token_array
from lilicorr.options import option
from lilicorr.training.run import TrainRun

# Width vs depth for a CPU budget: shallow-and-wide models run far more tokens/s on 2 cores than
# deep-and-narrow ones of equal size, and at this scale tokens seen dominate quality.
_SHAPE = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim")  # fmt: skip
PRESETS: dict[str, dict] = {
    "tiny-s": dict(zip(_SHAPE, (256, 768, 4, 4, 2, 64), strict=True)),
    "tiny-m": dict(zip(_SHAPE, (384, 1024, 5, 6, 2, 64), strict=True)),
}


@dataclass
class TargetTrainConfig:
    """Every option of ``lilicorr train target`` (the CLI options are generated from these fields)."""

    preset: str = option(help="model size", choices=tuple(PRESETS))
    tokenizer: str = option(help="tokenizer folder (`lilicorr train tokenizer`)")
    out: str = option(help="target folder to write")
    corpus: str = option("data/corpus", "corpus folder")
    run_dir: str = option("", "logs and resumable checkpoint (default: runs/<out name>)")
    steps: int = option(3000, "optimiser steps")
    batch_size: int = option(16, "sequences per step")
    seq_len: int = option(256, "tokens per sequence")
    lr: float = option(2e-3, "peak learning rate")
    min_lr_ratio: float = option(0.1, "final learning rate over the peak (cosine)")
    warmup: int = option(100, "linear warm-up steps")
    weight_decay: float = option(0.1, "AdamW weight decay")
    grad_clip: float = option(1.0, "gradient-norm clip")
    code_fraction: float = option(0.5, "share of code windows in a batch")
    seed: int = option(0, "seed of initialisation and batches")
    val_every: int = option(250, "validate every N steps")
    val_windows: int = option(48, "validation windows")
    checkpoint_minutes: float = option(4.0, "resumable checkpoint every N minutes")
    threads: int = option(2, "torch threads")
    bf16: bool = option(True, "no bf16 autocast", flag="--fp32", invert=True)
    max_position_embeddings: int = option(8192, "the model's context length")

    def __post_init__(self) -> None:
        self.run_dir = self.run_dir or f"runs/{Path(self.out).name}"


def build_model(preset: str, vocab_size: int, special: dict[str, int], max_pos: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: expected one of {sorted(PRESETS)}")
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        max_position_embeddings=max_pos,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=special["<|endoftext|>"],
        eos_token_id=special["<|endoftext|>"],
        pad_token_id=special["<|endoftext|>"],
        attention_bias=False,
        use_cache=True,
        **PRESETS[preset],
    )
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg)


def lr_at(step: int, cfg: TargetTrainConfig) -> float:
    """Linear warm-up then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate_lm(model, windows: torch.Tensor, bf16: bool, batch: int = 16) -> dict[str, float]:
    """Mean next-token loss and top-1 accuracy over fixed windows ``[n, len+1]``."""
    model.eval()
    tot_loss, tot_correct, tot = 0.0, 0, 0
    for i in range(0, len(windows), batch):
        w = windows[i : i + batch]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=w[:, :-1]).logits.float()  # [b, len, vocab]
        labels = w[:, 1:]
        tot_loss += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum"
        ).item()
        tot_correct += (logits.argmax(-1) == labels).sum().item()
        tot += labels.numel()
    model.train()
    return {"loss": tot_loss / tot, "top1": tot_correct / tot}


def train_target(cfg: TargetTrainConfig, resume: bool = False) -> dict:
    """Run (or resume) one target pre-training; returns the training summary."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    torch.set_num_threads(cfg.threads)
    run_dir, out = Path(cfg.run_dir), Path(cfg.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(Path(cfg.tokenizer) / "tokenizer.json"))
    special = {t: tok.token_to_id(t) for t in ("<|endoftext|>", "<|mask|>")}
    train = {c: token_array(Path(cfg.corpus), Path(cfg.tokenizer), "train", c) for c in CATEGORIES}
    val = {
        c: fixed_windows(
            token_array(Path(cfg.corpus), Path(cfg.tokenizer), "validation", c),
            cfg.val_windows,
            cfg.seq_len + 1,
        )
        for c in CATEGORIES
    }
    model = build_model(cfg.preset, tok.get_vocab_size(), special, cfg.max_position_embeddings)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    config = asdict(cfg)  # checked on resume and logged
    run = TrainRun(
        run_dir,
        model,
        opt,
        gen,
        cfg.steps,
        f"train {cfg.preset}",
        cfg.checkpoint_minutes,
        resume,
        log_every=20,
        extra_state={"tokens": 0},
        config=config,
    )
    n_params = sum(p.numel() for p in model.parameters())
    run.event({"event": "start", "config": config, "params": n_params})
    model.train()
    n_code = round(cfg.batch_size * cfg.code_fraction)
    while not run.done:
        step = run.step
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        batch = torch.cat(
            [
                sample_windows(train["code"], n_code, cfg.seq_len + 1, gen),
                sample_windows(train["prose"], cfg.batch_size - n_code, cfg.seq_len + 1, gen),
            ]
        )  # [batch, seq+1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(input_ids=batch[:, :-1]).logits  # [batch, seq, vocab]
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        run.state["tokens"] += batch[:, 1:].numel()
        run.finish_step(
            {"loss": loss.item(), "gnorm": float(gnorm), "lr": lr_at(step, cfg), "tokens": run.state["tokens"]},
            validate=lambda: {c: evaluate_lm(model, val[c], cfg.bf16) for c in CATEGORIES},
            val_every=cfg.val_every,
        )
    run.close()
    state = run.state
    summary = {
        "preset": cfg.preset,
        "params": n_params,
        "steps": state["step"],
        "tokens_seen": state["tokens"],
        "wall_time_s": round(state["elapsed_s"], 1),
        "final_val": state["history"][-1]["val"],
        "corpus_manifest_hash": load_manifest(Path(cfg.corpus))["hash"],
        "config": asdict(cfg),
    }
    # Export: bf16 weights + tokenizer, via save_pretrained, into a temp dir renamed into place.
    model.config.torch_dtype = "bfloat16"
    model_bf16 = model.to(torch.bfloat16)
    hf_tok = PreTrainedTokenizerFast.from_pretrained(cfg.tokenizer)

    def export(tmp: Path) -> None:
        model_bf16.save_pretrained(tmp)
        hf_tok.save_pretrained(tmp)
        (tmp / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if (out / "MODEL_CARD.md").exists():
            (tmp / "MODEL_CARD.md").write_bytes((out / "MODEL_CARD.md").read_bytes())

    atomic_write_dir(out, export)
    run.event({"event": "done", **summary})
    return summary
