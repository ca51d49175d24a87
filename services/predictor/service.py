"""The predictor service's core, without gRPC: the model store, the serving model with its
fallback, reported observations, and retraining (docs/predictor.md, "Serving").

Model store (a folder)::

    DIR/models/<version>.json        every promoted model (model file format: model.py)
    DIR/CURRENT                      one line: the file name under models/ that serves
    DIR/observations/reported.csv    observations accepted by ReportObservation (CSV format)
    DIR/profiles.json                solo activity profiles accepted by ReportProfile
                                     (:mod:`elastico.predictor.profiles`: bounded, persisted)

Serving (:class:`PredictorCore`): at start the store's CURRENT model, else the bundled model,
else the analytic model (the fallback; its version says ``analytic-...``).  Before each
prediction the core looks at CURRENT (one ``stat``); when it changed, the new model is loaded
-- and if it is refused (truncated, corrupt, wrong schema) the error is logged and the model
that was serving keeps serving.  :meth:`PredictorCore.load` does the same for an explicit file
and raises the refusal to its caller.

Retraining (:func:`retrain`): the reported observations not yet in the serving model's
training data are the *new* rows.  The serving model is scored on them (it never saw them);
the candidate recipe -- the base data plus every reported row -- is scored on them by k-fold
over a *shuffled* (seeded by the data's digest) split of the new rows (each fold of new rows
predicted by a model trained on the base data, the older reported rows and the other new
folds), so both are scored on the same held-out rows.  The candidate, trained on all of it, is
promoted (written under ``models/`` and made CURRENT) only if its MAE on the new rows is no
worse *and* its file loads back and predicts finite slowdowns in [1, 50]; otherwise the old
model stays.  :class:`RefitSchedule` and :func:`refit_if_due` run this online: when enough
new rows have arrived and enough time has passed (the caller's clock).

Who calls it: the gRPC adapter (:mod:`elastico.predictor.server`) and the CLI.  Whom it calls:
:mod:`elastico.predictor.model`, :mod:`elastico.predictor.learned`, the file system; no clock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor.analytic import AnalyticSlowdown
from elastico.predictor.evaluate import metrics
from elastico.predictor.learned import LearnedSlowdown, bundled_predictor
from elastico.predictor.model import SlowdownPredictor, train
from elastico.predictor.observations import (
    Observation,
    bundled_observations,
    observation_cells,
    read_observations,
    write_observations,
)
from elastico.predictor.online import JobCorrections
from elastico.predictor.profile import JobProfile
from elastico.predictor.profiles import ProfileStore
from elastico.predictor.schema import check_gpu_model

__all__ = ["ModelStore", "PredictorCore", "retrain", "RefitSchedule", "refit_if_due",
           "held_out_folds",
           "MAX_PAIRS"]

_LOG = logging.getLogger(__name__)
#: Most pairs one PredictSlowdown call may ask for (and observations one report may carry).
MAX_PAIRS = 1_000_000
_NAME = re.compile(r"^[A-Za-z0-9._+-]+\.json$")


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; models are shared read-only
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ModelStore:
    """The model folder (module docstring).  Creates its sub-folders on first use."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise InvalidArgument("--model-dir", str(root), "a folder")
        self.models = self.root / "models"
        self.current_file = self.root / "CURRENT"
        self.reported_file = self.root / "observations" / "reported.csv"
        self.profiles_file = self.root / "profiles.json"
        self._lock = threading.Lock()

    def _mkdirs(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)
        self.reported_file.parent.mkdir(parents=True, exist_ok=True)

    def token(self) -> tuple[int, int] | None:
        """Changes whenever CURRENT is rewritten (mtime ns, inode); None when absent."""
        try:
            st = self.current_file.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino)

    def current_path(self) -> Path | None:
        """The serving model's file, or None when the store has none yet.  InvalidArgument
        when CURRENT does not name a file under ``models/``."""
        try:
            name = self.current_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        if not _NAME.match(name):
            raise InvalidArgument(str(self.current_file), name, "a model file name under models/")
        return self.models / name

    def load_current(self) -> SlowdownPredictor | None:
        """The serving model, None if the store has none; InvalidArgument if refused."""
        p = self.current_path()
        return None if p is None else SlowdownPredictor.load(p)

    def install(self, predictor: SlowdownPredictor) -> Path:
        """Writes ``models/<version>.json`` and points CURRENT at it (both atomic)."""
        self._mkdirs()
        name = f"{predictor.version}.json"
        if not _NAME.match(name):
            raise InvalidArgument("version", predictor.version, "letters, digits, . _ + -")
        path = self.models / name
        predictor.save(path)
        _atomic_write(self.current_file, name + "\n")
        return path

    def next_number(self) -> int:
        """1 + the highest ``vNNNN`` among stored models (1 for an empty store)."""
        nums = [int(m.group(1)) for p in (self.models.glob("v*.json") if self.models.is_dir() else [])
                for m in [re.match(r"^v(\d+)-", p.name)] if m]
        return max(nums, default=0) + 1

    def append_reported(self, obs: Sequence[Observation]) -> int:
        """Appends ``obs`` to ``observations/reported.csv``; returns the rows stored in all."""
        import csv

        self._mkdirs()
        with self._lock:
            new = not self.reported_file.exists() or self.reported_file.stat().st_size == 0
            if new:
                write_observations(self.reported_file, obs)
            else:
                with open(self.reported_file, "a", newline="", encoding="utf-8") as f:
                    w = csv.writer(f, lineterminator="\n")
                    for o in obs:
                        w.writerow(observation_cells(o))
            return self._count()

    def _count(self) -> int:
        import csv

        # records, not lines: a quoted cell (a `source`) may hold line breaks
        with open(self.reported_file, encoding="utf-8", newline="") as f:
            return max(sum(1 for row in csv.reader(f) if row) - 1, 0)

    def reported(self) -> list[Observation]:
        """Every reported observation, in arrival order ([] when none)."""
        if not self.reported_file.exists():
            return []
        return read_observations(self.reported_file)


