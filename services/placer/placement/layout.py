"""The cluster's fixed shape, as flat arrays the placement code indexes.

Owns: :class:`Layout` -- the nodes, their capacities, which GPU model and topology domain
each has, the flat GPU numbering (node by node), and which GPUs are in MIG mode -- and
:func:`config_mig_profile`.  Nothing here changes after construction, so every copy of a book
shares one layout; a change of MIG mode (:meth:`Layout.with_mig_mode`, an empty node's GPUs)
makes a new layout for the one state that changes.
Who calls it: :class:`~elastico.placer.placement.ClusterState` builds it; the book, the fit,
scoring, gang and fragmentation modules read it.
Whom it calls: :mod:`elastico.mig` (MIG profile tables).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from elastico.errors import InvalidArgument, NotFound
from elastico.mig import COMPUTE_SLICES, MIG_PROFILES, MigProfile
from elastico.model import Configuration, Node

from .assignment import EPS

__all__ = ["TOPOLOGY_KEY", "Layout", "config_mig_profile"]

#: default node label naming a node's topology domain (gangs prefer one domain)
TOPOLOGY_KEY = "topology.kubernetes.io/zone"


def config_mig_profile(config: Configuration) -> MigProfile | None:
    """The MIG profile ``config`` asks for, or None (an MPS shape, or a model without a
    profile table)."""
    if config.mig_profile is None:
        return None
    table = MIG_PROFILES.get(config.gpu_model or "")
    return None if table is None else table.get(config.mig_profile)


class Layout:
    """Shape of a cluster: ``nodes`` in order, GPUs numbered flat node by node.

    Per node [N]: ``node_model`` (code into ``models``, first-seen order), ``domain`` (code
    into ``domain_names`` of the node's ``topology_key`` label, -1 without it), ``node_cpu``
    cores, ``node_mem`` GiB, and the same plus ``EPS`` (``node_cpu_cap``, ``node_mem_cap``:
    the sums every check forms).  ``offset`` [N + 1]: the flat index of each node's first GPU.
    Per GPU [G]: ``gpu_node``, ``gpu_local`` (index on its node), ``gpu_model``,
    ``gpu_cap_mem`` GiB (and ``gpu_mem_cap`` = + EPS), ``is_mig``, ``mig_cs`` (the model's
    SM slices on a MIG-mode GPU).  ``mig_models``: flat MIG GPU -> model; ``mig_nodes``:
    nodes with a MIG-mode GPU.  ``unhealthy``: flat GPUs the nodes report unhealthy at
    construction (the book's health starts from them).  Bad input -> InvalidArgument.
    """

    def __init__(self, nodes: Sequence[Node], mig_gpus: Iterable[tuple[int, int]] = (),
                 topology_key: str = TOPOLOGY_KEY):
        if not (isinstance(topology_key, str) and topology_key):
            raise InvalidArgument("topology_key", topology_key, "a non-empty node label key")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.topology_key = topology_key
        domains: dict[str, int] = {}  # label value -> domain index, first-seen order
        values = [dict(nd.labels).get(topology_key) for nd in self.nodes]
        self.domain = np.array([-1 if v is None else domains.setdefault(v, len(domains)) for v in values],
                               dtype=np.int64)
        self.domain_names = tuple(domains)
        n = len(self.nodes)
        counts = np.array([nd.num_gpus for nd in self.nodes], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.offset_list: list[int] = self.offset.tolist()
        G = int(self.offset[-1])
        self.models: dict[str, int] = {}
        for nd in self.nodes:
            self.models.setdefault(nd.gpu_model, len(self.models))
        self.node_model = np.array([self.models[nd.gpu_model] for nd in self.nodes], dtype=np.int64)
        self.model_max_gpus: dict[str, int] = {}
        for nd in self.nodes:
            self.model_max_gpus[nd.gpu_model] = max(self.model_max_gpus.get(nd.gpu_model, 0), nd.num_gpus)
        self.node_cpu = np.array([nd.cpu for nd in self.nodes], dtype=float)
        self.node_mem = np.array([nd.mem_gib for nd in self.nodes], dtype=float)
        self.gpu_node = np.repeat(np.arange(n, dtype=np.int64), counts)
        self.gpu_local = np.arange(G, dtype=np.int64) - self.offset[self.gpu_node]
        self.gpu_model = self.node_model[self.gpu_node] if G else np.zeros(0, np.int64)
        self.gpu_cap_mem = np.array([nd.gpu_mem_gib for nd in self.nodes for _ in range(nd.num_gpus)], float)
        self.node_cpu_cap = self.node_cpu + EPS   # capacity + tolerance, the same sums
        self.node_mem_cap = self.node_mem + EPS   # every check would form
        self.gpu_mem_cap = self.gpu_cap_mem + EPS
        self.unhealthy: list[int] = []
        for ni, nd in enumerate(self.nodes):
            for gi in nd.unhealthy_gpus:
                if not (isinstance(gi, (int, np.integer)) and 0 <= gi < nd.num_gpus):
                    raise InvalidArgument(f"nodes[{ni}].unhealthy_gpus", gi,
                                          f"GPU indices in 0..{nd.num_gpus - 1}")
                self.unhealthy.append(int(self.offset[ni]) + int(gi))
        self.is_mig = np.zeros(G, dtype=bool)
        self.mig_cs = np.full(G, COMPUTE_SLICES, dtype=np.int64)  # SM slices per MIG GPU
        self.mig_models: dict[int, str] = {}
        for pair in mig_gpus:
            try:
                ni, gi = (int(x) for x in pair)
            except (TypeError, ValueError):
                raise InvalidArgument("mig_gpus", pair, "(node_index, gpu_index) pairs") from None
            if not (0 <= ni < n and 0 <= gi < self.nodes[ni].num_gpus):
                raise InvalidArgument("mig_gpus", pair, "an existing (node_index, gpu_index)")
            self._check_mig_capable(ni, f"mig_gpus[{pair!r}]")
            self._set_mig(self.flat(ni, gi), True)
        self.mig_nodes = frozenset(int(self.gpu_node[f]) for f in self.mig_models)

    def _check_mig_capable(self, node_index: int, field: str) -> None:
        """InvalidArgument (``field``) unless the node's model can be in MIG mode."""
        model = self.nodes[node_index].gpu_model
        if not self.nodes[node_index].mig_capable or model not in MIG_PROFILES:
            raise InvalidArgument(field, model,
                                  f"a MIG-capable model with a profile table {sorted(MIG_PROFILES)}")

    def _set_mig(self, f: int, on: bool) -> None:
        """Flat GPU ``f`` in MIG mode (``on``) or in normal mode (``is_mig``, ``mig_cs``,
        ``mig_models``; ``mig_nodes`` is the caller's to refresh)."""
        model = self.nodes[int(self.gpu_node[f])].gpu_model
        self.is_mig[f] = on
        if on:  # the model's SM slices (7 on A100/H100/H200, 4 on A30; mig.py tables)
            self.mig_cs[f] = next(iter(MIG_PROFILES[model].values())).gpu_compute_slices
            self.mig_models[f] = model
        else:
            self.mig_cs[f] = COMPUTE_SLICES
            self.mig_models.pop(f, None)

    def with_mig_mode(self, node_index: int, gpu_indices: Iterable[int], on: bool) -> "Layout":
        """A copy of this layout with GPUs ``gpu_indices`` of node ``node_index`` in MIG mode
        (``on``) or in normal mode; everything else shared.  NotFound for a GPU that does not
        exist; InvalidArgument for MIG mode on a model without a MIG profile table.  The
        caller (:meth:`~elastico.placer.placement.ClusterState.set_mig_mode`) checks that the
        GPUs hold no booking."""
        flats = [self.flat(node_index, int(g)) for g in gpu_indices]
        if on:
            self._check_mig_capable(node_index, f"nodes[{node_index}].gpu_model")
        new = object.__new__(Layout)
        new.__dict__.update(self.__dict__)
        new.is_mig = self.is_mig.copy()
        new.mig_cs = self.mig_cs.copy()
        new.mig_models = dict(self.mig_models)
        for f in flats:
            new._set_mig(f, bool(on))
        new.mig_models = dict(sorted(new.mig_models.items()))  # flat order, as at construction
        new.mig_nodes = frozenset(int(self.gpu_node[f]) for f in new.mig_models)
        return new

    def mig_gpus(self) -> list[tuple[int, int]]:
        """``(node_index, gpu_index)`` of every GPU in MIG mode, in flat order."""
        return [(int(self.gpu_node[f]), int(self.gpu_local[f])) for f in self.mig_models]

    @property
    def num_gpus(self) -> int:
        return self.gpu_node.size

    def flat(self, node_index: int, gpu_index: int) -> int:
        """The flat index of GPU ``gpu_index`` of node ``node_index`` (NotFound if none)."""
        if not (0 <= node_index < len(self.nodes) and 0 <= gpu_index < self.nodes[node_index].num_gpus):
            raise NotFound(f"gpu: no GPU {gpu_index} on node {node_index}")
        return int(self.offset[node_index]) + gpu_index
