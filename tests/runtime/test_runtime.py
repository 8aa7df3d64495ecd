import json
import shutil

import pytest
import torch

from lilicorr.runtime.runtime import TargetError, TargetRuntime


def _full_forward(rt, ids):
    out = rt.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return out.logits[0].float(), out.hidden_states


def _prompt(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 500, (n,), generator=g).tolist()


def test_taps_equal_full_forward_hidden_states(tiny_target):
    ids = _prompt(12)
    logits, hs = _full_forward(tiny_target, ids)
    state = tiny_target.new_state(1)
    out = tiny_target.forward(state, torch.tensor([ids]))
    want = torch.cat([hs[1], hs[3]], dim=-1)[0]  # layer ids (0, 2) -> hidden_states[1], [3]
    assert out.taps.shape == (1, 12, 2 * 64)
    torch.testing.assert_close(out.taps[0], want, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.logits[0], logits, atol=1e-5, rtol=0)


def test_incremental_equals_full_forward(tiny_target):
    ids = _prompt(20, seed=1)
    logits, _ = _full_forward(tiny_target, ids)
    state = tiny_target.new_state(1)
    chunks = [ids[:7], ids[7:8], ids[8:15], ids[15:]]
    got = [tiny_target.forward(state, torch.tensor([c])).logits[0] for c in chunks]
    torch.testing.assert_close(torch.cat(got), logits, atol=1e-5, rtol=0)
    assert state.lengths.tolist() == [20]


def test_truncate_then_continue_equals_fresh(tiny_target):
    ids = _prompt(16, seed=2)
    state = tiny_target.new_state(1)
    tiny_target.forward(state, torch.tensor([ids[:10]]))
    tiny_target.forward(state, torch.tensor([[7, 8, 9, 10, 11]]))  # a rejected draft block
    tiny_target.truncate(state, torch.tensor([10]))
    out = tiny_target.forward(state, torch.tensor([ids[10:]]))
    logits, _ = _full_forward(tiny_target, ids)
    torch.testing.assert_close(out.logits[0], logits[10:], atol=1e-5, rtol=0)


def test_tree_step_keeps_its_path_without_holes(tiny_target):
    """A tree of 5 nodes (root, two children, a grandchild under each): keeping the path root → child 2 →
    its grandchild leaves a batch-1 cache with no holes (attention stays unmasked), and continuing from it
    equals a fresh forward of the prompt and the path."""
    ids = _prompt(16, seed=3)
    state = tiny_target.new_state(1)
    tiny_target.forward(state, torch.tensor([ids[:10]]))
    tokens = torch.tensor([[ids[10], 5, ids[11], 6, ids[12]]])  # nodes 0..4: 1 and 2 under 0, 3 under 1, 4 under 2
    depth = torch.tensor([[0, 1, 1, 2, 2]])
    parent = [None, 0, 0, 1, 2]
    anc = torch.zeros(1, 5, 5, dtype=torch.bool)
    for i in range(5):
        j = i
        while j is not None:
            anc[0, i, j] = True
            j = parent[j]
    tiny_target.forward_tree(state, tokens, depth, anc)
    tiny_target.keep_new(state, torch.tensor([[True, False, True, False, True]]))
    assert state.lengths.tolist() == [13] and bool(state.valid.all()) and state.valid.shape[1] == 13
    out = tiny_target.forward(state, torch.tensor([ids[13:]]))
    logits, _ = _full_forward(tiny_target, ids)
    torch.testing.assert_close(out.logits[0], logits[13:], atol=1e-5, rtol=0)


