"""Placement: hand-worked cases (best fit, gang, slowdown bound, MIG, reasons)."""

import pytest

from elastico.errors import InvalidArgument, NotFound
from elastico.model import Configuration, Node
from elastico.placer.placement import ClusterState
from elastico.predictor import AnalyticSlowdown, JobProfile, NoInterference


def node(name="n0", model="V100", gpus=2, gpu_mem=16.0, cpu=32.0, mem=256.0):
    return Node(name, model, gpus, gpu_mem, cpu, mem)


def cfg(share=0.5, gpus=1, model="V100", gmem=4.0, cpu=1.0, mem=4.0, mig=None):
    return Configuration(f"{model}x{gpus}@{share}", model, gpus, share, gmem, cpu, mem, 1.0, mig)


def prof(act=0.5, mem=4.0):
    return JobProfile("t", "training", act, mem)


def snapshot(cs):
    u = cs.gpu_usage()
    return ({k: v.tolist() for k, v in u.items()}, sorted(map(repr, cs.assignments())),
            [cs.node_free(i) for i in range(len(cs.nodes))])


def test_bestfit_picks_the_tighter_gpu_firstfit_the_lower_index():
    for scorer, want in (("bestfit", 1), ("firstfit", 0)):
        cs = ClusterState([node()], slowdown_model=NoInterference())
        assert cs.place("a", cfg(0.5), prof(), 1.0).assignment.gpu_indices == (0,)
        assert cs.place("b", cfg(0.6), prof(), 1.0).assignment.gpu_indices == (1,)  # 0.6 > 0.5 free
        # free: GPU0 0.5, GPU1 0.4; a 0.3 job leaves 0.2 on GPU0 or 0.1 on GPU1
        out = cs.place("c", cfg(0.3), prof(), 1.0, scorer=scorer)
        assert out.assignment.gpu_indices == (want,)
        cs.check_invariants()


def test_bestfit_prefers_fuller_node_for_whole_gpus():
    cs = ClusterState([node("n0", gpus=4), node("n1", gpus=4)], slowdown_model=NoInterference())
    cs.place("x", cfg(1.0), prof(), 1.0, scorer="firstfit")
    cs.release("x")
    cs.place("y", cfg(1.0, gpus=2), prof(), 1.0, scorer="firstfit")  # n0 GPUs 0,1
    out = cs.place("z", cfg(1.0), prof(), 1.0)
    assert (out.assignment.node, out.assignment.gpu_indices) == ("n0", (2,))


def test_gang_of_four_fails_with_three_free_gpus_and_changes_nothing():
    cs = ClusterState([node(gpus=4)], slowdown_model=NoInterference())
    cs.place("busy", cfg(1.0), prof(), 1.0)
    before = snapshot(cs)
    out = cs.place("gang", cfg(1.0, gpus=4), prof(), 1.0)
    assert not out.placed
    assert out.reason == ("no node with 4 GPU(s) of model V100 with share 1 and memory 4 GiB free: "
                          "at most 3 such GPU(s) on one node (n0)")
    assert snapshot(cs) == before and "gang" not in cs
    out = cs.place("gang3", cfg(1.0, gpus=3), prof(), 1.0)
    assert out.assignment.gpu_indices == (1, 2, 3)
    cs.check_invariants()


def test_gang_stays_on_one_node():
    cs = ClusterState([node("n0", gpus=2), node("n1", gpus=2)], slowdown_model=NoInterference())
    cs.place("a", cfg(1.0), prof(), 1.0)
    cs.place("b", cfg(1.0), prof(), 1.0)  # bestfit: fuller node n0
    assert cs.assignment("b").node == "n0"
    out = cs.place("g", cfg(1.0, gpus=3), prof(), 1.0)
    assert not out.placed  # 2 free GPUs on n1 only; never split across nodes


def test_slowdown_bound_rejects_with_computed_number():
    cs = ClusterState([node(gpus=1)], slowdown_model=AnalyticSlowdown(kappa=0.5))
    cs.place("a", cfg(0.5), prof(0.6), 1.2)
    # a would be slowed 1 + 0.5 * 0.5 = 1.25 > 1.2
    before = snapshot(cs)
    out = cs.place("b", cfg(0.5), prof(0.5), 2.0)
    assert not out.placed and out.reason.startswith("slowdown bound")
    assert "job a predicted 1.250 > bound 1.200" in out.reason
    assert snapshot(cs) == before
    # with activity 0.3: a -> 1.15 <= 1.2, b -> 1 + 0.5 * 0.6 = 1.3 <= 2
    out = cs.place("b", cfg(0.5), prof(0.3), 2.0)
    assert out.placed and out.slowdown == pytest.approx(1.3)
    assert cs.predicted_slowdowns() == pytest.approx({"a": 1.15, "b": 1.3})
    # the new job's own bound counts too: c alone on ... no room; release b, c with bound 1.1
    cs.release("b")
    out = cs.place("c", cfg(0.5), prof(0.3), 1.1)  # c: 1 + 0.5*0.6 = 1.3 > 1.1
    assert not out.placed and "the new job predicted 1.300 > bound 1.100" in out.reason