class PredictorCore:
    """Serves predictions and accepts observations (module docstring).

    ``store``: a :class:`ModelStore` (or None: no retraining, reports kept in memory);
    ``model_path``: serve this file instead (refused file -> InvalidArgument at start);
    ``use_bundled``: fall back to the bundled model when the store has none (default True).
    ``profiles``: the solo-profile store (default: ``profiles.json`` in ``store``'s folder,
    in memory without a store; a file that cannot be read back is logged, renamed to
    ``profiles.json.bad`` and the store starts empty).
    ``corrections``: the per-job correction (:class:`~elastico.predictor.online.
    JobCorrections`, docs/predictor.md "Per-job correction"; default one with its default
    bound, fed from the store's reported observations at start); ``per_job=False`` serves the
    population model alone.
    """

    def __init__(self, store: ModelStore | None = None, model_path: str | Path | None = None,
                 *, use_bundled: bool = True, profiles: ProfileStore | None = None,
                 corrections: JobCorrections | None = None, per_job: bool = True):
        self.corrections = (corrections if corrections is not None else JobCorrections()) \
            if per_job else None
        self._init(store, model_path, use_bundled, profiles)
        self._replay()

    def _replay(self) -> None:
        """Feeds the newest reported observations of the store to the per-job correction
        (its state persists as those observations).  A bad file is logged and skipped."""
        c = self.corrections
        if c is None or self.store is None:
            return
        try:
            rows = self.store.reported()
        except InvalidArgument as e:
            _LOG.error("per-job correction not restored: %s", e)
            return
        if rows:
            c.observe(rows[-c.max_records:], self.population, self.version)

    def _init(self, store, model_path, use_bundled, profiles) -> None:
        self.store = store
        self.profiles = profiles if profiles is not None else _profile_store(store)
        self._lock = threading.Lock()
        self._learned: LearnedSlowdown | None = None
        self._fallback = AnalyticSlowdown()
        self._token: Any = None
        self._memory: list[Observation] = []
        self.note = ""
        if model_path is not None:
            self.load(model_path)
            return
        if store is not None:
            self._token = store.token()
            try:
                pred = store.load_current()
            except InvalidArgument as e:
                _LOG.error("model store: %s; trying the bundled model", e)
                pred = None
            if pred is not None:
                self._set(pred, f"store {store.root}")
                return
        if use_bundled:
            try:
                self._set(bundled_predictor(), "bundled")
                return
            except (InvalidArgument, ImportError, OSError) as e:
                self.note = f"analytic fallback: {e}"
                _LOG.warning(self.note)
        if not self.note:
            self.note = "analytic fallback: no model"

    def _set(self, pred: SlowdownPredictor, where: str) -> None:
        learned = LearnedSlowdown([pred])
        with self._lock:
            self._learned = learned
        self.note = f"predictor {pred.version} ({where})"

    @property
    def version(self) -> str:
        """The serving model's version (``analytic-kappa<k>`` for the fallback)."""
        learned = self._learned
        if learned is None:
            return f"analytic-kappa{self._fallback.kappa:.4f}"
        return learned.version

    def load(self, path: str | Path) -> str:
        """Serve the model file at ``path`` from now on; returns its version.  A refused file
        raises InvalidArgument and the serving model does not change."""
        pred = SlowdownPredictor.load(path)
        self._set(pred, str(path))
        return pred.version

    def refresh(self) -> None:
        """Loads the store's CURRENT model if CURRENT changed since the last look; a refused
        file is logged and the serving model kept (module docstring)."""
        if self.store is None:
            return
        tok = self.store.token()
        if tok == self._token:
            return
        self._token = tok
        try:
            pred = self.store.load_current()
        except InvalidArgument as e:
            _LOG.error("new model refused, still serving %s: %s", self.version, e)
            return
        if pred is not None:
            self._set(pred, f"store {self.store.root}")

    def predict(self, a: Sequence[JobProfile], b: Sequence[JobProfile], gpu_model: str,
                both: bool = True) -> tuple[np.ndarray, np.ndarray | None, str]:
        """``(slowdown of a[i], slowdown of b[i] or None, model version)`` for pairs sharing
        one GPU of ``gpu_model`` (a key of ``schema.GPU_SPECS``); ``both=False`` predicts only
        the ``a`` sides (half the work).  InvalidArgument for an unknown GPU model,
        mismatched lengths or more than :data:`MAX_PAIRS` pairs."""
        check_gpu_model(gpu_model)
        if len(a) != len(b):
            raise InvalidArgument("pairs", (len(a), len(b)), "as many a as b profiles")
        if len(a) > MAX_PAIRS:
            raise InvalidArgument("pairs", len(a), f"at most {MAX_PAIRS} pairs per call")
        self.refresh()
        learned = self._learned
        if learned is None:
            f = self._fallback
            sa = np.array([f.pair_slowdown(x, y) for x, y in zip(a, b)])
            sb = np.array([f.pair_slowdown(y, x) for x, y in zip(a, b)]) if both else None
            version = self.version
        elif both:
            sa, sb = learned.pairs(a, b, gpu_model)
            version = learned.version
        else:
            sa, sb, version = learned.slowdowns(a, b, gpu_model), None, learned.version
        c = self.corrections
        if c is not None and len(c):
            c.rebase(self.population, version)
            sa = c.apply(a, b, sa)
            if sb is not None:
                sb = c.apply(b, a, sb)
        return sa, sb, version

    def in_domain(self, a: Sequence[JobProfile], b: Sequence[JobProfile]) -> list[bool]:
        """Whether the serving model predicts ``a[i]`` next to ``b[i]`` inside its training
        domain (:meth:`elastico.predictor.learned.LearnedSlowdown.in_domain`); all False while
        the analytic fallback serves."""
        learned = self._learned
        if learned is None:
            return [False] * len(a)
        return [learned.in_domain(x, y) for x, y in zip(a, b)]

    def population(self, a: Sequence[JobProfile], b: Sequence[JobProfile],
                   gpu_model: str) -> np.ndarray:
        """The serving population model's slowdown of ``a[i]`` next to ``b[i]`` (no per-job
        correction), shape (n,)."""
        learned = self._learned
        if learned is None:
            f = self._fallback
            return np.array([f.pair_slowdown(x, y) for x, y in zip(a, b)])
        return learned.slowdowns(a, b, gpu_model)

    def report(self, obs: Sequence[Observation]) -> int:
        """Stores measured observations (in the store, else in memory); returns how many are
        stored in all.  InvalidArgument for an empty batch or more than MAX_PAIRS."""
        if not obs:
            raise InvalidArgument("observations", 0, "at least one observation")
        if len(obs) > MAX_PAIRS:
            raise InvalidArgument("observations", len(obs), f"at most {MAX_PAIRS} per call")
        if self.store is not None:
            n = self.store.append_reported(obs)
        else:
            with self._lock:
                self._memory.extend(obs)
                n = len(self._memory)
        if self.corrections is not None:
            self.refresh()
            self.corrections.observe(obs, self.population, self.version)
        return n


