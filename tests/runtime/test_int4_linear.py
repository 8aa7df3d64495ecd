"""A target's 4-bit projections (runtime/int4_linear.py): only weights exactly on a 4-bit grid, the same results
as the dequantized weights to bf16's rounding, and the previous forward wherever the int4 kernel must not serve."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from lilicorr.runtime import int4_linear
from lilicorr.runtime.int4_linear import int4_matmul, kernel_agrees, recover_grid, use_int4_weights
from lilicorr.runtime.packed_linear import pack_linears

needs_kernel = pytest.mark.skipif(not kernel_agrees(torch.bfloat16), reason="this torch has no CPU int4 kernel")


def q4_1_weight(out: int, inp: int, seed: int = 0) -> torch.Tensor:
    """fp32 weights as a Q4_1 GGUF dequantizes: q · d + m, q ∈ 0…15 spanning each group, d and m fp16."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (out, inp // 32, 32), generator=gen).float()
    q[..., 0], q[..., 1] = 0, 15  # the quantizer's min and max: every group spans its grid
    d = (torch.rand(out, inp // 32, 1, generator=gen) * 0.02 + 1e-3).half().float()
    m = (-torch.rand(out, inp // 32, 1, generator=gen) * 0.1).half().float()
    return (q * d + m).view(out, inp)


def test_recovers_a_q4_1_grid_bit_for_bit():
    w = q4_1_weight(48, 96)
    q, d, m = recover_grid(w)
    assert q.dtype == torch.int32 and int(q.min()) >= 0 and int(q.max()) <= 15
    assert torch.equal((q.view(48, 3, 32).float() * d[..., None] + m[..., None]).view(48, 96), w)


@pytest.mark.parametrize(
    "change",
    [
        lambda w: w.index_put_((torch.tensor([3]), torch.tensor([7])), w[3, 7].nextafter(torch.tensor(9.0))),  # 1 ulp
        lambda w: torch.randn_like(w),  # trained weights
        lambda w: w.to(torch.bfloat16),  # not the stored fp32 values
        lambda w: w[:, :80],  # inputs not a multiple of the group
    ],
)
def test_anything_off_the_grid_is_left_alone(change):
    assert recover_grid(change(q4_1_weight(16, 96))) is None


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.grid = nn.Linear(96, 64, bias=False)
        self.trained = nn.Linear(64, 32)


def saved_model(tmp_path: Path, dtype: torch.dtype = torch.bfloat16) -> tuple[nn.Module, torch.Tensor]:
    """A model whose ``grid`` layer is stored exactly Q4_1 (fp32, as the import writes it) and loaded in ``dtype``."""
    torch.manual_seed(0)
    model = TwoLayers()
    exact = q4_1_weight(64, 96)
    with torch.no_grad():
        model.grid.weight.copy_(exact)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    return model.to(dtype).eval(), exact


@needs_kernel
def test_a_grid_layer_runs_int4_up_to_the_cut_over_and_its_previous_forward_above(tmp_path, monkeypatch):
    monkeypatch.setenv(int4_linear.ROWS_ENV, "4")
    model, exact = saved_model(tmp_path)
    pack_linears(model)
    before = model.grid.forward  # the packed forward: what serves wide inputs afterwards
    assert use_int4_weights(model, tmp_path) == 1  # the trained layer is not on a grid
    assert not hasattr(model.trained, "_int4_weight")
    x = torch.randn(2, 5, 96).to(torch.bfloat16)  # [batch, tokens, in]
    with torch.inference_mode():
        narrow, wide = model.grid(x[0, :4]), model.grid(x)  # 4 rows: int4; 10 rows: the packed copy
        assert torch.equal(narrow, int4_matmul(x[0, :4], model.grid._int4_weight, model.grid._int4_scales, 64))
        assert torch.equal(wide, before(x))
    want = x.float() @ exact.T  # the stored fp32 weights
    assert torch.allclose(narrow.float(), want[0, :4], rtol=3e-2, atol=3e-2)  # bf16 scales and output
    assert torch.allclose(wide.float(), want, rtol=3e-2, atol=3e-2)


@needs_kernel
def test_an_in_place_update_or_gradients_take_the_previous_forward(tmp_path):
    model, _ = saved_model(tmp_path)
    assert use_int4_weights(model, tmp_path) == 1
    x = torch.randn(1, 96).to(torch.bfloat16)
    with torch.no_grad():
        model.grid.weight.mul_(2.0)  # a training step: the 4-bit copy is stale
        assert torch.equal(model.grid(x), nn.functional.linear(x, model.grid.weight))
    model2, _ = saved_model(tmp_path)
    use_int4_weights(model2, tmp_path)
    y = model2.grid(x)  # grad mode, weights that want gradients: autograd needs the real weight
    assert y.requires_grad and torch.equal(y.detach(), nn.functional.linear(x, model2.grid.weight).detach())


@needs_kernel
def test_switched_off_fp32_or_no_folder_converts_nothing(tmp_path, monkeypatch):
    assert use_int4_weights(saved_model(tmp_path, torch.float32)[0], tmp_path) == 0  # the kernel is slow in fp32
    assert use_int4_weights(saved_model(tmp_path)[0], None) == 0
    monkeypatch.setenv(int4_linear.ENV, "0")
    assert use_int4_weights(saved_model(tmp_path)[0], tmp_path) == 0
    monkeypatch.setenv(int4_linear.ENV, "1")
    monkeypatch.setenv(int4_linear.ROWS_ENV, "many")
    with pytest.raises(ValueError, match="LILICORR_INT4_MAX_ROWS='many'"):
        use_int4_weights(saved_model(tmp_path)[0], tmp_path)


@needs_kernel
def test_a_target_imported_from_4_bits_runs_them_and_agrees_with_fp32(tiny_target_dir, tmp_path):
    """The tiny target with every projection snapped to a Q4_1 grid, as the GGUF import writes it: in bf16 every
    projection converts, and its one-token steps (int4) and its prefill (packed bf16) pick the fp32 target's
    top-1 token as often as bf16 does without the kernel."""
    import shutil

    from safetensors.torch import load_file

    from lilicorr.runtime.runtime import TargetRuntime

    folder = tmp_path / "q4"
    shutil.copytree(tiny_target_dir, folder)
    state = load_file(str(folder / "model.safetensors"))
    snapped = 0
    for name, w in state.items():
        if name.endswith("proj.weight"):
            g = w.float().view(w.shape[0], -1, 32)
            lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
            d, m = ((hi - lo) / 15).half().float(), lo.half().float()
            state[name] = (((g - m) / d).round().clamp(0, 15) * d + m).view_as(w).contiguous()
            snapped += 1
    save_file(state, str(folder / "model.safetensors"))
    ref = TargetRuntime.load(folder, dtype=torch.float32)
    rt = TargetRuntime.load(folder, dtype=torch.bfloat16)
    assert ref.int4_layers == 0 and rt.int4_layers == snapped > 0
    ids = torch.randint(5, ref.vocab_size, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = ref.forward(ref.new_state(1), ids, want_taps=False).logits[0].argmax(-1)  # [24]
        state_ = rt.new_state(1)
        rt.forward(state_, ids[:, :8], want_taps=False)  # a prefill: packed bf16
        steps = [rt.forward(state_, ids[:, i : i + 1], want_taps=False).logits[0, 0] for i in range(8, 24)]
    got = torch.stack(steps).argmax(-1)  # [16]: one-token steps on the int4 kernel
    assert (got == want[8:]).float().mean() >= 0.8


class Block(nn.Module):
    """A layer's projections as transformers names them: q, k, v (k with a bias, as Qwen2's), an MLP's gate and up."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (
            nn.Linear(96, 64, bias=False),
            nn.Linear(96, 32),
            nn.Linear(96, 32, False),
        )
        self.gate_proj, self.up_proj, self.down_proj = (nn.Linear(96, 128, False), nn.Linear(96, 128, False),
                                                       nn.Linear(128, 96, False))  # fmt: skip


def saved_block(tmp_path: Path) -> tuple[nn.Module, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """The block stored exactly on Q4_1 grids, and each projection's own int4 operands (as without sibling groups)."""
    model, own = Block(), {}
    with torch.no_grad():
        for i, (name, m) in enumerate(model.named_children()):
            m.weight.copy_(q4_1_weight(*m.weight.shape, seed=i))
            own[name] = int4_linear.pack_grid(*recover_grid(m.weight), torch.bfloat16)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    return model.to(torch.bfloat16).eval(), own


@needs_kernel
def test_siblings_share_one_product_with_the_same_bits_as_their_own(tmp_path, monkeypatch):
    block, own = saved_block(tmp_path)
    assert use_int4_weights(block, tmp_path) == 6
    assert block.q_proj._int4_siblings is block.v_proj._int4_siblings is not block.up_proj._int4_siblings
    assert block.down_proj._int4_siblings is None  # reads another input
    for group in (block.q_proj._int4_siblings, block.up_proj._int4_siblings):
        group.pays = True  # as under the server's sleeping OpenMP threads …
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # … on two of them (the rule reads it; torch's stay)
    x, other = (torch.randn(3, 96).to(torch.bfloat16) for _ in range(2))
    with torch.inference_mode():
        for order in (("q_proj", "k_proj", "v_proj"), ("v_proj", "q_proj", "k_proj")):
            got = {n: getattr(block, n)(x) for n in order}
            for n in order:
                m = getattr(block, n)
                want = int4_matmul(x, *own[n], m.out_features)
                assert torch.equal(got[n], want if m.bias is None else want + m.bias)
        assert block.q_proj._int4_siblings._waiting.input is None  # every output taken: x is not held
        block.gate_proj(x)
        up = block.up_proj(other)  # another input: computed for it, not the output waiting for x
        assert torch.equal(up, int4_matmul(other, *own["up_proj"], 128))
    with torch.inference_mode():
        q = block.q_proj(x)  # k's and v's outputs now wait for x
    assert torch.equal(q, int4_matmul(x, *own["q_proj"], 64))
    x.mul_(2.0)  # x changed in place since: k must not take the output computed before
    with torch.inference_mode():
        assert torch.equal(block.k_proj(x), int4_matmul(x, *own["k_proj"], 32) + block.k_proj.bias)
    with torch.no_grad():
        block.k_proj.weight.mul_(2.0)  # stale: k takes its previous forward, its siblings stay right
        assert torch.equal(block.k_proj(x), nn.functional.linear(x, block.k_proj.weight, block.k_proj.bias))
        assert torch.equal(block.v_proj(x), int4_matmul(x, *own["v_proj"], 32))


@needs_kernel
@pytest.mark.parametrize("pays, threads", [(False, 2), (True, 1)])
def test_siblings_keep_their_own_products_where_sharing_does_not_pay(tmp_path, monkeypatch, pays, threads):
    block, own = saved_block(tmp_path)
    use_int4_weights(block, tmp_path)
    shared = block.q_proj._int4_siblings
    shared.pays = pays
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    x = torch.randn(2, 96).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(block.q_proj(x), int4_matmul(x, *own["q_proj"], 64))
    assert getattr(shared._waiting, "outputs", None) is None  # nothing computed for the siblings
