"""``TrainRun``: ``--resume`` continues only the run its folder holds."""

from __future__ import annotations

import pytest
import torch

from lilicorr.training.run import TrainRun


def _run(run_dir, config, resume):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return TrainRun(run_dir, model, opt, torch.Generator(), 4, "test", 60.0, resume, config=config), model


def test_resume_refuses_another_runs_checkpoint_and_loads_nothing(tmp_path):
    config = {"mode": "head", "init": "models/smollm2-dflash", "lr": 1e-3, "steps": 4, "threads": 1, "out": "a"}
    first, model = _run(tmp_path, config, resume=False)
    first.finish_step({"loss": 1.0})
    first.close()
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    # the same run, resumed with more steps, other threads and another output folder: continues
    again, _ = _run(tmp_path, {**config, "steps": 8, "threads": 2, "out": "b"}, resume=True)
    assert again.step == 1

    # another backbone and another lr in the same folder: refused, naming both options and both values
    other = {**config, "init": "runs/v5/smollm2-dflash", "lr": 3e-3}
    model_b = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in model_b.state_dict().items()}
    with pytest.raises(ValueError, match="another run") as err:
        TrainRun(
            tmp_path,
            model_b,
            torch.optim.AdamW(model_b.parameters()),
            torch.Generator(),
            4,
            "t",
            60.0,
            True,
            config=other,
        )
    msg = str(err.value)
    assert "init: checkpoint 'models/smollm2-dflash', this run 'runs/v5/smollm2-dflash'" in msg
    assert "lr: checkpoint 0.001, this run 0.003" in msg and "checkpoint.pt" in msg
    for k, v in model_b.state_dict().items():  # nothing was loaded into the refused run's model
        assert torch.equal(v, before[k]) and not torch.equal(v, saved[k])

    # without --resume the folder starts over
    fresh, _ = _run(tmp_path, other, resume=False)
    assert fresh.step == 0


def test_checkpoints_without_a_config_still_resume(tmp_path):
    """Checkpoints written before the configuration was saved (or by a caller without one) are not checked."""
    legacy, _ = _run(tmp_path, None, resume=False)
    legacy.finish_step({"loss": 1.0})
    legacy.close()
    resumed, _ = _run(tmp_path, {"lr": 1.0}, resume=True)
    assert resumed.step == 1


def test_each_resumed_segment_keeps_its_thread_count(tmp_path):
    """A run resumed with other threads records both, and the card names each stretch instead of reporting the
    last segment's threads for the whole wall time."""
    from lilicorr.cards.draft import _threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        first, _ = _run(tmp_path, {"lr": 1.0}, resume=False)
        first.finish_step({"loss": 1.0})
        first.close()
        torch.set_num_threads(2)
        again, _ = _run(tmp_path, {"lr": 1.0}, resume=True)
        again.finish_step({"loss": 1.0})
        again.close()
        third, _ = _run(tmp_path, {"lr": 1.0}, resume=True)  # same threads again: one stretch with the second
    finally:
        torch.set_num_threads(before)
    segments = third.state["segments"]
    assert segments == [{"from_step": 0, "threads": 1}, {"from_step": 1, "threads": 2}, {"from_step": 2, "threads": 2}]
    summary = {"threads": 2, "segments": segments}
    assert _threads(summary, {"threads": 2}) == "1 thread(s) from step 0, then 2 thread(s) from step 1"
    assert _threads({"threads": 2, "segments": segments[1:]}, {"threads": 2}) == "2 thread(s)"
    assert _threads({}, {"threads": 3}) == "3 thread(s)"  # summaries from before segments were recorded


def test_a_paused_step_is_not_training_time(tmp_path, monkeypatch):
    """A run stopped for ten minutes (SIGSTOP while a benchmark timed something) counts the steps' own time only:
    the curves' minutes axis and time budgets measure training, not the pause."""
    import json

    clock = [1000.0]
    monkeypatch.setattr("lilicorr.training.run.time.time", lambda: clock[0])
    run, _ = _run(tmp_path, {"steps": 40}, resume=False)
    run.total_steps = 40
    for _ in range(10):  # 2 s a step
        clock[0] += 2.0
        run.finish_step({"loss": 1.0})
    assert run.state["elapsed_s"] == pytest.approx(20.0)
    clock[0] += 600.0 + 2.0  # stopped for ten minutes inside the next step
    run.finish_step({"loss": 1.0})
    assert run.state["elapsed_s"] == pytest.approx(22.0)  # the paused step counts as one ordinary step
    clock[0] += 30.0  # a slow step (30 s: under the 60 s floor) is training time
    run.finish_step({"loss": 1.0})
    assert run.state["elapsed_s"] == pytest.approx(52.0)
    events = [json.loads(x) for x in (tmp_path / "train.log").read_text().splitlines() if '"pause"' in x]
    assert [(e["step"], e["seconds"]) for e in events] == [(11, 600.0)]


def _data(path, tokens: torch.Tensor) -> str:
    from safetensors.torch import save_file

    save_file({"tokens": tokens, "loss_mask": tokens > 2, "sampled": torch.zeros(len(tokens), dtype=torch.bool)}, path)
    return str(path)


def test_resume_takes_data_that_only_grew_and_refuses_other_data(tmp_path):
    """A campaign's data may grow between segments (the old file merged with newly regenerated rows): resumed
    when the new file's first rows are the old rows, token for token; refused when any of them differs."""
    g = torch.Generator().manual_seed(0)
    old = torch.randint(0, 9, (6, 5), generator=g)
    more = torch.randint(0, 9, (4, 5), generator=g)
    a = _data(tmp_path / "a.safetensors", old)
    grown = _data(tmp_path / "grown.safetensors", torch.cat([old, more]))
    changed = old.clone()
    changed[3, 2] = (changed[3, 2] + 1) % 9
    other = _data(tmp_path / "other.safetensors", torch.cat([changed, more]))
    config = {"data": a, "max_sequences": 6, "lr": 1e-3}
    first, _ = _run(tmp_path / "run", config, resume=False)
    first.finish_step({"loss": 1.0})
    first.close()
    again, _ = _run(tmp_path / "run", {**config, "data": grown, "max_sequences": 10}, resume=True)
    assert again.step == 1 and "data extended" in again.state["data_changes"][0]["note"]
    with pytest.raises(ValueError, match="data: checkpoint"):
        _run(tmp_path / "run", {**config, "data": other, "max_sequences": 10}, resume=True)
    with pytest.raises(ValueError, match="max_sequences: checkpoint 6, this run 4"):  # fewer rows: not a growth
        _run(tmp_path / "run", {**config, "data": grown, "max_sequences": 4}, resume=True)
