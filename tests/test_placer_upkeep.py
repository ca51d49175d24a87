"""The steps around each round shared by PlacerService and the Kubernetes loop
(:mod:`elastico.placer.upkeep`), on stand-ins that record what they were told."""

from __future__ import annotations

from elastico.runtime.metrics import ServiceMetrics
from elastico.placer.upkeep import finish_round, start_round


class Model:
    """A slowdown model that fell back on ``fallback_calls`` calls this round."""

    def __init__(self, fallback_calls: int):
        self.fallback_calls = fallback_calls
        self.degraded = "predictor UNAVAILABLE" if fallback_calls else ""

    def reset(self):
        self.fallback_calls, self.degraded = 0, ""


class Policy:
    def __init__(self):
        self.forgotten: list[str] = []

    def forget(self, job_id: str) -> None:
        self.forgotten.append(job_id)


def test_start_round_resets_a_model_and_leaves_one_without_reset_alone():
    m = Model(3)
    start_round(m)
    assert (m.fallback_calls, m.degraded) == (0, "")
    start_round(object())  # e.g. the analytic model: no per-round state


def test_finish_round_counts_the_fallbacks_and_forgets_the_jobs_that_left():
    metrics = ServiceMetrics("placer")
    policy = Policy()
    seen = finish_round(policy, Model(4), frozenset({"a", "b", "c"}), ["b", "d"], metrics)
    assert seen == frozenset({"b", "d"})
    assert policy.forgotten == ["a", "c"]  # left since the previous round; d is new
    get = metrics.registry.get_sample_value
    assert get("elastico_placer_predictor_fallbacks_total") == 4
    seen = finish_round(policy, Model(0), seen, seen, metrics)  # nothing fell back or left
    assert get("elastico_placer_predictor_fallbacks_total") == 4
    assert policy.forgotten == ["a", "c"]
    # a policy without forget and a model without fallback_calls: only the ids come back
    assert finish_round(object(), object(), seen, ["x"]) == frozenset({"x"})
