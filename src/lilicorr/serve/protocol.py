"""OpenAI request parsing and validation: every problem becomes a 4xx naming the field.

Every field a request may carry is in ``FIELDS``: honoured, accepted only at its no-op value, or
metadata. Anything else — an unknown field, or a feature the engine does not implement set to a
value that would change the output — is refused with a 400 naming it, as OpenAI's own API does.
A silently ignored field (``logprobs`` once was) makes a client believe it got what it asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lilicorr.decoding.sampling import SamplingParams


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error" if self.status < 500 else "server_error",
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class ParsedRequest:
    prompt_ids: list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool


MAX_LOGPROBS = 20  # OpenAI's limit (and vLLM's default max_logprobs)

# field → (endpoints: "c" completions, "h" chat, "ch" both; how it is handled). The README's table is
# this table; ``noop:`` fields are accepted only at the value that changes nothing.
FIELDS: dict[str, tuple[str, str]] = {
    "model": ("ch", "honoured: must be the served model name (404 otherwise)"),
    "prompt": ("c", "honoured: a string, a list of token ids, or a one-element list of either"),
    "messages": ("h", "honoured: roles system / user / assistant / tool, text content (parts of type text)"),
    "max_tokens": ("ch", "honoured"),
    "max_completion_tokens": ("h", "honoured (takes precedence over max_tokens)"),
    "temperature": ("ch", "honoured (0 = greedy)"),
    "top_p": ("ch", "honoured"),
    "top_k": ("ch", "honoured (vLLM extra; 0 or -1 = off)"),
    "seed": ("ch", "honoured (per-request generator)"),
    "stop": ("ch", "honoured (string or list; counted after min_tokens, as vLLM)"),
    "stop_token_ids": ("ch", "honoured (vLLM extra)"),
    "min_tokens": ("ch", "honoured (vLLM extra)"),
    "ignore_eos": ("ch", "honoured (vLLM extra)"),
    "stream": ("ch", "honoured (SSE, ends with [DONE])"),
    "stream_options": ("ch", "honoured: include_usage; other keys refused"),
    "logprobs": ("ch", "honoured: completions an integer 0..20, chat a boolean; raw target log-probs"),
    "top_logprobs": ("h", "honoured: 0..20, with logprobs = true"),
    "n": ("ch", "noop: 1 only (n > 1 refused)"),
    "best_of": ("c", "noop: 1 only"),
    "echo": ("ch", "noop: false only"),
    "suffix": ("c", "noop: null / empty only"),
    "presence_penalty": ("ch", "noop: 0 only"),
    "frequency_penalty": ("ch", "noop: 0 only"),
    "repetition_penalty": ("ch", "noop: 1 only (vLLM extra)"),
    "min_p": ("ch", "noop: 0 only (vLLM extra)"),
    "logit_bias": ("ch", "noop: null / {} only"),
    "response_format": ("h", 'noop: {"type": "text"} only'),
    "tools": ("h", "noop: null / [] only (no tool calling)"),
    "tool_choice": ("h", 'noop: null / "none" only'),
    "parallel_tool_calls": ("h", "metadata: accepted, no effect without tools"),
    "functions": ("h", "noop: null / [] only"),
    "function_call": ("h", 'noop: null / "none" only'),
    "add_generation_prompt": ("h", "noop: true only (vLLM extra)"),
    "continue_final_message": ("h", "noop: false only (vLLM extra)"),
    "skip_special_tokens": ("ch", "noop: true only (vLLM extra)"),
    "include_stop_str_in_output": ("ch", "noop: false only (vLLM extra)"),
    "user": ("ch", "metadata: accepted, no effect"),
    "metadata": ("h", "metadata: accepted, no effect"),
    "store": ("h", "noop: false / null only"),
    "service_tier": ("ch", 'metadata: null / "auto" / "default" only'),
}

_NOOP_VALUES: dict[str, tuple] = {
    "n": (1,),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_p": (0, 0.0),
    "logit_bias": ({},),
    "response_format": ({"type": "text"},),
    "tools": ([],),
    "tool_choice": ("none",),
    "functions": ([],),
    "function_call": ("none",),
    "add_generation_prompt": (True,),
    "continue_final_message": (False,),
    "skip_special_tokens": (True,),
    "include_stop_str_in_output": (False,),
    "store": (False,),
    "service_tier": ("auto", "default"),
}


def check_fields(body: dict, kind: str) -> None:
    """Refuse unknown fields, fields of the other endpoint, and unimplemented features set to a real value."""
    code = "c" if kind == "completion" else "h"
    endpoint = "/v1/completions" if kind == "completion" else "/v1/chat/completions"
    for key, val in body.items():
        spec = FIELDS.get(key)
        if spec is None or code not in spec[0]:
            raise RequestError(f"unsupported field '{key}' for {endpoint}", key)
        if key in _NOOP_VALUES and val is not None:
            ok = _NOOP_VALUES[key]
            if isinstance(val, bool) != isinstance(ok[0], bool) or val not in ok:
                raise RequestError(f"'{key}' = {_short(val)} is not supported ({spec[1].removeprefix('noop: ')})", key)


def _short(val: Any) -> str:
    text = repr(val)
    return text if len(text) <= 60 else text[:57] + "..."


def check_text(text: str, field: str) -> str:
    """A JSON string may hold lone UTF-16 surrogates that no tokenizer can encode: refuse them by name."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(f"'{field}' is not valid Unicode text (lone surrogate at position {e.start})", field) from e
    return text


