"""The speculative configuration, decided in one place.

- ``SpecConfig``: vLLM's option names plus each method's own options;
- ``parse_speculative_config``: vLLM's ``--speculative-config`` object → ``SpecConfig``, every key
  checked against the methods registry (``read_speculative_config`` for the JSON text);
- the default-method rule: what a drafter folder runs when nothing is asked (``method_for_draft``,
  vLLM's rule) and when a user gives the folder alone (``default_config``: the fastest lossless
  configuration measured, recorded in ``docs/results/smollm2-speed.md``);
- ``num_speculative_tokens``: its default and its one check (``draft_length``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lilicorr.decoding.methods.base import get_method, option_keys

if TYPE_CHECKING:
    from lilicorr.models.draft import DraftModel

# vLLM's speculative-config keys that every method shares; methods add their own options.
COMMON_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_sample_method",
    "rejection_sample_method",
    "enable_adaptive_verification",
    "draft_gate",  # lilicorr's: pause drafting while it measures slower than plain steps (decoding/adaptive.py)
    "draft_vocab_size",  # lilicorr's: draft from the folder's N most frequent tokens (decoding/draft_vocab.py)
)


@dataclass
class SpecConfig:
    """vLLM's option names, plus the method's own options (``lilicorr.decoding.methods``)."""

    method: str | None = None  # None: what the drafter is (DFlash, LiLiCorr, an arm); ar without one
    num_speculative_tokens: int | None = None  # default: block_size − 1
    draft_sample_method: str = "greedy"
    rejection_sample_method: str = "standard"
    options: dict[str, int | str] = field(default_factory=dict)  # e.g. prompt_lookup_max, tree_budget
    enable_adaptive_verification: bool = False  # verify only the prefix that pays (decoding/adaptive.py)
    draft_vocab_size: int = 0  # > 0: the drafter's LM head over the folder's N most frequent tokens only
    draft_gate: bool = False  # the measured draft gate without adaptive verification's width rule (on with it)

    @classmethod
    def from_attrs(cls, source, **overrides) -> SpecConfig:
        """A config from any object with attributes of these names (parsed CLI options, a bench arm)."""
        names = [f.name for f in fields(cls) if f.name not in overrides and hasattr(source, f.name)]
        return cls(**{n: getattr(source, n) for n in names}, **overrides)


def check_num_speculative_tokens(n: Any, block_size: int | None = None) -> int:
    """``n`` as vLLM takes it: a positive integer, at most ``block_size − 1`` for a block drafter."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"'num_speculative_tokens' must be a positive integer, got {n!r}")
    if block_size is not None and n > block_size - 1:
        raise ValueError(f"num_speculative_tokens = {n}: expected 1..{block_size - 1} (block_size {block_size} - 1)")
    return n


def draft_length(spec: SpecConfig, block_size: int) -> int:
    """Tokens a block drafter proposes per step: the config's, else the whole block after the anchor."""
    n = spec.num_speculative_tokens
    return check_num_speculative_tokens(block_size - 1 if n is None else n, block_size)


def method_for_draft(draft: DraftModel | None, draft_dir: str | Path | None) -> str:
    """What a drafter runs by itself (vLLM's rule): its arm sidecar, LiLiCorr, or DFlash; none: ``ar``."""
    if draft is None:
        return "ar"
    return _folder_kind(draft_dir) or ("lilicorr" if draft.is_lilicorr else "dflash")


def _folder_kind(draft_dir: str | Path | None) -> str | None:
    """The comparison arm a folder carries (``arm.json``), if any."""
    if draft_dir is None:
        return None
    from lilicorr.models.arms import arm_kind

    return arm_kind(Path(draft_dir))


# The fastest lossless configuration measured per drafter kind (the table and its command are in the
# speed results): what `generate --draft` alone, `make run` and a bare `lilicorr serve` use. The library's
# own default (``SpecConfig(method=None)``, a vLLM config with ``method: "dflash"``) stays vLLM's rule.
# The draft gate makes the default fall back towards plain steps where drafting does not pay (a weak drafter, a
# machine whose drafting step costs more than its drafts return): it measures tokens per second of drafting
# and of plain steps and pauses drafting while it loses. Measured against adaptive verification (whose width
# rule also chooses no drafts on steps that would have paid) in docs/results/smollm2-speed-intel*.md.
LOOKUP_ON = {"prompt_lookup_max": 4, "prompt_lookup_min": 1}  # the trees' prompt-lookup graft: ngram's defaults
FASTEST: dict[str, dict[str, int | str | bool]] = {
    "lilicorr": {"method": "lilicorr-tree", "tree_budget": 16, **LOOKUP_ON, "draft_gate": True},
    "dflash": {"method": "ddtree", "tree_budget": 16, **LOOKUP_ON, "draft_gate": True},
}


def default_config(draft_dir: str | Path) -> dict:
    """The vLLM-style speculative config a drafter folder runs when the user gives it alone: the fastest
    measured configuration for its kind (read from its config.json, no weights loaded); a comparison
    arm runs as itself."""
    from lilicorr.checkpoint import read_draft_config

    kind = _folder_kind(draft_dir) or ("lilicorr" if read_draft_config(draft_dir).lilicorr else "dflash")
    return {"method": kind, **FASTEST.get(kind, {}), "model": str(draft_dir)}


def parse_speculative_config(cfg: dict) -> SpecConfig:
    """vLLM's ``--speculative-config`` object → ``SpecConfig``, every key checked against the registry."""
    if not isinstance(cfg, dict):
        raise ValueError("the speculative config must be a JSON object")
    unknown = set(cfg) - set(COMMON_KEYS) - set(option_keys())
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} (known: {sorted(set(COMMON_KEYS) | set(option_keys()))})")
    name = cfg.get("method", "dflash")
    method = get_method(name if isinstance(name, str) else repr(name))
    if method.needs_draft and "model" not in cfg:
        raise ValueError(f"method {name!r} needs 'model' (the draft checkpoint folder)")
    options = {k: cfg[k] for k in option_keys() if k in cfg}
    n = cfg.get("num_speculative_tokens")
    if n is not None:
        check_num_speculative_tokens(n)
    adaptive = cfg.get("enable_adaptive_verification", False)
    if not isinstance(adaptive, bool):
        raise ValueError(f"'enable_adaptive_verification' must be true or false, got {adaptive!r}")
    gate = cfg.get("draft_gate", False)
    if not isinstance(gate, bool):
        raise ValueError(f"'draft_gate' must be true or false, got {gate!r}")
    vocab = cfg.get("draft_vocab_size", 0)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 0:
        raise ValueError(f"'draft_vocab_size' must be a non-negative integer (0: the whole vocabulary), got {vocab!r}")
    spec = SpecConfig(
        method=None if name == "dflash" else name,  # dflash: the folder decides (DFlash, LiLiCorr or an arm)
        num_speculative_tokens=n,
        draft_sample_method=cfg.get("draft_sample_method", "greedy"),
        rejection_sample_method=cfg.get("rejection_sample_method", "standard"),
        options=options,
        enable_adaptive_verification=adaptive,
        draft_vocab_size=vocab,
        draft_gate=gate,
    )
    method.resolve_options(options)  # an option of another method → named error now
    return spec


def read_speculative_config(text: str | None) -> dict | None:
    """``--speculative-config`` JSON text as an object, checked now (a wrong key or method is a named
    error at start-up, not at the first request)."""
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config is not valid JSON: {e.msg}") from e
    try:
        parse_speculative_config(cfg)
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from e
    return cfg
