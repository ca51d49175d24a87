"""Offline LLM inference jobs on the placer's wire (issue 21, gap 1): ``JobSpec.llm`` and
``Configuration.replica_gpus`` (protos/elastico/v1/placer.proto, common.proto) carry what the
in-process round reads, so ``elastico simulate --llm-jobs demo --via-grpc`` gives the same
decisions as the in-process run; bad values are refused naming the field path, the value and
what is allowed; a message without the new fields (an older sender) means what it meant."""

from __future__ import annotations

import dataclasses

import pytest

from elastico import llm_job as LJ
from elastico import trace
from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Request
from elastico.perf import llm as P
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.rpc import wire
from elastico.placer.rpc.remote import RemotePlacerPolicy, open_channel
from elastico.placer.round import ActiveJob
from elastico.placer.server import build_server as placer_server
from elastico.predictor import AnalyticSlowdown
from elastico.sim import workload
from elastico.sim.clusters import load_cluster
from elastico.sim.llm_workload import load_llm_jobs
from elastico.sim.simulator import simulate
from elastico.v1 import common_pb2

DEMO = load_llm_jobs("demo")


class _Configs:
    """``policy`` that adds the configurations its rounds placed to ``placed``."""

    def __init__(self, policy, placed):
        self._policy, self.placed = policy, placed

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def __call__(self, inp, state):
        result = self._policy(inp, state)
        self.placed |= {d.config for d in result.decisions.values() if d.config is not None}
        return result


def _msg(job: Job, config: Configuration | None = None):
    return wire.job_to_message(ActiveJob(job, config))


def test_every_demo_job_and_an_llm_configuration_survive_the_round_trip():
    for j in DEMO:
        back = wire.job_from_message(_msg(j), "jobs[0]")
        assert back.job == j and back.job.llm == j.llm  # model, work, dtype, reference: all
        assert back.job.llm.reference_tokens_per_s == j.llm.reference_tokens_per_s  # bit for bit
    # a running LLM job's current configuration: 2 replicas of TP 2 on 4 GPUs
    c = Configuration("A100-80GB x4 @1.00 tp2", "A100-80GB", 4, 1.0, 80.0, 16.0, 128.0, 1.7,
                      replica_gpus=2)
    back = wire.config_from_message(wire.config_to_message(c), "c")
    assert back == c and back.replica_gpus == 2 and back.replicas == 2


def test_a_message_without_the_new_fields_means_what_it_meant():
    # a non-LLM configuration's bytes are those of a sender before replica_gpus existed
    c = Configuration("x", "V100M16", 2, 1.0, 16.0, 4.0, 8.0, 1.0)
    m = wire.config_to_message(c)
    assert not m.replica_gpus and m.SerializeToString() == common_pb2.Configuration(
        name="x", gpu_model="V100M16", num_gpus=2, gpu_share=1.0, gpu_mem_gib=16.0, cpu=4.0,
        mem_gib=8.0, throughput=1.0).SerializeToString()
    assert wire.config_from_message(m, "c").replica_gpus == 1
    train = Job("t", JobKind.TRAINING, 0.0, 100.0, Request(1, 1.0, 1.0, 2.0),
                job_type="ResNet-50 (batch size 64)")
    m = _msg(train)
    assert not m.HasField("llm") and wire.job_from_message(m, "jobs[0]").job.llm is None


def _llm_case():
    j = DEMO[3]  # eval-llama2-70b: Llama-2-70B (64 heads, 8 KV heads) at TP 4
    assert j.llm.model.name == "Llama-2-70B" and j.llm.tp == 4
    return j


def _bad(mutate):
    m = _msg(_llm_case())
    mutate(m)
    with pytest.raises(InvalidArgument) as e:
        wire.jobs_from_messages([m])
    return e.value


