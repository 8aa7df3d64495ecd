"""The training campaign: its file is checked key by key, arms alternate at equal steps, the LR plan spans the
campaign, and a campaign killed at an arbitrary moment resumes to exactly the weights of an uncut one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lilicorr.training.campaign import arm_step, load_campaign, next_segment
from lilicorr.training.campaign_run import campaign_status, read_events, run_campaign
from lilicorr.training.draft_config import DraftTrainConfig, lr_at


def _write(tmp: Path, target, data, name="c", steps=4, warm: str | None = None, extra: str = "") -> Path:
    run_dir = tmp / f"{name}-run"
    warm_line = f'warm_start = "{warm}"' if warm else ""
    text = f"""
name = "{name}"
run_dir = "{run_dir}"
steps = {steps}
segment_steps = 2
threads = 1
[train]
target = "{target}"
data = "{data}"
block_size = 4
candidate_topk = 4
head_layers = 1
head_heads = 2
factor_dim = 16
num_layers = 1
batch_size = 4
anchors = 4
lr = 3e-3
val_sequences = 8
bf16 = false
checkpoint_minutes = 0.0
lr_schedule = "wsd"
{extra}
[arms.df]
mode = "dflash"
{warm_line}
[arms.lc]
mode = "lilicorr"
"""
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_campaign_file_is_checked_key_by_key(tmp_path):
    good = _write(tmp_path, "t", "d")
    camp = load_campaign(good)
    assert [a.name for a in camp.arms] == ["df", "lc"] and camp.steps == 4
    typo = _write(tmp_path, "t", "d", name="typo", extra="anchros = 3")
    with pytest.raises(ValueError, match=r"typo\.toml \[train\]: unknown key\(s\) anchros"):
        load_campaign(typo)
    managed = _write(tmp_path, "t", "d", name="managed", extra="stop_at = 3")
    with pytest.raises(ValueError, match="stop_at set by the campaign"):
        load_campaign(managed)
    bad_value = _write(tmp_path, "t", "d", name="bad", extra="decay_ratio = 0.0")
    with pytest.raises(ValueError, match="--decay-ratio 0.0"):  # an option's own check, at load, not hours later
        load_campaign(bad_value)
    with pytest.raises(FileNotFoundError, match="no campaign file"):
        load_campaign(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    "key, table, expected, broken, error",
    [
        ("prompts", '"p/eval.jsonl" = ["mt-bench", "humaneval"]', {"p/eval.jsonl": ["mt-bench", "humaneval"]},
         ('"humaneval"', '"humaneva"'), r"\[data\] prompts: p/eval\.jsonl = .*expected a list of prompt sets"),
        ("prompts", '"p/raw.jsonl" = ["mt-bench:raw"]', {"p/raw.jsonl": ["mt-bench:raw"]},
         ('"mt-bench:raw"', '"mt-bench:rare"'), r"\[data\] prompts: p/raw\.jsonl = .*\(or SET:raw\)"),
        ("merges", '"d/all.safetensors" = ["d/a.safetensors", "d/b.shards"]',
         {"d/all.safetensors": ["d/a.safetensors", "d/b.shards"]},
         (', "d/b.shards"', ""), r"\[data\] merges: d/all\.safetensors = .*at least two data files"),
    ],
)  # fmt: skip
def test_a_plans_data_tables_are_checked_by_name(tmp_path, key, table, expected, broken, error):
    """``[data.prompts]``: files of known prompt sets; ``[data.merges]``: files of two or more inputs."""
    plan = _write(tmp_path, "t", "d", name="p")
    plan.write_text(plan.read_text() + f"[data.{key}]\n{table}\n")
    assert getattr(load_campaign(plan), key) == expected
    plan.write_text(plan.read_text().replace(*broken))
    with pytest.raises(ValueError, match=r"p\.toml " + error):
        load_campaign(plan)


def test_precision_follows_the_machine_unless_the_plan_names_it(tmp_path, monkeypatch):
    """A campaign outlives machines: bf16 autocast where bf16 is native, fp32 on an AVX2-only CPU (≈ 5× faster
    there); a plan's own ``bf16`` wins; and the precision may change when a run resumes on another machine."""
    from lilicorr.training import campaign
    from lilicorr.training.run import RESUMABLE_CHANGES

    plan = _write(tmp_path, "t", "d")
    plan.write_text(plan.read_text().replace("bf16 = false\n", ""))
    camp = load_campaign(plan)
    for native in (True, False):
        monkeypatch.setattr(campaign, "cpu_has_fast_bf16", lambda native=native: native)
        assert campaign.arm_config(camp, camp.arms[0], 2, None).bf16 is native
    pinned = load_campaign(_write(tmp_path, "t", "d", name="pinned"))  # bf16 = false in the plan
    monkeypatch.setattr(campaign, "cpu_has_fast_bf16", lambda: True)
    assert campaign.arm_config(pinned, pinned.arms[0], 2, None).bf16 is False
    assert "bf16" in RESUMABLE_CHANGES


