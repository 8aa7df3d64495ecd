"""Drafter training throughput: supervised positions per second of whole optimiser steps (forward,
backward, AdamW) for several recipes, timed side by side in one process on the same cached features.

    python benchmarks/train_throughput.py --data data/regen-smollm2/sharegpt-first.safetensors \
        --variant today:threads=1,anchors=16 --variant dense:anchors=64 --variant vocab8k:anchors=64,train_vocab=8192

A variant is ``name:field=value,...`` over ``DraftTrainConfig`` fields (threads, anchors, train_vocab,
bf16, num_layers, mode, batch_size, ...). Variants run in turn, round after round (``--rounds``), so
background load falls on all of them alike; the best round of each is reported, and its ratio to the
first variant. Supervised positions = valid blocks × (block − 1), the x-axis of the learning curves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lilicorr.datagen.regenerate import load_regenerated  # noqa: E402
from lilicorr.features.cache import FeatureStore, extract_features  # noqa: E402
from lilicorr.runtime.runtime import TargetRuntime  # noqa: E402
from lilicorr.training.draft import DraftStep, combine_losses, frequent_tokens  # noqa: E402
from lilicorr.training.draft_config import DraftTrainConfig, build_model  # noqa: E402
from lilicorr.training.losses import sample_anchors  # noqa: E402

FIELDS = {f.name: f for f in fields(DraftTrainConfig)}


def parse_variant(text: str, base: DraftTrainConfig) -> tuple[str, DraftTrainConfig]:
    name, _, body = text.partition(":")
    changes = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key not in FIELDS:
            raise SystemExit(f"--variant {text!r}: {key!r} is not a DraftTrainConfig field")
        kind = type(getattr(base, key))
        changes[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return name, replace(base, **changes)


class Runner:
    """One variant's model, optimiser and step, ready to time."""

    def __init__(self, cfg: DraftTrainConfig, target: TargetRuntime, tokens, mask, store: FeatureStore):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.model = build_model(cfg, target)
        self.step = DraftStep(cfg, target, self.model)
        if cfg.train_vocab:
            self.step.frequent = frequent_tokens(tokens, mask, cfg.train_vocab, self.model.cfg.vocab_size)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr)
        self.tokens, self.mask, self.store = tokens, mask, store
        self.gen = torch.Generator().manual_seed(cfg.seed)

    def run(self, steps: int) -> tuple[float, int]:
        """(seconds, supervised positions) of ``steps`` optimiser steps."""
        torch.set_num_threads(self.cfg.threads or torch.get_num_threads())
        self.model.train()
        positions, t0 = 0, time.perf_counter()
        for _ in range(steps):
            idx = torch.randint(len(self.tokens), (self.cfg.batch_size,), generator=self.gen)
            anchors, valid = sample_anchors(self.mask[idx], self.cfg.anchors, self.step.block, self.gen)
            length = int(anchors.max()) + self.step.block  # as `train draft` reads a batch: up to its last block
            feats = self.store.get(idx, length)
            res = self.step(self.tokens[idx, :length], self.mask[idx, :length], anchors, valid, feats=feats)
            loss = combine_losses(res, self.cfg)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
            self.opt.step()
            positions += int(valid.sum()) * (self.step.block - 1)
        return time.perf_counter() - t0, positions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--data", required=True)
    ap.add_argument("--features", help="an existing cache of --data (default: extract --rows rows to a temp dir)")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--page", help="write a markdown results page here")
    args = ap.parse_args()
    threads = torch.get_num_threads()
    data = load_regenerated(args.data)
    target = TargetRuntime.load(args.target)
    for p in target.model.parameters():  # frozen, as `train draft` has it
        p.requires_grad_(False)
    base = DraftTrainConfig(target=args.target, data=args.data, out="", mode="dflash", num_layers=1, threads=threads)
    variants = [parse_variant(v, base) for v in args.variant]
    with tempfile.TemporaryDirectory() as tmp:
        if args.features:
            store = FeatureStore(args.features)
            n = store.meta["sequences"]
        else:
            n = args.rows
            small = Path(tmp) / "data.safetensors"
            from safetensors.torch import save_file

            rows = {k: data[k][:n].contiguous() for k in ("tokens", "loss_mask", "sampled")}
            save_file(rows, str(small))
            layers = build_model(variants[0][1], target).cfg.target_layer_ids
            extract_features(args.target, str(small), str(Path(tmp) / "feats"), layers)
            store = FeatureStore(Path(tmp) / "feats")
        length = store.length
        tokens, mask = data["tokens"][:n, :length].long(), data["loss_mask"][:n, :length].bool()
        runners = [(name, Runner(cfg, target, tokens, mask, store)) for name, cfg in variants]
        for _, r in runners:
            r.run(1)  # warm-up
        best: dict[str, float] = {}
        rounds: list[dict[str, float]] = []
        for rnd in range(args.rounds):
            rounds.append({})
            for name, r in runners:
                secs, pos = r.run(args.steps)
                rounds[-1][name] = pos / secs
                best[name] = max(best.get(name, 0.0), pos / secs)
                print(f"round {rnd}: {name:>12}: {pos / secs:8.1f} supervised positions/s ({pos} in {secs:.1f} s)")
    first = best[variants[0][0]]
    print(f"\nrows {n} × {length} columns; batch {base.batch_size}; machine threads {threads}")
    for name, cfg in variants:
        print(f"{name:>12}: {best[name]:8.1f} positions/s  ×{best[name] / first:.2f}   "
              f"(threads {cfg.threads}, anchors {cfg.anchors}, train_vocab {cfg.train_vocab}, bf16 {cfg.bf16}, "
              f"layers {cfg.num_layers}, mode {cfg.mode})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"best_positions_per_s": best, "variants": args.variant}, indent=1))
    if args.page:
        write_page(Path(args.page), variants, best, rounds, n, length, base.batch_size)
    return 0


def write_page(path: Path, variants, best: dict, rounds: list[dict], rows: int, length: int, batch: int) -> None:
    """The generated part of the results page: command, machine, and the side-by-side table."""
    import subprocess

    env = subprocess.run([sys.executable, "-m", "lilicorr.cli.main", "env"], capture_output=True, text=True).stdout
    first = best[variants[0][0]]
    lines = [
        "# Drafter training throughput (generated by `benchmarks/train_throughput.py`)",
        "",
        "```",
        "python " + " ".join(sys.argv),
        "```",
        "",
        f"Machine (`lilicorr env`): `{json.dumps(json.loads(env)) if env.strip() else '?'}`",
        "",
        f"{rows} rows × {length} columns of cached bf16 features; global batch {batch}; whole optimiser steps "
        "(forward, backward, clip, AdamW), best round of each variant; "
        "supervised positions = valid blocks × (block − 1).",
        "",
        "| variant | threads | anchors | train vocab | bf16 | layers | mode | positions/s | × first | every round |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, cfg in variants:
        each = ", ".join(f"{r[name]:.0f}" for r in rounds)
        lines.append(
            f"| {name} | {cfg.threads} | {cfg.anchors} | {cfg.train_vocab or 'all'} | {cfg.bf16} | {cfg.num_layers} "
            f"| {cfg.mode} | {best[name]:.0f} | {best[name] / first:.2f} | {each} |"
        )
    notes = path.with_name(path.stem + "-notes.md")  # the results pages' convention: PAGE-notes.md beside PAGE.md
    tail = "\n" + notes.read_text() if notes.exists() else ""
    path.write_text("\n".join(lines) + "\n" + tail)


if __name__ == "__main__":
    sys.exit(main())
