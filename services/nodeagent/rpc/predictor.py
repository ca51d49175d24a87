"""The node agent's client of ``PredictorService.ReportProfile``: sends each solo activity
profile (:class:`elastico.nodeagent.profiling.SoloProfile`) to the predictor's profile store.

Why the node agent calls the predictor directly (docs/predictor.md, "Activity profiles"): the
profile is a measurement, like the co-located slowdowns node agents already send with
``ReportObservation`` (DESIGN.md: node agents are the predictor's reporters); the placer reads
profiles from the predictor, so relaying them through the placer would add a hop and a second
copy of the state without adding a decision.

Delivery: one ``ReportProfile`` per profile, with a deadline (``timeout_s``); a failure is
logged by the sampler and the profile dropped -- the next averaging window measures the job
again and reports a fresh one (nothing is queued, so an unreachable predictor costs no memory).

An adapter (imports grpc and the generated messages).  Who calls it: ``elastico nodeagent``.
"""

from __future__ import annotations

import logging

import grpc

from elastico.nodeagent.profiling import SoloProfile
from elastico.v1 import predictor_pb2, predictor_pb2_grpc

__all__ = ["solo_profile_message", "ProfileReporter", "open_predictor_channel"]

_LOG = logging.getLogger(__name__)


def solo_profile_message(p: SoloProfile) -> predictor_pb2.SoloProfile:
    """The wire ``SoloProfile`` of ``p`` (None counters stay unset)."""
    kw = {name: getattr(p, name) for name in ("mps_share", "sm_activity", "dram_activity",
                                              "mem_gib", "pcie_rx_gbs", "pcie_tx_gbs")
          if getattr(p, name) is not None}
    if p.process_sm_util is not None:
        kw["process_sm_util"] = p.process_sm_util
    return predictor_pb2.SoloProfile(
        job_key=p.job_key, gpu_model=p.gpu_model, mechanism=p.mechanism,
        mig_profile=p.mig_profile or "", samples=p.samples, period_s=p.period_s,
        kind=p.kind, node=p.node, **kw)


def open_predictor_channel(address: str, *, ca: bytes | None = None, cert: bytes | None = None,
                           key: bytes | None = None) -> grpc.Channel:
    """A channel to the predictor at ``address``: TLS when ``ca`` is given (mutual TLS with
    ``cert`` and ``key``), plaintext otherwise."""
    if ca is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert))


class ProfileReporter:
    """Calls ``ReportProfile`` over ``channel`` with each profile it is given (the sampler's
    ``on_profile``); raises grpc.RpcError on failure (the sampler logs it)."""

    def __init__(self, channel: grpc.Channel, timeout_s: float = 5.0):
        self._stub = predictor_pb2_grpc.PredictorServiceStub(channel)
        self.timeout_s = timeout_s
        self.sent = 0

    def __call__(self, p: SoloProfile) -> None:
        resp = self._stub.ReportProfile(
            predictor_pb2.ReportProfileRequest(profiles=[solo_profile_message(p)]),
            timeout=self.timeout_s)
        self.sent += 1
        _LOG.info("solo profile of %s on %s (%s) reported; the store holds %d", p.job_key,
                  p.gpu_model, p.mechanism, resp.stored)
