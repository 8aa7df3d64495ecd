"""Code prompts for chat targets (``lilicorr data prompts code-functions``): "complete this Python function" asked
of functions taken from the project's pinned code corpus (``lilicorr data corpus``: Python files of pinned Debian
packages), not from any evaluation set.

Why: a drafter learns the distribution it is trained on, and the campaign's ShareGPT first turns are mostly prose,
while a third of the engine benchmark's prompts are code (HumanEval); measured on the first v7 promotion check, the
candidate gained 16 % held-out τ but lost τ on HumanEval (docs/guide/campaign.md). The rule that selects the
functions is stated here so the set can be rebuilt and audited:

- every **module-level** ``def`` / ``async def`` of a ``code`` document of the corpus's split that parses as Python
  and has a docstring of at least ``min_doc_chars`` characters (methods need their class to make sense);
- the prompt is the function's source from its ``def`` line to the end of its docstring — a stub, as HumanEval's
  prompts are — at most ``max_stub_chars`` characters, after the same instruction our HumanEval rows carry, so the
  drafter sees the request's shape with other functions in it;
- decontaminated: a function whose name is a HumanEval entry point, or whose stub contains an evaluation prompt's
  text (or is contained in one), is dropped; duplicate stubs are kept once.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

CATEGORY = "code-functions"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def function_stubs(source: str, min_doc_chars: int = 30, max_stub_chars: int = 1500) -> list[tuple[str, str]]:
    """(name, stub) of every module-level function of ``source`` with a long enough docstring: its lines from the
    ``def`` (decorators left out) to the docstring's last line. Source that does not parse gives nothing."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < min_doc_chars:
            continue
        doc_node = node.body[0]
        stub = "\n".join(lines[node.lineno - 1 : doc_node.end_lineno]) + "\n"
        if len(stub) <= max_stub_chars:
            out.append((node.name, stub))
    return out


def code_function_prompts(
    corpus: Path,
    instruction: str,
    split: str = "train",
    exclude_texts: list[str] | None = None,
    exclude_names: set[str] | None = None,
    min_doc_chars: int = 30,
    max_stub_chars: int = 1500,
) -> list[dict]:
    """Chat rows ``{id, category, messages}`` (the module docstring's rule), in corpus order; ``instruction``
    precedes each stub (``prompt_sets`` passes its HumanEval rows' own)."""
    path = Path(corpus) / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the code corpus is missing (run `lilicorr data corpus --out {corpus}`)")
    banned = [_norm(t) for t in exclude_texts or [] if len(t.strip()) >= 40]
    names = exclude_names or set()
    rows, seen = [], set()
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        if not isinstance(doc, dict) or "text" not in doc:
            raise ValueError(f"{path}:{line_no}: expected an object with 'text'")
        if doc.get("category") != "code":
            continue
        for name, stub in function_stubs(doc["text"], min_doc_chars, max_stub_chars):
            norm = _norm(stub)
            if name in names or norm in seen or any(b in norm or norm in b for b in banned):
                continue
            seen.add(norm)
            content = f"{instruction}```python\n{stub}```"
            rows.append({"id": f"{doc.get('id', line_no)}::{name}", "category": CATEGORY,
                         "messages": [{"role": "user", "content": content}]})  # fmt: skip
    return rows
