"""Which joining requests are prefilled together.

A prefill forward pads every prompt of its batch to the longest, so one long prompt among short ones made the
whole batch cost as many tokens as the long prompt times the batch: the serving benchmark's c=32 level, whose
prompts ran from tens to thousands of tokens, fell to 6–13 tokens/s on every speculative arm
(docs/results/smollm2-serving-notes.md). Prefilling in groups of similar length bounds the padding: a group's
padded tokens stay within ``slack`` of its real tokens (plus ``free_pad`` a row, so near-equal short prompts
still share one forward), and a group's padded tokens stay under ``max_tokens`` (the attention scores of one
forward grow with the square of its width times its rows). A single prompt longer than ``max_tokens`` runs alone.
"""

from __future__ import annotations


def prefill_groups(
    lengths: list[int], slack: float = 0.25, free_pad: int = 16, max_tokens: int = 8192
) -> list[list[int]]:
    """Indices into ``lengths``, grouped: each group is prefilled by one forward of width = its longest prompt.

    Groups are runs of the prompts sorted by length (shortest first), each grown while
    ``rows × longest ≤ (1 + slack) × real tokens + free_pad × rows`` and ``rows × longest ≤ max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    real = 0
    for i in order:
        n = lengths[i]  # the longest so far: ``order`` is ascending
        if groups:
            rows = len(groups[-1]) + 1
            padded = rows * n
            if padded <= (1 + slack) * (real + n) + free_pad * rows and padded <= max_tokens:
                groups[-1].append(i)
                real += n
                continue
        groups.append([i])
        real = n
    return groups
