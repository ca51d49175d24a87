"""FGD's fragmentation measure: typical pods and node fragmentation, hand-worked, plus a
brute-force check of the vectorised form against FGD's per-pod definition (frag.go)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico.errors import InvalidArgument
from elastico.placer.fragmentation import FragmentationModel, typical_pods


def test_typical_pods_keep_the_most_popular_until_the_threshold():
    # shapes: A x5, B x3, C x1, D x1 (P = 10).  threshold 0.8 -> need 8 pods: A (5) + B (3)
    cpu = [1000] * 5 + [2000] * 3 + [500, 4000]
    gpu = [500] * 5 + [1000] * 3 + [0, 250]
    num = [1] * 5 + [1] * 3 + [0, 1]
    tp = typical_pods(cpu, gpu, num, threshold=0.8)
    assert tp.cpu_milli.tolist() == [1000, 2000]
    assert tp.freq.tolist() == pytest.approx([5 / 8, 3 / 8])
    # threshold 0.9 -> 9 pods: A, B, then one of the singletons: ties go to the larger
    # shape first (FGD sorts by count, then by reversed PodResource.Less: cpu first) -> D
    tp = typical_pods(cpu, gpu, num, threshold=0.9)
    assert tp.cpu_milli.tolist() == [1000, 2000, 4000]
    assert tp.freq.tolist() == pytest.approx([5 / 9, 3 / 9, 1 / 9])


def test_typical_pods_reject_bad_input():
    with pytest.raises(InvalidArgument, match="gpu_milli"):
        typical_pods([1000], [1500], [1])
    with pytest.raises(InvalidArgument, match="threshold"):
        typical_pods([1000], [500], [1], threshold=0.0)
    with pytest.raises(InvalidArgument, match="pods"):
        typical_pods([], [], [])


def _model(shapes, models=("V100",)):
    cpu, gpu, num, types, w = zip(*shapes)
    tp = typical_pods(np.repeat(cpu, w), np.repeat(gpu, w), np.repeat(num, w),
                      [t for t, k in zip(types, w) for _ in range(k)], threshold=1.0)
    return FragmentationModel(tp, models)


def test_node_fragmentation_hand_worked():
    # typical pods: 50 % "0.5 GPU, 4 cores", 25 % "1 whole GPU, 8 cores", 25 % CPU-only
    fm = _model([(4000, 500, 1, frozenset(), 2), (8000, 1000, 1, frozenset(), 1),
                 (1000, 0, 0, frozenset(), 1)])
    # node: GPUs with 300, 1000, 600 milli free; 16 cores free.  L = 1900.
    #  0.5-GPU pod fits (1000 and 600 >= 500): F = 300 (the GPU too full for it)
    #  whole-GPU pod fits (the 1000): F = 300 + 600 = 900
    #  CPU-only pod: all free GPU is fragment for it: F = 1900
    #  F = 0.5*300 + 0.25*900 + 0.25*1900 = 150 + 225 + 475 = 850
    f = fm.fragmentation(np.array([16000]), np.array([[300, 1000, 600]]), np.array([0]))
    assert f.tolist() == pytest.approx([850.0])
    # only 6 cores free: the whole-GPU pod (8 cores) no longer fits -> its F = L = 1900
    #  F = 150 + 0.25*1900 + 475 = 1100
    f = fm.fragmentation(np.array([6000]), np.array([[300, 1000, 600]]), np.array([0]))
    assert f.tolist() == pytest.approx([1100.0])


def test_gpu_model_restriction_makes_the_whole_node_a_fragment():
    fm = _model([(1000, 500, 1, frozenset({"T4"}), 1)], models=("V100", "T4"))
    f = fm.fragmentation(np.array([8000, 8000]), np.array([[1000, 200], [1000, 200]]), np.array([0, 1]))
    # V100 node: no access -> F = L = 1200; T4 node: fits -> F = 200
    assert f.tolist() == pytest.approx([1200.0, 200.0])


def _brute(fm, cpu, left, model):
    """FGD's NodeGpuShareFragAmount, literally, for one node."""
    tp = fm.typical
    L = sum(left)
    out = 0.0
    for t in range(len(tp)):
        p = tp.freq[t]
        if tp.num_gpus[t] == 0:
            out += p * L
            continue
        types = tp.gpu_types[t]
        if types and fm.models[model] not in types:
            out += p * L
            continue
        enough = sum(1 for x in left if x >= tp.gpu_milli[t]) >= tp.num_gpus[t]
        if enough and cpu >= tp.cpu_milli[t]:
            out += p * sum(x for x in left if x < tp.gpu_milli[t])
        else:
            out += p * L
    return out


shape = st.tuples(st.sampled_from([0, 2000, 4000, 8000]), st.sampled_from([100, 250, 500, 800, 1000]),
                  st.sampled_from([0, 1, 1, 2]), st.sampled_from([frozenset(), frozenset({"T4"})]),
                  st.integers(1, 4))


@settings(max_examples=60, deadline=None)
@given(st.lists(shape, min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 16000), st.lists(st.integers(0, 1000), min_size=1, max_size=4),
                          st.integers(0, 1)), min_size=1, max_size=5))
def test_vectorised_form_equals_fgds_definition(shapes, nodes):
    shapes = [(c, g if n else 0, n, t if n else frozenset(), w) for c, g, n, t, w in shapes]
    fm = _model(shapes, models=("V100", "T4"))
    G = max(len(x[1]) for x in nodes)
    left = np.array([x[1] + [0] * (G - len(x[1])) for x in nodes])
    cpu = np.array([x[0] for x in nodes])
    model = np.array([x[2] for x in nodes])
    got = fm.fragmentation(cpu, left, model)
    want = [_brute(fm, x[0], x[1], x[2]) for x in nodes]
    assert got.tolist() == pytest.approx(want)
    # shift: one GPU per row changes -> same as recomputing
    cnt, S = fm.counts(left)
    new = np.maximum(left[:, 0] - 300, 0)
    c2, s2 = fm.shift(cnt, S, left[:, 0], new)
    left2 = left.copy()
    left2[:, 0] = new
    c3, s3 = fm.counts(left2)
    assert (c2 == c3).all() and (s2 == s3).all()
