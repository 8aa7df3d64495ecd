"""Incremental detokenization equals a full decode, character by character, for any split of the ids."""

import pytest

from lilicorr.decoding.detokenize import IncrementalDetokenizer
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.conftest import SHIPPED_TARGET

TEXTS = [
    "def f(x):\n    return x ** 2  # square\n",
    "naïve café — 東京 🚀 emoji and ünïcödé\tand tabs",
    "   leading spaces, trailing   \n\n",
]


@pytest.fixture(scope="module")
def tokenizer():
    if not (SHIPPED_TARGET / "tokenizer.json").exists():
        pytest.skip("shipped tokenizer not present")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(SHIPPED_TARGET)


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_incremental_equals_full_decode(tokenizer, chunk):
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        det = IncrementalDetokenizer(tokenizer.decode)
        pieces = []
        for i in range(0, len(ids), chunk):
            pieces.append(det.push(ids[i : i + chunk]))
            full = tokenizer.decode(ids[: i + chunk])
            assert full.startswith(det.text)  # confirmed text is always a prefix of the truth
            assert "\ufffd" not in det.text
        assert "".join(pieces) == det.text
        assert det.final_text() == tokenizer.decode(ids) == text


def test_split_utf8_is_held_back():
    """A byte-level decode of half a character renders U+FFFD; it must not be emitted."""
    table = {1: b"a", 2: "é".encode()[:1], 3: "é".encode()[1:], 4: b"b"}

    def decode(ids):
        return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")

    det = IncrementalDetokenizer(decode)
    assert det.push([1]) == "a"
    assert det.push([2]) == ""  # incomplete
    assert det.push([3]) == "é"
    assert det.push([4]) == "b"
    assert det.text == "aéb"
    det.push([2])
    assert det.text == "aéb" and det.final_text() == "aéb\ufffd"


def test_context_dependent_decode_falls_back():
    """A decode that strips the first leading space (sentencepiece style) still yields the full text."""
    words = {1: " hello", 2: " world", 3: "!"}

    def decode(ids):
        return "".join(words[i] for i in ids).removeprefix(" ")

    det = IncrementalDetokenizer(decode)
    for t in (1, 2, 3, 2):
        det.push([t])
    assert det.text == decode([1, 2, 3, 2]) == "hello world! world"


def test_request_stop_string_found_across_commits():
    table = {i: c for i, c in enumerate("abcdefgh")}

    def decode(ids):
        return "".join(table[i] for i in ids)

    r = Request([0], SamplingParams(max_tokens=20, stop=["cde"]))
    r.commit([1, 2], decode)
    assert not r.finished
    r.commit([3, 4, 5, 6], decode)  # "cde" completes at token 4; tokens after it are not taken
    assert r.finished and r.finish_reason == "stop"
    assert r.output_ids == [1, 2, 3, 4]
    assert r.text(decode) == "b"


def test_stop_string_before_min_tokens_is_ignored():
    """As in vLLM: stop strings are checked only once min_tokens are out, on the new text."""
    table = {i: c for i, c in enumerate("xyz")}

    def decode(ids):
        return "".join(table[i] for i in ids)

    r = Request([0], SamplingParams(max_tokens=10, min_tokens=3, stop=["y"]))
    r.commit([0, 1, 0], decode)  # "y" at token 2, before min_tokens
    assert not r.finished
    r.commit([2, 1], decode)
    assert r.finished and r.text(decode) == "xyxz"
