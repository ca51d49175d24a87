"""Benchmark of Elastic Shadow Pricing as it is (measures; changes nothing).

Run ``python bench/pricing.py [--json] [--quick]`` (bench/README.md explains every key and the
goals).  One record per case: the native per-job selection vs the best vectorised numpy
version of the same inner loop (single-threaded BLAS), a pure memory read of the same bytes,
the full solve (cold, warm, and with the numpy selection swapped in), the certified gap, a
HiGHS MILP comparison on the small cases, and the Khan MMKP instances I07-I13.
"""

from __future__ import annotations

import os
import sys

# Single-threaded BLAS for the numpy baseline: threadpoolctl when installed, else the
# environment variables, which only work when set before numpy is imported.
try:
    import threadpoolctl  # type: ignore
    _BLAS_LIMIT = "threadpoolctl"
except ImportError:  # pragma: no cover - depends on the environment
    threadpoolctl = None
    for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_v] = "1"
    _BLAS_LIMIT = "OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1 (env, threadpoolctl not installed)"

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import numpy as np

if threadpoolctl is not None:
    threadpoolctl.threadpool_limits(1)

from elastico.pricing import UTILITIES, kernel, solve  # noqa: E402

#: capacity factor of the "trace-tight" kind: the trace-built instance with half its capacity, so
#: that capacity binds (at factor 1 the bundled trace's families fit with every job at its best
#: configuration up to ties: the prices are 0 and L(0) = OPT).  It reproduces issue 24's
#: regression (101 iterations at N = 10 000 with the subgradient).
TIGHT = 0.5
#: LLM inference, LLM fine-tuning and trace training jobs per kind in the llm-mix pool
LLM_MIX_PER_KIND = 100
KINDS = ("random", "trace", "trace-tight", "llm-mix")
CASE_LIMIT_S = 120.0     # a case stops (remaining keys "skipped") past this wall time
HIGHS_LIMIT_S = 60.0     # scipy.optimize.milp time_limit
KHAN_DIR = Path("/work/shared/data/mmkp-khan")
REPO = Path(__file__).resolve().parents[1]


def out(obj: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj), flush=True)
    else:
        print("  ".join(f"{k}={_fmt(v)}" for k, v in obj.items()), flush=True)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def machine() -> str:
    blas = "?"
    try:
        cfg = np.__config__.CONFIG  # numpy >= 2
        b = cfg["Build Dependencies"]["blas"]
        blas = f"{b.get('name')} {b.get('version', '')}".strip()
    except Exception:
        pass
    return (f"machine: {platform.machine()} {platform.processor() or ''} cores={os.cpu_count()} "
            f"python={platform.python_version()} numpy={np.__version__} blas={blas} "
            f"blas_threads: {_BLAS_LIMIT}")


def median_ms(fn, budget_s: float = 0.5, min_rep: int = 5, max_rep: int = 200) -> float:
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    rep = int(max(min_rep, min(max_rep, budget_s / max(first, 1e-6))))
    ts = []
    for _ in range(rep):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


# -- instances --------------------------------------------------------------------------------

# the correlated random instance of bench/bench_pricing.py (this folder is on sys.path when
# the script runs): wait first, utility ~ (total demand)^0.7 with noise
from bench_pricing import instance as random_instance  # noqa: E402


def random_replace(rng, inst, frac=0.05):
    u, d, off, cap = (x.copy() for x in inst)
    n = off.shape[0] - 1
    k = int(off[1] - off[0])
    jobs = rng.choice(n, size=max(1, int(frac * n)), replace=False)
    fu, fd, _, _ = random_instance(rng, jobs.size, k, d.shape[1])
    idx = (off[jobs][:, None] + np.arange(k)).ravel()
    u[idx], d[idx] = fu, fd
    return u, d, off, cap


