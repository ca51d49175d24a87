"""Bad input through pod annotations and ``elastico simulate``'s arguments (issue 9 item 1).

Pod annotations (:func:`elastico.placer.kube.annotations.parse_pod_annotations`, then
:func:`build_job`): any dict of strings either parses into a :class:`PodSpec` and a
:class:`Job` whose fields lie in the ranges docs/annotations.md documents, or raises
InvalidArgument whose field is an ``elastico.io/`` key and whose value is that key's raw
text -- never another exception.  Keys outside ``elastico.io/`` are ignored.

``elastico simulate`` (run in-process through :func:`elastico.cli.main`): one bad flag among
small valid ones exits 2 with a message naming the flag and the value, before any work, and
never prints a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.model import JobKind
from elastico.placer.kube import annotations as A
from elastico.perf.throughput import ThroughputModel
from elastico.trace import GPU_MEMORY_GIB

TM = ThroughputModel.bundled()
MODELS, TYPES = TM.gpu_models(), TM.job_types()
CLASSICS = ["0", "-1", "-0.5", "1.5", "50m", "NaN", "nan", "inf", "-inf", "1e400", "1e",
            "99999999999999999999", "0.0", "", " ", "1 ", "0x10", "1_0", "A10", "A100", "a100-40gb",
            "V100", "A100-40GB,", ",", "true", "1/2", "½", "0.5", "1", "2", "64", "65", "1024",
            "1025", "service", "training", "inference", "fixed", "elastic", "3600", "1e9",
            "1000000001", *MODELS, *TYPES[:3]]
values = st.one_of(st.sampled_from(CLASSICS),
                   # ASCII text: non-ASCII digits have their own test below
                   st.text(st.characters(max_codepoint=127), max_size=8),
                   st.integers(-2**70, 2**70).map(str), st.floats().map(repr),
                   st.floats(0, 2).map(lambda f: f"{f:.3f}"))
keys = st.one_of(st.sampled_from(A.USER_KEYS), st.sampled_from(
    ["elastico.io/gpu-fractoin", "elastico.io/", "elastico.io/GPUS", "example.com/gpus",
     "gpu-fraction", "nvidia.com/gpu"]))
_SETTINGS = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


def _parse(ann):
    return A.parse_pod_annotations(ann, gpu_models=MODELS, job_types=TYPES)


def _job(ann):
    """What the loop does with one pod's annotations: parse, then the job of a whole gang
    (``gang-size`` pods of 2 cores and 8 GiB each)."""
    spec = _parse(ann)
    return spec, A.build_job("default/pod/p", spec, spec.gang_size, 2.0, 8.0, 0.0)


def _check_valid(ann: dict, spec: A.PodSpec, job) -> None:
    """The documented ranges (docs/annotations.md), worked out from the raw text here."""
    ours = {k: v for k, v in ann.items() if k.startswith(A.PREFIX)}
    assert set(ours) <= set(A.USER_KEYS)
    assert 1 <= spec.gpus <= A.MAX_GPUS and 1 <= spec.gang_size <= A.MAX_GANG
    assert A.MIN_GPU_FRACTION <= spec.gpu_fraction <= 1 and (spec.gpus == 1
                                                             or spec.gpu_fraction == 1)
    assert math.isfinite(spec.priority) and spec.priority > 0
    assert math.isfinite(spec.slowdown_bound) and spec.slowdown_bound >= 1
    assert 0 < spec.work <= A.MAX_WORK_S
    # GPU memory up to the largest allowed model's (80 GiB of all), not tied to the share
    top = max(GPU_MEMORY_GIB[m] for m in (spec.gpu_models or MODELS))
    assert spec.gpu_memory_gib is None or 0 < spec.gpu_memory_gib <= top + 1e-9
    assert round(spec.gpu_fraction * 100) == pytest.approx(spec.gpu_fraction * 100)  # whole %
    assert spec.gpu_models <= set(MODELS) and spec.job_type in TYPES
    assert spec.shape_family in A.SHAPE_FAMILIES
    for key, field in ((A.GPU_FRACTION, "gpu_fraction"), (A.PRIORITY, "priority"),
                       (A.WORK, "work"), (A.SLOWDOWN_BOUND, "slowdown_bound")):
        if key in ours:
            assert getattr(spec, field) == float(ours[key])
    for key, field in ((A.GPUS, "gpus"), (A.GANG_SIZE, "gang_size")):
        if key in ours:
            assert getattr(spec, field) == int(ours[key])
    if A.GPU_MODEL in ours:
        assert spec.gpu_models == {m.strip() for m in ours[A.GPU_MODEL].split(",")}
    assert job.request.num_gpus == spec.gpus * spec.gang_size
    assert 1 <= job.request.num_gpus <= A.MAX_GPUS
    assert 0 < job.request.gpu_share <= 1


def _check_invalid(ann: dict, e: InvalidArgument) -> None:
    assert e.field.startswith(A.PREFIX), e
    if e.field in ann:
        # build_job names the parsed number (gang-size '065' -> '65'), the parser the raw text
        assert e.value == ann[e.field] or float(e.value) == float(ann[e.field])
    else:                                  # a default made invalid by another key
        assert e.value == A.DEFAULTS.get(e.field) or e.field == A.GPU_FRACTION
    assert e.field in str(e) and repr(e.value) in str(e)


@_SETTINGS
@given(ann=st.dictionaries(keys, values, max_size=5))
def test_any_annotations_parse_into_a_valid_job_or_name_the_key_and_value(ann):
    try:
        spec, job = _job(ann)
    except InvalidArgument as e:
        _check_invalid(ann, e)
        return
    _check_valid(ann, spec, job)


@_SETTINGS
@given(key=st.sampled_from(A.USER_KEYS), value=values)
def test_one_annotation_alone(key, value):
    try:
        spec, job = _job({key: value})
    except InvalidArgument as e:
        _check_invalid({key: value}, e)
        assert e.field == key
        return
    _check_valid({key: value}, spec, job)


@pytest.mark.parametrize("key,value", [
    (A.GPU_FRACTION, "0"), (A.GPU_FRACTION, "-0.5"), (A.GPU_FRACTION, "1.5"),
    (A.GPU_FRACTION, "50m"), (A.GPU_FRACTION, "NaN"), (A.GPU_FRACTION, "inf"),
    (A.GPU_FRACTION, ""), (A.GPU_FRACTION, "1e-9"), (A.GPU_FRACTION, "0.009"), (A.GPUS, "0"), (A.GPUS, "99999999999999999999"), (A.GPUS, "1.0"),
    (A.GANG_SIZE, "1025"), (A.WORK, "1e400"), (A.WORK, "0"), (A.PRIORITY, "0"),
    (A.SLOWDOWN_BOUND, "0.99"), (A.GPU_MEMORY_GIB, "-1"), (A.GPU_MODEL, "A100"),
    (A.GPU_MODEL, "A10 "[:-1] + "0"), (A.GPU_MODEL, ""), (A.GPU_MODEL, "A100-40GB,"),
    (A.WORKLOAD, ""), (A.WORKLOAD, "batch"), (A.SHAPE_FAMILY, ""), (A.JOB_TYPE, ""),
    ("elastico.io/gpu-fractoin", "0.5"), ("elastico.io/", ""),
])
def test_classics_are_refused_naming_key_and_value(key, value):
    with pytest.raises(InvalidArgument) as e:
        _parse({key: value})
    assert (e.value.field, e.value.value) == (key, value)


def test_a10_is_not_a100_and_keys_outside_the_prefix_are_ignored():
    assert _parse({A.GPU_MODEL: "A10"}).gpu_models == {"A10"}
    assert _parse({A.GPU_MODEL: "A100-40GB, A10"}).gpu_models == {"A100-40GB", "A10"}
    plain = _parse({})
    assert _parse({"example.com/gpus": "-1", "gpu-fraction": "NaN", "nvidia.com/gpu": "x"}) == plain
    assert (plain.workload, plain.gpus, plain.gpu_fraction, plain.gang_size) == (
        JobKind.TRAINING, 1, 1.0, 1)


@pytest.mark.parametrize("key", [A.GPUS, A.GANG_SIZE])
def test_an_integer_of_5000_digits_is_invalid_argument(key):
    with pytest.raises(InvalidArgument) as e:
        _parse({key: "9" * 5000})
    assert e.value.field == key


@pytest.mark.parametrize("key,value", [(A.GPUS, "٣"), (A.GPU_FRACTION, "٠.٥"),
                                       (A.WORK, "３６００")])
def test_non_ascii_digits_are_refused(key, value):
    with pytest.raises(InvalidArgument):
        _parse({key: value})


# ---- elastico simulate ------------------------------------------------------------------------
def _simulate(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["simulate", "--no-progress", *argv])
        except SystemExit as e:            # argparse's own refusals
            code = e.code
    return code, err.getvalue()


SMALL = ["--gpus", "8", "--jobs", "10", "--policy", "exclusive", "--slowdown-model", "analytic"]
BAD = {
    "--gpus": st.one_of(st.integers(-2**40, 0).map(str),
                        st.sampled_from(["x", "1.5", "", "nan", "8e0", "0x8", "99999999999"])),
    "--jobs": st.one_of(st.integers(-2**40, -1).map(str), st.sampled_from(["x", "1.5", "", "inf"])),
    "--seed": st.one_of(st.integers(-2**40, -1).map(str), st.sampled_from(["x", "0.5", ""])),
    "--load": st.sampled_from(["0", "-1", "nan", "inf", "-inf", "x", "", "1e400", "50m"]),
    "--restart-s": st.sampled_from(["-1", "nan", "inf", "86401", "x"]),
    "--policy": st.sampled_from(["", "Elastico", "fgd ", "exclusive,elastico", "none"]),
    "--mode": st.sampled_from(["", "Replay", "x"]),
    "--utility": st.sampled_from(["", "JCT", "x"]),
}


def _bad_path(tmp_path, kind):
    return {"folder": str(tmp_path), "missing-folder": str(tmp_path / "no" / "m.json"),
            "empty": "", "dot": "."}[kind]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_simulate_bad_flag_exits_2_naming_flag_and_value(tmp_path, data):
    flag = data.draw(st.sampled_from([*BAD, "--json", "--trace", "--nodes"]))
    if flag in BAD:
        value = data.draw(BAD[flag])
    elif flag == "--json":
        value = _bad_path(tmp_path, data.draw(st.sampled_from(["folder", "missing-folder", "empty", "dot"])))
    else:
        value = data.draw(st.sampled_from([str(tmp_path), str(tmp_path / "none.csv"), ""]))
    argv = [a for i, a in enumerate(SMALL) if flag not in (a, SMALL[i - 1] if i else None)]
    code, err = _simulate([*argv, f"{flag}={value}"])
    assert code == 2, err
    assert "Traceback" not in err
    # the raw text, or the number argparse made of it ('1e400' -> inf)
    shown = {value.strip(), repr(value)}
    with contextlib.suppress(ValueError):
        shown.add(repr(float(value)))
    assert flag in err and any(v in err for v in shown), err


def test_simulate_small_valid_run_writes_its_json(tmp_path):
    out = tmp_path / "m.json"
    code, err = _simulate([*SMALL, "--seed", "3", "--load", "0.5", "--json", str(out)])
    assert code == 0, err
    assert json.loads(out.read_text())["policy"] == "exclusive"
