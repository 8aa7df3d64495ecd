"""Fixtures for engine tests: random drafters for the tiny target, and a tiny-vocabulary target."""

from __future__ import annotations

import torch

from lilicorr.decoding.methods.dflash import DFlashProposer
from lilicorr.decoding.proposal import Proposal
from lilicorr.models.config import DraftConfig, LiLiCorrGeometry
from lilicorr.models.draft import DraftModel


def random_draft(target, lilicorr: bool = True, block: int = 5, k: int = 4, seed: int = 0) -> DraftModel:
    cfg = DraftConfig(
        hidden_size=target.hidden_size,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=target.vocab_size,
        block_size=block,
        mask_token_id=3,
        target_layer_ids=[0, target.num_layers - 1],
        lilicorr=LiLiCorrGeometry(candidate_topk=k, hidden_size=0, num_layers=1, num_heads=4, factor_dim=16)
        if lilicorr
        else None,
    )
    torch.manual_seed(seed)
    model = DraftModel(cfg).init_weights(seed, std=0.2).eval()
    if lilicorr:
        with torch.no_grad():
            for p in model.lilicorr.parameters():
                p.add_(torch.randn_like(p) * 0.3)
    return model


class ReferenceProposer(DFlashProposer):
    """Test double: proposes the reference continuation of each request with every third token
    corrupted, so that multi-token acceptance, partial acceptance and rejection all occur."""

    name = "reference"

    def __init__(self, references: dict[int, list[int]], vocab: int):
        super().__init__("greedy")
        self.references, self.vocab = references, vocab

    def propose(self, d, temperature, uniforms, timer):
        rows = []
        n = d.logits.shape[1]
        for req in d.requests:
            ref = self.references[id(req)]
            done = len(req.output_ids)
            toks = [ref[done + i] if done + i < len(ref) else 5 for i in range(n)]
            for i in range(n):
                if (done + i) % 3 == 2:
                    toks[i] = (toks[i] + 1) % self.vocab
            rows.append(toks)
        tokens = torch.tensor(rows)
        return Proposal(tokens=tokens, q_ids=tokens[..., None], q_probs=torch.ones(*tokens.shape, 1))


def save_random_draft(target_dir, out, lilicorr: bool = True):
    """Write a random-weight draft checkpoint (fp32) for the target folder; returns ``out``."""
    from lilicorr.checkpoint import save_draft
    from lilicorr.runtime.runtime import TargetRuntime

    save_draft(random_draft(TargetRuntime.load(target_dir), lilicorr=lilicorr), out, dtype=torch.float32)
    return out
