"""``resolve``: one decision of method, defaults, draft length and typed options per config and drafter folder.

The shipped folders are read for their config.json / arm.json only (no weights are loaded)."""

import json
from dataclasses import fields

import pytest

from lilicorr.decoding.config import (
    COMMON_KEYS,
    DEFAULT,
    FASTEST,
    SpecConfig,
    default_config,
    parse_speculative_config,
    read_speculative_config,
    resolve,
)
from lilicorr.decoding.methods import NoOptions
from lilicorr.decoding.methods.ngram import NgramOptions
from lilicorr.decoding.methods.trees import AUTO_TREE_CAP, DDTreeOptions, TreeOptions

LILICORR, DFLASH, ARM = "models/tiny-s-lilicorr", "models/tiny-s-dflash", "models/arms/tiny-s-dspark"
BLOCK = {LILICORR: 8, DFLASH: 8}  # their dflash_config.block_size, pinned below


def test_shipped_folders_keep_their_default_configuration():
    """What `generate --draft`, `make run`, a bare `serve` and the bench's `:default` run, pinned."""
    lookup = {"prompt_lookup_max": 4, "prompt_lookup_min": 1}
    for folder, method in [("models/smollm2-lilicorr", "lilicorr-tree"), ("models/smollm2-dflash", "ddtree")]:
        expected = {"method": method, **lookup, "tree_budget": 16, "draft_gate": True, "model": folder}
        assert default_config(folder) == expected
        r = resolve(SpecConfig(method=DEFAULT), folder)
        assert (r.method, r.draft_gate, r.enable_adaptive_verification, r.draft_sample_method) == (
            method, True, False, "greedy"
        )  # fmt: skip
        assert r.options.tree_budget == 16 and r.options.lookup == (4, 1)
    assert default_config("models/arms/smollm2-dspark") == {"method": "dspark", "model": "models/arms/smollm2-dspark"}


@pytest.mark.parametrize(
    ("asked", "folder", "method"),
    [
        (SpecConfig(method=DEFAULT), LILICORR, FASTEST["lilicorr"]["method"]),
        (SpecConfig(method=DEFAULT), DFLASH, FASTEST["dflash"]["method"]),
        (SpecConfig(method=DEFAULT), ARM, "dspark"),  # an arm folder runs as itself
        (SpecConfig(method=DEFAULT), None, "ar"),
        (SpecConfig(method=DEFAULT, num_speculative_tokens=3), LILICORR, "lilicorr"),  # tuned: vLLM's rule
        (SpecConfig(method=DEFAULT, draft_sample_method="probabilistic"), DFLASH, "dflash"),
        (SpecConfig(), LILICORR, "lilicorr"),  # None (vLLM's "dflash"): what the folder is
        (SpecConfig(), ARM, "dspark"),
        (SpecConfig(), None, "ar"),
        (SpecConfig(method="dflash"), LILICORR, "dflash"),  # named: exactly that (the bench's `:top1`)
        (SpecConfig(method="ngram"), None, "ngram"),
    ],
)
def test_one_function_decides_what_a_folder_runs(asked, folder, method):
    assert resolve(asked, folder).method == method