def _profile_store(store: ModelStore | None) -> ProfileStore:
    if store is None:
        return ProfileStore()
    path = store.profiles_file
    try:
        return ProfileStore(path)
    except InvalidArgument as e:
        bad = path.with_name(path.name + ".bad")
        _LOG.error("profile store refused (%s); moved to %s, starting empty", e, bad)
        os.replace(path, bad)
        return ProfileStore(path)


def _mae(obs: Sequence[Observation], pa: np.ndarray, pb: np.ndarray) -> float:
    return metrics(obs, pa, pb)["mae"]


def retrain(store: ModelStore, base: Sequence[Observation] | None = None, *,
            base_name: str = "bundled", k: int = 5,
            train_fn: Callable[..., SlowdownPredictor] = train) -> dict[str, Any]:
    """Folds the store's new reported observations into a new model (module docstring).

    ``base``: the data every model is trained on besides the reports (default the bundled
    observations).  Returns a report: ``status`` (``promoted``, ``kept`` or ``unchanged``),
    ``old_version``, ``new_version``, ``new_rows``, ``old_mae`` / ``new_mae`` on the new
    rows, ``model_file`` when promoted.  ``k``: folds over the new rows; ``train_fn``: the
    training recipe (default :func:`elastico.predictor.model.train`).  InvalidArgument when the
    store's CURRENT is refused (fix or remove it first) or a file is bad."""
    base = list(bundled_observations() if base is None else base)
    reported = store.reported()
    current = store.load_current()
    if current is None:
        current = bundled_predictor()
    used = int(current.meta.get("training", {}).get("reported_rows", 0))
    new = reported[used:]
    out: dict[str, Any] = {"old_version": current.version, "new_rows": len(new),
                           "reported_rows": len(reported)}
    if not new:
        return {**out, "status": "unchanged", "new_version": current.version,
                "reason": "no reported observations beyond those the serving model has"}
    pa, pb = current.predict_observations(new)
    old_mae = _mae(new, pa, pb)
    digest = hashlib.sha256("".join(",".join(observation_cells(o)) for o in reported)
                            .encode()).hexdigest()
    # held-out check on a *shuffled* split of the new rows (reports arrive grouped -- by node,
    # by job -- so file order would hold out whole groups at the end); seeded by the data, so
    # the same store gives the same decision
    folds = held_out_folds(len(new), k, digest)
    kk = len(folds)
    cand_a, cand_b = np.full(len(new), np.nan), np.full(len(new), np.nan)
    for test in folds:
        keep = np.setdiff1d(np.arange(len(new)), test)
        m = train_fn(base + reported[:used] + [new[i] for i in keep])
        sa, sb = m.predict_observations([new[i] for i in test])
        cand_a[test] = sa
        cand_b[test] = sb
    new_mae = _mae(new, cand_a, cand_b)
    candidate = train_fn(base + reported, training_info={
        "base": base_name, "base_rows": len(base), "reported_rows": len(reported),
        "reported_sha256": digest})
    candidate.meta["version"] = f"v{store.next_number():04d}-{candidate.version}"
    out.update(old_mae=old_mae, new_mae=new_mae, new_version=candidate.version,
               held_out_rows=len(new), folds=kk)
    if not (np.isfinite(new_mae) and new_mae <= old_mae + 1e-12):
        return {**out, "status": "kept",
                "reason": f"candidate MAE {new_mae:.4f} > serving model's {old_mae:.4f} on "
                          f"the same {len(new)} held-out new row(s)"}
    why = _unusable(candidate, new)
    if why:
        return {**out, "status": "kept", "reason": f"candidate refused: {why}"}
    path = store.install(candidate)
    return {**out, "status": "promoted", "model_file": str(path)}


