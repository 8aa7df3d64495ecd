"""The drafter's card: bench arms spelled out, and the recorded training command — parsed back by the real CLI, and
following a drafter moved with its backbone."""

from pathlib import Path

import pytest

from lilicorr.training.draft_config import DraftTrainConfig
from lilicorr.training.losses import HeadLossWeights


def test_arm_labels_spell_out_the_variant_suffixes():
    from lilicorr.cards.decoding_section import arm_label

    assert arm_label("d", "d", "dflash") == "dflash"
    assert arm_label("d:default", "d", "ddtree") == "default"
    assert arm_label("d:ddtree+lookup@b16", "d", "ddtree") == "ddtree+lookup (tree budget 16)"
    assert arm_label("d@n4", "d", "dflash") == "dflash (4 draft tokens)"
    assert arm_label("d:tree+lookup@b16+gate", "d", "x") == "tree+lookup (tree budget 16, draft gate)"
    assert arm_label("d:default@v8192", "d", "x") == "default (draft vocabulary 8192)"


@pytest.mark.parametrize("mode", ["lilicorr", "head", "domino"])
def test_card_command_round_trips_through_the_cli(mode):
    """The command a card records, parsed by the real CLI, gives back the recorded config."""
    import shlex
    from dataclasses import asdict

    from lilicorr.cards.draft import train_command
    from lilicorr.cli.main import build_parser
    from lilicorr.options import from_args

    cfg = DraftTrainConfig(
        target="t",
        data="d.safetensors",
        out="o",
        mode=mode,
        head_hidden_size=32,
        steps=77,
        lr=1.5e-3,
        seed=3,
        head_grad_to_backbone=0.25,
        clip_per_module=True,
        target_layer_ids=[0, 2],
        conv_kernel_size=2,
        conv_group_size=16,
        features="feats/x",
        freeze_backbone=mode == "domino",
        init="base" if mode in ("head", "domino") else None,
        mask_token="<empty_output>",
        bf16=False,
        head_weights=HeadLossWeights(distill=0.5),
    )
    command = train_command(asdict(cfg))
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert from_args(DraftTrainConfig, args) == cfg
    assert "--fp32" in command and "--w-distill 0.5" in command and "--target-layer-ids 0,2" in command


def test_card_command_follows_a_backbone_moved_with_its_drafter():
    """Drafters trained under a scratch root and moved into ``models/`` together: the recorded command names the
    new folders, ``--init`` included when the backbone was under the same root; other paths stay as they were."""
    from lilicorr.cards.draft import moved_config

    head = {"out": "runs/v3/smollm2-dflash-head", "init": "runs/v3/smollm2-dflash", "data": "d"}
    assert moved_config(head, Path("models/smollm2-dflash-head")) == {
        "out": "models/smollm2-dflash-head",
        "init": "models/smollm2-dflash",
        "data": "d",
    }
    arm = {"out": "runs/v3/arms/smollm2-dspark", "init": "runs/v3/smollm2-dflash"}
    assert moved_config(arm, Path("models/arms/smollm2-dspark"))["init"] == "models/smollm2-dflash"
    elsewhere = {"out": "runs/v3/h", "init": "models/tiny-s-dflash"}
    assert moved_config(elsewhere, Path("models/h"))["init"] == "models/tiny-s-dflash"
    in_place = {"out": "models/h", "init": "runs/v3/smollm2-dflash"}
    assert moved_config(in_place, Path("models/h"))["init"] == "runs/v3/smollm2-dflash"
    renamed = {"out": "runs/v3/a", "init": "runs/v3/b"}  # no shared folder name: not a move, nothing inferred
    assert moved_config(renamed, Path("models/c"))["init"] == "runs/v3/b"
    assert moved_config({"out": "runs/v3/a", "init": None}, Path("models/a"))["init"] is None


