"""Which GPUs and nodes could take a configuration now, ignoring interference -- and why none.

Owns: the checks of a placement request (:func:`validate`), the eligibility masks every
scorer starts from (:func:`host_ok`, :func:`eligible`), the candidate nodes and their GPUs
(:func:`candidates`, :func:`fits`), how many pods of a gang's shape each node could take
(:func:`unit_capacity`), and the words for a shape that fits nowhere (the binding constraint,
named on the GPU or node closest to fitting).
Who calls it: :class:`~elastico.placer.placement.ClusterState`, the scorers
(:mod:`.scoring`), gang placement (:mod:`.gangs`) and the MPS rules (:mod:`.mps`).
Whom it calls: nothing of the placer: it reads a :class:`~.book.Book` and its
:class:`~.layout.Layout` (numpy over flat per-GPU arrays).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from elastico.errors import InvalidArgument
from elastico.mig import MIG_PROFILES
from elastico.model import Configuration
from elastico.predictor import JobProfile

from .assignment import EPS, WHOLE
from .layout import config_mig_profile

if TYPE_CHECKING:
    from .book import Book

__all__ = ["validate", "host_ok", "eligible", "candidates", "fits", "unit_capacity", "gpu_phrase"]


def validate(book: "Book", job_id: str, config: Configuration, profile: JobProfile, bound: float) -> None:
    """InvalidArgument unless ``job_id`` is not booked yet and ``config``, ``profile`` and
    ``bound`` make a placement request."""
    if job_id in book.jobs:
        raise InvalidArgument("job_id", job_id, "a job that is not placed yet (release it first)")
    if not isinstance(config, Configuration):
        raise InvalidArgument("config", type(config).__name__, "an elastico.model.Configuration")
    if config.is_wait:
        raise InvalidArgument("config", config.name, "a non-wait configuration (wait needs no placement)")
    if not isinstance(profile, JobProfile):
        raise InvalidArgument("profile", type(profile).__name__, "an elastico.predictor.JobProfile")
    if not (isinstance(bound, (int, float)) and bound >= 1.0 and not math.isnan(bound)):
        raise InvalidArgument("slowdown_bound", bound, "a number >= 1")
    if not (isinstance(config.num_gpus, int) and config.num_gpus >= 0):
        raise InvalidArgument("config.num_gpus", config.num_gpus, "an integer >= 0")
    for name in ("cpu", "mem_gib", "gpu_mem_gib"):
        v = getattr(config, name)
        if not (math.isfinite(v) and v >= 0):
            raise InvalidArgument(f"config.{name}", v, "finite and >= 0")
    if config.num_gpus:
        if config.gpu_model is None:
            raise InvalidArgument("config.gpu_model", None, "a GPU model when num_gpus > 0")
        if not (0.0 < config.gpu_share <= 1.0):
            raise InvalidArgument("config.gpu_share", config.gpu_share, "a fraction in (0, 1]")
    if config.mig_profile is not None:
        if not config.num_gpus:
            raise InvalidArgument("config.mig_profile", config.mig_profile, "only with num_gpus > 0")
        table = MIG_PROFILES.get(config.gpu_model or "")
        if table is not None:
            p = table.get(config.mig_profile)
            if p is None:
                raise InvalidArgument("config.mig_profile", config.mig_profile, f"one of {list(table)}")
            if abs(config.gpu_share - p.share) > 1e-3:
                raise InvalidArgument(
                    "config.gpu_share", config.gpu_share,
                    f"{p.share:.6f} = {p.compute_slices}/{p.gpu_compute_slices} for MIG profile {p.name}",
                )


def host_ok(book: "Book", config: Configuration) -> np.ndarray:
    """[N] nodes with ``config``'s CPU and host memory free."""
    L = book.layout
    return (book.node_cpu_used + config.cpu <= L.node_cpu_cap) & (
        book.node_mem_used + config.mem_gib <= L.node_mem_cap
    )


