"""PlacerService over real gRPC servers: RunRound and Place (valid calls, bad fields ->
INVALID_ARGUMENT naming the field with nothing kept, unknown node/job -> NOT_FOUND, deadlines),
degradation (a stopped predictor -> analytic fallback, a degraded round and the counter; a
pricing service slower than the round's deadline -> DEADLINE_EXCEEDED, nothing applied),
health and reflection."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from elastico.runtime.grpc_server import serve_one
from elastico.runtime.metrics import ServiceMetrics
from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.rpc.remote import (RemotePlacerPolicy, RemotePricer, RemoteSlowdownModel,
                                    RoundDeadlineExceeded, open_channel)
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.placer.server import SERVICE_NAME, build_server
from elastico.placer.rpc import wire
from elastico.predictor import AnalyticSlowdown
from elastico.pricing import server as pricing_server
from elastico.perf.throughput import ThroughputModel
from elastico.v1 import placer_pb2, placer_pb2_grpc, pricing_pb2_grpc

TM = ThroughputModel.bundled()
NODES = [Node("n0", "V100M16", 2, 16.0, 32.0, 128.0), Node("n1", "V100M16", 2, 16.0, 32.0, 128.0)]


def _job(i: int, share: float = 0.5, kind=JobKind.TRAINING,
         job_type: str = "ResNet-50 (batch size 64)") -> Job:
    return Job(f"j{i}", kind, float(i), 3600.0, Request(1, share, 2.0, 8.0), job_type=job_type)


@pytest.fixture
def placer():
    """A placer pricing and predicting in-process (the analytic model), plus a stub."""
    metrics = ServiceMetrics("placer")
    server, port = build_server(slowdown=AnalyticSlowdown(), metrics=metrics)
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield placer_pb2_grpc.PlacerServiceStub(ch), ch, metrics
    ch.close()
    server.stop(0)


def _request(jobs, bookings=(), now=100.0):
    return placer_pb2.RunRoundRequest(now=now, nodes=[wire.node_to_message(n) for n in NODES],
                                      jobs=[wire.job_to_message(a) for a in jobs],
                                      bookings=list(bookings), policy="elastico")


def test_run_round_places_jobs_like_the_in_process_round(placer):
    stub, ch, metrics = placer
    jobs = [ActiveJob(_job(i)) for i in range(5)]
    resp = stub.RunRound(_request(jobs), timeout=30)
    inp = RoundInput(100.0, NODES, ClusterState(NODES), jobs)
    local = run_round(make_policy("elastico", PolicyEnv(NODES, TM, AnalyticSlowdown())), inp)
    assert [d.job_id for d in resp.decisions] == [f"j{i}" for i in range(5)]
    for d in resp.decisions:
        ref = local.decisions[d.job_id]
        assert d.status == ref.status.value
        if ref.assignment is not None:
            assert (d.placement.node, tuple(d.placement.gpu_indices)) == (
                ref.assignment.node, ref.assignment.gpu_indices)
            assert wire.config_from_message(d.placement.configuration, "c") == ref.config
    assert list(resp.booking_order) == local.state.job_ids()
    assert 0.0 <= resp.pricing_gap and len(resp.prices) == len(resp.resource_names) == 4
    text = metrics.registry.get_sample_value
    assert text("elastico_round_duration_seconds_count") == 1.0
    placed = sum(d.status == "placed" for d in resp.decisions)
    assert text("elastico_round_jobs", {"status": "placed"}) == placed
    # allocation = booked GPU compute / 4 GPUs, worked out from the decisions
    booked = sum(len(d.placement.gpu_indices) * d.placement.gpu_share for d in resp.decisions
                 if d.HasField("placement"))
    assert text("elastico_gpu_allocation") == pytest.approx(booked / 4)
    # pricing ran in-process: its solve is observed too (it stayed at 0 before)
    assert text("elastico_pricing_solve_seconds_count") == 1.0
    assert text("elastico_pricing_iterations") == resp.pricing_iterations >= 1
    assert text("elastico_pricing_gap") == pytest.approx(resp.pricing_gap)
    for name, price in zip(resp.resource_names, resp.prices):
        assert text("elastico_pricing_price", {"resource": name}) == pytest.approx(price)
    # a round on another cluster: only its resources keep a price
    other = [Node("p0", "P100", 2, 16.0, 32.0, 128.0)]
    req = placer_pb2.RunRoundRequest(now=101.0, nodes=[wire.node_to_message(n) for n in other],
                                     jobs=[wire.job_to_message(ActiveJob(_job(9)))],
                                     policy="elastico")
    resp2 = stub.RunRound(req, timeout=30)
    assert text("elastico_pricing_price", {"resource": "gpu:V100M16"}) is None
    assert {s.labels["resource"] for s in metrics.price.collect()[0].samples} == set(
        resp2.resource_names)


def test_the_remote_policy_round_trips_bookings_exactly(placer):
    _, ch, _ = placer
    env = PolicyEnv(NODES, TM, AnalyticSlowdown())
    remote = RemotePlacerPolicy(ch, "elastico", env, timeout_s=30)
    local = make_policy("elastico", PolicyEnv(NODES, TM, AnalyticSlowdown()))
    jobs = [ActiveJob(_job(i)) for i in range(6)]
    s_local = s_remote = ClusterState(NODES)
    for now in (100.0, 200.0):  # second round: running jobs come back with their bookings
        a = run_round(local, RoundInput(now, NODES, s_local, jobs))
        b = run_round(remote, RoundInput(now, NODES, s_remote, jobs))
        for jid, d in a.decisions.items():
            e = b.decisions[jid]
            assert (d.status, d.config, d.assignment, d.changed) == (
                e.status, e.config, e.assignment, e.changed)
        assert a.state.job_ids() == b.state.job_ids()
        s_local, s_remote = a.state, b.state
        jobs = [ActiveJob(a_.job, a.decisions[a_.job.id].config) for a_ in jobs]


@pytest.mark.parametrize("mutate, field", [
    (lambda r: setattr(r.jobs[1].request, "gpu_share", 1.5), "jobs[1].request.gpu_share"),
    (lambda r: setattr(r.jobs[0], "kind", 0), "jobs[0].kind"),
    (lambda r: setattr(r.jobs[2], "work", float("nan")), "jobs[2].work"),
    (lambda r: setattr(r.jobs[2], "id", "j1"), "jobs[2].id"),
    (lambda r: setattr(r.nodes[1], "cpu", -1.0), "nodes[1].cpu"),
    (lambda r: r.nodes[0].unhealthy_gpus.append(7), "nodes[0].unhealthy_gpus[0]"),
    (lambda r: setattr(r, "policy", "fifo"), "policy"),
    (lambda r: setattr(r.options, "utility", "speed"), "options.utility"),
    (lambda r: setattr(r.options, "restart_s", -3.0), "options.restart_s"),
    (lambda r: setattr(r, "now", float("inf")), "now"),
    # a node of 2**31-1 GPUs made the placer allocate per GPU until the OOM killer came
    (lambda r: setattr(r.nodes[1], "num_gpus", 2**31 - 1), "nodes[1].num_gpus"),
    (lambda r: setattr(r.nodes[0], "num_gpus", 65), "nodes[0].num_gpus"),
    (lambda r: setattr(r.jobs[2].request, "num_gpus", 65), "jobs[2].request.num_gpus"),
    # names the request's field, not only the throughput model's argument
    (lambda r: setattr(r.nodes[1], "gpu_model", "RTX4090"), "nodes[1].gpu_model"),
    (lambda r: setattr(r.jobs[1], "job_type", "zzz"), "jobs[1].job_type"),
    (lambda r: setattr(r.jobs[0], "job_type", ""), "jobs[0].job_type"),
    # two such jobs summed to an inf utility, reported as 'utility[8]'
    (lambda r: setattr(r.jobs[1], "priority", 1e308), "jobs[1].priority"),
])
def test_bad_fields_are_invalid_argument_naming_them_and_nothing_is_kept(placer, mutate, field):
    stub, _, metrics = placer
    jobs = [ActiveJob(_job(i)) for i in range(3)]
    req = _request(jobs)
    mutate(req)
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(field + ":")
    assert metrics.registry.get_sample_value("elastico_round_duration_seconds_count") in (None, 0.0)
    # the same jobs then get the round a fresh placer gives them (no warm state was touched)
    assert [d.status for d in stub.RunRound(_request(jobs), timeout=30).decisions] == [
        "placed"] * 3


def _running(i, node="n0", gpus=(0,)):
    cfg = Configuration("g1x0.5", "V100M16", 1, 0.5, 8.0, 2.0, 8.0, 1.0)
    job = ActiveJob(_job(i), cfg)
    booking = placer_pb2.Placement(job_id=f"j{i}", node=node, gpu_indices=list(gpus),
                                   gpu_share=0.5, gpu_mem_gib=8.0)
    return job, booking, cfg


def test_unknown_node_or_job_in_a_booking_is_not_found(placer):
    stub, _, _ = placer
    job, booking, _ = _running(0, node="n9")
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(_request([job], [booking]), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "bookings[0].node" in e.value.details()
    job, booking, _ = _running(0)
    booking.job_id = "ghost"
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(_request([job], [booking]), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "'ghost'" in e.value.details()


def test_over_committed_or_missing_bookings_are_invalid(placer):
    stub, _, _ = placer
    a, ba, _ = _running(0)
    b, bb, _ = _running(1)
    c, bc, _ = _running(2)  # three half-GPU jobs on GPU 0 of n0: 1.5 > 1
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(_request([a, b, c], [ba, bb, bc]), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("bookings[2]:")
    assert "GPU 0 of n0 no longer has its share free" in e.value.details()
    # two half-GPU bookings of 8 GiB each fit the share but not a 16 GiB GPU with 12 GiB each:
    # the message says memory, with the numbers (it said "share" before)
    ba.gpu_mem_gib = bb.gpu_mem_gib = 12.0
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(_request([a, b], [ba, bb]), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("bookings[1]:")
    assert "GPU 0 of n0 has 4 GiB of GPU memory free, the booking needs 12" in e.value.details()
    ba.gpu_mem_gib = bb.gpu_mem_gib = 8.0
    with pytest.raises(grpc.RpcError) as e:  # running, but no booking
        stub.RunRound(_request([a], []), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "current" in e.value.details()


def test_running_jobs_keep_their_booking(placer):
    stub, _, _ = placer
    a, ba, cfg = _running(0, gpus=(1,))
    req = _request([a], [ba])
    req.policy = "exclusive"  # running pods never move (elastico may re-price them)
    resp = stub.RunRound(req, timeout=30)
    d = resp.decisions[0]
    assert (d.status, d.placement.node, list(d.placement.gpu_indices)) == ("placed", "n0", [1])
    assert not d.changed


def test_expired_deadline_is_deadline_exceeded(placer):
    stub, _, _ = placer
    with pytest.raises(grpc.RpcError) as e:
        stub.RunRound(_request([ActiveJob(_job(0))]), timeout=0.0)  # already expired when sent
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_place_books_items_in_order_and_validates(placer):
    stub, _, _ = placer
    a, ba, _ = _running(0)
    cfg = Configuration("g1x0.5", "V100M16", 1, 0.5, 8.0, 2.0, 8.0, 1.0)
    items = [placer_pb2.PlaceItem(job=wire.job_to_message(ActiveJob(_job(i))),
                                  configuration=wire.config_to_message(cfg)) for i in (5, 6)]
    req = placer_pb2.PlaceRequest(nodes=[wire.node_to_message(n) for n in NODES], bookings=[ba],
                                  booked_jobs=[wire.job_to_message(a)], items=items)
    resp = stub.Place(req, timeout=30)
    assert [o.placed for o in resp.outcomes] == [True, True]
    # bestfit: the half-used GPU 0 of n0 first (leftover 0), then the tightest free GPU
    assert (resp.outcomes[0].placement.node, list(resp.outcomes[0].placement.gpu_indices)) == ("n0", [0])
    # analytic model: two residents of activity a each slow each other by 1 + kappa * a
    act = TM.parallel_fraction(_job(0).job_type) * TM.share_speed(_job(0).job_type, 0.5)
    assert resp.outcomes[0].placement.predicted_slowdown == pytest.approx(
        1 + AnalyticSlowdown().kappa * act) or resp.outcomes[0].placement.predicted_slowdown == 1.0
    req.items[1].configuration.gpu_share = 0.0
    with pytest.raises(grpc.RpcError) as e:
        stub.Place(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("items[1].configuration.gpu_share:")
    req.items[1].configuration.gpu_share = 0.5
    req.items[1].job.job_type = "zzz"
    with pytest.raises(grpc.RpcError) as e:
        stub.Place(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("items[1].job.job_type:")


def test_health_and_reflection_answer(placer):
    _, ch, _ = placer
    h = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
    assert h.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    resp = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
        list_services="")])))
    assert SERVICE_NAME in {s.name for s in resp.list_services_response.service}


# ---- degradation ------------------------------------------------------------------------------
def test_a_stopped_predictor_degrades_the_round_to_the_analytic_model():
    from elastico.predictor.server import build_server as predictor_server

    psrv, pport = predictor_server()
    psrv.start()
    remote = RemoteSlowdownModel(open_channel(f"127.0.0.1:{pport}"), timeout_s=5)
    metrics = ServiceMetrics("placer")
    server, port = build_server(slowdown=remote, metrics=metrics)
    server.start()
    stub = placer_pb2_grpc.PlacerServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    jobs = [ActiveJob(_job(i, share=0.25)) for i in range(8)]  # co-located: predictor asked
    try:
        ok = stub.RunRound(_request(jobs), timeout=60)
        assert ok.degraded == "" and remote.calls > 0
        psrv.stop(0).wait()
        # other job types: pairs the placer has not cached, so it must ask the predictor
        other = [t for t in TM.job_types() if t.startswith("Transformer")][0]
        deg = stub.RunRound(_request([ActiveJob(_job(i, share=0.25, job_type=other))
                                      for i in range(8, 16)]), timeout=60)
    finally:
        server.stop(0)
    assert deg.degraded.startswith("predictor UNAVAILABLE")
    placed = [d for d in deg.decisions if d.HasField("placement")]
    assert placed and {d.status for d in placed} == {"degraded"}
    assert metrics.registry.get_sample_value("elastico_placer_predictor_fallbacks_total") >= 1
    assert metrics.registry.get_sample_value("elastico_rounds_degraded_total") == 1


class _SlowPricing(pricing_server.PricingServicer):
    def Solve(self, request, context):
        time.sleep(1.5)
        return super().Solve(request, context)


def test_pricing_past_the_deadline_abandons_the_round_and_keeps_the_previous_allocation():
    psrv, pport = serve_one("127.0.0.1:0", pricing_server.SERVICE_NAME,
                            lambda s: pricing_pb2_grpc.add_PricingServiceServicer_to_server(
                                _SlowPricing(), s), thread_name="slow", max_workers=2,
                            max_concurrent_rpcs=4, max_message_bytes=2**24)
    psrv.start()
    pricer = RemotePricer(open_channel(f"127.0.0.1:{pport}"))
    metrics = ServiceMetrics("placer")
    server, port = build_server(pricer=pricer, slowdown=AnalyticSlowdown(), metrics=metrics)
    server.start()
    ch = open_channel(f"127.0.0.1:{port}")
    env = PolicyEnv(NODES, TM, AnalyticSlowdown())
    remote = RemotePlacerPolicy(ch, "elastico", env, timeout_s=0.5)
    state = ClusterState(NODES)
    jobs = [ActiveJob(_job(i)) for i in range(4)]
    try:
        with pytest.raises(RoundDeadlineExceeded):
            run_round(remote, RoundInput(100.0, NODES, state, jobs))
        assert len(state) == 0  # the caller's book is untouched
        time.sleep(1.5)
        assert metrics.registry.get_sample_value(
            "elastico_rpc_total", {"service": "placer", "code": "DEADLINE_EXCEEDED",
                                   "method": "/elastico.v1.PlacerService/RunRound"}) == 1
        # with time to spare the same round succeeds and equals a placer that never failed
        remote.timeout_s = 30
        res = run_round(remote, RoundInput(100.0, NODES, state, jobs))
        ref = run_round(make_policy("elastico", PolicyEnv(NODES, TM, AnalyticSlowdown())),
                        RoundInput(100.0, NODES, ClusterState(NODES), jobs))
        assert {k: (d.status, d.assignment) for k, d in res.decisions.items()} == {
            k: (d.status, d.assignment) for k, d in ref.decisions.items()}
    finally:
        server.stop(0)
        psrv.stop(0)


def _mig_request(mig_gpus, home, lending=True, jobs=None):
    node = Node("m0", "A100-40GB", 8, 40.0, 64.0, 512.0)
    job = Job("big", JobKind.SERVICE, 0.0, 3600.0, Request(8, 1.0, 2.0, 8.0),
              job_type="ResNet-50 (batch size 64)")
    return placer_pb2.RunRoundRequest(
        now=100.0, policy="elastico", nodes=[wire.node_to_message(node, mig_gpus, home)],
        jobs=jobs if jobs is not None else [wire.job_to_message(ActiveJob(job))],
        options=placer_pb2.PolicyOptions(mig_lending=lending))


def test_mig_lending_through_run_round_lends_and_the_caller_sends_the_new_mode(placer):
    # one empty 8-GPU A100 node in MIG mode, an 8-GPU service waiting: the round lends the
    # node (the switch comes back); the next request sends the node in normal mode and the
    # service is placed on whole GPUs; once it is gone, the empty node returns
    stub = placer[0]
    all8 = list(range(8))
    r1 = stub.RunRound(_mig_request(all8, all8), timeout=30)
    assert r1.decisions[0].status == "waiting"
    [sw] = r1.mig_switches
    assert (sw.node, list(sw.gpu_indices), sw.enabled) == ("m0", all8, False)
    assert sw.reason.startswith("lent: empty")
    r2 = stub.RunRound(_mig_request([], all8), timeout=30)
    d = r2.decisions[0]
    assert d.status == "placed" and not d.placement.configuration.mig_profile
    assert list(d.placement.gpu_indices) == all8 and not r2.mig_switches
    r3 = stub.RunRound(_mig_request([], all8, jobs=[]), timeout=30)
    assert [(s.node, s.enabled) for s in r3.mig_switches] == [("m0", True)]
    # without the option the mode stays as sent (the default: the caller keeps no lent state)
    r4 = stub.RunRound(_mig_request(all8, all8, lending=False), timeout=30)
    assert r4.decisions[0].status == "waiting" and not r4.mig_switches


@pytest.mark.parametrize("mig_gpus, home, said", [
    ([0, 1], [1, 2], "nodes[0].mig_home_gpus: [1, 2] is not allowed (every index of mig_gpus [0, 1]"),
    ([], [8], "nodes[0].mig_home_gpus[0]: 8 is not allowed (distinct GPU indices in 0..7)"),
    ([], [3, 3], "nodes[0].mig_home_gpus[1]: 3 is not allowed (distinct GPU indices in 0..7)"),
])
def test_bad_mig_home_gpus_are_invalid_argument(placer, mig_gpus, home, said):
    with pytest.raises(grpc.RpcError) as e:
        placer[0].RunRound(_mig_request(mig_gpus, home), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and said in e.value.details(), \
        e.value.details()
