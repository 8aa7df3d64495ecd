"""Code prompts from the corpus: the selection rule of ``lilicorr.data.code_prompts``, decontamination, errors."""

from __future__ import annotations

import json

import pytest

from lilicorr.data.code_prompts import CATEGORY, code_function_prompts, function_stubs
from lilicorr.data.prompt_sets import HUMANEVAL_INSTRUCTION

SOURCE = '''import os


@decorated
def kept(a, b=1):
    """Add two numbers and return the sum, the long way round."""
    return a + b


def short_doc():
    """Too short."""
    return 1


def no_doc():
    return 2


class Box:
    def method(self):
        """A method's docstring long enough to count, but methods are left out."""
        return 3


async def fetch_all(urls):
    """Fetch every URL concurrently and return the bodies in order."""
    return []
'''


def test_stubs_are_module_level_functions_cut_after_their_docstring():
    stubs = function_stubs(SOURCE)
    assert [name for name, _ in stubs] == ["kept", "fetch_all"]
    assert stubs[0][1] == 'def kept(a, b=1):\n    """Add two numbers and return the sum, the long way round."""\n'
    assert stubs[1][1].endswith('in order."""\n')  # the body is what the target answers
    assert function_stubs("def broken(:\n") == []
    assert function_stubs(SOURCE, max_stub_chars=40) == []


def _corpus(tmp_path, docs):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return tmp_path


def test_prompts_carry_the_humaneval_instruction_and_are_decontaminated(tmp_path):
    other = 'def other_name(x):\n    """Return x doubled, documented at some length here."""\n    return 2 * x\n'
    corpus = _corpus(
        tmp_path,
        [
            {"id": "code/a.py", "category": "code", "text": SOURCE},
            {"id": "code/b.py", "category": "code", "text": SOURCE},  # the same stubs again: kept once
            {"id": "prose/c", "category": "prose", "text": other},  # not code: ignored
            {"id": "code/d.py", "category": "code", "text": other},
        ],
    )
    rows = code_function_prompts(corpus, HUMANEVAL_INSTRUCTION, exclude_names={"fetch_all"})
    assert [r["id"] for r in rows] == ["code/a.py::kept", "code/d.py::other_name"]
    assert rows[0]["category"] == CATEGORY
    content = rows[0]["messages"][0]["content"]
    assert content.startswith(HUMANEVAL_INSTRUCTION + "```python\ndef kept(") and content.endswith("```")
    # an evaluation prompt inside a stub (or a stub inside an evaluation prompt) drops it
    evaluation = ['def other_name(x):\n    """Return x doubled, documented at some length here."""\n']
    assert [r["id"] for r in code_function_prompts(corpus, HUMANEVAL_INSTRUCTION, exclude_texts=evaluation)] == [
        "code/a.py::kept",
        "code/a.py::fetch_all",
    ]


def test_a_missing_corpus_names_the_command_that_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="lilicorr data corpus"):
        code_function_prompts(tmp_path / "nowhere", HUMANEVAL_INSTRUCTION)
    (tmp_path / "train.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match=r"train.jsonl:1: expected an object with 'text'"):
        code_function_prompts(tmp_path, HUMANEVAL_INSTRUCTION)
