"""ClusterState.copy (a round decides on a private copy) and rebook (an abandoned move puts
the job back exactly where it was, or changes nothing)."""

import pytest

from elastico.errors import Infeasible
from elastico.model import Configuration, Node
from elastico.placer.placement import ClusterState
from elastico.predictor import JobProfile, NoInterference


def node(name="n0", model="A100-40GB", gpus=2):
    return Node(name, model, gpus, 40.0, 32.0, 256.0)


def cfg(share=0.5, gpus=1, model="A100-40GB", gmem=4.0, mig=None):
    return Configuration(f"{model}x{gpus}@{share}", model, gpus, share, gmem, 1.0, 4.0, 1.0, mig)


PROF = JobProfile("t", "training", 0.3, 4.0)


def usage(cs):
    return ({k: v.tolist() for k, v in cs.gpu_usage().items()}, sorted(map(repr, cs.assignments())),
            [cs.node_free(i) for i in range(len(cs.nodes))])


def test_copy_is_independent_both_ways():
    cs = ClusterState([node()], mig_gpus=[(0, 1)], slowdown_model=NoInterference())
    cs.place("a", cfg(0.5), PROF, 1.5)
    cs.place("m", cfg(3 / 7, mig="3g.20gb", gmem=10.0), PROF, 1.5)
    before = usage(cs)
    cp = cs.copy()
    assert usage(cp) == before
    cp.place("b", cfg(0.5), PROF, 1.5)
    cp.place("m2", cfg(3 / 7, mig="3g.20gb", gmem=10.0), PROF, 1.5)
    cp.release("a")
    assert usage(cs) == before          # the original did not see the copy's changes
    cs.release("m")
    assert "m" in cp                    # nor the copy the original's
    cs.check_invariants()
    cp.check_invariants()


def test_rebook_restores_exactly_after_release():
    cs = ClusterState([node(gpus=4)], mig_gpus=[(0, 3)], slowdown_model=NoInterference())
    cs.place("x", cfg(1.0), PROF, 1.5)
    a = cs.place("a", cfg(0.25, gpus=2), PROF, 1.5).assignment
    m = cs.place("m", cfg(2 / 7, mig="2g.10gb", gmem=8.0), PROF, 1.5).assignment
    before = usage(cs)
    for asg in (a, m):
        cs.release(asg.job_id)
        assert cs.rebook(asg, PROF, 1.5) == asg
    assert usage(cs) == before
    cs.check_invariants()


def test_rebook_fails_whole_when_the_slot_was_taken():
    cs = ClusterState([node(gpus=1)], slowdown_model=NoInterference())
    a = cs.place("a", cfg(0.75), PROF, 1.5).assignment
    cs.release("a")
    cs.place("b", cfg(0.5), PROF, 1.5)   # takes part of what "a" had
    before = usage(cs)
    with pytest.raises(Infeasible):
        cs.rebook(a, PROF, 1.5)
    assert usage(cs) == before and "a" not in cs
    with pytest.raises(Infeasible):      # a booked job cannot be booked twice
        cs.rebook(cs.assignment("b"), PROF, 1.5)
