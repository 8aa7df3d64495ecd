"""DDTree: tree construction, one-pass tree scoring, and exact losslessness."""

import pytest
import torch

from lilicorr.decoding.build import build_engine
from lilicorr.decoding.config import SpecConfig
from lilicorr.decoding.methods.trees import tree_proposal
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.decoding.tree import build_tree
from tests.decoding.engine_helpers import random_draft
from tests.decoding.test_engine_greedy import _greedy_no_cache, _prompts, _requests
from tests.decoding.test_engine_sampling import ALPHA, exact_distribution, p_value, sample_counts


def test_build_tree_is_best_first_and_prefix_closed():
    logits = torch.log(torch.tensor([[[0.6, 0.3, 0.1], [0.9, 0.05, 0.05]]]))  # [1, n=2, V=3]
    tree = build_tree(logits, torch.tensor([7]), budget=4, topk=2)
    # Scores: a=0.6, b=0.3, a→a 0.54, a→b 0.03, b→a 0.27: best three after the root: a, a→a, b.
    assert tree.tokens[0].tolist() == [7, 0, 0, 1]
    assert tree.parents[0].tolist() == [-1, 0, 1, 0]
    assert tree.depth[0].tolist() == [0, 1, 2, 1]
    anc = tree_proposal(tree).ancestors()[0]
    assert anc[2].tolist() == [True, True, True, False] and anc[3].tolist() == [True, False, False, True]


