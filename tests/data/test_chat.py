import pytest

from lilicorr.data.chat import ChatError, check_messages, row_ids


@pytest.fixture(scope="module")
def tok(tiny_target_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_target_dir)


def test_rows_with_messages_get_the_chat_template(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def f(): pass"}]
    ids = row_ids(tok, {"messages": msgs})
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert text.rstrip().endswith("assistant")
    # --chat wraps a plain prompt as one user turn; without it the prompt is raw text
    assert row_ids(tok, {"prompt": "def f(): pass"}, chat=True) == row_ids(
        tok, {"messages": [{"role": "user", "content": "def f(): pass"}]}
    )
    assert row_ids(tok, {"prompt": "def f(): pass"}) == tok.encode("def f(): pass", add_special_tokens=False)
    # text content parts are joined, as OpenAI clients send them
    parts = [{"role": "user", "content": [{"type": "text", "text": "def f(): "}, {"type": "text", "text": "pass"}]}]
    assert row_ids(tok, {"messages": parts}) == row_ids(tok, {"prompt": "def f(): pass"}, chat=True)


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "non-empty list"),
        ("hi", "non-empty list"),
        ([{"content": "x"}], r"messages\[0\] must be an object with a string 'role'"),
        ([{"role": "alien", "content": "x"}], r"messages\[0\].role 'alien'"),
        ([{"role": "user", "content": 3}], r"messages\[0\].content must be a string"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}], "only parts of type 'text'"),
    ],
)
def test_bad_messages_are_named(messages, match):
    with pytest.raises(ChatError, match=match):
        check_messages(messages)


def test_plain_row_needs_a_prompt(tok):
    with pytest.raises(ChatError, match="'messages'"):
        row_ids(tok, {"id": 1})


@pytest.fixture()
def base_tok(tiny_target_dir):
    """The tiny tokenizer as a base model's: no chat template, ``<bos>`` added to raw text (as Gemma's)."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tiny_target_dir)
    t.chat_template = None
    t.bos_token = "<|endoftext|>"
    t.add_bos_token = True
    return t


def test_base_model_takes_raw_text_with_its_bos_and_refuses_chat_by_name(tok, base_tok):
    raw = tok.encode("def f(): pass", add_special_tokens=False)
    assert row_ids(tok, {"prompt": "def f(): pass"}) == raw  # no add_bos_token: nothing prepended
    assert row_ids(base_tok, {"prompt": "def f(): pass"}) == [base_tok.bos_token_id, *raw]
    with pytest.raises(ChatError, match=r"target .* has no chat template \(a base model"):
        row_ids(base_tok, {"prompt": "def f(): pass"}, chat=True)
    with pytest.raises(ChatError, match="has no chat template"):
        row_ids(base_tok, {"messages": [{"role": "user", "content": "hi"}]})
