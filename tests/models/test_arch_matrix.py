"""The architecture matrix: "any Hugging Face causal LM", family by family, as tiny random models.

Each green family gets a drafter trained a few steps by the project's own trainer (online target features),
greedy output of the engine identical to the target's own (fp32, no cache) for DFlash, LiLiCorr and the
LiLiCorr tree at batch 1 and 2, and a checkpoint that round-trips. Sliding-window families decode past their
window (the prompts are longer than it), so the runtime's own window masks are what is tested. A family the
drafter cannot share its embedding, LM head or cache with is refused by name when a drafter attaches. The
table in docs/guide/targets.md is checked against ``GREEN`` and ``REFUSED`` here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import save_file

from lilicorr.checkpoint import load_draft, save_draft
from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.models.draft import DraftModel
from lilicorr.runtime.arch import training_support
from lilicorr.runtime.runtime import TargetError, TargetRuntime
from lilicorr.training.draft import train_draft
from lilicorr.training.draft_config import DraftTrainConfig

W = 8  # sliding window: shorter than the long prompt plus its continuation
SLIDE = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, eos_token_id=0, bos_token_id=0, pad_token_id=0)  # fmt: skip
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)

# family -> (config class, model class, config fields beyond BASE)
FAMILIES: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"head_dim": 16}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16, "tie_word_embeddings": True}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"head_dim": 16, **MOE}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {**MOE, "shared_expert_intermediate_size": 32}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"head_dim": 16, "num_local_experts": 4}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": W, "layer_types": SLIDE}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"head_dim": 16, "sliding_window": W}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"sliding_window": W}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": W}),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"embedding_multiplier": 12.0, "logits_scaling": 4.0}),
    "cohere": ("CohereConfig", "CohereForCausalLM", {}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {"sliding_window": W}),
}  # fmt: skip
# gpt_neox / starcoder2: LayerNorm families, whose drafter geometry falls back to layer_norm_eps / norm_epsilon
# (and GPT-NeoX's KV heads to its attention heads, its layers under the gpt_neox. prefix)
GREEN = ["llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "gemma3", "mistral", "phi3", "olmo2",
         "gpt_neox", "starcoder2"]  # fmt: skip
# refused by name when a drafter attaches
REFUSED = {
    "gemma2": r"final_logit_softcapping = 30\.0",
    "granite": r"logits_scaling = 4\.0.*embedding_multiplier = 12\.0",
    "cohere": r"logit_scale = 0\.0625",
}
STEPS, MAX_NEW = 6, 14


def _available(family: str) -> bool:
    names = dir(transformers)  # the lazy module lists its names without importing every model
    return all(c in names for c in FAMILIES[family][:2])


def _params(names):
    return [
        pytest.param(n, marks=pytest.mark.skipif(not _available(n), reason=f"transformers lacks {n}")) for n in names
    ]


@pytest.fixture(scope="module")
def tokenizer_dir(tiny_target_dir, tmp_path_factory) -> Path:
    """The session's tiny-target tokenizer (the project's byte-level BPE, ``<|mask|>`` included), alone."""
    import shutil

    out = tmp_path_factory.mktemp("arch_tok")
    for f in tiny_target_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")) or f.name == "vocab.json" or f.name == "merges.txt":
            shutil.copy(f, out / f.name)
    return out


def make_target(family: str, tokenizer_dir: Path, out: Path) -> Path:
    """A random ``family`` model (fp32, seed 0) saved with the shared tokenizer: a target folder."""
    import shutil

    cfg_cls, model_cls, extra = FAMILIES[family]
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    cfg = getattr(transformers, cfg_cls)(**{**BASE, "vocab_size": len(vocab), **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():  # sharper logits: decisive argmax and varied continuations
        model.get_input_embeddings().weight.mul_(4.0)
    model.save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, out / f.name)
    return out


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, vocab, (n,), generator=g).tolist() for n in (5, 13)]  # 13 + 14 > W


@torch.no_grad()
def _reference(model, prompt: list[int]) -> list[int]:
    """The target's own greedy tokens: a full forward per token, no cache, no batching."""
    seq = list(prompt)
    for _ in range(MAX_NEW):
        seq.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt) :]


def _decode(target: TargetRuntime, draft, method: str | None, prompts, batch: int) -> list[list[int]]:
    engine = build_engine(target, SpecConfig(method=method) if method else None, draft)
    reqs = [Request(p, SamplingParams(max_tokens=MAX_NEW, ignore_eos=True), id=str(i)) for i, p in enumerate(prompts)]
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    return [r.output_ids for r in reqs]


def _training_data(target: TargetRuntime, path: Path) -> Path:
    """Rows continued greedily by the target itself (what ``lilicorr data regenerate`` makes), 6-token prompts."""
    g = torch.Generator().manual_seed(0)
    params = SamplingParams(max_tokens=18, ignore_eos=True)
    reqs = [Request(torch.randint(4, target.vocab_size, (6,), generator=g).tolist(), params) for _ in range(10)]
    build_engine(target).generate(reqs)
    tokens = torch.tensor([r.prompt_ids + r.output_ids for r in reqs], dtype=torch.int32)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 6:] = True
    save_file({"tokens": tokens, "loss_mask": mask, "sampled": torch.zeros(10, dtype=torch.bool)}, str(path))
    return path