@pytest.mark.parametrize("mutate, field, value", [
    (lambda m: setattr(m.llm.model, "layers", 0), "jobs[0].llm.model.layers", 0),
    (lambda m: setattr(m.llm.model, "kv_heads", 7), "jobs[0].llm.model.kv_heads", 7),
    (lambda m: setattr(m.llm.model, "params_b", -1.0), "jobs[0].llm.model.params_b", -1.0),
    (lambda m: setattr(m.llm.classes[0], "input_tokens", 0),
     "jobs[0].llm.classes[0].input_tokens", 0),
    (lambda m: m.llm.ClearField("classes"), "jobs[0].llm.classes", 0),
    (lambda m: setattr(m.llm, "engine", "sglang"), "jobs[0].llm.engine", "sglang"),
    (lambda m: setattr(m.llm, "dtype", "fp64"), "jobs[0].llm.dtype", "fp64"),
    (lambda m: setattr(m.llm, "kv_dtype", "int4"), "jobs[0].llm.kv_dtype", "int4"),
    (lambda m: setattr(m.llm, "reference_gpu", "Z100"), "jobs[0].llm.reference_gpu", "Z100"),
    (lambda m: setattr(m.llm, "reference_tokens_per_s", float("nan")),
     "jobs[0].llm.reference_tokens_per_s", None),
    (lambda m: setattr(m.llm, "replicas", 65), "jobs[0].llm.replicas", 65),
    # 64 heads over TP 3: the model refuses the split
    (lambda m: (setattr(m.llm, "tensor_parallel", 3), setattr(m.request, "num_gpus", 3)),
     "jobs[0].llm.tensor_parallel", 3),
    (lambda m: setattr(m, "job_type", "LLM Llama-3-8B"), "jobs[0].job_type", "LLM Llama-3-8B"),
    (lambda m: setattr(m, "kind", common_pb2.JOB_KIND_TRAINING), "jobs[0].kind",
     common_pb2.JOB_KIND_TRAINING),
    (lambda m: setattr(m.request, "num_gpus", 2), "jobs[0].request.num_gpus", 2),
    (lambda m: setattr(m.request, "device_memory", False), "jobs[0].request.device_memory", False),
    (lambda m: setattr(m, "work", m.work * 2), "jobs[0].work", None),
])
def test_bad_llm_fields_are_refused_naming_the_path(mutate, field, value):
    _assert_refused(_bad(mutate), field, value)


def _assert_refused(e, field, value):
    """``e`` names ``field`` (and ``value`` unless None) and says what is allowed."""
    assert e.field == field, str(e)
    if value is not None:
        assert e.value == value, str(e)
    assert e.allowed


@pytest.mark.parametrize("num_gpus, replica_gpus", [(4, 3), (2, 65), (0, 2), (4, -1)])
def test_a_replica_size_that_does_not_divide_the_gpus_is_refused(num_gpus, replica_gpus):
    m = common_pb2.Configuration(name="c", gpu_model="A100-80GB" if num_gpus else "",
                                 num_gpus=num_gpus, gpu_share=1.0 if num_gpus else 0.0,
                                 cpu=1.0, replica_gpus=replica_gpus)
    with pytest.raises(InvalidArgument) as e:
        wire.config_from_message(m, "jobs[0].current")
    assert e.value.field == "jobs[0].current.replica_gpus" and e.value.value == replica_gpus