def test_slowdown_check_moves_job_to_another_gpu():
    cs = ClusterState([node(gpus=2)], slowdown_model=AnalyticSlowdown(kappa=1.0))
    cs.place("a", cfg(0.5), prof(0.5), 1.1)
    out = cs.place("b", cfg(0.4), prof(0.5), 1.1)  # tighter GPU0 breaks a's bound -> GPU1
    assert out.assignment.gpu_indices == (1,)
    assert cs.predicted_slowdowns() == {"a": 1.0, "b": 1.0}


def test_memory_cpu_and_model_rules():
    cs = ClusterState([node(gpu_mem=16, cpu=4, mem=32)], slowdown_model=NoInterference())
    assert cs.place("m", cfg(0.3, gmem=12), prof(), 1.0).placed
    out = cs.place("m2", cfg(0.3, gmem=12), prof(), 1.0, scorer="firstfit")
    assert out.assignment.gpu_indices == (1,)  # 12 + 12 > 16 GiB on GPU0
    out = cs.place("c", cfg(0.1, cpu=3), prof(), 1.0)
    assert not out.placed and "cpu 3 cores" in out.reason  # 1 + 1 + 3 > 4 cores
    out = cs.place("t4", cfg(0.1, model="T4"), prof(), 1.0)
    assert out.reason == "no node with GPU model T4"
    assert cs.used_gpus() == pytest.approx(0.6)


def test_mig_rules():
    nodes = [node("a100", model="A100-40GB", gpus=2, gpu_mem=40)]
    cs = ClusterState(nodes, mig_gpus={(0, 1)}, slowdown_model=NoInterference())
    mig3 = cfg(3 / 7, model="A100-40GB", gmem=10, mig="3g.20gb")
    mig4 = cfg(4 / 7, model="A100-40GB", gmem=10, mig="4g.20gb")
    a = cs.place("m1", mig3, prof(), 1.0).assignment
    assert (a.gpu_indices, a.mig_starts, a.gpu_mem_gib) == ((1,), (4,), 20.0)
    assert cs.place("m2", mig4, prof(), 1.0).assignment.mig_starts == (0,)
    assert not cs.place("m3", mig4, prof(), 1.0).placed
    # MPS goes only to the non-MIG GPU
    assert cs.place("p", cfg(0.5, model="A100-40GB"), prof(), 1.0).assignment.gpu_indices == (0,)
    assert cs.predicted_slowdowns() == {"m1": 1.0, "m2": 1.0, "p": 1.0}
    assert cs.used_gpus() == pytest.approx(1.5)
    cs.release("m2")
    assert cs.place("m3", mig4, prof(), 1.0).placed
    cs.check_invariants()
    with pytest.raises(InvalidArgument, match="gpu_share"):
        cs.place("bad", cfg(0.5, model="A100-40GB", mig="3g.20gb"), prof(), 1.0)
    with pytest.raises(InvalidArgument, match="mig_gpus"):
        ClusterState([node()], mig_gpus={(0, 0)})  # V100 has no MIG


def test_whole_gpu_only_on_free_gpus_and_errors():
    cs = ClusterState([node(gpus=1)], slowdown_model=NoInterference())
    cs.place("s", cfg(0.1), prof(), 1.0)
    assert not cs.place("w", cfg(1.0), prof(), 1.0).placed
    with pytest.raises(InvalidArgument, match="job_id"):
        cs.place("s", cfg(0.1), prof(), 1.0)
    with pytest.raises(InvalidArgument, match="scorer"):
        cs.place("x", cfg(0.1), prof(), 1.0, scorer="worstfit")
    with pytest.raises(InvalidArgument, match="slowdown_bound"):
        cs.place("x", cfg(0.1), prof(), 0.9)
    with pytest.raises(NotFound):
        cs.release("nope")
    assert cs.residents(0, 0) == ["s"]
    assert cs.fits(cfg(0.5)) == [(0, (0,))]
    assert cs.fits(cfg(1.0)) == []


def test_place_many_books_exactly_what_one_by_one_placement_books():
    # 2 nodes x 2 V100s.  Requests in order: two whole GPUs, a 3-GPU gang (fits nowhere:
    # 2 GPUs per node), a 4-GPU gang (dominates the failed 3-GPU one: refused without a
    # search), two halves, a whole GPU, one more whole GPU (no room left: fails), and a 2-GPU
    # gang (dominates that failed whole GPU).
    reqs = [("a", cfg(1.0, 1)), ("b", cfg(1.0, 1)), ("g3", cfg(1.0, 3)), ("g4", cfg(1.0, 4)),
            ("h1", cfg(0.5)), ("h2", cfg(0.5)), ("c", cfg(1.0, 1)), ("d", cfg(1.0, 1)),
            ("g2", cfg(1.0, 2))]
    nodes = [node("n0"), node("n1")]
    one = ClusterState(nodes, slowdown_model=NoInterference())
    want = [one.place(j, c, prof(), 2.0).placed for j, c in reqs]
    many = ClusterState(nodes, slowdown_model=NoInterference())
    got = many.place_many([(j, c, prof(), 2.0) for j, c in reqs])
    assert [o.placed for o in got] == want == [True, True, False, False, True, True, True,
                                               False, False]
    assert snapshot(many) == snapshot(one)
    assert "already failed this round" in got[3].reason and "3 x 1" not in got[2].reason
    assert "already failed this round" in got[8].reason
