"""Log-probs recorded per emitted token are the target's own, whatever proposed the token."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from tests.decoding.engine_helpers import ReferenceProposer, random_draft

PROMPTS = [[17, 400, 23, 99], [5, 6, 7], list(range(100, 130))]


def _reqs(temperature=0.0, n=3):
    return [
        Request(p, SamplingParams(max_tokens=16, logprobs=n, temperature=temperature, seed=i), id=str(i))
        for i, p in enumerate(PROMPTS)
    ]


@torch.no_grad()
def _full_forward_logprobs(model, prompt, out):
    """Reference: log_softmax of one uncached forward over prompt + output, at the emitting positions."""
    seq = torch.tensor([prompt + out])
    lp = torch.log_softmax(model(input_ids=seq).logits[0].float(), -1)
    rows = lp[len(prompt) - 1 : len(prompt) - 1 + len(out)]
    return rows.gather(1, torch.tensor(out)[:, None]).squeeze(1), rows


@pytest.fixture(scope="module")
def engines(tiny_target):
    dflash, lilicorr = random_draft(tiny_target, lilicorr=False), random_draft(tiny_target, lilicorr=True)
    ar = build_engine(tiny_target)
    ref_reqs = ar.generate(_reqs())
    refs = {i: r.output_ids for i, r in enumerate(ref_reqs)}
    return {
        "ar": lambda: build_engine(tiny_target),
        "dflash": lambda: build_engine(tiny_target, SpecConfig(num_speculative_tokens=3), dflash),
        "lilicorr": lambda: build_engine(tiny_target, None, lilicorr),
        "ddtree": lambda: build_engine(tiny_target, SpecConfig(method="ddtree", options={"tree_budget": 8}), dflash),
        "high-acceptance": lambda: _double(tiny_target, dflash, refs),
    }


def _double(target, draft, refs):
    """Drafts that are mostly accepted, so log-probs of accepted draft tokens are checked too."""

    class Keyed(ReferenceProposer):
        def propose(self, d, temperature, uniforms, timer):
            self.references = {id(r): refs[int(r.id)] + [5] * 8 for r in d.requests}
            return super().propose(d, temperature, uniforms, timer)

    return build_engine(target, SpecConfig(num_speculative_tokens=4), draft, proposer=Keyed({}, target.vocab_size))


@pytest.mark.parametrize("method", ["ar", "dflash", "lilicorr", "ddtree", "high-acceptance"])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_logprobs_equal_the_target_forward(tiny_target, engines, method, batch):
    engine = engines[method]()
    reqs = _reqs()
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    for p, r in zip(PROMPTS, reqs, strict=True):
        assert len(r.logprobs) == len(r.output_ids) == 16
        chosen, rows = _full_forward_logprobs(tiny_target.model, p, r.output_ids)
        got = torch.tensor([lp for lp, _ in r.logprobs])
        torch.testing.assert_close(got, chosen, atol=1e-4, rtol=0)
        for k, (_, top) in enumerate(r.logprobs):
            vals, idx = torch.topk(rows[k], 3)
            assert [t for t, _ in top] == idx.tolist()
            torch.testing.assert_close(torch.tensor([v for _, v in top]), vals, atol=1e-4, rtol=0)
    if method == "high-acceptance":
        assert engine.stats.tau > 1.5


def test_sampled_tokens_get_the_raw_logprob_of_the_row_they_came_from(tiny_target, engines):
    engine = engines["dflash"]()
    reqs = engine.generate(_reqs(temperature=1.0, n=0))
    for p, r in zip(PROMPTS, reqs, strict=True):
        chosen, _ = _full_forward_logprobs(tiny_target.model, p, r.output_ids)
        torch.testing.assert_close(torch.tensor([lp for lp, _ in r.logprobs]), chosen, atol=1e-4, rtol=0)
        assert all(top == [] for _, top in r.logprobs)


def test_no_logprobs_unless_asked(tiny_target):
    r = build_engine(tiny_target).generate([Request([5, 6], SamplingParams(max_tokens=4))])[0]
    assert r.logprobs == []
    with pytest.raises(ValueError, match="logprobs"):
        SamplingParams(logprobs=-1).validate()


def test_stop_token_ids_end_the_request_like_eos(tiny_target):
    free = build_engine(tiny_target).generate([Request([5, 6], SamplingParams(max_tokens=12))])[0].output_ids
    stop_at = free[4]
    first = free.index(stop_at)
    r = build_engine(tiny_target).generate([Request([5, 6], SamplingParams(max_tokens=12, stop_token_ids=[stop_at]))])[
        0
    ]
    assert r.output_ids == free[: first + 1] and r.finish_reason == "stop"
    assert r.text(tiny_target.tokenizer.decode) == tiny_target.tokenizer.decode(free[:first])
