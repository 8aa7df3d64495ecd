import pytest

from lilicorr.data.tokenizer import SPECIAL_TOKENS, train_tokenizer


@pytest.fixture(scope="module")
def tok():
    from tests.conftest import source_texts

    return train_tokenizer(source_texts(), vocab_size=4096)


@pytest.mark.parametrize(
    "text",
    [
        "def f(x):\n    return x  # comment\n",
        "héllo wörld ✓ 日本語\n\n\t  tabs",
        "",
        " leading space",
        "a" * 300,
        "=head1 NAME\n\nperlfaq - B<bold>",
    ],
)
def test_round_trip_exact(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_special_ids_are_first_and_mask_in_vocab(tok):
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert tok.token_to_id("<|mask|>") < tok.get_vocab_size()
    # A special token in text is one id, not split into bytes.
    assert tok.encode("<|im_start|>user", add_special_tokens=False).ids[0] == 1


def test_vocab_size_bounds():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["x"], vocab_size=100)


def test_saved_tokenizer_chat_template(tiny_target_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tiny_target_dir)
    text = hf.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert hf.eos_token_id == 0
    assert hf.decode(hf.encode("x = 1\n", add_special_tokens=False)) == "x = 1\n"
