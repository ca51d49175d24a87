"""Measured co-location observations and their CSV format (docs/predictor.md, "CSV format").

One row per co-located pair on one GPU: the features of job A (columns ``a_<field>``) and of
job B (``b_<field>``) for every field of :data:`elastico.predictor.schema.JOB_FIELDS`, the
``gpu_model`` they shared, the measured ``slowdown_a`` (A's co-located step time / its solo
step time) and ``slowdown_b`` (empty when only A was measured), and an optional ``source``.

Only ``gpu_model`` and ``slowdown_a`` are required columns; any other column may be left out
of the header or left empty in a row (= missing).  A column that is not in the format, a
repeated column, a row of the wrong width, a literal ``nan``, a negative or zero slowdown, an
unknown GPU model or kind, a fraction outside [0, 1] ... are errors: :func:`read_observations`
reads the whole file and raises :class:`BadRows` listing every bad row by line number --
nothing is dropped silently.

Who calls it: the ``elastico predictor`` CLI, training/evaluation, the retrain loop and the
simulator's ground truth.  Whom it calls: :mod:`csv`, the schema, the solo catalog.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from elastico.errors import InvalidArgument
from elastico.paths import data_file
from elastico.predictor.features import SoloCatalog, family_and_batch
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import (
    JOB_FIELD_NAMES,
    JOB_FIELDS,
    check_gpu_model,
    check_job_field,
    check_slowdown,
)

__all__ = [
    "Observation",
    "BadRows",
    "COLUMNS",
    "REQUIRED_COLUMNS",
    "read_observations",
    "write_observations",
    "observation_cells",
    "bundled_observations",
    "BUNDLED",
    "analytic_activity",
    "file_sha256",
]

#: Every column of the format, in the order :func:`write_observations` writes them.
COLUMNS: tuple[str, ...] = (
    tuple(f"a_{n}" for n in JOB_FIELD_NAMES) + tuple(f"b_{n}" for n in JOB_FIELD_NAMES)
    + ("gpu_model", "slowdown_a", "slowdown_b", "source"))
REQUIRED_COLUMNS = ("gpu_model", "slowdown_a")
#: The bundled observations: Gavel's measured pairs (data/gavel-pair-observations/).
BUNDLED = ("gavel-pair-observations", "observations.csv")
_MAX_LISTED = 20
_NUMERIC = {f.name for f in JOB_FIELDS if f.check not in ("text", "choice")}


@dataclass(frozen=True)
class Observation:
    """A measured pair: ``a`` and ``b`` shared one ``gpu_model``; ``slowdown_a`` (> 0,
    unitless) measured, ``slowdown_b`` measured or None.  ``line``: the CSV line it came
    from (0 if none; not compared); ``source``: free text (e.g. ``gavel:v100``)."""

    a: JobProfile
    b: JobProfile
    gpu_model: str
    slowdown_a: float
    slowdown_b: float | None = None
    source: str = ""
    line: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        check_gpu_model(self.gpu_model)
        check_slowdown(self.slowdown_a, "slowdown_a")
        if self.slowdown_b is not None:
            check_slowdown(self.slowdown_b, "slowdown_b")


class BadRows(InvalidArgument):
    """A CSV with bad rows.  ``problems``: one InvalidArgument per bad cell (field
    ``FILE:LINE: column``), in file order; the message lists the first 20."""

    def __init__(self, problems: Sequence[InvalidArgument]):
        self.problems = list(problems)
        first = self.problems[0]
        super().__init__(first.field, first.value, first.allowed)
        lines = sorted({p.line for p in self.problems if getattr(p, "line", None)})
        shown = [str(p) for p in self.problems[:_MAX_LISTED]]
        more = len(self.problems) - len(shown)
        self._message = (f"{len(self.problems)} bad cell(s) on {len(lines)} row(s); none was "
                         "used:\n  " + "\n  ".join(shown)
                         + (f"\n  ... and {more} more" if more > 0 else ""))

    def __str__(self) -> str:
        return self._message


def analytic_activity(p: JobProfile) -> float:
    """The analytic model's input for a profile read from a file: the measured SM activity,
    else the family's Amdahl parallel fraction ``p`` x its speed at ``mps_share``
    (``1/(p/s + 1 - p)``, as the placer computes it), else 1.0 (nothing known: busy)."""
    if p.sm_activity is not None:
        return p.sm_activity
    fam = p.model_family if p.model_family is not None else family_and_batch(p.job_type)[0]
    par = SoloCatalog.bundled().parallel.get(fam) if fam is not None else None
    if par is None:
        return 1.0
    s = p.mps_share if p.mps_share is not None else 1.0
    return par / (par / s + 1.0 - par)


def _cell(raw: str, name: str, where: str):
    """One CSV cell of per-job field ``name`` -> value (None if empty); InvalidArgument."""
    raw = raw.strip()
    if raw == "":
        return None
    if name in _NUMERIC:
        try:
            v = float(raw)
        except ValueError:
            raise InvalidArgument(where + name, raw, "a number") from None
        if not math.isfinite(v):
            raise InvalidArgument(where + name, raw, "a finite number; leave the cell empty "
                                                     "when the value is missing")
        return check_job_field(name, v, where)
    return check_job_field(name, raw, where)


def _problem(path: str, line: int, column: str, value, allowed: str) -> InvalidArgument:
    e = InvalidArgument(f"{path}:{line}: {column}", value, allowed)
    e.line = line  # type: ignore[attr-defined]
    return e


def read_observations(path: str | Path, *, text: str | None = None) -> list[Observation]:
    """Reads an observation CSV (module docstring).  Returns one :class:`Observation` per row
    (``line`` = its line number, header = line 1).  Raises InvalidArgument naming the file
    when it is missing, unreadable, empty or has a bad header, and :class:`BadRows` listing
    every bad cell by ``FILE:LINE: column`` when rows are bad.  ``text``: parse this string
    instead of reading ``path`` (``path`` then only names it in messages)."""
    name = str(path)
    if text is None:
        p = Path(path)
        if not p.is_file():
            raise InvalidArgument("--data", name, "an existing CSV file")
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise InvalidArgument("--data", name, f"a readable UTF-8 CSV file ({e})") from None
        try:
            text = raw.decode("utf-8-sig")  # a BOM (Excel's UTF-8) is not a header
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise InvalidArgument(f"{name}:{line}", raw[e.start:e.end].hex(" "),
                                  f"UTF-8 text (byte {e.start} of the file cannot be decoded: "
                                  f"{e.reason}); save the CSV as UTF-8") from None
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidArgument(f"{name}:1", "", "a header line naming the columns "
                              "(docs/predictor.md)") from None
    except csv.Error as e:
        raise InvalidArgument(f"{name}:1", "", f"a CSV header ({e})") from None
    header = [h.strip() for h in header]
    known = set(COLUMNS)
    for h in header:
        if h not in known:
            raise InvalidArgument(f"{name}:1: header", h, "a column of the observation format: "
                                  + ", ".join(COLUMNS))
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise InvalidArgument(f"{name}:1: header", dup[0], "each column once")
    for r in REQUIRED_COLUMNS:
        if r not in header:
            raise InvalidArgument(f"{name}:1: header", ",".join(header), f"must have column {r}")
    out: list[Observation] = []
    problems: list[InvalidArgument] = []
    width = len(header)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            problems.append(_problem(name, reader.line_num, "row", "", f"valid CSV ({e})"))
            break
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue  # blank line
        if len(row) != width:
            problems.append(_problem(name, line, "row", f"{len(row)} fields",
                                     f"{width} fields like the header (truncated or shifted?)"))
            continue
        cells = dict(zip(header, row))
        before = len(problems)
        sides = {}
        for side in ("a", "b"):
            vals = {}
            for n in JOB_FIELD_NAMES:
                col = f"{side}_{n}"
                if col not in cells:
                    continue
                try:
                    vals[n] = _cell(cells[col], n, f"{side}_")
                except InvalidArgument as e:
                    problems.append(_problem(name, line, col, e.value, e.allowed))
            sides[side] = vals
        gpu = cells["gpu_model"].strip()
        try:
            check_gpu_model(gpu)
        except InvalidArgument as e:
            problems.append(_problem(name, line, "gpu_model", gpu, e.allowed))
        slow: dict[str, float | None] = {}
        for col in ("slowdown_a", "slowdown_b"):
            raw = cells.get(col, "").strip()
            if raw == "" and col == "slowdown_b":
                slow[col] = None
                continue
            try:
                v = float(raw) if raw else math.nan
            except ValueError:
                v = None
            if v is None or raw == "":
                problems.append(_problem(name, line, col, raw, "a number (required)"
                                         if col == "slowdown_a" else "a number or empty"))
                continue
            try:
                slow[col] = check_slowdown(v, col)
            except InvalidArgument as e:
                problems.append(_problem(name, line, col, raw, e.allowed))
        if len(problems) > before:
            continue
        profs = []
        for side in ("a", "b"):
            vals = sides[side]
            kw = {k: v for k, v in vals.items() if k not in ("job_type", "kind", "mem_gib")}
            prof = JobProfile(vals.get("job_type") or "", vals.get("kind") or "", 1.0,
                              mem_gib=vals.get("mem_gib") or 0.0, gpu_model=gpu, **kw)
            profs.append(replace(prof, gpu_activity=analytic_activity(prof)))
        out.append(Observation(profs[0], profs[1], gpu, slow["slowdown_a"], slow["slowdown_b"],
                               cells.get("source", "").strip(), line))
    if problems:
        raise BadRows(problems)
    return out


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_observations(path: str | Path | io.TextIOBase, obs: Iterable[Observation]) -> int:
    """Writes ``obs`` in the CSV format (every column of :data:`COLUMNS`, empty = missing;
    floats in shortest round-trip form).  ``path`` may be an open text stream.  Returns the
    number of rows written."""
    close = False
    if isinstance(path, (str, Path)):
        f = open(path, "w", newline="", encoding="utf-8")
        close = True
    else:
        f = path
    try:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        n = 0
        for o in obs:
            w.writerow(observation_cells(o))
            n += 1
        return n
    finally:
        if close:
            f.close()


def observation_cells(o: Observation) -> list[str]:
    """One observation as the CSV cells of :data:`COLUMNS`."""
    cells = []
    for p in (o.a, o.b):
        for n in JOB_FIELD_NAMES:
            v = getattr(p, n)
            if n == "mem_gib" and v == 0.0:
                v = None
            if n in ("job_type", "kind") and v == "":
                v = None
            cells.append(_fmt(v))
    cells += [o.gpu_model, _fmt(float(o.slowdown_a)),
              _fmt(None if o.slowdown_b is None else float(o.slowdown_b)), o.source]
    return cells


def bundled_observations() -> list[Observation]:
    """The bundled observations (Gavel's measured pairs, data/gavel-pair-observations/)."""
    return read_observations(data_file(*BUNDLED))


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (recorded in model files and training reports)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()

