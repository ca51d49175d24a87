"""Strict readers for the Alibaba GPU cluster trace v2023 ("openb", FGD / ATC'23).

Who calls it: :mod:`elastico.sim.workload` (trace -> jobs), the simulator and the CLI.  It calls
nothing but the standard library and :mod:`elastico.model`.  No clock, no global mutable state.

Files (bundled under ``data/alibaba-gpu-v2023-openb``, see its PROVENANCE.md):

* node lists ``sn,cpu_milli,memory_mib,gpu,model`` -> :class:`elastico.model.Node`
  (cores = cpu_milli/1000, GiB = memory_mib/1024, per-GPU memory from :data:`GPU_MEMORY_GIB`);
* pod lists ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time`` -> :class:`TracePod`;
* the ``openb_pod_list_multigpu*.csv`` variants carry only the first five columns.  For them
  ``gpu_models`` = empty (any model), ``qos`` = ``""``, ``phase`` = ``""``,
  ``creation_s`` = 0.0 and ``scheduled_s`` = ``deletion_s`` = ``None``: they are a bag of
  shapes (how the FGD simulator uses them), with no runtime; :func:`elastico.sim.workload.build_workload`
  excludes them (reason ``no_times``).

Parsing is strict: any bad value raises :class:`elastico.errors.InvalidArgument` whose field is
``<file>:<line>: <column>`` (line 1 = the header) and whose value is the raw text; a row with
the wrong number of fields is named ``<file>:<line>`` with the raw row as value, a header
missing several required columns ``<file>:1`` with the raw header (the message lists them and
the header's columns).  Files are
UTF-8, a leading byte-order mark is accepted.  Numbers are bounded (:data:`MAX_GPUS_PER_NODE`
GPUs per node or pod, :data:`MAX_QUANTITY` for CPU, memory, gpu_milli and times) so that no
absurd value can overflow a sum or a bitset later.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from elastico.errors import InvalidArgument
from elastico.model import JobKind, Node
from elastico.hardware import GPU_MEMORY_GIB
from elastico.paths import data_file

__all__ = [
    "TracePod",
    "job_kind",
    "SERVICE_QOS",
    "TRACE_GPU_MODELS",
    "TRACE_CLUSTER_GPUS",
    "QOS_CLASSES",
    "POD_PHASES",
    "read_nodes",
    "read_pods",
    "sub_cluster",
    "DEFAULT_NODES",
    "DEFAULT_PODS",
    "MAX_GPUS_PER_NODE",
    "MAX_QUANTITY",
]

TRACE_DIR = "alibaba-gpu-v2023-openb"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"

#: trace QoS classes of latency-sensitive services (:func:`job_kind`)
SERVICE_QOS = frozenset({"LS", "Guaranteed", "Burstable"})

#: GPU model names that occur in the openb trace (node ``model`` and pod ``gpu_spec``).
TRACE_GPU_MODELS = frozenset({"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"})

#: GPUs of the trace's full cluster (sum of ``gpu`` over openb_node_list_gpu_node.csv).
TRACE_CLUSTER_GPUS = 6212

#: Upper bound of a node's ``gpu`` and of a pod's ``num_gpu``.  No real node has more GPUs:
#: NVIDIA DGX/HGX nodes carry 8 (DGX A100/H100/B200) to 16 (DGX-2); the openb trace's largest
#: node and largest pod have 8.  64 leaves room for denser future nodes while keeping the
#: sub-cluster bitsets (``1 << gpus``) small; a value like 99999999999999999999 would
#: otherwise overflow there.
MAX_GPUS_PER_NODE = 64

#: Upper bound of ``cpu_milli``, ``memory_mib``, ``gpu_milli`` and the times (seconds): 1e15
#: (1e12 cores, ~1 EiB of memory, ~31.7 million years), far above any real value and far below
#: where sums over a whole trace would lose all precision or overflow.
MAX_QUANTITY = 1e15

QOS_CLASSES = frozenset({"LS", "BE", "Burstable", "Guaranteed"})
POD_PHASES = frozenset({"Running", "Failed", "Pending", "Succeeded"})

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_SHAPE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
_POD_FULL_COLUMNS = _POD_SHAPE_COLUMNS + (
    "gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")


@dataclass(frozen=True)
class TracePod:
    """One pod of an openb pod list, in model units.

    ``cpu`` cores, ``mem_gib`` GiB, ``num_gpus`` GPUs, ``gpu_share`` per GPU (gpu_milli/1000;
    1.0 for multi-GPU pods; 0.0 for CPU-only pods), ``gpu_models`` allowed models (empty = any),
    ``qos`` in :data:`QOS_CLASSES` (``""`` for 5-column files), ``phase`` in
    :data:`POD_PHASES` (``""`` for 5-column files); times in trace seconds:
    ``scheduled_s`` is None for never-scheduled (Pending) pods, ``deletion_s`` None only for
    5-column files.
    """

    name: str
    cpu: float
    mem_gib: float
    num_gpus: int
    gpu_share: float
    gpu_models: frozenset[str]
    qos: str
    phase: str
    creation_s: float
    scheduled_s: float | None
    deletion_s: float | None

    @property
    def gpus_total(self) -> float:
        return self.num_gpus * self.gpu_share


# ----------------------------------------------------------------------------- parsing helpers


class _Row:
    """One CSV row with its location, for error messages naming ``file:line: column``."""

    def __init__(self, path: Path, line: int, header: Sequence[str], values: Sequence[str]):
        self.path, self.line = path, line
        self.values = dict(zip(header, values))

    def where(self, column: str) -> str:
        return f"{self.path.name}:{self.line}: {column}"

    def fail(self, column: str, allowed: str) -> InvalidArgument:
        return InvalidArgument(self.where(column), self.values.get(column), allowed)

    def text(self, column: str) -> str:
        return self.values[column].strip()

    def number(self, column: str, *, integer: bool = False, minimum: float = 0.0,
               maximum: float = MAX_QUANTITY) -> float:
        """The column as a finite number in ``minimum..maximum`` (an integer when asked).
        Huge digit strings (``99999999999999999999``, ``1e400``) fail the bound here rather
        than overflow later."""
        raw = self.text(column)
        kind = "an integer" if integer else "a number"
        bounds = f"{minimum:g}..{maximum:g}"
        try:
            v = float(raw)
        except (ValueError, OverflowError):
            raise self.fail(column, f"must be {kind} in {bounds}") from None
        if math.isnan(v):
            raise self.fail(column, f"must be finite: {kind} in {bounds}")
        if math.isinf(v) and raw.lstrip("+-").isalpha():  # "inf", "-Infinity"
            raise self.fail(column, f"must be finite: {kind} in {bounds}")
        if not minimum <= v <= maximum:
            raise self.fail(column, f"must be {kind} in {bounds}")
        if integer and v != int(v):
            raise self.fail(column, f"must be {kind} in {bounds}")
        return v


def _rows(path: Path, required: Sequence[str], optional: Sequence[str] = ()) -> Iterator[_Row]:
    """Rows of ``path`` after checking the header; raises on short/long rows and truncation."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidArgument("path", str(path), "file does not exist") from None
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark (Excel) is not data
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InvalidArgument(f"{path.name}:{line}", f"byte {e.start}: {raw[e.start:e.end].hex(' ')}",
                              "file must be UTF-8") from None
    if not text:
        raise InvalidArgument(f"{path.name}:1", "", "empty file (header missing)")
    # Records end at "\n" or "\r\n" only (RFC 4180 and Excel); str.splitlines() would also
    # break at a "\r", "\x0c" or "\u2028" inside a cell, and every later line number
    # would be off by one.
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] != "":
        # Every bundled CSV ends with a newline; a missing one means a cut-off download.
        raise InvalidArgument(f"{path.name}:{len(lines)}", lines[-1],
                              "last line has no newline: file truncated")
    lines.pop()
    # blank lines at the very end (an editor's habit) are not records; one inside the file is
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as e:  # e.g. a lone "\r" outside quotes, a cell over csv's size limit
        raise InvalidArgument(f"{path.name}:1", lines[0][:200], f"valid CSV ({e})") from None
    missing = [c for c in required if c not in header]
    if missing:
        # every missing column at once, and what the header has instead (a wrong file, a
        # renamed column or a different delimiter shows at a glance)
        field = f"{path.name}:1" + (f": {missing[0]}" if len(missing) == 1 else "")
        raise InvalidArgument(field, ",".join(header),
                              "missing required column(s) "
                              + ", ".join(repr(c) for c in missing) + "; the header has "
                              + (", ".join(repr(c) for c in header) or "nothing"))
    if optional:
        present = [c for c in optional if c in header]
        if present and len(present) != len(optional):
            missing = [c for c in optional if c not in header][0]
            raise InvalidArgument(f"{path.name}:1: {missing}", ",".join(header),
                                  "missing column (either all of " + ",".join(optional)
                                  + " or none)")
    known = set(required) | set(optional)
    for col in header:
        if col not in known:
            raise InvalidArgument(f"{path.name}:1: {col}", col, "unknown column")
    if len(set(header)) != len(header):
        raise InvalidArgument(f"{path.name}:1", ",".join(header), "duplicated column")
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            i = reader.line_num
            raise InvalidArgument(f"{path.name}:{i}", lines[i - 1][:200] if i <= len(lines)
                                  else "", f"valid CSV ({e})") from None
        i = reader.line_num  # physical line of the record's end (line 1 = the header)
        if not values:
            raise InvalidArgument(f"{path.name}:{i}", "", "empty line")
        if len(values) != len(header):
            # The row as a whole is wrong; naming the column after its last field would blame
            # a column whose value is simply missing.
            raise InvalidArgument(f"{path.name}:{i}", lines[i - 1],
                                  f"{len(header)} fields like the header, got {len(values)}")
        yield _Row(path, i, header, values)


