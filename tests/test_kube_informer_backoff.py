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


def test_only_two_quiet_minutes_reset_the_delay():
    # every list works and every watch fails at once (RBAC allows list, not watch): that is
    # no recovery, the delays keep doubling; two minutes without a failure start them over
    class _Resp:
        data = b'{"metadata": {"resourceVersion": "5"}, "items": []}'

    def lists_only(**kw):
        if "_preload_content" in kw:
            return _Resp()
        raise ConnectionError("watch refused")

    t = {"now": 0.0}
    stop = _Stop(4)
    inf = Informer("nodes", lists_only, rng=random.Random(1), clock=lambda: t["now"])
    inf.run(stop)
    assert [round(w / b, 6) >= 1 and w / b < 2 for w, b in zip(stop.waits, [0.8, 1.6, 3.2, 6.4])] \
        == [True] * 4, stop.waits
    assert inf.lists >= 4
    t["now"] = 119.0  # not yet quiet long enough: the next delay doubles again
    assert 12.8 <= inf.next_delay() < 25.6
    t["now"] = 119.0 + 120.0  # two minutes without a failure: from the first delay
    assert 0.8 <= inf.next_delay() < 1.6
