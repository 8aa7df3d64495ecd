"""GGUF drafter export with llama.cpp's own converter, read back with llama.cpp's own gguf-py."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def lilicorr_draft(tmp_path_factory):
    from lilicorr.checkpoint import save_draft
    from lilicorr.runtime.runtime import TargetRuntime
    from lilicorr.training.draft_config import DraftTrainConfig, build_model

    if not (TARGET / "config.json").exists():
        pytest.fail(f"{TARGET} missing: `make target` builds it")
    target = TargetRuntime.load(TARGET)
    cfg = DraftTrainConfig(target=str(TARGET), data="-", out="-", mode="lilicorr", num_layers=1, head_hidden_size=64)
    out = tmp_path_factory.mktemp("gguf") / "draft"
    save_draft(build_model(cfg, target), out)
    return out


def test_lilicorr_drafter_exports_as_its_dflash_backbone(lilicorr_draft, tmp_path):
    from lilicorr.checkpoint import load_draft
    from lilicorr.export.gguf import export_gguf, source_dir

    info = export_gguf(lilicorr_draft, TARGET, tmp_path / "d.gguf")
    assert info["head_dropped"] and Path(info["gguf"]).stat().st_size == info["bytes"] > 0
    sys.path.insert(0, str(source_dir() / "gguf-py"))  # llama.cpp's gguf-py (has the DFlash keys)
    try:
        import gguf

        reader = gguf.GGUFReader(str(tmp_path / "d.gguf"))
    finally:
        sys.path.pop(0)
    fields = {f.name: f for f in reader.fields.values()}
    arch = bytes(fields["general.architecture"].parts[-1]).decode()
    assert arch == "dflash"
    cfg = load_draft(lilicorr_draft).cfg
    assert int(fields["tokenizer.ggml.mask_token_id"].parts[-1][0]) == cfg.mask_token_id == 16
    assert int(fields[f"{arch}.block_size"].parts[-1][0]) == cfg.block_size
    names = {t.name for t in reader.tensors}
    assert not any("lilicorr" in n for n in names) and len(names) > 5
    assert not list(tmp_path.glob(".*.tmp"))  # nothing half-written left behind


def test_gguf_export_errors_are_named(lilicorr_draft, tmp_path):
    from lilicorr.export.gguf import export_gguf

    with pytest.raises(ValueError, match="not a Hugging Face model folder"):
        export_gguf(lilicorr_draft, tmp_path / "nothing", tmp_path / "d.gguf")
    assert not (tmp_path / "d.gguf").exists()


def test_gguf_export_refuses_a_convolution_drafter_by_name(lilicorr_draft, tmp_path):
    """llama.cpp would read the convolution as DFlash2 and fail on the selector keys it lacks: refused up front,
    naming the config field, and no file is written."""
    import json
    import shutil

    from lilicorr.export.gguf import export_gguf

    conv = tmp_path / "conv"
    shutil.copytree(lilicorr_draft, conv)
    cfg = json.loads((conv / "config.json").read_text())
    cfg["dflash_config"] |= {"conv_kernel_size": 2, "conv_group_size": 16}
    (conv / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json: dflash_config\.conv_kernel_size=2 .*DFlash2's selector"):
        export_gguf(conv, TARGET, tmp_path / "d.gguf")
    assert not (tmp_path / "d.gguf").exists() and not list(tmp_path.glob(".*.tmp"))
