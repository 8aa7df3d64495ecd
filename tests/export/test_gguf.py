"""GGUF drafter export: llama.cpp's own converter for the DFlash backbone, then the LiLiCorr head, the
convolution keys, the DFlash2 selector and a reduced draft vocabulary appended; read back with llama.cpp's
own gguf-py and compared tensor by tensor with the checkpoint."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "smollm2-135m-instruct"


def _read(path: Path):
    """(fields by name, tensors by name) with llama.cpp's gguf-py (it has the DFlash keys)."""
    from lilicorr.export.gguf import source_dir

    sys.path.insert(0, str(source_dir() / "gguf-py"))
    try:
        import gguf

        reader = gguf.GGUFReader(str(path))
    finally:
        sys.path.pop(0)
    return {f.name: f.contents() for f in reader.fields.values()}, {t.name: t for t in reader.tensors}


def _save(model, out: Path) -> Path:
    from lilicorr.checkpoint import save_draft

    save_draft(model, out, dtype=torch.float32)
    return out


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    """A small LiLiCorr drafter with the convolution and a draft vocabulary, every parameter random (so a
    transposed or misplaced tensor cannot hide behind a zero init), its GGUF (one converter run serves every
    layout check: head, convolution and ``--draft-vocab 1024`` together), and the checkpoint folder."""
    from lilicorr.checkpoint import load_draft
    from lilicorr.decoding.draft_vocab import write_draft_vocab
    from lilicorr.export.gguf import export_gguf
    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.training.draft_config import DraftTrainConfig, build_model

    if not (TARGET / "config.json").exists():
        pytest.fail(f"{TARGET} missing: `make target` builds it")
    target = TargetRuntime.load(TARGET)
    cfg = DraftTrainConfig(
        target=str(TARGET), data="-", out="-", mode="lilicorr", num_layers=1, head_hidden_size=64,
        conv_kernel_size=2, conv_group_size=16,
    )  # fmt: skip
    model = build_model(cfg, target)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("lilicorr.") or "_conv." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    tmp = tmp_path_factory.mktemp("gguf")
    folder = _save(model, tmp / "draft")
    write_draft_vocab(folder, list(range(2000, 0, -1)), {"test": True})
    info = export_gguf(folder, TARGET, tmp / "d.gguf", draft_vocab=1024)
    return folder, load_draft(folder), info, tmp / "d.gguf"


def test_lilicorr_drafter_keeps_its_head_and_convolution(draft):
    folder, model, info, path = draft
    fields, tensors = _read(path)
    head, cfg = model.lilicorr, model.cfg
    assert info["layout"] == "lilicorr+conv+draft-vocab-1024" and Path(info["gguf"]).stat().st_size == info["bytes"] > 0
    assert fields["general.architecture"] == "dflash" and fields["dflash.block_size"] == cfg.block_size
    assert fields["tokenizer.ggml.mask_token_id"] == cfg.mask_token_id == 16
    assert (fields["dflash.conv_kernel_size"], fields["dflash.conv_group_size"]) == (2, 16)
    g = cfg.lilicorr
    expect = {
        "lilicorr.candidate_topk": g.candidate_topk,
        "lilicorr.hidden_size": 64,
        "lilicorr.num_layers": g.num_layers,
        "lilicorr.num_heads": g.num_heads,
        "lilicorr.feed_forward_length": int(64 * g.mlp_ratio),
        "lilicorr.factor_dim": g.factor_dim,
        "lilicorr.feature_set": "lp,p,lp_minus_max,rank_fraction,is_top1",
        "lilicorr.walk": "greedy",
    }
    assert {k: fields[k] for k in expect} == expect
    for key, value in (
        ("vector_eps", g.vector_eps),
        ("logit_scale", g.logit_scale),
        ("rms_norm_eps", cfg.rms_norm_eps),
    ):
        assert fields[f"lilicorr.{key}"] == pytest.approx(value, rel=1e-6)

    def same(name: str, ref: torch.Tensor) -> None:
        t = tensors[name]
        assert t.tensor_type.name == "F32", name
        np.testing.assert_array_equal(np.asarray(t.data).reshape(ref.shape), ref.detach().float().numpy(), err_msg=name)

    width = 64
    same("lilicorr.token_proj.weight", head.token_proj.weight)
    same("lilicorr.pass_proj.bias", head.pass_hidden_proj.bias)
    same("lilicorr.feat_up.weight", head.feature_mlp.up_proj.weight)
    same("lilicorr.slot_embd", head.slot_embedding.reshape(cfg.block_size - 1, width))
    same("lilicorr.lattice_bias", head.slot_bias(cfg.block_size - 1))
    same("lilicorr.attn_qkv.weight", torch.stack([lay.attn.in_proj_weight for lay in head.layers]))
    for i, layer in enumerate(head.layers):  # stacked on numpy axis 0 (ggml's last)
        np.testing.assert_array_equal(
            tensors["lilicorr.ffn_down.bias"].data[i], layer.mlp.down_proj.bias.detach().numpy()
        )
    w = head.factor_input_proj.weight
    same("lilicorr.factor_self.weight", w[:, :width])
    same("lilicorr.factor_anchor.weight", w[:, width : 2 * width])
    same("lilicorr.factor_cross.weight", w[:, 2 * width :])
    same("lilicorr.anchor_out_head.weight", head.anchor_out_head.weight)
    # every checkpoint tensor of the head is in the file, and nothing else under lilicorr.*
    n_head_params = sum(1 for n, _ in model.named_parameters() if n.startswith("lilicorr."))
    written = [n for n in tensors if n.startswith("lilicorr.")]
    layer_kinds = 10  # per lattice layer: norms, qkv w/b, out w/b, up w/b, down w/b — written stacked
    factor_split = 2  # factor_input_proj.weight is written as three blocks
    bias_expanded = 1  # relative + same-slot bias are written as one expanded bias
    assert len(written) == n_head_params - layer_kinds * (len(head.layers) - 1) + factor_split - bias_expanded
    conv = model.layers[0].attention_conv
    np.testing.assert_allclose(tensors["blk.0.attn_conv_base"].data, conv.base_kernel.detach().numpy(), rtol=1e-6)
    assert not list(path.parent.glob(".*.tmp"))  # nothing half-written left behind


