"""``lilicorr target show``: one registry row's facts, as JSON or as shell assignments the bench scripts ``eval``
(scripts/bench_target.sh) — so a script's per-target names come from the registry, not from a copy."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from lilicorr.cli.main import main
from lilicorr.runtime.targets import EVAL_PROMPTS, EVAL_PROMPTS_RAW


def shell_facts(capsys, *name: str) -> dict[str, str]:
    """What ``target show NAME --shell`` assigns, read back the way bash reads it."""
    assert main(["target", "show", *name, "--shell"]) == 0
    lines = capsys.readouterr().out.splitlines()
    out = {}
    for line in lines:
        key, value = line.split("=", 1)
        (out[key],) = shlex.split(value)  # one word: every value is quoted
    return out


def test_show_shell_for_both_targets(capsys):
    smol = shell_facts(capsys)  # no name: the registry's default
    assert smol == shell_facts(capsys, "smollm2-135m")
    assert smol["TARGET_NAME"] == "smollm2-135m" and smol["TARGET_DEFAULT"] == "1" and smol["TARGET_CHAT"] == "1"
    assert smol["TARGET_FOLDER"] == "models/smollm2-135m-instruct" and smol["TARGET_PREFIX"] == "smollm2"
    assert smol["TARGET_PROMPTS"] == EVAL_PROMPTS and smol["TARGET_DISPLAY"] == "SmolLM2-135M-Instruct"
    gemma = shell_facts(capsys, "gemma3-270m")
    assert gemma["TARGET_DEFAULT"] == "0" and gemma["TARGET_CHAT"] == "0"  # a base model: raw-text prompts
    assert gemma["TARGET_FOLDER"] == "models/gemma3-270m" and gemma["TARGET_PREFIX"] == "gemma3-270m"
    assert gemma["TARGET_PROMPTS"] == EVAL_PROMPTS_RAW and gemma["TARGET_DISPLAY"] == "Gemma 3 270M (base)"


def test_show_values_survive_bash_eval(capsys):
    """A display name with spaces and parentheses is one value once bash evaluates the lines."""
    assert main(["target", "show", "gemma3-270m", "--shell"]) == 0
    script = capsys.readouterr().out + 'printf "%s\\n" "$TARGET_DISPLAY" "$TARGET_PROMPTS"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["Gemma 3 270M (base)", EVAL_PROMPTS_RAW]


def test_show_json(capsys):
    assert main(["target", "show", "gemma3-270m"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["prefix"] == "gemma3-270m" and facts["chat"] == "0" and facts["prompts"] == EVAL_PROMPTS_RAW


@pytest.mark.parametrize("shell", [[], ["--shell"]])
def test_show_unknown_target_is_the_registry_error(capsys, shell):
    assert main(["target", "show", "llama-9000", *shell]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing a script would eval
    assert "unknown target 'llama-9000': expected one of smollm2-135m, gemma3-270m" in captured.err