def held_out_folds(n: int, k: int, seed_hex: str) -> list[np.ndarray]:
    """The held-out folds of :func:`retrain`: rows ``0..n-1`` shuffled by a generator seeded
    with the first 16 hex digits of ``seed_hex`` (the reported data's SHA-256), dealt into
    ``min(k, n)`` (at least 1) folds; each row in exactly one fold."""
    kk = max(1, min(k, n))
    perm = np.random.default_rng(int(seed_hex[:16], 16)).permutation(n)
    return [np.sort(f) for f in np.array_split(perm, kk)]


def _unusable(candidate: SlowdownPredictor, rows: Sequence[Observation]) -> str:
    """Why ``candidate`` must not serve ('' if it may): its file must load back (checksum,
    booster, feature list) and predict finite slowdowns in [1, 50] on ``rows``."""
    try:
        again = SlowdownPredictor.from_json(candidate.to_json(), "candidate")
        sa, sb = again.predict_observations(rows)
    except (InvalidArgument, ValueError) as e:
        return str(e)
    s = np.concatenate([sa, sb])
    if not (np.all(np.isfinite(s)) and np.all((s >= 1.0) & (s <= 50.0))):
        return "predictions outside [1, 50] or not finite"
    return ""


class RefitSchedule:
    """When the service refits (docs/predictor.md, "Online refit"): at least
    ``min_new_rows`` reported rows the serving model has not seen, and at least
    ``min_interval_s`` seconds since the last attempt.  Pure: the caller passes the time
    (``now``, any monotonic seconds).  InvalidArgument for a negative or non-integer rows
    count or a negative interval."""

    def __init__(self, min_new_rows: int = 20, min_interval_s: float = 600.0):
        if not isinstance(min_new_rows, int) or isinstance(min_new_rows, bool) or min_new_rows < 1:
            raise InvalidArgument("min_new_rows", min_new_rows, "an integer >= 1")
        if not (isinstance(min_interval_s, (int, float)) and min_interval_s >= 0
                and np.isfinite(min_interval_s)):
            raise InvalidArgument("min_interval_s", min_interval_s, "finite seconds >= 0")
        self.min_new_rows = min_new_rows
        self.min_interval_s = float(min_interval_s)
        self.last: float | None = None

    def due(self, now: float, new_rows: int) -> bool:
        """Is a refit due at ``now`` with ``new_rows`` unseen rows?"""
        if new_rows < self.min_new_rows:
            return False
        return self.last is None or now - self.last >= self.min_interval_s


