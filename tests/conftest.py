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


def make_tiny_target(out: Path, num_layers: int = 3, seed: int = 0, vocab_size: int = 4096) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from lilicorr.data.tokenizer import save_tokenizer, train_tokenizer

    tok = train_tokenizer(source_texts(), vocab_size=vocab_size)
    save_tokenizer(tok, out, model_max_length=2048)
    cfg = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=0,
        bos_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    # Random init gives near-uniform logits; scale the embeddings so argmax is decisive and
    # sequences vary (a real-looking distribution for cache and batching tests).
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(20.0)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    return make_tiny_target(tmp_path_factory.mktemp("tiny_target"))


@pytest.fixture(scope="session")
def tiny_target(tiny_target_dir):
    from lilicorr.target.runtime import TargetRuntime

    return TargetRuntime.load(tiny_target_dir, layer_ids=(0, 2))
