"""Scheduling policies, one small module each with one signature, registered by name.

Each policy is a class built with a :class:`~elastico.placer.policies.common.PolicyEnv` and
called once per round as ``policy(round_input, state) -> RoundResult`` (see
:mod:`elastico.placer.round`).

* ``exclusive`` -- what Kubernetes does today: requested shape, whole GPUs, FIFO first-fit.
* ``time-slicing`` -- naive sharing: requested shapes packed onto shared GPUs, no
  interference awareness.
* ``fgd`` -- requested shapes placed by FGD's fragmentation measure (ATC'23).
* ``mps-static`` -- the NVIDIA device plugin's MPS sharing: every GPU split into N equal
  replicas (compute 1/N, memory 1/N), one per single-GPU pod, no interference awareness
  (:mod:`~elastico.placer.policies.mpsstatic`).
* ``gavel`` -- Gavel's heterogeneity-aware max-min fairness (OSDI'20) with its round-based
  mechanism, whole GPUs; services placed first as ``exclusive`` places them.
* ``elastico`` -- Resource Shape Transformation + Elastic Shadow Pricing + interference-aware
  placement, a pipeline of named stages (:mod:`~elastico.placer.policies.pipeline`: hold ->
  shape -> value -> price -> place -> record_changes); ablations ``elastico-no-rst``
  (requested shape only), its parts ``elastico-no-growth`` (never more GPUs or compute than
  requested), ``elastico-no-model-choice`` (one GPU model per job) and ``elastico-no-mig``
  (no MIG instances), ``elastico-no-esp`` (greedy instead of prices), ``elastico-no-iac``
  (placer predicts no interference).
"""

from __future__ import annotations

from .common import PolicyEnv
from .elastico import (ElasticoNoEsp, ElasticoNoGrowth, ElasticoNoIac, ElasticoNoMig,
                       ElasticoNoModelChoice, ElasticoNoRst, ElasticoPolicy)
from .exclusive import ExclusivePolicy
from .fgd import FgdPolicy
from .gavel import GavelPolicy
from .mpsstatic import MpsStaticPolicy
from .priority import PriorityPreemption
from .timeslicing import TimeSlicingPolicy

POLICIES = {"exclusive": ExclusivePolicy, "time-slicing": TimeSlicingPolicy, "fgd": FgdPolicy,
            "gavel": GavelPolicy, "mps-static": MpsStaticPolicy,
            "elastico": ElasticoPolicy, "elastico-no-rst": ElasticoNoRst,
            "elastico-no-growth": ElasticoNoGrowth,
            "elastico-no-model-choice": ElasticoNoModelChoice, "elastico-no-mig": ElasticoNoMig,
            "elastico-no-esp": ElasticoNoEsp, "elastico-no-iac": ElasticoNoIac}

__all__ = ["POLICIES", "PolicyEnv", "ElasticoPolicy", "ElasticoNoRst", "ElasticoNoEsp",
           "ElasticoNoIac", "ElasticoNoGrowth", "ElasticoNoModelChoice", "ElasticoNoMig", "ExclusivePolicy", "FgdPolicy", "GavelPolicy", "MpsStaticPolicy", "PriorityPreemption",
           "TimeSlicingPolicy",
           "make_policy"]


def make_policy(name: str, env: PolicyEnv):
    """The policy registered as ``name``, wrapped in the priority rule every policy applies
    (:class:`~elastico.placer.policies.priority.PriorityPreemption`: offline LLM inference
    yields to everything else after a minimum guaranteed run) unless ``env.preemption`` is
    off; InvalidArgument for an unknown name."""
    from elastico.errors import InvalidArgument

    try:
        cls = POLICIES[name]
    except KeyError:
        raise InvalidArgument("policy", name, f"one of {sorted(POLICIES)}") from None
    policy = cls(env)
    if not env.preemption:
        return policy
    # offline LLM inference is low priority: the same preemption rule for every policy
    return PriorityPreemption(policy, env.min_run_s)
