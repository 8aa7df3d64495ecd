import pytest
import torch

from lilicorr.models.draft import DraftModel
from lilicorr.models.head import LiLiCorrHead, candidates
from tests.models.helpers import small_cfg

SCHEME_A_SHAPES = {  # docs/guide/head.md (Tensors) with Hm=32, H=48, K=4, B=6 (S=5), nh=4, M=96, F=16, L=2
    "lilicorr.token_proj.weight": (48, 32),
    "lilicorr.token_proj.bias": (48,),
    "lilicorr.pass_hidden_proj.weight": (48, 32),
    "lilicorr.pass_hidden_proj.bias": (48,),
    "lilicorr.context_proj.weight": (48, 32),
    "lilicorr.context_proj.bias": (48,),
    "lilicorr.feature_norm.weight": (5,),
    "lilicorr.feature_norm.bias": (5,),
    "lilicorr.feature_mlp.up_proj.weight": (48, 5),
    "lilicorr.feature_mlp.up_proj.bias": (48,),
    "lilicorr.feature_mlp.down_proj.weight": (48, 48),
    "lilicorr.feature_mlp.down_proj.bias": (48,),
    "lilicorr.slot_embedding": (1, 1, 5, 1, 48),
    "lilicorr.rank_embedding": (1, 1, 1, 4, 48),
    "lilicorr.relative_slot_bias": (4, 11),
    "lilicorr.same_slot_bias": (4,),
    "lilicorr.output_norm.weight": (48,),
    "lilicorr.anchor_norm.weight": (48,),
    "lilicorr.factor_input_proj.weight": (48, 144),
    "lilicorr.factor_input_proj.bias": (48,),
    "lilicorr.out_head.weight": (16, 48),
    "lilicorr.out_head.bias": (16,),
    "lilicorr.in_head.weight": (16, 48),
    "lilicorr.in_head.bias": (16,),
    "lilicorr.anchor_out_head.weight": (16, 48),
    "lilicorr.anchor_out_head.bias": (16,),
}
for i in range(2):
    SCHEME_A_SHAPES.update(
        {
            f"lilicorr.layers.{i}.attn_norm.weight": (48,),
            f"lilicorr.layers.{i}.mlp_norm.weight": (48,),
            f"lilicorr.layers.{i}.attn.in_proj_weight": (144, 48),
            f"lilicorr.layers.{i}.attn.in_proj_bias": (144,),
            f"lilicorr.layers.{i}.attn.out_proj.weight": (48, 48),
            f"lilicorr.layers.{i}.attn.out_proj.bias": (48,),
            f"lilicorr.layers.{i}.mlp.up_proj.weight": (96, 48),
            f"lilicorr.layers.{i}.mlp.up_proj.bias": (96,),
            f"lilicorr.layers.{i}.mlp.down_proj.weight": (48, 96),
            f"lilicorr.layers.{i}.mlp.down_proj.bias": (48,),
        }
    )


def _head(head_width=48, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = small_cfg(head_width=head_width, **kw)
    head = LiLiCorrHead(cfg)
    with torch.no_grad():  # non-zero embeddings and biases so every term matters
        for p in (head.slot_embedding, head.rank_embedding, head.relative_slot_bias, head.same_slot_bias):
            p.normal_(0, 0.5)
    return head, cfg


def _lattice(cfg, b=2, n=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    n = n or cfg.block_size - 1
    k = cfg.lilicorr.candidate_topk
    logits = torch.randn(b, n, cfg.vocab_size, generator=g) * 3
    ids, lp = candidates(logits, k)
    emb = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=g)
    return dict(
        pass_hidden=torch.randn(b, n, cfg.hidden_size, generator=g),
        token_emb=emb[ids],
        lp=lp,
        anchor_hidden=torch.randn(b, cfg.hidden_size, generator=g),
        anchor_valid=torch.tensor([True, False][:b]),
    )


def test_scheme_a_names_and_shapes_exact():
    model = DraftModel(small_cfg(head_width=48))
    got = {k: tuple(v.shape) for k, v in model.state_dict().items() if k.startswith("lilicorr.")}
    assert got == SCHEME_A_SHAPES


def test_token_proj_absent_when_widths_equal():
    model = DraftModel(small_cfg(head_width=0))
    names = set(model.state_dict())
    assert "lilicorr.token_proj.weight" not in names and "lilicorr.pass_hidden_proj.weight" in names


def test_parameter_counts():
    cfg = small_cfg(head_width=0)
    model = DraftModel(cfg)
    backbone = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("lilicorr."))
    # fc 64·32 + norms 2·32 + per layer: q 32·32, k 32·16, v 32·16, o 32·32, q/k norm 8+8,
    # mlp 3·32·64, 2 layer norms 2·32
    per_layer = 32 * 32 * 2 + 32 * 16 * 2 + 16 + 3 * 32 * 64 + 64
    assert backbone == 64 * 32 + 64 + 2 * per_layer


def test_candidates_are_sorted_topk_with_full_vocab_logsoftmax():
    logits = torch.randn(3, 50)
    ids, lp = candidates(logits, 4)
    assert torch.equal(ids[:, 0], logits.argmax(-1))
    torch.testing.assert_close(lp, torch.log_softmax(logits, -1).gather(-1, ids))
    assert (lp[:, :-1] >= lp[:, 1:]).all()


