"""llama.cpp's own server as a deployment path: run chat prompts through ``llama-server`` with the target
GGUF, with or without a drafter GGUF exported by ``lilicorr export --format gguf``.

Used by the llama.cpp check (``make llamacpp-check``: text with a drafter identical to text without
one) and by ``benchmarks/llamacpp_speed.py`` (tokens/s and acceptance beside lilicorr's engine).
The server process itself is ``lilicorr.runtime.llama_server.LlamaServer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lilicorr.runtime.llama_server import LLAMA_SERVER, LlamaServer

__all__ = ["LLAMA_SERVER", "Answer", "LlamaServer", "chat", "export_drafters", "pooled"]


def export_drafters(plan: list[tuple[str, str, dict, str]], target: str, out_dir: Path) -> dict[str, Path]:
    """``plan``: (label, drafter folder, ``export_gguf`` options, file suffix) → label: the GGUF, exported now as
    ``out_dir/FOLDER-SUFFIX.gguf`` (every time: a file left from before a promotion would be the old drafter)."""
    from lilicorr.export.gguf import export_gguf

    out_dir.mkdir(parents=True, exist_ok=True)
    arms = {}
    for label, drafter, options, suffix in plan:
        arms[label] = out_dir / f"{Path(drafter).name}-{suffix}.gguf"
        export_gguf(drafter, target, arms[label], **options)
    return arms


@dataclass
class Answer:
    id: str
    text: str
    predicted_n: int
    predicted_per_second: float
    draft_n: int = 0
    draft_n_accepted: int = 0

    @property
    def tau(self) -> float:
        """Mean tokens per target step: each verify step emits its accepted drafts plus one token."""
        steps = self.predicted_n - self.draft_n_accepted
        return self.predicted_n / steps if steps > 0 else float("nan")


def chat(server: LlamaServer, row: dict, max_tokens: int) -> Answer:
    """One greedy chat completion (the GGUF's own chat template); llama.cpp's timings and draft counts."""
    body = {"messages": row["messages"], "max_tokens": max_tokens, "temperature": 0, "seed": 0}
    res = server.post("/v1/chat/completions", body)
    t = res.get("timings", {})
    return Answer(
        id=str(row.get("id")),
        text=res["choices"][0]["message"]["content"],
        predicted_n=int(t.get("predicted_n", 0)),
        predicted_per_second=float(t.get("predicted_per_second", 0.0)),
        draft_n=int(t.get("draft_n", 0)),
        draft_n_accepted=int(t.get("draft_n_accepted", 0)),
    )


def pooled(answers: list[Answer]) -> dict:
    """Tokens/s over all answers (total tokens / total generation time) and pooled acceptance."""
    n = sum(a.predicted_n for a in answers)
    secs = sum(a.predicted_n / a.predicted_per_second for a in answers if a.predicted_per_second > 0)
    drafted, accepted = sum(a.draft_n for a in answers), sum(a.draft_n_accepted for a in answers)
    steps = n - accepted
    return {
        "tokens": n,
        "tokens_per_s": round(n / secs, 2) if secs else 0.0,
        "draft_tokens": drafted,
        "accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "tau": round(n / steps, 4) if steps > 0 else None,
    }
