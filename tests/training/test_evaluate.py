"""``lilicorr train eval``: a finished drafter's held-out metrics, computed as its training validated it."""

import json

import pytest
import torch
from safetensors.torch import save_file

from lilicorr.cli.main import main
from lilicorr.datagen.regenerate import load_regenerated
from lilicorr.training.draft import train_draft
from lilicorr.training.evaluate import evaluate_draft
from tests.training.test_draft_training import _cfg
from tests.training.test_train_infer_parity import _rule_data


@pytest.fixture(scope="module")
def rule_data(tmp_path_factory):
    """The learning test's rule rows (learnable in seconds, so the figures compared are far from a drafter's
    floor), every other row marked sampled so that the per-kind figures are compared too."""
    path = tmp_path_factory.mktemp("rule") / "rule.safetensors"
    _rule_data(path)
    data = load_regenerated(path)
    data["sampled"] = torch.arange(len(data["tokens"])) % 2 == 1
    save_file({k: v.contiguous() for k, v in data.items()}, str(path))
    return path


def _train(tiny_target_dir, data, out, mode):
    return train_draft(_cfg(tiny_target_dir, data, out, mode, steps=60, gamma=1.0))


@pytest.mark.parametrize("mode", ["dflash", "lilicorr"])
def test_eval_reproduces_the_training_runs_final_validation(tiny_target_dir, rule_data, tmp_path, mode):
    """Same rows, same blocks, same figures as the run's own last validation (the checkpoint is stored in bf16,
    so figures may move by a rounding; the blocks must be exactly the same ones)."""
    summary = _train(tiny_target_dir, rule_data, tmp_path / mode, mode)
    res = evaluate_draft(tmp_path / mode, tiny_target_dir, rule_data, val_sequences=8, batch_size=4)
    val = summary["final_val"]
    assert val["tau_top1_estimate"] > 1.5  # learned: the comparison below is not between two floors
    assert res["mode"] == mode and res["blocks"] == val["blocks"] > 0
    for kind in ("greedy", "sampled"):
        assert res[kind]["blocks"] == val[kind]["blocks"]
    assert res["tau_top1_estimate"] == pytest.approx(val["tau_top1_estimate"], abs=0.02)
    assert res["dflash_loss"] == pytest.approx(val["dflash_loss"], rel=0.01)  # the run's γ, read from its summary
    if mode == "lilicorr":
        assert res["head_loss"] == pytest.approx(val["head_loss"], rel=0.05)
        assert res["walk_prefix"] == pytest.approx(val["walk_prefix"], abs=0.05)
    # another number of held-out rows is other blocks: the figure is tied to the rows asked for
    fewer = evaluate_draft(tmp_path / mode, tiny_target_dir, rule_data, val_sequences=4, batch_size=4)
    assert fewer["blocks"] < res["blocks"]


def test_eval_cli_writes_all_results_or_nothing(tiny_target_dir, rule_data, tmp_path, capsys):
    _train(tiny_target_dir, rule_data, tmp_path / "d", "dflash")
    out = tmp_path / "eval.json"
    base = ["train", "eval", "--target", str(tiny_target_dir), "--data", str(rule_data), "--val-sequences", "8"]
    assert main([*base, str(tmp_path / "d"), str(tmp_path / "d"), "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert len(results) == 2 and results[0]["blocks"] == results[1]["blocks"] > 0
    out.unlink()
    # a missing folder is named before anything runs; a broken checkpoint after the good one writes nothing
    assert main([*base, str(tmp_path / "d"), str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "nope" in capsys.readouterr().err and not out.exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    assert main([*base, str(tmp_path / "d"), str(broken), "--out", str(out)]) == 2
    assert "broken" in capsys.readouterr().err and not out.exists()
    # a target folder that is not a model: named, nothing written
    not_model = tmp_path / "not-a-model"
    not_model.mkdir()
    bad_target = [*base[:3], str(not_model), *base[4:]]
    assert main([*bad_target, str(tmp_path / "d"), "--out", str(out)]) == 2
    assert "not-a-model" in capsys.readouterr().err and not out.exists()
    # more held-out rows than the file has: a clear error
    assert main([*base[:-1], "1000", str(tmp_path / "d")]) == 2
    assert "1000 held-out rows" in capsys.readouterr().err
