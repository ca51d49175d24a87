"""Solo activity profiles: what a job does on a GPU while it runs there alone (issue 23).

A job's *solo profile* is the average of the readings (:meth:`GpuBackend.activity
<elastico.nodeagent.backend.GpuBackend.activity>`) of a *unit* -- a whole GPU, or one MIG
instance -- taken while that job was the only one placed on the unit, over a full averaging
window with no other job arriving in it.  A MIG instance is the job's own slice: the other
instances of its GPU do not make it shared (MIG isolates SMs, memory and its bandwidth slice,
NVIDIA MIG user guide).  An MPS client or a time-sliced job next to another job on one GPU is
*not* solo: its readings are dropped and its window starts again once it is alone.

Who is placed where (:func:`placements_from_pods`) comes from the allocations the node agent
itself made: the pods on this node that the device plugin acknowledged
(``elastico.io/allocated``) with the placer's decision annotations (GPU UUIDs, MIG profile and
start, MPS share; :mod:`elastico.nodeagent.allocation`), still running.  Processes are
attributed by unit: every CUDA process on a unit with exactly one placed job is that job's (the
``elastico.io/gpu`` GPUs are ElastiCo's alone; a process of something else on them breaks that
assumption, and it would be counted).  A reading with no process (the job has not opened its
CUDA context yet, or has ended) is not a sample.

:class:`ActivitySampler` samples every ``period_s`` seconds (default 1 s: NVML's process
utilisation and DCGM's profiling fields are kept at about that granularity) and averages
``window_s`` seconds (default 60 s: several steps of even slow training jobs, whose steps
last 0.05-5 s in Sia's measurements, ``data/sia-sync-share``); each full window gives one
:class:`SoloProfile` per solo unit, handed to ``on_profile``.  Memory is bounded: one buffer of
at most ``window_s / period_s`` readings per unit currently solo, dropped as soon as the unit
is not.

Aggregation over a window: SM, DRAM and PCIe figures and NVML's per-process SM utilisation are
means over the samples that report them (None when none does); memory is the largest sample
(the job's footprint, what fit decisions need).

Who calls it: ``elastico nodeagent`` (the loop), tests.  Whom it calls: the backend, the
allocation parser, the GPU catalogue's names.  No gRPC, no Kubernetes client: the pods come
from a callable.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from elastico.contract import ALLOCATED, SCHEDULER_NAME
from elastico.errors import ElasticoError, InvalidArgument
from elastico.hardware import GPUS, gpu_model_name
from elastico.nodeagent.allocation import PodInfo, acknowledged, parse_decision
from elastico.nodeagent.backend import ActivityReading, GpuBackend, GpuInfo
from elastico.nodeagent.gpu_models import mig_table_model

__all__ = ["Placement", "SoloProfile", "ActivitySampler", "placements_from_pods", "solo_units",
           "catalogue_model", "DEFAULT_PERIOD_S", "DEFAULT_WINDOW_S", "MAX_WINDOW_SAMPLES",
           "check_sampling"]

_LOG = logging.getLogger(__name__)

DEFAULT_PERIOD_S = 1.0
DEFAULT_WINDOW_S = 60.0
#: Most readings one window may hold (memory bound per unit): an hour at 1 s.
MAX_WINDOW_SAMPLES = 3600


def check_sampling(period_s: float, window_s: float) -> int:
    """The readings per window for ``period_s`` / ``window_s`` (seconds); InvalidArgument
    unless ``0 < period_s <= window_s`` and the window holds at most
    :data:`MAX_WINDOW_SAMPLES` readings."""
    for name, v in (("profile_period_s", period_s), ("profile_window_s", window_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InvalidArgument(name, v, "seconds > 0")
    if window_s < period_s:
        raise InvalidArgument("profile_window_s", window_s, f">= profile_period_s {period_s:g}")
    n = int(round(window_s / period_s))
    if n > MAX_WINDOW_SAMPLES:
        raise InvalidArgument("profile_window_s", window_s,
                              f"at most {MAX_WINDOW_SAMPLES} periods of {period_s:g} s")
    return max(1, n)


def catalogue_model(gpu: GpuInfo) -> str:
    """ElastiCo's name of ``gpu``'s model (the GPU catalogue's, e.g. ``A100-40GB`` for NVML's
    "NVIDIA A100-SXM4-40GB"; else its MIG table's key, e.g. ``H100-80GB``), else NVML's name
    as it is."""
    return (gpu_model_name(gpu.model, GPUS) or mig_table_model(gpu.model, gpu.memory_total_gib)
            or gpu.model)


@dataclass(frozen=True)
class Placement:
    """One job's share of one unit: ``job_key`` (the job's identity, the pods' group key,
    :func:`elastico.contract.job_key`), ``pod`` (``namespace/name``), ``gpu_uuid``,
    ``mig_start``/``mig_profile`` (MIG) or ``mps_share`` (MPS active thread percentage / 100),
    ``kind`` (``elastico.io/workload``, "" when unset)."""

    job_key: str
    pod: str
    gpu_uuid: str
    mig_start: int | None = None
    mig_profile: str | None = None
    mps_share: float | None = None
    kind: str = ""

    @property
    def unit(self) -> tuple[str, int | None]:
        return (self.gpu_uuid, self.mig_start)

    @property
    def mechanism(self) -> str:
        """``mig``, ``mps`` or ``whole`` (a whole GPU, no MPS limit)."""
        return "mig" if self.mig_start is not None else ("mps" if self.mps_share is not None else "whole")


def placements_from_pods(pods: Iterable[PodInfo]) -> list[Placement]:
    """The placements of the running ElastiCo pods that this node's device plugin allocated
    (module docstring): one per GPU of each pod's decision.  Pods being deleted, finished,
    not yet acknowledged or with malformed decision annotations are left out (the device
    plugin refused the latter anyway)."""
    out = []
    for p in pods:
        if (p.scheduler_name != SCHEDULER_NAME or p.deleting or p.phase in ("Succeeded", "Failed")
                or ALLOCATED not in p.annotations or not acknowledged(p)):
            continue
        try:
            d = parse_decision(p.annotations)
        except ElasticoError:
            continue
        share = None if d.mps_active_thread_percentage is None else d.mps_active_thread_percentage / 100.0
        kind = p.annotations.get("elastico.io/workload", "") or ""
        for u in d.gpu_uuids:
            out.append(Placement(p.job_key, p.key, u, d.mig_start_slot, d.mig_profile, share, kind))
    return out


def solo_units(placements: Sequence[Placement]) -> dict[tuple[str, int | None], Placement]:
    """Unit -> the placement alone on it: a whole GPU with exactly one pod placed on it (MPS
    share or not), a MIG instance with exactly one pod placed on it (the GPU's other
    instances do not count).  Two pods of one job on one unit are not solo (their readings
    would mix two processes' worth of one job)."""
    by_unit: dict[tuple[str, int | None], list[Placement]] = {}
    mig_gpus = {p.gpu_uuid for p in placements if p.mig_start is not None}
    for p in placements:
        by_unit.setdefault(p.unit, []).append(p)
    out = {}
    for unit, ps in by_unit.items():
        uuid, start = unit
        if start is None and uuid in mig_gpus:
            continue  # inconsistent decisions (whole GPU and MIG on one GPU): never solo
        if len({p.pod for p in ps}) == 1 and len(ps) == 1:
            out[unit] = ps[0]
    return out


@dataclass(frozen=True)
class SoloProfile:
    """A job's solo profile on one unit, averaged over ``samples`` readings ``period_s``
    apart (module docstring).  Configuration it was measured in: ``gpu_model`` (catalogue
    name, :func:`catalogue_model`), ``mechanism`` (``whole``, ``mps``, ``mig``), ``mps_share``,
    ``mig_profile``.  Counters (None = not reported): ``sm_activity`` / ``dram_activity``
    (DCGM 1002 / 1005), ``process_sm_util`` (NVML per-process SM utilisation, summed over the
    job's processes), ``mem_gib`` (GiB, largest sample), ``pcie_rx_gbs`` / ``pcie_tx_gbs``
    (GB/s).  ``node``: the agent's node; ``kind``: the job's workload kind or ""."""

    job_key: str
    gpu_model: str
    mechanism: str
    mps_share: float | None
    mig_profile: str | None
    samples: int
    period_s: float
    sm_activity: float | None
    dram_activity: float | None
    process_sm_util: float | None
    mem_gib: float | None
    pcie_rx_gbs: float | None
    pcie_tx_gbs: float | None
    node: str = ""
    kind: str = ""


def _mean(vals: Iterable[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return float(sum(v) / len(v)) if v else None


def _profile(p: Placement, gpu_model: str, readings: Sequence[ActivityReading], period_s: float,
             node: str) -> SoloProfile:
    mems = [r.mem_gib for r in readings if r.mem_gib is not None]
    return SoloProfile(
        p.job_key, gpu_model, p.mechanism, p.mps_share, p.mig_profile, len(readings), period_s,
        _mean(r.sm_active for r in readings), _mean(r.dram_active for r in readings),
        _mean(r.sm_util for r in readings), max(mems) if mems else None,
        _mean(r.pcie_rx_gbs for r in readings), _mean(r.pcie_tx_gbs for r in readings),
        node, p.kind)


class ActivitySampler:
    """Samples ``backend`` every ``period_s`` s and emits a :class:`SoloProfile` per solo unit
    and full window of ``window_s`` s (module docstring).  ``placements``: returns the
    current placements (:func:`placements_from_pods` over the node's pods); ``on_profile``:
    receives each profile (e.g. sends it to the predictor); ``on_readings``: receives every
    GPU's readings each period (e.g. Prometheus gauges).  :meth:`sample` is one period (tests
    call it directly); :meth:`start` / :meth:`stop` run it on a thread.  ``refresh_s``: the
    placements are re-read every ``refresh_s`` seconds' worth of periods (0: every period) and
    after :meth:`invalidate`."""

    def __init__(self, backend: GpuBackend, placements: Callable[[], Sequence[Placement]], *,
                 period_s: float = DEFAULT_PERIOD_S, window_s: float = DEFAULT_WINDOW_S,
                 node: str = "", on_profile: Callable[[SoloProfile], None] | None = None,
                 on_readings: Callable[[GpuInfo, list[ActivityReading]], None] | None = None,
                 refresh_s: float = 0.0):
        self.window = check_sampling(period_s, window_s)
        if isinstance(refresh_s, bool) or not isinstance(refresh_s, (int, float)) \
                or not math.isfinite(refresh_s) or refresh_s < 0:
            raise InvalidArgument("placements_refresh_s", refresh_s, "seconds >= 0")
        # placements are re-read every `_every` periods (and after invalidate()): listing the
        # node's pods every second would load the API server for nothing
        self._every = max(1, int(round(refresh_s / period_s)))
        self._since = self._every
        self._placements: list[Placement] = []
        self.backend, self.placements = backend, placements
        self.period_s, self.window_s, self.node = float(period_s), float(window_s), node
        self.on_profile, self.on_readings = on_profile, on_readings
        # unit -> (the placement it is solo for, its readings so far in this window)
        self._buffers: dict[tuple[str, int | None], tuple[Placement, deque]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def buffered(self) -> int:
        """Readings held now, over every unit (at most units x window)."""
        return sum(len(b) for _p, b in self._buffers.values())

    def sample(self) -> list[SoloProfile]:
        """One period: reads every healthy GPU, appends each solo unit's reading to its
        window, drops the windows of units no longer solo (or solo for another job or
        configuration), and returns (and hands ``on_profile``) the profiles of windows that
        filled."""
        if self._since >= self._every:
            self._placements = list(self.placements())
            self._since = 0
        self._since += 1
        solo = solo_units(self._placements)
        for unit in [u for u, (p, _b) in self._buffers.items() if solo.get(u) != p]:
            del self._buffers[unit]
        done: list[SoloProfile] = []
        for g in self.backend.list_gpus():
            if not g.healthy:
                continue
            try:
                readings = self.backend.activity(g.index)
            except ElasticoError as e:
                _LOG.warning("activity of GPU %d not read: %s", g.index, e)
                continue
            if self.on_readings is not None:
                self.on_readings(g, readings)
            for r in readings:
                unit = (g.uuid, r.mig_start)
                p = solo.get(unit)
                if p is None or not r.processes:
                    continue
                _p, buf = self._buffers.setdefault(unit, (p, deque(maxlen=self.window)))
                buf.append(r)
                if len(buf) >= self.window:
                    done.append(_profile(p, catalogue_model(g), list(buf), self.period_s, self.node))
                    buf.clear()
        for prof in done:
            if self.on_profile is not None:
                try:
                    self.on_profile(prof)
                except Exception:  # a sink's failure must not stop sampling
                    _LOG.exception("solo profile of %s not delivered", prof.job_key)
        return done

    def invalidate(self) -> None:
        """Re-read the placements at the next period (the device plugin calls it after each
        Allocate, so a neighbour's arrival ends a solo window at once; a departure is seen
        within ``refresh_s``, which only delays a job becoming solo)."""
        self._since = self._every

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception:
                _LOG.exception("activity sampling failed; retrying next period")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="elastico-activity", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s + 5)
