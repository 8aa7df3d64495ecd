"""Prompt rows as the plain text a base model continues (``data regenerate --text-format raw``).

Why: a base model (Gemma 3 270M: no chat template) was never trained on a chat layout, so a drafter for it
learns from the target's continuations of *text* — the same text it is served (``/v1/completions``, ``generate``
without ``--chat``). The prompt sets are chat rows, so each row's text is recovered here, one rule for the
training data and for the raw evaluation prompts.
"""

from __future__ import annotations

TEXT_FORMATS = ("auto", "chat", "raw")


def raw_text(row: dict) -> str:
    """A prompt row as the plain text a base model continues: its ``prompt``, else its first user turn. A
    HumanEval row's turn is an instruction around the problem's code: the code alone is what a base model
    completes (the function's body), so the instruction and the fence are dropped."""
    from lilicorr.data.chat import ChatError, check_messages
    from lilicorr.data.prompt_sets import HUMANEVAL_INSTRUCTION

    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    if "messages" not in row:
        raise ChatError("a prompt row needs 'messages' (a list) or 'prompt' (a string)", "prompt")
    user = next((m["content"] for m in check_messages(row["messages"]) if m["role"] == "user"), None)
    if user is None:
        raise ChatError("raw text: the row's 'messages' have no user turn")
    fence = HUMANEVAL_INSTRUCTION + "```python\n"
    if user.startswith(fence) and user.endswith("```"):
        return user[len(fence) : -3]
    return user


def text_format(cfg, tokenizer) -> str:
    """``chat`` or ``raw`` for a ``RegenConfig``: ``auto`` is raw exactly when the target has no chat template
    (a base model)."""
    from lilicorr.data.chat import has_chat_template

    if cfg.text_format not in TEXT_FORMATS:
        raise ValueError(f"--text-format {cfg.text_format!r}: expected one of {', '.join(TEXT_FORMATS)}")
    if cfg.text_format == "auto":
        return "chat" if has_chat_template(tokenizer) else "raw"
    return cfg.text_format


def raw_rows(rows: list[dict]) -> list[dict]:
    """Prompt rows as ``{id, category, prompt}`` with their raw text: the one mapping ``write_raw_prompts`` and a
    campaign's ``SET:raw`` prompt files (``training/campaign_data.py``) both write."""
    return [{"id": r.get("id"), "category": r.get("category"), "prompt": raw_text(r)} for r in rows]


def write_raw_prompts(src: str, out: str) -> int:
    """``out``: the rows of the prompts JSONL ``src`` as ``{id, category, prompt}`` with their raw text (the
    evaluation sets for a base model: ``generate`` / ``bench`` encode a ``prompt`` row as raw text). Returns
    the rows written."""
    import json
    from pathlib import Path

    from lilicorr.data.atomic import atomic_write_text
    from lilicorr.data.prompt_sets import read_prompt_rows

    rows = raw_rows(read_prompt_rows(Path(src)))
    atomic_write_text(Path(out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)
