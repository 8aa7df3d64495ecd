"""Promotion (``lilicorr train promote``): a campaign checkpoint replaces a shipped drafter only when it beats it.

Every bf16 drafter committed stays in git history (≈ 19 MB each), so a checkpoint is promoted only when it is
ahead of the shipped folder by a stated margin on BOTH measures: the held-out blocks (the campaign's validation
rows, the same blocks for both, as ``lilicorr train eval``) and the engine (``lilicorr bench`` at T = 0 on the
campaign's fixed prompts, both drafters in one process). At most ``MAX_PROMOTIONS`` per shipped folder per
campaign; the folder's ``campaign.json`` records each one (step, figures, margins). A target with nothing
shipped yet (the folder does not exist) gets its first drafter without a comparison, its figures recorded all
the same; that first ship counts as one of the folder's promotions. Shipped weight files are split into files of
at most 20 MB (``checkpoint/shards.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from lilicorr.checkpoint.shards import reshard_folder
from lilicorr.data.atomic import atomic_write_dir
from lilicorr.training.campaign import Arm, Campaign, arm_step
from lilicorr.training.evaluate import evaluate_draft

MAX_PROMOTIONS = 2
# Carried from the shipped folder into the promoted one: the card (rewritten by `lilicorr card draft` after the
# promotion; the old one stays until then) and the draft vocabulary (`lilicorr data draft-vocab`: counted from the
# data, not the weights, and what `draft_vocab_size` and the reduced-vocabulary GGUF export read).
KEPT_ON_PROMOTION = ("MODEL_CARD.md", "draft_vocab.json")


def heldout_tau(result: dict) -> float:
    """The T = 0 figure of a held-out evaluation: the greedy rows' τ estimate — the walk's for a LiLiCorr drafter
    (what its chain drafts), the top-1 chain's for DFlash."""
    rows = result.get("greedy", result)
    walk = rows.get("walk_prefix")
    return round(1 + walk, 4) if walk is not None else rows["tau_top1_estimate"]


def _engine_taus(camp: Campaign, folders: dict[str, Path], num_prompts: int, out: Path) -> dict[str, float]:
    """Pooled T = 0 τ of each folder (by its name) on the campaign's engine prompts, in one bench process."""
    eng = camp.engine
    if eng is None:
        raise ValueError(f"{camp.source}: no [engine] table: promotion needs the engine prompts")
    cmd = [sys.executable, "-m", "lilicorr.cli.main", "bench", "--target", camp.train["target"],
           *[f"--draft={p}" for p in folders.values()], "--only", *folders, "--prompts", eng.prompts,
           "--num-prompts", str(num_prompts), "--max-new-tokens", str(eng.max_new_tokens), "--temperatures", "0",
           "--no-sweep", "--dtype", eng.dtype, "--threads", str(camp.threads or 2), "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    runs = json.loads((out / "results.json").read_text())["runs"]
    return {r["arm"]["name"]: r["pooled"]["tau"] for r in runs if r["arm"]["name"] in folders}


def compare_for_promotion(
    camp: Campaign, arm: Arm, margin: float, num_prompts: int, drafter: Path | None = None, label: str = ""
) -> dict:
    """Held-out and engine τ of the arm's current weights (or ``drafter``: a decay branch's, named by ``label``)
    against its shipped folder, and the decision."""
    if not arm.promote_to:
        raise ValueError(f"{camp.source} [arms.{arm.name}]: no promote_to folder")
    shipped = Path(arm.promote_to)
    work = camp.run_dir / "promote" / (label or f"{arm.name}-step{arm_step(camp, arm)}")
    work.mkdir(parents=True, exist_ok=True)
    candidate = work / f"{arm.name}-candidate"  # bench names an arm by its folder: the two must differ
    if not candidate.exists():
        shutil.copytree(drafter or camp.arm_out(arm), candidate)
    val = camp.train.get("val_data") or camp.train["data"]
    feats = camp.train.get("val_features") if camp.train.get("val_data") else camp.train.get("features")
    n_val = int(camp.train.get("val_sequences", 64))  # the rows the campaign validates on
    first = not shipped.exists()  # nothing shipped for this target yet: the first drafter has nothing to beat
    folders = {"candidate": candidate} if first else {"shipped": shipped, "candidate": candidate}
    held = {
        name: heldout_tau(evaluate_draft(folder, camp.train["target"], val, feats, n_val, threads=camp.threads))
        for name, folder in folders.items()
    }
    taus = _engine_taus(camp, {f.name: f for f in folders.values()}, num_prompts, work / "bench")
    engine = {name: taus[f.name] for name, f in folders.items()}
    ratios = (
        {}
        if first
        else {k: round(v["candidate"] / v["shipped"], 4) for k, v in (("heldout", held), ("engine", engine))}
    )
    return {
        "arm": arm.name,
        "step": arm_step(camp, arm),
        "branch": label or None,  # a decay branch (campaign_branch.py), or None: the trunk's current weights
        "candidate": str(candidate),
        "shipped": str(shipped),
        "heldout_tau": held,
        "engine_tau": engine,
        "engine_prompts": num_prompts,
        "ratios": ratios,
        "margin": margin,
        "first": first,
        "promote": all(r >= 1 + margin for r in ratios.values()),  # a first ship: nothing to beat
    }


def _history(shipped: Path) -> list[dict]:
    """Every promotion recorded in the shipped folder (none for a folder that never was promoted)."""
    record = shipped / "campaign.json"
    return json.loads(record.read_text()).get("promotions", []) if record.exists() else []


def promotions_of(shipped: Path, campaign: str) -> list[dict]:
    return [p for p in _history(shipped) if p.get("campaign") == campaign]


def promote(camp: Campaign, decision: dict) -> Path:
    """Replace the shipped folder by the candidate (copied beside it, then swapped: never a half-written folder)
    and append the decision to its ``campaign.json``. Refused when the decision says no or the campaign has used
    its promotions for this folder."""
    shipped, candidate = Path(decision["shipped"]), Path(decision["candidate"])
    if not decision["promote"]:
        raise ValueError(f"{candidate}: not ahead of {shipped} by {decision['margin']:.0%} on both measures "
                         f"(ratios {decision['ratios']})")  # fmt: skip
    history = promotions_of(shipped, camp.name)
    if len(history) >= MAX_PROMOTIONS:
        raise ValueError(f"{shipped}: already promoted {len(history)} times in campaign {camp.name} (at most "
                         f"{MAX_PROMOTIONS}: each bf16 drafter stays in git history)")  # fmt: skip
    record = {
        "campaign": camp.name,
        "config": str(camp.source),
        **{k: v for k, v in decision.items() if k != "promote"},
    }
    history = json.dumps({"promotions": [*_history(shipped), record]}, indent=2) + "\n"

    def write(staged: Path) -> None:
        shutil.copytree(candidate, staged, dirs_exist_ok=True)
        for name in KEPT_ON_PROMOTION:  # files that describe the folder, not the weights, and the candidate lacks
            if (shipped / name).exists() and not (staged / name).exists():
                shutil.copy2(shipped / name, staged / name)
        (staged / "campaign.json").write_text(history)
        reshard_folder(staged)  # the staged folder starts empty: no shard of the shipped weights is left over

    atomic_write_dir(shipped, write)  # staged beside it, then swapped in, with plain permissions
    return shipped
