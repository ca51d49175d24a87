"""Leader election with a ``coordination.k8s.io/v1`` Lease, so two placer replicas never both
bind.

Who calls it: the scheduler loop (before every round and before every API write).  Whom it
calls: ``CoordinationV1Api`` (read / create / replace of one Lease).  Time is an argument
(``clock``), so tests drive expiry without sleeping.

The protocol is client-go's (``tools/leaderelection``):

* the Lease ``spec.holderIdentity`` names the leader; it renews ``spec.renewTime`` every
  ``retry_period_s``;
* a candidate takes the Lease over only when the record it last observed has not changed for
  ``lease_duration_s`` seconds *of its own clock* (no trust in other machines' clocks);
* every write is a replace carrying the ``resourceVersion`` that was read, so of two
  candidates racing for an expired Lease the API server accepts exactly one (the other gets
  409 Conflict and stays a follower);
* the leader considers itself leader only until ``renew_deadline_s`` after its last
  successful renewal (< ``lease_duration_s``): a leader cut off from the API stops binding
  before anyone else may take over.  :meth:`LeaseElector.is_leader` is checked before each
  write, so losing the Lease stops binding at once.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable

from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from elastico.errors import InvalidArgument

__all__ = ["LeaseElector"]

log = logging.getLogger(__name__)


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate.  ``identity`` must be unique per replica (the pod name).  Durations in
    seconds; ``clock`` returns seconds (wall clock by default)."""

    def __init__(self, api: CoordinationV1Api, namespace: str, name: str, identity: str, *,
                 lease_duration_s: float = 15.0, renew_deadline_s: float = 10.0,
                 retry_period_s: float = 2.0, clock: Callable[[], float] = time.time):
        if not identity:
            raise InvalidArgument("identity", identity, "a non-empty, replica-unique name")
        if not 0 < retry_period_s < renew_deadline_s < lease_duration_s:
            raise InvalidArgument("lease timings", (retry_period_s, renew_deadline_s, lease_duration_s),
                                  "0 < retry_period_s < renew_deadline_s < lease_duration_s")
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self._renewed_at: float | None = None  # our last successful write as holder
        self._observed: tuple | None = None    # (holder, renewTime, transitions) last seen
        self._observed_at = 0.0                # our clock when that record last changed

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than ``renew_deadline_s``."""
        return self._renewed_at is not None and \
            self.clock() - self._renewed_at < self.renew_deadline_s

    def try_acquire_or_renew(self) -> bool:
        """One election step: create the Lease, renew ours, or take over an expired one.
        Returns :meth:`is_leader` afterwards.  API errors are logged, never raised: a
        candidate that cannot reach the API simply is not (or stops being) leader."""
        now = self.clock()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                log.warning("lease %s/%s: read failed: %s %s", self.namespace, self.name,
                            e.status, e.reason)
                return self.is_leader()
            return self._create(now)
        spec = lease.spec
        holder = spec.holder_identity or ""
        record = (holder, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = spec.lease_duration_seconds or self.lease_duration_s
        if holder and holder != self.identity and now < self._observed_at + duration:
            if self._renewed_at is not None:
                log.warning("lease %s/%s: now held by %s; this replica stops leading",
                            self.namespace, self.name, holder)
            self._renewed_at = None
            return False
        transitions = (spec.lease_transitions or 0) + (holder != self.identity)
        acquire = spec.acquire_time if holder == self.identity else _micro_time(now)
        body = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": self.identity,
                     "leaseDurationSeconds": int(round(self.lease_duration_s)),
                     "acquireTime": acquire if isinstance(acquire, str) else _micro_time(
                         acquire.timestamp() if acquire else now),
                     "renewTime": _micro_time(now), "leaseTransitions": transitions},
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as e:
            log.info("lease %s/%s: %s lost (%s %s)", self.namespace, self.name,
                     "renewal" if holder == self.identity else "takeover", e.status, e.reason)
            if holder != self.identity:
                self._renewed_at = None
            return self.is_leader()
        if holder != self.identity:
            log.info("lease %s/%s: %s is now leader (was %r)", self.namespace, self.name,
                     self.identity, holder)
        self._renewed_at = now
        return True

    def _create(self, now: float) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity,
                         "leaseDurationSeconds": int(round(self.lease_duration_s)),
                         "acquireTime": _micro_time(now), "renewTime": _micro_time(now),
                         "leaseTransitions": 0}}
        try:
            self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as e:
            log.info("lease %s/%s: create lost (%s %s)", self.namespace, self.name, e.status, e.reason)
            return False
        log.info("lease %s/%s: %s is now leader (created)", self.namespace, self.name, self.identity)
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Stop leading now (shutdown): empty the holder so a successor need not wait."""
        if not self.is_leader():
            return
        self._renewed_at = None
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity == self.identity:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace,
                                     "resourceVersion": lease.metadata.resource_version},
                        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                                 "renewTime": _micro_time(self.clock()),
                                 "leaseTransitions": lease.spec.lease_transitions or 0}}
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as e:
            log.info("lease %s/%s: release failed (%s)", self.namespace, self.name, e.status)
