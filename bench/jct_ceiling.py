"""The most any policy choosing among the jobs' shape families could cut average and median
JCT against ``exclusive`` (issue 24's "average JCT >= 3x lower" goal), on the evaluation's own
workload.

    python bench/jct_ceiling.py [--workload llm-mix] [--cluster a100h100-mig] [--gpus 512]
        [--seeds 0,1,2,3,4] [--load 0.5]

For each seed it replays ``exclusive`` as ``elastico evaluate`` does
(:func:`elastico.sim.evaluate.run_one`'s inputs: the same workload, throughput model,
ground truth and window) and takes its JCT set (the batch jobs that arrived in the
measurement window, finished and are not censored: the set of ``avg_jct_s``,
docs/metrics.md).  For each of those jobs the *ideal* JCT is its work at the fastest
configuration of its full shape family (:class:`elastico.placer.policies.common.JobCatalog`,
the family ``elastico`` chooses from: growth, other GPU models, MPS shares, MIG instances),
started at its arrival, alone on its GPUs, plus one start-up for an offline LLM inference job
(its weights loaded once: :func:`elastico.llm_shapes.startup_s`).  No policy can do better
on a job: it cannot start before the arrival, co-location only slows (slowdown >= 1), a
restart or an eviction only adds time, and every configuration it may choose is in the
family.  So ``exclusive's avg JCT / ideal avg JCT`` over the same jobs bounds the avg-JCT
ratio any such policy reaches on them (the bound ignores capacity: every job gets its
fastest configuration at once, which the cluster may not hold).

A second, capacity-aware ceiling (*fluid*, :func:`fluid_bound`): the same jobs, each at one
configuration of its family, but the configurations' GPU compute must fit the cluster on
average -- per GPU model, the GPU-seconds of compute they hold (``num_gpus x gpu_share`` x
(work / throughput + start-up), the pricing's own compute demand, elastico.model) sum to at
most that model's GPUs x the measurement window.  That is the necessary condition for a
stable queue (no model loaded past 1: the long-run rate of GPU-seconds asked of a model
cannot exceed what it has); a policy that breaks it on a model is not sustainable, whatever
its order.  Its minimum sum of JCTs is a linear programme (each job a convex combination of
its configurations, HiGHS through scipy), whose optimum is at most every integral choice's.
It still ignores queueing, restarts, co-location slowdowns, GPU memory, node boundaries,
MIG-mode pools and the time structure (only averages bind), so it too bounds any policy from
above; with finite samples a window's arrivals may borrow the drain's idle capacity, so it is
a steady-state bound, not one per replay.

Prints one line per seed and the mean; ``--json`` writes them.  Cost: one ``exclusive`` run
per seed (~20-40 s of CPU at 512 GPUs) plus the families (elastico's catalog) and one LP
(~1 s at 512 GPUs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def ceiling(cluster: str, gpus: int, seed: int, load: float, workload: str) -> dict:
    """One seed's figures (module docstring): exclusive's avg / p50 JCT, the ideal's over the
    same jobs, and their ratios."""
    import numpy as np

    from elastico.llm_shapes import startup_s
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.placer.policies.common import JobCatalog
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, _inputs, _model, _truth, _workload
    from elastico.sim.simulator import simulate

    st = Settings(load=load, arrivals="continuous", workload=workload)
    spec = load_cluster(cluster)
    nodes, wl = _workload(spec, gpus, seed, st)
    _, _, _, predictor, _ = _inputs()
    model = _model(st)
    env = PolicyEnv(nodes=nodes, throughput=model, slowdown=predictor, restart_s=st.restart_s)
    policy = make_policy("exclusive", env)
    win = wl.window
    res = simulate(nodes, wl.jobs, policy, restart_s=st.restart_s,
                   activity=lambda j, c, _cat=policy.catalog: _cat.profile(j, c).gpu_activity,
                   truth=_truth(st), window=(win.lo, win.hi), horizon_s=win.horizon,
                   overrun_s=st.overrun_s(win))
    jobs = {j.id: j for j in wl.jobs}
    full = JobCatalog(env)  # elastico's families (RST), not exclusive's requested shapes
    eps = 1e-9
    done = [r for r in res.records if r.kind != "service" and not r.censored
            and win.lo - eps <= r.arrival_s <= win.hi + eps and r.status == "finished"]
    jct, ideal, options = [], [], []
    for r in done:
        job = jobs[r.job_id]
        configs = [c for c in full.family(job).configs if not c.is_wait and c.throughput > 0]
        times = [job.work / c.throughput + (startup_s(job, c) if job.llm is not None else 0.0)
                 for c in configs]
        jct.append(r.finish_s - r.arrival_s)
        ideal.append(min(times))
        options.append([(t, c.gpu_model, c.num_gpus * c.gpu_share) for t, c in zip(times, configs)])
    jct, ideal = np.array(jct), np.array(ideal)
    supply: dict[str, float] = {}
    for n in nodes:
        supply[n.gpu_model] = supply.get(n.gpu_model, 0.0) + n.num_gpus
    fluid = fluid_bound(options, supply, win.hi - win.lo)
    out = {"cluster": cluster, "gpus": gpus, "seed": seed, "load": load, "jobs": len(done),
           "exclusive_avg_jct_s": float(jct.mean()), "exclusive_p50_jct_s": float(np.median(jct)),
           "ideal_avg_jct_s": float(ideal.mean()), "ideal_p50_jct_s": float(np.median(ideal))}
    out["avg_ratio_ceiling"] = out["exclusive_avg_jct_s"] / out["ideal_avg_jct_s"]
    out["fluid_avg_jct_s"] = fluid["avg_jct_s"]
    out["fluid_avg_ratio_ceiling"] = out["exclusive_avg_jct_s"] / fluid["avg_jct_s"]
    out["fluid_load_by_model"] = fluid["load_by_model"]
    out["ideal_load_by_model"] = fluid["ideal_load_by_model"]
    out["p50_ratio_ceiling"] = out["exclusive_p50_jct_s"] / out["ideal_p50_jct_s"]
    # sanity: exclusive itself never beats the ideal on a job (the bound's premise)
    out["jobs_faster_than_ideal"] = int((jct < ideal - 1e-6).sum())
    return out


def fluid_bound(options, supply, span_s: float) -> dict:
    """The capacity-aware ceiling of the module docstring: the least average JCT of ``options``
    (per job, its configurations as ``(time_s, gpu_model, gpus)``: JCT alone in that
    configuration, its GPU model, GPU compute held in GPUs) when, per GPU model, the jobs'
    GPU-seconds (``gpus x time_s``) sum to at most ``supply[model] x span_s`` (GPUs x seconds),
    each job a convex combination of its configurations (the LP relaxation: at most any
    integral choice's).  Returns ``avg_jct_s``, ``load_by_model`` (each model's GPU-seconds at
    the optimum over its capacity, <= 1) and ``ideal_load_by_model`` (the same for every job
    at its fastest configuration: above 1 where the capacity-free ceiling over-asks a model).
    ValueError when ``options`` is empty or a job has no configuration; RuntimeError with
    HiGHS's message when the LP has no solution (infeasible only if even every job's least
    GPU-seconds overflow a model)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    if not options or any(not o for o in options):
        raise ValueError("fluid_bound: every job needs at least one configuration")
    models = sorted(supply)
    col = {m: i for i, m in enumerate(models)}
    cost, rows_eq, cols_eq, rows_ub, cols_ub, vals_ub = [], [], [], [], [], []
    ideal_use = np.zeros(len(models))
    for j, opts in enumerate(options):
        fastest = min(opts, key=lambda o: o[0])
        ideal_use[col[fastest[1]]] += fastest[0] * fastest[2]
        for t, model, gpus in opts:
            k = len(cost)
            cost.append(t)
            rows_eq.append(j)
            cols_eq.append(k)
            rows_ub.append(col[model])
            cols_ub.append(k)
            vals_ub.append(t * gpus)
    n = len(cost)
    a_eq = coo_matrix((np.ones(n), (rows_eq, cols_eq)), shape=(len(options), n)).tocsr()
    a_ub = coo_matrix((vals_ub, (rows_ub, cols_ub)), shape=(len(models), n)).tocsr()
    cap = np.array([supply[m] * span_s for m in models])
    res = linprog(np.array(cost), A_ub=a_ub, b_ub=cap, A_eq=a_eq, b_eq=np.ones(len(options)),
                  bounds=(0.0, 1.0), method="highs")
    if res.status != 0:
        raise RuntimeError(f"fluid_bound: HiGHS status {res.status}: {res.message}")
    use = a_ub @ res.x
    return {"avg_jct_s": float(res.fun) / len(options),
            "load_by_model": {m: float(use[col[m]] / cap[col[m]]) for m in models},
            "ideal_load_by_model": {m: float(ideal_use[col[m]] / cap[col[m]]) for m in models}}


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated integers >= 0."""
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0")
    if len(set(seeds)) != len(seeds):  # a seed twice would weigh twice in the means
        raise argparse.ArgumentTypeError(f"{text!r}: each seed once")
    return seeds


#: InvalidArgument fields that are these scripts' own flags (named ``--field`` in the error)
FLAG_FIELDS = ("gpus", "cluster", "load", "seed", "workload", "policy", "loads")


def flag_error(parser: argparse.ArgumentParser, e: Exception) -> None:
    """An argparse error for ``e`` (an ElasticoError), its field named as the flag the user
    typed (``--gpus: 0 is not allowed ...``) where it is one, as the model named it
    otherwise."""
    text = str(e)
    if getattr(e, "field", None) in FLAG_FIELDS:
        text = "--" + text
    parser.error(text)


def check_writable(parser: argparse.ArgumentParser, path: str | None,
                   flag: str = "--json") -> None:
    """``--json PATH`` (or ``flag``'s) refused (an argparse error) before minutes of replay,
    not after; a file the check creates is removed again (the run writes it at its end)."""
    if path:
        import os

        existed = os.path.exists(path)
        try:
            open(path, "a").close()
        except OSError as e:
            parser.error(f"{flag} {path}: cannot be written ({e.strerror})")
        if not existed:
            os.remove(path)


def main(argv: list[str] | None = None) -> None:
    from elastico.errors import InvalidArgument

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="llm-mix", choices=("llm-mix", "openb"),
                   help="the evaluation's workload (default: llm-mix)")
    p.add_argument("--cluster", default="a100h100-mig",
                   help="a bundled cluster definition or FILE.yaml (default: a100h100-mig)")
    p.add_argument("--gpus", type=int, default=512, help="cluster size (default: 512)")
    p.add_argument("--seeds", type=parse_seeds, default=[0, 1, 2, 3, 4],
                   help="workload seeds, comma-separated (default: 0,1,2,3,4)")
    p.add_argument("--load", type=float, default=0.5,
                   help="offered load, continuous arrivals (default: 0.5, the evaluation's)")
    p.add_argument("--json", default=None, help="write the per-seed figures here")
    a = p.parse_args(argv)
    check_writable(p, a.json)
    rows = []
    for s in a.seeds:
        t0 = time.process_time()
        try:
            r = ceiling(a.cluster, a.gpus, s, a.load, a.workload)
        except InvalidArgument as e:
            flag_error(p, e)
        rows.append(r)
        print(f"seed {s}: {r['jobs']} jobs; exclusive avg {r['exclusive_avg_jct_s']:.0f} s, "
              f"p50 {r['exclusive_p50_jct_s']:.0f} s; ideal avg {r['ideal_avg_jct_s']:.0f} s, "
              f"p50 {r['ideal_p50_jct_s']:.0f} s; ceiling avg {r['avg_ratio_ceiling']:.2f}x, "
              f"p50 {r['p50_ratio_ceiling']:.2f}x; jobs faster than ideal "
              f"{r['jobs_faster_than_ideal']}; fluid (capacity-aware) avg "
              f"{r['fluid_avg_jct_s']:.0f} s, ceiling {r['fluid_avg_ratio_ceiling']:.2f}x; the "
              f"capacity-free ideal loads " + ", ".join(
                  f"{m} {x:.2f}" for m, x in r['ideal_load_by_model'].items())
              + f" ({time.process_time() - t0:.0f} s CPU)", flush=True)
    if len(rows) > 1:
        print(f"mean over {len(rows)} seeds: ceiling avg "
              f"{statistics.mean(r['avg_ratio_ceiling'] for r in rows):.2f}x, p50 "
              f"{statistics.mean(r['p50_ratio_ceiling'] for r in rows):.2f}x; fluid avg "
              f"{statistics.mean(r['fluid_avg_ratio_ceiling'] for r in rows):.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": rows}, f, indent=2)


if __name__ == "__main__":
    main()
