"""The arms a benchmark compares: a name, a registered method, a drafter folder and vLLM's options.

Every arm's engine comes from the methods registry (``arm_engine``), like generate's and serve's.
Tree arms run the ``auto`` node budget (pruned each step by the measured cost curve);
``with_tree_budgets`` adds fixed budgets (``name@bN``) for comparisons at equal budget.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import LOOKUP_ON, SpecConfig
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.methods import get_method
from lilicorr.models.arms import arm_kind
from lilicorr.runtime.runtime import TargetRuntime


@dataclass
class Arm:
    name: str
    method: str  # a registered method (lilicorr.decoding.methods)
    draft: str | None = None
    num_speculative_tokens: int | None = None
    draft_sample_method: str = "greedy"
    rejection_sample_method: str = "standard"
    enable_adaptive_verification: bool = False
    options: dict = field(default_factory=dict)  # the method's own options (e.g. tree_budget)


# ``+lookup`` trees also graft the prompt-lookup continuation (the ``ngram`` method's, same keys and values)
LOOKUP = {"tree_budget": "auto", **LOOKUP_ON}


def default_arms(drafts: list[str]) -> list[Arm]:
    """AR, each draft with its native method; for LiLiCorr checkpoints also their own backbone's
    per-slot argmax (``:top1``) and the oracle lattice (``:oracle``); for every drafter the
    probabilistic draft (``:prob``: sampled walk / sampled marginals with q handed to rejection
    sampling; T > 0 only, at T = 0 it is the greedy draft)."""
    arms = [Arm("ar", "ar"), Arm("ngram", "ngram", num_speculative_tokens=4)]  # vLLM's training-free baseline
    for d in drafts:
        cfg = json.loads((Path(d) / "config.json").read_text())
        label = Path(d).name
        if cfg["architectures"][0] == "LiLiCorrDraftModel":
            arms.append(Arm(f"{label}", "lilicorr", d))
            arms.append(Arm(f"{label}:top1", "dflash", d))  # same backbone, per-slot argmax: isolates the walk
            arms.append(Arm(f"{label}:oracle", "oracle", d))
            arms.append(Arm(f"{label}:prob", "lilicorr", d, draft_sample_method="probabilistic"))
            arms.append(Arm(f"{label}:adaptive", "lilicorr", d, enable_adaptive_verification=True))
            # trees on this one backbone (the head's conditionals × the marginals vs the marginals alone)
            arms.append(Arm(f"{label}:tree", "lilicorr-tree", d, options={"tree_budget": "auto"}))
            arms.append(Arm(f"{label}:ddtree", "ddtree", d, options={"tree_budget": "auto"}))
            arms.append(Arm(f"{label}:tree+lookup", "lilicorr-tree", d, options=dict(LOOKUP)))
        else:
            arms.append(Arm(f"{label}", "dflash", d))
            arms.append(Arm(f"{label}:ddtree", "ddtree", d, options={"tree_budget": "auto"}))  # training-free
            arms.append(Arm(f"{label}:ddtree+lookup", "ddtree", d, options=dict(LOOKUP)))
            arms.append(Arm(f"{label}:prob", "dflash", d, draft_sample_method="probabilistic"))
            arms.append(Arm(f"{label}:adaptive", "dflash", d, enable_adaptive_verification=True))
        kind = arm_kind(Path(d))
        if kind is not None:  # a comparison arm trained on this backbone
            arms.append(Arm(f"{label}:{kind}", kind, d))
    return arms


def with_draft_lengths(arms: list[Arm], lengths: list[int]) -> list[Arm]:
    """Each speculative arm once per draft length (``name@nN``); trees keep their node budget instead."""
    out = []
    for a in arms:
        if not get_method(a.method).per_draft_length:
            out.append(a)
            continue
        for n in lengths:
            out.append(replace(a, name=f"{a.name}@n{n}", num_speculative_tokens=n))
    return out


def with_tree_budgets(arms: list[Arm], budgets: list[int]) -> list[Arm]:
    """Each tree arm also once per fixed node budget (``name@bN``, root included), beside its ``auto`` self."""
    out = []
    for a in arms:
        out.append(a)
        if any(o.key == "tree_budget" for o in get_method(a.method).options):
            out += [replace(a, name=f"{a.name}@b{b}", options={**a.options, "tree_budget": b}) for b in budgets]
    return out


def arm_engine(target: TargetRuntime, arm: Arm, drafts: dict, references: dict | None) -> SpecEngine:
    """The engine of one arm, through the methods registry (the oracle gets the greedy references)."""
    spec = SpecConfig.from_attrs(arm)  # the arm's fields carry vLLM's option names
    extras = {"references": references or {}}
    return build_engine(target, spec, drafts.get(arm.draft), arm.draft, extras=extras)