def refit_if_due(core: "PredictorCore", schedule: RefitSchedule, now: float,
                 base: Sequence[Observation] | None = None,
                 **kw: Any) -> dict[str, Any] | None:
    """One tick of the online refit: when ``schedule`` says a refit is due (new rows =
    reported rows beyond the serving model's ``training.reported_rows``), runs
    :func:`retrain` on the core's store and makes the core serve the result (a promoted
    model through CURRENT; a kept one changes nothing).  Returns retrain's report, or
    None when not due or the core has no store.  Errors (a refused CURRENT, a bad file)
    are logged and returned as ``{"status": "error", ...}``: the serving model keeps
    serving."""
    store = core.store
    if store is None:
        return None
    try:
        current = store.load_current()
    except InvalidArgument as e:
        _LOG.error("refit skipped: %s", e)
        return {"status": "error", "reason": str(e)}
    used = 0 if current is None else int(current.meta.get("training", {})
                                           .get("reported_rows", 0))
    new_rows = (store._count() if store.reported_file.exists() else 0) - used
    if not schedule.due(now, new_rows):
        return None
    schedule.last = now
    try:
        rep = retrain(store, base, **kw)
    except InvalidArgument as e:
        _LOG.error("refit failed, still serving %s: %s", core.version, e)
        return {"status": "error", "reason": str(e)}
    core.refresh()
    return rep
