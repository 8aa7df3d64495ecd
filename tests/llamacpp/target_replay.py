"""Replays llama-server's target computations through the same ``libllama`` (``make llamacpp``'s build), batch
by batch, to read the target logits behind each token (``test_near_tie.py``).

Run as a subprocess — ``python -m tests.llamacpp.target_replay IN.json OUT.json`` — with ``LLAMA_CPP_LIB_PATH``
naming the build's library folder and llama-cpp-python's ctypes bindings (from the pinned sdist) on
``PYTHONPATH``: the bindings load that library, so the kernels are llama-server's own (the portable AVX2 build),
not those of some other llama.cpp wheel. The context is built as llama-server builds its target's for one slot
(``-c 4096``: n_batch 2048, n_ubatch 512, at most 8 outputs, flash attention auto, f16 KV cache).

Per case, two replays:

- *plain* — what llama-server without a draft runs: the prompt in one batch, then one token per decode;
- *spec* — what it ran with a drafter: the prompt in one batch, then each verify batch as its log shows it
  (the last sampled token and the drafted tokens in one decode, logits for all), the target's greedy
  acceptance (the longest drafted prefix equal to the argmax, then the argmax), the rejected rows dropped from
  the KV cache; one-token steps once llama-server stops drafting near ``n_predict``.

It reports both replays' tokens, every answer token's top-2 gap in the plain replay and, on the text the two
answers share, per row its position and the largest difference between the two replays' logits. At the first
token where the answers differ (``d``): the top logits of (a) the plain one-token step and (b) the verify row, the
two crossed variants (a one-token step on the verify-made KV cache; the same verify batch on the one-token-made KV
cache), and whether the verify row changes at all when the drafted tokens after it are replaced by others.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


class Target:
    def __init__(self, model: str, threads: int, n_ctx: int):
        from llama_cpp import llama_cpp as lib

        self.lib = lib
        self._log = lib.llama_log_callback(lambda level, text, user: None)
        lib.llama_log_set(self._log, None)
        lib.llama_backend_init()
        self.model = lib.llama_model_load_from_file(model.encode(), lib.llama_model_default_params())
        assert self.model, f"cannot load {model}"
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.threads, self.n_ctx = threads, n_ctx
        self.batch = lib.llama_batch_init(2048, 0, 1)
        self.ctx = None

    def reset(self) -> None:
        """A fresh context, as llama-server's target context for one slot."""
        lib = self.lib
        if self.ctx is not None:
            lib.llama_free(self.ctx)
        p = lib.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = self.n_ctx, 2048, 512, 1
        p.n_outputs_max = p.n_outputs_max_per_seq = 8  # llama-server: n_draft_max + 1
        p.n_threads = p.n_threads_batch = self.threads
        self.ctx = lib.llama_init_from_model(self.model, p)
        assert self.ctx, "cannot create the context"

    def decode(self, tokens: list[int], pos0: int, all_logits: bool) -> list[np.ndarray]:
        """One llama_decode of ``tokens`` at positions pos0…; the logits of every row (``all_logits``) or of the
        last."""
        b, n = self.batch, len(tokens)
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i] = t, pos0 + i, 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or i == n - 1
        assert self.lib.llama_decode(self.ctx, b) == 0, "llama_decode failed"
        rows = range(n) if all_logits else [n - 1]
        return [
            np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
            for i in rows
        ]

    def drop_from(self, pos: int) -> None:
        self.lib.llama_memory_seq_rm(self.lib.llama_get_memory(self.ctx), 0, pos, -1)

    # the two histories, up to (not including) position `upto`, leaving the context there
    def plain_history(self, prompt: list[int], answer: list[int], upto: int) -> None:
        self.reset()
        self.decode(prompt, 0, False)
        for k in range(upto - len(prompt)):
            self.decode([answer[k]], len(prompt) + k, False)

    def spec_history(self, prompt: list[int], steps: list, upto: int) -> None:
        self.reset()
        self.decode(prompt, 0, False)
        pos = len(prompt)
        for sampled, drafts in steps:
            if pos >= upto:
                break
            rows = self.decode([sampled, *drafts], pos, True)
            pos += 1 + accepted(drafts, rows)
            self.drop_from(pos)
        assert pos == upto, f"the verify batches end at {pos}, not at {upto}"