def test_tree_forward_scores_each_node_on_its_own_path(tiny_target):
    prompt = _prompts(1)[0]
    logits = torch.randn(1, 3, tiny_target.vocab_size)
    tree = build_tree(logits, torch.tensor([11]), budget=6, topk=2)
    state = tiny_target.new_state(1)
    tiny_target.forward(state, torch.tensor([prompt]))
    prop = tree_proposal(tree)
    assert torch.equal(prop.depth(), tree.depth)
    out = tiny_target.forward_tree(state, tree.tokens, tree.depth, prop.ancestors())
    for i in range(6):
        path, j = [], i
        while j >= 0:
            path.append(int(tree.tokens[0, j]))
            j = int(tree.parents[0, j])
        ref = tiny_target.model(input_ids=torch.tensor([prompt + path[::-1]])).logits[0, -1]
        torch.testing.assert_close(out.logits[0, i], ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("budget", [2, 8])
def test_ddtree_greedy_identity(tiny_target, batch, budget):
    prompts = _prompts(16)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    cfg = SpecConfig(method="ddtree", num_speculative_tokens=3, options={"tree_budget": budget, "tree_topk": 3})
    engine = build_engine(tiny_target, cfg, random_draft(tiny_target, lilicorr=False))
    reqs = _requests(prompts)
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == ref
    assert engine.stats.num_draft_tokens == engine.stats.num_drafts * (budget - 1)


def test_lattice_tree_follows_the_heads_conditionals():
    from lilicorr.decoding.tree import build_lattice_tree
    from lilicorr.models.head import HeadScores

    ids = torch.tensor([[[10, 11], [20, 21]]])  # [1, n=2, K=2]
    flat = torch.zeros(1, 2, 2)  # equal drafter marginals: the head alone orders the tree
    start = torch.log(torch.tensor([[0.6, 0.4]]))
    # after cand 0 (token 10) the head prefers cand 1 (21); after cand 1 (token 11) cand 0 (20)
    pair = torch.log(torch.tensor([[[[0.1, 0.9], [0.8, 0.2]]]]))
    tree = build_lattice_tree(ids, flat, HeadScores(start=start, pair=pair), torch.tensor([7]), budget=4)
    # scores: 10 (.6), 10→21 (.54), 11 (.4), 11→20 (.32), 10→20 (.06): best three after the root
    assert tree.tokens[0].tolist() == [7, 10, 21, 11]
    assert tree.parents[0].tolist() == [-1, 0, 1, 0]
    torch.testing.assert_close(tree.score[0].exp(), torch.tensor([1.0, 0.6, 0.54, 0.4]))
    # with independent marginals (DDTree) the second level would prefer the same token for both parents
    tree5 = build_lattice_tree(ids, flat, HeadScores(start=start, pair=pair), torch.tensor([7]), budget=5)
    assert tree5.tokens[0].tolist() == [7, 10, 21, 11, 20] and tree5.parents[0].tolist() == [-1, 0, 1, 0, 3]


def test_lattice_tree_weighs_the_head_by_the_drafters_marginals():
    """A path's score is the drafter's log-probs plus the head's conditional log-probs."""
    from lilicorr.decoding.tree import build_lattice_tree
    from lilicorr.models.head import HeadScores

    ids = torch.tensor([[[10, 11], [20, 21]]])
    start = torch.log(torch.tensor([[0.6, 0.4]]))
    pair = torch.log(torch.tensor([[[[0.1, 0.9], [0.8, 0.2]]]]))
    lp = torch.log(torch.tensor([[[0.2, 0.8], [0.5, 0.5]]]))  # the drafter is sure of 11 at slot 1
    tree = build_lattice_tree(ids, lp, HeadScores(start=start, pair=pair), torch.tensor([7]), budget=3)
    # 11: .4 × .8 = .32 beats 10: .6 × .2 = .12; then 11→20: .32 × .8 × .5 = .128 beats 10 (.12)
    assert tree.tokens[0].tolist() == [7, 11, 20] and tree.parents[0].tolist() == [-1, 0, 1]
    torch.testing.assert_close(tree.score[0].exp(), torch.tensor([1.0, 0.32, 0.128]))


def test_tree_prefix_is_a_tree():
    tree = build_tree(torch.randn(2, 3, 50), torch.tensor([7, 8]), budget=9, topk=3)
    prop = tree_proposal(tree)
    assert (tree.score[:, 1:].diff(dim=1) <= 1e-6).all()  # best-first: scores never rise
    small = prop.prefix(4)
    assert small.is_tree and small.tokens.shape == (2, 4)
    assert (small.parents <= torch.arange(4)).all()  # every parent is the pending token or an earlier node
    assert torch.equal(small.ancestors(), prop.ancestors()[:, :5, :5])


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("budget", [2, 9])
def test_lattice_tree_greedy_identity(tiny_target, batch, budget):
    prompts = _prompts(16)
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    cfg = SpecConfig(method="lilicorr-tree", options={"tree_budget": budget})
    engine = build_engine(tiny_target, cfg, random_draft(tiny_target, lilicorr=True))
    assert engine.method == "lilicorr-tree"
    reqs = _requests(prompts)
    for i in range(0, len(reqs), batch):
        engine.generate(reqs[i : i + batch])
    assert [r.output_ids for r in reqs] == ref
    assert engine.stats.num_draft_tokens == engine.stats.num_drafts * (budget - 1)


def test_lattice_tree_needs_a_lilicorr_checkpoint(tiny_target):
    with pytest.raises(ValueError, match="LiLiCorrDraftModel"):
        build_engine(tiny_target, SpecConfig(method="lilicorr-tree"), random_draft(tiny_target, lilicorr=False))


@pytest.mark.parametrize("lookup", [0, 2])
@pytest.mark.parametrize("method", ["ddtree", "lilicorr-tree"])
def test_tree_sampling_matches_target(small_vocab_target, method, lookup):
    draft = random_draft(small_vocab_target, lilicorr=method == "lilicorr-tree", block=4, k=4)
    options = {"tree_budget": 6, "prompt_lookup_max": lookup, "prompt_lookup_min": 1}
    options.update({"tree_topk": 3} if method == "ddtree" else {})
    cfg = SpecConfig(method=method, num_speculative_tokens=2, options=options)
    counts, engine = sample_counts(small_vocab_target, draft, cfg, {"temperature": 1.0})
    assert p_value(counts, exact_distribution(small_vocab_target, SamplingParams(temperature=1.0))) > ALPHA
    assert engine.stats.num_accepted_tokens > 0


def test_graft_chain_merges_a_lookup_branch():
    from lilicorr.decoding.tree import graft_chain

    # tree: root → 5 (−0.1) → 6 (−0.3); root → 7 (−0.5)
    nodes = [(5, 0, 1, -0.1), (6, 1, 2, -0.3), (7, 0, 1, -0.5)]
    # the chain 5 → 9 → 4 shares the first node, then branches off; budget 5 keeps 4 nodes
    got = graft_chain(nodes, [5, 9, 4], budget=5)
    assert got == [(5, 0, 1, 0.0), (9, 1, 2, 0.0), (4, 2, 3, 0.0), (6, 1, 2, -0.3)]
    assert graft_chain(nodes, None, budget=5) == nodes
    # every parent precedes its child
    for i, (_, par, depth, _) in enumerate(got, start=1):
        assert par < i and (par == 0 or got[par - 1][2] == depth - 1)


@pytest.mark.parametrize("method", ["ddtree", "lilicorr-tree"])
def test_trees_with_prompt_lookup_greedy_identity(tiny_target, method):
    """A grafted prompt-lookup branch (prompts that repeat themselves, so it matches) keeps the output the
    target's own, and the branch is really in the verified trees."""
    prompts = [p * 3 for p in _prompts(8)]
    ref = [_greedy_no_cache(tiny_target.model, p, 20) for p in prompts]
    options = {"tree_budget": 8, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    engine = build_engine(
        tiny_target, SpecConfig(method=method, options=options), random_draft(tiny_target, lilicorr=True)
    )
    assert engine.proposer.lookup == (3, 1)
    grafted = []
    plain = engine.proposer.chains
    engine.proposer.chains = lambda d: grafted.append(plain(d)) or grafted[-1]
    reqs = _requests(prompts)
    for i in range(0, len(reqs), 4):
        engine.generate(reqs[i : i + 4])
    assert [r.output_ids for r in reqs] == ref
    assert any(c for step in grafted for c in step)  # some steps carried a lookup branch


def test_prompt_lookup_options_are_checked(tiny_target):
    draft = random_draft(tiny_target, lilicorr=False)
    off = build_engine(tiny_target, SpecConfig(method="ddtree", options={"tree_budget": 4}), draft)
    assert off.proposer.lookup is None  # off by default: 0
    with pytest.raises(ValueError, match="prompt_lookup_min <= prompt_lookup_max"):
        build_engine(
            tiny_target, SpecConfig(method="ddtree", options={"prompt_lookup_max": 1, "prompt_lookup_min": 3}), draft
        )
    with pytest.raises(ValueError, match="integer >= 0"):
        build_engine(tiny_target, SpecConfig(method="ddtree", options={"prompt_lookup_max": -1}), draft)
