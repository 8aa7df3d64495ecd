"""The "Campaign" section of a promoted drafter's ``MODEL_CARD.md``: where its weights came from when a training
campaign (``lilicorr train campaign``) replaced the folder (``lilicorr train promote --apply``).

Why a section of its own: a promoted folder holds a decay branch of a long constant-LR trunk that was itself
warm-started from the folder's earlier weights, so one ``lilicorr train draft`` command does not reproduce it. The
card says the commands, each promotion's decision (both measures, both drafters) and the campaign's whole held-out
curve, copied from the run folder (``runs/`` is not in git) when the card is written."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lilicorr.training.campaign_run import read_events


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "—" if value is None else format(value, fmt)


def _curve(events: list[dict], arm: str, walk: bool, upto: int) -> list[str]:
    """The trunk's held-out readings up to the promoted step (the campaign's ``val`` of each segment that ran one; a
    card rewritten later must not show the trunk's later steps as this drafter's history), one row a step."""
    by_step: dict[int, dict] = {}  # a segment rerun after a cut logs its step's reading again: the last one stands
    for e in events:
        v = e.get("val") if e.get("event") == "segment" and e.get("arm") == arm else None
        if v and v["step"] <= upto:
            by_step[v["step"]] = v
    rows = []
    for v in (by_step[k] for k in sorted(by_step)):
        head = f" {_num(v.get('walk_tau_greedy'))} |" if walk else ""
        rows.append(
            f"| {v['step']} | {_num(v.get('positions') and v['positions'] / 1e6, '.2f')} | "
            f"{_num(v.get('tau_greedy'))} |{head} {_num(v.get('tau'))} | {_num(v.get('tau_t1_sampled'))} |"
        )
    if not rows:
        return []
    return [
        "",
        "The trunk's held-out curve (constant LR; the campaign's fixed validation blocks; positions counted from the "
        "campaign's start):",
        "",
        "| step | positions (M) | greedy-row τ |"
        + (" walk τ, greedy rows |" if walk else "")
        + " τ estimate | T=1 τ estimate, sampled rows |",
        "|---|---|---|" + ("---|" if walk else "") + "---|---|",
        *rows,
    ]


def _engine(events: list[dict], arm: str, upto: int) -> list[str]:
    samples = [e for e in events if e.get("event") == "engine" and e.get("arm") == arm and e["step"] <= upto]
    if not samples:
        return []
    return [
        "",
        "Engine samples on the trunk (the campaign's fixed prompts, T = 0): "
        + "; ".join(
            f"step {e['step']}: " + ", ".join(f"{name} τ {t['tau']:.3f}" for name, t in e["taus"].items())
            for e in samples
        )
        + ".",
    ]


def campaign_section(model_dir: Path) -> list[str]:
    """The section for a folder with a ``campaign.json`` (written by ``promote``); nothing for any other folder."""
    record = Path(model_dir) / "campaign.json"
    if not record.exists():
        return []
    promotions = json.loads(record.read_text()).get("promotions", [])
    lines = ["", "## Campaign", ""]
    for p in promotions:
        decay = re.search(r"-d(\d+)$", p.get("branch") or "")
        events = read_events(_run_dir(p))
        arm = p["arm"]
        warm = next((e for e in events if e.get("event") == "warm_start" and e.get("arm") == arm), None)
        lines += [
            f"Promoted from campaign `{p['campaign']}` (`{p['config']}`, arm `{arm}`): the trunk's step {p['step']}"
            + (f" plus a {decay.group(1)}-step decay branch to LR 0 (`{p['branch']}`)" if decay else "")
            + ".",
            "",
            "```",
            f"lilicorr train campaign {p['config']}",
            f"lilicorr train promote {p['config']} {arm}"
            + (f" --decay-steps {decay.group(1)}" if decay else "")
            + " --apply",
            "```",
            "",
            *_decision(p),
        ]
        if warm:
            lines += [
                "",
                f"The trunk warm-started from `{warm['from']}` as it was then ({warm['its_steps']} steps, "
                f"{warm['its_wall_time_s'] / 60:.0f} min of training; its card, with its curve, is in git history). "
                f"The data a trunk trains on can grow during a campaign (rows appended after the ones it started on): "
                f"`{p['config']}` says when.",
            ]
        walk = any((e.get("val") or {}).get("walk_tau_greedy") is not None for e in events if e.get("arm") == arm)
        lines += [*_curve(events, arm, walk, p["step"]), *_engine(events, arm, p["step"]), ""]
    return lines[:-1]  # no blank line after the last promotion


def _decision(p: dict) -> list[str]:
    """The promotion's figures: against the folder it replaced, or alone for a target's first drafter."""
    engine = f"engine τ ({p['engine_prompts']} MT-Bench + HumanEval prompts, T = 0)"
    if p.get("first"):
        return [
            "The target's first drafter (nothing shipped to beat), measured when shipped:",
            "",
            "| measure | this drafter |",
            "|---|---|",
            f"| held-out τ (campaign validation blocks) | {p['heldout_tau']['candidate']:.3f} |",
            f"| {engine} | {p['engine_tau']['candidate']:.3f} |",
        ]
    return [
        f"| measure | the folder before | this drafter | ratio (margin {p['margin']:.0%}) |",
        "|---|---|---|---|",
        f"| held-out τ (campaign validation blocks) | {p['heldout_tau']['shipped']:.3f} | "
        f"{p['heldout_tau']['candidate']:.3f} | {p['ratios']['heldout']:.3f} |",
        f"| {engine} | {p['engine_tau']['shipped']:.3f} | {p['engine_tau']['candidate']:.3f} | "
        f"{p['ratios']['engine']:.3f} |",
    ]


def _run_dir(promotion: dict) -> Path:
    """The campaign's run folder: the candidate path lies under ``RUN_DIR/promote/``."""
    parts = Path(promotion["candidate"]).parts
    return Path(*parts[: parts.index("promote")]) if "promote" in parts else Path(promotion["candidate"]).parent