def test_wsd_holds_the_lr_then_decays_it_linearly():
    cfg = DraftTrainConfig(target="t", data="d", out="o", mode="dflash", steps=100, lr=1.0, warmup_ratio=0.1,
                           lr_schedule="wsd", decay_ratio=0.2)  # fmt: skip
    assert lr_at(0, cfg) == pytest.approx(0.1)  # warm-up
    assert lr_at(10, cfg) == lr_at(79, cfg) == 1.0  # stable
    assert lr_at(90, cfg) == pytest.approx(0.5) and lr_at(100, cfg) == 0.0  # linear decay over the last 20 %
    cosine = DraftTrainConfig(target="t", data="d", out="o", mode="dflash", steps=100, lr=1.0, warmup_ratio=0.1)
    assert lr_at(55, cosine) == pytest.approx(0.5, abs=1e-6)  # the v6 recipe is unchanged


def _model(run_dir: Path, arm: str) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "runs" / arm / "checkpoint.pt", weights_only=False)["model"]


def test_a_killed_campaign_resumes_to_the_uncut_campaigns_weights(tiny_target_dir, regen_data, tmp_path):
    """The arms alternate two steps at a time; the driver is SIGKILLed mid-plan (wherever it is: inside a step,
    a checkpoint write, between segments) and run again: the weights equal an uncut campaign's exactly, since
    every step was checkpointed (checkpoint_minutes 0) — nothing is lost beyond the last checkpoint."""
    uncut = _write(tmp_path, tiny_target_dir, regen_data, name="uncut")
    camp = run_campaign(uncut, in_process=True)
    segments = [(e["arm"], e["from"], e["to"]) for e in read_events(camp.run_dir) if e["event"] == "segment"]
    assert segments == [("df", 0, 2), ("lc", 0, 2), ("df", 2, 4), ("lc", 2, 4)]
    assert next_segment(camp) is None and all(arm_step(camp, a) == 4 for a in camp.arms)

    cut = _write(tmp_path, tiny_target_dir, regen_data, name="cut")
    code = f"from lilicorr.training.campaign_run import run_campaign; run_campaign({str(cut)!r}, in_process=True)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.DEVNULL)
    ck = tmp_path / "cut-run" / "runs" / "lc" / "checkpoint.pt"
    deadline = time.time() + 120
    while not ck.exists() and proc.poll() is None and time.time() < deadline:  # cut inside the second arm
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cut_camp = load_campaign(cut)
    assert arm_step(cut_camp, cut_camp.arm("df")) < 4  # the cut left the plan unfinished
    run_campaign(cut, in_process=True)  # the same command resumes (the killed driver's pid file is stale)
    resumed_at = [e["steps"] for e in read_events(cut_camp.run_dir) if e["event"] == "start"][-1]
    assert resumed_at["df"] >= 2 and resumed_at["lc"] >= 1  # continued from the checkpoints, not from step 0
    for arm in ("df", "lc"):
        a, b = _model(camp.run_dir, arm), _model(cut_camp.run_dir, arm)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), f"{arm} {k} differs after the cut"
    status = campaign_status(cut_camp.run_dir)
    assert [a["step"] for a in status["arms"]] == [4, 4] and not status["running"]
    assert {a["started"] for a in status["arms"]} == {"from_scratch"}


def test_a_lost_disk_warm_starts_from_the_shipped_folder_and_says_so(tiny_target_dir, regen_data, tmp_path):
    first = run_campaign(_write(tmp_path, tiny_target_dir, regen_data, name="first", steps=2), in_process=True)
    shipped = first.arm_out(first.arm("df"))  # a finished drafter folder, as models/ would hold
    camp = run_campaign(
        _write(tmp_path, tiny_target_dir, regen_data, name="warm", steps=2, warm=str(shipped)), in_process=True
    )
    warm = [e for e in read_events(camp.run_dir) if e["event"] == "warm_start"]
    assert [(e["arm"], e["from"], e["its_steps"]) for e in warm] == [("df", str(shipped), 2)]
    assert campaign_status(camp.run_dir)["arms"][0]["started"] == "warm_start"
    assert not campaign_status(camp.run_dir)["eta_partial"]  # every arm has its pace (here: its plan done)


def test_a_second_driver_on_the_same_campaign_is_refused(tmp_path):
    path = _write(tmp_path, "t", "d", name="busy")
    run_dir = tmp_path / "busy-run"
    run_dir.mkdir()
    (run_dir / "campaign.pid").write_text(f"{os.getppid()} {os.getpgid(0)}\n")  # a live process: the test runner's
    with pytest.raises(RuntimeError, match="already running"):
        run_campaign(path, in_process=True)


