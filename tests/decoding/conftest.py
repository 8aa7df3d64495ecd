"""Decoding-test fixtures: a tiny-vocabulary target whose exact output distribution is enumerable."""

import pytest
import torch

from lilicorr.target.runtime import TargetRuntime

V = 6


class _Tok:
    eos_token_id = None

    def decode(self, ids, **kw):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def small_vocab_target():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(7)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(3.0)  # context-dependent, yet random drafts get accepted
    return TargetRuntime(model, _Tok())
