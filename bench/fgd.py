"""FGD's benchmark inside ElastiCo's simulator: 17 workloads x 10 seeds x 5 policies.

    python bench/fgd.py [--json] [--workloads default,cpu050] [--seeds 42,43] \
        [--policies fgd,elastico] [--jobs 2]

For every (workload, policy): the mean over seeds of the unallocated GPU % at 100 % and
130 % arrived load (:mod:`elastico.placer.inflation`, docs/placement.md), beside FGD's
published means (``data/fgd-expected-results``).  ``--json``: one JSON object per line with
the keys ``workload, policy, seeds, unallocated_pct_100, unallocated_pct_130,
published_pct_100, published_pct_130, published_policy, seconds`` (the published numbers are
FGD's means for the same policy; for ``elastico`` they are FGD's own, ``published_policy``
says which) and, at the end, one ``{"summary": ...}``
object with the issue's goals as measured.  Without ``--json``: a table and the summary.
``--jobs N`` runs N worker processes (default 1).  Measured, not timed in tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

WORKLOADS = ["cpu050", "cpu100", "cpu200", "cpu250", "default", "gpushare40", "gpushare60",
             "gpushare80", "gpushare100", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
             "multigpu20", "multigpu30", "multigpu40", "multigpu50"]
SEEDS = list(range(42, 52))


def _csv(kind, minimum=None):
    """A comma-separated list for argparse: at least one item, none twice, each of ``kind``
    (and >= ``minimum``); anything else is argparse's usage error (exit 2)."""
    def parse(text: str):
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("at least one value")
        try:
            vals = [kind(x) for x in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated {kind.__name__} values") from None
        if minimum is not None and any(v < minimum for v in vals):
            raise argparse.ArgumentTypeError(f"{text!r}: every value >= {minimum}")
        if len(set(vals)) != len(vals):
            raise argparse.ArgumentTypeError(f"{text!r}: a value given twice")
        return vals
    return parse


_CACHE: dict = {}


def _one(task):
    """One (workload, seed, policy) run in a worker; returns the two columns and seconds."""
    workload, seed, policy = task
    from elastico import trace
    from elastico.placer.inflation import InflationNodes, InflationPods, inflate, run_inflation

    if "nodes" not in _CACHE:
        _CACHE["nodes"] = InflationNodes.from_nodes(trace.read_nodes())
    nodes = _CACHE["nodes"]
    key = ("pods", workload)
    if key not in _CACHE:
        path = trace.data_file(trace.TRACE_DIR, f"openb_pod_list_{workload}.csv")
        _CACHE[key] = InflationPods.from_trace(trace.read_pods(path))
    pods = _CACHE[key]
    t0 = time.perf_counter()
    order = inflate(pods, nodes.capacity_milli, seed)
    cols = run_inflation(nodes, pods, order, policy, seed).columns((100, 130))
    return workload, seed, policy, cols[100], cols[130], time.perf_counter() - t0


def main(argv=None) -> int:
    from elastico.placer.inflation import POLICIES
    from elastico.cli.simulate import published_fgd

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--workloads", type=_csv(str), default=WORKLOADS,
                    help="openb workloads, comma-separated (default: all 17)")
    ap.add_argument("--seeds", type=_csv(int, minimum=0), default=SEEDS,
                    help="shuffle seeds, comma-separated integers >= 0 (default: FGD's 10)")
    ap.add_argument("--policies", type=_csv(str), default=list(POLICIES),
                    help="placement policies, comma-separated (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    a = ap.parse_args(argv)
    for p in a.policies:
        if p not in POLICIES:
            print(f"fgd.py: error: --policies: {p!r} is not one of {', '.join(POLICIES)}", file=sys.stderr)
            return 2
    for w in a.workloads:
        if w not in WORKLOADS:
            print(f"fgd.py: error: --workloads: {w!r} is not one of {', '.join(WORKLOADS)}", file=sys.stderr)
            return 2
    if a.jobs < 1:
        print(f"fgd.py: error: --jobs: {a.jobs} must be >= 1", file=sys.stderr)
        return 2
    published = published_fgd()
    tasks = [(w, s, p) for w in a.workloads for p in a.policies for s in a.seeds]
    t0 = time.perf_counter()
    if a.jobs == 1:
        results = map(_one, tasks)
    else:
        ex = ProcessPoolExecutor(a.jobs)
        results = ex.map(_one, tasks, chunksize=1)
    acc: dict[tuple[str, str], list] = {}
    rows = []
    for w, s, p, c100, c130, sec in results:
        acc.setdefault((w, p), []).append((c100, c130, sec))
        if len(acc[(w, p)]) == len(a.seeds):
            v = acc[(w, p)]
            # FGD's published numbers for the same policy; for elastico, FGD's own (the
            # number to beat), named by published_policy
            pub_policy = "fgd" if p == "elastico" else p
            pub = published.get((w, pub_policy), {})
            row = {"workload": w, "policy": p, "seeds": list(a.seeds),
                   "unallocated_pct_100": round(100 - sum(x[0] for x in v) / len(v), 3),
                   "unallocated_pct_130": round(100 - sum(x[1] for x in v) / len(v), 3),
                   "published_pct_100": pub.get(100), "published_pct_130": pub.get(130),
                   "published_policy": pub_policy, "seconds": round(sum(x[2] for x in v), 1)}
            rows.append(row)
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{w:<12}{p:<10}{row['unallocated_pct_100']:>8.2f}{row['unallocated_pct_130']:>8.2f}"
                      + (f"{pub[100]:>8.2f}{pub[130]:>8.2f}" if pub else f"{'-':>8}{'-':>8}"), flush=True)
    summary = _summary(rows, published, time.perf_counter() - t0, a)
    print(json.dumps({"summary": summary}) if a.json else json.dumps(summary, indent=1))
    return 0


def _summary(rows, published, wall, a) -> dict:
    """The issue's goals as measured on these rows (only those the rows allow)."""
    by = {(r["workload"], r["policy"]): r for r in rows}
    out: dict = {"wall_s": round(wall, 1), "jobs": a.jobs, "seeds": list(a.seeds)}
    for p in ("bestfit", "packing", "fgd"):
        r = by.get(("default", p))
        if r:
            out[f"default_{p}_minus_published_pp"] = round(r["unallocated_pct_100"] - r["published_pct_100"], 3)
    r = by.get(("default", "elastico"))
    if r:
        out["default_elastico_unallocated_pct_100"] = r["unallocated_pct_100"]
    beats = [w for w in a.workloads if ("elastico" in a.policies) and (w, "elastico") in by
             and by[(w, "elastico")]["unallocated_pct_100"] < published[(w, "fgd")][100]]
    if "elastico" in a.policies:
        out["elastico_beats_fgd_published_at_100"] = f"{len(beats)}/{len(a.workloads)}"
        out["elastico_does_not_beat"] = [w for w in a.workloads if w not in beats]
    return out


if __name__ == "__main__":
    sys.exit(main())
