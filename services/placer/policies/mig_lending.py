"""MIG lending: an empty MIG-mode node lends its GPUs whole while jobs wait for whole GPUs.

The operator puts some nodes in MIG mode (the node label ``elastico.io/mig-gpus``, a cluster
definition's ``mig_gpus_per_node``): their *home* mode.  With MIG mode fixed, those GPUs serve
only MIG instances, so they idle while long jobs queue for whole GPUs -- measured on llm-mix at
512 GPUs: ``elastico-no-mig`` had a 6.7 % lower average JCT than ``elastico`` (docs/evaluation/
llm-mix, closing note), and the A100 MIG GPUs held 0-4 % of any part's GPU-seconds.

The rule, after each round's placement, for each node with GPUs whose home mode is MIG:

* **lend** -- the node is empty, its home GPUs are in MIG mode and a job still waits that has a
  configuration on the node's GPU model using whole (non-MIG) GPUs: its home GPUs go to normal
  mode.  An empty MIG node beside a waiting job means its instances did not serve that job.
* **return** -- the node is empty, its home GPUs are in normal mode and no waiting job has such
  a configuration: its home GPUs go back to MIG mode, the operator's setting.

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

__all__ = ["MigSwitch", "lend_mig_nodes", "wants_whole"]


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
    mode (whole or MPS-shared: ``mig_profile`` None, ``num_gpus`` >= 1)."""
    return any(c.gpu_model == gpu_model and c.mig_profile is None and c.num_gpus > 0
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
        in_mig = state.is_mig(n, gpus[0])
        if in_mig and asks[model]:
            why = f"lent: empty, and a waiting job has a whole-GPU {model} configuration"
        elif not in_mig and not asks[model]:
            why = f"returned: empty, and no waiting job has a whole-GPU {model} configuration"
        else:
            continue
        state.set_mig_mode(n, gpus, not in_mig)
        out.append(MigSwitch(n, node.name, tuple(gpus), not in_mig, why))
    return out
