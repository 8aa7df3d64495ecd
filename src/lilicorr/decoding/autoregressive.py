"""Plain autoregressive decoding on the target runtime: the baseline every speedup is measured against."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import sample_from, target_probs
from lilicorr.target.runtime import TargetRuntime


def pad_right(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists: ids ``[batch, max_len]`` and real-token mask ``[batch, max_len]``."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), n, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids, mask


def choose_token(logits: torch.Tensor, req: Request) -> int:
    """Next token from one row of target logits ``[vocab]`` under the request's sampling params."""
    if req.params.greedy:
        return int(logits.argmax())
    return sample_from(target_probs(logits, req.params), req.generator)


@torch.no_grad()
def generate_autoregressive(
    target: TargetRuntime, requests: list[Request], on_commit: Callable[[int, Request], None] | None = None
) -> list[Request]:
    """Decode a batch of requests token by token until each one ends.

    ``on_commit(index, request)`` is called after each committed token (for streaming output).
    """
    decode = target.tokenizer.decode
    state = target.new_state(len(requests))
    ids, mask = pad_right([r.prompt_ids for r in requests], pad=0)
    out = target.forward(state, ids, mask, want_taps=False)
    last = mask.sum(1) - 1  # [batch]
    logits = out.logits[torch.arange(len(requests)), last]  # [batch, vocab]
    active = list(range(len(requests)))
    while True:
        next_tokens = []
        for row, ri in enumerate(active):
            tok = choose_token(logits[row], requests[ri])
            requests[ri].commit([tok], decode)
            if on_commit is not None:
                on_commit(ri, requests[ri])
            next_tokens.append(tok)
        keep = [row for row, ri in enumerate(active) if not requests[ri].finished]
        if not keep:
            break
        if len(keep) < len(active):
            target.select_rows(state, torch.tensor(keep))
            active = [active[row] for row in keep]
            next_tokens = [next_tokens[row] for row in keep]
        out = target.forward(state, torch.tensor(next_tokens)[:, None], want_taps=False)
        logits = out.logits[:, -1]
    return requests
