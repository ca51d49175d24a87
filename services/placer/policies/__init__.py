"""Scheduling policies, one small module each with one signature, registered by name.

Each policy is a class built with a :class:`~elastico.placer.policies.common.PolicyEnv` and
called once per round as ``policy(round_input, state) -> RoundResult`` (see
:mod:`elastico.placer.round`).

* ``exclusive`` -- what Kubernetes does today: requested shape, whole GPUs, FIFO first-fit.
* ``elastico`` -- Resource Shape Transformation + Elastic Shadow Pricing + interference-aware
  placement.
"""

from __future__ import annotations

from .common import PolicyEnv
from .elastico import ElasticoPolicy
from .exclusive import ExclusivePolicy

POLICIES = {"exclusive": ExclusivePolicy, "elastico": ElasticoPolicy}

__all__ = ["POLICIES", "PolicyEnv", "ElasticoPolicy", "ExclusivePolicy", "make_policy"]


def make_policy(name: str, env: PolicyEnv):
    """The policy registered as ``name``; InvalidArgument for an unknown name."""
    from elastico.errors import InvalidArgument

    try:
        cls = POLICIES[name]
    except KeyError:
        raise InvalidArgument("policy", name, f"one of {sorted(POLICIES)}") from None
    return cls(env)
