"""The load policy's predictions against what its steps delivered, per batch size and action (draft or plain).

Why: under load a speculative server can lose to plain serving although its policy predicts a gain each step
(docs/results/smollm2-serving-notes.md: the chain at c=4). The engine alone, the policy as `lilicorr serve` runs
it, ShareGPT first turns at mixed temperatures (0, 0.7, 1 in turn) with staggered lengths, requests joining as
others finish so the batch moves between 1 and ``--max-batch``. For each (batch size, action): steps, the plans'
predicted tokens/s (time-weighted), the tokens/s the steps delivered, and ms a step; at the end the policy's cost
pieces per batch size (start-up curve, its measured scale, overheads).

    python benchmarks/policy_outcomes.py --draft models/smollm2-lilicorr --requests 24 --max-batch 4

``--regimes R``: then R rounds of the same requests served four ways — the policy, every step plain, every step
drafting (the plan the policy would pick before its "plain is better" rules), and an engine without a drafter
(what a plain server runs: the gap to "every step plain" is the drafter's bookkeeping on plain steps) — each
round's tokens/s of the whole run (prefills included), the order rotated each round so a drift or a warm-up
does not favour one regime: does the policy beat both fixed regimes at this load?

    python benchmarks/policy_outcomes.py --draft models/smollm2-lilicorr-conv --method default --requests 64 \
        --max-batch 32 --regimes 2

``--temperatures T …``: the requests' temperatures, in turn (default 0 0.7 1); one value serves a single class, so
at ``--max-batch 1`` each regime's tokens/s is that class's alone (session 38: the batch-1 policy against drafting
every step, greedy and T = 0.7 apart).

``--join-lag L``: a finished request's slot takes the next request L steps later, as behind a server, whose client
sends its next request after the last chunk: the batch then runs a row short for a step after each finish (with
``--max-batch 8 --join-lag 1`` this reproduced the serving page's c=8 loss, session 37).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import torch

from lilicorr.decoding.build import engine_from_speculative_config
from lilicorr.decoding.policy import StepPlan, plan_step
from lilicorr.decoding.request import Request
from lilicorr.decoding.sampling import SamplingParams
from lilicorr.runtime.dtype import resolve_dtype
from lilicorr.runtime.runtime import TargetRuntime

TEMPERATURES = (0.0, 0.7, 1.0)


def prompt_ids(target: TargetRuntime, path: str, start: int, n: int) -> list[list[int]]:
    with open(path) as f:
        rows = [json.loads(line)["messages"][0]["content"] for line in f][start : start + n]
    out = []
    for text in rows:
        chat = [{"role": "user", "content": text[:600]}]
        ids = target.tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        out.append(list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids))
    return out


def predicted_tokens(engine) -> Callable[[], float | None]:
    """Wrap the policy's ``plan`` so each drafting plan's predicted tokens (b + Σ E_i(W) of its rows) are kept:
    the plan's value is tokens over time, so this splits a shortfall into acceptance and time."""
    policy, plan = engine.policy, engine.policy.plan
    last: list[float | None] = [None]

    def planned(rows):
        gains = policy.gains(rows)  # [b, n + 1]: the same state the plan reads
        p = plan(rows)
        last[0] = len(rows) + float(gains[p.rows, p.width].sum()) if p.width else None
        return p

    policy.plan = planned
    return lambda: last[0]


def drive(
    engine,
    prompts: list[list[int]],
    max_batch: int,
    log: list | None,
    planned=lambda: None,
    join_lag: int = 0,
    temperatures: tuple[float, ...] = TEMPERATURES,
) -> int:
    """Keep ``max_batch`` requests running until every prompt is served; a finished one is replaced ``join_lag``
    steps later (0: at once; a server's client sends its next request only after the last chunk, so there the
    batch runs one row short for a step or more after each finish)."""
    temp = [temperatures[i % len(temperatures)] for i in range(len(prompts))]
    params = [SamplingParams(max_tokens=24 + 12 * (i % 4), temperature=t, seed=i) for i, t in enumerate(temp)]
    reqs = [Request(p, s) for p, s in zip(prompts, params, strict=True)]
    queue = list(reqs)
    free = [0] * max_batch  # per free slot: steps until it takes the next request
    while queue or engine.seqs:
        for _ in [f for f in free if f <= 0]:
            if queue:
                engine.add([queue.pop(0)])
        free = [f - 1 for f in free if f > 0]
        batch, before = len(engine.seqs), sum(len(r.output_ids) for r in reqs)
        t0 = time.perf_counter()
        engine.step()
        seconds = time.perf_counter() - t0
        free += [join_lag] * (batch - len(engine.seqs))  # the finished rows' slots
        plan = engine.policy.last if engine.policy is not None else None
        if log is not None and plan is not None:
            log.append((batch, plan.width > 0, plan.value if plan.width else plan.plain_value, seconds,
                        sum(len(r.output_ids) for r in reqs) - before, planned(), plan.reason))  # fmt: skip
    return sum(len(r.output_ids) for r in reqs)


