"""Draft checkpoint I/O: HF-style folders that vLLM and SGLang load unchanged."""

from lilicorr.checkpoint.io import (
    load_draft,
    read_draft_config,
    save_draft,
    to_scheme_a,
    to_scheme_b,
    validate_draft_folder,
)
from lilicorr.models.config import CheckpointError
from lilicorr.models.head import FLOAT_ONLY_MODULES

__all__ = [
    "FLOAT_ONLY_MODULES",
    "CheckpointError",
    "load_draft",
    "read_draft_config",
    "save_draft",
    "to_scheme_a",
    "to_scheme_b",
    "validate_draft_folder",
]