def eligible(book: "Book", config: Configuration, leftover: bool = True
             ) -> tuple[np.ndarray, np.ndarray | None] | str:
    """(eligible flat GPU mask, leftover free share per GPU after placement -- None unless
    ``leftover``) or a reason."""
    L = book.layout
    model = config.gpu_model
    code = L.models.get(model) if model is not None else None
    if code is None:
        return f"no node with GPU model {model}"
    share = config.gpu_share
    if config.mig_profile is not None:
        same = L.gpu_model == code
        p = config_mig_profile(config)
        if p is None or not (same & L.is_mig).any():
            return f"no MIG-mode GPU of model {model}"
        mem_ok = L.gpu_cap_mem * p.memory_fraction + EPS >= config.gpu_mem_gib
        fits = np.zeros_like(same)
        for s in p.starts:
            fits |= (book.mig_occ & p.mask(s)) == 0
        elig = same & L.is_mig & book.healthy & fits & mem_ok & (book.mig_comp + p.compute_slices <= L.mig_cs)
        left = (L.mig_cs - book.mig_comp - p.compute_slices) / L.mig_cs
        return elig, left
    base = book.mps_base.get(code)
    if base is None:
        same = L.gpu_model == code
        if not (same & ~L.is_mig).any():  # MIG mode is fixed at construction
            return f"no MPS (non-MIG) GPU of model {model}"
        base = book.mps_base[code] = same & ~L.is_mig & book.healthy
    elig = (
        base
        & (book.used_share + share <= 1.0 + EPS)
        & (book.used_mem + config.gpu_mem_gib <= L.gpu_mem_cap)
    )
    if share >= WHOLE:
        elig &= book.n_res == 0
    return elig, (1.0 - book.used_share - share) if leftover else None


def candidates(book: "Book", config: Configuration):
    """(candidate node indices, {node: [flat GPU indices]}) or a reason string."""
    L = book.layout
    host = host_ok(book, config)
    if config.num_gpus == 0:
        ok = host if config.gpu_model is None else host & (L.node_model == L.models.get(config.gpu_model, -1))
        nodes = np.flatnonzero(ok)
        if nodes.size == 0:
            return f"no node with cpu {config.cpu:g} cores and memory {config.mem_gib:g} GiB free"
        return nodes, {int(n): [] for n in nodes}
    e = eligible(book, config)
    if isinstance(e, str):
        return e
    elig, _ = e
    counts = np.bincount(L.gpu_node[elig], minlength=len(L.nodes))
    gpu_ok = counts >= config.num_gpus
    if not gpu_ok.any():
        return f"no node with {gpu_phrase(config)}{_why_no_gpus(book, config, counts)}"
    both = gpu_ok & host
    if not both.any():
        return (
            f"no node with {gpu_phrase(config)} that also has cpu {config.cpu:g} cores "
            f"and memory {config.mem_gib:g} GiB free{_why_no_host(book, config, gpu_ok)}"
        )
    nodes = np.flatnonzero(both)
    idx = np.flatnonzero(elig & both[L.gpu_node])
    by: dict[int, list[int]] = {int(n): [] for n in nodes}
    for g, n in zip(idx.tolist(), L.gpu_node[idx].tolist()):
        by[n].append(g)
    return nodes, by


def fits(book: "Book", config: Configuration) -> list[tuple[int, tuple[int, ...]]]:
    """Nodes that can host ``config`` ignoring interference: ``(node_index, GPU indices
    that could take one member)``, nodes in index order, GPUs in index order."""
    plan = candidates(book, config)
    if isinstance(plan, str):
        return []
    nodes, gpus_by_node = plan
    local = book.layout.gpu_local
    return [(int(n), tuple(int(local[g]) for g in sorted(gpus_by_node[n]))) for n in nodes]


