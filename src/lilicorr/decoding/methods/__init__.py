"""The method registry: every drafting method is one module here, and this is the one factory.

A method declares its name, whether it needs a drafter checkpoint, its own options (with
defaults and validation) and how it builds its proposer. ``generate``, ``bench`` and ``serve``
build every engine through ``build_engine`` / ``engine_from_speculative_config`` and nothing else,
so adding a method is one new module (registered with ``@register``) plus its tests.

As in vLLM, a drafter folder decides what it is: ``method: "dflash"`` (or no method) with a
LiLiCorr checkpoint runs ``lilicorr``, with a comparison-arm sidecar (``arm.json``) runs that arm.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from lilicorr.decoding.proposal import Proposer

if TYPE_CHECKING:
    from lilicorr.decoding.engine import SpecConfig, SpecEngine
    from lilicorr.decoding.verify import Verifier
    from lilicorr.models.draft import DraftModel
    from lilicorr.target.runtime import TargetRuntime

# vLLM's speculative-config keys that every method shares; methods add their own options.
COMMON_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_sample_method",
    "rejection_sample_method",
    "enable_adaptive_verification",
)


AUTO = "auto"


@dataclass(frozen=True)
class Option:
    """A method's own option: a positive integer (every option so far is a count), or ``"auto"`` where
    ``auto`` is set (the method then chooses the value itself, e.g. from the measured cost curve)."""

    key: str
    default: int | str
    help: str
    auto: bool = False
    minimum: int = 1  # 0 where zero means "off"

    def check(self, method: str, value: Any) -> int | str:
        if self.auto and value == AUTO:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            kind = "a positive integer" if self.minimum == 1 else f"an integer >= {self.minimum}"
            expected = f"{kind} or 'auto'" if self.auto else kind
            raise ValueError(f"method {method!r}: '{self.key}' must be {expected}, got {value!r}")
        return value

    def parse(self, text: str) -> int | str:
        """A command-line value: an integer, or ``auto`` where allowed (argparse ``type``)."""
        if self.auto and text == AUTO:
            return text
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{self.key.replace('_', '-')}: expected an integer{' or auto' if self.auto else ''}, got {text!r}"
            ) from None


@dataclass
class BuildContext:
    """What a method may read to build its proposer."""

    target: TargetRuntime
    draft: DraftModel | None
    draft_dir: Path | None
    spec: SpecConfig
    options: dict[str, int | str]
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. the oracle's reference outputs


class Method:
    """One drafting method. Subclasses set the class attributes and ``build``."""

    name: ClassVar[str]
    needs_draft: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = ()
    help: ClassVar[str] = ""
    baseline: ClassVar[bool] = False  # plain decoding: what every speedup is measured against
    needs_reference: ClassVar[bool] = False  # measurement only: reads the greedy reference output (T = 0)
    per_draft_length: ClassVar[bool] = True  # the drafter's block length applies (not trees / model-free)

    proposer: ClassVar[type[Proposer] | None] = None  # the default ``build``: ``proposer(draft_sample_method)``

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        if cls.proposer is None:
            raise NotImplementedError(f"method {cls.name!r} sets neither 'proposer' nor 'build'")
        return cls.proposer(ctx.spec.draft_sample_method)

    @classmethod
    def resolve_options(cls, given: dict[str, Any]) -> dict[str, int | str]:
        """Defaults filled in; an option of another method or a bad value is a named error."""
        known = {o.key: o for o in cls.options}
        stray = sorted(set(given) - set(known))
        if stray:
            raise ValueError(
                f"method {cls.name!r} has no option {', '.join(repr(s) for s in stray)}"
                + (f" (its options: {', '.join(sorted(known))})" if known else " (it takes none)")
            )
        return {k: o.check(cls.name, given.get(k, o.default)) for k, o in known.items()}


METHODS: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r} is registered twice")
    METHODS[cls.name] = cls
    return cls


def get_method(name: str) -> type[Method]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}: expected one of {', '.join(method_names())}") from None


def method_names() -> list[str]:
    return sorted(METHODS)


def option_keys() -> list[str]:
    """Every method's own option keys (for the server's key check and the CLI)."""
    return sorted({o.key for m in METHODS.values() for o in m.options})


def method_for_draft(draft: DraftModel | None, draft_dir: str | Path | None) -> str:
    """What a drafter folder runs by itself (vLLM's rule): its arm sidecar, LiLiCorr, or DFlash."""
    if draft is None:
        return "ar"
    if draft_dir is not None:
        from lilicorr.models.arms import arm_kind

        kind = arm_kind(Path(draft_dir))
        if kind is not None:
            return kind
    return "lilicorr" if draft.is_lilicorr else "dflash"


# The fastest lossless configuration measured per drafter kind (docs/RESULTS-speed.md,
# scripts/bench_speed_smollm2.sh): what `generate --draft` without --method, `make run` and a bare
# `lilicorr serve` use. The library's own default (``SpecConfig(method=None)``, a vLLM speculative config with
# ``method: "dflash"``) stays vLLM's rule: the folder decides (``method_for_draft``).
# Measured (T = 0, batch 1, paired with AR): lilicorr-tree + lookup at 16 nodes 1.25×, at the auto budget
# 1.14×; ddtree + lookup (DFlash drafter, auto budget) 1.19×; chains 0.85–0.92×.
LOOKUP_ON = {"prompt_lookup_max": 4, "prompt_lookup_min": 1}  # the trees' lookup graft as measured: ngram's defaults
FASTEST: dict[str, tuple[str, dict[str, int | str]]] = {
    "lilicorr": ("lilicorr-tree", {"tree_budget": 16, **LOOKUP_ON}),
    "dflash": ("ddtree", {"tree_budget": 16, **LOOKUP_ON}),
}


def fastest_config(draft: DraftModel | None, draft_dir: str | Path | None) -> tuple[str, dict[str, int | str]]:
    """(method, options) of the fastest measured configuration for this drafter folder; a comparison arm
    runs as itself, and without a drafter it is plain decoding."""
    native = method_for_draft(draft, draft_dir)
    method, options = FASTEST.get(native, (native, {}))
    return method, dict(options)


def build_proposer(
    target: TargetRuntime,
    draft: DraftModel | None,
    spec: SpecConfig,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
) -> Proposer:
    """The proposer of ``spec.method``; None: whatever the drafter folder is (``method_for_draft``)."""
    name = spec.method or method_for_draft(draft, draft_dir)
    method = get_method(name)
    options = method.resolve_options(spec.options)
    if method.needs_draft and draft is None:
        raise ValueError(f"method {name!r} needs a draft checkpoint (--draft / 'model')")
    ctx = BuildContext(target, draft, Path(draft_dir) if draft_dir else None, spec, options, extras or {})
    return method.build(ctx)


def build_engine(
    target: TargetRuntime,
    spec: SpecConfig | None = None,
    draft: DraftModel | None = None,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
    verifier: Verifier | None = None,
) -> SpecEngine:
    """The one factory of engines: ``spec.method`` through the registry, verified by one verifier."""
    from lilicorr.decoding.engine import SpecConfig, SpecEngine

    spec = spec or SpecConfig()
    proposer = build_proposer(target, draft, spec, draft_dir, extras)
    return SpecEngine(target, draft, spec, proposer=proposer, verifier=verifier)


def parse_speculative_config(cfg: dict) -> SpecConfig:
    """vLLM's ``--speculative-config`` object → ``SpecConfig``, every key checked against the registry."""
    from lilicorr.decoding.engine import SpecConfig

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
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"'num_speculative_tokens' must be a positive integer, got {n!r}")
    adaptive = cfg.get("enable_adaptive_verification", False)
    if not isinstance(adaptive, bool):
        raise ValueError(f"'enable_adaptive_verification' must be true or false, got {adaptive!r}")
    spec = SpecConfig(
        method=None if name == "dflash" else name,  # dflash: the folder decides (DFlash, LiLiCorr or an arm)
        num_speculative_tokens=n,
        draft_sample_method=cfg.get("draft_sample_method", "greedy"),
        rejection_sample_method=cfg.get("rejection_sample_method", "standard"),
        options=options,
        enable_adaptive_verification=adaptive,
    )
    method.resolve_options(options)  # an option of another method → named error now
    return spec


def engine_from_speculative_config(target: TargetRuntime, cfg: dict | None, dtype=None) -> SpecEngine:
    """The engine a vLLM-style speculative config asks for (None: plain decoding)."""
    from lilicorr.checkpoint import load_draft

    if not cfg:
        return build_engine(target)
    spec = parse_speculative_config(cfg)
    draft = None
    if "model" in cfg and get_method(cfg.get("method", "dflash")).needs_draft:
        draft = load_draft(
            cfg["model"], target.model.config, dtype=dtype, num_speculative_tokens=spec.num_speculative_tokens
        )
    return build_engine(target, spec, draft, cfg.get("model"))


# Registering the built-in methods (each module registers itself on import).
from lilicorr.decoding.methods import ar, arms, ddtree, dflash, lilicorr, ngram, oracle  # noqa: E402, F401
