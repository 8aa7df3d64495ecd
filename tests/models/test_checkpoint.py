import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from lilicorr.checkpoint import (
    FLOAT_ONLY_MODULES,
    CheckpointError,
    load_draft,
    save_draft,
    to_scheme_a,
    to_scheme_b,
)
from lilicorr.models.config import DraftConfig
from lilicorr.models.draft import DraftModel
from tests.models.helpers import small_cfg

TARGET = SimpleNamespace(vocab_size=300, hidden_size=32, num_hidden_layers=3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    model = DraftModel(small_cfg(head_width=48)).init_weights(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_draft(model, root / "a")
    save_draft(model, root / "b", scheme="B")
    return model, root


def _copy(saved, tmp_path, name="c"):
    dst = tmp_path / name
    shutil.copytree(saved[1] / "a", dst)
    return dst


def _edit_config(path, fn):
    cfg = json.loads((path / "config.json").read_text())
    fn(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def test_round_trip_bit_exact(saved):
    model, root = saved
    loaded = load_draft(root / "a", TARGET, dtype=torch.bfloat16)
    for name, t in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], t.to(torch.bfloat16)), name
    cfg = json.loads((root / "a" / "config.json").read_text())
    assert cfg["architectures"] == ["LiLiCorrDraftModel"] and cfg["model_type"] == "qwen3"
    dfc = cfg["dflash_config"]
    assert dfc["block_size"] == 6 and dfc["mask_token_id"] == 3 and dfc["target_layer_ids"] == [0, 2]
    assert dfc["lilicorr_enabled"] is True and dfc["lilicorr_candidate_topk"] == 4
    assert DraftConfig.from_dict(cfg) == model.cfg


def test_scheme_b_written_and_loaded(saved):
    model, root = saved
    names_b = set(load_file(root / "b" / "model.safetensors"))
    assert "lilicorr.feature_mlp.0.weight" in names_b and "lilicorr.layers.1.mlp.2.bias" in names_b
    assert "lilicorr.feature_norm.weight" not in names_b
    a = load_draft(root / "a", TARGET)
    b = load_draft(root / "b", TARGET)
    for name, t in a.state_dict().items():
        assert torch.equal(b.state_dict()[name], t), name


def test_scheme_mapping_is_a_bijection():
    names = list(DraftModel(small_cfg(head_width=48)).state_dict())
    assert [to_scheme_a(to_scheme_b(n)) for n in names] == names
    assert to_scheme_b("lilicorr.feature_norm.bias") == "lilicorr.feature_mlp.0.bias"
    assert to_scheme_b("lilicorr.layers.0.mlp.up_proj.weight") == "lilicorr.layers.0.mlp.0.weight"
    assert to_scheme_a("model.lilicorr.feature_mlp.3.weight") == "lilicorr.feature_mlp.down_proj.weight"
    assert to_scheme_b("layers.0.mlp.up_proj.weight") == "layers.0.mlp.up_proj.weight"  # backbone untouched


def test_model_prefix_accepted(saved, tmp_path):
    d = _copy(saved, tmp_path)
    sd = load_file(d / "model.safetensors")
    save_file({f"model.{k}": v for k, v in sd.items()}, d / "model.safetensors")
    load_draft(d, TARGET)


def test_dflash_folder_loads_as_vanilla(tmp_path):
    model = DraftModel(small_cfg(lilicorr=False))
    save_draft(model, tmp_path / "v")
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and not any(
        k.startswith("lilicorr") for k in cfg["dflash_config"]
    )
    # z-lab style: block_size only at top level, extra embed_tokens tensor, auto_map.
    del cfg["dflash_config"]["block_size"]
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    (tmp_path / "v" / "config.json").write_text(json.dumps(cfg))
    sd = load_file(tmp_path / "v" / "model.safetensors")
    sd["embed_tokens.weight"] = torch.zeros(300, 32, dtype=torch.bfloat16)
    save_file(sd, tmp_path / "v" / "model.safetensors")
    loaded = load_draft(tmp_path / "v", TARGET)
    assert loaded.lilicorr is None and loaded.cfg.block_size == 6


BAD_CONFIGS = [
    (lambda c: c.update(architectures=["LlamaForCausalLM"]), "'architectures'"),
    (lambda c: c["dflash_config"].pop("lilicorr_factor_dim"), "lilicorr_factor_dim' missing"),
    (lambda c: c["dflash_config"].update(lilicorr_enabled=False), "lilicorr_enabled"),
    (lambda c: c["dflash_config"].update(lilicorr_candidate_topk=6), "lilicorr_candidate_topk' = 6"),
    (lambda c: c["dflash_config"].update(lilicorr_candidate_topk=32), "lilicorr_candidate_topk' = 32"),
    (lambda c: c["dflash_config"].update(lilicorr_num_heads=5), "lilicorr_num_heads' = 5 must divide"),
    (lambda c: c["dflash_config"].update(lilicorr_num_heads=0), "lilicorr_num_heads' = 0"),
    (lambda c: c["dflash_config"].update(lilicorr_vector_eps=0.5), "lilicorr_vector_eps' = 0.5"),
    (lambda c: c["dflash_config"].update(lilicorr_vector_eps=0.0), "lilicorr_vector_eps' = 0.0"),
    (lambda c: c["dflash_config"].update(lilicorr_logit_scale=-1.0), "lilicorr_logit_scale' = -1.0"),
    (lambda c: c["dflash_config"].update(lilicorr_factor_dim=0), "lilicorr_factor_dim' = 0"),
    (lambda c: c["dflash_config"].update(lilicorr_num_layers="2"), "lilicorr_num_layers' must be an integer"),
    (lambda c: c["dflash_config"].update(lilicorr_hidden_size=-8), "lilicorr_hidden_size' = -8"),
    (lambda c: c["dflash_config"].update(lilicorr_mlp_ratio=0), "lilicorr_mlp_ratio' = 0"),
    (lambda c: c["dflash_config"].update(conv_kernel_size=2), "set both or neither"),
    (
        lambda c: c["dflash_config"].update(conv_kernel_size=2, conv_group_size=5),
        "conv_group_size' = 5 must divide",
    ),
    (lambda c: c["dflash_config"].update(mask_token_id=300), "mask_token_id' = 300 outside the vocabulary"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[]), "target_layer_ids' must be a non-empty list"),
    (lambda c: (c["dflash_config"].pop("block_size"), c.pop("block_size")), "block_size' missing"),
    (lambda c: c["dflash_config"].update(block_size=1), "block_size' must be an integer >= 2"),
    (lambda c: c.pop("hidden_size"), "'hidden_size' missing"),
    (lambda c: c.update(num_key_value_heads=3), "num_key_value_heads' = 3 must divide"),
]