def _default(path: str | Path | None, name: str) -> Path:
    return Path(path) if path is not None else data_file(TRACE_DIR, name)


# ----------------------------------------------------------------------------- readers


def read_nodes(path: str | Path | None = None) -> list[Node]:
    """Nodes of an openb node list (default: the bundled ``openb_node_list_gpu_node.csv``,
    1213 nodes, 6212 GPUs), in file order.

    CPU-only rows (``gpu`` 0, empty ``model``; e.g. ``openb_node_list_all_node.csv``) become
    nodes with ``gpu_model=""`` and ``num_gpus=0``.  Raises InvalidArgument naming
    ``file:line: column`` and the value on any bad row (``gpu`` an integer in
    0..:data:`MAX_GPUS_PER_NODE`; unknown model: exact token match against
    :data:`GPU_MEMORY_GIB`), and naming the file when it has no GPU node at all (header only,
    or only CPU-only rows): every consumer builds a GPU cluster from it.
    """
    p = _default(path, DEFAULT_NODES)
    nodes: list[Node] = []
    names: set[str] = set()
    for row in _rows(p, _NODE_COLUMNS):
        name = row.text("sn")
        if not name:
            raise row.fail("sn", "must be a non-empty node name")
        if name in names:
            raise row.fail("sn", "duplicated node name")
        names.add(name)
        cpu = row.number("cpu_milli") / 1000.0
        mem = row.number("memory_mib") / 1024.0
        gpus = int(row.number("gpu", integer=True, maximum=MAX_GPUS_PER_NODE))
        model = row.text("model")
        if gpus == 0:
            if model:
                raise row.fail("model", "must be empty for a node with gpu=0")
            gmem = 0.0
        else:
            if model not in GPU_MEMORY_GIB:
                raise row.fail("model", "known GPU models: " + ", ".join(sorted(GPU_MEMORY_GIB)))
            gmem = GPU_MEMORY_GIB[model]
        nodes.append(Node(name, model, gpus, gmem, cpu, mem))
    if not any(n.num_gpus > 0 for n in nodes):
        what = (f"{len(nodes)} rows, all with gpu=0" if nodes
                else "header only, no data rows")
        raise InvalidArgument(p.name, str(p), f"has no GPU nodes: {what}")
    return nodes


