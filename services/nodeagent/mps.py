"""The MPS control daemon on one node: start it, stop it, notice it died and restart it, and
send it control commands.

``nvidia-cuda-mps-control`` (NVIDIA MPS docs, "Appendix: Tools and Interface Reference"):
``nvidia-cuda-mps-control -d`` starts the daemon in the background; commands are written to
its standard input (``echo quit | nvidia-cuda-mps-control``); daemon, servers and clients meet
in ``CUDA_MPS_PIPE_DIRECTORY`` and log to ``CUDA_MPS_LOG_DIRECTORY``, which both the daemon
and every client must see (the device plugin mounts the host pipe directory into each MPS
container).  Commands used here:

* ``get_server_list`` -- PIDs of the running MPS servers; it fails when no daemon answers,
  which is how a dead daemon is detected;
* ``set_default_active_thread_percentage <pct>`` -- default SM share of servers started later;
* ``set_active_thread_percentage <server PID> <pct>`` -- share of one running server;
* ``set_default_device_pinned_mem_limit <device> <amount>`` -- default pinned device memory
  limit (``<n>G`` / ``<n>M``) of clients of servers started later; the device is given by
  index (NVIDIA's k8s-device-plugin found the daemon ignoring UUIDs there);
* ``quit`` -- stop the daemon.

Per-client limits: a client reads ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` from its own environment when it connects; the device
plugin's Allocate puts them there.  The daemon's defaults bound clients that set nothing.

A restarted daemon starts with NVIDIA's defaults, not the ones this manager set: the manager
remembers every limit it set (the default active-thread percentage, each device's default
pinned memory limit, each server's active-thread percentage) and :meth:`ensure_running`
applies them again after a restart -- the defaults to the new daemon, a server's percentage
to that server when the new daemon still lists its PID (a server that died with the daemon
is forgotten; its clients reconnect to a new server and bring their own limits from their
environment).

Health (docs/nodeagent.md, "MPS health"): :meth:`MpsManager.check` -- the watch's tick, and
the device plugin's before it hands out an MPS share -- restarts a dead daemon and records an
:class:`MpsStatus` (ready, or not ready with the reason); subscribers (the inventory
publisher, which writes :data:`~elastico.contract.MPS_STATUS` on the Node) hear every change.
:class:`StaticMps` gives the same interface where no daemon is managed: ``--no-mps`` (never
ready: the node offers no MPS shares) and the simulated backend (ready unless a test says).

Every command goes through a :class:`CommandRunner` so tests drive the manager with a fake
(no NVIDIA binary here).  Who calls it: the node agent (``elastico nodeagent``, node plans).
Whom it calls: the runner, and :func:`elastico.nodeagent.backend.pinned_mem_amount` (the memory
amount format).  No gRPC, no Kubernetes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from elastico.errors import ElasticoError, InvalidArgument
from elastico.nodeagent.backend import pinned_mem_amount

__all__ = ["CommandResult", "CommandRunner", "SubprocessRunner", "MpsError", "MpsManager",
           "MpsStatus", "StaticMps", "CONTROL_BINARY"]

CONTROL_BINARY = "nvidia-cuda-mps-control"
#: Longest reason kept in an :class:`MpsStatus` (characters).
MAX_REASON = 1000
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class MpsStatus:
    """Whether MPS clients can be served on this node: ``ready``, else ``reason`` says why
    (the daemon's or the binary's message, or that MPS is disabled)."""

    ready: bool
    reason: str = ""

    def annotation(self) -> str:
        """The value of :data:`~elastico.contract.MPS_STATUS` (compact JSON)."""
        return json.dumps({"ready": self.ready, "reason": self.reason}, separators=(",", ":"))


class _Subscribers:
    """Keeps an :class:`MpsStatus` and tells subscribers when it changes (a failing
    subscriber is logged, never raised to whoever changed the status)."""

    def _init_status(self, status: MpsStatus) -> None:
        self._status = status
        self._subs: list[Callable[[MpsStatus], None]] = []
        self._sub_lock = threading.Lock()

    @property
    def status(self) -> MpsStatus:
        """The state last recorded (no command run)."""
        return self._status

    def subscribe(self, fn: Callable[[MpsStatus], None]) -> None:
        """``fn(status)`` on every change from now on."""
        with self._sub_lock:
            self._subs.append(fn)

    def _record(self, status: MpsStatus) -> MpsStatus:
        with self._sub_lock:
            changed, self._status = status != self._status, status
            subs = list(self._subs) if changed else []
        for fn in subs:
            try:
                fn(status)
            except ElasticoError as e:  # e.g. the API server is down: one line
                _LOG.warning("MPS status subscriber failed: %s", e)
            except Exception:
                _LOG.exception("MPS status subscriber failed")
        return status


class StaticMps(_Subscribers):
    """An MPS status no daemon stands behind: ``--no-mps`` (not ready, for good) and the
    simulated backend (ready; a test may :meth:`set` it down and up).  Thread-safe."""

    def __init__(self, status: MpsStatus):
        self._init_status(status)

    def check(self) -> MpsStatus:
        return self._status

    def set(self, status: MpsStatus) -> None:
        self._record(status)


class MpsError(ElasticoError):
    """The MPS control daemon could not be started or refused a command (the message has the
    command and the daemon's answer)."""


@dataclass(frozen=True)
class CommandResult:
    """Exit status and output of one command."""

    returncode: int
    stdout: str = ""
    stderr: str = ""


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], *, stdin: str | None, env: Mapping[str, str]) -> CommandResult:
        """Runs ``argv`` with ``stdin`` written to its standard input and ``env`` added to the
        environment; returns its exit status and output."""
        ...