@pytest.mark.parametrize(("mutate", "message"), BAD_CONFIGS)
def test_each_config_rule_names_the_field(saved, tmp_path, mutate, message):
    d = _copy(saved, tmp_path)
    _edit_config(d, mutate)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_draft(d, TARGET)


def _edit_tensors(d, fn):
    sd = load_file(d / "model.safetensors")
    fn(sd)
    save_file(sd, d / "model.safetensors")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda sd: sd.pop("lilicorr.in_head.weight"), r"missing tensors \['lilicorr.in_head.weight'\]"),
        (
            lambda sd: sd.pop("layers.1.mlp.up_proj.weight"),
            r"missing tensors \['layers.1.mlp.up_proj.weight'\]",
        ),
        (
            lambda sd: sd.update({"lilicorr.extra.weight": torch.zeros(2)}),
            r"unexpected tensors \['lilicorr.extra.weight'\]",
        ),
        (
            lambda sd: sd.update({"lilicorr.out_head.weight": torch.zeros(16, 47)}),
            r"'lilicorr.out_head.weight' has shape \[16, 47\], expected \[16, 48\]",
        ),
        (
            lambda sd: sd.update({"lilicorr.slot_embedding": torch.zeros(1, 1, 4, 1, 48)}),
            "slot_embedding' has shape",
        ),
    ],
)
def test_each_tensor_rule_names_the_tensor(saved, tmp_path, mutate, message):
    d = _copy(saved, tmp_path)
    _edit_tensors(d, mutate)
    with pytest.raises(CheckpointError, match=message):
        load_draft(d, TARGET)


def test_token_proj_must_be_absent_when_widths_equal(tmp_path):
    model = DraftModel(small_cfg(head_width=0))
    save_draft(model, tmp_path / "e")
    _edit_tensors(tmp_path / "e", lambda sd: sd.update({"lilicorr.token_proj.weight": torch.zeros(32, 32)}))
    with pytest.raises(CheckpointError, match="token_proj.weight' present but lilicorr_hidden_size"):
        load_draft(tmp_path / "e", TARGET)


def test_has_own_lm_head_without_tensor(saved, tmp_path):
    d = _copy(saved, tmp_path)
    _edit_config(d, lambda c: c.update(has_own_lm_head=True))
    with pytest.raises(CheckpointError, match="'has_own_lm_head' is true but tensor 'lm_head.weight' is missing"):
        load_draft(d, TARGET)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            SimpleNamespace(vocab_size=301, hidden_size=32, num_hidden_layers=3),
            "'vocab_size' = 300 but the target has 301",
        ),
        (
            SimpleNamespace(vocab_size=300, hidden_size=64, num_hidden_layers=3),
            "'hidden_size' = 32 but the target",
        ),
        (
            SimpleNamespace(vocab_size=300, hidden_size=32, num_hidden_layers=2),
            r"\[2\] beyond the target's 2 layers",
        ),
    ],
)
def test_target_compatibility(saved, target, message):
    with pytest.raises(CheckpointError, match=message):
        load_draft(saved[1] / "a", target)


def test_num_speculative_tokens_bounds(saved):
    from lilicorr.decoding.config import SpecConfig, check_num_speculative_tokens, draft_length

    block = saved[0].cfg.block_size
    assert check_num_speculative_tokens(1, block) == 1 and check_num_speculative_tokens(5, block) == 5
    assert draft_length(SpecConfig(), block) == block - 1  # the default: the whole block after the anchor
    with pytest.raises(ValueError, match="num_speculative_tokens = 6: expected 1..5"):
        check_num_speculative_tokens(6, block)
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="must be a positive integer"):
            check_num_speculative_tokens(bad, block)


def test_missing_files_and_bad_json(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        load_draft(tmp_path / "nope")
    (tmp_path / "x").mkdir()
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_draft(tmp_path / "x")
    (tmp_path / "x" / "config.json").write_text("{bad")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_draft(tmp_path / "x")


def test_failed_save_leaves_previous_folder_intact(saved, tmp_path, monkeypatch):
    from lilicorr.checkpoint import io

    d = _copy(saved, tmp_path)
    before = (d / "model.safetensors").read_bytes()

    def boom(tensors, path, metadata=None):
        Path(path).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(io, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_draft(saved[0], d)
    assert (d / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_float_only_modules_listed():
    assert "lilicorr.out_head" in FLOAT_ONLY_MODULES and "lilicorr.feature_norm" in FLOAT_ONLY_MODULES
