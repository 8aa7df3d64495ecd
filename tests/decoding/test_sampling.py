import pytest
import torch

from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams, make_generator, sample_from, target_probs


def test_target_probs_temperature_topk_topp():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    p = target_probs(logits, SamplingParams(temperature=1.0))
    torch.testing.assert_close(p, torch.softmax(logits, -1))
    p = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    torch.testing.assert_close(p, torch.tensor([0.7310586, 0.2689414, 0.0, 0.0]))
    full = torch.softmax(logits, -1)  # [0.644, 0.237, 0.087, 0.032]
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.85))
    torch.testing.assert_close(p, torch.cat([full[:2] / full[:2].sum(), torch.zeros(2)]))
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.1))  # first token always kept
    torch.testing.assert_close(p, torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_sample_from_matches_distribution():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    g = make_generator(0)
    counts = torch.bincount(torch.tensor([sample_from(probs, g) for _ in range(4000)]), minlength=4)
    assert counts[1] == 0
    assert torch.allclose(counts.float() / 4000, probs, atol=0.03)


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(temperature=-1.0), dict(top_p=0.0), dict(top_k=-2)])
def test_params_validation(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad).validate()


def test_request_commit_rules():
    r = Request([5], SamplingParams(max_tokens=3), eos_ids=frozenset({0}))
    assert r.commit([7, 8, 9, 10]) == 3 and r.finish_reason == "length"
    r = Request([5], SamplingParams(max_tokens=10), eos_ids=frozenset({0}))
    assert r.commit([7, 0, 9]) == 2 and r.finish_reason == "stop"
    r = Request([5], SamplingParams(max_tokens=10, min_tokens=3), eos_ids=frozenset({0}))
    assert r.commit([0, 0, 7]) == 3 and not r.finished
    r = Request([5], SamplingParams(max_tokens=10, ignore_eos=True), eos_ids=frozenset({0}))
    assert r.commit([0, 0]) == 2 and not r.finished
    words = {1: "ab", 2: "c\n", 3: "zz"}
    decode = lambda ids: "".join(words[i] for i in ids)  # noqa: E731
    r = Request([5], SamplingParams(max_tokens=10, stop=["c\nz"]))
    assert r.commit([1, 2, 3, 1], decode) == 3 and r.text(decode) == "ab"
    with pytest.raises(ValueError, match="at least one token"):
        Request([], SamplingParams())


def test_inverse_cdf_is_the_one_sampling_rule():
    from lilicorr.decoding.sampling import inverse_cdf

    probs = torch.tensor([[0.2, 0.0, 0.5, 0.3], [1.0, 1.0, 1.0, 1.0]])  # second row unnormalised
    u = torch.tensor([[0.0, 0.19, 0.2, 0.69, 0.7, 0.999], [0.0, 0.24, 0.25, 0.5, 0.74, 0.99]])
    got = inverse_cdf(probs[:, None, :].expand(2, 6, 4), u)
    assert got.tolist() == [[0, 0, 2, 2, 3, 3], [0, 0, 1, 2, 2, 3]]  # a zero-mass token is never drawn
    assert inverse_cdf(torch.tensor([0.0, 0.0, 1.0]), torch.tensor(0.9999)).item() == 2