def test_tree_path_that_is_a_prefix_of_the_nodes_stays_in_place(tiny_target):
    """Two rows: one keeps nodes 0, 1, 3 (a prefix after reordering: the general move), the other nodes 0, 1
    (already first: kept in place, no gather); both continue as fresh forwards of their paths."""
    ids = [_prompt(16, seed=s) for s in (4, 5)]
    state = tiny_target.new_state(2)
    tiny_target.forward(state, torch.tensor([i[:10] for i in ids]))
    tokens = torch.tensor([[i[10], i[11], 7, i[12]] for i in ids])  # node 1 under 0, 2 under 0, 3 under 1
    depth = torch.tensor([[0, 1, 1, 2]] * 2)
    parent = [None, 0, 0, 1]
    anc = torch.zeros(2, 4, 4, dtype=torch.bool)
    for i in range(4):
        j = i
        while j is not None:
            anc[:, i, j] = True
            j = parent[j]
    tiny_target.forward_tree(state, tokens, depth, anc)
    for keep in ([[True, True, False, False]] * 2, [[True, True, False, True], [True, True, False, False]]):
        s = tiny_target.new_state(2)
        tiny_target.forward(s, torch.tensor([i[:10] for i in ids]))
        tiny_target.forward_tree(s, tokens, depth, anc)
        kept = torch.tensor(keep)
        tiny_target.keep_new(s, kept)
        assert s.lengths.tolist() == (10 + kept.sum(1)).tolist()
        for row, i in enumerate(ids):
            n = int(s.lengths[row])
            one = tiny_target.new_state(1)
            tiny_target.forward(one, torch.tensor([i[:n]]))
            for layer, ref in zip(s.cache.layers, one.cache.layers, strict=True):
                live = s.valid[row]
                torch.testing.assert_close(layer.keys[row][:, live], ref.keys[0], atol=1e-5, rtol=0)
                torch.testing.assert_close(layer.values[row][:, live], ref.values[0], atol=1e-5, rtol=0)