class TracePool:
    """Shape families of every elastic job of the bundled trace on a cluster restricted to the
    GPU models with the most GPUs such that R = 2 x models + 2 (gpu:m, gpumem:m per model, cpu,
    mem).  Instances of N jobs draw jobs with replacement from the pool (remaining work scaled
    by U(0.1, 1)), capacity = capacity_of(restricted cluster) x N / pool size."""

    _cache: dict = {}

    @classmethod
    def get(cls, r, k):
        key = (r, k)
        if key not in cls._cache:
            cls._cache[key] = cls(r, k)
        return cls._cache[key]

    def __init__(self, r, k):
        from elastico import trace
        from elastico.model import JobKind, capacity_of, resource_space_for
        from elastico.shapes import build_family, gpu_models_of
        from elastico.perf.throughput import ThroughputModel
        from elastico.sim.workload import build_workload

        if r < 4 or r % 2:
            raise ValueError(f"trace instances need an even R >= 4, got {r}")
        nodes = trace.read_nodes()
        pods = trace.read_pods()
        gpus = {}
        for nd in nodes:
            if nd.num_gpus:
                gpus[nd.gpu_model] = gpus.get(nd.gpu_model, 0) + nd.num_gpus
        models = sorted(gpus, key=lambda m: -gpus[m])[: (r - 2) // 2]
        sub = [nd for nd in nodes if nd.num_gpus and nd.gpu_model in models]
        tm = ThroughputModel.bundled()
        wl = build_workload(pods, sub, model=tm, load=None, jobs=10 ** 9, seed=0)
        space = resource_space_for(sub)
        assert space.size == r, (space.size, r)
        gm = gpu_models_of(sub)
        thr, dem, rem = [], [], []
        for job in wl.jobs:
            if job.kind is JobKind.SERVICE:
                continue
            fam = build_family(job, gm, tm, max_configs=k)
            x, dd = fam.throughputs(), fam.demands(space)
            kk = min(len(x), k)
            xp = np.zeros(k)
            dp = np.zeros((k, r))
            xp[:kk], dp[:kk] = x[:kk], dd[:kk]  # pad with copies of wait (0, 0)
            thr.append(xp)
            dem.append(dp)
            rem.append(job.remaining)
        self.thr = np.array(thr)            # [P, K]
        self.dem = np.array(dem)            # [P, K, R]
        self.rem = np.array(rem)            # [P]
        self.cap = capacity_of(sub, space)  # [R]
        self.models = models
        self.k, self.r = k, r

    def draw(self, rng, n):
        p = self.thr.shape[0]
        pick = rng.integers(0, p, n)
        rem = self.rem[pick] * rng.uniform(0.1, 1.0, n)
        return pick, rem

    def build(self, pick, rem):
        n = pick.shape[0]
        k, r = self.k, self.r
        off = np.arange(n + 1, dtype=np.int64) * k
        thr = self.thr[pick].ravel()
        d = self.dem[pick].reshape(n * k, r)
        u = UTILITIES["jct"](thr, off, rem, np.ones(n))
        cap = self.cap * (n / self.thr.shape[0])
        return u, d, off, cap

    def instance(self, rng, n):
        pick, rem = self.draw(rng, n)
        return self.build(pick, rem), (pick, rem)

    def replace(self, rng, state, frac=0.05):
        pick, rem = state[0].copy(), state[1].copy()
        n = pick.shape[0]
        jobs = rng.choice(n, size=max(1, int(frac * n)), replace=False)
        p2, r2 = self.draw(rng, jobs.size)
        pick[jobs], rem[jobs] = p2, r2
        return self.build(pick, rem)


#: the GPU whose requested-shape speed is throughput 1.0 for the llm-mix pool's LLM jobs
REFERENCE_GPU = "A100-80GB"


class LlmMixPool:
    """Shape families of an LLM-mix pool on the bundled a100h100-mig cluster at 512 GPUs
    (A100-80GB, A100-40GB, H100-80GB: R = 2 x 3 models + cpu + mem = 8), built by this bench
    (no llm-mix workload exists on main yet; elastico evaluate's will replace it): one third
    offline LLM inference jobs (elastico.llm_shapes: catalogue models, azure-conv / azure-code
    request lengths, TP 1/2/4, whole GPU or half-GPU MPS requests, MIG configurations on the
    MIG-mode models), one third LLM fine-tuning jobs (elastico.llm_train_job) and one third the
    bundled trace's training jobs on the same cluster.  Sizes (token budgets log-uniform in
    [1e7, 1e9] for inference, [2e7, 5e8] for fine-tuning) are this bench's documented choice,
    not a workload model.  Draws and capacity as TracePool: capacity = capacity_of(cluster) x
    N / pool size."""

    _cache: dict = {}
    INFER_MODELS = ("Llama-3-8B", "Mistral-7B", "Qwen2-7B", "Llama-2-13B", "Mixtral-8x7B",
                    "CodeLlama-34B", "Llama-2-70B", "Llama-3-70B")
    TRAIN_MODELS = ("Llama-2-7B", "Llama-3-8B", "Mistral-7B", "Llama-2-13B")

    @classmethod
    def get(cls, r, k, per_kind=300):
        key = (r, k, per_kind)
        if key not in cls._cache:
            cls._cache[key] = cls(r, k, per_kind)
        return cls._cache[key]

    def __init__(self, r, k, per_kind=300):
        from elastico import trace
        from elastico.model import JobKind, capacity_of, mig_models_of, resource_space_for
        from elastico.perf.throughput import ThroughputModel
        from elastico.shapes import build_family, gpu_models_of
        from elastico.sim.clusters import load_cluster
        from elastico.sim.llm_workload import llm_jobs_from
        from elastico.sim.workload import build_workload

        if r != 8:
            raise ValueError(f"llm-mix instances have R = 8 (3 GPU models + cpu + mem), got {r}")
        nodes = load_cluster("a100h100-mig").nodes(512)
        space = resource_space_for(nodes)
        assert space.size == r, (space.size, r)
        gm = gpu_models_of(nodes)
        mig = mig_models_of(nodes)
        tm = ThroughputModel.bundled()
        rng = np.random.default_rng(1)
        entries = []
        for i in range(per_kind):
            tp = int(rng.choice([1, 1, 2, 4]))
            m = str(rng.choice(self.INFER_MODELS))
            e = {"id": f"inf{i}", "model": m, "tokens": float(10 ** rng.uniform(7, 9)),
                 "lengths": str(rng.choice(["azure-conv", "azure-code"])),
                 "reference_gpu": REFERENCE_GPU, "tp": tp}
            if tp == 1 and rng.uniform() < 0.3:
                e["gpu_fraction"] = 0.5
            entries.append(e)
        for i in range(per_kind):
            entries.append({"id": f"ft{i}", "kind": "training",
                            "model": str(rng.choice(self.TRAIN_MODELS)),
                            "mode": "finetune", "seq_len": 4096, "global_batch": 64,
                            "tokens": float(10 ** rng.uniform(np.log10(2e7), np.log10(5e8))),
                            "gpus": int(rng.choice([2, 4, 8])), "reference_gpu": REFERENCE_GPU,
                            "cpu": 32, "mem_gib": 256})
        jobs = []
        for e in entries:  # an entry whose model fits no shape on this cluster is left out
            try:
                jobs.extend(llm_jobs_from({"jobs": [e]}))
            except Exception:
                pass
        wl = build_workload(trace.read_pods(), nodes, model=tm, load=None, jobs=10 ** 9, seed=0)
        train = [j for j in wl.jobs if j.kind is not JobKind.SERVICE]
        jobs.extend(train[i] for i in rng.permutation(len(train))[:per_kind])
        thr, dem, rem = [], [], []
        for job in jobs:
            try:
                fam = build_family(job, gm, tm, max_configs=k, mig_models=mig)
                x, dd = fam.throughputs(), fam.demands(space)
            except Exception:
                continue
            kk = min(len(x), k)
            xp = np.zeros(k)
            dp = np.zeros((k, r))
            xp[:kk], dp[:kk] = x[:kk], dd[:kk]
            thr.append(xp)
            dem.append(dp)
            rem.append(job.remaining)
        self.thr, self.dem, self.rem = np.array(thr), np.array(dem), np.array(rem)
        self.cap = capacity_of(nodes, space)
        self.models = list(gm)
        self.k, self.r = k, r

    draw = TracePool.draw
    build = TracePool.build
    instance = TracePool.instance
    replace = TracePool.replace


# -- numpy selection ----------------------------------------------------------------------------

def numpy_dense_select(U, W2, prices, cap):
    """Dense padded layout: U [N, K], W2 [N*K, R]; the full selection (choice, totals,
    Lagrangian) like the native kernel."""
    n, k = U.shape
    val = U - (W2 @ prices).reshape(n, k)
    c = val.argmax(axis=1)
    rows = np.arange(n) * k + c
    best = val.ravel()[rows]
    return c, W2[rows].sum(axis=0), float(best.sum() + prices @ cap)


def _numpy_prepared_select(self, prices):
    """Stand-in for kernel.PreparedInstance.select (monkeypatched by solve_numpy only)."""
    p = np.ascontiguousarray(prices, dtype=self.dtype)
    sizes = np.diff(self.offsets)
    if sizes.size and np.all(sizes == sizes[0]):
        k = int(sizes[0])
        U = self.utility.reshape(-1, k)
        c, T, L = numpy_dense_select(U, self.demand, p, self.capacity)
        return c.astype(np.int64), np.asarray(T, dtype=np.float64), float(L)
    c, T, L = kernel.reference_select(self.offsets, self.utility, self.demand, p, self.capacity)
    return c.astype(np.int64), np.asarray(T, dtype=np.float64), float(L)


def _numpy_argmin_per_job(offsets, key):
    """numpy stand-in for kernel.argmin_per_job (lowest key per family, lowest index on ties)."""
    n = offsets.shape[0] - 1
    job = np.repeat(np.arange(n), np.diff(offsets))
    order = np.lexsort((key, job))
    _, first = np.unique(job[order], return_index=True)
    return order[first]


def solve_numpy(*args, **kw):
    """The same solve with every native piece swapped for its numpy twin: the dense numpy
    selection, ``_Instance._repair_numpy`` / ``_fill_numpy`` (bit-identical references of the
    native repair and fill; the repair applies its sorted moves in a Python loop, the only
    non-vectorised part), numpy column max, Lagrangian values and per-job argmin."""
    from elastico.pricing import solver as S

    saved = [(kernel.PreparedInstance, "select", _numpy_prepared_select),
             (S._Instance, "repair", S._Instance._repair_numpy),
             (S._Instance, "fill", S._Instance._fill_numpy),
             (kernel, "column_max", lambda d: d.max(axis=0)),
             (kernel, "lagrangian_values", lambda u, d, p: u - d @ p),
             (kernel, "argmin_per_job", _numpy_argmin_per_job)]
    orig = [(obj, name, getattr(obj, name)) for obj, name, _ in saved]
    for obj, name, fn in saved:
        setattr(obj, name, fn)
    try:
        return solve(*args, **kw)
    finally:
        for obj, name, fn in orig:
            setattr(obj, name, fn)


SOLVE_REPEATS = 3


def median_solve_ms(first, again, left) -> float:
    """Median ``PricingResult.seconds`` (ms) of ``first`` and up to SOLVE_REPEATS - 1 more runs
    of ``again()`` (fewer when a repeat would not fit in the case's time left)."""
    ts = [first.seconds]
    while len(ts) < SOLVE_REPEATS and left() > 3 * first.seconds + 1.0:
        ts.append(again().seconds)
    return 1e3 * statistics.median(ts)


# -- HiGHS --------------------------------------------------------------------------------------

def highs(u, d, off, cap, limit_s=HIGHS_LIMIT_S):
    """(ms, value of HiGHS's incumbent, its proven bound, scipy's status); bench/mmkp_exact.py.
    The default relative MIP gap (1e-4) as before: this bench times HiGHS, not the optimum."""
    from mmkp_exact import solve_exact

    r = solve_exact(u, d, off, cap, time_limit_s=limit_s, rel_gap=1e-4)
    return r.ms, r.value, r.bound, r.status


# -- one case -----------------------------------------------------------------------------------

#: (K, R, kind) -> (N, cold solve ms) of the last measured case, to extrapolate the next
_PREV_SOLVE: dict = {}


def case(n, k, r, kind, rng, do_highs):
    rec = {"N": n, "K": k, "R": r, "kind": kind}
    t_case = time.perf_counter()

    def left():
        return CASE_LIMIT_S - (time.perf_counter() - t_case)

    if kind == "random":
        inst = random_instance(rng, n, k, r)
        state = None
    else:
        pool = LlmMixPool.get(r, k, LLM_MIX_PER_KIND) if kind == "llm-mix" else TracePool.get(r, k)
        t_case = time.perf_counter()  # the pool is built once per (R, K), not timed
        inst, state = pool.instance(rng, n)
        rec["R_note"] = f"GPU models {pool.models} + cpu + mem (R = {r})"
        if kind == "trace-tight":
            inst = inst[:3] + (inst[3] * TIGHT,)
            rec["R_note"] += f"; capacity x {TIGHT}"
    u, d, off, cap = inst
    p = rng.uniform(0, 0.5, r) / np.maximum(cap / n, 1e-12) * np.mean(u[u > 0]) * 0.1 \
        if kind != "random" else rng.uniform(0, 0.5, r)

    # inner loop
    U = u.reshape(n, k)
    W2 = np.ascontiguousarray(d)
    ref = numpy_dense_select(U, W2, p, cap)
    p64 = kernel.prepare(off, u, d, cap, dtype="float64")
    p32 = kernel.prepare(off, u, d, cap, dtype="float32")
    got = p64.select(p)
    rec["choice_match_f64"] = bool(np.array_equal(ref[0], got[0]))
    rec["numpy_ms"] = median_ms(lambda: numpy_dense_select(U, W2, p, cap))
    U32, W32, cap32 = U.astype(np.float32), W2.astype(np.float32), cap.astype(np.float32)
    p32v = p.astype(np.float32)
    rec["numpy_ms_f32"] = median_ms(lambda: numpy_dense_select(U32, W32, p32v, cap32))
    rec["native_ms_f64"] = median_ms(lambda: p64.select(p))
    rec["native_ms_f32"] = median_ms(lambda: p32.select(p))
    rec["speedup_f64"] = rec["numpy_ms"] / rec["native_ms_f64"]
    rec["speedup_f32"] = rec["numpy_ms"] / rec["native_ms_f32"]
    rec["read_ms"] = median_ms(lambda: W32.sum())
    rec["bandwidth_ratio"] = rec["read_ms"] / rec["native_ms_f32"]

    # full solve (skipped when the last smaller N, scaled linearly, says it would not fit)
    prev = _PREV_SOLVE.get((k, r, kind))
    if prev is not None:
        est_s = prev[1] / 1e3 * n / prev[0]
        if 2 * est_s > left():
            rec["solve_ms_cold"] = rec["solve_ms_warm"] = rec["solve_numpy_ms"] = None
            rec["skipped"] = (f"solve: cold+warm estimated {2 * est_s:.0f} s from N={prev[0]} "
                              f"(linear), over the {left():.0f} s left of the case limit")
            rec["case_s"] = time.perf_counter() - t_case
            return rec
    res = solve(u, d, off, cap)
    _PREV_SOLVE[(k, r, kind)] = (n, 1e3 * res.seconds)
    # solves are deterministic; the time is the median of SOLVE_REPEATS runs (2 cores, other
    # processes: one run can be off by 2x)
    rec["solve_ms_cold"] = median_solve_ms(res, lambda: solve(u, d, off, cap), left)
    rec["iterations_cold"] = res.iterations
    rec["gap"] = res.gap
    rec["value"] = res.primal_value
    inst2 = random_replace(rng, inst) if kind == "random" else pool.replace(rng, state)
    if kind == "trace-tight":
        inst2 = inst2[:3] + (inst2[3] * TIGHT,)
    if left() > 1e-3 * rec["solve_ms_cold"]:
        w = solve(*inst2, initial_prices=res.prices)
        rec["solve_ms_warm"] = median_solve_ms(w, lambda: solve(*inst2, initial_prices=res.prices),
                                               left)
        rec["iterations_warm"] = w.iterations
        rec["gap_warm"] = w.gap
    else:
        rec["solve_ms_warm"] = None
        rec["skipped"] = "warm solve: case over %.0f s" % CASE_LIMIT_S
    # numpy solve: estimated as 10 x the cold solve (numpy repair/fill) + iterations x numpy select
    est_s = (10 * rec["solve_ms_cold"] + res.iterations * rec["numpy_ms"]) / 1e3
    if est_s < left():
        rn = solve_numpy(u, d, off, cap)
        rec["solve_numpy_ms"] = median_solve_ms(rn, lambda: solve_numpy(u, d, off, cap), left)
        rec["solve_speedup"] = rec["solve_numpy_ms"] / rec["solve_ms_cold"]
        rec["solve_numpy_same_value"] = bool(abs(rn.primal_value - res.primal_value)
                                             <= 1e-9 * max(1.0, abs(res.primal_value)))
    else:
        rec["solve_numpy_ms"] = None
        rec["skipped"] = (f"solve_numpy: estimated {est_s:.0f} s exceeds the {left():.0f} s left "
                          f"of the {CASE_LIMIT_S:.0f} s case limit")

    if do_highs:
        if left() < HIGHS_LIMIT_S:
            rec["skipped"] = f"highs: {left():.0f} s left of the case limit < {HIGHS_LIMIT_S:.0f} s"
        else:
            ms, val, bound, status = highs(u, d, off, cap)
            rec["highs_ms"] = ms
            rec["highs_value"] = val
            rec["highs_bound"] = bound
            rec["highs_status"] = int(status)
            rec["value_ratio"] = None if not val else res.primal_value / val
            rec["time_ratio"] = ms / rec["solve_ms_cold"]
    rec["case_s"] = time.perf_counter() - t_case
    return rec


# -- Khan MMKP ----------------------------------------------------------------------------------

def read_khan(path: Path):
    tok = path.read_text().split()
    pos = 0

    def nxt():
        nonlocal pos
        pos += 1
        return tok[pos - 1]

    n, l, m = int(nxt()), int(nxt()), int(nxt())
    cap = np.array([float(nxt()) for _ in range(m)])
    u = np.empty(n * l)
    d = np.empty((n * l, m))
    for g in range(n):
        nxt()  # group number
        for i in range(l):
            u[g * l + i] = float(nxt())
            d[g * l + i] = [float(nxt()) for _ in range(m)]
    rest = tok[pos:]
    nums = []
    for t in rest:
        try:
            nums.append(float(t))
        except ValueError:
            pass
    # Moser: n indices + value; HEU: n indices + value; upper bound
    moser_sol, moser = nums[:n], nums[n]
    heu_sol, heu = nums[n + 1: 2 * n + 1], nums[2 * n + 1]
    ub = nums[2 * n + 2]
    off = np.arange(n + 1, dtype=np.int64) * l
    return u, d, off, cap, moser, heu, ub


def khan(as_json):
    if not KHAN_DIR.is_dir():
        print(f"# Khan instances skipped: {KHAN_DIR} not found", file=sys.stderr)
        return
    for name in [f"I{i:02d}" for i in range(7, 14)]:
        f = KHAN_DIR / name
        if not f.exists():
            out({"instance": name, "skipped": f"{f} not found"}, as_json)
            continue
        u, d, off, cap, moser, heu, ub = read_khan(f)
        t0 = time.perf_counter()
        res = solve(u, d, off, cap)
        ms = 1e3 * (time.perf_counter() - t0)
        out({"instance": name, "N": int(off.shape[0] - 1), "K": int(off[1]), "R": int(cap.shape[0]),
             "value": res.primal_value, "gap_to_upper_bound": (ub - res.primal_value) / ub,
             "ms": ms, "gap": res.gap, "dual_bound": res.dual_bound,
             "iterations": res.iterations, "upper_bound": ub,
             "moser_value": moser, "heu_value": heu}, as_json)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--quick", action="store_true", help="only N=1000 cases + Khan")
    ap.add_argument("--n", type=int, action="append", help="only these N (repeatable)")
    ap.add_argument("--k", type=int, action="append", help="only these K (repeatable)")
    ap.add_argument("--r", type=int, action="append", help="only these R (repeatable)")
    ap.add_argument("--kind", choices=KINDS, action="append", help="only these kinds (repeatable)")
    ap.add_argument("--no-highs", action="store_true", help="skip the HiGHS comparison")
    ap.add_argument("--no-khan", action="store_true", help="skip the Khan instances")
    args = ap.parse_args(argv)
    print(machine(), file=sys.stderr if args.json else sys.stdout, flush=True)
    ns = args.n or ([1000] if args.quick else [1000, 2000, 10000, 100000])
    rng = np.random.default_rng(0)
    for n in ns:
        for kind in args.kind or KINDS:
            for r in args.r or (4, 8):
                if kind == "llm-mix" and r != 8:
                    continue  # 3 GPU models + cpu + mem
                for k in args.k or (16, 32):
                    if n == 2000 and k != 32:
                        continue  # N=2000 exists only for the HiGHS comparison
                    do_highs = (n in (1000, 2000) and k == 32 and not args.no_highs)
                    try:
                        rec = case(n, k, r, kind, rng, do_highs)
                    except Exception as e:  # a broken case must not hide the others
                        rec = {"N": n, "K": k, "R": r, "kind": kind,
                               "skipped": f"error: {type(e).__name__}: {e}"}
                    out(rec, args.json)
    if not args.no_khan:
        khan(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
