"""``ngram``: prompt lookup (vLLM's ``method: "ngram"``), the training-free baseline.

The last ``k`` tokens of a request (``prompt_lookup_max`` ≥ k ≥ ``prompt_lookup_min``, longest
first) are searched for earlier in its own prompt + output; the tokens that followed the most recent
earlier occurrence are the draft. No match: the draft repeats the pending token (verification
rejects it at no extra cost, since the target pass is paid anyway). The draft is deterministic, so q
is one-hot and verification stays exact at any temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lilicorr.decoding.methods.base import BuildContext, Method, option, register
from lilicorr.decoding.proposal import DraftOutput, Proposal, Proposer
from lilicorr.decoding.stats import StageTimer


def lookup(history: list[int], n: int, k_max: int, k_min: int, pad: bool = True) -> list[int] | None:
    """The ``n`` tokens after the latest earlier occurrence of the longest matching suffix, or None; fewer
    than ``n`` near the end of the history are padded with the last one (``pad``) or returned as they are."""
    t = len(history)
    for k in range(min(k_max, t - 1), k_min - 1, -1):
        suffix = history[t - k :]
        for start in range(t - k - 1, -1, -1):  # latest earlier occurrence first
            if history[start : start + k] == suffix:
                follow = history[start + k : start + k + n]
                if follow:
                    return follow + [follow[-1]] * (n - len(follow)) if pad else follow
    return None


def lookup_request(request, n: int, k_max: int, k_min: int, pad: bool = True) -> list[int] | None:
    """``lookup`` over a request's prompt + output so far (which ends with its pending token)."""
    return lookup(request.prompt_ids + request.output_ids, n, k_max, k_min, pad)


class NgramProposer(Proposer):
    name = "ngram"
    needs_draft = False  # no drafter model: the engine skips the draft pass and the context cache

    def __init__(self, num_speculative_tokens: int, prompt_lookup_max: int = 4, prompt_lookup_min: int = 1):
        super().__init__("greedy")
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError(
                f"ngram: need 1 <= prompt_lookup_min <= prompt_lookup_max, got {prompt_lookup_min}, {prompt_lookup_max}"
            )
        self.n, self.k_max, self.k_min = num_speculative_tokens, prompt_lookup_max, prompt_lookup_min

    def propose(self, d: DraftOutput, temperature: torch.Tensor, uniforms: torch.Tensor, timer: StageTimer) -> Proposal:
        with timer.stage("walk"):
            rows = []
            for req, pending in zip(d.requests or [], d.anchor_tokens.tolist(), strict=True):
                rows.append(lookup_request(req, self.n, self.k_max, self.k_min) or [pending] * self.n)
            return self.one_hot_chain(torch.tensor(rows, dtype=torch.long))  # [batch, n]


@dataclass(frozen=True)
class NgramOptions:
    prompt_lookup_max: int = option(4, "longest suffix searched (vLLM's key)")
    prompt_lookup_min: int = option(1, "shortest suffix searched (vLLM's key)")


@register
class Ngram(Method):
    name = "ngram"
    per_draft_length = False
    needs_draft = False
    default_draft_length = 4  # vLLM's ngram default
    help = "prompt lookup: the tokens that followed the latest earlier occurrence of the last k tokens"
    Options = NgramOptions

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        o: NgramOptions = ctx.options
        return NgramProposer(ctx.num_speculative_tokens, o.prompt_lookup_max, o.prompt_lookup_min)
