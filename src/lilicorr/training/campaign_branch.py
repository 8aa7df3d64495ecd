"""Decay branches (``lilicorr train promote --decay-steps N``): a decayed drafter taken from the campaign's trunk.

A campaign trains at a constant LR for most of its plan (``lr_schedule = "wsd"``), and a checkpoint taken at a
constant LR is noisier and behind what the same weights reach once the LR is brought down — the shipped drafters
all ended at LR 0. Measured on the SmolLM2 v7 campaign (warm-started from v6 at half v6's peak LR): held-out
greedy τ of the DFlash trunk 2.12 / 2.15 / 2.10 at steps 1 000 / 2 000 / 3 000 against the shipped 2.20. So a
trunk checkpoint is never a fair candidate for promotion, and a campaign cut by a lost disk before its own decay
would carry nothing forward.

A branch is the warm-up–stable–decay schedule's own answer: copy the trunk's checkpoint at step S into a folder
of its own and train N more steps on the same data with the LR going linearly from the trunk's to 0 (the plan
becomes S + N steps with the last N decayed). The trunk is not touched and goes on at its constant LR; the
branch's drafter is what ``promote`` compares with the shipped folder. A branch is resumable like any run, and
its folder name says where it came from (``RUN_DIR/branches/ARM-sS-dN``).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from lilicorr.data.atomic import atomic_write
from lilicorr.training.campaign import Arm, Campaign, arm_config, arm_step
from lilicorr.training.draft_config import DraftTrainConfig


def branch_dir(camp: Campaign, arm: Arm, at_step: int, decay_steps: int) -> Path:
    return camp.run_dir / "branches" / f"{arm.name}-s{at_step}-d{decay_steps}"


def branch_config(camp: Campaign, arm: Arm, at_step: int, decay_steps: int) -> DraftTrainConfig:
    """The trunk's options with a plan of ``at_step + decay_steps`` steps whose last ``decay_steps`` decay."""
    cfg = arm_config(camp, arm, stop_at=0, warm=arm.warm_start)
    if cfg.lr_schedule != "wsd":
        raise ValueError(f"{camp.source} [arms.{arm.name}]: a decay branch needs lr_schedule = \"wsd\" (the trunk "
                         f"trains at a constant LR), this plan has {cfg.lr_schedule!r}")  # fmt: skip
    total = at_step + decay_steps
    if at_step <= round(cfg.warmup_ratio * camp.steps):  # the trunk's own warm-up: its LR is not yet the plateau
        raise ValueError(f"{arm.name}: step {at_step} is still in the trunk's warm-up; branch after it")
    where = branch_dir(camp, arm, at_step, decay_steps)
    return dataclasses.replace(cfg, steps=total, stop_at=0, decay_ratio=decay_steps / total, run_dir=str(where),
                               out=str(where / "drafter"))  # fmt: skip


def start_branch(camp: Campaign, arm: Arm, decay_steps: int) -> DraftTrainConfig:
    """Fork the arm's checkpoint (once: a branch that exists resumes) and return the config that trains it."""
    if decay_steps < 1:
        raise ValueError(f"--decay-steps {decay_steps}: expected ≥ 1")
    trunk = camp.arm_run_dir(arm) / "checkpoint.pt"
    at = arm_step(camp, arm)
    if not at:
        raise FileNotFoundError(f"{trunk}: arm {arm.name} has no checkpoint to branch from")
    cfg = branch_config(camp, arm, at, decay_steps)
    fork = Path(cfg.run_dir) / "checkpoint.pt"
    if not fork.exists():  # the trunk writes its checkpoint by rename, so a copy is one whole checkpoint
        fork.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(fork, lambda p: shutil.copyfile(trunk, p))
    return cfg