def test_a_bad_llm_job_in_a_round_is_invalid_argument_over_grpc():
    import grpc

    from elastico.v1 import placer_pb2, placer_pb2_grpc

    nodes = load_cluster("a100h100-mig").nodes(64, trace.read_nodes())
    srv, port = placer_server(slowdown=AnalyticSlowdown())
    srv.start()
    try:
        stub = placer_pb2_grpc.PlacerServiceStub(open_channel(f"127.0.0.1:{port}"))
        req = placer_pb2.RunRoundRequest(now=0.0, nodes=[wire.node_to_message(n) for n in nodes])
        m = req.jobs.add()
        m.CopyFrom(_msg(_llm_case()))
        m.llm.model.kv_heads = 7
        with pytest.raises(grpc.RpcError) as e:
            stub.RunRound(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "jobs[0].llm.model.kv_heads" in e.value.details()
    finally:
        srv.stop(0)


@pytest.mark.parametrize("policy_name", ["elastico", "exclusive"])
def test_the_demo_llm_jobs_through_the_placer_service_equal_the_in_process_run(policy_name):
    """``simulate --cluster a100h100-mig --llm-jobs demo --via-grpc`` in small: 64 GPUs, 16
    trace jobs and the five demo LLM jobs; every record (configuration, tokens, start-up,
    restarts, finish) and every metric but wall-clock round times are equal, and the remote
    run placed an LLM configuration of more than one replica or of TP > 1 (so replica_gpus
    crossed the wire both ways)."""
    tm = ThroughputModel.bundled()
    nodes = load_cluster("a100h100-mig").nodes(64, trace.read_nodes())
    wl = workload.build_workload(trace.read_pods(), nodes, seed=0, load=None, model=tm, jobs=16)
    first = min(j.arrival_s for j in wl.jobs)
    jobs = sorted([*wl.jobs, *load_llm_jobs("demo", offset_s=first)], key=lambda j: j.arrival_s)
    placed: set[Configuration] = set()
    a, b = _in_process_and_through_the_placer(nodes, jobs, tm, policy_name, placed)
    _assert_same_run(a, b)
    llm = [r for r in b.records if r.tokens > 0]
    assert len(llm) == 5 and all(r.status == "finished" for r in llm), [
        (r.job_id, r.status, r.reason) for r in llm]
    assert all(r.tokens_done == pytest.approx(r.tokens) for r in llm)
    assert any(c.replica_gpus > 1 for c in placed), sorted(c.name for c in placed)


def _in_process_and_through_the_placer(nodes, jobs, tm, policy_name, placed=None):
    """(the in-process run, the run through a placer service on loopback) of ``jobs``, both
    on the analytic slowdown model with the simulator's activity rule (the catalog's base
    profile, as ``elastico simulate``); ``placed`` collects the remote run's configurations."""
    slow = AnalyticSlowdown()
    srv, port = placer_server(slowdown=slow)
    srv.start()
    try:
        runs = []
        for via in (False, True):
            env = PolicyEnv(nodes=nodes, throughput=tm, slowdown=slow, restart_s=30.0)
            policy = (RemotePlacerPolicy(open_channel(f"127.0.0.1:{port}"), policy_name, env,
                                         timeout_s=120) if via else make_policy(policy_name, env))
            if via and placed is not None:
                policy = _Configs(policy, placed)
            runs.append(simulate(nodes, [dataclasses.replace(j) for j in jobs], policy,
                                 restart_s=30.0, activity=lambda j, c, cat=policy.catalog: getattr(
                                     cat, "base_profile", cat.profile)(j, c).gpu_activity))
    finally:
        srv.stop(0)
    return runs


def _assert_same_run(a, b):
    """Two simulator runs equal record for record and metric for metric (round times aside)."""
    wall = {"round_ms_p50", "round_ms_p99"}
    assert {k: v for k, v in a.metrics.items() if k not in wall} == {
        k: v for k, v in b.metrics.items() if k not in wall}
    assert [dataclasses.asdict(r) for r in a.records] == [dataclasses.asdict(r) for r in b.records]


def _train_demo():
    train = [j for j in load_llm_jobs("train-demo") if j.llm_train is not None]
    assert train
    return train


def test_every_llm_training_demo_job_survives_the_round_trip():
    for j in _train_demo():
        m = _msg(j)
        assert m.HasField("llm_train") and not m.HasField("llm")
        back = wire.job_from_message(m, "jobs[0]").job
        assert back == j and back.llm_train == j.llm_train  # model, batch, tokens, reference
        assert back.llm_train.reference_tokens_per_s == j.llm_train.reference_tokens_per_s
        assert back.work == j.work and back.kind is JobKind.TRAINING
    # a job naming its ZeRO stage and recomputation keeps them; unset zero stays None
    j = _train_demo()[0]
    named = dataclasses.replace(j, llm_train=dataclasses.replace(j.llm_train, zero=3,
                                                                 recompute="full"))
    m = _msg(named)
    assert m.llm_train.HasField("zero") and m.llm_train.zero == 3
    back = wire.job_from_message(m, "jobs[0]").job.llm_train
    assert (back.zero, back.recompute) == (3, "full")
    assert not _msg(j).llm_train.HasField("zero")


def _bad_train(mutate):
    m = _msg(_train_demo()[0])
    mutate(m)
    with pytest.raises(InvalidArgument) as e:
        wire.jobs_from_messages([m])
    return e.value


@pytest.mark.parametrize("mutate, field, value", [
    (lambda m: setattr(m.llm_train.model, "layers", 0), "jobs[0].llm_train.model.layers", 0),
    (lambda m: setattr(m.llm_train.model, "kv_heads", 7), "jobs[0].llm_train.model.kv_heads", 7),
    (lambda m: setattr(m.llm_train, "seq_len", 0), "jobs[0].llm_train.seq_len", 0),
    (lambda m: setattr(m.llm_train, "global_batch", -4), "jobs[0].llm_train.global_batch", -4),
    (lambda m: setattr(m.llm_train, "tokens", float("inf")), "jobs[0].llm_train.tokens", None),
    (lambda m: setattr(m.llm_train, "mode", "lora"), "jobs[0].llm_train.mode", "lora"),
    (lambda m: setattr(m.llm_train, "precision", "fp8"), "jobs[0].llm_train.precision", "fp8"),
    (lambda m: setattr(m.llm_train, "zero", 4), "jobs[0].llm_train.zero", 4),
    (lambda m: setattr(m.llm_train, "recompute", "some"), "jobs[0].llm_train.recompute", "some"),
    (lambda m: setattr(m.llm_train, "reference_gpu", "V100M16"),
     "jobs[0].llm_train.reference_gpu", "V100M16"),
    (lambda m: setattr(m.llm_train, "reference_tokens_per_s", 0.0),
     "jobs[0].llm_train.reference_tokens_per_s", 0.0),
    (lambda m: setattr(m, "job_type", "LLM train Llama-2-70B"), "jobs[0].job_type",
     "LLM train Llama-2-70B"),
    (lambda m: setattr(m, "kind", common_pb2.JOB_KIND_INFERENCE), "jobs[0].kind",
     common_pb2.JOB_KIND_INFERENCE),
    (lambda m: setattr(m.request, "num_gpus", 9), "jobs[0].request.num_gpus", 9),
    (lambda m: (setattr(m.request, "num_gpus", 1), setattr(m.request, "gpu_share", 0.5)),
     "jobs[0].request.gpu_share", 0.5),
    (lambda m: setattr(m.request, "device_memory", False), "jobs[0].request.device_memory", False),
    (lambda m: setattr(m, "work", m.work * 2), "jobs[0].work", None),
    (lambda m: m.llm.CopyFrom(_msg(DEMO[0]).llm), "jobs[0].llm", None),
])
def test_bad_llm_training_fields_are_refused_naming_the_path(mutate, field, value):
    _assert_refused(_bad_train(mutate), field, value)


@pytest.mark.parametrize("policy_name", ["elastico", "exclusive"])
def test_llm_mix_through_the_placer_service_equals_the_in_process_run(policy_name):
    """``simulate --via-grpc --workload llm-mix --cluster a100h100-mig --gpus 64`` in small:
    the llm-mix workload's first 36 jobs (seed 0, load 0.5) with its LLM training jobs among
    them; every record and every metric but wall-clock round times are equal, and LLM
    training and offline LLM inference jobs both ran (so llm_train crossed the wire)."""
    from elastico.sim.llm_mix import build_llm_mix_workload
    from elastico.sim.workload import default_window

    tm = ThroughputModel.bundled()
    nodes = load_cluster("a100h100-mig").nodes(64, trace.read_nodes())
    wl = build_llm_mix_workload(trace.read_pods(), nodes, seed=0, load=0.5, inference_share=0.4,
                                model=tm, window=default_window(trace.read_pods(), 0.9))
    ordered = sorted(wl.jobs, key=lambda j: (j.arrival_s, j.id))
    train = [j for j in ordered if j.llm_train is not None][:3]
    rest = [j for j in ordered if j.llm_train is None][:33]
    jobs = sorted(train + rest, key=lambda j: (j.arrival_s, j.id))
    assert len(train) == 3 and any(j.llm is not None for j in jobs)
    a, b = _in_process_and_through_the_placer(nodes, jobs, tm, policy_name)
    _assert_same_run(a, b)
    ran = {r.job_id for r in b.records if r.status == "finished" or r.configuration}
    assert ran & {j.id for j in train} and ran & {j.id for j in jobs if j.llm is not None}
