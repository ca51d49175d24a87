"""``elastico pricing solve``: solve one MMKP instance from an ``.npz`` file.

The lead's ``elastico/cli.py`` calls :func:`register` with its subparsers object; the chosen
command runs as ``args.func(args)`` and returns the exit status (0 ok, 2 bad input or
infeasible instance, the message on stderr as ``elastico: error: <field>: <value> ...``).

Instance file: ``numpy.savez(FILE, utility=[M], demand=[M, R], offsets=[N+1], capacity=[R])``
(docs/pricing.md).  Calls :func:`elastico.pricing.solve`.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from elastico.errors import ElasticoError, InvalidArgument
from elastico.pricing.solver import PricingResult, solve
from elastico.pricing.validation import DTYPES

__all__ = ["register", "load_instance", "INSTANCE_KEYS"]

INSTANCE_KEYS = ("utility", "demand", "offsets", "capacity")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``pricing`` (with subcommand ``solve``) to an argparse subparsers object."""
    p = subparsers.add_parser("pricing", help="Elastic Shadow Pricing (MMKP solver)",
                              description="Elastic Shadow Pricing: choose one configuration per job.")
    sub = p.add_subparsers(dest="pricing_command", required=True)
    s = sub.add_parser("solve", help="solve an instance stored as .npz",
                       description="Solve one MMKP instance; the npz holds utility[M], "
                                   "demand[M,R], offsets[N+1], capacity[R].")
    s.add_argument("--instance", required=True, metavar="FILE.npz", help="instance file")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--max-iterations", type=int, default=200, metavar="N")
    s.add_argument("--gap-tolerance", type=float, default=1e-4, metavar="X")
    s.add_argument("--dtype", choices=DTYPES, default="float64")
    s.add_argument("--nthreads", type=int, default=1, metavar="K")
    s.add_argument("--initial-prices", metavar="FILE.npy", help="warm-start prices [R]")
    s.set_defaults(func=_cmd_solve)
    return p


def _load(path: str, field: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise InvalidArgument(field, path, "no such file")
    try:
        return np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InvalidArgument(field, path, f"not a readable numpy file: {exc}") from None


def load_instance(path: str) -> dict[str, np.ndarray]:
    """Reads an instance npz; raises InvalidArgument naming the file or the missing key."""
    data = _load(path, "instance")
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InvalidArgument("instance", path, "must be an .npz archive (numpy.savez)")
    with data:
        missing = [k for k in INSTANCE_KEYS if k not in data.files]
        if missing:
            raise InvalidArgument(f"instance.{missing[0]}", "missing",
                                  f"the npz must hold arrays {', '.join(INSTANCE_KEYS)}")
        return {k: data[k] for k in INSTANCE_KEYS}


def _cmd_solve(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        inst = load_instance(args.instance)
        prices = None
        if args.initial_prices:
            prices = _load(args.initial_prices, "initial_prices")
            if not isinstance(prices, np.ndarray):
                raise InvalidArgument("initial_prices", args.initial_prices, "must be an .npy array")
        res = solve(inst["utility"], inst["demand"], inst["offsets"], inst["capacity"],
                    initial_prices=prices, max_iterations=args.max_iterations,
                    gap_tolerance=args.gap_tolerance, dtype=args.dtype, nthreads=args.nthreads)
    except ElasticoError as exc:
        print(f"elastico: error: {exc}", file=err)
        return 2
    if args.json:
        json.dump(_as_json(res), out)
        out.write("\n")
    else:
        _print_table(res, out)
    return 0


def _as_json(res: PricingResult) -> dict[str, Any]:
    return {"choice": res.choice.tolist(), "prices": res.prices.tolist(),
            "primal_value": res.primal_value, "dual_bound": res.dual_bound, "gap": res.gap,
            "iterations": res.iterations, "seconds": res.seconds, "totals": res.totals.tolist()}


def _print_table(res: PricingResult, out: TextIO) -> None:
    n = res.choice.shape[0]
    rows = [("jobs", f"{n}"), ("primal value", f"{res.primal_value:.6g}"),
            ("dual bound", f"{res.dual_bound:.6g}"), ("gap", f"{100 * res.gap:.4f} %"),
            ("iterations", f"{res.iterations}"), ("seconds", f"{res.seconds:.3f}")]
    for k, v in rows:
        out.write(f"{k:<14}{v}\n")
    out.write(f"{'resource':<10}{'price':>14}{'used':>14}\n")
    for r, (p, t) in enumerate(zip(res.prices, res.totals)):
        out.write(f"{r:<10}{p:>14.6g}{t:>14.6g}\n")
    shown = ", ".join(str(int(c)) for c in res.choice[:20])
    out.write(f"choice        [{shown}{', ...' if n > 20 else ''}]\n")
