"""Placement stays fast on a trace-sized cluster (750 nodes x 8 GPUs = 6000 GPUs)."""

import time

from elastico.model import Configuration, Node
from elastico.placer.placement import ClusterState
from elastico.predictor import JobProfile


def test_six_thousand_gpus_hundreds_of_jobs():
    nodes = [Node(f"n{i}", "V100" if i % 3 else "T4", 8, 16.0, 96.0, 512.0) for i in range(750)]
    cs = ClusterState(nodes)
    shares = [0.25, 0.5, 1.0, 0.3]
    t0 = time.perf_counter()
    placed = 0
    for j in range(600):
        s = shares[j % 4]
        k = 4 if j % 25 == 0 else 1
        c = Configuration("c", "V100", k, 1.0 if k > 1 else s, 4.0, 2.0, 8.0, 1.0)
        placed += cs.place(f"j{j}", c, JobProfile("t", "training", 0.3 * s, 4.0), 1.6).placed
    dt = time.perf_counter() - t0
    assert placed == 600
    cs.check_invariants()
    assert dt < 8.0, f"600 placements took {dt:.2f} s"