def regimes(
    engine,
    prompts: list[list[int]],
    max_batch: int,
    rounds: int,
    join_lag: int = 0,
    temperatures: tuple[float, ...] = TEMPERATURES,
    bare=None,
) -> None:
    """The policy against its two fixed regimes on the same requests, and against ``bare`` (an engine on the same
    target without a drafter) when given; the order rotates each round."""
    policy = engine.policy
    as_planned = policy.plan

    def plain(rows):
        policy.last = StepPlan(len(rows), 0, [], 0.0, 0.0)
        return policy.last

    def draft(rows):
        extra = [policy.extra_draft(k) for k in range(1, len(rows) + 1)]
        policy.last = plan_step(policy.gains(rows), policy.verify_cost, extra, policy.extra_plain(len(rows)), -1.0)
        return policy.last

    ways = [("policy", engine, as_planned), ("all plain", engine, plain), ("all drafting", engine, draft)]
    ways += [("no drafter", bare, None)] if bare is not None else []
    for r in range(rounds):
        done = {}
        for name, eng, plan in ways[r % len(ways) :] + ways[: r % len(ways)]:
            if plan is not None:
                policy.plan = plan
            t0 = time.perf_counter()
            log: list = []
            tokens = drive(eng, prompts, max_batch, log, join_lag=join_lag, temperatures=temperatures)
            drafted = sum(1 for x in log if x[1]) / max(len(log), 1)
            done[name] = f"{name} {tokens / (time.perf_counter() - t0):.1f} tokens/s ({drafted:.0%} steps drafting)"
        policy.plan = as_planned
        print(f"round {r + 1}: " + "; ".join(done[name] for name, _, _ in ways), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="models/smollm2-135m-instruct")
    ap.add_argument("--draft", default="models/smollm2-lilicorr")
    ap.add_argument("--prompts", default="data/prompts/sharegpt.jsonl")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--method", default=None, help="speculative config method (e.g. default: the tree default)")
    ap.add_argument("--regimes", type=int, default=0, help="rounds of policy vs all plain vs all drafting")
    ap.add_argument("--join-lag", type=int, default=0, help="steps before a finished request's slot is refilled")
    ap.add_argument("--temperatures", type=float, nargs="+", default=list(TEMPERATURES), help="in turn, by request")
    args = ap.parse_args()
    temps = tuple(args.temperatures)
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype)
    target = TargetRuntime.load(args.target, dtype=dtype)
    spec = {"model": args.draft, **({"method": args.method} if args.method else {})}
    engine = engine_from_speculative_config(target, spec, dtype)
    policy = engine.use_load_policy()
    assert policy is not None, f"{args.draft}: no load policy for this configuration"
    planned = predicted_tokens(engine)
    drive(engine, prompt_ids(target, args.prompts, 200, 8), args.max_batch, None, temperatures=temps)  # warm-up
    log: list = []
    served = prompt_ids(target, args.prompts, 208, args.requests)
    drive(engine, served, args.max_batch, log, planned, args.join_lag, temps)
    print(f"{args.target} + {args.draft}, {dtype}, {args.requests} requests at T {temps}, batch ≤ {args.max_batch}")
    by = defaultdict(list)
    why: dict[int, Counter] = defaultdict(Counter)  # batch → plain steps by reason (``StepPlan.reason``)
    for batch, drafting, predicted, seconds, tokens, step_tokens, reason in log:
        by[(batch, drafting)].append((predicted, seconds, tokens, step_tokens))
        if not drafting:
            why[batch][reason] += 1
    for (batch, drafting), xs in sorted(by.items()):
        secs = sum(x[1] for x in xs)
        split = ""
        if drafting:  # predicted tokens and time a step (time = tokens / value) against what it took
            tok, ms = sum(x[3] for x in xs) / len(xs), 1000 * sum(x[3] / x[0] for x in xs) / len(xs)
            split = f"; a step: {tok:.2f} tokens in {ms:.1f} ms predicted, {sum(x[2] for x in xs) / len(xs):.2f} got"
        if not drafting:
            split = " (why: " + ", ".join(f"{r} {c}" for r, c in why[batch].most_common()) + ")"
        print(f"batch {batch} {'draft' if drafting else 'plain'}: {len(xs)} steps, predicted "
              f"{sum(x[0] * x[1] for x in xs) / secs:.1f} tokens/s, delivered {sum(x[2] for x in xs) / secs:.1f}, "
              f"{1000 * secs / len(xs):.1f} ms a step{split}")  # fmt: skip
    for b in sorted({k[0] for k in by}):
        print(f"b={b}: curve plain {1000 * policy.cost(b, 1):.1f} ms × scale {policy.verify_scale(b, False):.2f}, "
              f"overhead plain {1000 * policy.extra_plain(b):.1f} ms, drafting (all rows) "
              f"{1000 * policy.extra_draft(b):.1f} ms")  # fmt: skip
    if args.regimes:
        bare = engine_from_speculative_config(target, None, dtype)  # the same target, no drafter: a plain server's
        drive(bare, prompt_ids(target, args.prompts, 200, 8), args.max_batch, None, temperatures=temps)  # warm-up
        regimes(engine, served, args.max_batch, args.regimes, args.join_lag, temps, bare)


if __name__ == "__main__":
    main()
