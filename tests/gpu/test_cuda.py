"""CUDA checks (mark ``gpu``; skipped without CUDA): what users run on GPUs, on the committed tiny-s target and its
drafters so that a lent GPU machine needs nothing but the checkout. Run them as one prepared script:
``python -m pytest -o addopts="" -q -m gpu tests/gpu`` (docs/guide/campaign.md, "GPU checks").

- bf16 CUDA training steps of DFlash and LiLiCorr drafters: finite losses that fall on a fixed batch;
- ``torchrun`` with 2 processes (NCCL) equals 1 process at the same global batch (needs 2 GPUs: NCCL refuses two
  ranks on one device, so a one-GPU machine skips it by name);
- greedy identity of the engine on CUDA (fp32) with the shipped tiny-s drafters.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the gpu tests run on a lent GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "tiny-s"
PROMPTS = ["def parse_args(argv):\n    parser = argparse.ArgumentParser(", "The module provides functions for"]


@pytest.fixture(scope="module")
def target():
    from lilicorr.runtime.runtime import TargetRuntime

    return TargetRuntime.load(TARGET, device="cuda")


@pytest.fixture(scope="module")
def regen(target, tmp_path_factory) -> Path:
    """Sequences continued greedily by tiny-s itself on CUDA (what `lilicorr data regenerate` makes)."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(4, 2000, (32, 8), generator=g).cuda()
    with torch.no_grad():
        out = target.model.generate(prompts, max_new_tokens=24, min_new_tokens=24, do_sample=False)
    tokens = out.to(torch.int32).cpu()
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 8:] = True
    path = tmp_path_factory.mktemp("regen") / "data.safetensors"
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.zeros(len(tokens), dtype=torch.bool)}, str(path))
    return path


def _cfg(regen: Path, out: Path, mode: str, **kw):
    from lilicorr.training.draft_config import DraftTrainConfig

    return DraftTrainConfig(
        target=str(TARGET), data=str(regen), out=str(out), mode=mode, run_dir=f"{out}-run", block_size=4,
        candidate_topk=4, head_layers=1, head_heads=2, factor_dim=16, num_layers=1, batch_size=8, anchors=4,
        lr=3e-3, val_sequences=8, val_every=1000, checkpoint_minutes=100, device="cuda", **{"steps": 20, **kw},
    )  # fmt: skip


def _losses(run_dir: Path) -> list[float]:
    import json

    lines = (run_dir / "train.log").read_text().splitlines()
    return [json.loads(x)["loss"] for x in lines if '"loss"' in x]


@pytest.mark.parametrize("mode", ["dflash", "lilicorr"])
def test_cuda_bf16_training_steps(regen, tmp_path, mode):
    from lilicorr.checkpoint import load_draft
    from lilicorr.training.draft import train_draft

    cfg = _cfg(regen, tmp_path / mode, mode, bf16=True, steps=60)
    train_draft(cfg)
    losses = _losses(Path(cfg.run_dir))
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert sum(losses[-2:]) / 2 < losses[0], losses  # logged every 10 steps: 6 points
    load_draft(cfg.out)  # a valid checkpoint, written from the CUDA run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, cfg) -> None:
    from lilicorr.training.draft import train_draft

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    train_draft(cfg)
    torch.distributed.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs 2 GPUs for 2 ranks (one per device)")
def test_two_nccl_processes_equal_one_at_the_same_global_batch(regen, tmp_path):
    import torch.multiprocessing as mp

    from lilicorr.training.draft import train_draft

    one = _cfg(regen, tmp_path / "one", "lilicorr", steps=4, bf16=False)
    train_draft(one)
    two = replace(one, out=str(tmp_path / "two"), run_dir=str(tmp_path / "two-run"))
    mp.spawn(_worker, args=(2, _free_port(), two), nprocs=2, join=True)
    a = torch.load(tmp_path / "one-run" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "two-run" / "checkpoint.pt", weights_only=False)["model"]
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-4, rtol=1e-4, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("draft_name", ["tiny-s-dflash", "tiny-s-lilicorr"])
def test_engine_greedy_identity_on_cuda(target, draft_name):
    from lilicorr.checkpoint import load_draft
    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams

    draft = load_draft(ROOT / "models" / draft_name, target.model.config).to("cuda")

    def reqs():
        ids = [target.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
        return [Request(i, SamplingParams(max_tokens=32), eos_ids=frozenset(target.eos_token_ids)) for i in ids]

    plain = reqs()
    build_engine(target).generate(plain)
    spec = reqs()
    engine = build_engine(target, draft=draft)
    engine.generate(spec)
    assert [r.output_ids for r in spec] == [r.output_ids for r in plain]
    assert engine.stats.tau > 1.0  # drafts were accepted: the multi-token verify ran on CUDA
