"""A target folder as the tools read it: checked (a causal LM with a tokenizer, errors naming the file and
field), its tokenizer and its end-of-answer ids — without loading weights where those are not needed."""

from __future__ import annotations

import json
from pathlib import Path


class TargetError(ValueError):
    """A target folder or request that cannot be used; the message names the file or field."""


def check_folder(path: Path) -> dict:
    if not path.is_dir():
        raise TargetError(f"target {path}: not a directory")
    cfg_path = path / "config.json"
    if not cfg_path.exists():
        raise TargetError(f"target {path}: config.json not found (expected a Hugging Face model folder)")
    cfg = json.loads(cfg_path.read_text())
    archs = cfg.get("architectures") or []
    if not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in archs):
        raise TargetError(
            f"target {path}: config.json field 'architectures' = {archs}: expected a causal LM "
            "(an architecture ending in 'ForCausalLM')"
        )
    if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise TargetError(f"target {path}: no tokenizer (tokenizer.json, tokenizer.model or vocab.json) found")
    return cfg


def eos_ids(generation_config, config, tokenizer) -> set[int]:
    """A target's end-of-answer ids: the generation config's eos (one id or a list), else the model
    config's, plus the tokenizer's."""
    eos = generation_config.eos_token_id if generation_config else None
    eos = eos if eos is not None else config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def folder_tokenizer_and_eos(path: str | Path):
    """Tokenizer and eos ids of a target folder without loading its weights (for the data tools)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    path = Path(path)
    check_folder(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    try:
        gen = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json
        gen = None
    return tokenizer, frozenset(eos_ids(gen, AutoConfig.from_pretrained(path), tokenizer))
