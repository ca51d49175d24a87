"""Per-job online correction of the population model (docs/predictor.md, "Per-job correction").

The population model (the contention prior x LightGBM, :mod:`elastico.predictor.model`) sees a
job only through identity-free features: two jobs with the same solo counters get the same
prediction even when they contend differently (a counter does not say how much of the busy time
is compute- or bandwidth-bound).  Once a live job has been observed co-located, its own
observations say how far the population model is off *for it*.  This module learns that, per
job, in log space, shrunk toward the population model.

**Model** (a Gaussian random-effects model on the *extra* slowdown).  Every contention model
the project has makes a pair's extra slowdown a product of a victim term and a partner term --
the prior's ``u_a u_b (D - 1)``, the simulator's ``busy_a q_b (g - 1)``
(:mod:`elastico.predictor.prior`, :mod:`elastico.perf.contention`) -- so a job that suffers
(or inflicts) more than its counters say does so by a factor.  For victim ``a`` next to
partner ``b`` on which the population model predicts ``p``::

    slowdown = 1 + e exp(v[a] + g[b] + w[a, b] + beta[a] c_b + gamma[b] c_a),
    e = max(p - 1, MIN_EXTRA),     ln(observed) = ln(slowdown) + eps,     eps ~ N(0, s2)
    v[a] ~ N(0, tau_v2),  g[b] ~ N(0, tau_g2),  w[a, b] ~ N(0, tau_p2),
    beta[a] ~ N(0, tau_b2),  gamma[b] ~ N(0, tau_c2)

``v[a]``: the log factor by which ``a`` suffers more than predicted (victim effect); ``g[b]``:
by which ``b`` inflicts more (partner effect); ``w[a, b]``: what is particular to the ordered
pair (learned from repeated observations of it -- co-located jobs stay together and are
measured again; ``pair_effects=False`` leaves it out); ``beta[a]``, ``gamma[b]``: per-job
*slopes* on the other job's measured DRAM activity ``c = dram_activity - m`` (``m`` the mean
over the stored sides that have one; ``c = 0`` where it is not measured) -- how much more
``a`` suffers next to a partner that streams more (``beta``), how much more ``b`` inflicts on
a victim that streams more (``gamma``).  Why DRAM: under MPS a pair's contention is not a
product of a victim and a partner term (shared bandwidth slows a job only once the two
jobs' demands *together* pass what the GPU has), so a job's factor varies with the partner's
bandwidth demand; ``slopes=False`` leaves them out.  ``eps``: measurement noise (multiplicative, as
step-time noise is) and what neither effect explains.  The keys ``a``, ``b`` are the *live
jobs* as the profile store keys them (:func:`job_key`: the profile's ``job_type`` -- for
node-reported profiles the job's pod-group key -- with the GPU model, the sharing mechanism
and MPS share it runs at), never a catalogue job type.  The slowdown served is
``1 + e exp(v[a] + g[b] + w[a, b] + beta[a] c_b + gamma[b] c_a)`` (clipped to [1, 50] as the
model's), the population model's for a pair where neither job has observations.

**Estimate.**  The posterior mode of the effects given every stored observation: minimise
``sum r_i^2 / s2 + sum v^2 / tau_v2 + sum g^2 / tau_g2`` (+ the same for ``w``, ``beta``,
``gamma``) with ``r_i = ln obs_i - ln slowdown_i``
by Gauss-Newton (the iterated extended Kalman filter's update: linearise ``ln slowdown`` in
``v + g``, slope ``J = e exp(v + g) / slowdown``, the share of the slowdown that is extra), each
linear step solved by Gauss-Seidel over the jobs -- each job's effect set to its conditional
posterior mean, e.g. ``v[a] = sum J_i (z_i - J_i g[b_i]) / (sum J_i^2 + s2 / tau_v2)`` with the
working response ``z_i = r_i + J_i (v[a] + g[b_i])``.  So a job's *first* observation ``y =
ln(observed / p)`` next to a partner with none moves ``v[a]``, in the first (Kalman) step, by
the gain ``tau_v2 J / (J^2 (tau_v2 + tau_g2) + s2)`` times ``y`` (``J = e / p``), and ``g[b]``
by ``tau_g2 J / (...)`` times ``y``; later steps refine for the curvature.  A slope is one
more block of the same sweep with the covariate as regressor: ``beta[a] = sum J_i c_i (z_i -
J_i (theta_i - beta[a] c_i)) / (sum J_i^2 c_i^2 + s2 / tau_b2)`` (``theta_i`` the side's
summed effects), so the first observation alone moves ``beta[a]`` by ``tau_b2 c J y / (tau_b2
c^2 J^2 + s2)`` when only slopes are on (tests/test_predictor_online.py works it by hand).
An observation of
a pair with (almost) no predicted contention (``J ~ 0``) says (almost) nothing about either
job, as it should.

**Variances from the data** (method of moments on the records' log residuals ``y_i = ln(obs_i
/ p_i)`` *at arrival* -- against the population model serving when each was reported, which
had not been trained on it -- and only those reported while the *serving* model served: a
replaced model's errors are not this one's (residuals from the prior-only period before the
first refit are several times the refitted model's, and variances estimated from them let
the effects fit noise: the over-correction bench/online_learning.py measured after the first
refit) -- to first order ``y_i = J_i (v + g) + eps``): two observations with
the same victim and different partners have covariance ``J_i J_k tau_v2``; with the same
partner and different victims ``J_i J_k tau_g2``; ``E y_i^2 = J_i^2 (tau_v2 + tau_g2) + s2``.
repeated observations of one ordered pair ``J_i J_k (tau_v2 + tau_g2 + tau_p2)``.  With the
slopes, same-victim pairs have covariance ``J_i J_k (tau_v2 + tau_b2 c_i c_k)`` (``c`` the
partners' covariates), so ``tau_v2``, ``tau_b2`` solve the two moment equations weighted by 1
and by ``c_i c_k``::

    sum y_i y_k           = tau_v2 sum J_i J_k           + tau_b2 sum J_i J_k c_i c_k
    sum y_i y_k c_i c_k   = tau_v2 sum J_i J_k c_i c_k   + tau_b2 sum J_i J_k c_i^2 c_k^2

(without slopes the first alone: ``tau_v2 = sum y_i y_k / sum J_i J_k``); ``tau_g2``,
``tau_c2`` likewise over same-partner pairs with the victims' covariates; ``tau_p2`` from
repeats, less what the other components explain; ``s2`` = ``mean(y_i^2 - (tau_v2 + tau_g2 +
tau_p2 + tau_b2 c_b^2 + tau_c2 c_a^2) J_i^2)`` (floored at :data:`MIN_VARIANCE`).  A negative
component is set to 0 (no correction of that kind; in a pair of equations the other is then
refitted alone, the one of the two one-component fits closer to both moments kept).  Until at
least :data:`MIN_JOBS` victims and partners have two observations each, no correction is
applied: the population model serves alone.  No tuned constant: the six variances are
re-estimated on every update.

**When the population model changes** (a refit is promoted) the effects are solved again
against the new model, so a bias the refit absorbed is not counted twice; until sides are
reported under the new model the variances are (0, 0, 1): no correction.

**Guard** (a held-out check, as a refit's promotion has one).  Every reported batch is scored,
before it is learned from, by the effects fitted so far and by the population model alone:
the summed ``|ln observed - ln predicted|`` of each, since the serving population model
began.  The correction is served (:attr:`JobCorrections.serving`) only once that score exists
and the correction's is no larger; otherwise the population model serves, while the effects
keep being fitted.  So the correction never keeps serving when it predicts worse out of
sample.  Nor is it served while the variance estimate is *degenerate* (:attr:`JobCorrections.
degenerate`): the components claim all of the residuals' variance, the remainder ``s2`` is
below :data:`MIN_VARIANCE` -- a moment solution outside the parameter space (noise variance
<= 0), common with the few sides right after a refit, with which the effects fit noise
unshrunk (log factors of 3-7 measured).  With fixed ``variances`` (a caller that asserts the
model) there is no guard.

**Bounds.**  At most ``max_records`` measured sides (newest kept; default 20,000) -- the solve
is linear in them -- and so at most ``2 x max_records`` job keys.  The state is a function of
the stored observations and the population model, so it persists with the reported
observations (the model store's ``observations/reported.csv``): :class:`~elastico.predictor.
service.PredictorCore` replays the newest at start.

Who calls it: :class:`elastico.predictor.service.PredictorCore` (``report`` feeds it,
``predict`` applies it).  Whom it calls: numpy.  No clock, no I/O.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Callable, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor.observations import Observation
from elastico.predictor.profile import JobProfile

__all__ = ["JobCorrections", "job_key", "MIN_JOBS", "MIN_VARIANCE", "MIN_EXTRA"]

#: Jobs (as victims, and as partners) with >= 2 observations needed before the variances are
#: estimated at all; below it the correction is off.  Fewer than 5 groups make a moment
#: estimate of a between-group variance meaningless (its sampling spread exceeds its size).
MIN_JOBS = 5
#: Floor of the noise variance (log units): a slowdown is not measured better than 0.1 %.
MIN_VARIANCE = 1e-6
#: Floor of the predicted extra slowdown ``p - 1`` the correction scales: 1 %, well inside the
#: measurement spread of a slowdown (8 % between GPUs of one SKU: Sinha et al., SC'22), so a
#: pair predicted contention-free (e.g. MIG) is corrected only as far as its observations say.
MIN_EXTRA = 0.01
_SWEEPS = 200
_GN_ITERS = 30
_TOL = 1e-10

#: ``(victims, partners, gpu_model) -> population slowdowns`` of the victims, shape (n,).
PopulationFn = Callable[[Sequence[JobProfile], Sequence[JobProfile], str], np.ndarray]


def job_key(p: JobProfile) -> tuple:
    """The live job a profile stands for, in the configuration it runs at: ``(job_type,
    gpu_model, sharing, mps_share)`` (the profile store's key: job key + configuration)."""
    return (p.job_type, p.gpu_model, p.sharing or "", p.mps_share)


class JobCorrections:
    """Per-job log-residual effects over the population model (module docstring).

    ``max_records``: observations kept (newest), an integer >= 1.  ``variances``: fix
    ``(tau_v2, tau_g2, s2)`` instead of estimating them (tests; each >= 0, ``s2 > 0``), with
    ``pair_variance`` (``tau_p2``, default 0) and ``slope_variances`` (``(tau_b2, tau_c2)``,
    default 0, 0) fixed too; ``pair_effects=False``: no pair effects; ``slopes=False``: no
    DRAM slopes.
    InvalidArgument for a bad argument."""

    def __init__(self, max_records: int = 20_000,
                 variances: tuple[float, float, float] | None = None,
                 pair_variance: float = 0.0, pair_effects: bool = True,
                 slope_variances: tuple[float, float] = (0.0, 0.0), slopes: bool = True):
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise InvalidArgument("max_records", max_records, "an integer >= 1")
        if variances is not None:
            ok = (len(variances) == 3 and all(isinstance(x, (int, float)) and math.isfinite(x)
                                              and x >= 0 for x in variances)
                  and variances[2] > 0)
            if not ok:
                raise InvalidArgument("variances", variances,
                                      "(tau_v2, tau_g2, s2), finite, >= 0, s2 > 0")
        if not (len(slope_variances) == 2 and all(
                isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                for x in slope_variances)):
            raise InvalidArgument("slope_variances", slope_variances,
                                  "(tau_b2, tau_c2), finite, >= 0")
        self.max_records = max_records
        self._fixed = None if variances is None else tuple(float(x) for x in variances)
        # records: (victim key, partner key, victim profile, partner profile, gpu, ln observed)
        self._rec: deque = deque(maxlen=max_records)
        self._ed: deque = deque(maxlen=max_records)  # population extra slowdown per record
        # (log residual, slope J, population version) of each record at arrival (out of
        # sample for that version)
        self._y0: deque = deque(maxlen=max_records)
        # (victim effects, partner effects), replaced as one object by each solve
        self._effects: tuple = ({}, {}, {}, {}, {}, 0.0)
        self.variances: tuple[float, float, float] = (0.0, 0.0, 1.0)
        self.pair_effects = bool(pair_effects)
        #: ``tau_p2``, the pair effects' variance (estimated unless ``variances`` is fixed)
        self.pair_variance = float(pair_variance)
        self.slopes = bool(slopes)
        #: ``(tau_b2, tau_c2)``, the DRAM slopes' variances (estimated unless ``variances`` is
        #: fixed; then these fixed values)
        self.slope_variances = tuple(float(x) for x in slope_variances)
        self.pop_version: str | None = None
        #: the guard's tally since the serving population model began (module docstring,
        #: "Guard"): (sum |log error| of the correction, of the population model, sides)
        self._tally: tuple[float, float, int] = (0.0, 0.0, 0)
        #: the last variance estimate had no room left for noise (:meth:`estimate_variances`)
        self.degenerate = False
        self._lock = threading.Lock()

    @property
    def v(self) -> dict[tuple, float]:
        """Victim effects by :func:`job_key` (log factor on the extra slowdown; absent = 0)."""
        return self._effects[0]

    @property
    def g(self) -> dict[tuple, float]:
        """Partner effects by :func:`job_key` (absent = 0)."""
        return self._effects[1]

    @property
    def pair(self) -> dict[tuple, float]:
        """Pair effects by ``(victim key, partner key)`` (absent = 0)."""
        return self._effects[2]

    @property
    def victim_slope(self) -> dict[tuple, float]:
        """Victim DRAM slopes ``beta`` by :func:`job_key` (absent = 0)."""
        return self._effects[3]

    @property
    def partner_slope(self) -> dict[tuple, float]:
        """Partner DRAM slopes ``gamma`` by :func:`job_key` (absent = 0)."""
        return self._effects[4]

    @property
    def dram_centre(self) -> float:
        """The DRAM activity the slopes are centred at (mean over the stored sides)."""
        return self._effects[5]

    def __len__(self) -> int:
        return len(self._rec)

    # -- feeding ---------------------------------------------------------------------------
    def observe(self, obs: Sequence[Observation], population: PopulationFn,
                version: str) -> None:
        """Adds the measured sides of ``obs`` (A next to B; B next to A when ``slowdown_b``
        is given) and solves again.  ``population``: the serving population model;
        ``version``: its version (a change recomputes every stored residual)."""
        with self._lock:
            new = []
            for o in obs:
                new.append((job_key(o.a), job_key(o.b), o.a, o.b, o.gpu_model,
                            math.log(o.slowdown_a)))
                if o.slowdown_b is not None:
                    new.append((job_key(o.b), job_key(o.a), o.b, o.a, o.gpu_model,
                                math.log(o.slowdown_b)))
            p_new = self._population(new, population)
            e_new = np.maximum(p_new - 1.0, MIN_EXTRA)
            lo_new = np.array([r[5] for r in new], dtype=float)
            if version == self.pop_version:
                # the guard's out-of-sample score (module docstring, "Guard"): the new sides
                # against the effects fitted before they arrived, and against the population
                corr = self._corrected([r[2] for r in new], [r[3] for r in new], p_new)
                t = self._tally
                self._tally = (t[0] + float(np.sum(np.abs(lo_new - np.log(corr)))),
                               t[1] + float(np.sum(np.abs(lo_new - np.log(p_new)))),
                               t[2] + len(new))
            else:
                self._tally = (0.0, 0.0, 0)
            self._rec.extend(new)
            self._ed.extend(e_new.tolist())
            # the new records' residuals against the model serving when they arrived: it was
            # not trained on them, so they estimate the variances honestly (module docstring);
            # kept with that model's version: only the serving model's own count
            y_new = lo_new - np.log1p(e_new)
            self._y0.extend(zip(y_new.tolist(), (e_new / (1.0 + e_new)).tolist(),
                                [version] * len(new)))
            if version != self.pop_version:
                self._ed = deque(self._extra(list(self._rec), population).tolist(),
                                 maxlen=self.max_records)
                self.pop_version = version
            self._solve()

    def rebase(self, population: PopulationFn, version: str) -> None:
        """The population model changed to ``version``: recompute every residual, solve."""
        with self._lock:
            if version == self.pop_version:
                return
            self._ed = deque(self._extra(list(self._rec), population).tolist(),
                             maxlen=self.max_records)
            self.pop_version = version
            self._tally = (0.0, 0.0, 0)
            self._solve()

    @staticmethod
    def _population(recs: list, population: PopulationFn) -> np.ndarray:
        """The population model's slowdown ``p`` of each record, shape (n,)."""
        out = np.ones(len(recs))
        by_gpu: dict[str, list[int]] = {}
        for i, r in enumerate(recs):
            by_gpu.setdefault(r[4], []).append(i)
        for gpu, idx in by_gpu.items():
            out[idx] = np.asarray(population([recs[i][2] for i in idx],
                                             [recs[i][3] for i in idx], gpu), dtype=float)
        return out

    @classmethod
    def _extra(cls, recs: list, population: PopulationFn) -> np.ndarray:
        """The population model's extra slowdown ``max(p - 1, MIN_EXTRA)`` of each record."""
        return np.maximum(cls._population(recs, population) - 1.0, MIN_EXTRA)

    # -- estimation --------------------------------------------------------------------------
    def _index(self):
        vk = [r[0] for r in self._rec]
        gk = [r[1] for r in self._rec]
        vids = {k: i for i, k in enumerate(dict.fromkeys(vk))}
        gids = {k: i for i, k in enumerate(dict.fromkeys(gk))}
        vi = np.array([vids[k] for k in vk], dtype=np.int64)
        gi = np.array([gids[k] for k in gk], dtype=np.int64)
        return vids, gids, vi, gi

    @staticmethod
    def _cross(z: np.ndarray, grp: np.ndarray, sub: np.ndarray, n_grp: int) -> float:
        """Sum of ``z_i z_k`` over ordered pairs ``i != k`` in one ``grp`` but with different
        ``sub`` (the other side's key)."""
        s1 = np.bincount(grp, z, n_grp)
        s2 = np.bincount(grp, z * z, n_grp)
        tot = float(np.sum(s1 * s1 - s2))
        # remove pairs with the same (grp, sub): their covariance has both components
        pair = grp * (int(sub.max()) + 1 if len(sub) else 1) + sub
        _, inv = np.unique(pair, return_inverse=True)
        p1 = np.bincount(inv, z)
        p2 = np.bincount(inv, z * z)
        return tot - float(np.sum(p1 * p1 - p2))

    @staticmethod
    def _pair_index(vi: np.ndarray, gi: np.ndarray) -> tuple[np.ndarray, int]:
        pair = vi * (int(gi.max()) + 1 if len(gi) else 1) + gi
        _, inv = np.unique(pair, return_inverse=True)
        return inv, int(inv.max()) + 1 if len(inv) else 0

    @staticmethod
    def _same(z: np.ndarray, grp: np.ndarray, n_grp: int) -> float:
        """Sum of ``z_i z_k`` over ordered pairs ``i != k`` in one ``grp``."""
        s1 = np.bincount(grp, z, n_grp)
        s2 = np.bincount(grp, z * z, n_grp)
        return float(np.sum(s1 * s1 - s2))

    def _covariates(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Per stored side: the partner's and the victim's measured DRAM activity minus their
        mean ``m`` over the stored sides that have one (0 where not measured: no slope term),
        shapes (n,), and ``m``."""
        da = np.array([np.nan if r[2].dram_activity is None else r[2].dram_activity
                       for r in self._rec], dtype=float)
        db = np.array([np.nan if r[3].dram_activity is None else r[3].dram_activity
                       for r in self._rec], dtype=float)
        both = np.concatenate([da, db])
        ok = ~np.isnan(both)
        m = float(both[ok].mean()) if ok.any() else 0.0
        return np.nan_to_num(db - m), np.nan_to_num(da - m), m

    def _moments2(self, y, j, c, grp, sub, n_grp) -> tuple[float, float]:
        """``(tau, tau_slope)`` of one side (module docstring): over pairs of sides with the
        same ``grp`` and different ``sub``, ``E y_i y_k = J_i J_k (tau + tau_slope c_i c_k)``;
        the moment equations weighted by 1 and by ``c_i c_k``.  A negative solution sets that
        component to 0 and re-solves the other alone."""
        a = self._cross(j, grp, sub, n_grp)
        if a <= 0:
            return 0.0, 0.0
        r1 = self._cross(y, grp, sub, n_grp)
        if not self.slopes:
            return max(0.0, r1 / a), 0.0
        b = self._cross(j * c, grp, sub, n_grp)
        cc = self._cross(j * c * c, grp, sub, n_grp)
        r2 = self._cross(y * c, grp, sub, n_grp)
        det = a * cc - b * b
        if det > 1e-12 * max(a * cc, 1e-300):
            t = (r1 * cc - r2 * b) / det
            ts = (a * r2 - b * r1) / det
            if t >= 0 and ts >= 0:
                return t, ts
        t_alone = max(0.0, r1 / a)
        ts_alone = max(0.0, r2 / cc) if cc > 0 else 0.0
        # the one-component fit that explains more of the two moments
        e_t = (r1 - t_alone * a) ** 2 + (r2 - t_alone * b) ** 2
        e_s = (r1 - ts_alone * b) ** 2 + (r2 - ts_alone * cc) ** 2
        return (t_alone, 0.0) if e_t <= e_s else (0.0, ts_alone)

    def _honest(self) -> np.ndarray | None:
        """Mask of the stored sides whose residual at arrival was taken against the model
        serving now (:attr:`pop_version`): the only residuals that measure *its* errors out of
        sample.  None when the residuals and records are out of step."""
        if len(self._y0) != len(self._rec):
            return None
        return np.array([t[2] == self.pop_version for t in self._y0], dtype=bool)

    @staticmethod
    def _reindex(ix: np.ndarray) -> tuple[np.ndarray, int]:
        _, inv = np.unique(ix, return_inverse=True)
        return inv.astype(np.int64), int(inv.max()) + 1 if len(inv) else 0

    def estimate_pair_variance(self, tv: float, tg: float, tb: float = 0.0,
                               tc: float = 0.0) -> float:
        """``tau_p2`` (module docstring): repeated observations of one ordered pair have
        covariance ``J_i J_k (tau_v2 + tau_g2 + tau_b2 c_b^2 + tau_c2 c_a^2 + tau_p2)``; 0
        without repeats.  Over the sides reported while the serving model served."""
        mask = self._honest()
        if mask is None or mask.sum() < 2:
            return 0.0
        y = np.array([t[0] for t in self._y0], dtype=float)[mask]
        j = np.array([t[1] for t in self._y0], dtype=float)[mask]
        _, _, vi, gi = self._index()
        cb, ca, _ = self._covariates()
        cb, ca = cb[mask], ca[mask]
        pi, n = self._pair_index(vi[mask], gi[mask])
        d = self._same(j, pi, n)
        if d <= 0:
            return 0.0
        known = (tv + tg) * d + tb * self._same(j * cb, pi, n) + tc * self._same(j * ca, pi, n)
        return max(0.0, (self._same(y, pi, n) - known) / d)

    def estimate_variances(self) -> tuple[float, float, float]:
        """``(tau_v2, tau_g2, s2)`` by the moments of the module docstring from the residuals
        *at arrival* of the sides reported while the serving population model
        (:attr:`pop_version`) served -- out of sample for it, and of its errors, not of an
        earlier model's (residuals against a replaced model, e.g. the prior before the first
        refit, overstate the variances and the effects then fit noise); ``(0, 0, 1)`` (no
        correction) with too little such data.  Sets :attr:`pair_variance` and
        :attr:`slope_variances` as well."""
        self.slope_variances = (0.0, 0.0)
        self.degenerate = False
        mask = self._honest()
        if mask is None or mask.sum() < 2:
            return (0.0, 0.0, 1.0)
        y = np.array([t[0] for t in self._y0], dtype=float)[mask]
        j = np.array([t[1] for t in self._y0], dtype=float)[mask]
        _, _, vi_all, gi_all = self._index()
        vi, nv = self._reindex(vi_all[mask])
        gi, ng = self._reindex(gi_all[mask])
        if (np.sum(np.bincount(vi) >= 2) < MIN_JOBS or np.sum(np.bincount(gi) >= 2) < MIN_JOBS):
            return (0.0, 0.0, 1.0)
        cb, ca, _ = self._covariates()
        cb, ca = cb[mask], ca[mask]
        tv, tb = self._moments2(y, j, cb, vi, gi, nv)
        tg, tc = self._moments2(y, j, ca, gi, vi, ng)
        tp = self.estimate_pair_variance(tv, tg, tb, tc) if self.pair_effects else 0.0
        s2 = float(np.mean(y * y - (tv + tg + tp + tb * cb * cb + tc * ca * ca) * j * j))
        # the components claim more than all of the residuals' variance (noise variance <=
        # 0): a moment solution outside the parameter space, with which the effects fit
        # noise unshrunk -- kept for inspection, floored, but not served (:attr:`serving`)
        self.degenerate = s2 < MIN_VARIANCE
        s2 = max(MIN_VARIANCE, s2)
        self.pair_variance = tp
        self.slope_variances = (tb, tc)
        return (tv, tg, s2)

    def _solve(self, iterations: int = _GN_ITERS) -> None:
        if self._fixed is not None:
            self.variances = self._fixed
        else:
            self.variances = self.estimate_variances()
        tv, tg, s2 = self.variances
        tp = self.pair_variance if self.pair_effects else 0.0
        tb, tc = self.slope_variances if self.slopes else (0.0, 0.0)
        if len(self._rec) == 0 or max(tv, tg, tp, tb, tc) <= 0:
            self._effects = ({}, {}, {}, {}, {}, 0.0)
            return
        vids, gids, vi, gi = self._index()
        pi, npair = self._pair_index(vi, gi)
        cb, ca, centre = self._covariates()
        ones = np.ones(len(vi))
        # blocks: (group index, regressor, groups, prior variance) -- the effect of a side is
        # sum over blocks of coef[block][group] * regressor
        blocks = [(vi, ones, len(vids), tv), (gi, ones, len(gids), tg), (pi, ones, npair, tp),
                  (vi, cb, len(vids), tb), (gi, ca, len(gids), tc)]
        coef = [np.zeros(n) for _, _, n, _ in blocks]
        e = np.array(self._ed, dtype=float)
        lo = np.array([r[5] for r in self._rec], dtype=float)

        def theta():
            return sum(cf[ix] * x for cf, (ix, x, _, _) in zip(coef, blocks))

        for _ in range(iterations):  # Gauss-Newton (iterated EKF)
            th = theta()
            ex = e * np.exp(th)
            sl = 1.0 + ex
            jac = ex / sl
            z = lo - np.log(sl) + jac * th
            jj = jac * jac
            norm = [np.bincount(ix, jj * x * x, n) + (s2 / t if t > 0 else 0.0)
                    for ix, x, n, t in blocks]
            before = [c.copy() for c in coef]
            for _ in range(_SWEEPS):  # Gauss-Seidel on the linear step
                th_lin = theta()
                moved = 0.0
                for b, (ix, x, n, t) in enumerate(blocks):
                    if t <= 0:
                        continue
                    rest = th_lin - coef[b][ix] * x
                    new = np.bincount(ix, jac * x * (z - jac * rest), n) / np.where(
                        norm[b] > 0, norm[b], 1.0)
                    moved = max(moved, float(np.max(np.abs(new - coef[b]), initial=0)))
                    th_lin = rest + new[ix] * x
                    coef[b] = new
                if moved < _TOL:
                    break
            if max(float(np.max(np.abs(c - c0), initial=0)) for c, c0 in zip(coef, before)) \
                    < _TOL:
                break
        v, g, q, bv, cg = coef
        vkeys, gkeys = list(vids), list(gids)
        pkeys = {}
        for r_vi, r_gi, r_pi in zip(vi.tolist(), gi.tolist(), pi.tolist()):
            pkeys[r_pi] = (vkeys[r_vi], gkeys[r_gi])
        # one assignment: a concurrent predict sees the old or the new effects, never a mix
        self._effects = ({k: float(v[i]) for k, i in vids.items() if v[i] != 0.0},
                         {k: float(g[i]) for k, i in gids.items() if g[i] != 0.0},
                         {pkeys[i]: float(q[i]) for i in range(npair) if q[i] != 0.0},
                         {k: float(bv[i]) for k, i in vids.items() if bv[i] != 0.0},
                         {k: float(cg[i]) for k, i in gids.items() if cg[i] != 0.0},
                         centre)

    # -- serving -----------------------------------------------------------------------------
    def factors(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile]
                ) -> np.ndarray:
        """``exp(v[a] + g[b] + w[a, b] + beta[a] c_b + gamma[b] c_a)`` per pair, shape (n,):
        the factor on the extra slowdown (``c``: a job's measured DRAM activity minus
        :attr:`dram_centre`, 0 when not measured); 1 where neither job has observations."""
        v, g, q, bv, cg, m = self._effects
        if not (v or g or q or bv or cg):
            return np.ones(len(victims))
        out = []
        for a, b in zip(victims, partners):
            ka, kb = job_key(a), job_key(b)
            t = v.get(ka, 0.0) + g.get(kb, 0.0) + q.get((ka, kb), 0.0)
            if bv and b.dram_activity is not None:
                t += bv.get(ka, 0.0) * (b.dram_activity - m)
            if cg and a.dram_activity is not None:
                t += cg.get(kb, 0.0) * (a.dram_activity - m)
            out.append(t)
        return np.exp(np.array(out, dtype=float))

    @property
    def serving(self) -> bool:
        """Whether :meth:`apply` corrects (module docstring, "Guard"): always with fixed
        ``variances``; with estimated ones only once the correction has been scored out of
        sample since the serving population model began, and there did no worse than it."""
        if self._fixed is not None:
            return True
        corr, pop, n = self._tally
        return n > 0 and corr <= pop and not self.degenerate

    def apply(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
              population: np.ndarray, guarded: bool = True) -> np.ndarray:
        """The corrected slowdowns, shape (n,): ``1 + max(p - 1, MIN_EXTRA) x factor`` where
        a factor is not 1, clipped to [1, 50]; ``population`` unchanged elsewhere and, with
        ``guarded`` (the service's way), while the guard holds the correction back
        (:attr:`serving`)."""
        pop = np.asarray(population, dtype=float)
        if guarded and not self.serving:
            return pop
        return self._corrected(victims, partners, pop)

    def _corrected(self, victims, partners, pop: np.ndarray) -> np.ndarray:
        """:meth:`apply` without the guard."""
        pop = np.asarray(pop, dtype=float)
        if not any(self._effects[:5]):
            return pop
        f = self.factors(victims, partners)
        out = np.where(f == 1.0, pop, 1.0 + np.maximum(pop - 1.0, MIN_EXTRA) * f)
        return np.clip(out, 1.0, 50.0)
