"""The one-thread rule for small target passes (``runtime/threads.py``): when it applies, that it restores the
thread count, and that a target pass under it computes what it computes on the configured threads."""

import pytest
import torch

from lilicorr.runtime import threads


@pytest.fixture
def two_threads(monkeypatch):
    """Two torch threads with OpenMP's threads asleep (PASSIVE, no spin), the rule on."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv(threads.ENV, raising=False)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("policy", "spin", "asleep"),
    [("PASSIVE", None, True), ("passive", "0", True), ("PASSIVE", "10000", False), (None, None, False),
     ("ACTIVE", None, False)],
)  # fmt: skip
def test_sleeping_openmp_reads_the_wait_policy_and_spin(monkeypatch, policy, spin, asleep):
    for name, value in (("OMP_WAIT_POLICY", policy), ("GOMP_SPINCOUNT", spin)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert threads.sleeping_openmp() is asleep


@pytest.mark.parametrize(
    ("batch", "tokens", "one"),
    [(1, 1, True), (2, 1, True), (2, 18, True), (1, 36, True), (3, 1, False), (8, 1, False), (1, 37, False),
     (2, 19, False), (1, 256, False)],
)  # fmt: skip
def test_rule_picks_one_thread_for_small_passes_only(two_threads, batch, tokens, one):
    assert threads.one_thread_for(batch, tokens) is one


def test_rule_is_off_with_the_spin_one_thread_or_the_switch(two_threads, monkeypatch):
    assert threads.one_thread_for(1, 1)
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    assert not threads.one_thread_for(1, 1)  # the second thread stays awake: two threads win
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv(threads.ENV, "0")
    assert not threads.one_thread_for(1, 1)
    monkeypatch.delenv(threads.ENV)
    torch.set_num_threads(1)
    assert not threads.one_thread_for(1, 1)  # nothing to take away


def test_step_threads_restores_the_count_after_an_error(two_threads):
    with pytest.raises(RuntimeError), threads.step_threads(1, 1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("inside the pass")
    assert torch.get_num_threads() == 2
    with threads.step_threads(16, 1):
        assert torch.get_num_threads() == 2  # a large pass keeps the configured threads


def test_target_pass_on_one_thread_matches_the_configured_threads(two_threads, tiny_target, monkeypatch):
    """The rule changes where the work runs, not what a pass returns: a plain step's logits with the rule on
    and off agree (fp32, up to the summation order of two threads)."""
    ids = torch.tensor([[5, 9, 2, 7, 3, 11]])
    assert threads.one_thread_for(1, 1)
    got = {}
    for on in ("1", "0"):
        monkeypatch.setenv(threads.ENV, on)
        state = tiny_target.new_state(1)
        tiny_target.forward(state, ids[:, :-1], want_taps=False)
        got[on] = tiny_target.forward(state, ids[:, -1:], want_taps=False).logits
    torch.testing.assert_close(got["1"], got["0"], rtol=1e-5, atol=1e-5)


def test_the_lm_head_of_a_one_thread_pass_runs_on_the_threads_set_aside(two_threads, tiny_target, monkeypatch):
    seen = []
    head = tiny_target.model.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda m, a: seen.append(torch.get_num_threads()))  # after the runtime's
    layer = tiny_target.model.model.layers[0]
    first = layer.register_forward_pre_hook(lambda m, a: seen.append(-torch.get_num_threads()))
    try:
        state = tiny_target.new_state(1)
        tiny_target.forward(state, torch.tensor([[5, 9]]), want_taps=False)
        assert seen == [-1, 2] and torch.get_num_threads() == 2  # the layers on one thread, the head on two
        seen.clear()
        head(torch.zeros(1, head.in_features))  # outside a pass (the drafter's use of the head): left alone
        assert seen == [2] and torch.get_num_threads() == 2
    finally:
        handle.remove()
        first.remove()
