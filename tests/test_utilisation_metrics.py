"""The simulator's utilisation as DCGM defines it (elastico.sim.utilisation, issue 22 deliverable
5): SM activity and GPU utilisation per GPU and cluster-wide, worked by hand from the jobs'
activity profiles; co-located jobs combined under MPS, time-slicing and MIG never above 100 %;
a restarting job reads 0; the existing metrics do not move."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.perf import activity as act
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import METRIC_KEYS, simulate
from elastico.sim.utilisation import METRIC_KEYS as DCGM_KEYS, UtilisationMeter

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def node(name="n0", gpus=1, model="V100M16"):
    return Node(name, model, gpus, 16.0, 32.0, 128.0)


def job(i, arrival, work, *, kind=JobKind.TRAINING, gpus=1, share=1.0):
    return Job(f"j{i}", kind, arrival, work, Request(gpus, share, 1.0, 2.0), job_type=JT,
               slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


def run(nodes, jobs, policy="exclusive", meter=None, **kw):
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy(policy, env)
    return simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                    meter=meter, **kw)


def test_one_job_alone_reads_its_profile_by_hand():
    # one ResNet-50 job on one of two V100s, running 0..100 s at the reference speed; window
    # [0, 100]: its GPU reads the job's profile, the other GPU 0, the cluster their mean
    res = run([node(gpus=2)], [job(0, 0.0, 100.0)], window=(0.0, 100.0))
    p = act.draw_profile("j0", seed=0, gpus=1, nodes=1, gpu_model="V100M16")
    assert p.sync == 0.0  # one GPU: no all-reduce
    # ResNet-50's roofline compute share is 0 (Sia imagenet's per-sample fit): bandwidth-bound
    # while computing, so DRAM active 0.9 of the cycles then (SOLO_BW_EFFICIENCY)
    m = res.metrics
    assert m["dcgm_sm_active"] == pytest.approx(p.level * p.kernel / 2)
    assert m["dcgm_gpu_util"] == pytest.approx(p.kernel / 2)
    assert m["dcgm_dram_active"] == pytest.approx(0.9 * p.kernel / 2)
    per = res.gpu_activity
    assert set(per) == {"n0/0", "n0/1"}
    used = max(per.values(), key=lambda v: v["gpu_util"])
    assert used["sm_active"] == pytest.approx(p.sm_active())
    assert used["gpu_util"] == pytest.approx(p.gpu_util())
    assert sorted(v["gpu_util"] for v in per.values())[0] == 0.0
    # the cluster-wide metric is the mean of the per-GPU ones
    assert m["dcgm_sm_active"] == pytest.approx(sum(v["sm_active"] for v in per.values()) / 2)
    # the existing metrics are still there, unchanged in meaning
    assert set(METRIC_KEYS) <= set(m) and set(DCGM_KEYS) <= set(m)


def test_a_data_parallel_gang_loses_its_all_reduce_share_on_every_gpu():
    res = run([node(gpus=2)], [job(0, 0.0, 100.0, gpus=2)], window=(0.0, 50.0))
    p = act.draw_profile("j0", seed=0, gpus=2, nodes=1, gpu_model="V100M16")
    # V100 -> Sia's azure cluster, 2 GPUs on one node
    assert p.sync == pytest.approx(min(act.sync_share(p.sia_job, "V100M32", 2)[0], p.kernel))
    assert p.sync > 0
    for v in res.gpu_activity.values():
        assert v["sm_active"] == pytest.approx(p.level * (p.kernel - p.sync))
        assert v["gpu_util"] == pytest.approx(p.kernel)  # NCCL's kernels run in the sync


def test_the_meter_seed_redraws_the_jobs():
    jobs = [job(0, 0.0, 100.0)]
    a = run([node()], jobs, window=(0.0, 100.0)).metrics["dcgm_sm_active"]
    b = run([node()], jobs, window=(0.0, 100.0),
            meter=UtilisationMeter([node()], seed=5)).metrics["dcgm_sm_active"]
    assert a == pytest.approx(act.draw_profile("j0", seed=0).sm_active())
    assert b == pytest.approx(act.draw_profile("j0", seed=5).sm_active())


class _Silent(UtilisationMeter):
    def interval(self, *args, **kw):
        return None


@pytest.mark.parametrize("policy", ["exclusive", "time-slicing", "elastico"])
def test_the_existing_metrics_do_not_depend_on_the_meter(policy):
    nodes = [node("a", 2), node("b", 1, "T4")]
    jobs = [job(i, 10.0 * i, 200.0 + 50 * i, share=0.5 if i % 2 else 1.0) for i in range(6)]
    with_meter = run(nodes, jobs, policy).metrics
    silent = run(nodes, jobs, policy, meter=_Silent(nodes)).metrics
    for k, v in with_meter.items():
        if k in DCGM_KEYS:
            assert silent[k] == 0.0
        elif not k.startswith("round_ms"):  # wall-clock
            assert silent[k] == pytest.approx(v), k


@pytest.mark.parametrize("policy", ["time-slicing", "elastico", "exclusive"])
def test_no_gpu_reads_more_than_100_percent_and_sm_activity_needs_a_kernel(policy):
    # eight 0.25-GPU pods on two GPUs: time-slicing packs four on a GPU, elastico shares by MPS
    nodes = [node(gpus=2)]
    jobs = [job(i, 0.0, 300.0, share=0.25) for i in range(8)]
    res = run(nodes, jobs, policy, window=(0.0, 300.0))
    for v in res.gpu_activity.values():
        assert 0 <= v["sm_active"] <= v["gpu_util"] + 1e-12 <= 1 + 1e-12
        assert 0 <= v["dram_active"] <= 1
    m = res.metrics
    assert 0 < m["dcgm_sm_active"] <= m["dcgm_gpu_util"] <= 1


# --- the rule per GPU, on a placement state by hand ------------------------------------------

def _cfg(share=1.0, gpus=1, model="V100M16", mig=None):
    return Configuration("c", model, gpus, share, 16.0 * share, 1.0, 2.0, 1.0, mig_profile=mig)


class _State:
    """What the meter reads from a placement state: assignments and MIG mode."""

    def __init__(self, gpus: dict[str, tuple[tuple[int, int], ...]], mig=()):
        self._a = {j: SimpleNamespace(gpus=g, node_indices=tuple(sorted({n for n, _ in g})))
                   for j, g in gpus.items()}
        self._mig = set(mig)

    def assignment(self, jid):
        return self._a[jid]

    def is_mig(self, n, g):
        return (n, g) in self._mig


def _meter(time_sliced=False, gpus=2):
    return UtilisationMeter([node(gpus=gpus)], time_sliced=time_sliced)


def _live(**recs):
    """``live`` and ``placed`` as the simulator passes them: id -> (job, config, restart)."""
    live = {j: SimpleNamespace(job=a, config=c, restart_until=r) for j, (a, c, r) in recs.items()}
    return live, list(live)


def _profiles(*ids):
    return [act.draw_profile(i, seed=0) for i in ids]


def test_mps_clients_are_capped_by_their_share_and_add_up():
    m = _meter()
    a, b = job(0, 0, 1, share=0.5), job(1, 0, 1, share=0.5)
    pa, pb = _profiles("j0", "j1")
    st = _State({"j0": ((0, 0),), "j1": ((0, 0),)})
    m.interval(0.0, 10.0, (0.0, 10.0), st,
               *_live(j0=(a, _cfg(0.5), 0.0), j1=(b, _cfg(0.5), 0.0)), {}, {})
    la, lb = min(pa.level, 0.5), min(pb.level, 0.5)
    # shares sum to 1: the cap of 1 cannot bind, SM activity is the sum
    assert m.sm[0] / 10 == pytest.approx(la * pa.compute + lb * pb.compute)
    assert m.util[0] / 10 == pytest.approx(1 - (1 - pa.kernel) * (1 - pb.kernel))
    assert m.sm[1] == 0.0


def test_time_sliced_jobs_run_in_turns_and_a_restarting_job_reads_zero():
    m = _meter(time_sliced=True)
    a, b = job(0, 0, 1, share=0.5), job(1, 0, 1, share=0.5)
    pa, pb = _profiles("j0", "j1")
    st = _State({"j0": ((0, 0),), "j1": ((0, 0),)})
    # j1 restarts until t = 4: [0, 4) j0 alone at slowdown 2, [4, 10) both
    m.interval(0.0, 10.0, (0.0, 10.0), st,
               *_live(j0=(a, _cfg(0.5), 0.0), j1=(b, _cfg(0.5), 4.0)), {"j0": 2.0, "j1": 2.0}, {})
    alone = pa.level * pa.compute / 2  # no share cap under time-slicing; half the turns
    both = min(1.0, alone + pb.level * pb.compute / 2)
    assert m.sm[0] == pytest.approx(4 * alone + 6 * both)
    assert m.util[0] == pytest.approx(4 * pa.kernel / 2 + 6 * min(1.0, (pa.kernel + pb.kernel) / 2))


def test_a_service_keeps_busy_only_its_load_and_mig_slices_add():
    m = _meter()
    svc = job(0, 0, 1, kind=JobKind.SERVICE)
    p = _profiles("j0")[0]
    m.interval(0.0, 10.0, (0.0, 10.0), _State({"j0": ((0, 0),)}),
               *_live(j0=(svc, _cfg(1.0), 0.0)), {}, {"j0": 0.4})
    assert m.sm[0] / 10 == pytest.approx(p.level * p.compute * 0.4)
    assert m.util[0] / 10 == pytest.approx(p.kernel * 0.4)
    # two MIG instances (3/7 and 4/7 of the SMs) on GPU 1
    m2 = UtilisationMeter([node(gpus=2, model="A100-40GB")])
    a, b = job(1, 0, 1), job(2, 0, 1)
    p1, p2 = _profiles("j1", "j2")
    st = _State({"j1": ((0, 1),), "j2": ((0, 1),)}, mig={(0, 1)})
    m2.interval(0.0, 10.0, (0.0, 10.0), st,
                *_live(j1=(a, _cfg(3 / 7, model="A100-40GB", mig="3g.20gb"), 0.0),
                       j2=(b, _cfg(4 / 7, model="A100-40GB", mig="4g.20gb"), 0.0)), {}, {})
    assert m2.sm[1] / 10 == pytest.approx(min(p1.level, 3 / 7) * p1.compute
                                          + min(p2.level, 4 / 7) * p2.compute)
    assert m2.sm[1] / 10 <= 1.0


def test_only_the_window_counts():
    m = _meter()
    a = job(0, 0, 1)
    p = _profiles("j0")[0]
    st = _State({"j0": ((0, 0),)})
    m.interval(0.0, 10.0, (5.0, 8.0), st, *_live(j0=(a, _cfg(), 0.0)), {}, {})
    assert m.sm[0] == pytest.approx(3 * p.sm_active())
    m.interval(20.0, 30.0, (5.0, 8.0), st, *_live(j0=(a, _cfg(), 0.0)), {}, {})
    assert m.sm[0] == pytest.approx(3 * p.sm_active())
    assert m.metrics(3.0)["dcgm_sm_active"] == pytest.approx(p.sm_active() / 2)
