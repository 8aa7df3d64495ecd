"""Training sees exactly what inference sees — the known bugs that gave public DFlash trainers near-zero
acceptance, each injected to show that this test catches it.

The engine drafts (a random drafter, fp32) while decoding a prompt; a spy records each draft's logits and
the position of its anchor. The training code's block pass over the finished sequence, with all those
anchors at once, must give the same logits (same target taps, positions, mask token, LM head, and no block
seeing another), and its labels must be the tokens that follow each anchor.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lilicorr.training.draft as draft_mod
from lilicorr.decoding.build import build_engine, build_proposer
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.models.backbone import training_block_mask
from lilicorr.runtime.runtime import TargetRuntime
from lilicorr.training.draft import DraftStep
from lilicorr.training.draft_config import DraftTrainConfig, build_model
from lilicorr.training.features import target_features
from lilicorr.training.losses import block_labels

BLOCK = 4


TARGET = Path(__file__).resolve().parents[2] / "models" / "tiny-s"  # a trained target: varied continuations


@pytest.fixture(scope="module")
def drafted():
    """(target, drafter, cfg, sequence, anchor positions, the engine's draft logits per anchor)."""
    torch.manual_seed(0)
    target = TargetRuntime.load(TARGET)
    cfg = DraftTrainConfig(target=str(TARGET), data="unused", out="unused", mode="dflash", num_layers=1,
                           block_size=BLOCK, bf16=False, seed=3)  # fmt: skip
    model = build_model(cfg, target).eval()
    spec = SpecConfig(method="dflash", num_speculative_tokens=BLOCK - 1)
    proposer = build_proposer(target, model, spec)
    prompt = target.tokenizer.encode('def parse_header(line):\n    """Split a header line', add_special_tokens=False)
    records: list[tuple[int, int, torch.Tensor]] = []  # (outputs so far, anchor token, logits [S, V])
    propose = proposer.propose

    def spy(out, *args, **kwargs):
        req = out.requests[0]
        records.append((len(req.output_ids), int(out.anchor_tokens[0]), out.logits[0].clone()))
        return propose(out, *args, **kwargs)

    proposer.propose = spy
    engine = build_engine(target, spec, model, proposer=proposer)
    req = Request(prompt, SamplingParams(max_tokens=24, temperature=1.0, seed=0))  # sampled: no repeated tokens
    engine.generate([req])
    seq = torch.tensor(prompt + req.output_ids)
    # the pending token (the block's anchor) is the newest output: position len(prompt) + emitted − 1
    anchors = [len(prompt) + n - 1 for n, _, _ in records]
    anchors = [a for a in anchors if a + BLOCK - 1 < len(seq)]  # blocks whose labels exist
    for a, (_, tok, _) in zip(anchors, records, strict=False):
        assert int(seq[a]) == tok
    logits = torch.stack([lg for (_, _, lg) in records[: len(anchors)]])  # [N, S, V]
    assert len(anchors) >= 4
    assert len(set(seq.tolist())) > len(seq) // 2  # varied tokens, so a shifted label cannot match by chance
    return target, model, cfg, seq, anchors, logits


def _block_pass(drafted):
    target, model, cfg, seq, anchors, _ = drafted
    step = DraftStep(cfg, target, model)
    a = torch.tensor([anchors])
    with torch.no_grad():
        return step.block_pass(seq[None], a, torch.ones_like(a, dtype=torch.bool))


def _parity(drafted) -> None:
    *_, seq, anchors, engine_logits = drafted
    bp = _block_pass(drafted)
    torch.testing.assert_close(bp.logits, engine_logits, rtol=1e-4, atol=1e-4)
    labels = torch.stack([seq[a + 1 : a + BLOCK] for a in anchors])
    assert torch.equal(bp.labels, labels), "labels are not the tokens after each anchor"


def test_training_block_pass_equals_the_engine_draft(drafted):
    _parity(drafted)


def _shifted_taps(model, tokens, layer_ids):
    taps, final = target_features(model, tokens, layer_ids)
    return torch.roll(taps, -1, dims=1), final  # position p sees p + 1's hidden states


def _leaky_mask(anchors, ctx_len, block):
    m = training_block_mask(anchors, ctx_len, block)
    m[..., ctx_len:] = True  # every block sees every other block
    return m


def _labels_off_by_one(tokens, anchors, block):
    return block_labels(tokens, anchors + 1, block)


@pytest.mark.parametrize(
    "bug",
    ["hidden states shifted by one", "anchors leaking across blocks", "labels off by one", "LM head left random"],
)
def test_each_known_bug_breaks_parity(drafted, bug, monkeypatch):
    target = drafted[0]
    if bug == "hidden states shifted by one":
        monkeypatch.setattr("lilicorr.training.features.target_features", _shifted_taps)
    elif bug == "anchors leaking across blocks":
        monkeypatch.setattr(draft_mod, "training_block_mask", _leaky_mask)
    elif bug == "labels off by one":
        monkeypatch.setattr(draft_mod, "block_labels", _labels_off_by_one)
    else:
        head = target.lm_head
        random = torch.nn.Linear(head.in_features, head.out_features, bias=False)
        monkeypatch.setattr(type(target), "lm_head", property(lambda self: random))
    with pytest.raises(AssertionError):
        _parity(drafted)
