"""elastico.pricing — Elastic Shadow Pricing (ESP), DESIGN.md mechanism 2.

Chooses one configuration per job to maximise total utility subject to the cluster's
capacity (a multiple-choice multidimensional knapsack), by Lagrangian relaxation with
per-resource shadow prices, a primal repair/greedy-fill, and a certified optimality gap
(docs/pricing.md).

Who calls it: the scheduling round (``elastico.placer``), the CLI (``elastico pricing solve``,
:mod:`elastico.cli.pricing`) and, later, the gRPC ``PricingService``.
Whom it calls: the native selection kernel :mod:`elastico._native`, only through
:mod:`elastico.pricing.kernel`.  No grpc or kubernetes imports here.

Public API: :func:`solve` -> :class:`PricingResult`; :data:`UTILITIES` (``jct``,
``throughput``, ``fair``).
"""

from elastico.pricing.solver import PricingResult, solve
from elastico.pricing.utilities import UTILITIES, switch_cost

__all__ = ["solve", "PricingResult", "UTILITIES", "switch_cost"]
