"""Placement: pack chosen configurations onto physical GPUs (DESIGN.md, IAC).

Who calls it: the scheduling round (after pricing picked one configuration per job), the
simulator and the Kubernetes loop, through the same :class:`ClusterState`.  Whom it calls: a
:class:`elastico.predictor.SlowdownModel` (analytic by default), :mod:`elastico.mig` and
:mod:`elastico.placer.fragmentation`.  No clock, no I/O, no global state.

Units: GPU compute in fractions of one GPU (MPS active thread percentage / 100), GPU and host
memory in GiB, CPU in cores.

Rules every placement keeps (docs/placement.md):

* the configuration's ``gpu_model`` equals the node's model;
* gang: a job is booked all or nothing; a plain job's ``num_gpus`` GPUs are distinct GPUs of
  ONE node; a :class:`Gang` splits a job into pods or lets one pod span nodes (:mod:`.gangs`);
* per GPU: compute shares sum to <= 1 (+1e-9), memory <= the GPU's memory; a whole-GPU
  configuration (share 1.0) only takes a GPU with no resident;
* per node: CPU cores and host memory are never over-committed (a configuration's ``cpu`` and
  ``mem_gib`` are totals over the job, booked on its node);
* MPS configurations only on GPUs not in MIG mode; MIG configurations only on MIG-mode GPUs, at
  a valid, free start slot (:class:`elastico.mig.MigGpu`); a MIG instance books
  ``compute_slices / 7`` of the GPU and ``memory_slices / 8`` of its memory;
* interference: no placement may push ANY resident's predicted slowdown (the new job's
  included) past that resident's bound (:mod:`.interference`);
* kept nodes: a node kept for some jobs (``ClusterState.keep_for``: MIG lending) takes no
  other job's GPU configuration in normal mode (:meth:`.book.Book.kept_off`).

The modules, one concern each (a request goes down this list):

=====================  ======================================================================
``state``              :class:`ClusterState`, the facade: checks a request, sends it on
``gangs``              :class:`Gang`; several pods, or one pod over nodes, all or nothing
``scoring``            one pod on one node: ``SCORERS``, ``bestfit`` and ``firstfit``
``elastico_scorer``    the ``elastico`` scorer and :func:`elastico_cost`
``frag_cache``         its fragmentation summaries, kept up to date booking by booking
``interference``       co-location bound checks and predicted slowdowns
``fit``                which GPUs and nodes could take a shape, and why none
``mps``                the live loop's MPS rules (one server per user; daemon down)
``book``               the bookings: assume, then confirm or forget; invariants
``layout``             the cluster's fixed shape as flat per-GPU / per-node arrays
``assignment``         :class:`Assignment`, :class:`Part`, :class:`PlaceOutcome`, ``EPS``
``failed``             :class:`FailedShapes`: a round's shapes that found no room
=====================  ======================================================================

Booking lifecycle (STYLE.md 3, written out in :mod:`.book`): ``place`` books at once
("assumed"); the caller keeps the booking when the bind is confirmed and calls ``release``
when the bind fails or the job ends or changes configuration.  A failed ``place`` changes
nothing.
"""

from .assignment import EPS, Assignment, Part, PlaceOutcome
from .elastico_scorer import CONSOLIDATION_GPU, INTERFERENCE_WEIGHT, elastico_cost
from .failed import FailedShapes, dominates
from .gangs import Gang
from .interference import interference_loss
from .layout import TOPOLOGY_KEY
from .scoring import SCORERS
from .state import ClusterState

__all__ = ["Assignment", "Part", "Gang", "TOPOLOGY_KEY", "PlaceOutcome", "ClusterState", "SCORERS",
           "EPS", "elastico_cost", "interference_loss", "CONSOLIDATION_GPU", "INTERFERENCE_WEIGHT",
           "FailedShapes", "dominates"]
