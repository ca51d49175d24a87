"""Cluster definitions for ``elastico evaluate``: the trace's own GPU mix, or a YAML file.

Who calls it: :mod:`elastico.sim.evaluate` and its CLI.  Whom it calls: PyYAML (safe loader),
:mod:`elastico.hardware` (GPU memory per model, the GPU catalogue), :mod:`elastico.trace` (the
trace's sub-cluster) and the throughput model (which GPU models have a speed).  No clock, no
global state.

A cluster definition (e.g. ``data/clusters/a100-mig.yaml``)::

    name: a100                       # cluster label prefix: a100-64, a100-512, ...
    description: free text           # optional
    pools:                           # one or more node pools
      - gpu_model: A100-80GB         # a model the throughput model knows (its GPU memory:
                                     #   the catalogue's, elastico.hardware.GPU_MEMORY_GIB)
        gpus_per_node: 8             # integer 1..64
        cpu_cores: 128               # > 0
        mem_gib: 2048                # > 0
        fraction: 0.5                # share of the cluster's GPUs, (0, 1]; pools sum to 1
        gpu_mem_gib: 80              # optional, default GPU_MEMORY_GIB[gpu_model]; must
                                     #   equal it where the catalogue has the model (the
                                     #   bundled files leave it out), required where it
                                     #   lacks it
        mig_gpus_per_node: 4         # optional, default 0: GPUs of each node (the first ones)
                                     #   the operator puts in MIG mode for a MIG-aware policy

A cluster of ``N`` GPUs gets ``N x fraction / gpus_per_node`` nodes of each pool, which must
be a whole number (else :class:`~elastico.errors.InvalidArgument` naming the pool and N).
Unknown keys, missing keys, wrong types and out-of-range values are refused with the field
path (``pools[1].fraction``), the value and what is allowed; a key given twice in one mapping
with its line.

MIG mode.  ``mig_gpus_per_node`` (only on models with a MIG profile table,
:data:`elastico.mig.MIG_PROFILES`) is carried on each built node as the label
:data:`MIG_GPUS_LABEL`; :func:`mig_gpus_of` turns the labels into the ``(node, GPU)`` pairs a
:class:`~elastico.placer.placement.ClusterState` puts in MIG mode.  MIG mode is an operator's
setting (a GPU reset, not a scheduling decision), so the simulator applies it only for
policies that can use MIG instances (``uses_mig``); MIG-unaware policies (the baselines) run
on the same nodes with every GPU in normal mode, as an operator would configure it for them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from elastico.errors import InvalidArgument
from elastico.model import MIG_GPUS_LABEL, Node
from elastico.trace import MAX_GPUS_PER_NODE, MAX_QUANTITY

__all__ = ["ClusterSpec", "Pool", "TRACE", "MAX_CLUSTER_GPUS", "load_cluster", "parse_cluster",
           "bundled_clusters"]

#: the cluster name of the trace's own GPU mix (:func:`elastico.trace.sub_cluster`)
TRACE = "trace"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_TOP = {"name": True, "description": False, "pools": True}
_POOL = {"gpu_model": True, "gpus_per_node": True, "cpu_cores": True, "mem_gib": True,
         "fraction": True, "gpu_mem_gib": False, "mig_gpus_per_node": False}
@dataclass(frozen=True)
class Pool:
    gpu_model: str
    gpus_per_node: int
    cpu_cores: float
    mem_gib: float
    fraction: float
    gpu_mem_gib: float
    mig_gpus_per_node: int = 0


#: the largest cluster a definition builds, GPUs: 64k, above the largest GPU clusters
#: reported (e.g. Meta's two 24,576-GPU clusters, 2024) and a multiple of every bundled
#: definition's whole-node step; a larger size would only cost minutes and GiB to build
MAX_CLUSTER_GPUS = 65_536


@dataclass(frozen=True)
class ClusterSpec:
    """A named cluster family: ``nodes(gpus)`` builds the N-GPU member.  ``pools`` is empty for
    the trace's own mix (built by :func:`elastico.trace.sub_cluster`)."""

    name: str
    description: str = ""
    pools: tuple[Pool, ...] = ()
    source: str = ""

    def whole_node_step(self) -> int | None:
        """The smallest GPU count that gives every pool whole nodes (every allowed count is a
        multiple of it); None for the trace's own mix or where the fractions are not simple
        ratios (denominators above 10^6)."""
        if not self.pools:
            return None
        from fractions import Fraction
        from math import gcd, lcm

        step = 1
        for p in self.pools:
            f = Fraction(p.fraction).limit_denominator(10 ** 6)
            if abs(float(f) - p.fraction) > 1e-12:
                return None
            # gpus x f.num / (f.den x gpus_per_node) whole <=> gpus a multiple of this
            d = f.denominator * p.gpus_per_node
            step = lcm(step, d // gcd(f.numerator, d))
        return step

    def label(self, gpus: int) -> str:
        return f"{self.name}-{gpus}"

    def nodes(self, gpus: int, trace_nodes: Sequence[Node] | None = None) -> list[Node]:
        """The ``gpus``-GPU cluster.  The trace mix needs ``trace_nodes``
        (:func:`elastico.trace.read_nodes`); InvalidArgument if ``gpus`` cannot be built."""
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
            raise InvalidArgument("gpus", gpus, "must be a positive integer")
        if self.pools and gpus > MAX_CLUSTER_GPUS:
            # a size nobody simulates would build millions of nodes first (minutes, GiB)
            raise InvalidArgument("gpus", gpus, f"at most {MAX_CLUSTER_GPUS:,} for a cluster "
                                  "definition")
        if not self.pools:
            from elastico import trace

            return trace.sub_cluster(trace_nodes if trace_nodes is not None
                                     else trace.read_nodes(), gpus)
        out: list[Node] = []
        seen: dict[str, int] = {}  # nodes named so far per GPU model (pools may share one)
        # the file, so an error is traced to what the user typed (a100-mig.yaml names itself a100)
        where = f" ({Path(self.source).name})" if self.source else ""
        for i, p in enumerate(self.pools):
            share = gpus * p.fraction / p.gpus_per_node
            count = round(share)
            if abs(share - count) > 1e-9:
                raise InvalidArgument(
                    "gpus", gpus, f"cluster {self.name!r}{where}: pools[{i}] ({p.gpu_model}) would get "
                    f"{gpus} x {p.fraction:g} / {p.gpus_per_node} = {share:g} nodes; choose a GPU "
                    f"count that gives every pool whole nodes" + (
                        f" (a multiple of {step}: {step}, {2 * step}, {3 * step}, ...)"
                        if (step := self.whole_node_step()) else ""))
            labels = ((MIG_GPUS_LABEL, str(p.mig_gpus_per_node)),) if p.mig_gpus_per_node else ()
            first = seen.get(p.gpu_model, 0)
            seen[p.gpu_model] = first + count
            out += [Node(f"{self.name}-{p.gpu_model.lower()}-{k:04d}", p.gpu_model,
                         p.gpus_per_node, p.gpu_mem_gib, p.cpu_cores, p.mem_gib, labels)
                    for k in range(first, first + count)]
        return out


def bundled_clusters() -> dict[str, Path]:
    """Bundled definitions by file stem (``data/clusters/*.yaml``)."""
    from elastico.paths import data_dir

    folder = data_dir() / "clusters"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def load_cluster(ref: str) -> ClusterSpec:
    """``trace`` (the trace's own GPU mix), a bundled definition's name (``a100-mig``) or a
    path to a YAML file.  InvalidArgument for an unknown name, an unreadable file, bad YAML
    or a bad definition (:func:`parse_cluster`)."""
    if ref == TRACE:
        return ClusterSpec(TRACE, "the Alibaba trace's own GPU mix (docs/model.md, 1.)")
    bundled = bundled_clusters()
    path = bundled.get(ref) or Path(ref)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        raise InvalidArgument("cluster", ref, "'trace', a bundled cluster ("
                              + ", ".join(bundled) + ") or an existing .yaml file")
    # "cluster" is the reference itself (the caller puts its flag there); a bad definition
    # names the field inside the file (pools[0].fraction) and the caller prefixes the file
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument("cluster", str(path), f"could not be read: {e}") from None
    try:
        doc = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
        raise InvalidArgument("cluster", str(path), f"valid YAML; {at}"
                                                    f"{getattr(e, 'problem', None) or e}") from None
    return parse_cluster(doc, source=str(path))


def _unique_key_loader() -> type:
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error (YAML
    1.2, 3.2.1.1: keys are unique; PyYAML keeps the last silently, yaml/pyyaml#165), so a
    definition edited twice cannot quietly lose its first value.  Keys merged in with ``<<``
    may still be overridden, as YAML's merge-key spec allows."""
    import yaml
    from yaml.constructor import ConstructorError

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base constructor says so
                    break
                if dup:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"found duplicate key {key!r}", key_node.start_mark)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def _field(where: str, doc: dict, key: str, kind: str, lo: float | None = None,
           hi: float | None = None, lo_open: bool = False) -> Any:
    v = doc[key]
    name = f"{where}{key}"
    if kind == "str":
        if not isinstance(v, str) or not v.strip():
            raise InvalidArgument(name, v, "a non-empty string")
        return v
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise InvalidArgument(name, v, f"an integer in {lo:g}..{hi:g}")
    else:
        what = "a finite number" + (f" in ({lo:g}, {hi:g}]" if hi else f" in ({lo:g}, {MAX_QUANTITY:g}]")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgument(name, v, what)
        try:  # a YAML integer can be beyond float range
            finite = math.isfinite(v) and float(v) <= MAX_QUANTITY
        except OverflowError:
            finite = False
        if not finite:
            raise InvalidArgument(name, v, what)
    if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        rng = (f"in ({lo:g}, {hi:g}]" if lo_open else f"in {lo:g}..{hi:g}") if hi is not None \
            else f"> {lo:g}"
        raise InvalidArgument(name, v, f"must be {rng}")
    return v


_KIND = {"list": "a list", "NoneType": "nothing (an empty document)", "str": "a string",
         "int": "a number", "float": "a number", "bool": "a boolean"}


def _keys(where: str, doc: Any, allowed: dict[str, bool]) -> None:
    if not isinstance(doc, dict):
        got = _KIND.get(type(doc).__name__, type(doc).__name__)
        shown = doc if len(repr(doc)) <= 60 else type(doc).__name__
        raise InvalidArgument(where.rstrip(".") or "top level", shown,
                              f"a mapping with keys {', '.join(allowed)}"
                              f"{'' if where else ' at the top level'}; got {got}")
    for k in doc:
        if k not in allowed:
            raise InvalidArgument(f"{where}{k}", doc[k], "unknown key; allowed: " + ", ".join(allowed))
    for k, required in allowed.items():
        if required and k not in doc:
            raise InvalidArgument(f"{where}{k}", None, "required")


def parse_cluster(doc: Any, source: str = "") -> ClusterSpec:
    """Validate a loaded YAML document (module docstring) into a :class:`ClusterSpec`."""
    from elastico.mig import MIG_PROFILES
    from elastico.perf.throughput import ThroughputModel
    from elastico.hardware import GPU_MEMORY_GIB

    _keys("", doc, _TOP)
    name = _field("", doc, "name", "str")
    if not _NAME.match(name) or name == TRACE:
        raise InvalidArgument("name", name, "1-32 of a-z, 0-9, '-', '_' starting with a letter "
                                            "or digit, and not 'trace'")
    desc = doc.get("description", "")
    if not isinstance(desc, str):
        raise InvalidArgument("description", desc, "a string")
    pools_doc = doc["pools"]
    if not isinstance(pools_doc, list) or not pools_doc:
        raise InvalidArgument("pools", pools_doc, "a non-empty list of node pools")
    known = sorted(ThroughputModel.bundled().gpu_models())
    pools = []
    for i, p in enumerate(pools_doc):
        w = f"pools[{i}]."
        _keys(w, p, _POOL)
        model = _field(w, p, "gpu_model", "str")
        if model not in known:
            raise InvalidArgument(f"{w}gpu_model", model, "one of " + ", ".join(known))
        gpn = _field(w, p, "gpus_per_node", "int", 1, MAX_GPUS_PER_NODE)
        cpu = _field(w, p, "cpu_cores", "num", 0, None, lo_open=True)
        mem = _field(w, p, "mem_gib", "num", 0, None, lo_open=True)
        frac = _field(w, p, "fraction", "num", 0, 1, lo_open=True)
        if "gpu_mem_gib" in p:
            gmem = _field(w, p, "gpu_mem_gib", "num", 0, None, lo_open=True)
            if model in GPU_MEMORY_GIB and gmem != GPU_MEMORY_GIB[model]:
                raise InvalidArgument(f"{w}gpu_mem_gib", gmem,
                                      f"{GPU_MEMORY_GIB[model]:g}, the memory of a {model} "
                                      "(or leave it out)")
        elif model in GPU_MEMORY_GIB:
            gmem = GPU_MEMORY_GIB[model]
        else:
            raise InvalidArgument(f"{w}gpu_mem_gib", None,
                                  f"required: {model} has no default GPU memory")
        mig = 0
        if "mig_gpus_per_node" in p:
            mig = _field(w, p, "mig_gpus_per_node", "int", 0, gpn)
            if mig and model not in MIG_PROFILES:
                usable = [m for m in MIG_PROFILES if m in known]  # MIG and a gpu_model here
                raise InvalidArgument(f"{w}mig_gpus_per_node", mig,
                                      f"0: {model} has no MIG profiles (MIG models: "
                                      + ", ".join(usable) + ")")
        pools.append(Pool(model, int(gpn), float(cpu), float(mem), float(frac), float(gmem),
                          int(mig)))
    total = sum(p.fraction for p in pools)
    if abs(total - 1.0) > 1e-9:
        raise InvalidArgument("pools[*].fraction", round(total, 12), "must sum to 1")
    return ClusterSpec(name, desc, tuple(pools), source)
