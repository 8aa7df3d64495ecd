"""The variants a benchmark compares: a name, a registered method, a drafter folder and vLLM's options.
(Results and CLI flags call a bench column an "arm", as before; the comparison *methods* DFlash2 / DSpark /
Domino are the "comparison arms" of ``models/arms.py``.)

Every variant's engine comes from the one factory (``variant_engine``), like generate's and serve's.
Tree variants run the ``auto`` node budget (pruned each step by the measured cost curve);
``with_tree_budgets`` adds fixed budgets (``name@bN``) for comparisons at equal budget.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import DEFAULT, LOOKUP_ON, SpecConfig, resolve
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.methods import get_method
from lilicorr.models.arms import arm_kind
from lilicorr.runtime.runtime import TargetRuntime


def _variant_fields() -> list[tuple[str, Any, Any]]:
    """A name, a registered method, a drafter folder, then every other ``SpecConfig`` key as declared there
    (type, default): results record a variant as these fields, in this order."""
    own = [(f.name, f.type, f) for f in fields(SpecConfig) if f.name not in ("method", "model")]
    copied = [(n, t, field(default=f.default, default_factory=f.default_factory)) for n, t, f in own]
    return [("name", "str"), ("method", "str"), ("draft", "str | None", field(default=None)), *copied]


def _spec(self) -> SpecConfig:
    """The speculative config this variant asks for."""
    keys = {f.name: getattr(self, f.name) for f in fields(SpecConfig) if f.name not in ("method", "model")}
    return SpecConfig(method=self.method, model=self.draft, **keys)


# One bench column: the speculative keys are SpecConfig's (declared once there), generated here.
Variant = make_dataclass("Variant", _variant_fields(), namespace={"spec": _spec, "__module__": __name__})


# ``+lookup`` trees also graft the prompt-lookup continuation (the ``ngram`` method's, same keys and values)
LOOKUP = {"tree_budget": "auto", **LOOKUP_ON}


def arm_key(arm: Variant) -> dict:
    """The arm's fields for a resumable part's key; fields added later are left out at their default, so
    parts written before they existed still resume."""
    key = asdict(arm)
    if not arm.draft_vocab_size:
        del key["draft_vocab_size"]
    if not arm.draft_gate:
        del key["draft_gate"]
    return key


def default_variants(drafts: list[str]) -> list[Variant]:
    """AR, each draft with its native method; for LiLiCorr checkpoints also their own backbone's
    per-slot argmax (``:top1``) and the oracle lattice (``:oracle``); for every drafter the
    probabilistic draft (``:prob``: sampled walk / sampled marginals with q handed to rejection
    sampling; T > 0 only, at T = 0 it is the greedy draft)."""
    arms = [Variant("ar", "ar"), Variant("ngram", "ngram", num_speculative_tokens=4)]  # vLLM's training-free baseline
    for d in drafts:
        cfg = json.loads((Path(d) / "config.json").read_text())
        label = Path(d).name
        if cfg["architectures"][0] == "LiLiCorrDraftModel":
            arms.append(Variant(f"{label}", "lilicorr", d))
            arms.append(Variant(f"{label}:top1", "dflash", d))  # same backbone, per-slot argmax: isolates the walk
            arms.append(Variant(f"{label}:oracle", "oracle", d))
            arms.append(Variant(f"{label}:prob", "lilicorr", d, draft_sample_method="probabilistic"))
            arms.append(Variant(f"{label}:adaptive", "lilicorr", d, enable_adaptive_verification=True))
            # trees on this one backbone (the head's conditionals × the marginals vs the marginals alone)
            arms.append(Variant(f"{label}:tree", "lilicorr-tree", d, options={"tree_budget": "auto"}))
            arms.append(Variant(f"{label}:ddtree", "ddtree", d, options={"tree_budget": "auto"}))
            arms.append(Variant(f"{label}:tree+lookup", "lilicorr-tree", d, options=dict(LOOKUP)))
        else:
            arms.append(Variant(f"{label}", "dflash", d))
            arms.append(Variant(f"{label}:ddtree", "ddtree", d, options={"tree_budget": "auto"}))  # training-free
            arms.append(Variant(f"{label}:ddtree+lookup", "ddtree", d, options=dict(LOOKUP)))
            arms.append(Variant(f"{label}:prob", "dflash", d, draft_sample_method="probabilistic"))
            arms.append(Variant(f"{label}:adaptive", "dflash", d, enable_adaptive_verification=True))
        kind = arm_kind(Path(d))
        if kind is not None:  # a comparison arm trained on this backbone
            arms.append(Variant(f"{label}:{kind}", kind, d))
        else:
            arms.append(default_variant(d))
    return arms


def default_variant(draft: str) -> Variant:
    """``NAME:default``: exactly what `generate --draft NAME`, `make run` and `serve` run for the folder
    (the same ``resolve`` of ``method: "default"``), so the shipped default is itself measured."""
    asked = resolve(SpecConfig(method=DEFAULT), draft).asked
    keys = {f.name: getattr(asked, f.name) for f in fields(SpecConfig) if f.name not in ("method", "model")}
    return Variant(f"{Path(draft).name}:default", asked.method, draft, **keys)


def with_draft_lengths(arms: list[Variant], lengths: list[int]) -> list[Variant]:
    """Each speculative arm once per draft length (``name@nN``); trees keep their node budget instead."""
    out = []
    for a in arms:
        if not get_method(a.method).per_draft_length:
            out.append(a)
            continue
        for n in lengths:
            out.append(replace(a, name=f"{a.name}@n{n}", num_speculative_tokens=n))
    return out


def with_tree_budgets(arms: list[Variant], budgets: list[int]) -> list[Variant]:
    """Each tree arm also once per fixed node budget (``name@bN``, root included), beside its ``auto`` self."""
    out = []
    for a in arms:
        out.append(a)
        if any(o.key == "tree_budget" for o in get_method(a.method).option_list()):
            out += [replace(a, name=f"{a.name}@b{b}", options={**a.options, "tree_budget": b}) for b in budgets]
    return out


def with_draft_vocabs(arms: list[Variant], sizes: list[int]) -> list[Variant]:
    """Each arm that drafts with a model also once per draft vocabulary size (``name@vN``), beside itself."""
    out = []
    for a in arms:
        out.append(a)
        if get_method(a.method).needs_draft:
            out += [replace(a, name=f"{a.name}@v{v}", draft_vocab_size=v) for v in sizes]
    return out


def with_draft_gate(arms: list[Variant]) -> list[Variant]:
    """Each arm that drafts with a model, without adaptive verification, also with the draft gate alone
    (``name+gate``), beside itself."""
    out = []
    for a in arms:
        out.append(a)
        if get_method(a.method).needs_draft and not a.enable_adaptive_verification:
            out.append(replace(a, name=f"{a.name}+gate", draft_gate=True))
    return out


def variant_engine(target: TargetRuntime, arm: Variant, drafts: dict, references: dict | None) -> SpecEngine:
    """The engine of one arm, through the methods registry (the oracle gets the greedy references)."""
    extras = {"references": references or {}}
    return build_engine(target, arm.spec(), drafts.get(arm.draft), extras=extras)


def choose_variants(
    drafts: list[str],
    draft_lengths: list[int] | None = None,
    tree_budgets: list[int] | None = None,
    only: list[str] | None = None,
    sweep: list[str] | None = None,
    draft_vocabs: list[int] | None = None,
    gate: bool = False,
) -> list[Variant]:
    """The bench's variants for ``drafts``: each draft length and tree budget asked for, then ``only`` those
    named (plain decoding always runs); a name in ``only`` or ``sweep`` that is not there is a named error."""
    variants = default_variants(drafts)
    if draft_lengths:
        variants = with_draft_lengths(variants, draft_lengths)
    if tree_budgets:
        variants = with_tree_budgets(variants, tree_budgets)
    if draft_vocabs:
        variants = with_draft_vocabs(variants, draft_vocabs)
    if gate:
        variants = with_draft_gate(variants)
    if only:  # after the draft-length expansion, so ARM@nN can be picked one by one
        unknown = set(only) - {v.name for v in variants}
        if unknown:
            raise ValueError(f"--only: no arm named {sorted(unknown)}")
        variants = [v for v in variants if v.name in set(only) or get_method(v.method).baseline]
    unknown = set(sweep or []) - {v.name for v in variants}
    if unknown:
        raise ValueError(f"--sweep-arms: no arm named {sorted(unknown)} among the bench's arms")
    return variants


def bench_prompts(
    target: str,
    prompts_file: str | None,
    num_prompts: int,
    chat: bool,
    corpus: str,
    prompt_tokens: int,
    long_prompts: int,
    long_tokens: int,
) -> list[dict]:
    """A prompts file's rows (every category represented), or prompts cut from the corpus' test split."""
    if prompts_file:
        from lilicorr.data.prompt_sets import read_prompt_rows, round_robin

        rows = round_robin(read_prompt_rows(Path(prompts_file)), num_prompts)
        if chat:  # plain prompts become one user turn; rows with messages already are chat
            rows = [{**p, "messages": [{"role": "user", "content": p["prompt"]}]} if "messages" not in p else p
                    for p in rows]  # fmt: skip
        return rows
    from transformers import AutoTokenizer

    from lilicorr.data.corpus import ensure_corpus
    from lilicorr.data.prompts import long_prompts as long_rows
    from lilicorr.data.prompts import test_prompts

    docs = ensure_corpus(Path(corpus))
    tok = AutoTokenizer.from_pretrained(target)
    rows = test_prompts(docs, tok, num_prompts, prompt_tokens=prompt_tokens)
    if long_prompts:
        rows += long_rows(docs, tok, long_prompts, prompt_tokens=long_tokens)
    return rows