def _train(target_dir: Path, data: Path, out: Path) -> dict:
    cfg = DraftTrainConfig(
        target=str(target_dir), data=str(data), out=str(out), mode="lilicorr", run_dir=str(out) + "-run",
        num_layers=1, block_size=4, candidate_topk=4, head_layers=1, head_heads=2, factor_dim=16, steps=STEPS,
        batch_size=4, anchors=4, lr=3e-3, val_sequences=2, val_every=1000, checkpoint_minutes=100, threads=1,
        bf16=False, init_from_target=True, device="cpu",
    )  # fmt: skip
    return train_draft(cfg)


@pytest.mark.parametrize("family", _params(GREEN))
def test_green_family(family, tokenizer_dir, tmp_path):
    target_dir = make_target(family, tokenizer_dir, tmp_path / family)
    target = TargetRuntime.load(target_dir)
    summary = _train(target_dir, _training_data(target, tmp_path / "data.safetensors"), tmp_path / "draft")
    log = [json.loads(x) for x in (tmp_path / "draft-run" / "train.log").read_text().splitlines()]
    last = [e for e in log if "loss" in e][-1]
    assert summary["steps"] == STEPS and last["step"] == STEPS and torch.isfinite(torch.tensor(last["loss"]))
    draft = load_draft(tmp_path / "draft", target.model.config)
    assert draft.is_lilicorr and draft.cfg.target_layer_ids == [0, 1, 2]
    init = DraftModel(draft.cfg).init_weights(0)  # the trainer's init (seed 0): training moved the fusion
    assert not torch.allclose(draft.fc.weight, init.fc.weight.to(torch.bfloat16).float(), atol=1e-4)

    # the checkpoint round-trips: both tensor-name schemes, same tensors, same config
    for scheme in ("A", "B"):
        again = load_draft(save_draft(draft, tmp_path / f"again-{scheme}", scheme=scheme, dtype=torch.float32))
        assert again.cfg.to_dict() == draft.cfg.to_dict()
        for name, t in draft.state_dict().items():
            assert torch.equal(t, again.state_dict()[name]), (scheme, name)

    prompts = _prompts(target.vocab_size)
    reference = [_reference(target.model, p) for p in prompts]
    assert reference[0] != reference[1]
    assert _decode(target, None, None, prompts, batch=2) == reference
    # batch 2: padding and holes in the cache; batch 1: the tree's hole-free path (accepted path moved, tail cut)
    for method, batch in (("dflash", 2), ("lilicorr", 2), ("lilicorr-tree", 2), ("lilicorr-tree", 1)):
        assert _decode(target, again, method, prompts, batch) == reference, (method, batch)


