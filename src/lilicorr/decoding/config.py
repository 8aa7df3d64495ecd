"""The speculative configuration: each key declared once (``SpecConfig``), resolved once (``resolve``).

- ``SpecConfig``: what is asked — vLLM's ``--speculative-config`` keys and lilicorr's own. Each field
  declares its type, default, help and its one check; ``generate``'s flags (``lilicorr.options``), the JSON
  keys ``serve`` reads (``parse_speculative_config``) and the bench's variants (``bench.variants.Variant``)
  are generated from these fields. A built ``SpecConfig`` has every value checked.
- ``resolve``: a ``SpecConfig`` and a drafter folder → ``ResolvedSpec``: the method (``choose_method``,
  the one place that decides what a folder runs), the draft length and the method's typed options, each
  decided once; generate, serve, bench, the cards and ``build_engine`` read resolved fields only.
- ``FASTEST``: what a drafter folder runs when the user gives it alone (``method: "default"``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lilicorr.decoding.methods.base import Method, get_method, method_names, option_keys
from lilicorr.decoding.proposal import DRAFT_SAMPLE_METHODS
from lilicorr.decoding.verify import REJECTION_METHODS
from lilicorr.options import option

if TYPE_CHECKING:
    from lilicorr.models.draft import DraftModel

DEFAULT = "default"  # method: the folder's fastest measured configuration (FASTEST), tuned by the rest of the ask
FOLDER = "dflash"  # vLLM's method for the DFlash family: in a speculative config, the folder decides which one

# The fastest lossless configuration measured per drafter kind (the table and its command are in the
# speed results): what `generate --draft` alone, `make run` and a bare `lilicorr serve` use. The library's
# own default (``SpecConfig()``, a vLLM config with ``method: "dflash"``) stays vLLM's rule.
# The draft gate makes the default fall back towards plain steps where drafting does not pay (a weak drafter, a
# machine whose drafting step costs more than its drafts return): it measures tokens per second of drafting
# and of plain steps and pauses drafting while it loses. Measured against adaptive verification (whose width
# rule also chooses no drafts on steps that would have paid) in docs/archive/smollm2-speed-intel*.md.
LOOKUP_ON = {"prompt_lookup_max": 4, "prompt_lookup_min": 1}  # the trees' prompt-lookup graft: ngram's defaults
FASTEST: dict[str, dict[str, int | str | bool]] = {
    "lilicorr": {"method": "lilicorr-tree", "tree_budget": 16, **LOOKUP_ON, "draft_gate": True},
    "dflash": {"method": "ddtree", "tree_budget": 16, **LOOKUP_ON, "draft_gate": True},
}


def check_num_speculative_tokens(n: Any, block_size: int | None = None) -> int:
    """``n`` as vLLM takes it: a positive integer, at most ``block_size − 1`` for a block drafter."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"'num_speculative_tokens' must be a positive integer, got {n!r}")
    if block_size is not None and n > block_size - 1:
        raise ValueError(f"num_speculative_tokens = {n}: expected 1..{block_size - 1} (block_size {block_size} - 1)")
    return n


def _method(_key: str, name: Any) -> None:
    if name not in (None, DEFAULT):
        get_method(name if isinstance(name, str) else repr(name))


def _optional_count(_key: str, n: Any) -> None:
    if n is not None:
        check_num_speculative_tokens(n)


def _choice(choices: tuple[str, ...]):
    def check(key: str, value: Any) -> None:
        if value not in choices:
            raise ValueError(f"{key} {value!r}: expected one of {choices}")

    return check


def _switch(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"'{key}' must be true or false, got {value!r}")


def _vocab(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"'{key}' must be a non-negative integer (0: the whole vocabulary), got {value!r}")


def _path(key: str, value: Any) -> None:
    if value is not None and not isinstance(value, str | Path):
        raise ValueError(f"'{key}' must be a folder path, got {value!r}")


def _method_help() -> str:
    from lilicorr.decoding.methods import METHODS

    lines = "; ".join(f"{m}: {METHODS[m].help}" for m in method_names())
    return (
        f"proposal method. {DEFAULT}: with --draft, the fastest lossless configuration measured "
        "(lilicorr.decoding.config.FASTEST: a LiLiCorr folder runs lilicorr-tree with 16 nodes, the prompt-lookup "
        "graft and the measured draft gate, a DFlash folder ddtree likewise, an arm folder its arm), with the "
        "options chosen on top (a tree option tunes that tree); with a draft length or probabilistic drafting, "
        f"what the folder is (vLLM's rule); ar without --draft. {lines}"
    )


