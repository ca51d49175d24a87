"""Average and median JCT of two policies over the *same* jobs, with and without the overrun
(docs/metrics.md, "Which jobs count"): a check that the evaluation's JCT ratio does not rest on
how the replay ends.

    python bench/jct_common_set.py [--workload llm-mix] [--cluster a100h100-mig] [--gpus 64]
        [--seeds 0,1,2,3,4] [--load 0.5] [--policies exclusive,elastico] [--json FILE]

For each seed it replays both policies exactly as ``elastico evaluate`` does
(:func:`elastico.sim.evaluate.run_one`), twice:

* **horizon**: the replay stops at the horizon (``Settings(overrun_windows=0)``, the rule
  before 2026-12-07).  Each policy's JCT set is the window's batch jobs it finished by then;
  the script prints each policy's average over its *own* set (what the report printed then)
  and both over the jobs *both* finished (the common set).  The common set drops the jobs
  either policy left running, so it holds no job the drain after the horizon could help: it
  is the comparison free of how the replay ends, at the price of leaving out the window's
  longest jobs.
* **overrun**: the evaluation's rule (the window's jobs run to completion, nothing arriving
  after the horizon); the sets are then equal unless a job never finished
  (``jobs_window_unfinished``).

Ratios are first policy / second policy, per seed, then their mean.  ``run_one`` returns
summaries only, so the script wraps :func:`elastico.sim.simulator.simulate` to keep each
replay's job records.  Cost: two replays per policy and seed (elastico at 512 GPUs: ~4 min
each on one core; at 64 GPUs ~20 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
from jct_ceiling import check_writable, flag_error, parse_seeds  # noqa: E402


def _records(task):
    """``run_one(task)``'s summary and the batch records it counts from (window, uncensored)."""
    import elastico.sim.evaluate as E
    import elastico.sim.simulator as S

    kept = {}
    inner = S.simulate

    def keep(*a, **k):
        kept["res"], kept["window"] = inner(*a, **k), k.get("window")
        return kept["res"]

    S.simulate = keep
    try:
        out = E.run_one(task)
    finally:
        S.simulate = inner
    lo, hi = kept["window"]
    eps = 1e-9
    recs = {r.job_id: r for r in kept["res"].records
            if r.kind != "service" and not r.censored and lo - eps <= r.arrival_s <= hi + eps}
    return out.run, recs


def _jct(recs, ids):
    return [recs[i].finish_s - recs[i].arrival_s for i in ids]


def compare(workload: str, cluster: str, gpus: int, seed: int, load: float,
            policies: tuple[str, str]) -> dict:
    """One seed's figures (module docstring)."""
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task

    spec = load_cluster(cluster)
    out: dict = {"workload": workload, "cluster": cluster, "gpus": gpus, "seed": seed,
                 "load": load, "policies": list(policies)}
    for rule, windows in (("horizon", 0.0), ("overrun", Settings.overrun_windows)):
        st = Settings(load=load, arrivals="continuous", workload=workload,
                      overrun_windows=windows)
        done = {}
        for p in policies:
            _, recs = _records(Task(spec, gpus, p, seed, st))
            done[p] = {i: r for i, r in recs.items() if r.status == "finished"}
        common = sorted(set(done[policies[0]]) & set(done[policies[1]]))
        row = {"common_jobs": len(common)}
        mean = lambda x: statistics.fmean(x) if x else None  # noqa: E731 (no job: no value)
        median = lambda x: statistics.median(x) if x else None  # noqa: E731
        ratio = lambda a, b: a / b if a is not None and b else None  # noqa: E731
        for p in policies:
            own = _jct(done[p], sorted(done[p]))
            same = _jct(done[p], common)
            row[p] = {"jobs": len(own), "avg_jct_s": mean(own), "p50_jct_s": median(own),
                      "common_avg_jct_s": mean(same), "common_p50_jct_s": median(same)}
        a, b = (row[p] for p in policies)
        row["avg_ratio_own"] = ratio(a["avg_jct_s"], b["avg_jct_s"])
        row["avg_ratio_common"] = ratio(a["common_avg_jct_s"], b["common_avg_jct_s"])
        row["p50_ratio_common"] = ratio(a["common_p50_jct_s"], b["common_p50_jct_s"])
        out[rule] = row
    return out


def _pair(text: str) -> tuple[str, str]:
    """``--policies``: two registered policies, comma-separated."""
    from elastico.placer.policies import POLICIES

    names = tuple(x.strip() for x in text.split(","))
    if len(names) != 2 or names[0] == names[1] or any(n not in POLICIES for n in names):
        raise argparse.ArgumentTypeError(
            f"{text!r}: two different policies, comma-separated, of {', '.join(POLICIES)}")
    return names


def main(argv: list[str] | None = None) -> None:
    from elastico.errors import InvalidArgument

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("llm-mix", "openb"), default="llm-mix",
                   help="the evaluation's workload (default: llm-mix)")
    p.add_argument("--cluster", default="a100h100-mig",
                   help="a bundled cluster definition or FILE.yaml (default: a100h100-mig)")
    p.add_argument("--gpus", type=int, default=64, help="cluster size (default: 64)")
    p.add_argument("--seeds", type=parse_seeds, default=[0, 1, 2, 3, 4],
                   help="workload seeds, comma-separated (default: 0,1,2,3,4)")
    p.add_argument("--load", type=float, default=0.5,
                   help="offered load, continuous arrivals (default: 0.5, the evaluation's)")
    p.add_argument("--policies", type=_pair, default=("exclusive", "elastico"),
                   help="NUM,DEN of the ratios (default: exclusive,elastico)")
    p.add_argument("--json", default=None, help="write every seed's figures here")
    a = p.parse_args(argv)
    check_writable(p, a.json)
    pols = a.policies
    rows = []
    for s in a.seeds:
        try:
            r = compare(a.workload, a.cluster, a.gpus, s, a.load, pols)
        except InvalidArgument as e:
            flag_error(p, e)
        rows.append(r)
        h, o = r["horizon"], r["overrun"]
        x = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
        print(f"seed {s}: horizon: own sets {h[pols[0]]['jobs']}/{h[pols[1]]['jobs']} jobs, "
              f"avg ratio {x(h['avg_ratio_own'])}; common set {h['common_jobs']} jobs, avg "
              f"ratio {x(h['avg_ratio_common'])}, p50 {x(h['p50_ratio_common'])} | overrun: "
              f"{o[pols[0]]['jobs']}/{o[pols[1]]['jobs']} jobs, avg ratio "
              f"{x(o['avg_ratio_own'])}", flush=True)
    if len(rows) > 1:
        for rule in ("horizon", "overrun"):
            for key in ("avg_ratio_own", "avg_ratio_common", "p50_ratio_common"):
                vals = [r[rule][key] for r in rows if r[rule][key] is not None]
                print(f"mean over {len(vals)} of {len(rows)} seeds, {rule}, {key}: "
                      + (f"{statistics.fmean(vals):.2f}x" if vals else "-"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
