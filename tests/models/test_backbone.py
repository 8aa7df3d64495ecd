import torch

from lilicorr.models.backbone import training_block_mask
from lilicorr.models.conv import GroupedDynamicConv
from lilicorr.models.draft import DraftModel, default_target_layer_ids
from tests.models.helpers import small_cfg


def _model(conv=False, seed=0):
    torch.manual_seed(seed)
    return DraftModel(small_cfg(lilicorr=False, conv=conv)).init_weights(seed).eval()


def _ctx(model, b, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    taps = torch.randn(b, n, model.cfg.fc_in_features, generator=g)
    return model.fuse(taps)


def test_training_pass_over_many_blocks_equals_one_block_inference():
    model = _model()
    bsz, t, blk = 2, 20, model.cfg.block_size
    ctx = _ctx(model, bsz, t)
    pos = torch.arange(t).expand(bsz, t)
    kv = model.context_kv(ctx, pos)
    anchors = torch.tensor([[3, 9, 14], [1, 5, 12]])
    g = torch.Generator().manual_seed(2)
    emb = torch.randn(bsz, 3 * blk, 32, generator=g)
    block_pos = (anchors[:, :, None] + torch.arange(blk)).reshape(bsz, -1)
    mask = training_block_mask(anchors, t, blk)
    many = model(emb, block_pos, kv, mask, blk)
    for i in range(3):
        for b in range(bsz):
            p = int(anchors[b, i])
            # Inference: context = exactly the positions before the anchor.
            kv1 = model.context_kv(ctx[b : b + 1, :p], pos[b : b + 1, :p])
            one = model.draft_block(
                emb[b : b + 1, i * blk : (i + 1) * blk],
                block_pos[b : b + 1, i * blk : (i + 1) * blk],
                kv1,
                torch.ones(1, p, dtype=torch.bool),
            )
            torch.testing.assert_close(many[b, i * blk : (i + 1) * blk], one[0], atol=1e-5, rtol=0)


def test_context_holes_are_masked():
    model = _model()
    ctx = _ctx(model, 1, 8)
    pos = torch.arange(8)[None]
    emb = torch.randn(1, model.cfg.block_size, 32)
    bpos = torch.arange(8, 8 + model.cfg.block_size)[None]
    valid = torch.tensor([[True, True, False, True, True, True, False, True]])
    full = model.draft_block(emb, bpos, model.context_kv(ctx, pos), valid)
    keep = valid[0]
    dense = model.draft_block(
        emb, bpos, model.context_kv(ctx[:, keep], pos[:, keep]), torch.ones(1, 6, dtype=torch.bool)
    )
    torch.testing.assert_close(full, dense, atol=1e-5, rtol=0)


def test_conv_is_identity_at_init():
    plain, conv = _model(conv=False), _model(conv=True)
    missing = conv.load_state_dict(plain.state_dict(), strict=False)
    assert all("_conv." in k for k in missing.missing_keys) and not missing.unexpected_keys
    ctx = _ctx(plain, 1, 6)
    pos = torch.arange(6)[None]
    emb = torch.randn(1, plain.cfg.block_size, 32)
    bpos = torch.arange(6, 6 + plain.cfg.block_size)[None]
    m = torch.ones(1, 6, dtype=torch.bool)
    torch.testing.assert_close(
        plain.draft_block(emb, bpos, plain.context_kv(ctx, pos), m),
        conv.draft_block(emb, bpos, conv.context_kv(ctx, pos), m),
        atol=1e-6,
        rtol=0,
    )


def test_conv_causal_within_block_and_never_across():
    torch.manual_seed(0)
    conv = GroupedDynamicConv(hidden=16, taps=3, group=4)
    with torch.no_grad():
        conv.kernel_projection.weight.normal_()
        conv.base_kernel.normal_()
    x = torch.randn(1, 8, 16, requires_grad=True)  # two blocks of 4
    y = conv.apply(x, conv.coefficients(x.detach()), side=0, block=4)
    for r in range(8):
        (grad,) = torch.autograd.grad(y[0, r].sum(), x, retain_graph=True)
        deps = set(torch.nonzero(grad[0].abs().sum(-1)).flatten().tolist())
        lo = (r // 4) * 4
        assert deps == set(range(max(lo, r - 2), r + 1)), (r, deps)


def test_default_target_layer_ids():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # z-lab Qwen3-8B drafter
    assert default_target_layer_ids(4, 2) == [0, 3]
    assert len(set(default_target_layer_ids(5, 3))) == 3


def test_grouped_attention_reads_kv_heads_in_repeat_interleave_order():
    """Query head h reads K/V head h // (heads / kv_heads): the layout vLLM's and the checkpoints' GQA use."""
    import torch.nn.functional as F

    from lilicorr.models.backbone import DraftAttention
    from lilicorr.models.layers import apply_rope, rope_cos_sin

    cfg = small_cfg(lilicorr=False)
    torch.manual_seed(0)
    attn = DraftAttention(cfg).eval()
    b, q, ctx = 2, cfg.block_size, 5
    x = torch.randn(b, q, cfg.hidden_size)
    pos = torch.arange(ctx, ctx + q).expand(b, q)
    kv = attn.project_kv(torch.randn(b, ctx, cfg.hidden_size), torch.arange(ctx).expand(b, ctx))
    mask = torch.rand(b, q, ctx + q) > 0.3
    mask[..., ctx:] = True
    out = attn(x, pos, kv, mask)
    # the formula written out: every K/V head repeated for its consecutive query heads
    qs = attn.q_norm(attn.q_proj(x).view(b, q, attn.nh, attn.hd)).transpose(1, 2)
    cos, sin = rope_cos_sin(pos, attn.hd, attn.theta, x.dtype)
    qs = apply_rope(qs, cos, sin)
    kb, vb = attn.project_kv(x, pos)
    rep = attn.nh // attn.nkv
    k = torch.cat([kv[0], kb], 2).repeat_interleave(rep, 1)
    v = torch.cat([kv[1], vb], 2).repeat_interleave(rep, 1)
    ref = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask[:, None]).transpose(1, 2).reshape(b, q, -1)
    torch.testing.assert_close(out, attn.o_proj(ref))


def test_rms_norm_equals_the_formula_written_out():
    """The fused kernel the norm runs gives exactly Qwen3's written-out norm (fp32 statistics, scale in the input
    dtype), in fp32 and bf16, on a decoding step's and a training batch's shapes."""
    from lilicorr.models.layers import RMSNorm

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        norm = RMSNorm(576, 1e-6)
        with torch.no_grad():
            norm.weight.copy_(torch.randn(576, generator=g))
        norm = norm.to(dtype)
        for shape in ((1, 1, 576), (4, 9, 576), (2, 300, 576)):
            x = (torch.randn(shape, generator=g) * 3).to(dtype)
            xf = x.float()
            ref = norm.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
            assert torch.equal(norm(x), ref), (dtype, shape)


def test_one_rope_table_per_pass_changes_nothing():
    """The backbone computes the rotary tables once for every layer; a layer computing its own gives the same."""
    model = _model(conv=True)
    b, t = 2, 11
    ctx = _ctx(model, b, t)
    kv = model.context_kv(ctx, torch.arange(t).expand(b, t))
    own = [layer.self_attn.project_kv(ctx, torch.arange(t).expand(b, t)) for layer in model.layers]
    for (k, v), (k2, v2) in zip(kv, own, strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    blk = model.cfg.block_size
    pos = (t + torch.arange(blk)).expand(b, blk)
    emb = torch.randn(b, blk, model.cfg.hidden_size, generator=torch.Generator().manual_seed(3))
    mask = torch.ones(b, blk, t + blk, dtype=torch.bool)
    x = emb
    for layer, lkv in zip(model.layers, kv, strict=True):
        x = layer(x, pos, lkv, mask, blk)  # each layer its own table
    assert torch.equal(model(emb, pos, kv, mask, blk), model.norm(x))