def test_a_tree_option_with_the_folder_alone_tunes_its_tree():
    """`--draft X --tree-budget 32` (refused before): the folder's tree method, the rest of its default kept."""
    for folder, method, typed in [(LILICORR, "lilicorr-tree", TreeOptions), (DFLASH, "ddtree", DDTreeOptions)]:
        r = resolve(SpecConfig(method=DEFAULT, options={"tree_budget": 32}), folder)
        assert r.method == method and type(r.options) is typed and r.options.tree_budget == 32
        assert r.draft_gate and r.options.lookup == (4, 1)
        assert r.asked.options == {"tree_budget": 32, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
    auto = resolve(SpecConfig(method=DEFAULT, options={"tree_budget": "auto"}), DFLASH).options
    assert auto.auto and auto.nodes == AUTO_TREE_CAP
    with pytest.raises(ValueError, match="method 'dspark' has no option 'tree_budget'"):
        resolve(SpecConfig(method=DEFAULT, options={"tree_budget": 32}), ARM)  # an arm has no tree
    with pytest.raises(ValueError, match="method 'lilicorr' has no option 'tree_budget'"):
        resolve(SpecConfig(options={"tree_budget": 32}), LILICORR)  # vLLM's rule stays strict


def test_the_draft_length_is_decided_once_per_method():
    assert resolve(SpecConfig(), LILICORR).num_speculative_tokens == BLOCK[LILICORR] - 1
    assert resolve(SpecConfig(num_speculative_tokens=3), DFLASH).num_speculative_tokens == 3
    assert resolve(SpecConfig(method="ddtree", num_speculative_tokens=2), DFLASH).num_speculative_tokens == 2
    assert resolve(SpecConfig(method="ngram")).num_speculative_tokens == 4  # vLLM's ngram default
    assert resolve(SpecConfig(method="ngram", num_speculative_tokens=6)).num_speculative_tokens == 6
    assert resolve(SpecConfig(method="ar")).num_speculative_tokens == 0
    with pytest.raises(ValueError, match=f"num_speculative_tokens = 8: expected 1..{BLOCK[DFLASH] - 1}"):
        resolve(SpecConfig(num_speculative_tokens=8), DFLASH)
    with pytest.raises(ValueError, match="'num_speculative_tokens' must be a positive integer, got 0"):
        SpecConfig(num_speculative_tokens=0)


def test_a_loaded_drafter_is_read_instead_of_its_folder(tiny_target):
    from tests.decoding.engine_helpers import random_draft

    r = resolve(SpecConfig(method=DEFAULT), None, random_draft(tiny_target, lilicorr=False, block=5))
    assert r.method == "ddtree" and r.num_speculative_tokens == 4 and r.model is None


def test_options_are_typed_per_method():
    assert type(resolve(SpecConfig(method="lilicorr-tree"), LILICORR).options) is TreeOptions
    assert resolve(SpecConfig(method="ddtree"), DFLASH).options == DDTreeOptions(16, 0, 1, 8)
    assert resolve(SpecConfig(method="ngram")).options == NgramOptions(4, 1)
    assert resolve(SpecConfig(method="dflash"), DFLASH).options == NoOptions()
    assert not hasattr(NoOptions(), "tree_budget")


@pytest.mark.parametrize(
    ("asked", "match"),
    [
        (lambda: SpecConfig(method="ddtree", options={"tree_budget": 1}), r"'tree_budget' must be .* \(at least 2"),
        (lambda: SpecConfig(method="ngram", options={"prompt_lookup_max": 0}), "'prompt_lookup_max' must be a pos"),
        (lambda: SpecConfig(draft_sample_method="beam"), "draft_sample_method 'beam': expected one of"),
        (lambda: SpecConfig(rejection_sample_method="fast"), "rejection_sample_method 'fast': expected one of"),
        (lambda: SpecConfig(draft_gate=1), "'draft_gate' must be true or false, got 1"),
        (lambda: SpecConfig(draft_vocab_size=-1), "'draft_vocab_size' must be a non-negative integer"),
        (lambda: SpecConfig(method="eagle"), "unknown method 'eagle'"),
        (lambda: resolve(SpecConfig(method="ddtree")), "method 'ddtree' needs 'model'"),
        (lambda: resolve(SpecConfig(method=DEFAULT, options={"tree_budget": 1}), DFLASH), r"at least 2"),
    ],
)
def test_each_value_is_checked_when_the_config_is_built(asked, match):
    """One check per key, with one bound, named in the error: `tree_budget: 1` no longer waits for the engine."""
    with pytest.raises(ValueError, match=match):
        asked()


def test_a_speculative_config_resolves_at_start_up():
    """serve's `--speculative-config`: a bad option, or one of another method, is named before serving."""
    with pytest.raises(ValueError, match=r"--speculative-config: .*'tree_budget' must be .* \(at least 2"):
        read_speculative_config(f'{{"method": "ddtree", "model": "{DFLASH}", "tree_budget": 1}}')
    with pytest.raises(ValueError, match="method 'lilicorr' has no option 'tree_budget'"):
        read_speculative_config(f'{{"method": "dflash", "model": "{LILICORR}", "tree_budget": 16}}')
    cfg = {"method": "dflash", "model": LILICORR}  # vLLM's DFlash family: the folder decides, its chain
    assert read_speculative_config(json.dumps(cfg)) == resolve(parse_speculative_config(cfg))  # resolved there, once
    assert resolve(parse_speculative_config(cfg)).method == "lilicorr"
    assert resolve(parse_speculative_config({"method": DEFAULT, "model": LILICORR})).method == "lilicorr-tree"


def test_a_resolved_ask_round_trips_through_its_json():
    for asked in [SpecConfig(method=DEFAULT), SpecConfig(method=DEFAULT, options={"tree_budget": 8}), SpecConfig()]:
        r = resolve(asked, LILICORR)
        again = resolve(parse_speculative_config(r.asked.as_config()))
        assert again == r


def test_the_keys_are_declared_once():
    """serve's JSON keys, generate's flags and the bench's variant fields all come from SpecConfig's fields."""
    from lilicorr.bench.variants import Variant
    from lilicorr.cli.main import build_parser

    spec_fields = [f.name for f in fields(SpecConfig)]
    assert list(COMMON_KEYS) == [k for k in spec_fields if k != "options"]
    # the bench records a variant as these fields, in this order (resumable parts are keyed by them)
    assert [f.name for f in fields(Variant)] == [
        "name", "method", "draft", "num_speculative_tokens", "draft_sample_method", "rejection_sample_method",
        "enable_adaptive_verification", "options", "draft_vocab_size", "draft_gate",
    ]  # fmt: skip
    assert Variant("x", "ddtree", DFLASH, options={"tree_budget": 4}).spec() == SpecConfig(
        method="ddtree", model=DFLASH, options={"tree_budget": 4}
    )
    generate = build_parser()._subparsers._group_actions[0].choices["generate"]
    dests = {a.dest for a in generate._actions}
    assert set(COMMON_KEYS) <= dests and {"tree_budget", "tree_topk", "prompt_lookup_max"} <= dests


def test_a_folder_can_make_its_draft_vocabulary_the_default(tmp_path):
    """A folder whose ``draft_vocab.json`` has ``default_size`` (Gemma 3's drafters: a 262 144-token head) runs its
    default configuration with that draft vocabulary; an explicit size wins; a named method is vLLM's rule and
    drafts from the whole vocabulary unless asked; a bad field is refused by name."""
    import shutil

    from lilicorr.decoding.draft_vocab import write_draft_vocab

    folder = tmp_path / "gemma-like"
    shutil.copytree(LILICORR, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    write_draft_vocab(folder, list(range(100)), {"data": []}, default_size=64)
    assert resolve(SpecConfig(method=DEFAULT), folder).draft_vocab_size == 64
    assert default_config(folder)["draft_vocab_size"] == 64  # what /v1/models and the cards show
    assert resolve(SpecConfig(method=DEFAULT, draft_vocab_size=32), folder).draft_vocab_size == 32
    assert resolve(SpecConfig(method="lilicorr"), folder).draft_vocab_size == 0
    assert resolve(SpecConfig(method=DEFAULT), LILICORR).draft_vocab_size == 0  # shipped SmolLM2: unchanged
    with pytest.raises(ValueError, match="default_size 101: expected 0..100"):
        write_draft_vocab(folder, list(range(100)), {}, default_size=101)
    (folder / "draft_vocab.json").write_text(json.dumps({"token_ids": [1, 2], "default_size": "many"}))
    with pytest.raises(ValueError, match="field 'default_size'"):
        resolve(SpecConfig(method=DEFAULT), folder)
