"""Decision identity: the same replays give bit-identical per-job outcomes before and after a
performance change (issue 19, "the 512-GPU load sweep": speed-ups that change no decision).

Usage::

    python bench/decision_identity.py record REF.json [--only NAME,...]   # on the reference commit
    python bench/decision_identity.py check  REF.json [--only NAME,...]   # after the change

``record`` replays every case of :data:`CASES` and writes, per case and per simulated policy,
each job's outcome with every float as ``float.hex`` (JCT, slowdown, first start, finish,
progress, time run while unknown, ...), its counters (evictions, shrinks, restarts, solo
profiles recorded) and status, the round count and every metric but the wall-clock ones
(round durations).  ``check`` replays them again and compares exactly: it prints the first
differences and exits 1 when any case differs, 0 when all are bit-identical.

The cases (:func:`_cases`): ``elastico evaluate``'s single runs
(:func:`elastico.sim.evaluate.run_one`, seed 0, continuous arrivals) on the trace cluster at
16 and 64 GPUs, load 0.5, and at 16 GPUs, load 2.0 (overloaded), for ``elastico``,
``elastico-no-iac``, ``elastico-no-rst``, ``exclusive`` and ``gavel``; at 64 GPUs, load 2.0,
stopped at the window's end as the load sweep's runs are, for ``elastico``,
``elastico-no-iac`` and ``elastico-no-esp``, and the full replay for ``elastico``;
a100h100-mig at 64 GPUs, load 1.0, ``elastico`` (stopped); the llm-mix workload on
a100h100-mig at 64 GPUs, load 0.5 (``elastico``, ``elastico-no-esp``, ``exclusive``,
``mps-static``) and load 2.0 stopped (``elastico``, ``exclusive``); and two ``elastico simulate`` command lines
(``--gpus 64 --jobs 128``; ``--workload llm-mix --cluster a100h100-mig --gpus 64``), captured
by wrapping :func:`elastico.sim.simulator.simulate`.  CPU time of each case is printed (it is
not compared).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

#: metrics that read the wall clock (round durations): never compared
_WALL_KEYS = {"round_ms_p50", "round_ms_p99", "wall_s"}


def _hex(x):
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return float.hex(x)
    try:  # numpy scalars
        return float.hex(float(x))
    except (TypeError, ValueError):
        return repr(x)


def _summary(res) -> dict:
    """One SimResult as exact, JSON-able data."""
    jobs = {}
    for r in res.records:
        jct = (r.finish_s - r.arrival_s) if r.finish_s is not None else None
        jobs[r.job_id] = {
            "status": r.status, "reason": r.reason,
            "jct": _hex(jct),
            "slowdown": _hex(jct / r.alone_s) if jct is not None and r.alone_s > 0 else None,
            "first_start": _hex(r.first_start_s), "finish": _hex(r.finish_s),
            "progress": _hex(r.progress), "max_slowdown": _hex(r.max_slowdown),
            "restarts": r.restarts, "evictions": r.evictions, "shrinks": r.shrinks,
            "lost_work": _hex(r.lost_work), "wasted_gpu_s": _hex(r.wasted_gpu_s),
            "unknown_run_s": _hex(r.unknown_run_s), "unknown_over_s": _hex(r.unknown_over_s),
            "unknown_max_ratio": _hex(r.unknown_max_ratio), "profiled_s": _hex(r.profiled_s),
            "profiles_recorded": r.profiles_recorded, "config": r.config,
            "tokens_done": _hex(r.tokens_done), "startup_s": _hex(r.startup_s),
        }
    metrics = {k: _hex(v) for k, v in sorted(res.metrics.items()) if k not in _WALL_KEYS}
    return {"policy": res.policy, "rounds": res.rounds,
            "evictions": res.metrics.get("evictions"), "metrics": metrics, "jobs": jobs}


@contextlib.contextmanager
def _capture():
    """Collect every SimResult that :func:`elastico.sim.simulator.simulate` returns."""
    import elastico.sim.simulator as sim

    out = []
    orig = sim.simulate

    def wrapped(*a, **kw):
        res = orig(*a, **kw)
        out.append(_summary(res))
        return res

    sim.simulate = wrapped
    try:
        yield out
    finally:
        sim.simulate = orig


def _evaluate_case(cluster: str, gpus: int, policy: str, load: float, stop: bool = False,
                   workload: str = "openb"):
    def run():
        from elastico.sim.clusters import load_cluster
        from elastico.sim.evaluate import Settings, Task, run_one

        st = Settings(load=load, arrivals="continuous", stop_at_window_end=stop,
                      workload=workload)
        with _capture() as got:
            out = run_one(Task(load_cluster(cluster), gpus, policy, 0, st))
        return {"jct": [float.hex(x) for x in out.jct],
                "slowdown": [float.hex(x) for x in out.slowdown],
                "backlog_bounded": out.run["backlog_bounded"], "sims": got}
    return run


def _cli_case(argv: list[str]):
    def run():
        from elastico.cli import main

        with _capture() as got, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            rc = main(["simulate", *argv, "--no-progress"])
        return {"rc": rc, "sims": got}
    return run


def _cases() -> dict:
    cases = {}
    for gpus in (16, 64):
        for policy in ("elastico", "elastico-no-iac", "elastico-no-rst", "exclusive", "gavel"):
            cases[f"trace-{gpus} {policy} load 0.5"] = _evaluate_case("trace", gpus, policy, 0.5)
    for policy in ("elastico", "elastico-no-iac", "elastico-no-rst", "exclusive", "gavel"):
        cases[f"trace-16 {policy} load 2"] = _evaluate_case("trace", 16, policy, 2.0)
    # overloaded, stopped at the window's end as the load sweep's runs are
    for policy in ("elastico", "elastico-no-iac", "elastico-no-esp"):
        cases[f"trace-64 {policy} load 2 stop"] = _evaluate_case(
            "trace", 64, policy, 2.0, stop=True)
    cases["a100h100-mig-64 elastico load 1 stop"] = _evaluate_case(
        "a100h100-mig", 64, "elastico", 1.0, stop=True)
    cases["simulate --gpus 64 --jobs 128"] = _cli_case(["--gpus", "64", "--jobs", "128"])
    cases["simulate llm-mix a100h100-mig 64"] = _cli_case(
        ["--workload", "llm-mix", "--cluster", "a100h100-mig", "--gpus", "64"])
    cases["trace-64 elastico load 2"] = _evaluate_case("trace", 64, "elastico", 2.0)
    # the llm-mix workload (issue 24): its main runs' load, and overloaded where offline
    # inference is preempted for training most (policies/priority.py)
    for policy in ("elastico", "elastico-no-esp", "exclusive", "mps-static"):
        cases[f"llm-mix a100h100-mig-64 {policy} load 0.5"] = _evaluate_case(
            "a100h100-mig", 64, policy, 0.5, workload="llm-mix")
    for policy in ("elastico", "exclusive"):
        cases[f"llm-mix a100h100-mig-64 {policy} load 2 stop"] = _evaluate_case(
            "a100h100-mig", 64, policy, 2.0, stop=True, workload="llm-mix")
    return cases


def _import_all() -> None:
    """Every module a case runs, imported now (a reference recorded from one checkout keeps
    that checkout's code even when the files change while it runs)."""
    import importlib

    for m in ("elastico.cli", "elastico.cli.simulate", "elastico.cli.evaluate",
              "elastico.sim.simulator", "elastico.sim.evaluate", "elastico.sim.workload",
              "elastico.sim.llm_mix", "elastico.sim.contention_truth",
              "elastico.sim.utilisation", "elastico.sim.clusters", "elastico.placer.round",
              "elastico.placer.placement", "elastico.placer.policies",
              "elastico.placer.policies.common", "elastico.placer.policies.pipeline",
              "elastico.placer.policies.priority", "elastico.placer.policies.elastico",
              "elastico.placer.policies.gavel", "elastico.predictor.prior",
              "elastico.llm_shapes", "elastico.llm_job", "elastico.shapes"):
        importlib.import_module(m)


def _diff(a, b, path: str, out: list[str], limit: int = 20) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'reference' if k in a else 'new run'}")
            else:
                _diff(a[k], b[k], f"{path}/{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} entries in the reference, {len(b)} now")
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append(f"{path}: reference {a!r}, now {b!r}")


