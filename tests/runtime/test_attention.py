"""The runtime's attention equals transformers' sdpa with repeated K/V heads, for the masks the runtime gives."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from lilicorr.runtime import attention
from lilicorr.runtime.attention import NAME, fp32_attention, grouped_sdpa
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


def _qkv_mask(b, q_len, groups, dtype, seed, k_len=13, float_mask=False):
    g = torch.Generator().manual_seed(seed)
    kv, d = 2, 8
    q = torch.randn(b, kv * groups, q_len, d, generator=g).to(dtype)
    k, v = (torch.randn(b, kv, k_len, d, generator=g).to(dtype) for _ in range(2))
    mask = torch.rand(b, 1, q_len, k_len, generator=g) > 0.3
    mask[..., -1] = True
    if float_mask:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    return q, k, v, mask


@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("float_mask", [False, True, None])
@pytest.mark.parametrize("groups", [1, 3])
def test_fp32_attention_equals_sdpa_in_fp64(q_len, float_mask, groups):
    q, k, v, mask = _qkv_mask(5, q_len, groups, torch.bfloat16, seed=groups * 10 + q_len, float_mask=bool(float_mask))
    if float_mask is None:
        mask = None
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask, scale=0.3, enable_gqa=True
    )
    out = fp32_attention(
        q, k, v, None if mask is None else mask.to(torch.bfloat16) if mask.is_floating_point() else mask, 0.3
    )
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=8e-3)  # the output's bf16 rounding alone


def test_one_token_reduced_precision_queries_take_the_fp32_path(monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "fp32_attention", lambda *a: calls.append(a[0].shape) or fp32_attention(*a))
    for groups, rows, q_len, dtype, masked, taken in (
        (3, 1, 1, torch.bfloat16, False, True),  # a batch-1 step: transformers gives no mask
        (3, 4, 1, torch.bfloat16, True, True),
        (1, 4, 1, torch.float16, True, True),  # no grouping
        (3, 4, 2, torch.bfloat16, True, False),  # a verify pass keeps the bf16 flash kernel
        (3, 4, 1, torch.float32, True, False),
    ):
        calls.clear()
        q, k, v, mask = _qkv_mask(rows, q_len, groups, dtype, seed=rows + q_len)
        mask = mask if masked else None
        module = _Attn(groups)
        ours, _ = grouped_sdpa(module, q, k, v, mask, scaling=0.3)
        ref, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), mask, scaling=0.3)
        assert bool(calls) == taken and ours.dtype == dtype
        torch.testing.assert_close(ours.double(), ref, rtol=0, atol=3e-2)  # the inputs' and output's rounding


def test_runtime_switches_sdpa_models_only(tiny_target_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert TargetRuntime.load(tiny_target_dir).model.config._attn_implementation == NAME
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    eager = AutoModelForCausalLM.from_pretrained(tiny_target_dir, attn_implementation="eager")
    assert TargetRuntime(eager, tok).model.config._attn_implementation == "eager"