def test_status_says_paused_while_the_driver_is_stopped(tmp_path):
    path = _write(tmp_path, "t", "d", name="idle")
    run_dir = tmp_path / "idle-run"
    run_dir.mkdir()
    driver = subprocess.Popen(["sleep", "60"], start_new_session=True)  # stands in for a driver started with setsid
    try:
        (run_dir / "campaign.pid").write_text(f"{driver.pid} {driver.pid}\n")
        assert (campaign_status(path)["running"], campaign_status(path)["paused"]) == (True, False)
        assert campaign_status(path)["eta_partial"]  # no arm has trained: its ETA is a lower bound, not 0 h
        os.kill(driver.pid, signal.SIGSTOP)
        deadline = time.time() + 5
        while not campaign_status(path)["paused"] and time.time() < deadline:
            time.sleep(0.05)
        assert campaign_status(path)["paused"]
        os.kill(driver.pid, signal.SIGCONT)
        deadline = time.time() + 5
        while campaign_status(path)["paused"] and time.time() < deadline:
            time.sleep(0.05)
        assert not campaign_status(path)["paused"]
    finally:
        driver.kill()
        driver.wait()


def test_promotion_needs_a_lead_on_both_measures_and_is_capped(tiny_target_dir, regen_data, tmp_path):
    import json

    from lilicorr.training.campaign_promote import MAX_PROMOTIONS, compare_for_promotion, promote

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": "def f(x):" * (i + 1), "category": "code"}) + "\n"
                               for i in range(2)))  # fmt: skip
    shipped = run_campaign(_write(tmp_path, tiny_target_dir, regen_data, name="old", steps=2), in_process=True)
    ship_dir = tmp_path / "models" / "df"
    import shutil

    shutil.copytree(shipped.arm_out(shipped.arm("df")), ship_dir)
    (ship_dir / "MODEL_CARD.md").write_text("# df\n")
    (ship_dir / "draft_vocab.json").write_text('{"token_ids": [3, 1, 2]}\n')  # counted from data, not weights
    engine = f'[engine]\nprompts = "{prompts}"\nnum_prompts = 2\nmax_new_tokens = 8\n'
    path = _write(tmp_path, tiny_target_dir, regen_data, name="new", steps=4)
    path.write_text(path.read_text().replace("[arms.df]", f'{engine}[arms.df]\npromote_to = "{ship_dir}"'))
    camp = run_campaign(path, in_process=True)
    arm = camp.arm("df")
    decision = compare_for_promotion(camp, arm, margin=1.0, num_prompts=2)  # a 100 % lead: not had
    assert set(decision["heldout_tau"]) == set(decision["engine_tau"]) == {"shipped", "candidate"}
    assert decision["step"] == 4 and not decision["promote"]
    with pytest.raises(ValueError, match="not ahead"):
        promote(camp, decision)
    assert json.loads((ship_dir / "training_summary.json").read_text())["steps"] == 2  # untouched
    anyway = {**decision, "promote": True}  # as a decision that passed would read
    for _ in range(MAX_PROMOTIONS):
        promote(camp, anyway)
    assert json.loads((ship_dir / "training_summary.json").read_text())["steps"] == 4  # the candidate's weights
    assert (ship_dir / "MODEL_CARD.md").read_text() == "# df\n"  # kept until `card draft` rewrites it
    assert json.loads((ship_dir / "draft_vocab.json").read_text())["token_ids"] == [3, 1, 2]  # carried over
    record = json.loads((ship_dir / "campaign.json").read_text())["promotions"]
    assert len(record) == MAX_PROMOTIONS and record[0]["campaign"] == "new" and record[0]["step"] == 4
    with pytest.raises(ValueError, match="already promoted 2 times"):
        promote(camp, anyway)
    assert not list(ship_dir.parent.glob("*.promoting")) and not list(ship_dir.parent.glob("*.retired"))


def test_a_target_with_nothing_shipped_gets_its_first_drafter_without_a_comparison(
    tiny_target_dir, regen_data, tmp_path
):
    """A new target (Gemma 3 270M's first campaign) has no shipped folder to beat: the decision measures the
    candidate alone, says so (``first``), and the promotion creates the folder, recorded as one promotion."""
    import json

    from lilicorr.training.campaign_promote import compare_for_promotion, promote

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "p0", "prompt": "def f(x):", "category": "code"}) + "\n")
    ship_dir = tmp_path / "models" / "new-target-df"
    engine = f'[engine]\nprompts = "{prompts}"\nnum_prompts = 1\nmax_new_tokens = 4\n'
    path = _write(tmp_path, tiny_target_dir, regen_data, name="first", steps=2)
    path.write_text(path.read_text().replace("[arms.df]", f'{engine}[arms.df]\npromote_to = "{ship_dir}"'))
    camp = run_campaign(path, in_process=True)
    decision = compare_for_promotion(camp, camp.arm("df"), margin=0.5, num_prompts=1)
    assert decision["first"] and decision["promote"] and decision["ratios"] == {}
    assert set(decision["heldout_tau"]) == set(decision["engine_tau"]) == {"candidate"}
    assert not ship_dir.exists()  # only measured
    promote(camp, decision)
    assert json.loads((ship_dir / "training_summary.json").read_text())["steps"] == 2
    record = json.loads((ship_dir / "campaign.json").read_text())["promotions"]
    assert len(record) == 1 and record[0]["first"] and record[0]["campaign"] == "first"


