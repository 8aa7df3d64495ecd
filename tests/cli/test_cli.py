import json
import subprocess
import sys

import pytest

from lilicorr.cli.main import build_parser, main


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("env", "data", "train", "card", "generate"):
        assert cmd in out


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "lilicorr.cli.main", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "generate" in out.stdout


def test_generate_json_greedy_matches_hf_generate(tiny_target_dir, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rc = main(
        [
            "generate",
            "--target",
            str(tiny_target_dir),
            "--prompt",
            "def main():",
            "--max-new-tokens",
            "12",
            "--json",
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(rec) >= {"id", "text", "token_ids", "num_generated", "time_s", "tokens_per_s"}
    tok = AutoTokenizer.from_pretrained(tiny_target_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_target_dir)
    ids = torch.tensor([tok.encode("def main():", add_special_tokens=False)])
    ref = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    want = ref[0, ids.shape[1] :].tolist()
    got = rec["token_ids"]
    # Stops early only at eos (id 0); otherwise exactly HF's greedy continuation.
    assert got == want[: len(got)] and (len(got) == 12 or got[-1] == 0)


def test_generate_prompts_file_and_bad_file(tiny_target_dir, tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"id": "a", "prompt": "import os", "category": "code", "extra": 1}\n{"id": "b", "prompt": "The"}\n'
    )
    assert (
        main(
            [
                "generate",
                "--target",
                str(tiny_target_dir),
                "--prompts",
                str(f),
                "--max-new-tokens",
                "4",
                "--json",
                "--temperature",
                "1.0",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [r["id"] for r in lines] == ["a", "b"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(SystemExit, match="bad.jsonl:1: field 'prompt'"):
        main(["generate", "--target", str(tiny_target_dir), "--prompts", str(bad)])


def test_generate_bad_target_is_clear(tmp_path, capsys):
    assert main(["generate", "--target", str(tmp_path), "--prompt", "x"]) == 2
    assert "config.json not found" in capsys.readouterr().err


def test_parser_builds():
    assert build_parser().prog == "lilicorr"