class SubprocessRunner:
    """Runs commands with :func:`subprocess.run` (``timeout_s`` each; a missing binary or a
    timeout becomes a failed :class:`CommandResult`, never an exception)."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s

    def run(self, argv: Sequence[str], *, stdin: str | None, env: Mapping[str, str]) -> CommandResult:
        try:
            p = subprocess.run(list(argv), input=stdin, env={**os.environ, **env},
                               capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as e:
            return CommandResult(127, "", f"{argv[0]}: not found ({e})")
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]}: no answer within {self.timeout_s:g} s")
        return CommandResult(p.returncode, p.stdout, p.stderr)


class MpsManager(_Subscribers):
    """One MPS control daemon with pipe directory ``pipe_dir`` and log directory ``log_dir``
    (host paths; created when missing).  ``runner`` runs ``binary``.  Thread-safe.
    :attr:`status` starts not ready ("not started yet") until :meth:`check` finds a daemon."""

    def __init__(self, pipe_dir: str | Path, log_dir: str | Path, *,
                 runner: CommandRunner | None = None, binary: str = CONTROL_BINARY):
        self.pipe_dir, self.log_dir = Path(pipe_dir), Path(log_dir)
        self.runner = runner if runner is not None else SubprocessRunner()
        self.binary = binary
        self.restarts = 0
        self._lock = threading.RLock()
        # the limits set so far (module docstring): re-applied after a restart
        self._default_pct: str | None = None
        self._default_mem: dict[int, str] = {}
        self._server_pct: dict[int, str] = {}
        self._init_status(MpsStatus(False, "MPS control daemon not started yet"))

    @property
    def env(self) -> dict[str, str]:
        """What the daemon and every client need in their environment."""
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
                "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def _run(self, argv: Sequence[str], stdin: str | None = None) -> CommandResult:
        return self.runner.run(argv, stdin=stdin, env=self.env)

    def control(self, command: str) -> str:
        """Sends one control command; returns the daemon's answer.  MpsError when the
        daemon does not answer or refuses."""
        with self._lock:
            r = self._run([self.binary], command + "\n")
        if r.returncode != 0:
            raise MpsError(f"MPS control command {command!r} failed (exit {r.returncode}): "
                           f"{(r.stderr or r.stdout).strip() or 'no output'}")
        return r.stdout.strip()

    def alive(self) -> bool:
        """True when a daemon answers on ``pipe_dir``."""
        try:
            self.control("get_server_list")
        except MpsError:
            return False
        return True

    def start(self) -> None:
        """Starts the daemon (``-d``) unless one answers already; MpsError naming the binary's
        message when it does not come up."""
        with self._lock:
            if self.alive():
                return
            try:
                self.pipe_dir.mkdir(parents=True, exist_ok=True)
                self.log_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise MpsError(f"cannot create the MPS pipe/log directories: {e}") from None
            r = self._run([self.binary, "-d"])
            if r.returncode != 0 or not self.alive():
                raise MpsError(f"{self.binary} -d did not start a daemon on {self.pipe_dir} "
                               f"(exit {r.returncode}: {(r.stderr or r.stdout).strip() or 'no output'})")

    def ensure_running(self) -> bool:
        """Restarts a dead daemon and applies the limits set before again (module docstring);
        True when it had to (counted in ``restarts``).  MpsError when it does not come up or
        refuses a limit it accepted before."""
        with self._lock:
            if self.alive():
                return False
            self.start()
            self.restarts += 1
            self._reapply()
            return True

    def check(self) -> MpsStatus:
        """:meth:`ensure_running`, recorded: ready when a daemon answers (restarted if it had
        died), else not ready with the reason (the MpsError's message).  Subscribers hear a
        change.  Never raises MpsError."""
        try:
            if self.ensure_running():
                _LOG.warning("MPS control daemon on %s was dead; restarted", self.pipe_dir)
            return self._record(MpsStatus(True))
        except MpsError as e:  # (the binary's output, bounded: it goes on the Node)
            return self._record(MpsStatus(False, str(e)[:MAX_REASON]))

    def watch(self, stop: threading.Event, interval_s: float = 10.0,
              log: Callable[[str], None] = print) -> None:
        """:meth:`check` now and every ``interval_s`` seconds until ``stop`` is set, telling
        ``log`` when the daemon goes down or comes back.  A failed restart does not end the
        watch -- whole-GPU and MIG pods need no daemon, and the next tick tries again; while
        it is down the status (on the Node, for the placer) says so."""
        while True:
            before, restarts = self.status, self.restarts
            now = self.check()
            if not now.ready and (before.ready or before != now):
                log(f"MPS control daemon down, restart failed: {now.reason}; "
                    f"retrying in {interval_s:g} s")
            elif now.ready and self.restarts != restarts:
                log("MPS control daemon was dead; restarted")
            elif now.ready and not before.ready:
                log("MPS control daemon ready")
            if stop.wait(interval_s):
                return

    def _reapply(self) -> None:
        if self._default_pct is not None:
            self.control(f"set_default_active_thread_percentage {self._default_pct}")
        for device, amount in sorted(self._default_mem.items()):
            self.control(f"set_default_device_pinned_mem_limit {device} {amount}")
        alive = set(self.server_pids())
        for pid in sorted(self._server_pct):
            if pid in alive:
                self.control(f"set_active_thread_percentage {pid} {self._server_pct[pid]}")
            else:
                del self._server_pct[pid]

    def stop(self) -> None:
        """``quit``; a daemon that is already gone is fine."""
        with self._lock:
            if self.alive():
                self.control("quit")

    def server_pids(self) -> list[int]:
        """PIDs of the running MPS servers (``get_server_list``)."""
        return [int(tok) for tok in self.control("get_server_list").split() if tok.isdigit()]

    def set_default_active_thread_percentage(self, pct: float) -> None:
        value = _pct(pct)
        with self._lock:
            self.control(f"set_default_active_thread_percentage {value}")
            self._default_pct = value

    def set_active_thread_percentage(self, server_pid: int, pct: float) -> None:
        if isinstance(server_pid, bool) or not isinstance(server_pid, int) or server_pid <= 0:
            raise InvalidArgument("server_pid", server_pid, "a PID > 0")
        value = _pct(pct)
        with self._lock:
            self.control(f"set_active_thread_percentage {server_pid} {value}")
            self._server_pct[server_pid] = value

    def set_default_device_pinned_mem_limit(self, device_index: int, gib: float) -> None:
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise InvalidArgument("device_index", device_index, "a GPU index >= 0")
        amount = pinned_mem_amount(gib)
        with self._lock:
            self.control(f"set_default_device_pinned_mem_limit {device_index} {amount}")
            self._default_mem[device_index] = amount


def _pct(pct: float) -> str:
    if not (isinstance(pct, (int, float)) and not isinstance(pct, bool) and math.isfinite(pct)
            and 0 < pct <= 100):
        raise InvalidArgument("active_thread_percentage", pct, "a percentage in (0, 100]")
    return f"{pct:g}"
