"""``elastico pricing solve`` through a local argparse harness (the lead wires
:func:`elastico.cli.pricing.register` into ``elastico/cli/__init__.py``)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from elastico.cli.pricing import register

# The hand-worked instance of test_pricing_solver: OPT = 7 at choice [1, 1].
U = np.array([0.0, 3.0, 5.0, 0.0, 4.0])
D = np.array([[0.0], [1.0], [2.0], [0.0], [1.0]])
OFF = np.array([0, 3, 5])
CAP = np.array([2.0])


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="elastico")
    sub = p.add_subparsers(dest="command", required=True)
    register(sub)
    args = p.parse_args(argv)
    return args.func(args)


def write(tmp_path, name="inst.npz", **override):
    arrays = dict(utility=U, demand=D, offsets=OFF, capacity=CAP)
    arrays.update(override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


def test_json_happy_path(tmp_path, capsys):
    assert run(["pricing", "solve", "--instance", write(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"choice", "prices", "primal_value", "dual_bound", "gap", "iterations", "seconds"} <= set(out)
    assert out["choice"] == [1, 1] and out["primal_value"] == 7.0
    assert out["dual_bound"] == pytest.approx(7.0)
    chosen = OFF[:-1] + np.array(out["choice"])
    assert D[chosen].sum(0) <= CAP + 1e-9


def test_table_and_options(tmp_path, capsys):
    prices = tmp_path / "p.npy"
    np.save(prices, np.array([2.5]))
    rc = run(["pricing", "solve", "--instance", write(tmp_path), "--dtype", "float32",
              "--max-iterations", "5", "--gap-tolerance", "0.01", "--initial-prices", str(prices)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "dual bound" in out and "gap" in out and "choice        [1, 1]" in out


@pytest.mark.parametrize("override,field_and_value", [
    (dict(demand=np.zeros((4, 1))), "demand.shape: (4, 1)"),
    (dict(capacity=np.array([-1.0])), "capacity[0]: -1.0"),
    (dict(utility=np.array([0.0, np.nan, 5.0, 0.0, 4.0])), "utility[1]: nan"),
    (dict(offsets=np.array([0, 3, 4])), "offsets[2]: 4"),
    (dict(offsets=np.array([0, 3, 3, 5])), "offsets[2]: 3"),
    (dict(capacity=None), "--instance: "),
])
def test_bad_instance_exits_2_naming_field_and_value(tmp_path, capsys, override, field_and_value):
    assert run(["pricing", "solve", "--instance", write(tmp_path, **override)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("elastico: error: " + field_and_value), err


def test_a_missing_or_unknown_array_names_it(tmp_path, capsys):
    path = write(tmp_path, capacity=None)
    assert run(["pricing", "solve", "--instance", path]) == 2
    assert "exactly the arrays utility, demand, offsets, capacity; array 'capacity' is missing" \
        in capsys.readouterr().err
    # a misspelt key was ignored before (here the right one is there too: still refused)
    path = write(tmp_path, capacities=np.array([9.0]))
    assert run(["pricing", "solve", "--instance", path]) == 2
    assert "array 'capacities' is not one of them" in capsys.readouterr().err


def test_empty_family_message_names_the_job(tmp_path, capsys):
    assert run(["pricing", "solve", "--instance", write(tmp_path, offsets=np.array([0, 3, 3, 5]))]) == 2
    assert "job 1 would have an empty family" in capsys.readouterr().err


def test_missing_file_and_not_an_npz(tmp_path, capsys):
    missing = str(tmp_path / "nope.npz")
    assert run(["pricing", "solve", "--instance", missing]) == 2
    assert capsys.readouterr().err.startswith(f"elastico: error: --instance: {missing!r} is not allowed (no such file)")
    junk = tmp_path / "junk.npz"
    junk.write_text("not numpy")
    assert run(["pricing", "solve", "--instance", str(junk)]) == 2
    # a text file is not an npz; numpy's own message would talk about pickled data
    err = capsys.readouterr().err
    assert err.startswith(f"elastico: error: --instance: {str(junk)!r} is not allowed (not an .npz archive")
    assert "pickle" not in err
    single = tmp_path / "single.npy"
    np.save(single, U)
    assert run(["pricing", "solve", "--instance", str(single)]) == 2
    assert "must be an .npz archive" in capsys.readouterr().err


def test_bad_initial_prices_and_infeasible(tmp_path, capsys):
    prices = tmp_path / "p.npy"
    np.save(prices, np.array([-1.0]))
    assert run(["pricing", "solve", "--instance", write(tmp_path), "--initial-prices", str(prices)]) == 2
    assert capsys.readouterr().err.startswith("elastico: error: initial_prices[0]: -1.0")


def test_infeasible_instance_exits_3(tmp_path, capsys):
    # No wait configuration and every job needs >= 2 of capacity 3: infeasible, exit 3.
    path = write(tmp_path, "inf.npz", utility=np.array([1.0, 1.0]), demand=np.array([[2.0], [2.0]]),
                 offsets=np.array([0, 1, 2]), capacity=np.array([3.0]))
    assert run(["pricing", "solve", "--instance", path]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("elastico: error: infeasible: capacity[0]: 3.0 is less than 4.0"), captured.err
    assert "no feasible choice exists" in captured.err
    # --json changes nothing: still exit 3, nothing on stdout.
    assert run(["pricing", "solve", "--instance", path, "--json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("elastico: error: infeasible: ")


def test_configuration_too_large_for_capacity_alone_exits_3(tmp_path, capsys):
    # Job 1's only configuration needs 5 > capacity 4 by itself: infeasible (not bad input).
    path = write(tmp_path, "big.npz", utility=np.array([0.0, 1.0, 1.0]),
                 demand=np.array([[0.0], [1.0], [5.0]]), offsets=np.array([0, 2, 3]),
                 capacity=np.array([4.0]))
    assert run(["pricing", "solve", "--instance", path]) == 3
    err = capsys.readouterr().err
    assert err.startswith("elastico: error: infeasible: job 1: "), err


def test_feasible_instance_without_zero_configuration_exits_0(tmp_path, capsys):
    # Two resources, no wait configuration anywhere; capacity [4, 4] admits e.g. (a0, b1, c0).
    u = np.array([3.0, 5.0, 2.0, 4.0, 1.0, 6.0])
    d = np.array([[1.0, 2.0], [3.0, 1.0],    # job 0
                  [2.0, 2.0], [1.0, 1.0],    # job 1
                  [1.0, 1.0], [2.0, 3.0]])   # job 2
    off = np.array([0, 2, 4, 6])
    cap = np.array([4.0, 4.0])
    path = write(tmp_path, "nowait.npz", utility=u, demand=d, offsets=off, capacity=cap)
    assert run(["pricing", "solve", "--instance", path, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    out = json.loads(captured.out)
    choice = np.array(out["choice"])
    assert choice.shape == (3,) and np.all((choice >= 0) & (choice < np.diff(off)))
    chosen = off[:-1] + choice
    totals = d[chosen].sum(0)
    assert np.all(totals <= cap + 1e-9), (totals, cap)
    np.testing.assert_allclose(out["totals"], totals)
    assert out["primal_value"] == pytest.approx(float(u[chosen].sum()))
    assert out["primal_value"] <= out["dual_bound"] + 1e-9


def test_damaged_zip_is_not_a_readable_numpy_file(tmp_path, capsys):
    cut = tmp_path / "cut.npz"
    cut.write_bytes(open(write(tmp_path), "rb").read()[:40])
    assert run(["pricing", "solve", "--instance", str(cut)]) == 2
    assert capsys.readouterr().err.startswith(
        f"elastico: error: --instance: {str(cut)!r} is not allowed (not a readable numpy file")


def test_directory_is_named_as_such(tmp_path, capsys):
    assert run(["pricing", "solve", "--instance", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"elastico: error: --instance: {str(tmp_path)!r} is not allowed (is a directory)")
    assert run(["pricing", "solve", "--instance", write(tmp_path),
                "--initial-prices", str(tmp_path)]) == 2
    assert f"--initial-prices: {str(tmp_path)!r}" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["utility", "capacity"])
def test_object_array_exits_2_naming_array_and_dtype(tmp_path, capsys, key):
    arrays = dict(utility=U, demand=D, offsets=OFF, capacity=CAP)
    arrays[key] = np.array([1.0, "x", None], dtype=object)
    path = tmp_path / "obj.npz"
    np.savez(path, **arrays)  # numpy pickles object arrays when saving
    assert run(["pricing", "solve", "--instance", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elastico: error: instance.{key}.dtype: 'object' is not allowed"), err


def test_object_initial_prices_and_wrong_kind(tmp_path, capsys):
    obj = tmp_path / "p.npy"
    np.save(obj, np.array([None], dtype=object))
    assert run(["pricing", "solve", "--instance", write(tmp_path), "--initial-prices", str(obj)]) == 2
    assert capsys.readouterr().err.startswith("elastico: error: initial_prices.dtype: 'object'")
    text = tmp_path / "p.txt"
    text.write_text("1.0\n")
    assert run(["pricing", "solve", "--instance", write(tmp_path), "--initial-prices", str(text)]) == 2
    assert "not an .npy array" in capsys.readouterr().err
    assert run(["pricing", "solve", "--instance", write(tmp_path),
                "--initial-prices", write(tmp_path, "p.npz")]) == 2
    assert "must be an .npy array" in capsys.readouterr().err


def test_max_iterations_is_bounded(tmp_path, capsys):
    assert run(["pricing", "solve", "--instance", write(tmp_path),
                "--max-iterations", "99999999999999"]) == 2
    assert capsys.readouterr().err.startswith(
        "elastico: error: --max-iterations: 99999999999999 is not allowed (must be an integer in 1..1000000)")
    assert run(["pricing", "solve", "--instance", write(tmp_path), "--max-iterations", "1000000"]) == 0


@pytest.mark.parametrize("flag, value", [("--gap-tolerance", "nan"), ("--gap-tolerance", "-1"),
                                         ("--nthreads", "0"), ("--max-iterations", "0")])
def test_bad_options_name_the_flag_typed(tmp_path, capsys, flag, value):
    assert run(["pricing", "solve", "--instance", write(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elastico: error: {flag}: "), err
    assert "_" not in err.split(":")[1]  # not the solver's parameter name


def test_solve_help_describes_every_option(capsys):
    with pytest.raises(SystemExit):
        run(["pricing", "solve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for flag, text in [("--max-iterations", "(default: 200)"), ("--gap-tolerance", "(default: 0.001)"),
                       ("--dtype", "(default: float64)"), ("--nthreads", "(default: 1)"),
                       ("--initial-prices", "(default: none: a cold start"),
                       ("--json", "(default: table)"), ("--instance", "(required)")]:
        assert flag in out and text in out, (flag, text)
    assert "1..1000000" in out and "GPUs, GiB, cores" in out and "fraction" in out
    assert "exit status: 0 ok" in out and "2 bad input" in out and "3 infeasible" in out
    assert "zero-demand configuration" in out


def test_pricing_without_subcommand_says_command(capsys):
    with pytest.raises(SystemExit) as e:
        run(["pricing"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "required: COMMAND" in err and "pricing_command" not in err


def test_subnormal_capacity_solves_without_a_warning(tmp_path, capsys):
    # the hand-worked instance in units of 2**-1040 (subnormal, exact): capacity 3 fits the
    # choice [2, 1] (job-local; demand 2 + 1, utility 5 + 4 = 9), the optimum; 1 / capacity
    # would overflow
    import warnings

    unit = 2.0 ** -1040
    path = write(tmp_path, demand=D * unit, capacity=np.array([3.0]) * unit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in divide" fails here
        assert run(["pricing", "solve", "--instance", path, "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert cap.err == ""
    assert out["choice"] == [2, 1] and out["primal_value"] == 9.0
