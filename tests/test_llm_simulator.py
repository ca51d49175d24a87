"""The simulator replays offline LLM inference jobs (issue 21, deliverable 6): token progress,
memory fit, replicas splitting the requests, and the start-up cost of loading the weights.

Hand-worked case: one node of two A100-80GB GPUs, Llama-3-8B in fp16 (16.06 GB of weights).
Start-up at the PCIe 4.0 x4 NVMe ceiling (7.877 GB/s): 16.06 / 7.877 = 2.039 s, paid before the
first token (and at every restart).  The job's 1,000 requests of 512 + 128 tokens take
``T(1000)`` seconds on one whole GPU (the LLM model's whole-batch latency, waves included), so
with ``exclusive`` (requested shape) its JCT is 2.039 + T(1000) and it processes 640,000 tokens;
asking 2 replicas, each replica serves 500 requests: JCT 2.039 + T(500).
"""

from __future__ import annotations

import json

import pytest

from elastico import llm_job as LJ
from elastico import llm_shapes as LS
from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.perf import llm as P
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.sim.llm_workload import llm_jobs_from, load_llm_jobs
from elastico.sim.simulator import simulate

TM = ThroughputModel.bundled()
L8 = P.llm_model("Llama-3-8B")
STARTUP = 8.030e9 * 2 / (16 * 4 * 128 / 130 / 8 * 1e9)   # 2.039 s
WHOLE = P.LlmConfig("A100-80GB", memory_limit_gib=80.0)


def a100s(gpus=2):
    return [Node("n0", "A100-80GB", gpus, 80.0, 64.0, 512.0)]


def llm(jid="llm", n=1000, replicas=1, arrival=0.0, **kw):
    return LJ.llm_job(jid, L8, LJ.requests_work([(512, 128, n)]), reference_gpu="A100-80GB",
                      replicas=replicas, arrival_s=arrival, **kw)


def run(nodes, jobs, policy="exclusive", **kw):
    env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=AnalyticSlowdown())
    pol = make_policy(policy, env)
    return simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                    validate=True, **kw)


def test_startup_then_tokens_at_the_requested_shape():
    res = run(a100s(), [llm()])
    (rec,) = res.records
    t = P.batch_latency_s(L8, WHOLE, 1000, 512, 128)
    assert rec.status == "finished" and rec.first_start_s == 0.0
    assert rec.startup_s == pytest.approx(STARTUP) == pytest.approx(2.039, abs=1e-3)
    assert rec.finish_s == pytest.approx(STARTUP + t)
    assert (rec.tokens, rec.tokens_done) == (640_000, pytest.approx(640_000))
    assert rec.config == "A100-80GB x1 @1.00 tp1"


def test_two_replicas_split_the_requests():
    res = run(a100s(), [llm(replicas=2)])
    (rec,) = res.records
    t_half = P.batch_latency_s(L8, WHOLE, 500, 512, 128)
    assert rec.config == "A100-80GB x2 @1.00 tp1"
    assert rec.finish_s == pytest.approx(STARTUP + t_half)
    # the same tokens, sooner: each replica did half the requests
    assert rec.tokens_done == pytest.approx(640_000)


def test_an_odd_request_count_leaves_the_busiest_replica_the_larger_half():
    res = run(a100s(), [llm(n=1001, replicas=2)])
    (rec,) = res.records
    assert rec.finish_s == pytest.approx(STARTUP + P.batch_latency_s(L8, WHOLE, 501, 512, 128))


def test_a_slower_store_makes_a_longer_start():
    res = run(a100s(), [llm()], llm_load_gbps=1.0)
    (rec,) = res.records
    assert rec.startup_s == pytest.approx(16.06)
    assert rec.finish_s == pytest.approx(16.06 + P.batch_latency_s(L8, WHOLE, 1000, 512, 128))
    with pytest.raises(InvalidArgument) as e:
        run(a100s(), [llm()], llm_load_gbps=-1.0)
    assert e.value.field == "llm_load_gbps"


def test_a_job_waiting_for_the_gpu_starts_and_loads_when_it_is_free():
    # two one-GPU jobs on one GPU: the second starts when the first ends, then loads
    first, second = llm("a"), llm("b", arrival=1.0)
    res = run(a100s(1), [first, second])
    by = {r.job_id: r for r in res.records}
    t = P.batch_latency_s(L8, WHOLE, 1000, 512, 128)
    assert by["a"].finish_s == pytest.approx(STARTUP + t)
    assert by["b"].first_start_s == pytest.approx(STARTUP + t)
    assert by["b"].finish_s == pytest.approx(2 * (STARTUP + t))