def accepted(drafts: list[int], rows: list[np.ndarray]) -> int:
    """llama.cpp's greedy verification: the longest drafted prefix equal to the target's argmax."""
    n = 0
    while n < len(drafts) and drafts[n] == int(rows[n].argmax()):
        n += 1
    return n


def top(lg: np.ndarray, k: int = 3) -> list[list]:
    order = np.argsort(-lg, kind="stable")[:k]
    return [[int(i), float(lg[i])] for i in order]


def replay_case(t: Target, case: dict) -> dict:
    prompt, plain, spec, steps, n = case["prompt"], case["plain"], case["spec"], case["steps"], len(case["plain"])
    P = len(prompt)
    # plain: prompt batch, then one token per decode
    t.reset()
    lg = t.decode(prompt, 0, False)[-1]
    plain_out, plain_logits = [], []
    for k in range(n):
        plain_out.append(int(lg.argmax()))
        plain_logits.append(lg)
        if k < n - 1:
            lg = t.decode([plain_out[-1]], P + k, False)[-1]
    gaps = [float(np.diff(np.sort(x)[-2:])[0]) for x in plain_logits]
    d = next((i for i, (x, y) in enumerate(zip(plain, spec, strict=True)) if x != y), None)
    out = {"id": case["id"], "plain_replay": plain_out, "plain_gaps": gaps, "d": d}
    # spec: prompt batch, then the verify batches of llama-server's log
    t.reset()
    lg = t.decode(prompt, 0, False)[-1]
    spec_out, spec_logits, where = [int(lg.argmax())], [lg], [None]
    pos = P
    for sampled, drafts in steps:
        if sampled != spec_out[-1]:
            break  # the replay left llama-server's path: reported as a mismatch below
        block = [sampled, *drafts]
        rows = t.decode(block, pos, True)
        n_acc = accepted(drafts, rows)
        for j in range(n_acc + 1):
            spec_out.append(int(rows[j].argmax()))
            spec_logits.append(rows[j])
            where.append({"pos": pos, "block": block, "row": j})
        pos += n_acc + 1
        t.drop_from(pos)
    while len(spec_out) < n:  # llama-server drafts nothing for the last tokens
        lg = t.decode([spec_out[-1]], pos, False)[-1]
        spec_out.append(int(lg.argmax()))
        spec_logits.append(lg)
        where.append({"pos": pos, "block": [spec_out[-2]], "row": 0})
        pos += 1
    spec_out, spec_logits, where = spec_out[:n], spec_logits[:n], where[:n]
    out["spec_replay"] = spec_out
    # the same text (before d), computed both ways: per answer token, the position of the row that predicted it
    # and the largest difference between the two replays' logits there
    same = range(n if d is None else d)
    out["same_text"] = [[P + k - 1, float(np.abs(plain_logits[k] - spec_logits[k]).max())] for k in same]
    if d is None or plain_out != plain or spec_out != spec or where[d] is None:
        return out
    out["logit_diff_at"] = float(np.abs(plain_logits[d] - spec_logits[d]).max())
    at = where[d]
    out["a"], out["b"], out["at"] = top(plain_logits[d]), top(spec_logits[d]), at
    block, j, bpos = at["block"], at["row"], at["pos"]
    # crossed: the verify-made KV cache with one-token steps; the one-token-made KV cache with the verify batch
    t.spec_history(prompt, steps, bpos)
    for i in range(j + 1):
        lg = t.decode([block[i]], bpos + i, False)[-1]
    out["spec_history_one_token"] = top(lg)
    t.plain_history(prompt, plain, bpos)
    out["plain_history_verify_batch"] = top(t.decode(block, bpos, True)[j]) if len(block) > 1 else None
    # the verify batch with the drafted tokens after row j replaced: does row j see them?
    if j + 1 < len(block):
        other_drafts = [(x + 1) % t.n_vocab for x in block[j + 1 :]]
        t.spec_history(prompt, steps, bpos)
        other = t.decode(block[: j + 1] + other_drafts, bpos, True)[j]
        out["row_change_with_other_later_drafts"] = float(np.abs(other - spec_logits[d]).max())
    return out


def main(src: str, dst: str) -> None:
    job = json.loads(Path(src).read_text())
    t = Target(job["model"], job["threads"], job["n_ctx"])
    Path(dst).write_text(json.dumps([replay_case(t, c) for c in job["cases"]]))


if __name__ == "__main__":
    main(*sys.argv[1:3])
