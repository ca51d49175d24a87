"""The profile store: each job's solo activity profile, with the configuration it was measured in
(issue 23; docs/predictor.md, "Activity profiles").

A node agent measures a job while it runs alone on a GPU or on its own MIG slice
(:mod:`elastico.nodeagent.profiling`) and reports the averages (``ReportProfile``).  The store
keeps one :class:`StoredProfile` per key ``(job_key, gpu_model, mechanism, mps_share,
mig_profile)``: the job's identity as the live system knows it (the pods' group key:
``ns/label/<elastico.io/job>``, ``ns/<Kind>/<owner>`` or ``ns/pod/<name>``) and the
configuration -- GPU model, ``whole`` GPU / ``mps`` share / ``mig`` profile.  A new report of a
key replaces the old one (the newest window is the job's current behaviour).

Bounded: at most ``max_entries`` (default :data:`DEFAULT_MAX_ENTRIES`).  Eviction rule: when a
report brings a key the full store does not hold, the entry *reported least recently* is
evicted (each report stamps its entries with the store's next sequence number, persisted with
them; a lookup does not refresh an entry).  A job that keeps running is re-reported every
averaging window and stays; jobs gone longest go first.

Persisted (when given a path) as one JSON file, rewritten atomically after every accepted
report: ``{"format": 1, "seq": N, "entries": [...]}``.  A file that cannot be read back is
refused at load with InvalidArgument naming the file and the entry.

Validation: a report is all-or-nothing.  Every value is checked against the feature schema
(:mod:`elastico.predictor.schema`: SM / DRAM activity fractions in [0, 1], memory in [0, 1024]
GiB, PCIe >= 0) plus the fields of the key; one bad value raises InvalidArgument naming
``profiles[i].<field>`` and the value, and nothing of the report is stored: the previous
entries stay as they were.

Who calls it: :class:`elastico.predictor.service.PredictorCore` (ReportProfile, lookups).
Whom it calls: the schema, :class:`JobProfile`, the file system.  No gRPC, no clock.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from elastico.errors import InvalidArgument
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import GPU_SPECS, KINDS, check_job_field

__all__ = ["StoredProfile", "ProfileStore", "DEFAULT_MAX_ENTRIES", "MECHANISMS", "MAX_REPORT"]

#: Default bound on stored profiles: 10,000 (a few hundred bytes each as JSON, a few MB).
DEFAULT_MAX_ENTRIES = 10_000
#: Most profiles one report may carry.
MAX_REPORT = 10_000
#: How the job had its unit while it was measured.
MECHANISMS = ("whole", "mps", "mig")
_FORMAT = 1
_MAX_TEXT = 512


def _text(name: str, v: Any, allowed: str = "a non-empty string of at most 512 characters") -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > _MAX_TEXT:
        raise InvalidArgument(name, v, allowed)
    return v


def _opt_number(name: str, v: Any, lo: float, hi: float | None, allowed: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < lo or (hi is not None and v > hi):
        raise InvalidArgument(name, v, allowed)
    return float(v)


@dataclass(frozen=True)
class StoredProfile:
    """One job's solo profile in one configuration (module docstring).

    Key: ``job_key``, ``gpu_model`` (ElastiCo's GPU name, e.g. ``A100-40GB``, or NVML's
    name for a GPU the catalogue lacks), ``mechanism`` (one of :data:`MECHANISMS`),
    ``mps_share`` (fraction (0, 1], ``mps`` only), ``mig_profile`` (e.g. ``3g.40gb``, ``mig``
    only).  Counters (None = not measured; units and NVML/DCGM fields in docs/predictor.md):
    ``sm_activity``, ``dram_activity``, ``mem_gib``, ``pcie_rx_gbs``, ``pcie_tx_gbs``,
    ``process_sm_util`` (NVML per-process SM utilisation, fraction).  ``samples`` readings
    ``period_s`` s apart; ``kind`` (a schema kind or ""), ``node`` (who measured it),
    ``seq`` (report order, the eviction rule's clock).  Constructing one validates it
    (InvalidArgument naming the field)."""

    job_key: str
    gpu_model: str
    mechanism: str
    mps_share: float | None = None
    mig_profile: str | None = None
    sm_activity: float | None = None
    dram_activity: float | None = None
    mem_gib: float | None = None
    pcie_rx_gbs: float | None = None
    pcie_tx_gbs: float | None = None
    process_sm_util: float | None = None
    samples: int = 1
    period_s: float = 1.0
    kind: str = ""
    node: str = ""
    seq: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        _text("job_key", self.job_key)
        _text("gpu_model", self.gpu_model)
        if self.mechanism not in MECHANISMS:
            raise InvalidArgument("mechanism", self.mechanism, "one of " + ", ".join(MECHANISMS))
        d = self.__dict__
        if self.mechanism == "mps":
            if self.mps_share is None:
                raise InvalidArgument("mps_share", None, "a fraction in (0, 1] with mechanism mps")
            d["mps_share"] = check_job_field("mps_share", self.mps_share)
        elif self.mps_share is not None:
            raise InvalidArgument("mps_share", self.mps_share, f"unset with mechanism {self.mechanism}")
        if self.mechanism == "mig":
            _text("mig_profile", self.mig_profile, "a MIG profile name, e.g. 3g.40gb, with mechanism mig")
        elif self.mig_profile is not None:
            raise InvalidArgument("mig_profile", self.mig_profile, f"unset with mechanism {self.mechanism}")
        for name in ("sm_activity", "dram_activity", "mem_gib", "pcie_rx_gbs", "pcie_tx_gbs"):
            d[name] = check_job_field(name, d[name])  # the schema's ranges, field named
        d["process_sm_util"] = _opt_number("process_sm_util", self.process_sm_util, 0.0, 1.0,
                                           "a fraction in [0, 1]")
        s = self.samples
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise InvalidArgument("samples", s, "an integer >= 1")
        if _opt_number("period_s", self.period_s, 0.0, None, "seconds > 0") in (None, 0.0):
            raise InvalidArgument("period_s", self.period_s, "seconds > 0")
        if self.kind not in KINDS and self.kind != "":
            raise InvalidArgument("kind", self.kind, "one of " + ", ".join(KINDS) + " or ''")
        if not isinstance(self.node, str) or len(self.node) > _MAX_TEXT:
            raise InvalidArgument("node", self.node, "a string of at most 512 characters")

    @property
    def key(self) -> tuple[str, str, str, float | None, str | None]:
        return (self.job_key, self.gpu_model, self.mechanism, self.mps_share, self.mig_profile)

    def job_profile(self) -> JobProfile:
        """The predictor's :class:`JobProfile` of this measurement: ``job_type`` the job key
        (a label, not a catalogue type), the measured counters, ``sharing="mps"`` and the
        share for an MPS measurement, ``sharing="mig"`` for a MIG one (the prior then gives
        1: instances are isolated), ``gpu_model`` where the predictor knows the GPU (else
        "").  ``gpu_activity`` (the analytic model's input, required): DCGM SM activity when
        measured, else NVML's per-process SM utilisation (the share of time a kernel ran, an
        upper bound of SM activity), else 1 (unknown = fully busy, the conservative end).

        The busy fraction: the contention prior (:func:`elastico.predictor.prior.
        solo_activity`) reads the profile's ``sm_activity`` field as its ``u``, the share of
        the job's time its kernels hold the GPU.  NVML's ``process_sm_util`` *is* that share
        (nvmlDeviceGetProcessUtilization ``smUtil``: the percentage of time a kernel of the
        process was executing), so when it was measured it goes into ``sm_activity`` -- the
        schema's documented coarser fallback for that field (utilisation, not DCGM's
        ``SM_ACTIVE``); DCGM's ``SM_ACTIVE`` (SMs x time) only when NVML's is missing.  What
        the field holds is then a time fraction, not DCGM SM activity: it is >= SM activity
        (a narrow kernel holds the GPU's time slice while few SMs are active), which is what
        the prior's time-slicing rule ``1 + u_a u_b`` needs (docs/predictor.md, "Unknown
        jobs" and "The contention prior", LIMITATION)."""
        act = self.sm_activity if self.sm_activity is not None else (
            self.process_sm_util if self.process_sm_util is not None else 1.0)
        busy = self.process_sm_util if self.process_sm_util is not None else self.sm_activity
        sharing = {"mps": "mps", "mig": "mig"}.get(self.mechanism)
        return JobProfile(
            self.job_key, self.kind, act, self.mem_gib or 0.0,
            self.gpu_model if self.gpu_model in GPU_SPECS else "",
            sharing=sharing, mps_share=self.mps_share,
            sm_activity=busy, dram_activity=self.dram_activity,
            pcie_rx_gbs=self.pcie_rx_gbs, pcie_tx_gbs=self.pcie_tx_gbs)




def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ProfileStore:
    """Solo profiles, bounded and persisted (module docstring).  ``path``: the JSON file (None:
    in memory only); ``max_entries`` >= 1.  Loads ``path`` when it exists (InvalidArgument
    naming the file and entry when it is not a store file).  Thread-safe."""

    def __init__(self, path: str | Path | None = None, max_entries: int = DEFAULT_MAX_ENTRIES):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidArgument("max_entries", max_entries, "an integer >= 1")
        self.path = None if path is None else Path(path)
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: dict[tuple, StoredProfile] = {}
        self._seq = 0
        self.evicted = 0
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        where = str(self.path)
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InvalidArgument(where, "unreadable", f"a profile store JSON file ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT \
                or not isinstance(doc.get("entries"), list):
            raise InvalidArgument(where, str(doc)[:80], f'{{"format": {_FORMAT}, "seq": N, "entries": [...]}}')
        entries = {}
        for i, e in enumerate(doc["entries"]):
            try:
                if not isinstance(e, dict):
                    raise InvalidArgument("entry", e, "an object")
                p = StoredProfile(**e)
            except (InvalidArgument, TypeError) as err:
                raise InvalidArgument(f"{where}: entries[{i}]", e, str(err)) from None
            entries[p.key] = p
        seq = doc.get("seq", 0)
        self._seq = max([seq if isinstance(seq, int) else 0] + [p.seq for p in entries.values()])
        # a file written with a larger bound: keep the most recently reported
        keep = sorted(entries.values(), key=lambda p: p.seq)[-self.max_entries:]
        self._entries = {p.key: p for p in keep}

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": _FORMAT, "seq": self._seq,
               "entries": [asdict(p) for p in sorted(self._entries.values(), key=lambda p: p.seq)]}
        _atomic_write(self.path, json.dumps(doc, separators=(",", ":")) + "\n")

    def __len__(self) -> int:
        return len(self._entries)

    def report(self, profiles: Sequence[dict[str, Any] | StoredProfile]) -> int:
        """Stores ``profiles`` (dicts of :class:`StoredProfile` fields, ``seq`` excluded, or
        profiles), all or none; returns the entries stored in all.  InvalidArgument naming
        ``profiles[i].<field>`` for a bad one (nothing stored), for an empty report or one of
        more than :data:`MAX_REPORT`."""
        if not profiles:
            raise InvalidArgument("profiles", 0, "at least one profile")
        if len(profiles) > MAX_REPORT:
            raise InvalidArgument("profiles", len(profiles), f"at most {MAX_REPORT} per report")
        checked = []
        for i, p in enumerate(profiles):
            try:
                if isinstance(p, StoredProfile):
                    checked.append(p)
                    continue
                if not isinstance(p, dict) or "seq" in p:
                    raise InvalidArgument("profile", p, "an object of StoredProfile fields, no seq")
                checked.append(StoredProfile(**p))
            except InvalidArgument as e:
                raise InvalidArgument(f"profiles[{i}].{e.field}", e.value, e.allowed) from None
            except TypeError as e:
                raise InvalidArgument(f"profiles[{i}]", p, f"StoredProfile fields ({e})") from None
        with self._lock:
            before, seq, evicted = dict(self._entries), self._seq, self.evicted
            try:
                for p in checked:
                    self._seq += 1
                    if p.key not in self._entries and len(self._entries) >= self.max_entries:
                        oldest = min(self._entries.values(), key=lambda q: q.seq)
                        del self._entries[oldest.key]
                        self.evicted += 1
                    self._entries.pop(p.key, None)
                    self._entries[p.key] = StoredProfile(**{**asdict(p), "seq": self._seq})
                self._save()
            except BaseException:  # the file could not be written: the store stays as it was
                self._entries, self._seq, self.evicted = before, seq, evicted
                raise
            return len(self._entries)

    def get(self, job_key: str, gpu_model: str, mechanism: str = "whole",
            mps_share: float | None = None, mig_profile: str | None = None) -> StoredProfile | None:
        """The profile of that key, or None."""
        with self._lock:
            return self._entries.get((job_key, gpu_model, mechanism,
                                      None if mps_share is None else float(mps_share), mig_profile))

    def known_jobs(self, job_keys) -> set[str]:
        """The keys of ``job_keys`` with at least one stored solo profile (any configuration):
        the placer's lookup for the unknown-job rule (docs/predictor.md, "Unknown jobs"); the
        others are unknown."""
        want = set(job_keys)
        with self._lock:
            return {p.job_key for p in self._entries.values() if p.job_key in want}

    def known_slots(self, job_keys) -> dict[str, set[tuple]]:
        """Per key of ``job_keys`` with stored solo profiles: the set of slots (GPU model,
        mechanism, MPS share, MIG profile) it has one for -- the placer's per-GPU-model lookup
        (counters are not portable across GPU models or MPS shares)."""
        want = set(job_keys)
        out: dict[str, set[tuple]] = {}
        with self._lock:
            for p in self._entries.values():
                if p.job_key in want:
                    mech, share = p.mechanism, p.mps_share
                    if mech == "mps" and share is not None and share >= 1.0:
                        mech, share = "whole", None  # a full share is a whole GPU's counters
                    elif share is not None:
                        share = round(float(share), 4)  # as the placer's profile_slot
                    out.setdefault(p.job_key, set()).add((p.gpu_model, mech, share,
                                                          p.mig_profile))
        return out

    def for_job(self, job_key: str) -> list[StoredProfile]:
        """Every stored configuration of ``job_key``, most recently reported first."""
        with self._lock:
            return sorted((p for p in self._entries.values() if p.job_key == job_key),
                          key=lambda p: -p.seq)

    def entries(self) -> list[StoredProfile]:
        """Every entry, oldest report first (the eviction order)."""
        with self._lock:
            return sorted(self._entries.values(), key=lambda p: p.seq)