@dataclass
class SpecConfig:
    """What is asked: one field per speculative-config key, declared here only (type, default, help, check).
    ``method`` None: what the drafter folder is (vLLM's rule: its arm, LiLiCorr or DFlash); ar without one."""

    method: str | None = option(
        None, _method_help, choices=lambda: [DEFAULT, *method_names()], flag_default=DEFAULT, check=_method
    )
    model: str | None = option(
        None, "DFlashDraftModel / LiLiCorrDraftModel checkpoint folder", flag="--draft", metavar="DIR", check=_path
    )
    num_speculative_tokens: int | None = option(None, "1..block_size-1 (default B-1)", check=_optional_count)
    draft_sample_method: str = option(
        "greedy", "draft tokens: argmax, or sampled (q to rejection sampling)", choices=DRAFT_SAMPLE_METHODS,
        check=_choice(DRAFT_SAMPLE_METHODS),
    )  # fmt: skip
    rejection_sample_method: str = option(
        "standard", "token-wise or block verification", choices=REJECTION_METHODS, check=_choice(REJECTION_METHODS)
    )
    enable_adaptive_verification: bool = option(
        False,
        "verify only the draft prefix whose expected accepted tokens pay for its measured verify cost "
        "(falls back to AR steps when drafts do not pay); chains, and trees (their best-first prefix)",
        check=_switch,
    )
    # the method's own options (e.g. tree_budget), declared by each method (``methods``) and checked by it
    options: dict[str, int | str] = field(default_factory=dict, metadata={"skip": True})
    draft_vocab_size: int = option(
        0,
        "draft from the drafter folder's N most frequent tokens only (its draft_vocab.json, made by "
        "`lilicorr data draft-vocab`): a cheaper drafter LM head, still lossless (0: the whole vocabulary)",
        check=_vocab,
    )
    draft_gate: bool = option(
        False,
        "pause drafting (1, 2, 4 … 64 steps) while drafting steps measure slower than plain ones, without "
        "adaptive verification's width rule (which includes the gate)",
        check=_switch,
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            if "check" in f.metadata:
                f.metadata["check"](f.name, getattr(self, f.name))
        if not isinstance(self.options, dict):
            raise ValueError(f"'options' must be a mapping of option keys to values, got {self.options!r}")
        if self.method not in (None, DEFAULT):  # named: its options are checked now (else when resolved)
            get_method(self.method).make_options(self.options)

    def as_config(self) -> dict:
        """The vLLM-style object that asks for exactly this (keys at their default left out)."""
        out: dict[str, Any] = {"method": FOLDER if self.method is None else self.method, **self.options}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in ("method", "model", "options") and value != f.default:
                out[f.name] = value
        return out | ({"model": str(self.model)} if self.model else {})


# vLLM's speculative-config keys that every method shares; methods add their own options.
COMMON_KEYS = tuple(f.name for f in fields(SpecConfig) if f.name != "options")


@dataclass(frozen=True)
class Drafter:
    """What the resolver reads of a drafter (its config.json and arm.json; no weights loaded)."""

    kind: str  # a comparison arm's kind (arm.json), else "lilicorr" or "dflash"
    block_size: int
    default_vocab: int = 0  # draft_vocab.json's ``default_size``: the folder's own draft vocabulary by default

    @classmethod
    def read(cls, folder: str | Path | None, draft: DraftModel | None = None) -> Drafter | None:
        """The drafter of a folder, or of a loaded model (its folder, if any, says whether it carries an arm)."""
        if folder is None and draft is None:
            return None
        from lilicorr.models.arms import arm_kind

        arm = arm_kind(Path(folder)) if folder is not None else None
        if draft is not None:
            lilicorr, block = draft.is_lilicorr, draft.cfg.block_size
        else:
            from lilicorr.checkpoint import read_draft_config

            cfg = read_draft_config(folder)
            lilicorr, block = cfg.lilicorr is not None, cfg.block_size
        from lilicorr.decoding.draft_vocab import default_draft_vocab

        vocab = default_draft_vocab(folder) if folder is not None else 0
        return cls(arm or ("lilicorr" if lilicorr else "dflash"), block, vocab)


def choose_method(asked: SpecConfig, drafter: Drafter | None) -> SpecConfig:
    """The one place that decides what a drafter folder runs: ``asked`` with its method named.

    A method named: it. No drafter: ``ar``. ``default``: the folder's fastest configuration (``FASTEST``) with
    the user's choices on top, and the folder's own draft vocabulary unless one is asked (``draft_vocab.json``'s
    ``default_size``: a target whose LM head dwarfs the drafter, Gemma 3's 262 144 tokens, drafts from its
    frequent tokens) — unless the ask has what that configuration does not take (a draft length,
    probabilistic drafting, an option its method lacks); then, as for ``None`` (vLLM's rule), what the folder
    is: its comparison arm, else LiLiCorr, else DFlash.
    """
    if asked.method not in (None, DEFAULT):
        return asked
    if drafter is None:
        return replace(asked, method="ar")
    fastest = FASTEST.get(drafter.kind) if asked.method == DEFAULT else None
    if fastest is not None:
        base = parse_speculative_config(fastest)
        takes = {o.key for o in get_method(base.method).option_list()}
        tuned_beyond = asked.num_speculative_tokens is not None or asked.draft_sample_method != "greedy"
        if not tuned_beyond and set(asked.options) <= takes:
            return replace(
                asked,
                method=base.method,
                options={**base.options, **asked.options},
                enable_adaptive_verification=asked.enable_adaptive_verification or base.enable_adaptive_verification,
                draft_gate=asked.draft_gate or base.draft_gate,
                draft_vocab_size=asked.draft_vocab_size or drafter.default_vocab,
            )
    return replace(asked, method=drafter.kind)


@dataclass(frozen=True)
class ResolvedSpec:
    """What runs, every field decided once by ``resolve``; the engine and its callers read only these."""

    method: str  # a registered method
    model: str | None  # the drafter folder (None: an in-memory drafter, or none)
    num_speculative_tokens: int  # tokens drafted per step (a tree's depth); 0 for plain decoding
    draft_sample_method: str
    rejection_sample_method: str
    enable_adaptive_verification: bool
    draft_gate: bool
    draft_vocab_size: int
    options: Any  # the method's typed options (``Method.Options``: e.g. TreeOptions on the tree methods)
    asked: SpecConfig  # the ask with its method named (the folder's default applied): what bench and cards record

    @property
    def needs_draft(self) -> bool:
        return get_method(self.method).needs_draft


def _draft_tokens(n: int | None, method: type[Method], drafter: Drafter | None) -> int:
    """Tokens drafted per step: a block drafter's whole block after the anchor unless fewer are asked; a
    model-free method's own default; none for plain decoding."""
    if method.needs_draft:
        assert drafter is not None
        return check_num_speculative_tokens(drafter.block_size - 1 if n is None else n, drafter.block_size)
    if method.default_draft_length is None:
        return 0
    return check_num_speculative_tokens(method.default_draft_length if n is None else n)


def resolve(asked: SpecConfig, draft_folder: str | Path | None = None, draft: DraftModel | None = None) -> ResolvedSpec:
    """Method, defaults, draft length and every option, decided once (``draft_folder``: else ``asked.model``;
    ``draft``: a loaded drafter, read instead of the folder's config.json)."""
    where = draft_folder if draft_folder is not None else asked.model
    folder = str(where) if where is not None else None
    reads_folder = asked.method in (None, DEFAULT) or get_method(asked.method).needs_draft
    drafter = Drafter.read(folder, draft) if reads_folder else None
    chosen = choose_method(asked, drafter)
    chosen = replace(chosen, model=folder) if folder is not None else chosen
    method = get_method(chosen.method)
    if method.needs_draft and drafter is None:
        raise ValueError(f"method {method.name!r} needs 'model' (--draft): the draft checkpoint folder")
    return ResolvedSpec(
        method=method.name,
        model=folder,
        num_speculative_tokens=_draft_tokens(chosen.num_speculative_tokens, method, drafter),
        draft_sample_method=chosen.draft_sample_method,
        rejection_sample_method=chosen.rejection_sample_method,
        enable_adaptive_verification=chosen.enable_adaptive_verification,
        draft_gate=chosen.draft_gate,
        draft_vocab_size=chosen.draft_vocab_size,
        options=method.make_options(chosen.options),
        asked=chosen,
    )


def draft_length(spec: SpecConfig | ResolvedSpec, block_size: int) -> int:
    """Tokens a block drafter proposes per step (the engine's question): resolved already, or for a bare
    ``SpecConfig`` the whole block after the anchor unless fewer are asked."""
    if isinstance(spec, ResolvedSpec):
        return spec.num_speculative_tokens
    n = spec.num_speculative_tokens
    return check_num_speculative_tokens(block_size - 1 if n is None else n, block_size)


def default_config(draft_dir: str | Path) -> dict:
    """The vLLM-style speculative config a drafter folder runs when the user gives it alone (``FASTEST`` for
    its kind; a comparison arm runs as itself), read from its config.json, no weights loaded."""
    return resolve(SpecConfig(method=DEFAULT), draft_dir).asked.as_config()


def parse_speculative_config(cfg: dict) -> SpecConfig:
    """vLLM's ``--speculative-config`` object → ``SpecConfig`` (its values checked as it is built): the
    common keys, ``method: "dflash"`` (or none) meaning the folder decides, and the methods' own keys."""
    if not isinstance(cfg, dict):
        raise ValueError("the speculative config must be a JSON object")
    known = set(COMMON_KEYS) | set(option_keys())
    unknown = set(cfg) - known
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} (known: {sorted(known)})")
    common = {k: cfg[k] for k in COMMON_KEYS if k in cfg}
    common["method"] = None if cfg.get("method", FOLDER) == FOLDER else cfg["method"]
    return SpecConfig(**common, options={k: cfg[k] for k in option_keys() if k in cfg})


def read_speculative_config(text: str | None) -> ResolvedSpec | None:
    """``--speculative-config`` JSON text, resolved now and only here on the serve path (a wrong key, method,
    option or folder is a named error at start-up, not at the first request)."""
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative-config is not valid JSON: {e.msg}") from e
    try:
        return resolve(parse_speculative_config(cfg))
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from e
