"""One generation request: its parameters, output so far, and the rules for when it ends.

Autoregressive decoding, the speculative engine and the server all commit tokens through
``Request.commit`` so that eos, ``max_tokens``, ``min_tokens`` and stop strings behave the same
everywhere, including when one speculative step emits several tokens at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from lilicorr.decoding.detokenize import IncrementalDetokenizer
from lilicorr.decoding.sampling import SamplingParams, make_generator
from lilicorr.decoding.stats import SpecStats


@dataclass
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    id: str = ""
    eos_ids: frozenset[int] = frozenset()
    output_ids: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length"
    stop_text_end: int | None = None  # character offset where a stop string began
    generator: torch.Generator | None = None
    t_start: float = field(default_factory=time.perf_counter)
    t_first_token: float | None = None
    t_end: float | None = None
    stats: SpecStats = field(default_factory=SpecStats)  # speculative counters of this request
    detok: IncrementalDetokenizer | None = field(default=None, repr=False)  # output text, built lazily
    detok_consumed: int = 0  # output ids already pushed into ``detok``
    # per output token, when ``params.logprobs`` is set: (its log-prob, [(token, log-prob)] top-N)
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params.validate()
        if not self.prompt_ids:
            raise ValueError("prompt must contain at least one token")
        if self.generator is None:
            self.generator = make_generator(self.params.seed)
        if self.params.stop_token_ids:
            self.eos_ids = self.eos_ids | frozenset(self.params.stop_token_ids)

    def commit(self, tokens: list[int], decode=None, logits: torch.Tensor | None = None) -> int:
        """Append emitted tokens until the request ends; returns how many were taken.

        ``decode`` (token ids → text) is needed only when stop strings are set. ``logits``
        ``[len(tokens), V]``: the target rows each token was chosen from, for ``params.logprobs``.
        """
        taken = 0
        want_lp = self.params.logprobs is not None and logits is not None
        for t in tokens:
            if self.finished:
                break
            self.output_ids.append(t)
            if want_lp:
                self._record_logprobs(t, logits[taken])
            taken += 1
            if self.t_first_token is None:
                self.t_first_token = time.perf_counter()
            n = len(self.output_ids)
            if t in self.eos_ids and not self.params.ignore_eos and n > self.params.min_tokens:
                self._finish("stop")
            elif n >= self.params.max_tokens:
                self._finish("length")
            elif self.params.stop and decode is not None:
                before = len(self.detok.text) if self.detok is not None else 0
                text = self._sync_text(decode).text
                if n >= self.params.min_tokens and len(text) > before:
                    # only a stop string that ends in the new text can be new: search just the tail
                    start = max(0, before - max(len(s) for s in self.params.stop) + 1)
                    hits = [i for s in self.params.stop if s and (i := text.find(s, start)) >= 0]
                    if hits:
                        self.stop_text_end = min(hits)
                        self._finish("stop")
        return taken

    def _record_logprobs(self, token: int, logits: torch.Tensor) -> None:
        lp = torch.log_softmax(logits.float(), -1)  # [V]
        top = []
        if self.params.logprobs:
            vals, idx = torch.topk(lp, self.params.logprobs)
            top = list(zip(idx.tolist(), vals.tolist(), strict=True))
        self.logprobs.append((float(lp[token]), top))

    def visible(self, token: int) -> bool:
        """Whether an output token shows in the text (eos and stop token ids are hidden unless ignore_eos)."""
        return token not in self.eos_ids or self.params.ignore_eos

    def _sync_text(self, decode) -> IncrementalDetokenizer:
        """Push the output ids not yet detokenized (eos hidden unless ``ignore_eos``)."""
        if self.detok is None:
            self.detok = IncrementalDetokenizer(decode)
        new = self.output_ids[self.detok_consumed :]
        self.detok_consumed = len(self.output_ids)
        shown = [t for t in new if self.visible(t)]
        if shown:
            self.detok.push(shown)
        return self.detok

    def _finish(self, reason: str) -> None:
        self.finished = True
        self.finish_reason = reason
        self.t_end = time.perf_counter()

    def text(self, decode) -> str:
        """Output text with a matched stop string (and what follows it) removed, eos not shown.

        While running, a character still missing bytes is left out; once finished, all of it is there.
        Incremental, so that calling it after every step stays linear in the output length.
        """
        detok = self._sync_text(decode)
        if self.stop_text_end is not None:
            return detok.text[: self.stop_text_end]
        return detok.final_text() if self.finished else detok.text
