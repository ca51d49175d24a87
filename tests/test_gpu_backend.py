"""GPU backend contract (STYLE.md 9): one suite against every implementation — the simulated
backend always, NVML where a GPU and pynvml exist — plus NVML's clean failure without them."""

import sys
import types

import pytest

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.nodeagent import (
    TELEMETRY_KEYS,
    BackendUnavailable,
    GpuBackend,
    GpuInfo,
    NvmlGpuBackend,
    SimulatedGpuBackend,
)


def simulated():
    return SimulatedGpuBackend([
        GpuInfo(0, "GPU-0000", "A100-40GB", 40.0),
        GpuInfo(1, "GPU-0001", "A100-40GB", 40.0, mig_mode=True),
    ])


def nvml():
    try:
        return NvmlGpuBackend()
    except BackendUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(params=["simulated", "nvml"])
def backend(request):
    b = simulated() if request.param == "simulated" else nvml()
    yield b
    b.close()


def test_contract_list_and_telemetry(backend):
    assert isinstance(backend, GpuBackend)
    gpus = backend.list_gpus()
    assert gpus and [g.index for g in gpus] == sorted(g.index for g in gpus)
    for g in gpus:
        assert g.memory_total_gib > 0 and g.uuid
        t = backend.telemetry(g.index)
        assert set(TELEMETRY_KEYS) <= set(t)
        assert t["memory_total_gib"] == pytest.approx(g.memory_total_gib)
        assert 0 <= t["utilization_gpu_percent"] <= 100
    with pytest.raises(NotFound):
        backend.telemetry(99)


def test_contract_mps_limits(backend):
    g = next(g for g in backend.list_gpus() if not g.mig_mode)
    lim = backend.set_mps_limits("pod-a", 30, 4.0, gpu_indices=(g.index,))
    assert backend.mps_limits("pod-a") == lim
    assert backend.mps_env("pod-a") == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G",  # NVIDIA MPS docs: <ordinal>=<amount><G|M>
    }
    for pct in (0, -5, 100.5, float("nan")):
        with pytest.raises(InvalidArgument, match="active_thread_percentage"):
            backend.set_mps_limits("pod-b", pct, 1.0, gpu_indices=(g.index,))
    for mem in (0, -1, g.memory_total_gib + 1):
        with pytest.raises(InvalidArgument, match="pinned_mem_limit_gib"):
            backend.set_mps_limits("pod-b", 50, mem, gpu_indices=(g.index,))
    with pytest.raises(InvalidArgument, match="gpu_indices"):
        backend.set_mps_limits("pod-b", 50, 1.0, gpu_indices=(99,))
    with pytest.raises(NotFound):
        backend.mps_limits("pod-b")  # failed calls booked nothing
    backend.clear_mps_limits("pod-a")
    with pytest.raises(NotFound):
        backend.mps_env("pod-a")


def test_simulated_specifics():
    b = simulated()
    with pytest.raises(InvalidArgument, match="MIG"):
        b.set_mps_limits("p", 50, 1.0, gpu_indices=(1,))
    b.set_telemetry(0, utilization_gpu_percent=73.0, memory_used_gib=12.5)
    t = b.telemetry(0)
    assert (t["utilization_gpu_percent"], t["memory_used_gib"]) == (73.0, 12.5)
    with pytest.raises(InvalidArgument):
        b.set_telemetry(0, utilization_gpu_percent=120.0)
    with pytest.raises(InvalidArgument):
        b.set_telemetry(0, memory_used_gib=41.0)
    b.set_health(0, False)
    assert not b.list_gpus()[0].healthy
    with pytest.raises(InvalidArgument):
        SimulatedGpuBackend([GpuInfo(0, "a", "V100", 16.0), GpuInfo(0, "b", "V100", 16.0)])
    lim = b.set_mps_limits("multi", 25, 2.5, gpu_indices=(0,))
    assert lim.pinned_mem_limit_gib == 2.5


MESSAGE = "install the NVIDIA driver / nvidia-ml-py or use the simulated backend"


def test_nvml_without_pynvml_raises_backend_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(BackendUnavailable) as e:
        NvmlGpuBackend()
    assert str(e.value).startswith("NVML is not available: pynvml cannot be imported")
    assert MESSAGE in str(e.value)


