"""The training-activity model against AcmeTrace (issue 22, deliverable 6: ``sm_active_ks``).

``python bench/activity_model.py [--json] [--jobs N] [--seed S] [--no-simulate]
[--sim-gpus G] [--sim-cluster C]``  or  ``python bench/activity_model.py --fit``

Each check is one JSON object per line (``--json``) with the keys of ``bench/training_model.py``'s
checks -- ``check`` (``sm_active_ks``), ``dataset``, ``points``, ``ks`` -- or a readable line:

* ``acmetrace-seren``: the SM activity alone of ``--jobs`` (20,000) one-GPU jobs drawn by
  :func:`elastico.perf.activity.population_sm_active` (seed ``--seed``, 0), against AcmeTrace
  Seren's ``DCGM_FI_PROF_SM_ACTIVE`` quantiles above 0 (the calibration; ``points`` = jobs).
  Goal: ``ks <= 0.1``.
* ``acmetrace-kalos-held-out``: the same population against Kalos's (not fitted to; the two
  clusters' own CDFs are ``acmetrace-seren-vs-kalos`` apart, also printed).
* ``acmetrace-seren/simulator-<cluster>-<G>-exclusive-seeds-0-1-2``: the simulator's own
  population: ``exclusive`` replays of ``elastico evaluate``'s default workload (continuous
  arrivals, load 0.5) for each of ``--sim-seeds`` (0,1,2; the activity draws seeded alike) on the
  ``--sim-cluster`` (``trace``) sub-cluster of ``--sim-gpus`` (512) GPUs; every GPU holding batch
  jobs is read per event interval of the measurement window (:mod:`elastico.sim.utilisation`),
  readings above 0 weighted by the interval's length, the seeds pooled (``points`` = the jobs
  read).  Its KS is the model's plus the sampling noise of a finite replay: a few long jobs hold
  most of the GPU-time, so one seed's replay is worth ~160 independent jobs (printed on stderr
  as the effective sample), whose KS noise alone is ~0.07.

``--fit`` refits :data:`elastico.perf.activity.LEVEL_MIX` (Nelder-Mead on the KS distance of the
``acmetrace-seren`` population, from three starts) and prints the constants to paste there.

Measured (2 shared cores): the model checks ~2 s, each 512-GPU replay 40-75 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from elastico.perf import activity as act


def model_checks(jobs: int, seed: int) -> list[dict]:
    pop = act.population_sm_active(jobs, seed=seed)
    seren = act.acmetrace_quantiles("Seren", act.SM_ACTIVE)
    kalos = act.acmetrace_quantiles("Kalos", act.SM_ACTIVE)
    return [
        {"check": "sm_active_ks", "dataset": "acmetrace-seren", "points": int(pop.size),
         "ks": round(act.ks_distance(pop, seren), 4)},
        {"check": "sm_active_ks", "dataset": "acmetrace-kalos-held-out", "points": int(pop.size),
         "ks": round(act.ks_distance(pop, kalos), 4)},
        {"check": "sm_active_ks", "dataset": "acmetrace-seren-vs-kalos",
         "points": int(seren.size), "ks": round(act.ks_distance(seren, kalos), 4)},
    ]


def simulator_check(cluster: str, gpus: int, seeds: list[int]) -> dict:
    from elastico import trace
    from elastico.perf.throughput import ThroughputModel
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.predictor import AnalyticSlowdown
    from elastico.sim import workload
    from elastico.sim.clusters import load_cluster
    from elastico.sim.simulator import simulate
    from elastico.sim.utilisation import UtilisationMeter

    pods = trace.read_pods()
    nodes = load_cluster(cluster).nodes(gpus, trace.read_nodes())
    model = ThroughputModel.bundled()
    win = workload.default_window(pods)
    values, weights, per_job = [], [], {}
    for seed in seeds:
        wl = workload.build_continuous_workload(pods, nodes, seed=seed, load=0.5, model=model,
                                                window=win)
        policy = make_policy("exclusive", PolicyEnv(nodes=nodes, throughput=model,
                                                    slowdown=AnalyticSlowdown()))
        # the activity seed is the workload's: another seed, other jobs
        meter = UtilisationMeter(nodes, seed=seed, record=True)
        simulate(nodes, wl.jobs, policy, activity=lambda j, c: 1.0, window=(win.lo, win.hi),
                 horizon_s=win.horizon, meter=meter)
        for sm, _, dt, service, jobs in meter.samples:
            if service or dt <= 0 or sm <= 0:  # as the calibration: readings above 0
                continue
            values.append(sm)
            weights.append(dt)
            key = (seed, jobs)
            per_job[key] = per_job.get(key, 0.0) + dt
    seren = act.acmetrace_quantiles("Seren", act.SM_ACTIVE)
    w = np.array(list(per_job.values()))
    # the jobs' GPU-time is heavy-tailed: the KS noise of the replay is that of n_eff jobs
    print(f"simulator check: {len(per_job)} jobs, effective sample (sum w)^2 / sum w^2 = "
          f"{w.sum() ** 2 / (w ** 2).sum():.0f} jobs", file=sys.stderr)
    return {"check": "sm_active_ks",
            "dataset": f"acmetrace-seren/simulator-{cluster}-{gpus}-exclusive-seeds-"
                       + "-".join(map(str, seeds)),
            "points": len(per_job),
            "ks": round(act.ks_distance(values, seren, weights), 4)}


def sm_active_ks(jobs: int = 20_000, seed: int = 0, simulate: bool = True,
                 sim_cluster: str = "trace", sim_gpus: int = 512,
                 sim_seeds: tuple[int, ...] = (0, 1, 2)) -> list[dict]:
    """Every ``sm_active_ks`` result (the rows above), as ``bench/training_model.py``'s checks
    return them: a list of ``{"check", "dataset", "points", "ks"}``."""
    rows = model_checks(jobs, seed)
    if simulate:
        t0 = time.perf_counter()
        rows.append(simulator_check(sim_cluster, sim_gpus, list(sim_seeds)))
        print(f"simulator check: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return rows


def fit(jobs: int, seed: int) -> dict:
    """Refit LEVEL_MIX (see the module docstring)."""
    from scipy.optimize import minimize

    seren = act.acmetrace_quantiles("Seren", act.SM_ACTIVE)

    def mix(p: np.ndarray) -> dict:
        a, b, a0, b0 = np.exp(p[:4])
        return {"w_low": float(1 / (1 + np.exp(-p[4]))), "a_low": float(a0),
                "b_low": float(b0), "a": float(a), "b": float(b)}

    def objective(p: np.ndarray) -> float:
        return act.ks_distance(act.population_sm_active(jobs, seed=seed, mix=mix(p)), seren)

    starts = ([3.0, 1.5, 0.5, 5.0, 0.08], [5.0, 2.0, 1.0, 10.0, 0.12], [8.0, 3.0, 0.7, 3.0, 0.18])
    best = None
    for a, b, a0, b0, w in starts:
        x0 = np.array([np.log(a), np.log(b), np.log(a0), np.log(b0), np.log(w / (1 - w))])
        r = minimize(objective, x0, method="Nelder-Mead",
                     options={"maxiter": 1500, "xatol": 1e-3, "fatol": 1e-5})
        if best is None or r.fun < best.fun:
            best = r
    m = mix(best.x)
    return {"LEVEL_MIX": {k: float(f"{v:.3g}") for k, v in m.items()}, "ks": round(best.fun, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per check and line")
    ap.add_argument("--jobs", type=int, default=20_000, help="jobs of the model population")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-simulate", action="store_true", help="skip the simulator check")
    ap.add_argument("--sim-gpus", type=int, default=512)
    ap.add_argument("--sim-cluster", default="trace")
    ap.add_argument("--sim-seeds", default="0,1,2",
                    help="workload (and activity) seeds of the replays, pooled")
    ap.add_argument("--fit", action="store_true", help="refit LEVEL_MIX and print it")
    args = ap.parse_args(argv)
    if args.fit:
        print(json.dumps(fit(args.jobs, args.seed)))
        return 0
    try:
        seeds = tuple(int(s) for s in args.sim_seeds.split(",") if s.strip())
    except ValueError:
        ap.error(f"--sim-seeds: {args.sim_seeds!r} must be comma-separated integers")
    if args.jobs < 1 or args.seed < 0 or not seeds or min(seeds) < 0:
        ap.error("--jobs must be >= 1, --seed and every --sim-seeds value >= 0, "
                 "--sim-seeds not empty")
    rows = sm_active_ks(args.jobs, args.seed, not args.no_simulate, args.sim_cluster,
                        args.sim_gpus, seeds)
    for r in rows:
        print(json.dumps(r) if args.json else
              f"{r['check']:<14} {r['dataset']:<48} points={r['points']:<7} ks={r['ks']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
