"""The placer's book: who holds which GPU share, GPU memory, MIG slot, CPU and host memory.

Owns: :class:`Book` -- per GPU the residents and their booked share and memory, MIG instance
state, health; per node the booked CPU and host memory; per job its assignment, profile and
slowdown bound -- and the one way each booking is entered and left.
Who calls it: :class:`~elastico.placer.placement.ClusterState` (which every caller goes
through), the scorers and gang placement of this package (they book what they chose).
Whom it calls: :mod:`elastico.mig` (MIG geometry), :class:`.mps.MpsRules` (a GPU's user code
follows its residents) and the hook ``node_changed`` (the fragmentation index,
:mod:`.frag_cache`, re-summarises a node whose bookings or health changed).

The life of a booking -- assume, then confirm or forget (STYLE.md 3; what the Kubernetes
scheduler cache does with AssumePod, FinishBinding and ForgetPod):

* **assumed**: ``ClusterState.place`` books a job the moment it decides (:meth:`Book.commit`,
  :meth:`Book.add`), on the round's own copy of the book (``ClusterState.copy``; ``run_round``
  keeps that copy or drops it whole).  From then on no other placement can take those
  resources.  A failed placement books nothing.
* **confirmed**: the booking stays when the bind succeeds (the simulator binds at once; the
  live loop writes the pod's ``elastico.io/booking`` and makes the Binding).  The live loop
  rebuilds its book from the pods every round, entering each bound or reserved pod's booking
  exactly as written with :meth:`Book.rebook` -- the watch confirming it (a pod that already
  runs keeps an unhealthy GPU: ``unhealthy_ok``).
* **forgotten**: :meth:`Book.release` when the bind fails, the job ends, or it moves to
  another configuration.  An abandoned move puts the old booking back with :meth:`Book.rebook`,
  all or nothing (Infeasible, changing nothing, if its resources were taken meanwhile).

Invariants, which :meth:`Book.check_invariants` recomputes from the assignments: per GPU the
booked shares sum to <= 1 (+EPS) and memory to <= the GPU's; a whole-GPU booking is alone;
MPS bookings only on GPUs not in MIG mode, MIG bookings at valid, non-overlapping slots of a
MIG-mode GPU; per node CPU and host memory never over-committed; a pod never repeats a GPU;
and every cached total (``used_share``, ``n_res``, MIG masks, node totals) equals the sum it
caches.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from elastico.errors import Infeasible, NotFound
from elastico.mig import MIG_PROFILES, MigGpu, MigProfile, mig_profile
from elastico.model import Configuration
from elastico.predictor import JobProfile

from .assignment import EPS, WHOLE, Assignment, Part
from .layout import Layout, config_mig_profile
from .mps import MpsRules

__all__ = ["Book"]


class Book:
    """Bookings on one :class:`~.layout.Layout` (module docstring: their life, invariants).

    Per GPU [G]: ``used_share`` (fraction of a GPU), ``used_mem`` (GiB), ``n_res`` (residents,
    a gang's copies counted), ``gpu_jobs`` (job id -> (share, GPU memory GiB, copies); copies
    > 1 only for the pods of a ``share_gpus`` gang packed onto one GPU), ``healthy``; MIG-mode
    GPUs: ``mig`` (flat GPU -> :class:`~elastico.mig.MigGpu`), ``mig_occ`` (memory-slice bit
    mask) and ``mig_comp`` (compute slices used).  Per node [N]: ``node_cpu_used``,
    ``node_mem_used`` and ``node_jobs`` (job id -> (cpu, mem)).  ``jobs``: job id ->
    (assignment, profile, slowdown bound).  ``mps_base``: per GPU model code, its healthy
    MPS GPUs (built on demand by :func:`.fit.eligible`; replaced, never changed, when health
    changes, so copies may share the arrays).  ``mps``: the MPS rules.  ``kept``: node
    index -> the job ids that alone may take its normal-mode GPUs (a lent MIG node,
    :meth:`~.state.ClusterState.keep_for`; :meth:`kept_off`).  ``node_changed``:
    called with the book and a node index after the node's bookings or health changed (or
    None)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        G, n = layout.num_gpus, len(layout.nodes)
        self.node_cpu_used = np.zeros(n)
        self.node_mem_used = np.zeros(n)
        self.node_jobs: list[dict[str, tuple[float, float]]] = [{} for _ in range(n)]  # cpu, mem
        self.used_share = np.zeros(G)
        self.used_mem = np.zeros(G)
        self.n_res = np.zeros(G, dtype=np.int64)
        self.mig_occ = np.zeros(G, dtype=np.int64)
        self.mig_comp = np.zeros(G, dtype=np.int64)
        self.mig: dict[int, MigGpu] = {f: MigGpu(model) for f, model in layout.mig_models.items()}
        self.gpu_jobs: list[dict[str, tuple[float, float, int]]] = [{} for _ in range(G)]
        self.healthy = np.ones(G, dtype=bool)
        self.healthy[layout.unhealthy] = False
        self.mps_base: dict[int, np.ndarray] = {}
        self.jobs: dict[str, tuple[Assignment, JobProfile, float]] = {}
        self.mps = MpsRules(G)
        self.kept: dict[int, frozenset[str]] = {}
        self.node_changed: Callable[["Book", int], None] | None = None

    def copy(self) -> "Book":
        """An independent copy (the layout shared, every booking copied; ``node_changed``
        still points at this book's hook: the owner rebinds it if that must change)."""
        new = object.__new__(Book)
        new.__dict__.update(self.__dict__)
        for name in ("node_cpu_used", "node_mem_used", "used_share", "used_mem", "n_res",
                     "mig_occ", "mig_comp", "healthy"):
            setattr(new, name, getattr(self, name).copy())
        new.node_jobs = [d.copy() for d in self.node_jobs]
        new.gpu_jobs = [d.copy() for d in self.gpu_jobs]
        new.mig = {f: m.copy() for f, m in self.mig.items()}
        new.mps_base = dict(self.mps_base)
        new.jobs = dict(self.jobs)
        new.mps = self.mps.copy()
        new.kept = dict(self.kept)
        return new

    def kept_off(self, job_id: str, config: Configuration) -> np.ndarray | None:
        """[N] nodes kept for jobs other than ``job_id`` (``kept``) that ``config``
        -- GPUs in normal mode -- could otherwise use; None when there are none.  MIG
        instances and CPU-only pods are never kept off: only normal-mode GPUs are kept."""
        if not self.kept or config.num_gpus == 0 or config.mig_profile is not None:
            return None
        L = self.layout
        code = L.models.get(config.gpu_model)
        off = [n for n, ids in self.kept.items()
               if job_id not in ids and L.node_model[n] == code]
        if not off:
            return None
        mask = np.zeros(len(L.nodes), dtype=bool)
        mask[off] = True
        return mask

    # ----------------------------------------------------------------------------- reading
    def assignment(self, job_id: str) -> Assignment:
        try:
            return self.jobs[job_id][0]
        except KeyError:
            raise NotFound(f"job_id: {job_id!r} is not placed") from None

    def residents(self, f: int) -> list[str]:
        """Job id of each resident of GPU ``f`` in placement order, repeated per copy."""
        d = self.gpu_jobs[f]
        if len(d) == self.n_res[f]:
            return list(d)
        return [j for j, v in d.items() for _ in range(v[2])]

    def gpu_profiles(self, f: int) -> tuple[list[JobProfile], list[float]]:
        """Profiles and bounds of GPU ``f``'s residents, one per copy (:meth:`residents`)."""
        ids = self.residents(f)
        return [self.jobs[j][1] for j in ids], [self.jobs[j][2] for j in ids]

    def gpu_model_of(self, a: Assignment) -> str:
        """The GPU model of ``a``'s nodes."""
        return self.layout.nodes[a.parts[0].node_index].gpu_model

    # ----------------------------------------------------------------------------- health
    def set_health(self, node_index: int, gpu_index: int, healthy: bool) -> list[str]:
        """Mark a GPU (un)healthy; returns the jobs booked on it.  NotFound if none."""
        f = self.layout.flat(node_index, gpu_index)
        self.healthy[f] = healthy
        self.mps_base = {}
        if self.node_changed is not None:
            self.node_changed(self, node_index)
        return list(self.gpu_jobs[f])

    def refresh_user_codes(self, job_id: str) -> None:
        """After ``job_id``'s MPS user changed: the user codes of its GPUs, if it is booked."""
        if job_id in self.jobs:
            for n, gi in self.jobs[job_id][0].gpus:
                g = self.layout.flat(n, gi)
                self.mps.code[g] = self.mps.user_code(self.gpu_jobs[g])

    # ----------------------------------------------------------------------------- assume
    def commit(self, job_id, config, profile, bound, n: int, chosen: list[int]) -> Assignment:
        """Book a one-node, one-pod placement: ``chosen`` flat GPUs of node ``n`` (MIG start
        slots chosen here, before anything changes)."""
        p = config_mig_profile(config)
        starts: list[int] = []
        if p is not None:  # compute every start before changing anything (all or nothing)
            for g in chosen:
                s = self.mig[g].best_start(p)
                assert s is not None, "eligible MIG GPU without a free start"
                starts.append(s)
        local = self.layout.gpu_local
        part = Part(self.layout.nodes[n].name, n, tuple(int(local[g]) for g in chosen),
                    float(config.cpu), float(config.mem_gib), tuple(starts))
        return self.add(job_id, config, profile, bound, (part,))

    def add(self, job_id, config: Configuration, profile, bound, parts: tuple[Part, ...]) -> Assignment:
        """Book ``parts`` (MIG starts given, already checked free) for ``job_id``."""
        p = config_mig_profile(config)
        has_gpus = any(pt.gpu_indices for pt in parts)
        if p is not None:
            share = p.share
            mem = float(self.layout.nodes[parts[0].node_index].gpu_mem_gib) * p.memory_fraction
        else:
            share, mem = float(config.gpu_share), float(config.gpu_mem_gib)
        a = Assignment(
            job_id=job_id,
            parts=tuple(parts),
            gpu_share=share if has_gpus else 0.0,
            gpu_mem_gib=mem if has_gpus else 0.0,
            mig_profile=config.mig_profile,
            config_name=config.name,
            gpu_model=config.gpu_model if has_gpus else None,
        )
        self._enter(a, p)
        self.jobs[job_id] = (a, profile, bound)
        return a

    def _enter(self, a: Assignment, p: MigProfile | None) -> None:
        job_id = a.job_id
        offset = self.layout.offset
        host: dict[int, tuple[float, float]] = {}
        for pt in a.parts:
            for i, gi in enumerate(pt.gpu_indices):
                g = int(offset[pt.node_index]) + gi
                if p is not None:
                    self.mig[g].place(p, pt.mig_starts[i])
                    self.mig_occ[g] = self.mig[g].occupied_mask
                    self.mig_comp[g] = self.mig[g].compute_used
                prev = self.gpu_jobs[g].get(job_id)
                self.gpu_jobs[g][job_id] = (a.gpu_share, a.gpu_mem_gib, 1 if prev is None else prev[2] + 1)
                self._refresh_gpu(g)
            if pt.node_index in host:
                c, m = host[pt.node_index]
                host[pt.node_index] = (c + pt.cpu, m + pt.mem_gib)
            else:
                host[pt.node_index] = (pt.cpu, pt.mem_gib)
        for n, cm in host.items():
            self.node_jobs[n][job_id] = cm
            self._refresh_node(n)

    def _refresh_gpu(self, g: int) -> None:
        vals = self.gpu_jobs[g].values()
        self.used_share[g] = math.fsum(v[0] * v[2] for v in vals)
        self.used_mem[g] = math.fsum(v[1] * v[2] for v in vals)
        self.n_res[g] = sum(v[2] for v in vals)
        mps = self.mps
        if mps.users:  # (none in the simulator: every code stays -1)
            mps.code[g] = mps.user_code(self.gpu_jobs[g])

    def _refresh_node(self, n: int) -> None:
        vals = self.node_jobs[n].values()
        self.node_cpu_used[n] = math.fsum(v[0] for v in vals)
        self.node_mem_used[n] = math.fsum(v[1] for v in vals)
        if self.node_changed is not None:
            self.node_changed(self, n)

    # ----------------------------------------------------------------------------- forget
    def release(self, job_id: str) -> Assignment:
        """Free everything ``job_id`` booked; returns its assignment.  NotFound if unknown."""
        a = self.assignment(job_id)
        flat = self.layout.flat
        for pt in a.parts:
            for i, gi in enumerate(pt.gpu_indices):
                g = flat(pt.node_index, gi)
                if a.mig_profile is not None:
                    self.mig[g].release(pt.mig_starts[i])
                    self.mig_occ[g] = self.mig[g].occupied_mask
                    self.mig_comp[g] = self.mig[g].compute_used
                v = self.gpu_jobs[g][job_id]
                if v[2] > 1:
                    self.gpu_jobs[g][job_id] = (v[0], v[1], v[2] - 1)
                else:
                    del self.gpu_jobs[g][job_id]
                self._refresh_gpu(g)
        for n in a.node_indices:
            del self.node_jobs[n][job_id]
            self._refresh_node(n)
        del self.jobs[job_id]
        return a

    # ----------------------------------------------------------------------------- confirm
    def rebook(self, a: Assignment, profile: JobProfile, bound: float, *,
               unhealthy_ok: bool = False) -> Assignment:
        """Book ``a`` again exactly as it was (same nodes, GPUs, shares, MIG starts), all or
        nothing: raises Infeasible, changing nothing, if any of those resources has been
        taken meanwhile.  ``unhealthy_ok``: ``a``'s GPUs may be unhealthy (a pod that already
        runs there); they stay unhealthy, so nothing new is booked on them."""
        if a.job_id in self.jobs:
            raise Infeasible(f"job {a.job_id!r} is already booked")
        L = self.layout
        cpu: dict[int, list[float]] = {}
        hmem: dict[int, list[float]] = {}
        per_gpu: dict[int, int] = {}
        for pt in a.parts:
            cpu.setdefault(pt.node_index, []).append(pt.cpu)
            hmem.setdefault(pt.node_index, []).append(pt.mem_gib)
            for gi in pt.gpu_indices:
                g = L.flat(pt.node_index, gi)
                per_gpu[g] = per_gpu.get(g, 0) + 1
        for n in cpu:
            if self.node_cpu_used[n] + math.fsum(cpu[n]) > L.node_cpu[n] + EPS or \
                    self.node_mem_used[n] + math.fsum(hmem[n]) > L.node_mem[n] + EPS:
                raise Infeasible(f"job {a.job_id!r}: node {L.nodes[n].name} no longer has its CPU/memory free")
        where = {}
        for g in per_gpu:
            where[g] = f"GPU {L.gpu_local[g]} of {L.nodes[int(L.gpu_node[g])].name}"
            if not self.healthy[g] and not unhealthy_ok:
                raise Infeasible(f"job {a.job_id!r}: {where[g]} is unhealthy")
        prof = None
        if a.mig_profile is not None:
            prof = mig_profile(self.gpu_model_of(a), a.mig_profile)
            trial = {g: self.mig[g].copy() for g in per_gpu}
            for pt in a.parts:
                for gi, st in zip(pt.gpu_indices, pt.mig_starts):
                    g = int(L.offset[pt.node_index]) + gi
                    if st not in trial[g].free_starts(prof):
                        raise Infeasible(f"job {a.job_id!r}: MIG slot {st} taken on {where[g]}")
                    trial[g].place(prof, st)
        else:
            for g, c in per_gpu.items():
                if self.used_share[g] + c * a.gpu_share > 1.0 + EPS:
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} no longer has its share free")
                if self.used_mem[g] + c * a.gpu_mem_gib > L.gpu_cap_mem[g] + EPS:
                    free = L.gpu_cap_mem[g] - self.used_mem[g]
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} has {free:g} GiB of GPU "
                                     f"memory free, the booking needs {c * a.gpu_mem_gib:g}")
                if a.gpu_share >= WHOLE and self.n_res[g] > 0:
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} is no longer free for a whole GPU")
        self._enter(a, prof)
        self.jobs[a.job_id] = (a, profile, bound)
        return a

    # ----------------------------------------------------------------------------- checks
    def check_invariants(self) -> None:
        """Recompute every booking from the assignments (module docstring); AssertionError on
        any over-commit, invalid MIG geometry, a pod with a repeated GPU, per-GPU copies that
        do not match the parts, or a cached total that differs."""
        L = self.layout
        G = L.num_gpus
        share = [[] for _ in range(G)]
        mem = [[] for _ in range(G)]
        cpu = [[] for _ in L.nodes]
        hmem = [[] for _ in L.nodes]
        mig_occ = [0] * G
        mig_comp = [0] * G
        for j, (a, _, _) in self.jobs.items():
            copies: dict[int, int] = {}
            assert a.parts, f"{j}: no part"
            for pt in a.parts:
                node = L.nodes[pt.node_index]
                assert node.name == pt.node, f"{j}: node name mismatch"
                assert len(set(pt.gpu_indices)) == len(pt.gpu_indices), f"{j}: repeated GPU in one pod"
                if pt.gpu_indices:
                    assert a.gpu_model == node.gpu_model, f"{j}: model {a.gpu_model} on {node.gpu_model}"
                cpu[pt.node_index].append(pt.cpu)
                hmem[pt.node_index].append(pt.mem_gib)
                for i, gi in enumerate(pt.gpu_indices):
                    g = L.flat(pt.node_index, gi)
                    copies[g] = copies.get(g, 0) + 1
                    share[g].append(a.gpu_share)
                    mem[g].append(a.gpu_mem_gib)
                    if a.mig_profile is None:
                        assert not L.is_mig[g], f"{j}: MPS job on MIG GPU {pt.node_index}/{gi}"
                        if a.gpu_share >= WHOLE:
                            assert self.n_res[g] == 1, f"{j}: whole GPU shared"
                    else:
                        assert L.is_mig[g], f"{j}: MIG job on non-MIG GPU {pt.node_index}/{gi}"
                        p = MIG_PROFILES[node.gpu_model][a.mig_profile]
                        s = pt.mig_starts[i]
                        assert s in p.starts, f"{j}: invalid start {s} for {p.name}"
                        assert not mig_occ[g] & p.mask(s), f"{j}: MIG slices overlap on {pt.node_index}/{gi}"
                        mig_occ[g] |= p.mask(s)
                        mig_comp[g] += p.compute_slices
            for g, c in copies.items():
                assert self.gpu_jobs[g].get(j, (0, 0, 0))[2] == c, f"{j}: copies on GPU {g} differ"
        for g in range(G):
            assert math.fsum(share[g]) <= 1.0 + EPS, f"GPU {g}: compute {math.fsum(share[g])} > 1"
            assert math.fsum(mem[g]) <= L.gpu_cap_mem[g] + EPS, f"GPU {g}: memory over capacity"
            assert mig_comp[g] <= L.mig_cs[g], f"GPU {g}: MIG compute slices {mig_comp[g]} > {L.mig_cs[g]}"
            assert mig_occ[g] == int(self.mig_occ[g]), f"GPU {g}: cached MIG mask differs"
            if g in self.mig:
                assert self.mig[g].occupied_mask == mig_occ[g], f"GPU {g}: MIG state differs"
            assert abs(math.fsum(share[g]) - self.used_share[g]) <= EPS, f"GPU {g}: cached share differs"
            assert len(share[g]) == self.n_res[g] == sum(v[2] for v in self.gpu_jobs[g].values()), \
                f"GPU {g}: resident count differs"
        for n, nd in enumerate(L.nodes):
            assert math.fsum(cpu[n]) <= nd.cpu + EPS, f"node {nd.name}: cpu over-committed"
            assert math.fsum(hmem[n]) <= nd.mem_gib + EPS, f"node {nd.name}: memory over-committed"
            assert abs(math.fsum(cpu[n]) - self.node_cpu_used[n]) <= 1e-6, f"node {nd.name}: cached cpu differs"