def test_a_promoted_folder_card_names_the_campaign_its_decision_and_the_trunk_curve(tmp_path):
    """A folder replaced by ``train promote --apply`` is a decay branch of a warm-started trunk: its card carries the
    commands, both measures of the decision and the trunk's held-out curve from the run's ``campaign.jsonl``."""
    import json

    from lilicorr.cards.campaign_section import campaign_section

    run = tmp_path / "runs" / "camp"
    run.mkdir(parents=True)
    events = [
        {"event": "warm_start", "arm": "lc", "from": "models/lc", "its_steps": 8000, "its_wall_time_s": 5246.4},
        {"event": "segment", "arm": "lc", "val": None},
        {"event": "segment", "arm": "lc", "val": {"step": 1000, "positions": 880000, "tau": 1.9, "tau_greedy": 2.2,
                                                  "walk_tau_greedy": 2.4, "tau_t1_sampled": 1.4}},
        {"event": "segment", "arm": "lc", "val": {"step": 1000, "positions": 880000, "tau": 1.9, "tau_greedy": 2.2,
                                                  "walk_tau_greedy": 2.4, "tau_t1_sampled": 1.4}},  # rerun after a cut
        {"event": "segment", "arm": "df", "val": {"step": 1000, "positions": 1, "tau": 9.9, "tau_greedy": 9.9}},
        {"event": "engine", "arm": "lc", "step": 4000, "taus": {"lc": {"tau": 1.61}}},
        {"event": "segment", "arm": "lc", "val": {"step": 6000, "positions": 5e6, "tau": 7.7, "tau_greedy": 7.7}},
        {"event": "engine", "arm": "lc", "step": 8000, "taus": {"lc": {"tau": 8.8}}},  # the trunk after promotion
    ]  # fmt: skip
    (run / "campaign.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    folder = tmp_path / "models" / "lc"
    folder.mkdir(parents=True)
    assert campaign_section(folder) == []  # never promoted: no section
    decision = {"arm": "lc", "step": 5000, "branch": "lc-s5000-d500", "campaign": "camp", "config": "c.toml",
                "candidate": str(run / "promote" / "lc-s5000-d500" / "lc-candidate"), "margin": 0.03,
                "heldout_tau": {"shipped": 2.43, "candidate": 2.9}, "engine_tau": {"shipped": 1.66, "candidate": 1.78},
                "engine_prompts": 36, "ratios": {"heldout": 1.193, "engine": 1.071}}  # fmt: skip
    (folder / "campaign.json").write_text(json.dumps({"promotions": [decision]}))
    text = "\n".join(campaign_section(folder))
    assert "lilicorr train promote c.toml lc --decay-steps 500 --apply" in text
    assert "| engine τ (36 MT-Bench + HumanEval prompts, T = 0) | 1.660 | 1.780 | 1.071 |" in text
    assert "warm-started from `models/lc` as it was then (8000 steps, 87 min" in text
    assert text.count("| 1000 | 0.88 | 2.200 | 2.400 | 1.900 | 1.400 |") == 1  # one row a step
    assert "9.900" not in text  # the other arm's curve stays out
    assert "7.700" not in text and "8.800" not in text  # nor the trunk's steps after the promoted one
    assert "step 4000: lc τ 1.610" in text
    first = {**decision, "branch": None, "first": True, "ratios": {}, "heldout_tau": {"candidate": 3.65},
             "engine_tau": {"candidate": 1.62}}  # fmt: skip
    (folder / "campaign.json").write_text(json.dumps({"promotions": [first]}))
    text = "\n".join(campaign_section(folder))  # a target's first drafter: its figures alone, no ratio
    assert (
        "first drafter (nothing shipped to beat)" in text
        and "| held-out τ (campaign validation blocks) | 3.650 |" in text
    )
    assert "ratio" not in text


def test_a_default_draft_vocabulary_is_on_the_card(tmp_path):
    from lilicorr.cards.draft import draft_vocab_section
    from lilicorr.decoding.draft_vocab import write_draft_vocab

    write_draft_vocab(tmp_path, [5, 3, 9], {"data": ["d.safetensors"], "rows": 2, "tokens_counted": 6})
    assert "default_size" not in "\n".join(draft_vocab_section(tmp_path))
    write_draft_vocab(tmp_path, [5, 3, 9], {"data": ["d.safetensors"]}, default_size=3)
    assert "Its `default_size` 3: the folder's default configuration" in "\n".join(draft_vocab_section(tmp_path))


def test_a_card_says_when_vllm_cannot_serve_the_pair_yet(tmp_path):
    """A Gemma 3 target: vLLM 0.32 loads the drafter but refuses the pair at start-up (make compat records it)."""
    import json

    from lilicorr.cards.draft import card_intro

    cfg = {"architectures": ["DFlashDraftModel"], "dflash_config": {}}
    for arch, says in (("Gemma3ForCausalLM", True), ("LlamaForCausalLM", False)):
        target = tmp_path / arch
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"architectures": [arch]}))
        intro = card_intro(cfg, {"target": str(target), "mode": "dflash"})
        assert ("vLLM 0.32 cannot serve it yet" in intro) == says
    assert "cannot serve" not in card_intro(cfg, {"target": str(tmp_path / "absent"), "mode": "dflash"})
