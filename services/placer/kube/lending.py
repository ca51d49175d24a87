"""MIG lending in the Kubernetes loop: the lent GPUs kept on the Node, the nodes whose agent
follows the bookings' MIG mode, and each round's view of every node's MIG mode.

The policy lends an empty node whose home mode is MIG while jobs wait that only whole GPUs
serve, keeps it for them, and returns it when it is empty and no longer needed
(:mod:`elastico.placer.policies.mig_lending`).  The simulator keeps its ``ClusterState``
between rounds, so a change lives there; the loop rebuilds its state from the API every round,
so the lent state lives on the Node, where a restarted placer or a new leader reads it back:

* :data:`~elastico.contract.MIG_LENDING` (written by the placer, the leader only):
  ``{"lent": [...], "returning": [...]}``, GPU indices.  ``lent``: home mode MIG, lent to the
  jobs that need whole GPUs (booked in normal mode, or to be from the next round).  ``returning``: given back to MIG mode by the policy while the agent still
  reports normal mode -- the agent switches a GPU back at its next MIG booking (the device
  plugin's ``follow_mig_mode``), and the GPU leaves the list once the agent reports MIG mode.
* :data:`~elastico.contract.MIG_FOLLOW` (written by the node agent): ``"true"`` when its device
  plugin switches an idle GPU to the mode the pod's booking needs.  Only such nodes are lent.

A node's **home** MIG GPUs: the GPUs its agent reports in MIG mode, plus ``lent`` and
``returning`` (the operator's MIG setting, which lending must not forget while the agent has
switched a GPU).  Its MIG GPUs in the **round's state**: home minus ``lent``.  The agent's
report is what counts instead -- and the node is not lent or returned this round -- where the
two disagree with a booking (a MIG instance booked on a lent GPU, a whole or MPS booking on a
home GPU not lent: the annotation was edited by hand, or written by a placer that then lost
the API), and on a node whose agent does not follow, or with lending off.

The loop runs the policy in rounds that have pending pods, so a lent node that empties comes
home at the next such round (a job a MIG instance serves drains it at once: the policy's
rule); until then it stays in normal mode, kept for the jobs that only whole GPUs serve.

Pure: plain data in (Node annotations, :class:`NodeInventory`, bookings), plain data out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from elastico.contract import MIG_FOLLOW, MIG_LENDING
from elastico.mig import MIG_PROFILES
from elastico.model import with_mig_count

from .annotations import PodBooking
from .inventory import NodeInventory

__all__ = ["Lent", "LendingView", "follows_mig_mode", "parse_lent", "lending_view",
           "after_switches"]


@dataclass(frozen=True)
class Lent:
    """A node's :data:`~elastico.contract.MIG_LENDING` value: sorted GPU indices."""

    lent: tuple[int, ...] = ()
    returning: tuple[int, ...] = ()

    def annotation(self) -> str | None:
        """The annotation's value (None = remove it: nothing lent or returning)."""
        if not self.lent and not self.returning:
            return None
        return json.dumps({"lent": list(self.lent), "returning": list(self.returning)},
                          separators=(",", ":"))


def follows_mig_mode(annotations: Mapping[str, str] | None) -> bool:
    """True when the Node's agent says it follows the bookings' MIG mode
    (:data:`~elastico.contract.MIG_FOLLOW` = ``"true"``)."""
    return (annotations or {}).get(MIG_FOLLOW) == "true"


def parse_lent(raw: str | None, num_gpus: int) -> Lent:
    """A :data:`~elastico.contract.MIG_LENDING` value (None = absent = nothing lent).
    ValueError saying what is wrong -- and nothing else, whatever the text (a Node annotation
    is anyone's to write; one bad value must not stop the rounds): not JSON (or nested too
    deep to read), not an object, a key other than ``lent`` / ``returning``, a key given
    twice, a value not a list of GPU indices of the node, an index listed twice or in both."""
    if raw is None:
        return Lent()

    def once(pairs):
        keys = [k for k, _ in pairs]
        for k in keys:
            if keys.count(k) > 1:
                raise ValueError(f"key {k!r} given twice")
        return dict(pairs)
    try:
        d = json.loads(raw, object_pairs_hook=once)
    except RecursionError:
        raise ValueError("not JSON this annotation can hold (nested too deep)") from None
    except ValueError as e:
        raise ValueError(f"not JSON ({str(e)[:120]})") from None
    if not isinstance(d, dict):
        raise ValueError('expected {"lent": [GPU index, ...], "returning": [GPU index, ...]}')
    bad = sorted(set(d) - {"lent", "returning"})
    if bad:
        raise ValueError(f"unknown key {bad[0]!r} (the keys are 'lent' and 'returning')")
    where = f"in 0..{num_gpus - 1}" if num_gpus else "(the node has no GPU)"
    out = []
    for key in ("lent", "returning"):
        v = d.get(key, [])
        if not isinstance(v, list):
            raise ValueError(f"{key}: {str(v)[:60]!s} is not a list of GPU indices {where}")
        for g in v:
            if not (isinstance(g, int) and not isinstance(g, bool) and 0 <= g < num_gpus):
                raise ValueError(f"{key}: {str(g)[:60]!s} is not a GPU index {where}")
        out.append(tuple(sorted(v)))
    seen: set[int] = set()
    for g in out[0] + out[1]:
        if g in seen:
            raise ValueError(f"GPU {g} listed twice (lent and returning name each GPU once)")
        seen.add(g)
    return Lent(*out)


