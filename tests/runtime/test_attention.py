"""The runtime's attention equals transformers' sdpa with repeated K/V heads, for the masks the runtime gives."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from lilicorr.runtime.attention import NAME, grouped_sdpa
from lilicorr.runtime.runtime import TargetRuntime


class _Attn(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, True


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("float_mask", [False, True])
@pytest.mark.parametrize("groups", [1, 3])
def test_grouped_sdpa_equals_transformers_sdpa(q_len, float_mask, groups):
    g = torch.Generator().manual_seed(q_len + groups)
    b, kv, k_len, d = 2, 2, 11, 8
    q = torch.randn(b, kv * groups, q_len, d, generator=g)
    k, v = torch.randn(b, kv, k_len, d, generator=g), torch.randn(b, kv, k_len, d, generator=g)
    mask = torch.rand(b, 1, q_len, k_len, generator=g) > 0.3
    mask[..., -1] = True  # every query sees at least itself
    if float_mask:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    module = _Attn(groups)
    ours, _ = grouped_sdpa(module, q, k, v, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
    assert ours.shape == (b, q_len, kv * groups, d)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_runtime_switches_sdpa_models_only(tiny_target_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert TargetRuntime.load(tiny_target_dir).model.config._attn_implementation == NAME
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    eager = AutoModelForCausalLM.from_pretrained(tiny_target_dir, attn_implementation="eager")
    assert TargetRuntime(eager, tok).model.config._attn_implementation == "eager"
