"""FGD's inflation benchmark (elastico.placer.inflation) on hand-worked tiny clusters: the
workload inflation, FGD's binning, and each policy's choice where it can be worked out."""

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.placer.inflation import (InflationNodes, InflationPods, allocation_columns, inflate,
                                       run_inflation)


def pods(*rows):
    """rows: (cpu_milli, num_gpus, gpu_milli, types)."""
    return InflationPods(
        name=tuple(f"p{i:02d}" for i in range(len(rows))),
        cpu_milli=np.array([r[0] for r in rows]), mem_mib=np.array([1024] * len(rows)),
        num_gpus=np.array([r[1] for r in rows]), gpu_milli=np.array([r[2] for r in rows]),
        gpu_types=tuple(frozenset(r[3]) for r in rows))


def nodes(*rows):
    """rows: (cpu_milli, gpus, model)."""
    models = tuple(dict.fromkeys(r[2] for r in rows))
    return InflationNodes(cpu_milli=np.array([r[0] for r in rows]), mem_mib=np.array([65536] * len(rows)),
                          num_gpus=np.array([r[1] for r in rows]),
                          model=np.array([models.index(r[2]) for r in rows]), models=models)


def test_inflate_shuffles_then_appends_copies_up_to_the_target():
    w = pods(*[(1000, 1, 500, ())] * 4)          # 2 GPUs of requests
    order = inflate(w, capacity_milli=2000, seed=1, ratio=1.3)  # target 2600 milli
    assert sorted(order[:4].tolist()) == [0, 1, 2, 3]
    # copies of 500 milli while total + 500 <= 2600: 2000 -> 2500, then 3000 > 2600 stops
    assert order.size == 5
    assert (w.total_milli[order].sum()) == 2500


def test_inflate_drops_pods_when_the_workload_is_above_the_target():
    w = pods(*[(1000, 2, 1000, ())] * 4)         # 8 GPUs of requests, target 1.3 x 2 = 2.6
    order = inflate(w, capacity_milli=2000, seed=3, ratio=1.3)
    assert order.size == 1 and w.total_milli[order].sum() == 2000
    with pytest.raises(InvalidArgument, match="capacity"):
        inflate(w, 0, seed=1)


def test_binning_is_fgds_mean_of_rounded_allocation_per_arrived_percent():
    # capacity 2 GPUs.  arrived 25/50/100/130 %, allocated 25/50/75/75 %
    cols = allocation_columns([500, 1000, 2000, 2600], [500, 1000, 1500, 1500], 2000, (100, 130, 99, 60))
    assert cols[100] == 75.0 and cols[130] == 75.0
    assert cols[99] == 75.0          # empty bin: the events within +-1 (98..100)
    assert np.isnan(cols[60])        # nothing within 59..61


# Two single-GPU nodes: A is a T4, B a V100.  p0 (T4 only, 400 milli) must go to A.
# p1 (any model, 500 milli):
#  * bestfit (free - request): A scores int((1 - (6000/128000*0.5 + 100/8000*0.5)) * 100) = 97,
#    B int((1 - (7000/128000*0.5 + 500/8000*0.5)) * 100) = 94 -> A (100 milli left on A);
#  * packing: A shares a used GPU: max(100 - (600*100//1000)//10, 50) = 94; B is empty:
#    max(33 - 1, 1) = 32 -> A;
#  * fgd: typical pods = the three shapes, 1/3 each.  A before: all fit, F = 0; after (100
#    left) nothing fits, F = 100 -> Delta = -100 -> int(sigmoid(-0.1) * 100) = 47.  B before:
#    the two T4 pods have no access, F = 2/3 x 1000; after (500 left): F = 2/3 x 500 ->
#    Delta = +333 -> int(sigmoid(0.333) * 100) = 58 -> B;
#  * elastico: cost A = +0.1 GPU, B = -0.333 + 0.003 -> B.
# p2 (T4 only, 600 milli) then fits only where A still has 600 free.
TINY_NODES = [(8000, 1, "T4"), (8000, 1, "V100M16")]
TINY_PODS = [(1000, 1, 400, ("T4",)), (1000, 1, 500, ()), (1000, 1, 600, ("T4",))]


@pytest.mark.parametrize("policy,placed", [("bestfit", [True, True, False]),
                                           ("packing", [True, True, False]),
                                           ("fgd", [True, True, True]),
                                           ("elastico", [True, True, True])])
def test_each_policy_on_a_hand_worked_cluster(policy, placed):
    res = run_inflation(nodes(*TINY_NODES), pods(*TINY_PODS), np.array([0, 1, 2]), policy, seed=0)
    assert res.placed.tolist() == placed
    assert res.arrived_milli.tolist() == [400, 900, 1500]
    assert res.used_milli[-1] == 400 * placed[0] + 500 * placed[1] + 600 * placed[2]


def test_multi_gpu_pods_take_the_lowest_free_gpus_and_fail_when_none_fit():
    res = run_inflation(nodes((16000, 4, "G2")), pods((1000, 2, 1000, ()), (1000, 3, 1000, ()),
                                                      (1000, 2, 1000, ())),
                        np.array([0, 1, 2]), "bestfit", seed=0)
    assert res.placed.tolist() == [True, False, True]
    assert res.used_milli.tolist() == [2000, 2000, 4000]


def test_random_is_deterministic_by_seed_and_never_overcommits():
    n = nodes(*[(8000, 2, "T4")] * 6)
    w = pods(*[(1500, 1, g, ()) for g in (300, 700, 1000, 250, 500)] * 6)
    order = inflate(w, n.capacity_milli, seed=5)
    a = run_inflation(n, w, order, "random", seed=5)
    b = run_inflation(n, w, order, "random", seed=5)
    assert (a.used_milli == b.used_milli).all() and (a.placed == b.placed).all()
    assert a.used_milli.max() <= n.capacity_milli
    # CPU: 8 cores per node, 1.5 per pod -> at most 5 pods per node
    assert a.placed.sum() <= 5 * 6


def test_unknown_policy_is_refused():
    with pytest.raises(InvalidArgument, match="policy"):
        run_inflation(nodes(*TINY_NODES), pods(*TINY_PODS), np.array([0]), "worstfit", seed=0)