def test_nvml_init_failure_raises_backend_unavailable(monkeypatch):
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init():
        raise NVMLError("Driver Not Loaded")

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(BackendUnavailable) as e:
        NvmlGpuBackend()
    assert "nvmlInit failed (NVMLError: Driver Not Loaded)" in str(e.value) and MESSAGE in str(e.value)


def test_nvml_on_this_machine_never_crashes():
    """Whether or not pynvml is installed: a backend, or BackendUnavailable with the message."""
    try:
        b = NvmlGpuBackend()
    except BackendUnavailable as e:
        assert str(e).startswith("NVML is not available: ") and MESSAGE in str(e)
    else:
        b.list_gpus()
        b.close()


# ---- NVML through a fake pynvml that counts its calls ------------------------------------------
#: The fake's GPU-instance profiles of an A100-40GB: NVML profile id -> NVML's name for it.
FAKE_GI_PROFILES = {0: b"MIG 1g.5gb", 1: b"MIG 2g.10gb", 2: b"MIG 3g.20gb", 3: b"MIG 4g.20gb",
                    4: b"MIG 7g.40gb"}


def fake_pynvml(n_gpus: int, mig_gpus: set[int]):
    """A pynvml module with ``n_gpus`` A100-40GB boards (those in ``mig_gpus`` in MIG mode),
    the NVML calls :class:`NvmlGpuBackend` makes to list GPUs and to create a MIG instance,
    and ``calls``: a Counter of every call by name, ``handles``: the indices asked for
    handles, in order, ``created``: ``(gpu, profile id, start, size)`` of each instance."""
    import collections
    import ctypes

    calls: collections.Counter = collections.Counter()
    handles: list[int] = []
    created: list[tuple[int, int, int, int]] = []
    gis: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(n_gpus)}  # (profile, start, id)
    ns = types.SimpleNamespace

    def gi_handle(gpu, gi_id):
        return gpu * 1000 + gi_id

    def nvmlDeviceGetHandleByIndex(i):
        handles.append(i)
        return i

    def nvmlDeviceGetTotalEccErrors(h, kind, counter):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")  # ECC off: nothing to read

    def nvmlDeviceGetGpuInstanceProfileInfo(h, p):
        return ns(id=p, name=FAKE_GI_PROFILES[p], instanceCount=7)

    def nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, placement):
        gi_id = len(gis[h]) + 1
        gis[h].append((profile_id, placement.start, gi_id))
        created.append((h, profile_id, placement.start, placement.size))
        return gi_handle(h, gi_id)

    def nvmlDeviceGetGpuInstances(h, profile_id, arr, count_ref):
        mine = [gi_handle(h, gi_id) for p, _, gi_id in gis[h] if p == profile_id]
        for k, g in enumerate(mine):
            arr[k] = g
        count_ref._obj.value = len(mine)

    def nvmlGpuInstanceGetInfo(gi):
        gpu, gi_id = divmod(gi, 1000)
        start = next(s for _, s, i in gis[gpu] if i == gi_id)
        return ns(id=gi_id, placement=ns(start=start))

    api = dict(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: n_gpus,
        nvmlDeviceGetHandleByIndex=nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h:04d}".encode(),
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-40GB",
        nvmlDeviceGetMemoryInfo=lambda h: ns(total=40 * 2**30, used=0),
        nvmlDeviceGetMigMode=lambda h: (int(h in mig_gpus), int(h in mig_gpus)),
        nvmlDeviceGetTotalEccErrors=nvmlDeviceGetTotalEccErrors,
        nvmlDeviceGetGpuInstanceProfileInfo=nvmlDeviceGetGpuInstanceProfileInfo,
        nvmlDeviceCreateGpuInstanceWithPlacement=nvmlDeviceCreateGpuInstanceWithPlacement,
        nvmlGpuInstanceGetComputeInstanceProfileInfo=lambda gi, p, engine: ns(id=p),
        nvmlGpuInstanceCreateComputeInstance=lambda gi, p: None,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 0,
        nvmlDeviceGetGpuInstances=nvmlDeviceGetGpuInstances,
        nvmlGpuInstanceGetInfo=nvmlGpuInstanceGetInfo,
    )
    fake = types.ModuleType("pynvml")
    for name, fn in api.items():
        def counted(*args, _fn=fn, _name=name):
            calls[_name] += 1
            return _fn(*args)
        setattr(fake, name, counted)

    class Placement:
        start = size = 0

    consts = dict(NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0,
                  NVML_GPU_INSTANCE_PROFILE_COUNT=len(FAKE_GI_PROFILES),
                  NVML_COMPUTE_INSTANCE_PROFILE_COUNT=0,
                  NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED=0,
                  NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE=2,
                  c_nvmlGpuInstance_t=ctypes.c_int, c_nvmlGpuInstancePlacement_t=Placement)
    for name, v in consts.items():
        setattr(fake, name, v)
    return fake, calls, handles, created


