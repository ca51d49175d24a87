"""GPU backend contract (STYLE.md 9): one suite against every implementation — the simulated
backend always, NVML where a GPU and pynvml exist — plus NVML's clean failure without them."""

import sys
import types

import pytest

from elastico.errors import InvalidArgument, NotFound
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
