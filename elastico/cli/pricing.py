"""``elastico pricing solve``: solve one MMKP instance from an ``.npz`` file.

The lead's ``elastico/cli/__init__.py`` calls :func:`register` with its subparsers object; the chosen
command runs as ``args.func(args)`` and returns the exit status: 0 ok; 2 bad input (the
message on stderr as ``elastico: error: <field>: <value> ...``); 3 infeasible (the solver
raised :class:`elastico.errors.Infeasible`, possible only when some family has no zero-demand
configuration; ``elastico: error: infeasible: <the solver's message>`` on stderr).

Instance file: ``numpy.savez(FILE, utility=[M], demand=[M, R], offsets=[N+1], capacity=[R])``
(docs/pricing.md).  Calls :func:`elastico.pricing.solve`.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path
from typing import IO, Any, TextIO

import numpy as np

from elastico.errors import ElasticoError, Infeasible, InvalidArgument
from elastico.pricing.solver import DEFAULT_GAP_TOLERANCE, MAX_ITERATIONS, PricingResult, solve
from elastico.pricing.validation import DTYPES

__all__ = ["register", "load_instance", "INSTANCE_KEYS", "EXIT_OK", "EXIT_BAD_INPUT",
           "EXIT_INFEASIBLE"]

INSTANCE_KEYS = ("utility", "demand", "offsets", "capacity")

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

_SOLVE_EPILOG = (
    "exit status: 0 ok (a feasible choice was printed); 2 bad input (elastico: error: "
    "<field>: <value> is not allowed (...) on stderr); 3 infeasible: no feasible choice was "
    "found, possible only when some job has no zero-demand configuration (elastico: error: "
    "infeasible: <the solver's message> on stderr)")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``pricing`` (with subcommand ``solve``) to an argparse subparsers object."""
    p = subparsers.add_parser("pricing", help="Elastic Shadow Pricing (MMKP solver)",
                              description="Elastic Shadow Pricing: choose one configuration per job.")
    sub = p.add_subparsers(dest="pricing_command", required=True, metavar="COMMAND")
    s = sub.add_parser("solve", help="solve an instance stored as .npz",
                       description="Solve one MMKP instance; the npz holds utility[M], "
                                   "demand[M,R], offsets[N+1], capacity[R].",
                       epilog=_SOLVE_EPILOG)
    s.add_argument("--instance", required=True, metavar="FILE.npz",
                   help="instance written with numpy.savez: utility[M] (utility of each "
                        "configuration), demand[M,R] (resources of each configuration, model "
                        "units: GPUs, GiB, cores), offsets[N+1] (integers; job j owns "
                        "configurations offsets[j]..offsets[j+1]-1), capacity[R] (same units "
                        "as demand); numeric arrays only (required)")
    s.add_argument("--json", action="store_true",
                   help="print one JSON object (choice, prices, primal_value, dual_bound, gap, "
                        "iterations, seconds, totals) instead of the table (default: table)")
    s.add_argument("--max-iterations", type=int, default=200, metavar="N",
                   help="limit on Lagrangian evaluations (iterations), an integer in "
                        f"1..{MAX_ITERATIONS} (default: %(default)s)")
    s.add_argument("--gap-tolerance", type=float, default=DEFAULT_GAP_TOLERANCE, metavar="X",
                   help="stop once the certified relative duality gap is at most X, a fraction "
                        "(0.001 = 0.1 %%), finite and >= 0 (default: %(default)s)")
    s.add_argument("--dtype", choices=DTYPES, default="float64",
                   help="floating-point type of the native selection; the reported dual bound "
                        "is always evaluated in float64 (default: %(default)s)")
    s.add_argument("--nthreads", type=int, default=1, metavar="K",
                   help="threads of the native selection, an integer >= 1 (default: %(default)s)")
    s.add_argument("--initial-prices", metavar="FILE.npy",
                   help="warm-start shadow prices [R] written with numpy.save, finite and >= 0, "
                        "in utility per unit of each resource (e.g. a previous run's prices) "
                        "(default: none: a cold start, prices from 0 along the ray that "
                        "clears the zero-price overuse; docs/pricing.md)")
    s.set_defaults(func=_cmd_solve)
    return p


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first record, or an empty zip
_NPY_MAGIC = b"\x93NUMPY"


def _header_dtype(f: IO[bytes]) -> np.dtype | None:
    """dtype from a .npy header at the start of ``f`` (no data read); None if unreadable."""
    try:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        return read(f)[2]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        return None


