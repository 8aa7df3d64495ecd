"""Bench pieces: resuming from finished parts, draft-length variants, long-context prompts."""

import json
from pathlib import Path

import pytest

from lilicorr.bench.runner import run_bench
from lilicorr.bench.variants import Variant, default_variants, with_draft_lengths
from tests.decoding.engine_helpers import save_random_draft


@pytest.fixture(scope="module")
def drafts(tiny_target_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("drafts")
    return [str(save_random_draft(tiny_target_dir, d / "lc")), str(save_random_draft(tiny_target_dir, d / "df", False))]


PROMPTS = [{"id": f"p{i}", "prompt": "def f(x):" * (i + 1), "category": ("code", "prose")[i % 2]} for i in range(3)]


def test_rerun_resumes_every_piece(tiny_target_dir, drafts, tmp_path):
    out = tmp_path / "bench"
    sweep = {"concurrencies": [1, 2], "input_lens": [16], "max_tokens": 4}
    arms = [a for a in default_variants(drafts) if a.method in ("ar", "lilicorr", "dflash")]
    first = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 6, out=out, arms=arms, sweep=sweep)
    assert "resumed" not in first
    second = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 6, out=out, arms=arms, sweep=sweep)
    # every run, the tiers and every sweep cell came from disk: identical figures, timings included
    assert len(second["resumed"]) == 2 + len(first["runs"]) + len(first["sweep"]) // 2  # + tiers, hf_generate
    assert second["runs"] == first["runs"] and second["sweep"] == first["sweep"]
    # re-saving one drafter reruns only its arms
    from lilicorr.checkpoint import load_draft, save_draft

    save_draft(load_draft(drafts[1]), drafts[1])
    fourth = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 6, out=out, arms=arms)
    assert any(drafts[0] in k for k in fourth["resumed"]) and not any(drafts[1] in k for k in fourth["resumed"])
    # a changed input (token budget) invalidates the parts
    third = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 5, out=out, arms=arms)
    assert "resumed" not in third


def test_parts_measured_with_another_openmp_spin_are_not_reused(tiny_target_dir, drafts, tmp_path, monkeypatch):
    """Timings with and without OpenMP's spin differ by up to 2×: a page must not mix them."""
    out = tmp_path / "bench"
    arms = [Variant("ar", "ar")]
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, out=out, arms=arms)
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")  # passive, as unset: the same parts
    assert "resumed" in run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, out=out, arms=arms)
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, out=out, arms=arms)
    assert "resumed" not in res and res["environment"]["gomp_spincount"] == "10000"


def test_half_written_part_is_recomputed(tiny_target_dir, drafts, tmp_path):
    out = tmp_path / "bench"
    arms = [Variant("ar", "ar")]
    run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, out=out, arms=arms)
    for part in (out / "parts").glob("*.json"):
        part.write_text(part.read_text()[:20])  # truncated, as after a crash outside the atomic write
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, out=out, arms=arms)
    assert "resumed" not in res and json.loads((out / "results.json").read_text())["runs"]


def test_draft_length_variants(tiny_target_dir, drafts, tmp_path):
    arms = with_draft_lengths(default_variants(drafts), [1, 3])
    names = [a.name for a in arms]
    assert "ar" in names and "lc@n1" in names and "lc:oracle@n3" in names and "df:ddtree" in names
    run = [a for a in arms if a.name in ("ar", "lc@n1", "lc@n3", "df@n1")]
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 8, arms=run)
    for r in res["runs"]:
        assert r.get("identical_to_ar", True)
        n = r["arm"]["num_speculative_tokens"]
        if n:
            assert len(r["per_position_rate"]) == n


def test_long_prompts_have_the_length_and_both_categories(tmp_path):
    from transformers import AutoTokenizer

    from lilicorr.data.prompts import long_prompts
    from tests.conftest import SHIPPED_TARGET

    if not (SHIPPED_TARGET / "tokenizer.json").exists():
        pytest.skip("shipped tokenizer not present")
    tok = AutoTokenizer.from_pretrained(SHIPPED_TARGET)
    words = " ".join(f"word{i} for x in range({i}):" for i in range(2000))
    docs = [
        {"id": f"{c}/doc{i}", "category": c, "text": words * (i + 1)} for c in ("code", "prose") for i in range(2)
    ] + [{"id": "code/short", "category": "code", "text": "short"}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    got = long_prompts(tmp_path, tok, 3, prompt_tokens=300)
    assert [p["category"] for p in got] == ["long"] * 3
    assert {p["source"].split("/")[0] for p in got} == {"code", "prose"}
    assert all(len(tok.encode(p["prompt"], add_special_tokens=False)) >= 300 for p in got)
    with pytest.raises(ValueError, match="only 4 test documents"):
        long_prompts(tmp_path, tok, 5, prompt_tokens=300)


def test_probabilistic_arms_run_only_when_sampling(tiny_target_dir, drafts):
    arms = [a for a in default_variants(drafts) if a.name in ("ar", "lc:prob", "df:prob")]
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0, 1.0], 6, arms=arms)
    names = {(r["temperature"], r["arm"]["name"]) for r in res["runs"]}
    assert names == {(0.0, "ar"), (1.0, "ar"), (1.0, "lc:prob"), (1.0, "df:prob")}
    assert all(r["arm"]["draft_sample_method"] == "probabilistic" for r in res["runs"] if r["arm"]["name"] != "ar")


