"""The placer's cluster view: one object every caller books through.

Owns: :class:`ClusterState`, a thin facade over the parts of this package -- the cluster's
:class:`~.layout.Layout`, the :class:`~.book.Book` of bookings (with its MPS rules), the
``elastico`` scorer's :class:`~.frag_cache.FragIndex` and the default slowdown model -- that
validates each request and sends it to the module that does the work.
Who calls it: the scheduling round and policies (:mod:`elastico.placer.round`,
:mod:`elastico.placer.policies`), the simulator, the Kubernetes loop's book
(:mod:`elastico.placer.kube`), the placer's gRPC service and codecs.
Whom it calls: :mod:`.fit`, :mod:`.scoring`, :mod:`.gangs`, :mod:`.interference`, :mod:`.mps`,
:mod:`.failed`, and :class:`elastico.predictor.AnalyticSlowdown` (the default model).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.mig import MigGpu
from elastico.model import Configuration, Node
from elastico.placer.fragmentation import NodeSummaries, TypicalPods
from elastico.predictor import AnalyticSlowdown, JobProfile, SlowdownModel

from .assignment import EPS, Assignment, PlaceOutcome
from .book import Book
from .failed import FailedShapes
from .fit import candidates, fits, validate
from .frag_cache import FragIndex
from .gangs import Gang, place_gang, validate_gang
from .interference import predicted_slowdowns
from .layout import TOPOLOGY_KEY, Layout
from .mps import mps_reason
from .scoring import SCORERS, place_pod

__all__ = ["ClusterState"]


class ClusterState:
    """Per-GPU and per-node bookings of a cluster (the package docstring has the rules; the
    life of a booking is in :mod:`.book`).

    ``nodes``: the cluster.  ``mig_gpus``: ``(node_index, gpu_index)`` pairs whose GPU is in MIG
    mode (only models with a MIG profile table, :data:`elastico.mig.MIG_PROFILES`).
    ``slowdown_model``: used by ``place`` and ``predicted_slowdowns`` unless a call passes
    another; default :class:`AnalyticSlowdown` with the Gavel-fitted kappa.
    ``topology_key``: the node label whose value names a node's topology domain (gangs prefer
    one domain; nodes without the label are in no domain).  ``frag_cache``: keep the
    ``elastico`` scorer's fragmentation summaries incrementally (False: recompute them at
    every placement -- the reference the cache is tested and benchmarked against).
    ``frag_native``: keep those summaries and per-shape increases with the native kernel
    (:class:`elastico.placer.fragmentation.NodeSummaries` ``native``; the same numbers, so
    the same placements; False: plain Python, the reference it is tested and benchmarked
    against).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        mig_gpus: Iterable[tuple[int, int]] = (),
        slowdown_model: SlowdownModel | None = None,
        frag_cache: bool = True,
        topology_key: str = TOPOLOGY_KEY,
        frag_native: bool = True,
    ):
        self.layout = Layout(nodes, mig_gpus, topology_key)
        self.nodes: tuple[Node, ...] = self.layout.nodes
        self.topology_key = topology_key
        self.slowdown_model: SlowdownModel = slowdown_model or AnalyticSlowdown()
        self.book = Book(self.layout)
        self.frag = FragIndex(self.layout, frag_cache, frag_native)
        self.book.node_changed = self.frag.touch

    def copy(self) -> "ClusterState":
        """An independent copy for a round to decide on (run_round commits it or drops it).

        Cluster shape (nodes, capacities, MIG mode) is shared; every booking is copied.
        Much cheaper than ``copy.deepcopy``: bookings are immutable tuples and dataclasses.
        """
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        new.book = self.book.copy()
        new.frag = self.frag.copy()
        new.book.node_changed = new.frag.touch  # no cycle: the index holds no book
        return new

    @property
    def typical(self) -> TypicalPods | None:
        """The typical pods of :meth:`set_typical_pods` (None: each job's own shape)."""
        return self.frag.typical

    @property
    def _frag_cache(self) -> NodeSummaries | None:
        """The ``elastico`` scorer's node summaries, None until first used."""
        return self.frag.summary

    # ----------------------------------------------------------------------------- health
    def mark_unhealthy(self, node_index: int, gpu_index: int) -> list[str]:
        """Mark a GPU unhealthy (node agent / node condition): from now on it is never free,
        no scorer chooses it and ``rebook`` refuses it.  Jobs already on it keep their booking
        (the caller moves them: ``release`` then ``place``); returns their ids.  NotFound for a
        GPU that does not exist."""
        return self.book.set_health(node_index, gpu_index, False)

    def mark_healthy(self, node_index: int, gpu_index: int) -> None:
        """Return a GPU to service (NotFound for a GPU that does not exist)."""
        self.book.set_health(node_index, gpu_index, True)

    def is_healthy(self, node_index: int, gpu_index: int) -> bool:
        return bool(self.book.healthy[self.layout.flat(node_index, gpu_index)])

    def unhealthy_gpus(self) -> list[tuple[int, int]]:
        """``(node_index, gpu_index)`` of every GPU marked unhealthy, in flat order."""
        f = np.flatnonzero(~self.book.healthy)
        return list(zip(self.layout.gpu_node[f].tolist(), self.layout.gpu_local[f].tolist()))

    # ----------------------------------------------------------------------------- MPS
    def set_mps_user(self, job_id: str, user: str | None) -> None:
        """The Linux user ``job_id``'s MPS clients run as, as a phrase for reasons (the live
        loop passes ``"user 1000"``, or one phrase for every pod that leaves it to its image);
        None forgets it.  An MPS share is placed only on a GPU whose residents have its user
        (:mod:`.mps`).  A booking already made is never checked again (``rebook``)."""
        self.book.mps.set_user(job_id, user)
        self.book.refresh_user_codes(job_id)  # a resident's user changed: its GPUs' codes

    def set_mps_down(self, node_index: int, reason: str | None) -> None:
        """The MPS control daemon of node ``node_index`` is down (``reason``, a non-empty
        phrase) or back (None): no new MPS share is placed on that node's GPUs; whole-GPU and
        MIG placements and the bookings already there are unaffected.  NotFound for a node
        that does not exist."""
        self.book.mps.set_down(node_index, reason, len(self.nodes))

    def job_limited(self, job_id: str, config: Configuration) -> bool:
        """True when rules for this job keep ``config`` of ``job_id`` off some GPU -- the MPS
        rules, or a node kept for other jobs (:meth:`keep_for`) -- so a failure to place it
        says nothing about other jobs or whole-GPU shapes (``FailedShapes`` must not record
        it)."""
        return (self.book.mps.excluded(job_id, config, self.layout) is not None
                or self.book.kept_off(job_id, config) is not None)

    def mps_obstacle(self, job_id: str, config: Configuration) -> str:
        """Why the MPS rules keep ``config`` of ``job_id`` off every node that would otherwise
        take it (free share, GPU memory, CPU and host memory; slowdown bounds not), naming
        the GPUs or nodes; "" when they do not (not an MPS share, no rule applies, or some node
        takes it anyway)."""
        e = self.book.mps.excluded(job_id, config, self.layout)
        return "" if e is None else mps_reason(self.book, config, *e)

    def set_typical_pods(self, typical: TypicalPods | None) -> None:
        """The workload's typical pod shapes for the ``elastico`` scorer's fragmentation term
        (:func:`elastico.placer.fragmentation.typical_pods`, CPU in milli-cores, GPU in
        milli-GPU).  None: each placement uses the job's own shape as the only typical pod."""
        if typical is not None and not isinstance(typical, TypicalPods):
            raise InvalidArgument("typical", type(typical).__name__, "a TypicalPods or None")
        self.frag.set_typical(typical)

    # ----------------------------------------------------------------------------- queries
    def __contains__(self, job_id: object) -> bool:
        return job_id in self.book.jobs

    def __len__(self) -> int:
        return len(self.book.jobs)

    def job_ids(self) -> list[str]:
        return list(self.book.jobs)

    def assignment(self, job_id: str) -> Assignment:
        try:  # Book.assignment, inlined: the policies ask this about every job every round
            return self.book.jobs[job_id][0]
        except KeyError:
            raise NotFound(f"job_id: {job_id!r} is not placed") from None

    def profile(self, job_id: str) -> JobProfile:
        self.book.assignment(job_id)
        return self.book.jobs[job_id][1]

    def slowdown_bound(self, job_id: str) -> float:
        self.book.assignment(job_id)
        return self.book.jobs[job_id][2]

    def assignments(self) -> list[Assignment]:
        return [a for a, _, _ in self.book.jobs.values()]

    def residents(self, node_index: int, gpu_index: int) -> list[str]:
        """Job ids on one GPU, in placement order."""
        return list(self.book.gpu_jobs[self.layout.flat(node_index, gpu_index)])

    def is_mig(self, node_index: int, gpu_index: int) -> bool:
        return bool(self.layout.is_mig[self.layout.flat(node_index, gpu_index)])

    def node_empty(self, node_index: int) -> bool:
        """True when nothing is booked on node ``node_index`` (no GPU share, MIG instance, CPU
        or host memory).  NotFound for a node that does not exist."""
        if not 0 <= node_index < len(self.nodes):
            raise NotFound(f"node: no node {node_index}")
        L, b = self.layout, self.book
        lo, hi = L.offset_list[node_index], L.offset_list[node_index + 1]
        return not b.node_jobs[node_index] and not b.n_res[lo:hi].any()

    def set_mig_mode(self, node_index: int, gpu_indices: Iterable[int], on: bool) -> None:
        """Put GPUs ``gpu_indices`` of node ``node_index`` in MIG mode (``on``) or in normal mode.

        Only on an empty node (:meth:`node_empty`): NVML changes a GPU's MIG mode only while
        no process uses it (``nvmlDeviceSetMigMode``; on A100 it also needs a GPU reset), so a
        booking is never moved by it -- Infeasible (FAILED_PRECONDITION) otherwise.  NotFound
        for a node or GPU that does not exist; InvalidArgument for MIG mode on a model without
        a MIG profile table.  This state gets a layout of its own (:meth:`Layout.with_mig_mode`);
        copies made before keep the old one.  Nothing changes on an error."""
        if not self.node_empty(node_index):
            raise Infeasible(f"node {node_index} ({self.nodes[node_index].name}): MIG mode "
                             "changes only on an empty node; it has bookings")
        layout = self.layout.with_mig_mode(node_index, gpu_indices, on)
        book = self.book
        for f in range(layout.offset_list[node_index], layout.offset_list[node_index + 1]):
            if layout.is_mig[f] and f not in book.mig:
                book.mig[f] = MigGpu(layout.mig_models[f])
            elif not layout.is_mig[f]:
                book.mig.pop(f, None)
        self.layout = book.layout = self.frag.layout = layout
        book.mps_base = {}  # the healthy MPS GPUs of each model: rebuilt on demand
        self.frag.touch(book, node_index)

    def keep_for(self, node_index: int, job_ids: Iterable[str] | None) -> None:
        """Keep the normal-mode GPUs of node ``node_index`` for jobs ``job_ids`` (None: for
        any job again): from now on :meth:`place` puts a GPU configuration (not a MIG
        instance) of any other job elsewhere, as if the node were full.  Bookings already on
        the node stay.  What MIG lending uses to keep a lent node for the jobs it was lent
        for (:mod:`elastico.placer.policies.mig_lending`).  NotFound for a node that does not
        exist; InvalidArgument for ``job_ids`` not an iterable of job id strings."""
        if not (isinstance(node_index, (int, np.integer)) and 0 <= node_index < len(self.nodes)):
            raise NotFound(f"node: no node {node_index}")
        if job_ids is None:
            self.book.kept.pop(int(node_index), None)
            return
        if isinstance(job_ids, str):
            raise InvalidArgument("job_ids", job_ids, "an iterable of job ids, not one string")
        ids = frozenset(job_ids)
        if not all(isinstance(j, str) and j for j in ids):
            raise InvalidArgument("job_ids", sorted(map(repr, ids)), "non-empty strings")
        self.book.kept[int(node_index)] = ids

    def kept_nodes(self) -> dict[int, frozenset[str]]:
        """Node index -> the job ids its normal-mode GPUs are kept for (:meth:`keep_for`)."""
        return dict(self.book.kept)

    def mig_state(self, node_index: int, gpu_index: int) -> MigGpu | None:
        """A copy of the GPU's MIG state, or None if it is not in MIG mode."""
        m = self.book.mig.get(self.layout.flat(node_index, gpu_index))
        return m.copy() if m is not None else None

    def free_share(self, node_index: int, gpu_index: int) -> float:
        """Free compute of one GPU, fraction of a GPU."""
        return 1.0 - float(self.book.used_share[self.layout.flat(node_index, gpu_index)])

    def free_mem_gib(self, node_index: int, gpu_index: int) -> float:
        f = self.layout.flat(node_index, gpu_index)
        return float(self.layout.gpu_cap_mem[f] - self.book.used_mem[f])

    def node_free(self, node_index: int) -> tuple[float, float]:
        """(free CPU cores, free host memory GiB) of a node."""
        L, b = self.layout, self.book
        return (
            float(L.node_cpu[node_index] - b.node_cpu_used[node_index]),
            float(L.node_mem[node_index] - b.node_mem_used[node_index]),
        )

    def gpu_usage(self) -> dict[str, np.ndarray]:
        """Copies of the per-GPU book (flat GPU order, node by node): node, gpu, used_share,
        used_mem_gib, residents, mig_occupied (memory-slice bit mask), mig_compute."""
        L, b = self.layout, self.book
        return {
            "node": L.gpu_node.copy(),
            "gpu": L.gpu_local.copy(),
            "used_share": b.used_share.copy(),
            "used_mem_gib": b.used_mem.copy(),
            "residents": b.n_res.copy(),
            "mig_occupied": b.mig_occ.copy(),
            "mig_compute": b.mig_comp.copy(),
        }

    def used_gpus(self) -> float:
        """Allocated GPU compute, in GPUs (sum of booked shares)."""
        return math.fsum(self.book.used_share.tolist())

    def predicted_slowdowns(self, slowdown_model: SlowdownModel | None = None) -> dict[str, float]:
        """Every placed job's predicted slowdown from its co-residents (1.0 alone or on MIG;
        max over a multi-GPU job's GPUs)."""
        return predicted_slowdowns(self.book, slowdown_model or self.slowdown_model)

    def fits(self, config: Configuration) -> list[tuple[int, tuple[int, ...]]]:
        """Nodes that can host ``config`` ignoring interference and kept nodes
        (:meth:`keep_for`): ``(node_index, GPU indices
        that could take one member)``, nodes in index order, GPUs in index order."""
        return fits(self.book, config)

    def gpu_model_of(self, a: Assignment) -> str:
        """The GPU model of ``a``'s nodes."""
        return self.book.gpu_model_of(a)

    # ----------------------------------------------------------------------------- placement
    def place(
        self,
        job_id: str,
        config: Configuration,
        profile: JobProfile,
        slowdown_bound: float,
        slowdown_model: SlowdownModel | None = None,
        scorer: str = "bestfit",
        gang: Gang | None = None,
    ) -> PlaceOutcome:
        """Book ``config`` for ``job_id`` (package docstring: rules; :mod:`.scoring`: scorers).
        Returns the assignment, or None with a reason; a failed placement changes nothing.
        Bad input -> InvalidArgument (nothing changes).

        ``gang`` (default: one pod, on one node): split the job into ``gang.pods`` pods, or
        let one pod's GPUs span nodes (``gang.span_nodes``), placed all or nothing
        (:func:`.gangs.place_gang`)."""
        if scorer not in SCORERS:
            raise InvalidArgument("scorer", scorer, f"one of {list(SCORERS)}")
        book = self.book
        validate(book, job_id, config, profile, slowdown_bound)
        gang = validate_gang(gang, config)
        model = slowdown_model or self.slowdown_model
        off = book.kept_off(job_id, config)  # nodes kept for other jobs (keep_for)
        mask = None if off is None else ~off
        if gang.pods > 1 or (gang.span_nodes and config.num_gpus > 0):
            out = place_gang(book, self.frag, job_id, config, profile, float(slowdown_bound),
                             model, scorer, gang, node_mask=mask)
            return out if off is None or out.placed else self._kept_reason(config, off, out)
        # the MPS rules (set_mps_user, set_mps_down); the live loop's gangs are whole GPUs
        mps = book.mps.excluded(job_id, config, self.layout)
        out = place_pod(book, self.frag, job_id, config, profile, float(slowdown_bound), model, scorer,
                        node_mask=mask, gpu_excl=None if mps is None else mps[0])
        if out.placed or out.reason.startswith("slowdown bound"):
            return out
        if mps is not None:
            why = mps_reason(book, config, *mps)
            if why:
                return PlaceOutcome(None, why)
        if off is not None:
            return self._kept_reason(config, off, out)
        if mps is None:
            return out
        why = candidates(book, config)
        return PlaceOutcome(None, why if isinstance(why, str) else "no candidate node")

    def _kept_reason(self, config: Configuration, off: np.ndarray, out: PlaceOutcome
                         ) -> PlaceOutcome:
        """``out`` (a failed placement with the nodes ``off`` kept out), its reason
        naming those nodes when they are what kept ``config`` out."""
        plan = candidates(self.book, config)
        if isinstance(plan, str):  # no room even on the kept nodes
            return PlaceOutcome(None, plan)
        names = [self.nodes[n].name for n in plan[0].tolist() if off[n]]
        if not names or len(names) < len(plan[0]):
            return out
        more = f" (and {len(names) - 3} more)" if len(names) > 3 else ""
        return PlaceOutcome(None, f"the nodes with room, {', '.join(names[:3])}{more}, are "
                                  "kept for other jobs (a lent MIG node)")

    def place_unless_dominated(self, job_id: str, config: Configuration, profile: JobProfile,
                               slowdown_bound: float,
                               failed: FailedShapes,
                               slowdown_model: SlowdownModel | None = None,
                               scorer: str = "bestfit") -> PlaceOutcome:
        """:meth:`place`, except that a shape which :func:`~.failed.dominates` one in
        ``failed`` is refused without a search, and a shape that finds no room (not a slowdown
        bound, which depends on the job) is appended to ``failed``.  Valid while the cluster
        only fills up -- within one round, before any release -- since a larger shape cannot
        fit where a smaller one did not."""
        refused = failed.refusal(config)
        if refused is not None:
            return PlaceOutcome(None, refused)
        res = self.place(job_id, config, profile, slowdown_bound, slowdown_model, scorer=scorer)
        if not res.placed and not res.reason.startswith("slowdown bound") \
                and not self.job_limited(job_id, config):
            failed.append(config, res.reason)
        return res

    def place_many(self, requests: Sequence[tuple[str, Configuration, JobProfile, float]],
                   scorer: str = "bestfit") -> list[PlaceOutcome]:
        """Place ``(job_id, config, profile, slowdown_bound)`` requests one after the other, as
        a round does, and return one outcome each (:meth:`place_unless_dominated`: a shape
        dominating one that already failed for lack of room is refused without a search).
        Bad input raises InvalidArgument at that request; the requests before it stay
        booked."""
        failed = FailedShapes()
        return [self.place_unless_dominated(job_id, config, profile, bound, failed,
                                            scorer=scorer)
                for job_id, config, profile, bound in requests]

    def release(self, job_id: str) -> Assignment:
        """Forget ``job_id``'s booking: free everything it booked; returns its assignment.
        NotFound if unknown."""
        return self.book.release(job_id)

    def rebook(self, a: Assignment, profile: JobProfile, bound: float, *,
               unhealthy_ok: bool = False) -> Assignment:
        """Book ``a`` again exactly as it was (same nodes, GPUs, shares, MIG starts): undoes a
        :meth:`release` when a planned move is abandoned, and enters a bound pod's booking when
        the Kubernetes loop rebuilds its book.  All or nothing: raises Infeasible, changing
        nothing, if any of those resources has been taken meanwhile.  ``unhealthy_ok``:
        ``a``'s GPUs may be unhealthy -- the booking of a pod that already runs there (the
        Kubernetes loop rebuilds its book from bound pods every round); the GPUs stay
        unhealthy, so nothing new is booked on them."""
        return self.book.rebook(a, profile, bound, unhealthy_ok=unhealthy_ok)

    # ----------------------------------------------------------------------------- checks
    def check_invariants(self, slowdown_model: SlowdownModel | None = None) -> None:
        """Recompute every booking from the assignments; AssertionError on any over-commit,
        invalid MIG geometry, a pod with a repeated GPU, per-GPU copies that do not match the
        parts, mismatch with the cached arrays (fragmentation cache included), or slowdown
        past a bound."""
        self.book.check_invariants()
        self.frag.check(self.book)
        jobs = self.book.jobs
        for j, s in self.predicted_slowdowns(slowdown_model).items():
            assert s <= jobs[j][2] + EPS, f"{j}: slowdown {s} > bound {jobs[j][2]}"
