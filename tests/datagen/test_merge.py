"""``lilicorr data merge``: data files and shard folders into one training file."""

import json

import torch
from safetensors.torch import save_file

from lilicorr.cli.main import main
from lilicorr.datagen.regenerate import load_regenerated


def _data(n: int, length: int, first: int) -> dict[str, torch.Tensor]:
    tokens = torch.arange(first, first + n * length, dtype=torch.int32).view(n, length)
    mask = torch.zeros(n, length, dtype=torch.bool)
    mask[:, length // 2 :] = True
    return {"tokens": tokens, "loss_mask": mask, "sampled": torch.arange(n) % 2 == 1}


def test_merge_pads_to_the_longest_row_and_keeps_order(tmp_path):
    a, b = _data(3, 8, 1000), _data(2, 12, 5000)
    save_file(a, str(tmp_path / "a.safetensors"))
    shards = tmp_path / "b.shards"  # a run in progress: its finished shards only, by index
    shards.mkdir()
    save_file({k: v[:1].contiguous() for k, v in b.items()}, str(shards / "00000.safetensors"))
    save_file({k: v[1:].contiguous() for k, v in b.items()}, str(shards / "00001.safetensors"))
    save_file({k: v[:1].contiguous() for k, v in a.items()}, str(shards / "00002.safetensors"))  # unfinished: no entry
    (shards / "manifest.json").write_text(json.dumps({"shards": {"00000": {}, "00001": {}}}))
    out = tmp_path / "m.safetensors"
    assert main(["data", "merge", str(tmp_path / "a.safetensors"), str(shards), "--out", str(out)]) == 0
    m = load_regenerated(out)
    assert m["tokens"].shape == (5, 12)
    assert torch.equal(m["tokens"][:3, :8], a["tokens"]) and not m["loss_mask"][:3, 8:].any()
    assert torch.equal(m["tokens"][3:], b["tokens"]) and torch.equal(m["loss_mask"][3:], b["loss_mask"])
    assert torch.equal(m["sampled"], torch.cat([a["sampled"], b["sampled"]]))
    meta = json.loads((tmp_path / "m.safetensors.json").read_text())
    assert meta["answer_tokens"] == int(a["loss_mask"].sum() + b["loss_mask"].sum())
    assert [s["rows"] for s in meta["inputs"]] == [3, 2] and len(meta["inputs"][1]["files"]) == 2


def test_merge_refuses_bad_inputs_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "m.safetensors"
    assert main(["data", "merge", str(tmp_path / "missing.safetensors"), "--out", str(out)]) == 2
    empty = tmp_path / "s"
    empty.mkdir()
    assert main(["data", "merge", str(empty), "--out", str(out)]) == 2
    assert "manifest.json" in capsys.readouterr().err and not out.exists()


def test_merge_keeps_only_greedy_or_sampled_rows_in_order(tmp_path, capsys):
    a, b = _data(5, 8, 1000), _data(4, 8, 5000)
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    inputs = [str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")]
    out = tmp_path / "g.safetensors"
    assert main(["data", "merge", *inputs, "--rows", "greedy", "--out", str(out)]) == 0
    g = load_regenerated(out)
    both = torch.cat([a["tokens"], b["tokens"]])
    assert torch.equal(g["tokens"], both[[0, 2, 4, 5, 7]]) and not g["sampled"].any()  # a's rows 0,2,4; b's 0,2
    meta = json.loads((tmp_path / "g.safetensors.json").read_text())
    assert meta["sequences"] == 5 and meta["rows"] == "greedy" and meta["rows_of_inputs"] == 9
    s = tmp_path / "s.safetensors"
    assert main(["data", "merge", *inputs, "--rows", "sampled", "--out", str(s)]) == 0
    assert torch.equal(load_regenerated(s)["tokens"], both[[1, 3, 6, 8]])
    only_greedy = tmp_path / "only.safetensors"
    save_file({**a, "sampled": torch.zeros(5, dtype=torch.bool)}, str(only_greedy))
    none = tmp_path / "none.safetensors"
    assert main(["data", "merge", str(only_greedy), "--rows", "sampled", "--out", str(none)]) == 2
    assert "none of the 5 rows" in capsys.readouterr().err and not none.exists()


def test_merge_drops_other_answers_and_later_turns_of_held_out_prompts(tmp_path, capsys):
    """--held-out F: a row whose prompt equals or continues one of F's first rows' prompts is not trained on;
    a row that merely shares tokens after its own prompt start, or a shorter prompt, is kept."""
    held = _data(3, 8, 1000)  # prompts: the first 4 columns of each row
    save_file(held, str(tmp_path / "held.safetensors"))
    other = _data(5, 12, 5000)
    other["tokens"][0, :4] = held["tokens"][1, :4]  # the same prompt, answered otherwise: dropped
    other["tokens"][1, :4] = held["tokens"][2, :4]  # a later turn: the held-out prompt, then more context
    other["loss_mask"][1, :] = False
    other["loss_mask"][1, 9:] = True
    other["tokens"][2, :3] = held["tokens"][0, :3]  # only a prefix of a held-out prompt: kept
    other["tokens"][3, 6:10] = held["tokens"][0, :4]  # a held-out prompt inside an answer: kept
    save_file(other, str(tmp_path / "other.safetensors"))
    out = tmp_path / "m.safetensors"
    args = ["data", "merge", str(tmp_path / "other.safetensors"), "--out", str(out)]
    assert main([*args, "--held-out", str(tmp_path / "held.safetensors"), "--held-out-rows", "3"]) == 0
    assert torch.equal(load_regenerated(out)["tokens"], other["tokens"][2:])
    meta = json.loads((tmp_path / "m.safetensors.json").read_text())
    assert meta["held_out"]["dropped"] == 2 and meta["sequences"] == 3
    assert main([*args, "--held-out", str(tmp_path / "held.safetensors"), "--held-out-rows", "1"]) == 0
    assert len(load_regenerated(out)["tokens"]) == 5  # only row 0's prompt held out: no row starts with it
