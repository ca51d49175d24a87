"""The placer's fast paths give what the plain ones give: packed float64 fields, the decoders
that remember the previous round, in-place message filling, and :class:`FailedShapes`
against a scan of the list (bench/rpc.py measures the speed; these check the answers)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.placer.rpc import wire
from elastico.placer.placement import ClusterState, FailedShapes, dominates
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.round import ActiveJob, RoundInput, run_round
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel
from elastico.v1 import placer_pb2, pricing_pb2

JOB_TYPE = "ResNet-18 (batch size 16)"


def test_packed_doubles_are_the_values_extend_would_set_bit_for_bit():
    rng = np.random.default_rng(7)
    demand = rng.random((50, 6)) * 1e3
    demand[0, 0], demand[1, 1], demand[2, 2] = -0.0, 5e-324, 1.7976931348623157e308
    utility = rng.normal(size=50)
    plain = pricing_pb2.PricingInstance(utility=utility.tolist(),
                                        demand=demand.ravel().tolist(), capacity=[1.0, 2.5])
    packed = wire.merge_packed_doubles(pricing_pb2.PricingInstance(), utility=utility,
                                       demand=demand.ravel(), capacity=[1.0, 2.5])
    assert packed.SerializeToString() == plain.SerializeToString()
    back = np.array(packed.demand, dtype=np.float64)
    assert back.tobytes() == demand.ravel().tobytes()  # -0.0 and subnormals included


def test_packed_doubles_refuse_a_field_that_is_not_a_repeated_double():
    with pytest.raises(ValueError, match="offsets"):
        wire.merge_packed_doubles(pricing_pb2.PricingInstance(), offsets=[0.0, 1.0])
    with pytest.raises(ValueError, match="max_iterations"):
        wire.merge_packed_doubles(pricing_pb2.SolveRequest(), max_iterations=[1.0])
    empty = wire.merge_packed_doubles(pricing_pb2.SolveRequest(), initial_prices=())
    assert empty.SerializeToString() == b""


def _job(i: int, share: float = 0.5, done: float = 0.0) -> Job:
    return Job(f"j{i}", JobKind.TRAINING, float(i), 1000.0,
               Request(1, share, 1.0, 2.0, frozenset({"V100M16"})), job_type=JOB_TYPE,
               done=done)


def _msgs(jobs):
    return placer_pb2.RunRoundRequest(jobs=[wire.job_to_message(a) for a in jobs]).jobs


def test_the_job_decoder_gives_what_decoding_afresh_gives_and_still_checks_new_jobs():
    cfg = Configuration("c1", "V100M16", 1, 0.5, 8.0, 1.0, 2.0, 0.9)
    first = [ActiveJob(_job(i)) for i in range(4)] + [ActiveJob(_job(9, done=5.0), cfg)]
    decode = wire.JobDecoder()
    assert decode(_msgs(first)) == wire.jobs_from_messages(_msgs(first)) == first
    # next round: j0 progressed, j4 is new, the rest unchanged (served from the memo)
    second = [ActiveJob(_job(0, done=10.0))] + first[1:] + [ActiveJob(_job(4))]
    again = decode(_msgs(second))
    assert again == second
    assert again[1] is decode(_msgs(second))[1]  # unchanged bytes: the same object
    bad = _msgs(second)
    bad[2].work = -1.0
    with pytest.raises(InvalidArgument, match=r"jobs\[2\]\.work"):
        decode(bad)
    dup = _msgs(second + [second[0]])
    with pytest.raises(InvalidArgument, match=r"jobs\[6\]\.id"):
        decode(dup)  # a remembered job still counts for uniqueness
    assert decode(_msgs(second)) == second  # a refused request left the memo usable


def test_in_place_fills_equal_the_messages_built_from_fields():
    nodes = [Node("n0", "V100M16", 4, 16.0, 32.0, 128.0),
             Node("n1", "V100M16", 4, 16.0, 32.0, 128.0)]
    tm = ThroughputModel.bundled()
    jobs = [ActiveJob(_job(i, share=0.5 if i % 2 else 1.0)) for i in range(10)]
    res = run_round(make_policy("elastico", PolicyEnv(nodes, tm, AnalyticSlowdown())),
                    RoundInput(100.0, nodes, ClusterState(nodes), jobs))
    placed = [d for d in res.decisions.values() if d.assignment is not None]
    assert placed
    index = {n.name: i for i, n in enumerate(nodes)}
    for d in res.decisions.values():
        m = wire.decision_to_message(d, 1.25)
        # independently: the fields set one by one on a fresh message
        want = placer_pb2.JobDecision(job_id=d.job_id, status=d.status.value, reason=d.reason,
                                      changed=d.changed)
        if d.assignment is not None:
            a, c = d.assignment, d.config
            p = want.placement
            p.job_id, p.predicted_slowdown = a.job_id, 1.25
            p.gpu_share, p.gpu_mem_gib = a.gpu_share, a.gpu_mem_gib
            p.node = a.parts[0].node
            p.gpu_indices.extend(a.parts[0].gpu_indices)
            p.parts.add(node=a.parts[0].node, gpu_indices=a.parts[0].gpu_indices,
                        cpu=a.parts[0].cpu, mem_gib=a.parts[0].mem_gib)
            p.configuration.CopyFrom(wire.config_to_message(c))
        assert m == want
        back = wire.decision_from_message(m, nodes, index)
        assert (back.config, back.assignment, back.status) == (d.config, d.assignment, d.status)
    running = [ActiveJob(a.job, res.decisions[a.job.id].config) for a in jobs]
    for a in running:
        assert wire.job_from_message(wire.job_to_message(a), "job") == a


def test_the_decision_decoder_equals_decoding_each_decision():
    nodes = [Node("n0", "V100M16", 2, 16.0, 32.0, 128.0)]
    tm = ThroughputModel.bundled()
    jobs = [ActiveJob(_job(i)) for i in range(3)]
    res = run_round(make_policy("elastico", PolicyEnv(nodes, tm, AnalyticSlowdown())),
                    RoundInput(100.0, nodes, ClusterState(nodes), jobs))
    resp = placer_pb2.RunRoundResponse(
        decisions=[wire.decision_to_message(res.decisions[a.job.id]) for a in jobs])
    decode = wire.DecisionDecoder(nodes, {"n0": 0})
    for _ in range(2):  # the second call answers from the memo
        got = decode(resp.decisions)
        assert got == {m.job_id: wire.decision_from_message(m, nodes, {"n0": 0})
                       for m in resp.decisions}


def _shape(rng: random.Random) -> Configuration:
    model = rng.choice(["V100M16", "A100", None])
    mig = rng.choice([None, "1g.5gb"]) if model == "A100" else None
    return Configuration("s", model, rng.randint(0, 4), rng.choice([0.25, 0.5, 1.0]),
                         rng.choice([4.0, 8.0, 16.0]), rng.choice([1.0, 2.0, 4.0]),
                         rng.choice([2.0, 8.0]), 1.0, mig)


@pytest.mark.parametrize("seed", range(5))
def test_failed_shapes_answer_like_a_scan_of_the_list(seed):
    rng = random.Random(seed)
    failed = FailedShapes()
    plain: list[Configuration] = []
    for _ in range(300):
        c = _shape(rng)
        scan = next((f for f in plain if dominates(c, f)), None)
        assert failed.dominated(c) == (scan is not None)
        assert failed.first_dominated(c) is scan  # the first in failing order, not another
        if rng.random() < 0.4:
            failed.append(c)
            plain.append(c)
    assert list(failed) == plain and len(failed) == len(plain)


def test_node_labels_travel_and_mig_gpus_become_the_count_label_the_policy_reads():
    from elastico.model import MIG_GPUS_LABEL

    zone = ("topology.kubernetes.io/zone", "z1")
    # GPUs 1 and 3 in MIG mode; a stale count label in the message is replaced
    a100 = Node("a0", "A100-40GB", 4, 40.0, 64.0, 512.0, labels=(zone, (MIG_GPUS_LABEL, "4")))
    v100 = Node("v0", "V100", 2, 16.0, 32.0, 256.0, labels=(zone,))
    nodes, mig = wire.nodes_from_messages([wire.node_to_message(a100, [1, 3]),
                                           wire.node_to_message(v100)])
    assert mig == [(0, 1), (0, 3)]
    assert dict(nodes[0].labels) == {"topology.kubernetes.io/zone": "z1", MIG_GPUS_LABEL: "2"}
    assert nodes[1].labels == (zone,)
    # the placer service's policy therefore offers MIG instances on the A100s
    p = make_policy("elastico", PolicyEnv(nodes=nodes, throughput=ThroughputModel.bundled(),
                                          slowdown=AnalyticSlowdown()))
    assert p.catalog.mig_models == frozenset({"A100-40GB"})
