"""Prompt rows to token ids, one way for generate, bench, ``data regenerate`` and the server.

A row with ``messages`` always gets the target's chat template (with the assistant turn opened);
a row with a plain ``prompt`` is encoded as raw text, or wrapped as one user message when the
caller asks for chat (``--chat``). Keeping this in one place is what makes a drafter trained on
regenerated chat data see, at serving time, exactly the token layout it was trained on.

Raw text starts with the tokenizer's ``<bos>`` where it adds one (``add_bos_token``: Gemma; SmolLM2 and
the tiny targets add none), as the model saw documents start in pre-training. A target without a chat
template (a base model such as Gemma 3 270M) takes raw text only: asking for chat is refused, naming
the target, instead of inventing a template the model never saw.
"""

from __future__ import annotations

ROLES = ("system", "user", "assistant", "tool")


class ChatError(ValueError):
    """A prompt row that cannot be turned into a chat prompt; the message names the field."""

    def __init__(self, message: str, field: str = "messages"):
        super().__init__(message)
        self.field = field


def check_messages(messages: object) -> list[dict]:
    """Validated copy of an OpenAI-style message list (text content parts are joined)."""
    if not isinstance(messages, list) or not messages:
        raise ChatError("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ChatError(f"messages[{i}] must be an object with a string 'role'")
        if m["role"] not in ROLES:
            raise ChatError(f"messages[{i}].role {m['role']!r}: expected one of {', '.join(ROLES)}")
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
            ):
                raise ChatError(f"messages[{i}].content: only parts of type 'text' with a string 'text' are supported")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise ChatError(f"messages[{i}].content must be a string")
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ChatError(f"messages[{i}].content is not valid Unicode text (lone surrogate at {e.start})") from e
        extra = sorted(set(m) - {"role", "content"})
        if extra:
            raise ChatError(f"messages[{i}]: unsupported keys {extra} (only role and content are used)")
        out.append({"role": m["role"], "content": content})
    return out


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _name(tokenizer) -> str:
    path = getattr(tokenizer, "name_or_path", "") or ""
    return f"target {path}" if path else "the target"


def chat_ids(tokenizer, messages: object) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template, assistant turn opened."""
    msgs = check_messages(messages)
    if not has_chat_template(tokenizer):
        raise ChatError(
            f"{_name(tokenizer)} has no chat template (a base model: it continues raw text); "
            "send a plain prompt without --chat / messages"
        )
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def row_ids(tokenizer, row: dict, chat: bool = False) -> list[int]:
    """Token ids of a prompts row: ``messages`` → chat template; ``prompt`` → raw, or one user turn if ``chat``."""
    if "messages" in row:
        return chat_ids(tokenizer, row["messages"])
    prompt = row.get("prompt")
    if not isinstance(prompt, str):
        raise ChatError("a prompt row needs 'messages' (a list) or 'prompt' (a string)", "prompt")
    if chat:
        return chat_ids(tokenizer, [{"role": "user", "content": prompt}])
    return text_ids(tokenizer, prompt)


def text_ids(tokenizer, text: str) -> list[int]:
    """Raw text as the model saw a document start: ``<bos>`` first where the tokenizer adds one."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and ids[:1] != [bos] and adds_bos(tokenizer):
        ids = [bos, *ids]
    return ids


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer starts text with ``<bos>``: its flag, or what its post-processor does (a reloaded
    fast tokenizer keeps the post-processor but reports ``add_bos_token`` False). Only the ``<bos>`` is taken:
    special tokens a tokenizer appends (an ``<eos>``) do not belong in a prompt."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    return bool(getattr(tokenizer, "add_bos_token", False)) or tokenizer.encode("a", add_special_tokens=True)[:1] == [
        bos
    ]
