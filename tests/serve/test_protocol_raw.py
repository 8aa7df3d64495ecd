"""Raw prompts of a base model on the server: ``/v1/completions`` text gets the tokenizer's ``<bos>`` (Gemma's
layout), token ids are taken as given, and a chat request to a target without a chat template is a 400 that
names the target, not a templated prompt."""

from pathlib import Path

import pytest

from lilicorr.serve.protocol import RequestError, chat_prompt, completion_prompt

GEMMA = Path(__file__).resolve().parents[2] / "models" / "gemma3-270m"


class BaseTokenizer:
    """A base model's tokenizer in miniature: one id per character, ``<bos>`` = 2 added, no chat template."""

    bos_token_id = 2
    add_bos_token = True
    chat_template = None
    name_or_path = "models/base-lm"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([self.bos_token_id] if add_special_tokens else []) + [10 + ord(c) % 90 for c in text]

    def __len__(self) -> int:
        return 100


def test_text_prompt_starts_with_bos():
    tok = BaseTokenizer()
    ids = completion_prompt({"prompt": "def f"}, tok)
    assert ids == tok.encode("def f")  # <bos>, then the text
    assert completion_prompt({"prompt": ["def f"]}, tok) == ids
    assert completion_prompt({"prompt": [5, 6, 7]}, tok) == [5, 6, 7]  # token ids: as given, no <bos> added


def test_text_prompt_without_bos_is_unchanged():
    tok = BaseTokenizer()
    tok.bos_token_id = None
    assert completion_prompt({"prompt": "ab"}, tok) == tok.encode("ab", add_special_tokens=False)


def test_chat_request_to_a_base_model_is_refused_by_name():
    with pytest.raises(RequestError) as e:
        chat_prompt({"messages": [{"role": "user", "content": "hi"}]}, BaseTokenizer())
    assert e.value.status == 400 and "models/base-lm has no chat template" in e.value.message


@pytest.mark.skipif(not (GEMMA / "tokenizer.json").exists(), reason="models/gemma3-270m not fetched (make target)")
def test_gemma_completion_gets_its_bos():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(GEMMA)
    ids = completion_prompt({"prompt": "def fibonacci(n):"}, tok)
    assert ids[0] == tok.bos_token_id == 2 and ids[1:] == tok.encode("def fibonacci(n):", add_special_tokens=False)
    with pytest.raises(RequestError, match="no chat template"):
        chat_prompt({"messages": [{"role": "user", "content": "hi"}]}, tok)
