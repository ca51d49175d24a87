"""bench/mig_pools.py refuses bad input with an argparse error (exit 2, naming the flag or
field), not a traceback, before any replay."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_mig_pools", Path(__file__).resolve().parents[1] / "bench" / "mig_pools.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args, needle", [
    (["--seeds", "0,x"], "--seeds: '0,x' must be comma-separated integers"),
    (["--seeds", "-1"], "--seeds: '-1' must be integers >= 0"),
    (["--cluster", "nosuch"], "cluster: 'nosuch' is not allowed"),
    (["--gpus", "7", "--cluster", "a100-mig"], "gpus: 7 is not allowed"),
])
def test_bad_input_is_an_argparse_error(args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        _bench().main(args)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