@pytest.fixture
def fake_nvml(monkeypatch):
    """An NvmlGpuBackend over :func:`fake_pynvml` with 4 GPUs, GPU 2 in MIG mode, and the
    fake's call records."""
    fake, calls, handles, created = fake_pynvml(4, mig_gpus={2})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    b = NvmlGpuBackend()
    yield b, calls, handles, created
    b.close()


def test_nvml_list_gpus_reads_the_count_once(fake_nvml):
    b, calls, handles, _ = fake_nvml
    gpus = b.list_gpus()
    assert [(g.index, g.uuid, g.mig_mode, g.mig_model) for g in gpus] == [
        (0, "GPU-0000", False, "A100-40GB"), (1, "GPU-0001", False, "A100-40GB"),
        (2, "GPU-0002", True, "A100-40GB"), (3, "GPU-0003", False, "A100-40GB")]
    assert calls["nvmlDeviceGetCount"] == 1  # not once more per GPU
    assert handles == [0, 1, 2, 3]


def test_nvml_create_mig_instance_reads_only_its_gpu(fake_nvml):
    b, calls, handles, created = fake_nvml
    d = b.create_mig_instance(2, "3g.20gb", 4)
    assert (d.gpu_index, d.profile, d.start) == (2, "3g.20gb", 4)
    # NVML profile 2 (3g.20gb) placed at memory slice 4, 4 memory slices wide
    assert created == [(2, 2, 4, 4)]
    assert calls["nvmlDeviceGetCount"] == 1  # the index check
    assert handles == [2]  # no other GPU is read
    assert calls["nvmlDeviceGetName"] == calls["nvmlDeviceGetUUID"] == 1
    with pytest.raises(InvalidArgument, match="gpu_index"):
        b.create_mig_instance(1, "3g.20gb", 4)  # GPU 1 is not in MIG mode


@pytest.mark.parametrize("takes_effect", [True, False])
def test_nvml_set_mig_mode_checks_that_the_mode_took_effect(monkeypatch, takes_effect):
    # NVML resets an idle GPU itself to activate a MIG mode change where it can; where it
    # cannot (a pass-through VM: NVML_ERROR_RESET_REQUIRED) the mode stays pending -- the
    # agent must say so, not hand out the GPU in the old mode
    fake, calls, _, _ = fake_pynvml(2, mig_gpus={1})
    modes = {0: [0, 0], 1: [1, 1]}  # current, pending

    def set_mode(h, mode):
        modes[h][1] = mode
        if takes_effect:
            modes[h][0] = mode
        return 0 if takes_effect else 27  # 27: not activated (a reset is required)
    fake.nvmlDeviceSetMigMode = set_mode
    fake.nvmlDeviceGetMigMode = lambda h: tuple(modes[h])
    fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_DISABLE = 1, 0
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    b = NvmlGpuBackend()
    try:
        if takes_effect:
            b.set_mig_mode(0, True)
            assert b.list_gpus()[0].mig_mode
        else:
            with pytest.raises(Infeasible) as e:
                b.set_mig_mode(0, True)
            assert str(e.value) == ("gpu 0: MIG mode on asked, but NVML reports it off now and "
                                    "on pending (activation status 27): the change needs a GPU "
                                    "reset (nvidia-smi -r -i 0, or a VM reboot under "
                                    "pass-through), which the agent does not do")
            assert not b.list_gpus()[0].mig_mode
    finally:
        b.close()