def test_sweep_skips_oracle_and_probabilistic_arms(tiny_target_dir, drafts):
    arms = default_variants(drafts)
    sweep = {"concurrencies": [1], "input_lens": [8], "max_tokens": 3}
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 4, arms=arms, sweep=sweep)
    swept = {r["arm"] for r in res["sweep"]}
    assert swept == {a.name for a in arms if a.method != "oracle" and a.draft_sample_method == "greedy"}


def test_hf_generate_baseline_matches_engine_ar(tiny_target):
    from lilicorr.bench.runner import hf_generate_baseline, run_variant

    prompts = [{"id": "a", "prompt": "def f(x):"}, {"id": "b", "messages": [{"role": "user", "content": "hi"}]}]
    hf = hf_generate_baseline(tiny_target, prompts, 12)
    ar = run_variant(tiny_target, Variant("ar", "ar"), prompts, 0.0, 12, {})
    assert hf["outputs"] == ar["outputs"] and all(len(v) == 12 for v in hf["outputs"].values())
    assert hf["tokens_per_s"] > 0
    # an answer that reaches the model's EOS early: generate() must run on past it, like the engine's AR
    model = tiny_target.model
    saved = model.config.eos_token_id, model.generation_config.eos_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = ar["outputs"]["a"][1]
    try:
        assert hf_generate_baseline(tiny_target, prompts, 12)["outputs"] == ar["outputs"]
    finally:
        model.config.eos_token_id, model.generation_config.eos_token_id = saved


def test_tree_budget_variants_and_pooled_sweep(tiny_target_dir, drafts):
    from lilicorr.bench.report import sweep_speedup_table
    from lilicorr.bench.variants import with_tree_budgets

    arms = with_tree_budgets(default_variants(drafts), [4])
    by_name = {a.name: a for a in arms}
    assert by_name["lc:tree@b4"].options == {"tree_budget": 4} and by_name["lc:tree"].options == {"tree_budget": "auto"}
    assert "lc@b4" not in by_name  # chains have no node budget
    run = [by_name[n] for n in ("ar", "lc:tree", "lc:tree@b4", "df:ddtree@b4")]
    sweep = {"concurrencies": [1, 2], "input_lens": [8], "max_tokens": 3, "pooled": True}
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 6, arms=run, sweep=sweep, paired_ar=True)
    assert all(r.get("identical_to_ar", True) for r in res["runs"])
    assert all(r["speedup_vs_paired_ar"] > 0 for r in res["runs"] if r["arm"]["name"] != "ar")
    assert {r["tier"] for r in res["sweep"]} == {"all"} and len(res["sweep"]) == 4 * 2
    assert all(r["decode_tokens_per_s"] > 0 for r in res["sweep"])
    assert all(("ar_tokens_per_s" in r) == (r["arm"] != "ar") for r in res["sweep"])  # each cell paired with AR
    table = sweep_speedup_table(res, "decode_tokens_per_s")
    assert "lc:tree@b4" in table and table.count("\n") == 2 + 2  # header, rule, one line per concurrency


def test_sweep_context_prompts_end_with_their_own_question():
    from lilicorr.bench.sweep import context_prompts

    got = context_prompts([[1, 2, 3], [4, 5], [6]], 7)
    # the other prompts go before each one (as earlier turns), cut from the left: each ends with its own
    assert got == [[3, 6, 4, 5, 1, 2, 3], [5, 1, 2, 3, 6, 4, 5], [6, 4, 5, 1, 2, 3, 6]]
    assert context_prompts([[1, 2, 3, 4]], 2) == [[3, 4]]


def test_default_arm_is_exactly_the_shipped_default(tiny_target_dir, drafts):
    """`NAME:default` measures what `generate --draft NAME` / `make run` / `serve` run, and stays lossless."""
    from lilicorr.decoding.config import default_config

    by_name = {a.name: a for a in default_variants(drafts)}
    for d in drafts:
        cfg = default_config(d)
        arm = by_name[f"{Path(d).name}:default"]
        assert arm.method == cfg.pop("method") and arm.draft == cfg.pop("model") == d
        assert arm.enable_adaptive_verification == cfg.pop("enable_adaptive_verification", False)
        assert arm.draft_gate == cfg.pop("draft_gate", False)
        assert arm.draft_vocab_size == cfg.pop("draft_vocab_size", 0)
        assert arm.options == cfg
    res = run_bench(str(tiny_target_dir), drafts, PROMPTS, [0.0], 6, arms=[by_name["ar"], by_name["lc:default"]])
    assert all(r.get("identical_to_ar", True) for r in res["runs"])


def test_draft_vocab_arms_and_stable_part_keys(drafts):
    """``--draft-vocab-sizes``: ARM@vN beside each drafting arm; an arm without one keeps the part key it had
    before the field existed (so earlier runs still resume)."""
    from lilicorr.bench.variants import arm_key, choose_variants

    arms = choose_variants(drafts, only=["df", "df@v64", "ngram"], draft_vocabs=[64])
    by_name = {a.name: a for a in arms}
    assert set(by_name) == {"ar", "ngram", "df", "df@v64"} and by_name["df@v64"].draft_vocab_size == 64
    assert "draft_vocab_size" not in arm_key(by_name["df"]) and arm_key(by_name["df@v64"])["draft_vocab_size"] == 64
    assert "ngram@v64" not in {a.name for a in choose_variants(drafts, draft_vocabs=[64])}  # no drafter, no vocab
    gated = {a.name: a for a in choose_variants(drafts, gate=True)}
    assert gated["df+gate"].draft_gate and not gated["df"].draft_gate and "draft_gate" not in arm_key(gated["df"])
    assert "df:adaptive+gate" not in gated and "ngram+gate" not in gated  # adaptive arms have the gate already
