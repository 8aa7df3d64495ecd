"""Online target features or a cache? One training batch's three costs, measured side by side in one process:

- the frozen target's forward with hidden states (what online features cost every step of every epoch);
- reading the same taps back from a bf16 feature cache (memory-mapped shards, `lilicorr data features`);
- the drafter's own step (forward + backward of the DFlash loss from those features).

    python benchmarks/feature_cost.py --data data/regen-smollm2/sharegpt-first.safetensors --rows 64

A cache pays when its one-off extraction (≈ the first figure, once per row) is repaid by the epochs
that reuse it; it costs disk (printed) and nothing at training time beyond the read.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lilicorr.datagen.regenerate import load_regenerated  # noqa: E402
from lilicorr.features.cache import (  # noqa: E402
    FeatureStore,
    extract_features,
    supervised_length,
    target_features,
)
from lilicorr.models.draft import default_layer_ids_for  # noqa: E402
from lilicorr.runtime.runtime import TargetRuntime  # noqa: E402
from lilicorr.training.draft import DraftStep, combine_losses  # noqa: E402
from lilicorr.training.draft_config import DraftTrainConfig, build_model  # noqa: E402
from lilicorr.training.losses import sample_anchors  # noqa: E402


def _time(fn, repeat: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--data", required=True)
    ap.add_argument("--rows", type=int, default=64, help="rows extracted into the temporary cache")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--anchors", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_regenerated(args.data)
    length = supervised_length(data["loss_mask"][: args.rows])  # what the trainer and the cache keep
    tokens, mask = data["tokens"][: args.rows, :length].long(), data["loss_mask"][: args.rows, :length]
    target = TargetRuntime.load(args.target)
    layers = default_layer_ids_for(target.num_layers)
    batch = tokens[: args.batch_size]
    positions = batch.numel()
    online = _time(lambda: target_features(target.model, batch, layers), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "data.safetensors"
        from safetensors.torch import save_file

        rows = {"tokens": tokens.int(), "loss_mask": mask, "sampled": data["sampled"][: args.rows]}
        save_file({k: v.contiguous() for k, v in rows.items()}, str(small))
        meta = extract_features(args.target, str(small), str(Path(tmp) / "feats"), layers, batch_size=4)
        store = FeatureStore(Path(tmp) / "feats")
        idx = torch.arange(args.batch_size)
        cached = _time(lambda: store.get(idx), args.repeat)
        cfg = DraftTrainConfig(target=args.target, data=str(small), out=tmp, mode="dflash", num_layers=1,
                               anchors=args.anchors, bf16=False)  # fmt: skip
        model = build_model(cfg, target)
        step = DraftStep(cfg, target, model)
        feats = store.get(idx)
        gen = torch.Generator().manual_seed(0)
        anchors, valid = sample_anchors(mask[: args.batch_size], args.anchors, step.block, gen)

        def drafter_step() -> None:
            model.zero_grad(set_to_none=True)
            combine_losses(step(batch, mask[: args.batch_size], anchors, valid, feats=feats), cfg).backward()

        drafter = _time(drafter_step, args.repeat)
        supervised = int(valid.sum()) * (step.block - 1)
    print(f"batch {args.batch_size} × {batch.shape[1]} positions ({positions}); {supervised} supervised positions")
    print(f"target forward with taps, fp32 (the trainer's online path): {online * 1000:.0f} ms")
    print(f"read from the bf16 cache:                                  {cached * 1000:.0f} ms")
    print(f"drafter step, fp32 (forward + backward):                   {drafter * 1000:.0f} ms")
    print(f"cache: {meta['disk_bytes'] / args.rows / batch.shape[1]:.0f} bytes per stored position, "
          f"extraction (target in bf16, `data features`' default) {meta['positions_per_s']} positions/s")  # fmt: skip
    print(f"per step, online / cached: {(online + drafter) / (cached + drafter):.2f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