@pytest.mark.parametrize("policy", ["elastico", "time-slicing", "gavel", "fgd"])
def test_every_policy_finishes_llm_jobs_beside_training_conserving_tokens(policy):
    train = Job("t", JobKind.TRAINING, 0.0, 500.0, Request(1, 1.0, 1.0, 2.0),
                job_type="ResNet-50 (batch size 64)")
    jobs = [llm("a"), llm("b", n=400, arrival=5.0, gpu_share=0.5), train]
    res = run(a100s(4), jobs, policy)
    for r in res.records:
        assert r.status == "finished", (r.job_id, r.reason)
        assert r.progress == pytest.approx(r.work, rel=1e-9)
    by = {r.job_id: r for r in res.records}
    for jid, n in (("a", 1000), ("b", 400)):
        assert by[jid].tokens_done == pytest.approx(640 * n)
        assert by[jid].startup_s >= STARTUP - 1e-9      # at least one load
    assert by["t"].tokens == 0.0 and by["t"].startup_s == 0.0


@pytest.mark.parametrize("policy, why", [("elastico", "fits no GPU model"),
                                         ("exclusive", "where Llama-2-70B fits")])
def test_an_llm_that_fits_no_gpu_of_the_cluster_is_unplaceable(policy, why):
    # 128.5 GiB of weights: 64.2 GiB per GPU at TP 2, more than vLLM's 0.9 x 40 GiB
    w = LJ.requests_work([(1024, 256, 10)])
    big = LJ.llm_job("big", P.llm_model("Llama-2-70B"), w, reference_gpu="A100-80GB", tp=2)
    res = run([Node("n0", "A100-40GB", 2, 40.0, 64.0, 512.0)], [big], policy)
    (rec,) = res.records
    assert rec.status == "unplaceable" and why in rec.reason, rec.reason


def test_the_demo_jobs_file_loads_and_bad_entries_are_refused_naming_the_path():
    jobs = load_llm_jobs("demo", offset_s=100.0)
    assert len(jobs) == 5 and all(j.llm is not None and j.arrival_s >= 100.0 for j in jobs)
    good = {"id": "x", "model": "Llama-3-8B", "requests": "512:128x10", "reference_gpu": "A100-80GB"}
    for bad, field in (({"tp": 3}, "jobs[0].tp"), ({"tokens": 5}, "jobs[0].requests"),
                       ({"colour": "red"}, "jobs[0].colour"), ({"model": "GPT-9"}, "jobs[0].model"),
                       ({"requests": "5x5"}, "jobs[0].requests"), ({"dtype": "fp4"}, "jobs[0].dtype"),
                       ({"priority": 0}, "jobs[0].priority")):
        with pytest.raises(InvalidArgument) as e:
            llm_jobs_from({"jobs": [{**good, **bad}]})
        assert e.value.field == field, (bad, e.value)
    with pytest.raises(InvalidArgument) as e:
        llm_jobs_from({"jobs": [good, good]})
    assert e.value.field == "jobs[1].id"
    # a model name typed in another case is the catalogue's model (inference and training)
    (j,) = llm_jobs_from({"jobs": [{**good, "model": "llama-3-8b"}]})
    assert j.llm.model.name == "Llama-3-8B"
    (t,) = llm_jobs_from({"jobs": [{"id": "t", "kind": "training", "model": "LLAMA-2-7B",
                                    "tokens": 1e9, "seq_len": 4096, "global_batch": 64,
                                    "reference_gpu": "A100-80GB"}]})
    assert t.llm_train.job.model.name == "Llama-2-7B"
    json.dumps([j.id for j in jobs])


def test_simulate_and_evaluate_replay_the_demo_beside_the_trace(tmp_path, capsys):
    from elastico.cli import main

    out = tmp_path / "m.json"
    assert main(["simulate", "--cluster", "a100h100-mig", "--gpus", "64", "--jobs", "16",
                 "--llm-jobs", "demo", "--policy", "elastico", "--no-progress",
                 "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "LLM inference jobs, elastico" in text.out and "with 5 LLM jobs" in text.err
    run = json.loads(out.read_text())
    assert [x["status"] for x in run["llm_jobs"]] == ["finished"] * 5
    assert all(x["tokens_done"] == pytest.approx(x["tokens"]) for x in run["llm_jobs"])
    # the same jobs through the evaluation runner
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    settings = Settings(jobs_per_gpu=0.25, arrivals="trace", llm_jobs="demo")
    res = run_one(Task(load_cluster("a100h100-mig"), 64, "exclusive", 0, settings))
    assert res.run["kinds"]["inference"] == 5
    assert {x["job"] for x in res.run["llm_jobs"]} == {x["job"] for x in run["llm_jobs"]}
    # a bad jobs file is refused naming the flag and the entry
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"jobs": [{"id": "x", "model": "Llama-3-8B", "tokens": 1e6}]}))
    assert main(["simulate", "--gpus", "64", "--llm-jobs", str(bad), "--no-progress"]) == 2
    assert "jobs[0].reference_gpu" in capsys.readouterr().err
