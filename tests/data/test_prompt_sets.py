import gzip
import json

import pytest

from lilicorr.data.prompt_sets import (
    iter_json_array,
    read_humaneval,
    read_mt_bench,
    read_prompt_rows,
    read_sharegpt,
    read_sharegpt_later_turns,
)


def _conv(i, first="human", text=None):
    return {
        "id": f"c{i}",
        "conversations": [{"from": first, "value": text or f"question number {i}?"}, {"from": "gpt", "value": "ok"}],
    }


def test_truncated_sharegpt_json_keeps_whole_records(tmp_path):
    records = [_conv(0), _conv(1, first="gpt"), _conv(2, text="What is 2+2? Tell me\u2028now"), _conv(3)]
    text = json.dumps(records, indent=2)
    cut = text[: text.index('"c3"') + 30]  # the wheel's file ends mid-record like this
    path = tmp_path / "sharegpt.json"
    path.write_text(cut)
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut)
    rows = read_sharegpt(path)
    assert [r["id"] for r in rows] == ["sharegpt-c0", "sharegpt-c2"]  # c1 starts with gpt, c3 is cut off
    assert rows[1]["messages"] == [{"role": "user", "content": "What is 2+2? Tell me\u2028now"}]
    assert all(r["category"] == "sharegpt" for r in rows)


def test_sharegpt_decontamination(tmp_path):
    mt = "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences."
    records = [
        _conv(0, text=mt),
        _conv(1, text="Please help: " + mt.upper() + " Thanks"),
        _conv(2),
        _conv(3, text="hi"),
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(records))
    rows = read_sharegpt(path, exclude=[mt])
    assert [r["id"] for r in rows] == ["sharegpt-c2"]  # exact, containing (case/space-insensitive), too short


def test_sharegpt_later_turns_carry_the_conversation_and_its_answers(tmp_path):
    mt = "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences."
    turns = ["first question?", "answer one", "second question?", "answer two", "third question?"]
    records = [
        {"id": "a", "conversations": [{"from": ("human", "gpt")[k % 2], "value": v} for k, v in enumerate(turns)]},
        # an evaluation prompt in turn 2 ends the conversation there: later turns would carry it
        {
            "id": "b",
            "conversations": [
                {"from": f, "value": v}
                for f, v in [
                    ("human", "hello there"),
                    ("gpt", "hi"),
                    ("human", mt),
                    ("gpt", "x"),
                    ("human", "more please"),
                ]
            ],
        },  # fmt: skip
        # roles out of alternation end it too
        {
            "id": "c",
            "conversations": [{"from": "human", "value": "question one?"}, {"from": "human", "value": "question two?"}],
        },
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(records))
    first = read_sharegpt(path, exclude=[mt])
    assert [r["id"] for r in first] == ["sharegpt-a", "sharegpt-b", "sharegpt-c"]
    assert first[0]["answer"] == "answer one" and "answer" not in first[2]
    later = read_sharegpt_later_turns(path, exclude=[mt])
    assert [r["id"] for r in later] == ["sharegpt-a-t1", "sharegpt-a-t2"]
    assert later[0]["messages"] == [
        {"role": "user", "content": "first question?"},
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "second question?"},
    ]
    assert later[0]["answer"] == "answer two" and "answer" not in later[1]  # the last turn has no reply
    assert len(later[1]["messages"]) == 5


def test_iter_json_array_edge_cases():
    assert list(iter_json_array("[]")) == []
    assert list(iter_json_array(' [ {"a": 1} , {"b": 2} ]')) == [{"a": 1}, {"b": 2}]
    assert list(iter_json_array('[{"a": 1}, {"b": ')) == [{"a": 1}]
    with pytest.raises(ValueError, match="JSON array"):
        list(iter_json_array('{"a": 1}'))


def test_mt_bench_turn_one_and_category(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text(
        json.dumps({"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]})
        + "\n"
        + json.dumps({"question_id": 82, "category": "math", "turns": ["2+2?"]})
        + "\n"
    )
    rows = read_mt_bench(path)
    assert rows[0] == {
        "id": "mt-bench-81",
        "category": "writing",
        "messages": [{"role": "user", "content": "Write a poem."}],
    }
    assert rows[1]["category"] == "math"
    path.write_text(json.dumps({"question_id": 1, "turns": []}) + "\n")
    with pytest.raises(ValueError, match="turns"):
        read_mt_bench(path)


def test_humaneval_asks_to_complete_the_function(tmp_path):
    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"task_id": "HumanEval/7", "prompt": 'def f(x):\n    """Double x."""\n'}) + "\n")
    (row,) = read_humaneval(path)
    assert row["id"] == "humaneval-7" and row["category"] == "humaneval"
    content = row["messages"][0]["content"]
    assert content.startswith("Complete the following Python function") and "def f(x):" in content


def test_prompt_rows_errors_name_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"x": 1}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: expected an object with 'messages' or 'prompt'"):
        read_prompt_rows(path)
    path.write_text('{"prompt": "a"}\n{oops\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: not JSON"):
        read_prompt_rows(path)
    path.write_text('{"prompt": "a\u2028b"}\n\n{"messages": [{"role": "user", "content": "c"}], "id": 5}\n')
    rows = read_prompt_rows(path)
    assert rows[0] == {"prompt": "a\u2028b", "id": "p-1", "category": "default"} and rows[1]["id"] == 5


def test_round_robin_covers_every_category_in_order():
    from lilicorr.data.prompt_sets import round_robin

    rows = [{"id": f"{c}{i}", "category": c} for c in "abc" for i in range(3)]
    assert [r["id"] for r in round_robin(rows, 5)] == ["a0", "b0", "c0", "a1", "b1"]
    assert len(round_robin(rows, 50)) == 9