def unit_capacity(book: "Book", unit: Configuration, share_gpus: bool) -> np.ndarray:
    """[N] how many pods of shape ``unit`` each node could take now, ignoring slowdown
    bounds: exact without ``share_gpus`` (distinct GPUs), an upper bound with it."""
    L = book.layout
    N = len(L.nodes)
    big = np.iinfo(np.int64).max // 4
    cap = np.full(N, big, dtype=np.int64)
    if unit.cpu > 0:
        free = L.node_cpu - book.node_cpu_used + EPS
        cap = np.minimum(cap, np.floor(free / unit.cpu).astype(np.int64))
    if unit.mem_gib > 0:
        free = L.node_mem - book.node_mem_used + EPS
        cap = np.minimum(cap, np.floor(free / unit.mem_gib).astype(np.int64))
    if unit.num_gpus == 0:
        if unit.gpu_model is not None:
            cap[L.node_model != L.models.get(unit.gpu_model, -1)] = 0
        return np.maximum(cap, 0)
    e = eligible(book, unit)
    if isinstance(e, str):
        return np.zeros(N, dtype=np.int64)
    elig = e[0]
    p = config_mig_profile(unit)
    if not share_gpus or (p is None and unit.gpu_share >= WHOLE):
        slots = elig.astype(np.int64)
    elif p is not None:
        slots = np.where(elig, (L.mig_cs - book.mig_comp) // p.compute_slices, 0)
    else:
        slots = np.floor((1.0 - book.used_share + EPS) / unit.gpu_share)
        if unit.gpu_mem_gib > 0:
            slots = np.minimum(slots, np.floor((L.gpu_cap_mem - book.used_mem + EPS) / unit.gpu_mem_gib))
        slots = np.where(elig, slots, 0).astype(np.int64)
    per_node = np.bincount(L.gpu_node, weights=slots, minlength=N).astype(np.int64)
    return np.maximum(np.minimum(cap, per_node // unit.num_gpus), 0)


# --------------------------------------------------------------------------- why not
def gpu_phrase(config: Configuration) -> str:
    k, m = config.num_gpus, config.gpu_model
    if config.mig_profile is not None:
        return f"{k} GPU(s) of model {m} with a free {config.mig_profile} MIG slot for {config.gpu_mem_gib:g} GiB"
    return f"{k} GPU(s) of model {m} with share {config.gpu_share:g} and memory {config.gpu_mem_gib:g} GiB free"


def _holders(book: "Book", g: int) -> str:
    """``held by <job> (<share>, <GiB>), ...`` for GPU ``g``'s residents (three at most)."""
    items = list(book.gpu_jobs[g].items())
    if not items:
        return "no resident"
    out = ", ".join(f"{j} ({v[0]:g} of the GPU, {v[1]:g} GiB)" for j, v in items[:3])
    return "held by " + out + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def _why_no_gpus(book: "Book", config: Configuration, counts: np.ndarray) -> str:
    """``: <binding constraint> ...`` for a configuration no node has the GPUs for
    (``counts``: eligible GPUs per node): unhealthy GPUs, GPU share or GPU memory, named
    on the GPU closest to fitting with the jobs that hold it.  "" for MIG shapes (their
    phrase names the slot)."""
    if config.mig_profile is not None:
        return ""
    L = book.layout
    code = L.models.get(config.gpu_model or "")
    same = (L.gpu_model == code) & ~L.is_mig
    good = same & book.healthy
    sick = int((same & ~book.healthy).sum())
    k = config.num_gpus
    per_node = np.bincount(L.gpu_node[good], minlength=len(L.nodes))
    if per_node.max(initial=0) < k:
        return (f": unhealthy GPUs: at most {int(per_node.max(initial=0))} healthy GPU(s) of "
                f"model {config.gpu_model} on one node ({sick} unhealthy)")
    if counts.max(initial=0) > 0:  # some GPUs fit, too few on one node
        n = int(np.argmax(counts))
        return (f": at most {int(counts[n])} such GPU(s) on one node "
                f"({L.nodes[n].name})")
    share_ok = book.used_share + config.gpu_share <= 1.0 + EPS
    if config.gpu_share >= WHOLE:
        share_ok &= book.n_res == 0
    mem_ok = book.used_mem + config.gpu_mem_gib <= L.gpu_mem_cap
    free_mem = L.gpu_cap_mem - book.used_mem
    if (good & share_ok).any():  # the share is there, the memory is not
        g = int(np.argmax(np.where(good & share_ok, free_mem, -np.inf)))
        what = (f"GPU memory: GPU {int(L.gpu_local[g])} of node "
                f"{L.nodes[int(L.gpu_node[g])].name} has the share but "
                f"{free_mem[g]:g} of {L.gpu_cap_mem[g]:g} GiB free")
    else:
        free = np.where(good, 1.0 - book.used_share, -np.inf)
        g = int(np.argmax(free))
        extra = "" if mem_ok[g] else f" and {free_mem[g]:g} GiB"
        what = (f"GPU share: the freest GPU, GPU {int(L.gpu_local[g])} of node "
                f"{L.nodes[int(L.gpu_node[g])].name}, has {max(0.0, free[g]):g} of the "
                f"GPU{extra} free")
    return f": {what}, {_holders(book, g)}"


def _why_no_host(book: "Book", config: Configuration, gpu_ok: np.ndarray) -> str:
    """``: host CPU|memory: ...`` for a configuration whose GPUs only nodes without the
    host resources have (``gpu_ok``), named on the freest such node."""
    L = book.layout
    cpu_free = L.node_cpu - book.node_cpu_used
    mem_free = L.node_mem - book.node_mem_used
    cpu_ok = gpu_ok & (book.node_cpu_used + config.cpu <= L.node_cpu_cap)
    if cpu_ok.any():  # CPU is there, host memory is not
        n = int(np.argmax(np.where(cpu_ok, mem_free, -np.inf)))
        return (f": host memory: node {L.nodes[n].name} has {mem_free[n]:g} of "
                f"{L.node_mem[n]:g} GiB free")
    n = int(np.argmax(np.where(gpu_ok, cpu_free, -np.inf)))
    return f": host CPU: node {L.nodes[n].name} has {cpu_free[n]:g} of {L.node_cpu[n]:g} cores free"
