"""``lilicorr train eval``: a finished drafter's held-out metrics, computed as its training validated it."""

import json

import pytest
import torch
from safetensors.torch import save_file

from lilicorr.cli.main import main
from lilicorr.training.draft import train_draft
from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.evaluate import evaluate_draft


@pytest.fixture(scope="module")
def rule_data(tmp_path_factory):
    """Rows where every next token is a fixed permutation of the current one (learnable in seconds, so the
    figures compared are far from a drafter's floor), every other row marked sampled."""
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(16, generator=g)
    rows = []
    for _ in range(96):
        t = [int(torch.randint(16, (1,), generator=g))]
        while len(t) < 32:
            t.append(int(perm[t[-1]]))
        rows.append([300 + x for x in t])
    tokens = torch.tensor(rows, dtype=torch.int32)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False
    path = tmp_path_factory.mktemp("rule") / "rule.safetensors"
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.arange(len(rows)) % 2 == 1}, str(path))
    return path


def _train(tiny_target_dir, rule_data, out, mode):
    cfg = DraftTrainConfig(
        target=str(tiny_target_dir),
        data=str(rule_data),
        out=str(out),
        mode=mode,
        run_dir=str(out) + "-run",
        num_layers=1,
        block_size=4,
        candidate_topk=4,
        head_layers=1,
        head_heads=2,
        factor_dim=16,
        steps=60,
        batch_size=4,
        anchors=4,
        lr=1e-2,
        gamma=1.0,
        val_sequences=8,
        checkpoint_minutes=100,
    )
    return train_draft(cfg)


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
    # more held-out rows than the file has: a clear error
    assert main([*base[:-1], "1000", str(tmp_path / "d")]) == 2
    assert "1000 held-out rows" in capsys.readouterr().err