def read_pods(path: str | Path | None = None) -> list[TracePod]:
    """Pods of an openb pod list (default: the bundled ``openb_pod_list_default.csv``,
    8152 pods), in file order.  Accepts the 11-column lists and the 5-column
    ``multigpu*`` lists (defaults in the module docstring).

    Checks (each failure -> InvalidArgument naming ``file:line: column`` and the value):
    numbers finite and in 0..:data:`MAX_QUANTITY`; ``num_gpu`` an integer in
    0..:data:`MAX_GPUS_PER_NODE` (checked before ``gpu_milli``); ``gpu_milli`` 0 for CPU-only pods, in
    1..1000 for one-GPU pods, exactly 1000 for multi-GPU pods; every ``gpu_spec`` token (split
    on ``|``) exactly a known model name; ``qos`` and ``pod_phase`` known; ``scheduled_time``
    empty only for Pending pods; creation <= scheduled <= deletion; unique names; at least
    one pod (a header-only file raises naming the file).
    """
    p = _default(path, DEFAULT_PODS)
    pods: list[TracePod] = []
    names: set[str] = set()
    for row in _rows(p, _POD_SHAPE_COLUMNS, _POD_FULL_COLUMNS[len(_POD_SHAPE_COLUMNS):]):
        full = "qos" in row.values
        name = row.text("name")
        if not name:
            raise row.fail("name", "must be a non-empty pod name")
        if name in names:
            raise row.fail("name", "duplicated pod name")
        names.add(name)
        cpu = row.number("cpu_milli") / 1000.0
        mem = row.number("memory_mib") / 1024.0
        # num_gpu first and bounded: the gpu_milli rule below depends on it, and an absurd
        # num_gpu must be blamed itself, not the gpu_milli it makes look wrong.
        n = int(row.number("num_gpu", integer=True, maximum=MAX_GPUS_PER_NODE))
        milli = row.number("gpu_milli")
        if n == 0:
            if milli != 0:
                raise row.fail("gpu_milli", "must be 0 when num_gpu is 0")
            share = 0.0
        elif n == 1:
            if not 0 < milli <= 1000:
                raise row.fail("gpu_milli", "must be in (0, 1000] for a GPU pod")
            share = milli / 1000.0
        else:
            if milli != 1000:
                raise row.fail("gpu_milli", f"must be 1000 for num_gpu={n}")
            share = 1.0
        if not full:
            pods.append(TracePod(name, cpu, mem, n, share, frozenset(), "", "", 0.0, None, None))
            continue
        spec = row.text("gpu_spec")
        models: set[str] = set()
        if spec:
            for tok in spec.split("|"):
                if tok not in TRACE_GPU_MODELS and tok not in GPU_MEMORY_GIB:
                    raise InvalidArgument(row.where("gpu_spec"), spec,
                                          f"token {tok!r} is not a known GPU model ("
                                          + ", ".join(sorted(GPU_MEMORY_GIB)) + ")")
                models.add(tok)
        qos = row.text("qos")
        if qos not in QOS_CLASSES:
            raise row.fail("qos", "one of " + ", ".join(sorted(QOS_CLASSES)))
        phase = row.text("pod_phase")
        if phase not in POD_PHASES:
            raise row.fail("pod_phase", "one of " + ", ".join(sorted(POD_PHASES)))
        created = row.number("creation_time")
        deleted = row.number("deletion_time")
        if row.text("scheduled_time") == "":
            if phase != "Pending":
                raise row.fail("scheduled_time", f"empty only for Pending pods (phase {phase})")
            scheduled = None
        else:
            scheduled = row.number("scheduled_time")
            if scheduled < created:
                raise row.fail("scheduled_time", f"must be >= creation_time {created:g}")
        if deleted < (scheduled if scheduled is not None else created):
            raise row.fail("deletion_time", "must be >= scheduled_time (or creation_time)")
        pods.append(TracePod(name, cpu, mem, n, share, frozenset(models), qos, phase,
                             created, scheduled, deleted))
    if not pods:
        raise InvalidArgument(p.name, str(p), "has no pods: header only, no data rows")
    return pods


