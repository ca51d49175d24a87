"""``stop_on_signals``: SIGTERM/SIGINT stop a service even when they arrive while the main
thread holds the stop event's lock (inside ``stop.wait``, or inside the handler of a first
signal).  A handler that set the event itself then waited on its own thread forever: a
service left running after `elastico up` was SIGKILLed (1 run in 5)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, signal
from elastico.cli.serve import stop_on_signals
with stop_on_signals() as stop:
    with stop._cond:  # the main thread holds the event's lock, as inside stop.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # and a second signal on top of the first
        for _ in range(1000):  # bytecodes, so the handlers run while the lock is held
            pass
    assert stop.wait(10), "stop never set"
print("stopped")
"""


def test_signals_arriving_while_the_stop_lock_is_held_still_stop():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "stopped", (r.returncode, r.stdout, r.stderr)
