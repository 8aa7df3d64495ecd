"""Shared fixtures: a tiny random Qwen3 target with a real byte-level BPE tokenizer.

Correctness tests must not depend on trained weights (nor on the corpus being built), so the
target here is random and the tokenizer is trained in a second on the package's own source.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

SRC = Path(__file__).resolve().parents[1] / "src" / "lilicorr"


def source_texts() -> list[str]:
    return [p.read_text() for p in sorted(SRC.rglob("*.py"))]


SHIPPED_TARGET = Path(__file__).resolve().parents[1] / "models" / "tiny-s"  # committed default target


def random_qwen3(
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    max_pos: int,
    seed: int,
    embed_scale: float,
    eos_pad: int | None = 0,
):
    """A random ``Qwen3ForCausalLM`` (head dim 16, MLP 2× hidden, tied embeddings; eos = pad = ``eos_pad``,
    whose embedding row HF zeroes as the padding index — None keeps every row random).

    Random init gives near-uniform logits; ``embed_scale`` sharpens them so argmax is decisive and
    continuations vary — a realistic-looking distribution for cache, batching and sampling tests.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=16,
        max_position_embeddings=max_pos,
        tie_word_embeddings=True,
        eos_token_id=eos_pad,
        bos_token_id=eos_pad,
        pad_token_id=eos_pad,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(embed_scale)
    return model


def make_tiny_target(out: Path, num_layers: int = 3, seed: int = 0, vocab_size: int = 4096) -> Path:
    from lilicorr.data.tokenizer import save_tokenizer, train_tokenizer

    tok = train_tokenizer(source_texts(), vocab_size=vocab_size)
    save_tokenizer(tok, out, model_max_length=2048)
    model = random_qwen3(
        tok.get_vocab_size(),
        hidden=64,
        layers=num_layers,
        heads=4,
        kv_heads=2,
        max_pos=2048,
        seed=seed,
        embed_scale=20.0,
    )
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    return make_tiny_target(tmp_path_factory.mktemp("tiny_target"))


@pytest.fixture(scope="session")
def tiny_target(tiny_target_dir):
    from lilicorr.runtime.runtime import TargetRuntime

    return TargetRuntime.load(tiny_target_dir, layer_ids=(0, 2))


@pytest.fixture(scope="session")
def regen_data(tiny_target_dir, tmp_path_factory):
    """Sequences continued by the tiny target itself (what `lilicorr data regenerate` makes): the training,
    features and data suites train and extract on them."""
    from safetensors.torch import save_file

    from lilicorr.decoding.build import build_engine
    from lilicorr.decoding.request import Request
    from lilicorr.decoding.sampling import SamplingParams
    from lilicorr.runtime.runtime import TargetRuntime

    target = TargetRuntime.load(tiny_target_dir)
    g = torch.Generator().manual_seed(0)
    reqs = [
        Request(
            torch.randint(4, 2000, (8,), generator=g).tolist(),
            SamplingParams(max_tokens=24, ignore_eos=True, temperature=1.0 if i % 2 else 0.0, seed=i),
        )
        for i in range(40)
    ]
    build_engine(target).generate(reqs)
    tokens = torch.tensor([r.prompt_ids + r.output_ids for r in reqs], dtype=torch.int32)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 8:] = True
    path = tmp_path_factory.mktemp("regen") / "data.safetensors"
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.arange(40) % 2 == 1}, str(path))
    return path


@pytest.fixture
def regenerated(tiny_target_dir, tmp_path):
    """A 7-row file `lilicorr data regenerate` made from a prompts JSONL (the tiny target answering): what a pack
    packs and a campaign's fresh disk unpacks. (data file, prompts file)."""
    import json

    from lilicorr.datagen.regenerate import RegenConfig, regenerate

    rows = [{"id": i, "messages": [{"role": "user", "content": f"def f{i}(x):" + " y" * i}]} for i in range(7)]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "regen.safetensors"
    cfg = RegenConfig(target=str(tiny_target_dir), out=str(out), num_sequences=7, new_tokens=10, shard_size=4,
                      concurrency=4, prompts=str(prompts), max_prompt_tokens=64, engine="native")  # fmt: skip
    regenerate(cfg)
    return out, prompts
