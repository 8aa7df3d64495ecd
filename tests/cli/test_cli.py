import json
import subprocess
import sys

import pytest
import torch

from lilicorr.cli.main import build_parser, main


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("env", "data", "train", "card", "inspect", "generate"):
        assert cmd in out


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "lilicorr.cli.main", "--help"], capture_output=True, text=True)
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
    f.write_text('{"id": "a", "prompt": "import os", "category": "code", "extra": 1}\n{"id": "b", "prompt": "The"}\n')
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
    with pytest.raises(SystemExit, match="bad.jsonl:1: expected an object with 'messages' or 'prompt'"):
        main(["generate", "--target", str(tiny_target_dir), "--prompts", str(bad)])


def test_generate_bad_target_is_clear(tmp_path, capsys):
    assert main(["generate", "--target", str(tmp_path), "--prompt", "x"]) == 2
    assert "config.json not found" in capsys.readouterr().err


def test_parser_builds():
    assert build_parser().prog == "lilicorr"


def test_inspect_valid_and_broken(tmp_path, tiny_target_dir, capsys):
    import torch

    from lilicorr.checkpoint import save_draft
    from lilicorr.models.config import DraftConfig, LiLiCorrGeometry
    from lilicorr.models.draft import DraftModel
    from lilicorr.runtime.runtime import TargetRuntime

    tcfg = TargetRuntime.load(tiny_target_dir).model.config
    cfg = DraftConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=tcfg.vocab_size,
        block_size=4,
        mask_token_id=3,
        target_layer_ids=[0, 2],
        lilicorr=LiLiCorrGeometry(factor_dim=16),
    )
    torch.manual_seed(0)
    save_draft(DraftModel(cfg), tmp_path / "d")
    assert main(["inspect", str(tmp_path / "d"), "--target", str(tiny_target_dir)]) == 0
    out = capsys.readouterr().out
    assert "LiLiCorrDraftModel" in out and "VALID for target" in out and "lilicorr.layers.0" in out
    cfg_json = json.loads((tmp_path / "d" / "config.json").read_text())
    cfg_json["dflash_config"]["lilicorr_candidate_topk"] = 12
    (tmp_path / "d" / "config.json").write_text(json.dumps(cfg_json))
    assert main(["inspect", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith("INVALID: ") and "lilicorr_candidate_topk' = 12" in out and "\n" not in out


def test_generate_speculative_compare_ar_json(tiny_target_dir, tmp_path, capsys):
    from tests.decoding.engine_helpers import save_random_draft

    save_random_draft(tiny_target_dir, tmp_path / "d")
    rc = main(
        [
            "generate",
            "--target",
            str(tiny_target_dir),
            "--draft",
            str(tmp_path / "d"),
            "--prompt",
            "import os",
            "--max-new-tokens",
            "10",
            "--compare-ar",
            "--json",
            "--num-speculative-tokens",
            "3",
        ]
    )
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    rec, summary = lines[0], lines[-1]
    assert rec["method"] == "lilicorr" and rec["ar_identical"] is True
    assert rec["num_draft_tokens"] == 3 * rec["num_drafts"] and rec["tau"] >= 1.0
    assert set(rec["time_breakdown_s"]) == {"target_verify", "draft_backbone", "candidates", "head", "walk", "other"}
    assert summary["summary"] and "speedup" in summary


def test_generate_bad_draft_is_clear(tiny_target_dir, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert main(["generate", "--target", str(tiny_target_dir), "--draft", str(tmp_path / "d"), "--prompt", "x"]) == 2
    assert "config.json: not found" in capsys.readouterr().err


def test_export_scheme_b_round_trip(tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    from lilicorr.checkpoint import load_draft, save_draft
    from lilicorr.models.draft import DraftModel
    from tests.models.helpers import small_cfg

    save_draft(DraftModel(small_cfg(head_width=48)), tmp_path / "a")
    assert main(["export", str(tmp_path / "a"), "--out", str(tmp_path / "b"), "--scheme", "B"]) == 0
    assert "lilicorr.feature_mlp.0.weight" in load_file(tmp_path / "b" / "model.safetensors")
    a, b = load_draft(tmp_path / "a"), load_draft(tmp_path / "b")
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())


def test_generate_ddtree_method(tiny_target_dir, tmp_path, capsys):

    from tests.decoding.engine_helpers import save_random_draft

    save_random_draft(tiny_target_dir, tmp_path / "d", lilicorr=False)
    rc = main(
        [
            "generate",
            "--target",
            str(tiny_target_dir),
            "--draft",
            str(tmp_path / "d"),
            "--prompt",
            "import os",
            "--max-new-tokens",
            "10",
            "--method",
            "ddtree",
            "--tree-budget",
            "6",
            "--compare-ar",
            "--json",
        ]
    )
    assert rc == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert rec["method"] == "ddtree" and rec["ar_identical"] and rec["num_draft_tokens"] == 5 * rec["num_drafts"]
    assert (
        main(
            [
                "generate",
                "--target",
                str(tiny_target_dir),
                "--draft",
                str(tmp_path / "d"),
                "--prompt",
                "x",
                "--method",
                "dspark",
            ]
        )
        == 2
    )
    assert "has no dspark arm" in capsys.readouterr().err


def test_method_options_are_named_and_checked(tiny_target_dir, tmp_path, capsys):
    """generate's method flags come from the registry; a flag of another method is refused by name."""
    from tests.decoding.engine_helpers import save_random_draft

    save_random_draft(tiny_target_dir, tmp_path / "d", lilicorr=False)
    args = ["generate", "--target", str(tiny_target_dir), "--draft", str(tmp_path / "d"), "--prompt", "x"]
    assert main([*args, "--method", "dflash", "--prompt-lookup-max", "3"]) == 2
    assert "method 'dflash' has no option 'prompt_lookup_max'" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error without CUDA")
def test_device_cuda_without_cuda_is_a_clear_error(tiny_target_dir, capsys):
    rc = main(["generate", "--target", str(tiny_target_dir), "--prompt", "x", "--device", "cuda"])
    assert rc == 2
    assert "device 'cuda': no CUDA device" in capsys.readouterr().err


def test_device_cpu_runs_the_same_engine(tiny_target_dir, capsys):
    """Without CUDA, ``auto`` is the CPU: the same tokens as ``--device cpu`` (the default path)."""
    if __import__("torch").cuda.is_available():
        pytest.skip("auto is CUDA here")
    outs = []
    for device in ("cpu", "auto"):
        rc = main(
            [
                "generate",
                "--target",
                str(tiny_target_dir),
                "--prompt",
                "def f",
                "--max-new-tokens",
                "8",
                "--json",
                "--device",
                device,
            ]
        )
        assert rc == 0
        outs.append(json.loads(capsys.readouterr().out.strip().splitlines()[0])["token_ids"])
    assert outs[0] == outs[1]


def test_generate_with_draft_alone_runs_the_default_configuration(tiny_target_dir, tmp_path, capsys):
    """`--draft` alone: methods.FASTEST for the folder's kind; any tuning flag: the folder decides (vLLM)."""
    from lilicorr.decoding.config import FASTEST
    from tests.decoding.engine_helpers import save_random_draft

    save_random_draft(tiny_target_dir, tmp_path / "d")
    args = ["generate", "--target", str(tiny_target_dir), "--draft", str(tmp_path / "d"), "--prompt", "import os"]
    assert main([*args, "--max-new-tokens", "8", "--compare-ar", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert rec["method"] == FASTEST["lilicorr"]["method"] and rec["ar_identical"] is True
    assert rec.get("draft_gate") is FASTEST["lilicorr"]["draft_gate"]  # all of it, not only the method
    assert main([*args, "--max-new-tokens", "4", "--json", "--num-speculative-tokens", "2"]) == 0
    tuned = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert tuned["method"] == "lilicorr" and "draft_gate" not in tuned


def test_data_regenerate_bad_input_is_a_named_error(tiny_target_dir, tmp_path, capsys):
    """No traceback and no output file: the message names the missing field or file."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "say hi"}]}\n')
    out = tmp_path / "d.safetensors"
    base = ["data", "regenerate", "--target", str(tiny_target_dir), "--out", str(out), "--num-sequences", "1"]
    assert main([*base, "--prompts", str(prompts), "--engine", "fixed"]) == 2
    assert "'answer'" in capsys.readouterr().err and not out.exists()
    assert main([*base, "--prompts", str(tmp_path / "missing.jsonl"), "--engine", "native"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err and not out.exists()


def test_draft_vocab_cli_writes_the_file(tiny_target_dir, tmp_path, capsys):
    """`data draft-vocab` counts answer tokens of a data file and prompt tokens of a JSONL; generate drafts
    from the file it writes; bad input is a named error."""
    from safetensors.torch import save_file

    from lilicorr.decoding.draft_vocab import FILE
    from tests.decoding.engine_helpers import save_random_draft

    regen_data = tmp_path / "data.safetensors"
    tokens = torch.randint(4, 200, (3, 12), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 6:] = True
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.zeros(3, dtype=torch.bool)}, str(regen_data))

    folder = save_random_draft(tiny_target_dir, tmp_path / "d")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "def f(x): return x"}]}) + "\n")
    args = ["data", "draft-vocab", "--target", str(tiny_target_dir), "--out", str(folder), "--keep", "32"]
    assert main([*args, "--data", str(regen_data), str(prompts)]) == 0
    rec = json.loads(capsys.readouterr().out)
    stored = json.loads((folder / FILE).read_text())
    assert len(stored["token_ids"]) == rec["token_ids"] <= 32 and stored["source"]["tokens_counted"] > 0
    # the folder still loads as a checkpoint, and generate drafts from the file
    out = [
        "generate", "--target", str(tiny_target_dir), "--draft", str(folder), "--prompt", "import os",
        "--max-new-tokens", "6", "--json", "--draft-vocab-size", "16", "--compare-ar",
    ]  # fmt: skip
    assert main(out) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[0])["ar_identical"] is True
    assert main([*args, "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    not_a_drafter = ["data", "draft-vocab", "--target", str(tiny_target_dir), "--out", str(tmp_path)]
    assert main([*not_a_drafter, "--data", str(prompts)]) == 2
    assert "not a drafter folder" in capsys.readouterr().err


def test_generate_resolves_its_config_once_and_a_tree_option_tunes_the_default(
    tiny_target_dir, tmp_path, capsys, monkeypatch
):
    """`--draft X --tree-budget 8` runs the folder's tree with the rest of its default (it was refused); the
    command line's config is resolved in one call; `--tree-budget 1` is named before any engine is built."""
    import lilicorr.decoding.build as build
    import lilicorr.decoding.config as config
    from tests.decoding.engine_helpers import save_random_draft

    calls = []
    real = config.resolve

    def counted(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(config, "resolve", counted)
    monkeypatch.setattr(build, "resolve", counted)
    save_random_draft(tiny_target_dir, tmp_path / "d", lilicorr=False)
    args = ["generate", "--target", str(tiny_target_dir), "--draft", str(tmp_path / "d"), "--prompt", "import os"]
    assert main([*args, "--max-new-tokens", "6", "--json", "--tree-budget", "8", "--compare-ar"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert rec["method"] == "ddtree" and rec["draft_gate"] is True and rec["ar_identical"] is True
    assert rec["num_draft_tokens"] == 7 * rec["num_drafts"]  # 8 nodes: the pending token and 7 drafts
    assert [a[0].method for a in calls] == ["default", None]  # the ask, once; then --compare-ar's plain engine
    assert main([*args, "--tree-budget", "1"]) == 2
    assert "'tree_budget' must be a positive integer or 'auto' (at least 2" in capsys.readouterr().err
