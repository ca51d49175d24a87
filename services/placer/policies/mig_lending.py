"""MIG lending: an empty MIG-mode node lends its GPUs whole while jobs wait for whole GPUs.

The operator puts some nodes in MIG mode (the node label ``elastico.io/mig-gpus``, a cluster
definition's ``mig_gpus_per_node``): their *home* mode.  With MIG mode fixed, those GPUs serve
only MIG instances, so they idle while long jobs queue for whole GPUs -- measured on llm-mix at
512 GPUs: ``elastico-no-mig`` had a 6.7 % lower average JCT than ``elastico`` (docs/evaluation/
llm-mix, closing note), and the A100 MIG GPUs held 0-4 % of any part's GPU-seconds.

The rule, per GPU model, after each round's placement (:func:`lend_mig_nodes`), over the
nodes whose home GPUs are all healthy:

* **need** -- the GPUs the waiting jobs that only whole (normal-mode) GPUs of the model serve
  need at the least (:func:`whole_gpus_wanted`; configurations on the model, none on a MIG
  instance: jobs the MIG instances can serve none of); **have** -- the free GPUs the lent
  nodes (home mode MIG, now normal) already offer.
* **return** -- a lent node that is empty goes back to MIG mode, the operator's setting, when
  the other lent nodes cover the need without it, or when a waiting job could use a MIG
  instance of the model (MIG demand comes first on home-MIG nodes).
* **lend** -- while need > have and no waiting job could use a MIG instance of the model, the
  next empty MIG-mode node, in node order, goes to normal mode.

And before each round's placement (:func:`keep_lent_nodes`), a lent node is **kept** for
the jobs it is lent for (:meth:`ClusterState.keep_for`): only jobs that only whole GPUs of its
model serve may take its GPUs, so the small jobs MIG instances pack seven to a GPU do not fill
it; and while a job with no booking (waiting, or just arrived) could use a MIG instance of the
model, the model's lent nodes are kept for no job at all: they **drain**, and come home once
empty.  MIG demand comes first on the nodes the operator put in MIG mode.

On by default (``PolicyEnv.mig_lending``; ``elastico simulate --no-mig-lending`` keeps the
mode fixed); the Kubernetes loop keeps the lent state on the Node (:mod:`elastico.placer.kube.
lending`).  Measured on
llm-mix (docs/model.md 5.; ``bench/mig_lending.py``, ``bench/sustainable_load.py
--mig-lending``), figures in docs/model.md 5.  The first rule, without keeping the lent node,
the sizing and the drain, lowered average JCT too (512 GPUs: 689 -> 630 s) but let small jobs
fill the lent nodes at high load: at 64 GPUs, seed 0, load 2.5 the backlog grew (+29.5 jobs,
28.7 allowed) where fixed MIG mode keeps it bounded (+24.4).  Reserving the lent nodes alone
made that worse (+37.7: every empty MIG node was lent to one waiting job, and at high load a
lent node never emptied); sizing the lending to the need and draining on MIG demand waiting
after a round bounded it (+27.4) but grew at 3.5 (+37.3, 35.6 allowed); draining also on MIG
demand just arrived, the rule here, is bounded at 3.5 (+34.7), as fixed MIG mode (+28.7),
and grows at 4 (+64.4; fixed: +80.9).

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

__all__ = ["MigSwitch", "lend_mig_nodes", "keep_lent_nodes", "wants_mig", "wants_whole",
           "whole_gpus_wanted"]


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


def whole_gpus_wanted(families: Iterable[ShapeFamily], gpu_model: str) -> int:
    """GPUs of ``gpu_model`` the jobs only whole GPUs of it serve (:func:`wants_whole`) need at
    the least: per such family the fewest GPUs of its configurations on the model, summed."""
    need = 0
    for fam in families:
        if wants_whole((fam,), gpu_model):
            need += min(c.num_gpus for c in fam.configs
                        if c.gpu_model == gpu_model and c.num_gpus > 0)
    return need


def lend_mig_nodes(state: ClusterState, home: Mapping[int, tuple[int, ...]],
                   waiting: Iterable[ShapeFamily]) -> list[MigSwitch]:
    """Apply the lending rule (module docstring) to ``state`` and return the changes made, in
    the order made: per GPU model (by name) returns, last node first, then lends.

    ``home``: node index -> the GPU indices whose home mode is MIG (the operator's setting);
    ``waiting``: the shape families of the jobs that wait after this round's placement.
    ``state`` is changed in place (:meth:`ClusterState.set_mig_mode`); nodes not in ``home``
    never change, nor does a node with a booking or an unhealthy home GPU."""
    waiting = list(waiting)
    out: list[MigSwitch] = []
    usable = {n: gpus for n, gpus in home.items()
              if gpus and all(state.is_healthy(n, g) for g in gpus)}
    for model in sorted({state.nodes[n].gpu_model for n in usable}):
        mine = sorted(n for n in usable if state.nodes[n].gpu_model == model)
        need = whole_gpus_wanted(waiting, model)
        lent = [n for n in mine if not state.is_mig(n, usable[n][0])]
        # free GPUs the lent nodes already offer (no resident on them)
        have = sum(1 for n in lent for g in usable[n] if not state.residents(n, g))
        drain = wants_mig(waiting, model)  # MIG demand waits: lent nodes come home
        for n in reversed(lent):
            k = len(usable[n])
            if state.node_empty(n) and (drain or have - k >= need):
                state.set_mig_mode(n, usable[n], True)
                state.keep_for(n, None)  # home again: kept for no one in particular
                have -= k
                why = (f"returned: empty, and a waiting job could use a MIG instance of {model}"
                       if drain else
                       f"returned: empty, and the waiting jobs only whole {model} GPUs serve "
                       f"need {need} GPU(s), which the other lent nodes' {have} free cover")
                out.append(MigSwitch(n, state.nodes[n].name, tuple(usable[n]), True, why))
        if need <= have or drain:
            continue
        for n in mine:
            if have >= need:
                break
            if n in lent or not state.node_empty(n):
                continue
            state.set_mig_mode(n, usable[n], False)
            have += len(usable[n])
            why = (f"lent: empty; the waiting jobs only whole {model} GPUs serve need {need} "
                   f"GPU(s), the lent nodes had {have - len(usable[n])} free, and no waiting "
                   "job could use a MIG instance")
            out.append(MigSwitch(n, state.nodes[n].name, tuple(usable[n]), False, why))
    return out


def keep_lent_nodes(state: ClusterState, home: Mapping[int, tuple[int, ...]],
                    families: Mapping[str, ShapeFamily],
                    unplaced: Iterable[str] = ()) -> dict[int, frozenset[str]]:
    """Keep every lent node for the jobs it is lent for, before a round places anything.

    A lent node -- one in ``home`` whose home GPUs are now in normal mode -- is kept
    (:meth:`ClusterState.keep_for`) for the jobs of ``families`` (job id -> shape family: the
    round's jobs) that only whole GPUs of the node's model serve (:func:`wants_whole`); any
    other job's GPU configurations go elsewhere, so the jobs MIG instances would pack stay on
    the MIG nodes.  While one of the ``unplaced`` jobs (ids of jobs with no booking now:
    waiting or just arrived) could use a MIG instance of the model, the model's lent nodes are
    kept for no job at all: they **drain**, and :func:`lend_mig_nodes` returns each to MIG
    mode once it is empty -- MIG demand comes first on the nodes the operator put in MIG mode.
    Every other node of ``home`` is kept for nobody in particular (``keep_for(n, None)``).
    Returns node index -> the job ids it is kept for."""
    unplaced = [families[j] for j in unplaced if j in families]
    out: dict[int, frozenset[str]] = {}
    by_model: dict[str, frozenset[str]] = {}
    for n in sorted(home):
        gpus = home[n]
        if not gpus or state.is_mig(n, gpus[0]):
            state.keep_for(n, None)
            continue
        model = state.nodes[n].gpu_model
        if model not in by_model:
            by_model[model] = (frozenset() if wants_mig(unplaced, model) else frozenset(
                j for j, f in families.items() if wants_whole((f,), model)))
        state.keep_for(n, by_model[model])
        out[n] = by_model[model]
    return out