def test_backbone_tensors_are_the_converters(draft, tmp_path):
    """Appending copies the converter's tensors byte for byte: the head adds tensors, it changes none."""
    from lilicorr.export.gguf import _backbone_folder, _convert

    folder, model, _, path = draft
    _backbone_folder(model, tmp_path / "draft")  # the same folder name: general.name comes from it
    _convert(tmp_path / "draft", tmp_path / "b.gguf", "bf16", ["--target-model-dir", str(TARGET)])
    plain_fields, plain = _read(tmp_path / "b.gguf")
    fields, tensors = _read(path)
    assert "output.weight" not in plain  # the full-vocabulary drafter borrows the target's head
    for name, t in plain.items():
        assert np.array_equal(np.asarray(tensors[name].data), np.asarray(t.data)), name
    assert all(fields[k] == v for k, v in plain_fields.items() if not k.startswith("GGUF."))


def test_dflash2_arm_exports_as_llamacpp_selector(tmp_path):
    """Our dflash2 arm is llama.cpp's DFlash2 selector (same score over the same top-K); the convolution
    llama.cpp's loader insists on is written as an exact identity (one tap, base 1, projection 0). Other arms
    have no llama.cpp counterpart with the same semantics and are refused by name."""
    from lilicorr.export.gguf import export_gguf
    from lilicorr.models.arms import DSparkMarkov, load_arm, save_arm

    shipped = ROOT / "models" / "arms" / "smollm2-dflash2"
    if not (shipped / "arm.json").exists():
        pytest.fail(f"{shipped} missing (a shipped drafter)")
    arm = load_arm(shipped)
    info = export_gguf(shipped, TARGET, tmp_path / "s.gguf")
    fields, tensors = _read(tmp_path / "s.gguf")
    assert info["layout"] == "dflash+dflash2-selector"
    rank, hidden = arm.hidden_projection.out_features, arm.hidden_projection.in_features
    assert (fields["dflash.selector_rank"], fields["dflash.selector_top_k"]) == (rank, arm.k)
    assert (fields["dflash.conv_kernel_size"], fields["dflash.conv_group_size"]) == (1, hidden)
    np.testing.assert_array_equal(tensors["selector_hidden.weight"].data, arm.hidden_projection.weight.detach().numpy())
    np.testing.assert_array_equal(tensors["selector_successor.weight"].data, arm.succ_embedding.weight.detach().numpy())
    np.testing.assert_array_equal(
        tensors["selector_predecessor.weight"].data, arm.pred_embedding.weight.detach().numpy()
    )
    assert np.all(tensors["blk.0.attn_conv_base"].data == 1) and not np.any(tensors["blk.1.ffn_conv_proj.weight"].data)

    other = tmp_path / "dspark"
    shutil.copytree(shipped, other)
    save_arm(
        DSparkMarkov(arm.pred_embedding.num_embeddings, hidden, 4), other, {"vocab": 49152, "hidden": hidden, "rank": 4}
    )
    with pytest.raises(ValueError, match="arm 'dspark' has no llama.cpp counterpart"):
        export_gguf(other, TARGET, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_draft_vocab_writes_d2t_and_the_targets_own_rows(draft, tmp_path):
    """``--draft-vocab N``: d2t = the N most frequent ids (ascending), output = those rows of the target GGUF's
    LM head copied raw (SmolLM2 ties it to token_embd, Q8_0), so the reduced head scores like the full one."""
    from lilicorr.decoding.draft_vocab import read_draft_vocab
    from lilicorr.export.gguf import export_gguf, target_gguf_of

    folder, _, _, path = draft
    _, tensors = _read(path)
    ids = read_draft_vocab(folder, 1024, 49152).numpy()
    np.testing.assert_array_equal(tensors["d2t"].data, ids)
    _, target = _read(target_gguf_of(TARGET))
    head = target.get("output.weight", target["token_embd.weight"])
    assert tensors["output.weight"].tensor_type == head.tensor_type
    np.testing.assert_array_equal(tensors["output.weight"].data, head.data[ids])
    shutil.copytree(folder, tmp_path / "no-vocab")
    (tmp_path / "no-vocab" / "draft_vocab.json").unlink()
    with pytest.raises(ValueError, match="draft_vocab.json"):
        export_gguf(tmp_path / "no-vocab", TARGET, tmp_path / "w.gguf", draft_vocab=1024)
    assert not (tmp_path / "w.gguf").exists()


def test_gguf_export_errors_are_named(draft, tmp_path):
    from lilicorr.export.gguf import export_gguf

    with pytest.raises(ValueError, match="not a Hugging Face model folder"):
        export_gguf(draft[0], tmp_path / "nothing", tmp_path / "d.gguf")
    with pytest.raises(ValueError, match="--draft-vocab 0"):
        export_gguf(draft[0], TARGET, tmp_path / "d.gguf", draft_vocab=0)
    assert not (tmp_path / "d.gguf").exists()