def _number(body: dict, key: str, default: float, lo: float | None = None, hi: float | None = None) -> float:
    val = body.get(key, default)
    if val is None:
        return default
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise RequestError(f"'{key}' must be a number, got {type(val).__name__}", key)
    if lo is not None and val < lo:
        raise RequestError(f"'{key}' must be >= {lo}, got {val}", key)
    if hi is not None and val > hi:
        raise RequestError(f"'{key}' must be <= {hi}, got {val}", key)
    return float(val)


def _int(body: dict, key: str, default: int | None, lo: int | None = None) -> int | None:
    val = body.get(key, default)
    if val is None:
        return default
    if isinstance(val, bool) or not isinstance(val, int):
        raise RequestError(f"'{key}' must be an integer, got {type(val).__name__}", key)
    if lo is not None and val < lo:
        raise RequestError(f"'{key}' must be >= {lo}, got {val}", key)
    return val


def _bool(body: dict, key: str, default: bool) -> bool:
    val = body.get(key, default)
    if val is None:
        return default
    if not isinstance(val, bool):
        raise RequestError(f"'{key}' must be a boolean, got {type(val).__name__}", key)
    return val


def _logprobs(body: dict, kind: str) -> int | None:
    """Top-N to return per token (None: no logprobs), from either endpoint's convention."""
    val = body.get("logprobs")
    if kind == "completion":
        n = _int(body, "logprobs", None, 0)
        if n is not None and n > MAX_LOGPROBS:
            raise RequestError(f"'logprobs' must be <= {MAX_LOGPROBS}, got {n}", "logprobs")
        return n
    want = _bool(body, "logprobs", False) if val is not None else False
    top = _int(body, "top_logprobs", None, 0)
    if top is not None and top > MAX_LOGPROBS:
        raise RequestError(f"'top_logprobs' must be <= {MAX_LOGPROBS}, got {top}", "top_logprobs")
    if top is not None and not want:
        raise RequestError("'top_logprobs' needs 'logprobs' = true", "top_logprobs")
    return (top or 0) if want else None


def parse_common(
    body: Any, prompt_ids: list[int], model_name: str, max_model_len: int, max_tokens_key: str
) -> ParsedRequest:
    kind = "completion" if max_tokens_key == "max_tokens" else "chat"
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(
            f"The model `{model}` does not exist. Available: `{model_name}`", "model", 404, "model_not_found"
        )
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise RequestError(f"'n' = {n} is not supported (only n = 1)", "n")
    max_tokens = _int(body, max_tokens_key, None, 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None, 1)
    if max_tokens is None:
        max_tokens = max(1, max_model_len - len(prompt_ids))
    if not prompt_ids:
        raise RequestError("the prompt is empty", "prompt")
    if len(prompt_ids) + max_tokens > max_model_len:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, {max_tokens} in "
            "the completion). Please reduce the length of the prompt or completion.",
            "max_tokens",
        )
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError("'stop' must be a string or a list of strings", "stop")
    stop = [check_text(s, "stop") for s in stop]
    stop_ids = body.get("stop_token_ids") or []
    if not (isinstance(stop_ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids)):
        raise RequestError("'stop_token_ids' must be a list of integers", "stop_token_ids")
    seed = _int(body, "seed", None)
    if seed is not None and not -(2**63) <= seed < 2**64:
        raise RequestError(f"'seed' must fit in 64 bits, got {seed}", "seed")
    top_k = _int(body, "top_k", 0, -1)
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=top_k if top_k and top_k > 0 else 0,
        seed=seed,
        stop=[s for s in stop if s],
        ignore_eos=_bool(body, "ignore_eos", False),
        min_tokens=_int(body, "min_tokens", 0, 0),
        logprobs=_logprobs(body, kind),
        stop_token_ids=list(stop_ids),
    )
    if params.top_p <= 0:
        raise RequestError("'top_p' must be in (0, 1]", "top_p")
    stream = _bool(body, "stream", False)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError("'stream_options' must be an object", "stream_options")
    extra = sorted(set(opts) - {"include_usage", "continuous_usage_stats"})
    if extra or opts.get("continuous_usage_stats"):
        raise RequestError(f"stream_options: only include_usage is supported, got {sorted(opts)}", "stream_options")
    include_usage = _bool(opts, "include_usage", False)
    return ParsedRequest(prompt_ids=prompt_ids, params=params, stream=stream, include_usage=include_usage)


def completion_prompt(body: dict, tokenizer) -> list[int]:
    """A completions prompt's ids: text as the model saw a document start (``<bos>`` first where the tokenizer
    adds one: Gemma continues text without it badly), token ids as given."""
    from lilicorr.data.chat import text_ids

    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return text_ids(tokenizer, check_text(prompt, "prompt"))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < len(tokenizer)]
        if bad:
            raise RequestError(f"token ids {bad[:5]} outside the vocabulary [0, {len(tokenizer)})", "prompt")
        return list(prompt)
    if prompt is None:
        raise RequestError("'prompt' is required", "prompt")
    raise RequestError(
        "'prompt' must be a string, a list of token ids, or a list with one of those (n > 1 "
        "prompts per request are not supported)",
        "prompt",
    )


def chat_prompt(body: dict, tokenizer) -> list[int]:
    """A chat request's ids under the target's template; a target without one (a base model) is refused (400,
    naming the target) rather than sent a layout it never saw."""
    from lilicorr.data.chat import ChatError, chat_ids

    try:
        return chat_ids(tokenizer, body.get("messages"))
    except ChatError as e:
        raise RequestError(str(e), e.field) from e
