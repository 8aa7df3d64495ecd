import json

import pytest
import torch

from lilicorr.datagen.answer_pack import pack_answers, read_pack, unpack_answers
from lilicorr.datagen.regenerate import load_regenerated


def test_unpack_rebuilds_the_regenerated_file_byte_for_byte(regenerated, tiny_target_dir, tmp_path):
    out, _ = regenerated
    pack = tmp_path / "x.answers.safetensors"
    facts = pack_answers(out, pack)
    data = load_regenerated(out)
    assert facts["rows"] == 7 and facts["answer_tokens"] == int(data["loss_mask"].sum())
    _, tensors = read_pack(pack)
    assert tensors["answers"].dtype == torch.uint16  # the tiny vocabulary fits
    assert tensors["answers"].numel() == facts["answer_tokens"]  # answers only: no prompts, no padding
    assert tensors["lengths"].tolist() == data["loss_mask"].sum(1).tolist()
    rebuilt = tmp_path / "rebuilt.safetensors"
    meta = unpack_answers(pack, str(tiny_target_dir), rebuilt)
    assert rebuilt.read_bytes() == out.read_bytes()
    assert meta["sha256_16"] == json.loads(out.with_suffix(".safetensors.json").read_text())["sha256_16"]
    assert meta["unpacked"] and not unpack_answers(pack, str(tiny_target_dir), rebuilt)["unpacked"]  # kept as is
    # to where it was packed from, by default: a file there with other data is never overwritten
    out.write_bytes(out.read_bytes()[:-1] + b" ")
    with pytest.raises(ValueError, match="exists with other data"):
        unpack_answers(pack, str(tiny_target_dir))
    out.unlink()
    unpack_answers(pack, str(tiny_target_dir))
    assert out.read_bytes() == rebuilt.read_bytes()


def test_unpack_refuses_other_prompts_and_writes_nothing(regenerated, tiny_target_dir, tmp_path):
    out, prompts = regenerated
    pack = tmp_path / "x.answers.safetensors"
    pack_answers(out, pack)
    other = tmp_path / "other.jsonl"
    other.write_text(prompts.read_text().replace("def f3", "def g3"))
    rebuilt = tmp_path / "rebuilt.safetensors"
    with pytest.raises(ValueError, match="sha256 .* differs from the pack's prompts file"):
        unpack_answers(pack, str(tiny_target_dir), rebuilt, prompts=str(other))
    assert not rebuilt.exists()


def test_unpack_refuses_a_rebuild_that_differs_and_writes_nothing(regenerated, tiny_target_dir, tmp_path):
    """Same prompts file, but rows that no longer rebuild the packed bytes (here: a pack whose record was
    altered to another prompt budget's padding) — the sha256 check names it and no file is left behind."""
    from safetensors.torch import load_file, save_file

    out, _ = regenerated
    pack = tmp_path / "x.answers.safetensors"
    pack_answers(out, pack)
    facts, _ = read_pack(pack)
    facts["config"]["max_prompt_tokens"] = 66  # the same 7 prompts fit, but rows are 2 columns wider
    bad = tmp_path / "bad.answers.safetensors"
    save_file(load_file(str(pack)), str(bad), metadata={"lilicorr_answer_pack": json.dumps(facts)})
    rebuilt = tmp_path / "rebuilt.safetensors"
    with pytest.raises(ValueError, match="not the packed file's"):
        unpack_answers(bad, str(tiny_target_dir), rebuilt)
    assert not rebuilt.exists() and not list(tmp_path.glob(".rebuilt*"))


def test_read_pack_names_a_file_that_is_not_a_pack(regenerated, tmp_path):
    out, _ = regenerated
    with pytest.raises(ValueError, match="not an answer pack"):
        read_pack(out)
    garbage = tmp_path / "g.safetensors"
    garbage.write_text("not a tensor file")
    with pytest.raises(ValueError, match="not a safetensors file"):
        read_pack(garbage)
