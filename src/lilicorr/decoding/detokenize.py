"""Incremental detokenization: text grows by the new tokens only, not by re-decoding the whole output.

Re-decoding every output id at every step costs O(n²) over a long generation, which the server
(one decode per emitted chunk) and stop-string matching (one decode per committed token) would
both pay. This follows the prefix/read-offset scheme vLLM uses: decode a short window that starts a
few tokens back, so tokenizers whose text for a token depends on its left neighbour (leading-space
rules, byte fallback) are handled, and hold back a tail that ends inside a UTF-8 sequence ("\ufffd")
until the bytes that complete it arrive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Decode = Callable[[Sequence[int]], str]


class IncrementalDetokenizer:
    """Text of a growing token sequence; ``text`` holds only complete characters."""

    def __init__(self, decode: Decode):
        self.decode = decode
        self.ids: list[int] = []
        self.text = ""  # confirmed text of ids[:read_offset]
        self.prefix_offset = 0  # window start: tokens before it never change the text again
        self.read_offset = 0  # tokens up to here are in ``text``

    def push(self, ids: Sequence[int]) -> str:
        """Add tokens; returns the newly confirmed text (possibly empty while a character is incomplete)."""
        self.ids.extend(ids)
        if len(self.ids) == self.read_offset:
            return ""
        prefix = self.decode(self.ids[self.prefix_offset : self.read_offset])
        window = self.decode(self.ids[self.prefix_offset :])
        if window.endswith("\ufffd") or len(window) <= len(prefix):
            return ""  # an incomplete character: wait for the bytes that complete it
        if window.startswith(prefix):
            delta = window[len(prefix) :]
        else:  # the new tokens rewrote the window's text (rare): fall back to one full decode
            full = self.decode(self.ids)
            if not full.startswith(self.text):
                return ""
            delta = full[len(self.text) :]
        self.text += delta
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return delta

    def final_text(self) -> str:
        """Everything, including a tail that never completed (shown as the tokenizer renders it)."""
        if self.read_offset == len(self.ids):
            return self.text
        prefix = self.decode(self.ids[self.prefix_offset : self.read_offset])
        window = self.decode(self.ids[self.prefix_offset :])
        if window.startswith(prefix):
            return self.text + window[len(prefix) :]
        return self.decode(self.ids)
