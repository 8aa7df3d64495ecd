"""OpenAI request parsing and validation: every problem becomes a 4xx naming the field.

Bodies are parsed by hand rather than with strict models so that unknown fields are ignored (as
OpenAI clients and benchmark tools send many) while known ones are type-checked precisely.
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


def parse_common(
    body: Any, prompt_ids: list[int], model_name: str, max_model_len: int, max_tokens_key: str
) -> ParsedRequest:
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
    seed = _int(body, "seed", None)
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
    )
    if params.top_p <= 0:
        raise RequestError("'top_p' must be in (0, 1]", "top_p")
    stream = _bool(body, "stream", False)
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise RequestError("'stream_options' must be an object", "stream_options")
    include_usage = bool(opts.get("include_usage", False))
    return ParsedRequest(prompt_ids=prompt_ids, params=params, stream=stream, include_usage=include_usage)


def completion_prompt(body: dict, tokenizer) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False)
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
    from lilicorr.data.chat import ChatError, chat_ids

    try:
        return chat_ids(tokenizer, body.get("messages"))
    except ChatError as e:
        raise RequestError(str(e), e.field) from e
