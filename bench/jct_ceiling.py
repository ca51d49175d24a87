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

Prints one line per seed and the mean; ``--json`` writes them.  Cost: one ``exclusive`` run
per seed (~20-40 s of CPU at 512 GPUs) plus the families (elastico's catalog).
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
                   truth=_truth(st), window=(win.lo, win.hi), horizon_s=win.horizon)
    jobs = {j.id: j for j in wl.jobs}
    full = JobCatalog(env)  # elastico's families (RST), not exclusive's requested shapes
    eps = 1e-9
    done = [r for r in res.records if r.kind != "service" and not r.censored
            and win.lo - eps <= r.arrival_s <= win.hi + eps and r.status == "finished"]
    jct, ideal = [], []
    for r in done:
        job = jobs[r.job_id]
        best = max(full.family(job).configs, key=lambda c: c.throughput)
        t = job.work / best.throughput
        if job.llm is not None:
            t += startup_s(job, best)
        jct.append(r.finish_s - r.arrival_s)
        ideal.append(t)
    jct, ideal = np.array(jct), np.array(ideal)
    out = {"cluster": cluster, "gpus": gpus, "seed": seed, "load": load, "jobs": len(done),
           "exclusive_avg_jct_s": float(jct.mean()), "exclusive_p50_jct_s": float(np.median(jct)),
           "ideal_avg_jct_s": float(ideal.mean()), "ideal_p50_jct_s": float(np.median(ideal))}
    out["avg_ratio_ceiling"] = out["exclusive_avg_jct_s"] / out["ideal_avg_jct_s"]
    out["p50_ratio_ceiling"] = out["exclusive_p50_jct_s"] / out["ideal_p50_jct_s"]
    # sanity: exclusive itself never beats the ideal on a job (the bound's premise)
    out["jobs_faster_than_ideal"] = int((jct < ideal - 1e-6).sum())
    return out


def _seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated integers >= 0."""
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0")
    return seeds


def main(argv: list[str] | None = None) -> None:
    from elastico.errors import InvalidArgument

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="llm-mix", choices=("llm-mix", "openb"),
                   help="the evaluation's workload (default: llm-mix)")
    p.add_argument("--cluster", default="a100h100-mig",
                   help="a bundled cluster definition or FILE.yaml (default: a100h100-mig)")
    p.add_argument("--gpus", type=int, default=512, help="cluster size (default: 512)")
    p.add_argument("--seeds", type=_seeds, default=[0, 1, 2, 3, 4],
                   help="workload seeds, comma-separated (default: 0,1,2,3,4)")
    p.add_argument("--load", type=float, default=0.5,
                   help="offered load, continuous arrivals (default: 0.5, the evaluation's)")
    p.add_argument("--json", default=None, help="write the per-seed figures here")
    a = p.parse_args(argv)
    if a.json:  # refused before minutes of replay, not after
        try:
            open(a.json, "a").close()
        except OSError as e:
            p.error(f"--json {a.json}: cannot be written ({e.strerror})")
    rows = []
    for s in a.seeds:
        t0 = time.process_time()
        try:
            r = ceiling(a.cluster, a.gpus, s, a.load, a.workload)
        except InvalidArgument as e:
            p.error(str(e))
        rows.append(r)
        print(f"seed {s}: {r['jobs']} jobs; exclusive avg {r['exclusive_avg_jct_s']:.0f} s, "
              f"p50 {r['exclusive_p50_jct_s']:.0f} s; ideal avg {r['ideal_avg_jct_s']:.0f} s, "
              f"p50 {r['ideal_p50_jct_s']:.0f} s; ceiling avg {r['avg_ratio_ceiling']:.2f}x, "
              f"p50 {r['p50_ratio_ceiling']:.2f}x; jobs faster than ideal "
              f"{r['jobs_faster_than_ideal']} ({time.process_time() - t0:.0f} s CPU)", flush=True)
    if len(rows) > 1:
        print(f"mean over {len(rows)} seeds: ceiling avg "
              f"{statistics.mean(r['avg_ratio_ceiling'] for r in rows):.2f}x, p50 "
              f"{statistics.mean(r['p50_ratio_ceiling'] for r in rows):.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": rows}, f, indent=2)


if __name__ == "__main__":
    main()
