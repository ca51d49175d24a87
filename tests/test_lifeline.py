"""elastico.runtime.lifeline: a service started by `elastico up` arms PR_SET_PDEATHSIG itself.  Run in
child processes: arming changes the process it runs in.  (tests/test_up.py checks the whole
thing: children of a SIGKILLed `up` stop.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from elastico.errors import InvalidArgument
from elastico.runtime.lifeline import ENV, arm_from_env

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
CHILD = ("import os; from elastico.runtime.lifeline import arm_from_env, ENV; "
         "print(arm_from_env(), ENV in os.environ)")


def _child(parent: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if parent is not None:
        env[ENV] = parent
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=60)


@linux
def test_armed_when_the_named_parent_is_the_parent():
    r = _child(str(os.getpid()))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]  # armed, and not passed on


@linux
def test_a_child_whose_named_parent_is_gone_stops_at_once():
    # the pid named is not its parent (as when `up` died before the child armed): SIGTERM
    r = _child("2")
    assert r.returncode == -15, (r.returncode, r.stdout, r.stderr)


def test_not_armed_without_the_variable():
    r = _child(None)
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("raw", ["", "abc", "1", "-5", "0"])
def test_a_bad_value_names_the_variable(raw):
    if not sys.platform.startswith("linux"):
        pytest.skip("read only on Linux")
    env = {ENV: raw}
    with pytest.raises(InvalidArgument, match=ENV):
        arm_from_env(env)


def test_a_child_service_imports_the_installed_package_from_any_folder(tmp_path):
    # A folder with an `elastico/` of its own, as a source checkout has (`elastico up` from
    # the repository root once started children that imported the checkout's partial
    # package and died with ModuleNotFoundError).
    from elastico.cli.up import child_command

    (tmp_path / "elastico").mkdir()
    (tmp_path / "elastico" / "__init__.py").write_text("raise ImportError('the shadow package')\n")
    r = subprocess.run(child_command(["serve", "--help"]), cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage: elastico serve" in r.stdout
    # (Under an editable install, as in the test venv, the install's import finder comes
    # before sys.path and `python -m elastico` would pass here too; in a regular install --
    # README's first command -- it imported the shadow: checked by hand with such a venv.)