# ----------------------------------------------------------------------------- sub-cluster


def _reachable(sizes: Sequence[int]) -> int:
    """Bitset (Python int) of the GPU totals reachable with a subset of ``sizes``."""
    bits = 1
    for s in sizes:
        bits |= bits << s
    return bits


def _pick_nodes(nodes: Sequence[Node], quota: int) -> list[Node]:
    """Whole nodes of one model, in trace order, summing exactly to ``quota``; keeps the first
    8-GPU node when the model has one and ``quota >= 8``.  Caller guarantees feasibility."""
    chosen: list[Node] = []
    rest = list(nodes)
    eight = next((n for n in nodes if n.num_gpus == 8), None)
    if eight is not None and quota >= 8:
        others = [n for n in nodes if n is not eight]
        if (_reachable([n.num_gpus for n in others]) >> (quota - 8)) & 1:
            chosen.append(eight)
            rest = others
            quota -= 8
    # suffix[i]: totals reachable from rest[i:]
    suffix = [1] * (len(rest) + 1)
    for i in range(len(rest) - 1, -1, -1):
        suffix[i] = suffix[i + 1] | (suffix[i + 1] << rest[i].num_gpus)
    for i, n in enumerate(rest):
        if quota == 0:
            break
        if n.num_gpus <= quota and (suffix[i + 1] >> (quota - n.num_gpus)) & 1:
            chosen.append(n)
            quota -= n.num_gpus
    assert quota == 0
    return chosen


