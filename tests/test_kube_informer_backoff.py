"""The informer's retry delays: an API server that keeps failing is asked again after delays
that double from 0.8 s to 30 s (x a jitter factor in [1, 2)), as client-go's reflector does,
instead of once a second for ever; a successful list resets them."""

from __future__ import annotations

import random
import threading

import pytest

from elastico.placer.kube.informer import Informer


class _Stop(threading.Event):
    """A stop event whose waits are recorded instead of slept; set after ``n`` waits."""

    def __init__(self, n: int):
        super().__init__()
        self.n, self.waits = n, []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if len(self.waits) >= self.n:
            self.set()
        return self.is_set()


def _unreachable(**_):
    raise ConnectionError("connection refused")


def test_delays_double_to_the_cap_within_the_jitter():
    stop = _Stop(9)
    inf = Informer("pods", _unreachable, rng=random.Random(7))
    inf.run(stop)
    base = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]  # by hand: 0.8 x 2**k, cap 30
    assert len(stop.waits) == len(base)
    for got, b in zip(stop.waits, base):
        assert b <= got < 2 * b
    # the same seed gives the same jitter: base x (1 + the seeded uniforms)
    rng = random.Random(7)
    assert stop.waits == pytest.approx([b * (1 + rng.random()) for b in base])


def test_a_successful_list_resets_the_delay():
    calls = {"n": 0}

    class _Resp:
        data = b'{"metadata": {"resourceVersion": "5"}, "items": []}'

    def flaky(**kw):
        calls["n"] += 1
        if calls["n"] == 4 and "_preload_content" in kw:  # the 4th list works...
            return _Resp()
        raise ConnectionError("refused")  # ...the watch after it, and everything else, fails

    stop = _Stop(6)
    inf = Informer("nodes", flaky, rng=random.Random(1))
    inf.run(stop)
    # three failed lists (0.8, 1.6, 3.2 x jitter), a good list, then its watch fails: 0.8 again
    firsts = [w / b for w, b in zip(stop.waits, [0.8, 1.6, 3.2, 0.8, 1.6, 3.2])]
    assert all(1.0 <= f < 2.0 for f in firsts), stop.waits
    assert inf.lists == 1 and inf.synced.is_set()
