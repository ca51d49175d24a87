"""A child process that dies with its parent: Linux's ``PR_SET_PDEATHSIG``, armed by the child.

Who calls it: ``elastico serve`` at start-up (:mod:`elastico.cli.serve`), when
:mod:`elastico.cli.up` started it with :data:`ENV` set to its own process id.

Why the child arms it and not a ``preexec_fn`` in the parent: ``up`` (and the tests, and
``simulate --via-grpc``) start services from a process that already runs gRPC threads.
Python code run between ``fork`` and ``exec`` in such a process can crash the child (gRPC's
fork handlers are skipped while other threads are inside gRPC; a child once aborted with
SIGABRT while starting); the subprocess module's own fork/exec path runs no Python code.
"""

from __future__ import annotations

import os
import signal
import sys

from elastico.errors import InvalidArgument

__all__ = ["ENV", "arm", "arm_from_env"]

#: The parent's process id, set by ``elastico up`` in each child's environment.
ENV = "ELASTICO_DIE_WITH_PARENT"

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def arm_from_env(environ=os.environ) -> bool:
    """When ``environ`` names a parent in :data:`ENV` (removed from ``environ``) and this is
    Linux: ask the kernel for
    SIGTERM when the parent thread that started this process ends (even by SIGKILL), and
    send it to ourselves at once if that parent is already gone (it died before the call,
    and nobody would signal).  Returns whether it was armed.  Raises InvalidArgument when
    :data:`ENV` is set but is not a process id (an integer > 1)."""
    # popped: a process this one starts has another parent and must not inherit the pid
    raw = environ.pop(ENV, None)
    if raw is None or not sys.platform.startswith("linux"):
        return False
    try:
        parent = int(raw)
    except ValueError:
        parent = 0
    if parent <= 1:
        raise InvalidArgument(ENV, raw, "a parent process id (an integer > 1), set by elastico up")
    return arm(parent)


def arm(parent: int) -> bool:
    """In a child of process ``parent``: SIGTERM when the parent thread that started this
    process ends (even by SIGKILL), at once if ``parent`` is already gone.  Linux only
    (returns False elsewhere, doing nothing).  Also used by ``elastico evaluate``'s worker
    processes (:mod:`elastico.sim.evaluate`), so that none outlives a killed run."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
    return True
