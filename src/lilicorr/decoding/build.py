"""The one way to get an engine: ``build_engine`` (and ``engine_from_speculative_config`` for a vLLM-style
config). The config is resolved once (``decoding.config.resolve``), the proposer comes from the resolved
method, and one verifier checks every proposal, so generate, bench, serve and the data tools all run the
same code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lilicorr.decoding.config import ResolvedSpec, SpecConfig, parse_speculative_config, resolve
from lilicorr.decoding.draft_vocab import read_draft_vocab
from lilicorr.decoding.engine import SpecEngine
from lilicorr.decoding.methods import BuildContext, get_method
from lilicorr.decoding.proposal import Proposer
from lilicorr.runtime.packed_linear import pack_linears

if TYPE_CHECKING:
    from lilicorr.decoding.verify import Verifier
    from lilicorr.models.draft import DraftModel
    from lilicorr.runtime.runtime import TargetRuntime


def _resolved(
    spec: SpecConfig | ResolvedSpec | None, draft: DraftModel | None, draft_dir: str | Path | None
) -> ResolvedSpec:
    """``spec`` resolved (None: ``SpecConfig()``, vLLM's rule: what ``draft`` is, plain decoding without one)."""
    return spec if isinstance(spec, ResolvedSpec) else resolve(spec or SpecConfig(), draft_dir, draft)


def build_proposer(
    target: TargetRuntime,
    draft: DraftModel | None,
    spec: SpecConfig | ResolvedSpec,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
) -> Proposer:
    """The proposer of the resolved method, built from the resolved draft length and typed options."""
    r = _resolved(spec, draft, draft_dir)
    where = Path(r.model) if r.model else None
    ctx = BuildContext(target, draft, where, r.draft_sample_method, r.num_speculative_tokens, r.options, extras or {})
    return get_method(r.method).build(ctx)


def build_engine(
    target: TargetRuntime,
    spec: SpecConfig | ResolvedSpec | None = None,
    draft: DraftModel | None = None,
    draft_dir: str | Path | None = None,
    extras: dict[str, Any] | None = None,
    verifier: Verifier | None = None,
    proposer: Proposer | None = None,
) -> SpecEngine:
    """An engine for ``spec`` (default: plain decoding, or what ``draft`` is); ``proposer`` replaces the
    registry's (tests that spy on or script proposals)."""
    r = _resolved(spec, draft, draft_dir)
    proposer = proposer or build_proposer(target, draft, r, extras=extras)
    if draft is not None:
        pack_linears(draft)  # the drafter's layers as the target's: packed once (runtime/packed_linear.py)
    vocab = None
    if r.draft_vocab_size and proposer.needs_draft:
        vocab = read_draft_vocab(r.model, r.draft_vocab_size, target.vocab_size)
    return SpecEngine(target, draft, r, proposer=proposer, verifier=verifier, draft_vocab=vocab)


def engine_from_speculative_config(
    target: TargetRuntime, cfg: dict | SpecConfig | ResolvedSpec | None, dtype=None
) -> SpecEngine:
    """The engine a vLLM-style speculative config asks for (None: plain decoding); its drafter is loaded from
    the resolved folder when the resolved method drafts with a model."""
    from lilicorr.checkpoint import load_draft

    if not cfg:
        return build_engine(target)
    r = (
        cfg
        if isinstance(cfg, ResolvedSpec)
        else resolve(cfg if isinstance(cfg, SpecConfig) else parse_speculative_config(cfg))
    )
    draft = load_draft(r.model, target.model.config, dtype=dtype) if r.needs_draft and r.model else None
    return build_engine(target, r, draft)
