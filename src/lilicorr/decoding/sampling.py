"""Request sampling parameters and the processed target distribution they define.

One definition serves autoregressive generation and every verifier: losslessness is measured
against *this* distribution (temperature, then top-k, then top-p, as vLLM orders them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: disabled
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0
    # Log-probabilities to record per emitted token: None = none; N ≥ 0 = the token's own plus the
    # N most likely. Raw target log-probs (log_softmax of the logits, vLLM's default
    # ``raw_logprobs``), so they are the same whatever drafted the token.
    logprobs: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)  # end the request like eos (vLLM's field)

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 or positive, got {self.top_k}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be >= 0, got {self.logprobs}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Processed target distribution ``[..., vocab]`` (fp32) for a sampling request (T > 0)."""
    x = logits.float() / params.temperature
    if params.top_k and params.top_k > 0 and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if params.top_p < 1.0:
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws: ``probs [..., V]`` (unnormalised is fine) with ``uniforms [...]`` in [0, 1) →
    indices ``[...]``. The one sampling rule of every proposer, walk and verifier, so that a drafted
    token and the q handed to rejection sampling always come from the same computation."""
    cdf = probs.cumsum(-1)
    x = (uniforms.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1).contiguous()
    return torch.searchsorted(cdf.contiguous(), x, right=True).squeeze(-1).clamp_max(probs.shape[-1] - 1)


def sample_from(probs: torch.Tensor, gen: torch.Generator | None) -> int:
    """One draw from a 1-D distribution with the request's own generator (double-precision CDF)."""
    return int(inverse_cdf(probs.double(), torch.rand((), generator=gen)))


def choose_token(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None) -> int:
    """Next token from one row of target logits ``[vocab]``: argmax at T = 0, else a sample."""
    if params.greedy:
        return int(logits.argmax())
    return sample_from(target_probs(logits, params), gen)


def make_generator(seed: int | None) -> torch.Generator:
    g = torch.Generator()
    if seed is None:
        g.seed()
    else:
        g.manual_seed(seed)
    return g
