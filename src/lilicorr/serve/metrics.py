"""Prometheus metrics under vLLM's names, so dashboards, aiperf and ``vllm bench`` read them as-is.

τ from a scrape: ``1 + vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_drafts_total``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lilicorr.decoding.policy import StepPlan
from lilicorr.decoding.stats import SpecStats

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)


_DRAFT_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        r, m = self.registry, ["model_name"]
        self.model_name = model_name
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Speculative drafts verified", m, registry=r)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed", m, registry=r)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted", m, registry=r)
        self.proposed = Counter(
            "lilicorr:spec_decode_num_proposed_tokens",
            "Draft tokens the drafter made, verified or not (adaptive verification sends a prefix)",
            m,
            registry=r,
        )
        self.paused = Counter(
            "lilicorr:spec_decode_num_paused_steps",
            "Engine steps run without the drafter (the load policy, or the draft gate, chose a plain step)",
            m,
            registry=r,
        )
        self.accepted_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted draft tokens per draft position",
            [*m, "position"],
            registry=r,
        )
        # the load policy's decision (decoding/policy.py), per engine step
        self.draft_width = Gauge(
            "lilicorr:spec_decode_draft_width", "Draft tokens per drafting request, last step (0: plain)", m, registry=r
        )
        self.drafting = Gauge(
            "lilicorr:num_requests_drafting", "Running requests that drafted, last step", m, registry=r
        )
        self.paused_requests = Gauge(
            "lilicorr:num_requests_paused", "Running requests the policy left without drafts, last step", m, registry=r
        )
        self.step_draft_tokens = Histogram(
            "lilicorr:spec_decode_draft_tokens_per_step",
            "Draft tokens verified per engine step over the batch (0: a plain step)",
            m,
            buckets=_DRAFT_BUCKETS,
            registry=r,
        )
        self.policy_steps = Counter(
            "lilicorr:spec_decode_policy_steps",
            "Engine steps by the load policy's decision",
            [*m, "decision"],
            registry=r,
        )
        self.plain_steps = Counter(
            "lilicorr:spec_decode_policy_plain_steps",
            "Plain engine steps by why: the predictions chose it (predicted) or a rule overruled a drafting plan "
            "(banned: drafting lost to plain steps at this load lately; unmeasured: no recent plain step of this "
            "batch size; blind: drafting outcomes without plain ones to compare; losing: outcome-corrected loss)",
            [*m, "reason"],
            registry=r,
        )
        self.corrected_steps = Counter(
            "lilicorr:spec_decode_policy_corrected_steps",
            "Engine steps whose decision had recent outcomes of both actions at its batch size (the outcome "
            "correction applied); the rest compared raw predictions",
            m,
            registry=r,
        )
        self.outcome_factor = Gauge(
            "lilicorr:spec_decode_policy_outcome_factor",
            "Delivered over predicted tokens/s the last decision applied, by action (1: no correction)",
            [*m, "action"],
            registry=r,
        )
        self.running = Gauge("vllm:num_requests_running", "Requests in the running batch", m, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for a batch slot", m, registry=r)
        self.success = Counter("vllm:request_success", "Finished requests", [*m, "finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed", m, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated", m, registry=r)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token", m, buckets=_LATENCY_BUCKETS, registry=r
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Time between output tokens", m, buckets=_LATENCY_BUCKETS, registry=r
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Request latency", m, buckets=_LATENCY_BUCKETS, registry=r
        )
        self._seen = SpecStats()

    def sync_spec(self, total: SpecStats) -> None:
        """Advance the counters to the engine's cumulative totals."""
        n = self.model_name
        self.drafts.labels(n).inc(total.num_drafts - self._seen.num_drafts)
        self.draft_tokens.labels(n).inc(total.num_draft_tokens - self._seen.num_draft_tokens)
        self.accepted.labels(n).inc(total.num_accepted_tokens - self._seen.num_accepted_tokens)
        self.proposed.labels(n).inc(total.num_proposed_tokens - self._seen.num_proposed_tokens)
        self.paused.labels(n).inc(total.num_paused_steps - self._seen.num_paused_steps)
        for i, c in enumerate(total.accepted_per_position):
            prev = self._seen.accepted_per_position[i] if i < len(self._seen.accepted_per_position) else 0
            self.accepted_pos.labels(n, str(i)).inc(c - prev)
        self._seen = SpecStats(
            total.num_drafts,
            total.num_draft_tokens,
            total.num_accepted_tokens,
            list(total.accepted_per_position),
            num_proposed_tokens=total.num_proposed_tokens,
            num_paused_steps=total.num_paused_steps,
        )

    def record_plan(self, plan: StepPlan) -> None:
        """One engine step's decision: its width, how many rows drafted and how many were paused."""
        n = self.model_name
        self.draft_width.labels(n).set(plan.width)
        self.drafting.labels(n).set(len(plan.rows))
        self.paused_requests.labels(n).set(plan.batch - len(plan.rows))
        self.step_draft_tokens.labels(n).observe(plan.draft_tokens)
        self.policy_steps.labels(n, "draft" if plan.width else "plain").inc()
        if not plan.width:
            self.plain_steps.labels(n, plan.reason or "predicted").inc()
        if plan.corrected:
            self.corrected_steps.labels(n).inc()
        self.outcome_factor.labels(n, "draft").set(plan.draft_factor)
        self.outcome_factor.labels(n, "plain").set(plan.plain_factor)