def test_head_matches_explicit_formula():
    """An independent, loop-based evaluation of the head's forward (docs/guide/head.md) for one request."""
    head, cfg = _head()
    lat = _lattice(cfg, b=1)
    lat["anchor_valid"] = torch.tensor([True])
    sc = head(**lat)
    n, k = cfg.block_size - 1, cfg.lilicorr.candidate_topk
    ph, emb, lp, ah = lat["pass_hidden"][0], lat["token_emb"][0], lat["lp"][0], lat["anchor_hidden"][0]
    feats = torch.stack(
        [
            lp,
            lp.exp(),
            lp - lp[:, :1],
            torch.arange(k).float().expand(n, k) / (k - 1),
            (torch.arange(k) == 0).float().expand(n, k),
        ],
        -1,
    )
    fm = head.feature_mlp.down_proj(torch.nn.functional.silu(head.feature_mlp.up_proj(head.feature_norm(feats))))
    x = head.token_proj(emb) + head.pass_hidden_proj(ph)[:, None] + fm
    x = x + head.slot_embedding[0, 0, :n] + head.rank_embedding[0, 0, 0]
    x = x.reshape(n * k, -1)
    bias = torch.zeros(4, n * k, n * k)
    for a in range(n * k):
        for b in range(n * k):
            sa, sb = a // k, b // k
            bias[:, a, b] = head.relative_slot_bias[:, sa - sb + cfg.block_size - 1] + head.same_slot_bias * (sa == sb)
    for layer in head.layers:
        mha = torch.nn.MultiheadAttention(48, 4, batch_first=True)
        mha.in_proj_weight.data, mha.in_proj_bias.data = (
            layer.attn.in_proj_weight.data,
            layer.attn.in_proj_bias.data,
        )
        mha.out_proj.load_state_dict(layer.attn.out_proj.state_dict())
        y = layer.attn_norm(x)[None]
        x = x + mha(y, y, y, attn_mask=bias, need_weights=False)[0][0]
        x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.up_proj(layer.mlp_norm(x))))
    h = head.output_norm(x).reshape(n, k, -1)
    a = head.anchor_norm(head.context_proj(ah))
    g = torch.nn.functional.silu(head.factor_input_proj(torch.cat([h, a.expand_as(h), h * a], -1)))
    out = head.out_head(g) / head.out_head(g).norm(dim=-1, keepdim=True).clamp_min(1e-4)
    inn = head.in_head(g) / head.in_head(g).norm(dim=-1, keepdim=True).clamp_min(1e-4)
    ao = head.anchor_out_head(a)
    ao = ao / ao.norm().clamp_min(1e-4)
    torch.testing.assert_close(sc.start[0], 8.0 * (inn[0] @ ao), atol=1e-5, rtol=0)
    for s in range(n - 1):
        torch.testing.assert_close(sc.pair[0, s], 8.0 * out[s] @ inn[s + 1].T, atol=1e-5, rtol=0)


def test_invalid_anchor_uses_bias_only():
    head, cfg = _head()
    lat = _lattice(cfg, b=2)
    lat["anchor_valid"] = torch.tensor([False, False])
    s1 = head(**lat)
    lat["anchor_hidden"] = lat["anchor_hidden"] * 100 + 5
    s2 = head(**lat)
    torch.testing.assert_close(s1.start, s2.start)
    torch.testing.assert_close(s1.pair, s2.pair)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_shorter_drafts_use_prefix_parameters(n):
    head, cfg = _head()
    lat = _lattice(cfg, n=n)
    sc = head(**lat)
    assert sc.start.shape == (2, 4) and sc.pair.shape == (2, n - 1, 4, 4)
    with torch.no_grad():  # parameters of slots >= n must not matter
        head.slot_embedding[:, :, n:] += 10.0
        unused = [d + cfg.block_size - 1 for d in range(-(cfg.block_size - 1), cfg.block_size) if abs(d) >= n]
        head.relative_slot_bias[:, unused] += 10.0
    sc2 = head(**lat)
    torch.testing.assert_close(sc.start, sc2.start, atol=0, rtol=0)
    torch.testing.assert_close(sc.pair, sc2.pair, atol=0, rtol=0)


def test_too_long_draft_refused():
    head, cfg = _head()
    lat = _lattice(cfg, n=cfg.block_size - 1)
    lat = {k: (torch.cat([v, v[:, :1]], 1) if k in ("pass_hidden", "token_emb", "lp") else v) for k, v in lat.items()}
    with pytest.raises(ValueError, match="draft length 6 outside 1..5"):
        head(**lat)


def test_batch_rows_are_independent():
    head, cfg = _head()
    lat = _lattice(cfg, b=2)
    both = head(**lat)
    one = head(**{k: v[1:] for k, v in lat.items()})
    torch.testing.assert_close(both.pair[1:], one.pair, atol=1e-5, rtol=0)
    torch.testing.assert_close(both.start[1:], one.start, atol=1e-5, rtol=0)
