"""MIG lending: an empty MIG-mode node lends its GPUs whole while jobs wait for whole GPUs.

The operator puts some nodes in MIG mode (the node label ``elastico.io/mig-gpus``, a cluster
definition's ``mig_gpus_per_node``): their *home* mode.  With MIG mode fixed, those GPUs serve
only MIG instances, so they idle while long jobs queue for whole GPUs -- measured on llm-mix at
512 GPUs: ``elastico-no-mig`` had a 6.7 % lower average JCT than ``elastico`` (docs/evaluation/
llm-mix, closing note), and the A100 MIG GPUs held 0-4 % of any part's GPU-seconds.

The rule, after each round's placement, for each node with GPUs whose home mode is MIG:

* **lend** -- the node is empty, its home GPUs are in MIG mode, a job still waits that only
  whole (normal-mode) GPUs of the node's model can serve (configurations on the model, none on
  a MIG instance), and no waiting job has a MIG configuration of the model: its home GPUs go to
  normal mode.  The node's instances could serve none of the waiting jobs.
* **return** -- the node is empty, its home GPUs are in normal mode and no waiting job is one
  only whole GPUs of the model serve: its home GPUs go back to MIG mode, the operator's setting.

Off by default (``PolicyEnv.mig_lending``; ``elastico simulate --mig-lending``).  Measured on
llm-mix (docs/model.md 5.): average JCT at 512 GPUs 689 -> 630 s over 5 seeds (and
``elastico-no-mig`` then measurably worse, +13 s [+1, +25]), but at high load the lent nodes
fill with jobs MIG instances would have packed, and throughput falls: at 64 GPUs, seed 0,
load 2.5 the backlog grew (+29.5 jobs, 28.7 allowed) where fixed MIG mode keeps it bounded
(+24.4), so the sustainable load fell from 3.5 to 2 (as ``elastico-no-mig``'s: growing at
2.5).  A lent node goes to whichever jobs the next round places, not to the job it was lent
for; reserving it for that job is the open step.

Only empty nodes change (NVML changes MIG mode only on an idle GPU: ``nvmlDeviceSetMigMode``),
so no booking moves and nothing is evicted; a node with an unhealthy GPU keeps its mode.  The
waiting job gets the lent node in the next round.  What it sees is what a live placer sees:
the waiting jobs' shape families and the bookings.

ASSUMPTION (no measured figure found): a mode change costs no GPU time.  The node is empty
when it changes and the job that wanted it is placed at the next round (the next arrival or
completion), later than the change itself; the count of changes is reported
(``RoundResult.mig_switches``, the simulator's ``mig_mode_switches``) so that a cost per change
can be charged against it.  On A100 the change needs a GPU reset (NVIDIA DGX A100 User Guide,
"Multi-Instance GPU"); the seconds it takes are not published.

Who calls it: :class:`~elastico.placer.policies.elastico.ElasticoPolicy` (``PolicyEnv.mig_lending``).
Whom it calls: :meth:`~elastico.placer.placement.ClusterState.set_mig_mode`.
Pure: plain data in, plain data out; no clock, no Kubernetes, no gRPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from elastico.model import ShapeFamily

from ..placement import ClusterState

__all__ = ["MigSwitch", "lend_mig_nodes", "wants_mig", "wants_whole"]


@dataclass(frozen=True)
class MigSwitch:
    """One change of MIG mode: GPUs ``gpus`` of node ``node_index`` (``node`` its name) to MIG
    mode (``on``) or to normal mode; ``reason`` says why, in words."""

    node_index: int
    node: str
    gpus: tuple[int, ...]
    on: bool
    reason: str


def wants_whole(families: Iterable[ShapeFamily], gpu_model: str) -> bool:
    """True when some family has a configuration on ``gpu_model`` that uses GPUs in normal
    mode (whole or MPS-shared: ``mig_profile`` None, ``num_gpus`` >= 1) and none on a MIG
    instance of that model: a job no MIG instance of the model can serve."""
    for fam in families:
        on = [c for c in fam.configs if c.gpu_model == gpu_model and c.num_gpus > 0]
        if on and all(c.mig_profile is None for c in on):
            return True
    return False


def wants_mig(families: Iterable[ShapeFamily], gpu_model: str) -> bool:
    """True when some family has a configuration on a MIG instance of ``gpu_model``."""
    return any(c.gpu_model == gpu_model and c.mig_profile is not None
               for fam in families for c in fam.configs)


def lend_mig_nodes(state: ClusterState, home: Mapping[int, tuple[int, ...]],
                   waiting: Iterable[ShapeFamily]) -> list[MigSwitch]:
    """Apply the lending rule (module docstring) to ``state`` and return the changes made, in
    node order.

    ``home``: node index -> the GPU indices whose home mode is MIG (the operator's setting);
    ``waiting``: the shape families of the jobs that wait after this round's placement.
    ``state`` is changed in place (:meth:`ClusterState.set_mig_mode`); nodes not in ``home``
    never change."""
    waiting = list(waiting)
    asks: dict[str, bool] = {}  # GPU model -> a waiting job wants its GPUs whole
    mig_asks: dict[str, bool] = {}  # GPU model -> a waiting job could use its MIG instances
    out: list[MigSwitch] = []
    for n in sorted(home):
        gpus = home[n]
        if not gpus or not state.node_empty(n):
            continue
        if not all(state.is_healthy(n, g) for g in gpus):
            continue
        node = state.nodes[n]
        model = node.gpu_model
        if model not in asks:
            asks[model] = wants_whole(waiting, model)
            mig_asks[model] = wants_mig(waiting, model)
        in_mig = state.is_mig(n, gpus[0])
        if in_mig and asks[model] and not mig_asks[model]:
            why = (f"lent: empty, a waiting job only whole {model} GPUs serve, none that a "
                   "MIG instance could")
        elif not in_mig and not asks[model]:
            why = f"returned: empty, no waiting job only whole {model} GPUs serve"
        else:
            continue
        state.set_mig_mode(n, gpus, not in_mig)
        out.append(MigSwitch(n, node.name, tuple(gpus), not in_mig, why))
    return out
