"""The one way to get an engine: ``build_engine`` (and ``engine_from_speculative_config`` for a vLLM-style
config). The method comes from the registry, the proposer from the method, and one verifier checks
every proposal, so generate, bench, serve and the data tools all run the same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lilicorr.decoding.config import (
    SpecConfig,
    check_num_speculative_tokens,
    method_for_draft,
    parse_speculative_config,
)
from lilicorr.decoding.draft_vocab import read_draft_vocab
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.methods import BuildContext, get_method
from lilicorr.decoding.proposal import Proposer

if TYPE_CHECKING:
    from lilicorr.decoding.verify import Verifier
    from lilicorr.models.draft import DraftModel
    from lilicorr.runtime.runtime import TargetRuntime


def build_proposer(
    target: TargetRuntime,
    draft: DraftModel | None,
    spec: SpecConfig,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
) -> Proposer:
    """The proposer of ``spec.method``; None: whatever the drafter folder is (``method_for_draft``)."""
    if spec.num_speculative_tokens is not None:  # a config built in code, not parsed: the same one check
        check_num_speculative_tokens(spec.num_speculative_tokens)
    name = spec.method or method_for_draft(draft, draft_dir)
    method = get_method(name)
    options = method.resolve_options(spec.options)
    if method.needs_draft and draft is None:
        raise ValueError(f"method {name!r} needs a draft checkpoint (--draft / 'model')")
    where = Path(draft_dir) if draft_dir else None
    ctx = BuildContext(
        target, draft, where, spec.draft_sample_method, spec.num_speculative_tokens, options, extras or {}
    )
    return method.build(ctx)


def build_engine(
    target: TargetRuntime,
    spec: SpecConfig | None = None,
    draft: DraftModel | None = None,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
    verifier: Verifier | None = None,
    proposer: Proposer | None = None,
) -> SpecEngine:
    """An engine for ``spec`` (default: plain decoding, or what ``draft`` is); ``proposer`` replaces the
    registry's (tests that spy on or script proposals)."""
    spec = spec or SpecConfig()
    proposer = proposer or build_proposer(target, draft, spec, draft_dir, extras)
    vocab = None
    if spec.draft_vocab_size and proposer.needs_draft:
        vocab = read_draft_vocab(draft_dir, spec.draft_vocab_size, target.vocab_size)
    return SpecEngine(target, draft, spec, proposer=proposer, verifier=verifier, draft_vocab=vocab)


def engine_from_speculative_config(target: TargetRuntime, cfg: dict | None, dtype=None) -> SpecEngine:
    """The engine a vLLM-style speculative config asks for (None: plain decoding)."""
    from lilicorr.checkpoint import load_draft

    if not cfg:
        return build_engine(target)
    spec = parse_speculative_config(cfg)
    draft = None
    if "model" in cfg and get_method(cfg.get("method", "dflash")).needs_draft:
        draft = load_draft(cfg["model"], target.model.config, dtype=dtype)
    return build_engine(target, spec, draft, cfg.get("model"))