def _refuse_objects(dtype: np.dtype | None, field: str) -> None:
    if dtype is not None and dtype.hasobject:
        raise InvalidArgument(f"{field}.dtype", str(dtype),
                              "must be a numeric array: object arrays need pickle, which is "
                              "never loaded; save numbers, e.g. float64")


def _load(path: str, field: str, kind: str) -> Any:
    """Loads ``path`` as ``kind`` ("npz" or "npy") without pickle; InvalidArgument naming
    ``field`` and the path (or ``field.dtype`` and the dtype) otherwise."""
    p = Path(path)
    if p.is_dir():
        raise InvalidArgument(field, path, "is a directory")
    if not p.exists():
        raise InvalidArgument(field, path, "no such file")
    if not p.is_file():
        raise InvalidArgument(field, path, "not a regular file")
    try:
        with p.open("rb") as f:
            head = f.read(len(_NPY_MAGIC))
            f.seek(0)
            dtype = _header_dtype(f) if head == _NPY_MAGIC else None
    except OSError as exc:
        raise InvalidArgument(field, path, f"cannot be read: {exc.strerror or exc}") from None
    is_npz, is_npy = head.startswith(_ZIP_MAGIC), head == _NPY_MAGIC
    if kind == "npz" and not is_npz:
        raise InvalidArgument(field, path, "must be an .npz archive (numpy.savez)" if is_npy
                              else "not an .npz archive: it is not a zip file; write one with numpy.savez")
    if kind == "npy" and not is_npy:
        raise InvalidArgument(field, path, "must be an .npy array (numpy.save)" if is_npz
                              else "not an .npy array: no .npy header; write one with numpy.save")
    _refuse_objects(dtype, field)
    try:
        return np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InvalidArgument(field, path, f"not a readable numpy file: {exc}") from None


def load_instance(path: str) -> dict[str, np.ndarray]:
    """Reads an instance npz; raises InvalidArgument naming the file, the missing key, or an
    array that is not numeric (``instance.<key>.dtype``) or unreadable."""
    data = _load(path, "instance", "npz")
    with data:
        missing = [k for k in INSTANCE_KEYS if k not in data.files]
        extra = [k for k in data.files if k not in INSTANCE_KEYS]
        if missing or extra:  # an extra one is most likely a misspelt one, not to be ignored
            what = (f"array {missing[0]!r} is missing" if missing
                    else f"array {extra[0]!r} is not one of them")
            raise InvalidArgument("--instance", path, f"an .npz holding exactly the arrays "
                                                      f"{', '.join(INSTANCE_KEYS)}; {what}")
        members = set(data.zip.namelist())
        arrays = {}
        for k in INSTANCE_KEYS:
            member = f"{k}.npy" if f"{k}.npy" in members else k
            try:
                with data.zip.open(member) as f:
                    dtype = _header_dtype(f)
            except (OSError, zipfile.BadZipFile, EOFError, KeyError):
                dtype = None  # np.load below reports the damage
            _refuse_objects(dtype, f"instance.{k}")
            try:
                arrays[k] = data[k]
            except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
                raise InvalidArgument(f"instance.{k}", path,
                                      f"not a readable array: {exc}") from None
        return arrays


#: the solver's parameter names -> the flags the user typed (fields inside a file, such as
#: instance.utility or initial_prices[0], keep their data path)
_FLAG_OF = {"max_iterations": "--max-iterations", "gap_tolerance": "--gap-tolerance",
            "nthreads": "--nthreads", "dtype": "--dtype", "instance": "--instance",
            "initial_prices": "--initial-prices"}


def _cmd_solve(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        inst = load_instance(args.instance)
        prices = None
        if args.initial_prices:
            prices = _load(args.initial_prices, "initial_prices", "npy")
        res = solve(inst["utility"], inst["demand"], inst["offsets"], inst["capacity"],
                    initial_prices=prices, max_iterations=args.max_iterations,
                    gap_tolerance=args.gap_tolerance, dtype=args.dtype, nthreads=args.nthreads)
    except Infeasible as exc:
        print(f"elastico: error: infeasible: {exc}", file=err)
        return EXIT_INFEASIBLE
    except InvalidArgument as exc:
        if exc.field in _FLAG_OF:
            exc = InvalidArgument(_FLAG_OF[exc.field], exc.value, exc.allowed)
        print(f"elastico: error: {exc}", file=err)
        return EXIT_BAD_INPUT
    except ElasticoError as exc:
        print(f"elastico: error: {exc}", file=err)
        return EXIT_BAD_INPUT
    if args.json:
        json.dump(_as_json(res), out)
        out.write("\n")
    else:
        _print_table(res, out)
    return EXIT_OK


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