def test_batch_of_different_lengths_equals_single_runs(tiny_target):
    prompts = [_prompt(n, seed=n) for n in (5, 13, 9)]
    conts = [_prompt(4, seed=100 + i) for i in range(3)]
    state = tiny_target.new_state(3)
    n = max(map(len, prompts))
    ids = torch.zeros(3, n, dtype=torch.long)
    mask = torch.zeros(3, n, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = True
    first = tiny_target.forward(state, ids, mask)
    second = tiny_target.forward(state, torch.tensor(conts))
    # Per-row holes: keep a different number of the continuation per row, then continue again.
    keep = torch.tensor([len(prompts[0]) + 1, len(prompts[1]) + 4, len(prompts[2])])
    tiny_target.truncate(state, keep)
    third = tiny_target.forward(state, torch.tensor([[42], [43], [44]]))
    for i, p in enumerate(prompts):
        full_ids = p + conts[i]
        logits, hs = _full_forward(tiny_target, full_ids)
        torch.testing.assert_close(first.logits[i, : len(p)], logits[: len(p)], atol=1e-5, rtol=0)
        torch.testing.assert_close(second.logits[i], logits[len(p) :], atol=1e-5, rtol=0)
        torch.testing.assert_close(second.taps[i], torch.cat([hs[1], hs[3]], -1)[0, len(p) :], atol=1e-5, rtol=0)
        kept = full_ids[: int(keep[i])] + [42 + i]
        logits3, _ = _full_forward(tiny_target, kept)
        torch.testing.assert_close(third.logits[i, 0], logits3[-1], atol=1e-5, rtol=0)


def test_compact_and_select_rows_preserve_outputs(tiny_target):
    prompts = [_prompt(6, seed=5), _prompt(11, seed=6)]
    state = tiny_target.new_state(2)
    ids = torch.zeros(2, 11, dtype=torch.long)
    mask = torch.zeros(2, 11, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = True
    tiny_target.forward(state, ids, mask)
    tiny_target.forward(state, torch.tensor([[5, 6, 7], [8, 9, 10]]))
    tiny_target.truncate(state, torch.tensor([7, 11]))  # row 0 keeps one, row 1 none
    tiny_target.compact(state)
    assert state.valid.shape[1] == 11 and state.valid.sum().item() == 18
    out = tiny_target.forward(state, torch.tensor([[20], [21]]))
    logits0, _ = _full_forward(tiny_target, prompts[0] + [5, 20])
    logits1, _ = _full_forward(tiny_target, prompts[1] + [21])
    torch.testing.assert_close(out.logits[0, 0], logits0[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.logits[1, 0], logits1[-1], atol=1e-5, rtol=0)
    tiny_target.select_rows(state, torch.tensor([1]))
    out = tiny_target.forward(state, torch.tensor([[22]]))
    logits1, _ = _full_forward(tiny_target, prompts[1] + [21, 22])
    torch.testing.assert_close(out.logits[0, 0], logits1[-1], atol=1e-5, rtol=0)


def test_select_rows_moving_a_row_in_place_preserves_outputs(tiny_target):
    prompts = [_prompt(n, seed=20 + n) for n in (5, 9, 7)]
    state = tiny_target.new_state(3)
    ids, mask = torch.zeros(3, 9, dtype=torch.long), torch.zeros(3, 9, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, : len(p)], mask[i, : len(p)] = torch.tensor(p), True
    tiny_target.forward(state, ids, mask)
    buf = state.cache.layers[0]._buf["keys"].data_ptr()
    tiny_target.select_rows(state, torch.tensor([2, 1]))  # row 0 leaves, row 2 takes its slot (in place)
    assert state.cache.layers[0]._buf["keys"].data_ptr() == buf and state.lengths.tolist() == [7, 9]
    out = tiny_target.forward(state, torch.tensor([[40], [41]]))
    for row, (p, tok) in enumerate(((prompts[2], 40), (prompts[1], 41))):
        logits, _ = _full_forward(tiny_target, p + [tok])
        torch.testing.assert_close(out.logits[row, 0], logits[-1], atol=1e-5, rtol=0)


def test_embedding_and_head_exposed(tiny_target):
    assert tiny_target.embed_tokens.weight.shape == (tiny_target.vocab_size, 64)
    h = torch.randn(2, 64)
    assert tiny_target.lm_head(h).shape == (2, tiny_target.vocab_size)
    assert 0 in tiny_target.eos_token_ids


def test_layer_ids_out_of_range(tiny_target_dir):
    with pytest.raises(TargetError, match=r"\[3\] out of range .* 3 layers"):
        TargetRuntime.load(tiny_target_dir, layer_ids=(0, 3))


def test_not_a_causal_lm(tmp_path, tiny_target_dir):
    with pytest.raises(TargetError, match="not a directory"):
        TargetRuntime.load(tmp_path / "nope")
    with pytest.raises(TargetError, match="config.json not found"):
        TargetRuntime.load(tmp_path)
    bad = tmp_path / "bert"
    shutil.copytree(tiny_target_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["architectures"] = ["BertModel"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TargetError, match="'architectures' = \\['BertModel'\\]"):
        TargetRuntime.load(bad)


def test_missing_tokenizer(tmp_path, tiny_target_dir):
    d = tmp_path / "notok"
    shutil.copytree(tiny_target_dir, d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(TargetError, match="no tokenizer"):
        TargetRuntime.load(d)


def test_concat_states_joins_running_batch(tiny_target):
    pa, pb = _prompt(9, seed=11), _prompt(4, seed=12)
    sa, sb = tiny_target.new_state(1), tiny_target.new_state(1)
    tiny_target.forward(sa, torch.tensor([pa]))
    tiny_target.forward(sb, torch.tensor([pb]))
    state = tiny_target.concat_states(sa, sb)
    out = tiny_target.forward(state, torch.tensor([[30], [31]]))
    la, _ = _full_forward(tiny_target, pa + [30])
    lb, _ = _full_forward(tiny_target, pb + [31])
    torch.testing.assert_close(out.logits[0, 0], la[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.logits[1, 0], lb[-1], atol=1e-5, rtol=0)
    assert state.lengths.tolist() == [10, 5]