def test_a_decay_branch_forks_the_trunk_and_decays_to_zero(tiny_target_dir, regen_data, tmp_path):
    """The candidate for promotion is the trunk's weights brought down to LR 0 in a folder of its own; the
    constant-LR trunk is not touched and carries on."""
    from lilicorr.training.campaign_branch import start_branch
    from lilicorr.training.campaign_run import train_segment

    camp = run_campaign(_write(tmp_path, tiny_target_dir, regen_data, name="b", steps=8), max_segments=1,
                        in_process=True)  # fmt: skip  # df trained 2 steps, lc not started
    arm = camp.arm("df")
    trunk = camp.arm_run_dir(arm) / "checkpoint.pt"
    before = trunk.read_bytes()
    cfg = start_branch(camp, arm, decay_steps=2)
    assert (cfg.steps, cfg.decay_ratio) == (4, 0.5) and Path(cfg.run_dir).name == "df-s2-d2"
    assert lr_at(2, cfg) == cfg.lr and 0 < lr_at(3, cfg) < cfg.lr and lr_at(4, cfg) == 0.0
    train_segment(cfg, tmp_path / "branch.log", in_process=True)
    assert torch.load(Path(cfg.run_dir) / "checkpoint.pt", weights_only=False)["state"]["step"] == 4
    assert (Path(cfg.out) / "config.json").exists()  # the drafter folder promote compares
    assert trunk.read_bytes() == before and arm_step(camp, arm) == 2
    assert start_branch(camp, arm, decay_steps=2).run_dir == cfg.run_dir  # exists: resumed, not forked again
    with pytest.raises(FileNotFoundError, match="no checkpoint to branch from"):
        start_branch(camp, camp.arm("lc"), decay_steps=2)
    plan = tmp_path / "b.toml"
    plan.write_text(plan.read_text().replace('lr_schedule = "wsd"', 'lr_schedule = "cosine"'))
    with pytest.raises(ValueError, match='needs lr_schedule = "wsd"'):
        start_branch(load_campaign(plan), arm, decay_steps=2)


def test_status_says_where_each_arms_held_out_tau_is_heading(tmp_path):
    """The status reads each arm's held-out points from its train.log: the walk's τ for a LiLiCorr arm, the
    greedy τ otherwise, and with a goal the steps and this arm's hours to reach it (``campaign_projection``)."""
    path = _write(tmp_path, "t", "d")
    camp = load_campaign(path)
    for arm, key in (("df", "tau_top1_estimate"), ("lc", "walk_prefix")):
        run_dir = camp.arm_run_dir(camp.arm(arm))
        run_dir.mkdir(parents=True)
        lines = []
        for step, tau in ((1000, 2.0), (2000, 2.1), (4000, 2.2)):
            val = {"tau_top1_estimate": tau, "greedy": {key: tau - (1 if key == "walk_prefix" else 0)}}
            lines.append({"step": step, "elapsed_s": step * 1.8, "val": val})
        (run_dir / "train.log").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    arms = {a["arm"]: a["heading"] for a in campaign_status(path, goal=2.5)["arms"]}
    assert arms["df"]["tau"] == "tau_greedy" and arms["lc"]["tau"] == "walk_tau_greedy"
    assert arms["df"]["per_doubling"] == pytest.approx(0.1) and arms["df"]["goal_step_fit"] == 32000
    assert arms["df"]["hours_to_goal_fit"] == pytest.approx((32000 - 4000) * 1.8 / 3600, abs=0.05)


PLANS = sorted(Path(__file__).parents[2].glob("configs/campaign/*.toml"))


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_every_committed_plan_loads_on_a_fresh_clone(plan, monkeypatch):
    """A fresh clone (CI's, or a machine that lost its disk) has every file a committed plan names: its packs, its
    arms' warm-start and promotion folders (the shipped drafters) — so `lilicorr train campaign PLAN` can start."""
    monkeypatch.chdir(plan.parents[2])
    camp = load_campaign(plan.relative_to(plan.parents[2]))
    for arm in camp.arms:
        for folder in (arm.warm_start, arm.promote_to):
            assert folder is None or (Path(folder) / "config.json").is_file(), f"{plan.name} {arm.name}: {folder}"