@dataclass
class LendingView:
    """One round's view (module docstring).  ``invs``: the inventories the round places onto,
    in the same order -- ``mig_gpus`` the round's MIG GPUs, each node's
    :data:`~elastico.model.MIG_GPUS_LABEL` the count of its *home* MIG GPUs (the policy offers
    and prices MIG instances by the home setting, as the simulator does).  ``home``: node index
    -> home MIG GPUs of every node that may be lent or returned this round (the policy's
    ``PolicyEnv.mig_home``).  ``lent``: node name -> its :class:`Lent` as on the Node (only the
    nodes in ``home``; what :func:`after_switches` starts from).  ``notes``: node name -> why
    its annotation was not used this round (for the log)."""

    invs: list[NodeInventory]
    home: dict[int, tuple[int, ...]] = field(default_factory=dict)
    lent: dict[str, Lent] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def lending_view(invs: Sequence[NodeInventory], annotations: Mapping[str, Mapping[str, str]],
                 bookings: Iterable[PodBooking], *, enabled: bool = True) -> LendingView:
    """The round's view of ``invs`` (module docstring).  ``annotations``: node name -> the
    Node's annotations; ``bookings``: every booking the pods carry (bound or reserved).
    ``enabled`` False: ``invs`` as they are, nothing lendable."""
    if not enabled:
        return LendingView(list(invs))
    booked: dict[str, list[PodBooking]] = {}
    for b in bookings:
        booked.setdefault(b.node, []).append(b)
    view = LendingView([])
    for i, inv in enumerate(invs):
        name, ann = inv.node.name, annotations.get(inv.node.name) or {}
        try:
            lent = parse_lent(ann.get(MIG_LENDING), inv.node.num_gpus)
        except ValueError as e:
            view.notes[name] = f"invalid {MIG_LENDING} annotation ({e}): MIG mode as the agent reports"
            view.invs.append(inv)
            continue
        reported = set(inv.mig_gpus)
        home = tuple(sorted(reported | set(lent.lent) | set(lent.returning)))
        if (lent.lent or lent.returning) and inv.node.gpu_model not in MIG_PROFILES:
            view.notes[name] = (f"{MIG_LENDING} names GPUs, but {inv.node.gpu_model} has no MIG "
                                "profiles: not used")
            view.invs.append(inv)
            continue
        if not follows_mig_mode(ann):
            if lent.lent or lent.returning:
                view.notes[name] = (f"the node agent does not follow the bookings' MIG mode "
                                    f"({MIG_FOLLOW} is not \"true\"): its {MIG_LENDING} "
                                    f"annotation is not used")
            view.invs.append(inv)
            continue
        if not home:
            view.invs.append(inv)
            continue
        mig = tuple(g for g in home if g not in lent.lent)
        clash = _clash(booked.get(name, ()), set(mig), set(home))
        if clash:
            view.notes[name] = f"{clash}: MIG mode as the agent reports, not lent or returned"
            view.invs.append(inv)
            continue
        node = dataclasses.replace(inv.node, labels=with_mig_count(dict(inv.node.labels),
                                                                   len(home)))
        view.invs.append(dataclasses.replace(inv, node=node, mig_gpus=mig))
        view.home[i] = home
        view.lent[name] = lent
    return view


def _clash(bookings: Iterable[PodBooking], mig: set[int], home: set[int]) -> str:
    """Why the bookings on a node do not fit the lent view ("" when they do): a MIG instance
    on a GPU the view has in normal mode, or a normal-mode booking on one it has in MIG mode."""
    for b in bookings:
        for g in b.gpu_indices:
            if b.mig_profile is not None and g in home and g not in mig:
                return f"pod of job {b.job_id!r} holds a MIG instance on lent GPU {g}"
            if b.mig_profile is None and g in mig:
                return f"pod of job {b.job_id!r} holds GPU {g} in normal mode, which is not lent"
    return ""


def after_switches(view: LendingView, switches: Iterable, reported: Mapping[str, Sequence[int]]
                   ) -> dict[str, Lent]:
    """Node name -> the :class:`Lent` to write, for every node whose value changes: the
    round's MIG mode changes (``switches``: :class:`~elastico.placer.policies.mig_lending.
    MigSwitch`, ``on`` = back to MIG mode) applied to ``view.lent``, and each ``returning``
    GPU the agent reports in MIG mode again (``reported``: node name -> GPU indices the
    agent reports in MIG mode) dropped.  A returned GPU the agent still reports in MIG mode
    (lent, never booked) needs no switching back: it leaves both lists."""
    out: dict[str, Lent] = {}
    now = dict(view.lent)
    for s in switches:
        cur = now.get(s.node, Lent())
        gpus = set(s.gpus)
        if s.on:
            back = {g for g in gpus if g not in set(reported.get(s.node, ()))}
            now[s.node] = Lent(tuple(sorted(set(cur.lent) - gpus)),
                               tuple(sorted(set(cur.returning) | back)))
        else:
            now[s.node] = Lent(tuple(sorted(set(cur.lent) | gpus)),
                               tuple(sorted(set(cur.returning) - gpus)))
    for name, cur in now.items():
        mig = set(reported.get(name, ()))
        new = Lent(cur.lent, tuple(g for g in cur.returning if g not in mig))
        if new != view.lent.get(name, Lent()):
            out[name] = new
    return out