def sub_cluster(nodes: Sequence[Node], gpus: int) -> list[Node]:
    """A deterministic sub-cluster of exactly ``gpus`` GPUs with the GPU-model mix of ``nodes``.

    Per model m with G_m GPUs of G in total, the target is ``gpus * G_m / G``; quotas are the
    largest-remainder rounding of the targets when every quota is a sum of whole nodes of that
    model, otherwise the reachable quotas minimising ``sum |quota - target|`` (dynamic
    programme over models in first-seen order; deterministic tie-break).  Each model's nodes
    are then taken whole, in trace order, keeping its first 8-GPU node where the model has one
    and its quota allows (so 8-GPU gang pods still fit).  Result in trace order.  CPU-only
    nodes are not taken.

    Raises InvalidArgument if ``nodes`` has no GPU node, ``gpus`` <= 0, > the GPUs of
    ``nodes``, or no combination of whole nodes reaches exactly ``gpus``.
    """
    gpu_nodes = [n for n in nodes if n.num_gpus > 0]
    total = sum(n.num_gpus for n in gpu_nodes)
    if total == 0:
        raise InvalidArgument("nodes", f"{len(nodes)} nodes, 0 GPUs",
                              "the cluster has no GPU nodes to take a sub-cluster from")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0 or gpus > total:
        raise InvalidArgument("gpus", gpus, f"must be an integer in 1..{total}")
    by_model: dict[str, list[Node]] = {}
    for n in gpu_nodes:
        by_model.setdefault(n.gpu_model, []).append(n)
    models = list(by_model)
    targets = [gpus * sum(n.num_gpus for n in by_model[m]) / total for m in models]
    reach = [_reachable([n.num_gpus for n in by_model[m]]) for m in models]

    def ok(i: int, q: int) -> bool:
        return q >= 0 and (reach[i] >> q) & 1 == 1

    # largest remainder
    floors = [math.floor(t) for t in targets]
    left = gpus - sum(floors)
    order = sorted(range(len(models)), key=lambda i: (-(targets[i] - floors[i]), i))
    quotas = floors[:]
    for i in order[:left]:
        quotas[i] += 1
    if not all(ok(i, q) for i, q in enumerate(quotas)):
        quotas = _closest_reachable_quotas(targets, reach, gpus)
        if quotas is None:
            raise InvalidArgument("gpus", gpus, "no combination of whole nodes with this GPU "
                                  "total keeps the model mix; try a nearby multiple of 8")
    chosen: set[int] = set()
    for i, m in enumerate(models):
        chosen |= {id(n) for n in _pick_nodes(by_model[m], quotas[i])}
    return [n for n in gpu_nodes if id(n) in chosen]


def _closest_reachable_quotas(targets: Sequence[float], reach: Sequence[int],
                              gpus: int) -> list[int] | None:
    """Reachable per-model quotas summing to ``gpus`` minimising sum |q - target| (DP over
    models, candidates within +-24 GPUs of each target)."""
    window = 24
    cands: list[list[int]] = []
    for t, r in zip(targets, reach):
        lo, hi = max(0, math.floor(t) - window), math.ceil(t) + window
        cands.append([q for q in range(lo, hi + 1) if (r >> q) & 1])
    # best[s] = (cost, quotas) for the models seen so far summing to s
    best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for t, cs in zip(targets, cands):
        nxt: dict[int, tuple[float, tuple[int, ...]]] = {}
        for s, (cost, qs) in best.items():
            for q in cs:
                s2 = s + q
                if s2 > gpus:
                    continue
                c2 = cost + abs(q - t)
                if s2 not in nxt or c2 < nxt[s2][0] - 1e-12:
                    nxt[s2] = (c2, qs + (q,))
        best = nxt
    return list(best[gpus][1]) if gpus in best else None


def job_kind(pod: TracePod) -> JobKind:
    """qos LS/Guaranteed/Burstable -> service; BE -> training (the simulator's batch job, of
    unknown kind: module docstring), whatever its share.  Raises InvalidArgument for an
    unknown or empty qos."""
    if pod.qos in SERVICE_QOS:
        return JobKind.SERVICE
    if pod.qos == "BE":
        return JobKind.TRAINING
    raise InvalidArgument(f"pod[{pod.name}].qos", pod.qos, "one of LS, BE, Burstable, Guaranteed")
