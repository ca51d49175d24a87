"""The MPS manager against a fake ``nvidia-cuda-mps-control``: the command lines and stdin it
sends, the pipe/log directories in its environment, dead-daemon detection and restart."""

from __future__ import annotations

import threading

import pytest

from elastico.errors import InvalidArgument
from elastico.nodeagent.mps import CommandResult, MpsError, MpsManager, SubprocessRunner


class FakeControl:
    """Plays the control binary: ``-d`` starts a daemon unless ``start_fails``; commands on
    stdin answer only while it runs (like the real one: no daemon, no answer)."""

    def __init__(self):
        self.running = False
        self.start_fails = False
        self.log: list[tuple[tuple[str, ...], str | None, dict]] = []

    def run(self, argv, *, stdin, env):
        self.log.append((tuple(argv), stdin, dict(env)))
        if list(argv[1:]) == ["-d"]:
            if self.start_fails:
                return CommandResult(1, "", "An instance of this daemon is already running")
            self.running = True
            return CommandResult(0)
        if not self.running:
            return CommandResult(1, "", "Cannot find MPS control daemon process")
        cmd = (stdin or "").strip()
        if cmd == "quit":
            self.running = False
            return CommandResult(0)
        if cmd == "get_server_list":
            return CommandResult(0, "4242\n4343\n")
        return CommandResult(0)

    def commands(self):
        return [s.strip() for a, s, _ in self.log if s is not None]


@pytest.fixture
def mps(tmp_path):
    fake = FakeControl()
    return MpsManager(tmp_path / "pipe", tmp_path / "log", runner=fake), fake


def test_start_creates_dirs_and_passes_them_to_the_daemon(mps, tmp_path):
    m, fake = mps
    m.start()
    assert (tmp_path / "pipe").is_dir() and (tmp_path / "log").is_dir()
    start = next(e for a, s, e in fake.log if a[1:] == ("-d",))
    assert start == {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
                     "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log")}
    m.start()  # already answering: no second -d
    assert sum(a[1:] == ("-d",) for a, _, _ in fake.log) == 1


def test_control_commands_follow_nvidias_syntax(mps):
    m, fake = mps
    m.start()
    fake.log.clear()
    m.set_default_active_thread_percentage(30)
    m.set_active_thread_percentage(4242, 12.5)
    m.set_default_device_pinned_mem_limit(1, 16)
    m.set_default_device_pinned_mem_limit(0, 2.5)
    assert fake.commands() == ["set_default_active_thread_percentage 30",
                               "set_active_thread_percentage 4242 12.5",
                               "set_default_device_pinned_mem_limit 1 16G",
                               "set_default_device_pinned_mem_limit 0 2560M"]
    assert m.server_pids() == [4242, 4343]
    for bad in (0, 101, float("nan")):
        with pytest.raises(InvalidArgument, match="active_thread_percentage"):
            m.set_default_active_thread_percentage(bad)
    with pytest.raises(InvalidArgument, match="server_pid"):
        m.set_active_thread_percentage(0, 50)


def test_dead_daemon_is_detected_and_restarted(mps):
    m, fake = mps
    m.start()
    assert m.ensure_running() is False and m.restarts == 0
    fake.running = False  # the daemon died
    assert not m.alive()
    assert m.ensure_running() is True and m.restarts == 1 and m.alive()


def test_watch_restarts_a_dead_daemon_and_survives_a_failed_restart(mps):
    m, fake = mps
    m.start()
    stop = threading.Event()
    ticks = []

    def log(msg):
        ticks.append(msg)
        if len(ticks) == 2:
            stop.set()

    fake.running = False  # the daemon died
    calls = {"n": 0}
    real_run = fake.run

    def run(argv, *, stdin, env):  # the first restart attempt fails, the second works
        if list(argv[1:]) == ["-d"]:
            calls["n"] += 1
            fake.start_fails = calls["n"] == 1
        return real_run(argv, stdin=stdin, env=env)

    fake.run = run
    m.watch(stop, interval_s=0.001, log=log)
    assert "restart failed" in ticks[0] and "already running" in ticks[0]
    assert ticks[1] == "MPS control daemon was dead; restarted"
    assert m.alive() and m.restarts == 1


def test_failures_say_what_the_daemon_said(mps):
    m, fake = mps
    with pytest.raises(MpsError, match="Cannot find MPS control daemon process"):
        m.set_default_active_thread_percentage(50)
    fake.start_fails = True
    with pytest.raises(MpsError, match="did not start a daemon.*already running"):
        m.start()
    m.stop()  # nothing running: fine


def test_subprocess_runner_reports_a_missing_binary_without_raising():
    r = SubprocessRunner().run(["/nonexistent/nvidia-cuda-mps-control", "-d"], stdin=None, env={})
    assert r.returncode == 127 and "not found" in r.stderr