def main(argv: list[str] | None = None) -> int:
    cases = _cases()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cases (quote names, they hold spaces):\n  " + "\n  ".join(cases)
               + "\n\nAll cases take about 10 minutes of CPU; check exits 1 when any case "
                 "differs, 0 when all are bit-identical.")
    p.add_argument("mode", choices=("record", "check"),
                   help="record: replay and write the reference (on the reference commit); "
                        "check: replay and compare with it exactly (after the change)")
    p.add_argument("reference", help="the reference JSON (written by record, read by check)")
    p.add_argument("--only", default=None, metavar="NAME,NAME",
                   help="comma-separated case names (default: all; listed below)")
    args = p.parse_args(argv)
    names = list(cases) if args.only is None else [n.strip() for n in args.only.split(",")]
    for n in names:
        if n not in cases:
            p.error(f"--only: unknown case {n!r}; one of: " + "; ".join(cases))
    ref = {}
    if args.mode == "check":  # read before any replay: a bad file is refused at once
        try:
            with open(args.reference, encoding="utf-8") as f:
                ref = json.load(f)["cases"]
        except OSError as e:
            p.error(f"reference {args.reference}: cannot be read ({e.strerror})")
        except (ValueError, KeyError, TypeError):
            p.error(f"reference {args.reference}: not a file written by record "
                    "(JSON with a 'cases' object)")
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
        from jct_ceiling import check_writable

        check_writable(p, args.reference, "reference")
    _import_all()
    got, bad = {}, 0
    for n in names:
        c0 = time.process_time()
        got[n] = cases[n]()
        cpu = time.process_time() - c0
        if args.mode == "check":
            if n not in ref:
                print(f"{n}: not in the reference", flush=True)
                bad += 1
                continue
            diffs: list[str] = []
            _diff(ref[n], got[n], "", diffs)
            bad += bool(diffs)
            print(f"{n}: {'IDENTICAL' if not diffs else 'DIFFERS'} ({cpu:.1f} s CPU)", flush=True)
            for d in diffs:
                print("   ", d)
        else:
            print(f"{n}: recorded ({cpu:.1f} s CPU)", flush=True)
            with open(args.reference, "w", encoding="utf-8") as f:  # after every case
                json.dump({"cases": got}, f, indent=None, sort_keys=True)
    if args.mode == "record":
        return 0
    print(f"{len(names) - bad} of {len(names)} cases bit-identical", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