@pytest.mark.parametrize("family", _params(["gemma3"]))
def test_eager_attention_gets_float_masks(family, tokenizer_dir, tmp_path):
    """Eager attention adds its mask to the scores: the runtime's tree and window masks must reach it as
    0 / −inf floats (a boolean mask would add 0 and 1 and hide nothing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.decoding.engine_helpers import random_draft

    path = make_target(family, tokenizer_dir, tmp_path / family)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    target = TargetRuntime(model, AutoTokenizer.from_pretrained(path))
    assert target.layout.eager
    prompts = _prompts(target.vocab_size)
    reference = [_reference(target.model, p) for p in prompts]
    draft = random_draft(target, lilicorr=True)
    for method, batch in ((None, 2), ("lilicorr-tree", 2), ("lilicorr-tree", 1)):
        assert _decode(target, draft if method else None, method, prompts, batch) == reference, (method, batch)


@pytest.mark.parametrize("family", _params(["gemma3", "llama"]))
def test_drafter_embeds_through_the_unscaled_table_as_vllm_does(family, tokenizer_dir, tmp_path):
    """vLLM's DFlash and LiLiCorr drafters embed tokens through the target's ``embed_tokens`` table, and vLLM
    applies Gemma's √hidden normalizer outside it; transformers' Gemma module applies it inside. The drafter
    here must see what it sees in vLLM: the table itself (for Gemma, the module's output / √hidden)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_target(family, tokenizer_dir, tmp_path / family)
    model = AutoModelForCausalLM.from_pretrained(path)
    target = TargetRuntime(model, AutoTokenizer.from_pretrained(path))
    ids = torch.tensor([[1, 5, 9]])
    table = model.get_input_embeddings().weight
    torch.testing.assert_close(target.embed_tokens(ids), table[ids])
    assert target.embed_tokens.weight.data_ptr() == table.data_ptr()  # shared on the CPU, not copied
    scale = model.config.hidden_size**0.5 if family == "gemma3" else 1.0
    torch.testing.assert_close(model.get_input_embeddings()(ids), table[ids] * scale, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("family", _params(["mistral", "gemma3"]))
def test_sliding_window_masks_are_what_keeps_it_lossless(family, tokenizer_dir, tmp_path, monkeypatch):
    """Mutation check: with the runtime's window masks replaced by full ones, decoding past the window
    diverges from the target's own greedy output (so the green rows above really test the windows)."""
    import lilicorr.runtime.runtime as rt

    target = TargetRuntime.load(make_target(family, tokenizer_dir, tmp_path / family))
    prompts = _prompts(target.vocab_size)
    reference = [_reference(target.model, p) for p in prompts]
    assert _decode(target, None, None, prompts, batch=1) == reference

    def no_window(layout, visible, query_pos, key_pos, dtype):
        full = visible[:, None]
        return {"full_attention": full, "sliding_attention": full} if layout.per_type else full

    monkeypatch.setattr(rt, "layer_masks", no_window)
    assert _decode(target, None, None, prompts, batch=1)[1] != reference[1]


@pytest.mark.parametrize("family", _params(list(REFUSED)))
def test_refused_family_is_named_when_a_drafter_attaches(family, tokenizer_dir, tmp_path):
    target_dir = make_target(family, tokenizer_dir, tmp_path / family)
    target = TargetRuntime.load(target_dir)  # plain decoding still loads and runs
    prompts = _prompts(target.vocab_size)
    assert _decode(target, None, None, prompts, batch=2) == [_reference(target.model, p) for p in prompts]
    with pytest.raises(TargetError, match=REFUSED[family]):
        TargetRuntime.load(target_dir, layer_ids=(0, 2))
    with pytest.raises(TargetError, match=REFUSED[family]):  # the trainer: before its first step
        _train(target_dir, _training_data(target, tmp_path / "data.safetensors"), tmp_path / "draft")
    log = tmp_path / "draft-run" / "train.log"
    assert not log.exists() or '"loss"' not in log.read_text()


@pytest.mark.parametrize("family", _params(["gemma3", "gpt_neox", "llama"]))
def test_init_from_target_copies_norms_as_the_scale_they_apply(family, tokenizer_dir, tmp_path):
    """``--init-from-target`` under each family's prefix: the drafter's final norm (a plain RMSNorm) computes what
    the target's does — Gemma's ``1 + weight`` included — and its layers' norms come from the target's last layers."""
    from lilicorr.training.draft_config import build_model

    target_dir = make_target(family, tokenizer_dir, tmp_path / family)
    target = TargetRuntime.load(target_dir)
    with torch.no_grad():  # a non-trivial final norm: Gemma's zero init would equal the plain one by chance
        for name, p in target.model.named_parameters():
            if name.endswith(("norm.weight", "final_layer_norm.weight")):
                p.uniform_(-0.5, 0.5)
    cfg = DraftTrainConfig(target=str(target_dir), data="", out="", mode="dflash", num_layers=1, block_size=4,
                           init_from_target=True)  # fmt: skip
    draft = build_model(cfg, target)
    x = torch.randn(3, target.model.config.hidden_size)
    final = target.model.get_submodule({"gpt_neox": "gpt_neox.final_layer_norm"}.get(family, "model.norm"))
    if family != "gpt_neox":  # a LayerNorm centres first: only its weight is copied
        torch.testing.assert_close(draft.norm(x), final(x), rtol=1e-4, atol=1e-5)
    src = {"gpt_neox": "gpt_neox.layers.3"}.get(family, "model.layers.3")
    scale = target.model.get_submodule(f"{src}.input_layernorm").weight
    expected = 1 + scale if family == "gemma3" else scale
    assert torch.equal(draft.layers[0].input_layernorm.weight, expected)


def test_training_support_names_a_missing_geometry_field():
    """The trainer's geometry falls back across LayerNorm families' field names; a config with none of an
    epsilon's names is named before training (``runtime.arch.training_support``)."""
    from lilicorr.training.draft_config import target_geometry

    fields = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}  # GPT-NeoX has none: MHA
    neox = transformers.GPTNeoXConfig(**fields, vocab_size=64)
    assert training_support(neox) == []
    geo = target_geometry(neox)  # no num_key_value_heads / rms_norm_eps / head_dim of its own
    assert (geo["num_key_value_heads"], geo["head_dim"], geo["rms_norm_eps"]) == (4, 16, neox.layer_norm_eps)
    gemma = transformers.Gemma3TextConfig(**{**BASE, "vocab_size": 64, **FAMILIES["gemma3"][2]})
    assert target_geometry(gemma)["rope_theta"] == 1e6  # per-layer-type RoPE: the global layers' base

    class NoEps:  # a config with a width and heads but no epsilon under any name
        hidden_size, num_attention_heads = 64, 4

        def get_text_config(self, decoder=True):
            return self

    assert any("rms_norm_eps / layer_norm_eps" in p for p in training_support(NoEps()))


def test_docs_table_matches_the_matrix():
    """docs/guide/targets.md lists every family of the matrix with the status the tests above give it."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "targets.md").read_text()
    rows = {}
    for line in doc.split("## Architectures", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    expected = {**dict.fromkeys(GREEN, "green"), **dict.fromkeys(REFUSED, "refused")}
    assert rows == expected
