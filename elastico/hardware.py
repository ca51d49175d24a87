"""The GPU catalogue: every fact about a GPU model that ElastiCo uses, each with its source.

One entry (:class:`GpuSpec`) per GPU product whose datasheet figures differ, keyed by ElastiCo's
model name (:data:`GPUS`); :func:`gpu_spec` also accepts the other spellings in use (the
cluster files' and MIG tables' ``H100-80GB``, ``H100-94GB``, ...) and the product names NVML
reports (``nvmlDeviceGetName``: ``"NVIDIA A100-SXM4-80GB"``, ``"Tesla T4"``, ...).  Every other
module reads GPU numbers from here: memory (:data:`GPU_MEMORY_GIB` is derived from
:data:`GPUS`), SMs, peak FLOP/s, memory / NVLink / host bandwidth, MIG support.  MIG geometry
(profiles, slices, placements) lives in :mod:`elastico.mig`; measured training speed per model
in :mod:`elastico.perf.throughput`.  Pure: constants and lookups.

Units and conventions (each entry's ``source`` names the datasheet its numbers come from):

* ``memory_gib``: the datasheet's GPU memory in GB *as marketed*, taken as GiB (80 GB ->
  80.0).  The device reports a little less (an H100 80GB ~79.6 GiB, an H200 ~139.8 GiB).
* ``sms``: streaming multiprocessors = the datasheet's CUDA (FP32) core count / FP32 cores per
  SM from the architecture whitepaper (Kepler GK210 192; Pascal GP100, Volta, Turing and GA100
  64; GA10x, Ada and Hopper 128).  ``None`` where NVIDIA publishes no core count (B200).
* ``peak_tflops``: DENSE peaks (no structured sparsity), TFLOP/s (TOP/s for ``int8``), keys
  among ``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``int8``.  ``fp32`` is the non-tensor
  FP32 peak; the others are Tensor Core peaks (FP16/BF16 with FP32 accumulate as the
  datasheets quote them), except on Kepler/Pascal (no Tensor Cores: ``fp16`` is the packed
  half-precision peak).  Where a datasheet quotes only the with-sparsity figure (Hopper,
  Blackwell; Ampere/Ada datasheets quote both) the dense peak is that figure / 2, as NVIDIA's
  footnote ("with sparsity"; the H100 whitepaper's dense FP16 989.4 TFLOPS) says.  A precision
  the datasheet does not list is absent.
* ``hbm_gbps``: memory bandwidth, GB/s (HBM or GDDR).  ``nvlink_gbps``: NVLink bandwidth per
  GPU, GB/s, total bidirectional as NVIDIA quotes it (PCIe cards: their NVLink bridge's figure;
  ``None``: no NVLink).  ``pcie_gbps``: the host interface, GB/s bidirectional as quoted (PCIe
  Gen3 x16 32, Gen4 64, Gen5 128; GH200: its NVLink-C2C CPU link, 900).
* ``mig``: the GPU supports Multi-Instance GPU (NVIDIA MIG user guide, "Supported GPUs").
* Per-GPU figures of multi-GPU boards / systems are the board's divided by its GPUs (K80: 2
  GK210 per board; B200: the HGX/DGX B200 8-GPU figures / 8).

ElastiCo's own names: the Alibaba trace's ``P100``, ``T4``, ``V100M16``, ``V100M32``, ``A10``,
``G2``, ``G3`` are keys; the trace does not say which form factor its P100 and V100 are:
``P100`` takes the P100 PCIe 16 GB figures, ``V100M16`` / ``V100M32`` the V100 SXM2 ones (the
V100 Gavel measured is an SXM2 part, AWS p3).  ``G2`` and ``G3`` are undisclosed models
("undisclosed internal codes", trace README): ASSUMPTION 16 GiB, the smallest size among the
disclosed models of the same cluster, so nothing placed on them could fail to fit a real device
of that class; every other figure unknown (``None`` / empty, ``generation`` ``"unknown"``),
``assumed`` says so.

Sources (titles + URLs; the product pages carry the datasheet's specification table):

* NVIDIA Tesla K80 datasheet -- https://www.nvidia.com/en-gb/data-center/tesla-k80/
* NVIDIA Tesla P100 PCIe / SXM2 datasheets -- https://www.nvidia.com/en-us/data-center/tesla-p100/
  ; SMs: "NVIDIA Tesla P100" whitepaper,
  https://images.nvidia.com/content/pdf/tesla/whitepaper/pascal-architecture-whitepaper.pdf
* NVIDIA V100 Tensor Core GPU datasheet --
  https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
  ; SMs: "NVIDIA Tesla V100 GPU Architecture" whitepaper,
  https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf
* NVIDIA T4 Tensor Core GPU datasheet -- https://www.nvidia.com/en-us/data-center/tesla-t4/
* NVIDIA Quadro RTX 6000 datasheet (the actively cooled card; the passive server card is
  clocked lower) -- https://www.nvidia.com/en-us/design-visualization/quadro/rtx-6000/
* NVIDIA Turing GPU Architecture whitepaper (GeForce RTX 2080 Ti, Appendix A, Table 1) --
  https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf
* NVIDIA A10 / A30 / A40 datasheets -- https://www.nvidia.com/en-us/data-center/products/a10-gpu/,
  https://www.nvidia.com/en-us/data-center/products/a30-gpu/, https://www.nvidia.com/en-us/data-center/a40/
* NVIDIA A100 Tensor Core GPU datasheet -- https://www.nvidia.com/en-us/data-center/a100/ ; SMs:
  "NVIDIA A100 Tensor Core GPU Architecture" whitepaper,
  https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf
* NVIDIA L4 / L40S datasheets -- https://www.nvidia.com/en-us/data-center/l4/,
  https://www.nvidia.com/en-us/data-center/l40s/
* NVIDIA H100 Tensor Core GPU datasheet (SXM, PCIe, NVL columns) --
  https://www.nvidia.com/en-us/data-center/h100/ ; SMs: "NVIDIA H100 Tensor Core GPU
  Architecture" whitepaper, https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper
* NVIDIA H200 Tensor Core GPU datasheet -- https://www.nvidia.com/en-us/data-center/h200/
* NVIDIA GH200 Grace Hopper Superchip datasheet --
  https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/
* NVIDIA HGX B200 and DGX B200 datasheets -- https://www.nvidia.com/en-us/data-center/hgx/,
  https://www.nvidia.com/en-us/data-center/dgx-b200/
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from elastico.errors import InvalidArgument

__all__ = ["GpuSpec", "GPUS", "ALIASES", "PRECISIONS", "GENERATIONS", "gpu_spec", "gpu_specs",
           "GPU_MEMORY_GIB", "NVML_NAMES", "gpu_model_name", "find_gpu_name"]

#: Keys of :attr:`GpuSpec.peak_tflops`.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
#: Values of :attr:`GpuSpec.generation`, oldest first.
GENERATIONS = ("kepler", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell",
               "unknown")


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU (one GPU, not one board); units in the module docstring.

    ``form_factor``: ``"SXM"``, ``"PCIe"``, ``"superchip"`` or ``""`` (unknown); ``nvml_names``:
    the exact product names NVML reports for it; ``assumed``: empty, or what of this entry is
    an assumption rather than a datasheet figure."""

    name: str
    memory_gib: float
    sms: int | None
    peak_tflops: Mapping[str, float] = field(hash=False)
    hbm_gbps: float | None
    nvlink_gbps: float | None
    pcie_gbps: float | None
    generation: str
    mig: bool
    source: str
    form_factor: str = ""
    nvml_names: tuple[str, ...] = ()
    assumed: str = ""

    def __reduce__(self):
        # picklable (evaluate's worker processes): the read-only peak table travels as a dict
        return (_rebuild_spec, (tuple((f, getattr(self, f)) for f in self.__dataclass_fields__
                                      if f != "peak_tflops"), dict(self.peak_tflops)))

    def tflops(self, precision: str) -> float | None:
        """Dense peak TFLOP/s at ``precision`` (one of :data:`PRECISIONS`), None when the
        datasheet lists none.  InvalidArgument for a precision outside :data:`PRECISIONS`."""
        if precision not in PRECISIONS:
            raise InvalidArgument("precision", precision, f"one of {list(PRECISIONS)}")
        return self.peak_tflops.get(precision)


def _rebuild_spec(fields: tuple, peak: dict) -> GpuSpec:
    return GpuSpec(**dict(fields), peak_tflops=MappingProxyType(dict(peak)))


_K80 = "NVIDIA Tesla K80 datasheet, https://www.nvidia.com/en-gb/data-center/tesla-k80/"
_P100 = ("NVIDIA Tesla P100 datasheet (PCIe and SXM2), https://www.nvidia.com/en-us/data-center/tesla-p100/;"
         " SMs: NVIDIA Tesla P100 whitepaper")
_V100 = ("NVIDIA V100 Tensor Core GPU datasheet, https://images.nvidia.com/content/technologies/volta/"
         "pdf/volta-v100-datasheet-update-us-1165301-r5.pdf; SMs: NVIDIA Tesla V100 GPU Architecture"
         " whitepaper")
_T4 = ("NVIDIA T4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/tesla-t4/;"
       " SMs: NVIDIA Turing GPU Architecture whitepaper (64 FP32 cores per SM)")
_RTX6000 = ("NVIDIA Quadro RTX 6000 datasheet (active card),"
            " https://www.nvidia.com/en-us/design-visualization/quadro/rtx-6000/;"
            " SMs: NVIDIA Turing GPU Architecture whitepaper (64 FP32 cores per SM)")
_RTX2080TI = ("NVIDIA Turing GPU Architecture whitepaper, Appendix A Table 1 (GeForce RTX 2080 Ti, reference"
              " board: 1545 MHz boost), https://images.nvidia.com/aem-dam/en-zz/Solutions/"
              "design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf")
_A10 = ("NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/;"
        " SMs: NVIDIA Ampere GA102 GPU Architecture whitepaper (128 FP32 cores per SM)")
_A30 = ("NVIDIA A30 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a30-gpu/;"
        " SMs: NVIDIA A100 Tensor Core GPU Architecture whitepaper (GA100, 64 FP32 cores per SM)")
_A40 = ("NVIDIA A40 datasheet, https://www.nvidia.com/en-us/data-center/a40/; SMs: NVIDIA Ampere GA102"
        " GPU Architecture whitepaper (128 FP32 cores per SM)")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/a100/; SMs:"
         " NVIDIA A100 Tensor Core GPU Architecture whitepaper")
_L4 = ("NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/; SMs: NVIDIA"
       " Ada GPU Architecture whitepaper (128 FP32 cores per SM)")
_L40S = ("NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/; SMs: NVIDIA Ada"
         " GPU Architecture whitepaper (128 FP32 cores per SM)")
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/; SMs:"
         " NVIDIA H100 Tensor Core GPU Architecture whitepaper")
_H200 = ("NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/; SMs:"
         " the H100 SXM5's (same GH100 configuration, NVIDIA H100 whitepaper)")
_GH200 = ("NVIDIA GH200 Grace Hopper Superchip datasheet (96GB HBM3 version),"
          " https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/; SMs: NVIDIA H100 whitepaper")
_B200 = ("NVIDIA HGX B200 / DGX B200 datasheets (8-GPU figures / 8),"
         " https://www.nvidia.com/en-us/data-center/hgx/, https://www.nvidia.com/en-us/data-center/dgx-b200/")


def _p(**tflops: float) -> Mapping[str, float]:
    assert set(tflops) <= set(PRECISIONS), tflops
    return MappingProxyType({k: float(v) for k, v in tflops.items()})


_AMPERE_TC = dict(fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)  # A100 datasheet, dense
_HOPPER_SXM = dict(fp32=67, tf32=989 / 2, fp16=1979 / 2, bf16=1979 / 2, fp8=3958 / 2, int8=3958 / 2)

_SPECS = (
    # name, GiB, SMs, dense peaks, memory GB/s, NVLink GB/s, host GB/s, generation, MIG, source
    GpuSpec("K80", 12.0, 13, _p(fp32=8.73 / 2), 480.0 / 2, None, 32.0, "kepler", False, _K80,
            "PCIe", ("Tesla K80",)),
    GpuSpec("P100", 16.0, 56, _p(fp32=9.3, fp16=18.7), 732.0, None, 32.0, "pascal", False, _P100,
            "PCIe", ("Tesla P100-PCIE-16GB",),
            assumed="the trace's P100: form factor undisclosed, P100 PCIe 16 GB figures"),
    GpuSpec("P100-SXM2", 16.0, 56, _p(fp32=10.6, fp16=21.2), 732.0, 160.0, 32.0, "pascal", False,
            _P100, "SXM", ("Tesla P100-SXM2-16GB",)),
    GpuSpec("V100M16", 16.0, 80, _p(fp32=15.7, fp16=125), 900.0, 300.0, 32.0, "volta", False, _V100,
            "SXM", ("Tesla V100-SXM2-16GB",),
            assumed="the trace's V100M16: form factor undisclosed, V100 SXM2 16 GB figures"),
    GpuSpec("V100M32", 32.0, 80, _p(fp32=15.7, fp16=125), 900.0, 300.0, 32.0, "volta", False, _V100,
            "SXM", ("Tesla V100-SXM2-32GB",),
            assumed="the trace's V100M32: form factor undisclosed, V100 SXM2 32 GB figures"),
    GpuSpec("V100-PCIE-16GB", 16.0, 80, _p(fp32=14, fp16=112), 900.0, None, 32.0, "volta", False,
            _V100, "PCIe", ("Tesla V100-PCIE-16GB",)),
    GpuSpec("V100-PCIE-32GB", 32.0, 80, _p(fp32=14, fp16=112), 900.0, None, 32.0, "volta", False,
            _V100, "PCIe", ("Tesla V100-PCIE-32GB",)),
    GpuSpec("V100S-PCIE-32GB", 32.0, 80, _p(fp32=16.4, fp16=130), 1134.0, None, 32.0, "volta", False,
            _V100, "PCIe", ("Tesla V100S-PCIE-32GB",)),
    GpuSpec("T4", 16.0, 40, _p(fp32=8.1, fp16=65, int8=130), 320.0, None, 32.0, "turing", False, _T4,
            "PCIe", ("Tesla T4",)),
    # Sia's (SOSP'23) two workstation GPUs: measured training speeds (elastico.perf.training)
    GpuSpec("RTX6000", 24.0, 72, _p(fp32=16.3, fp16=130.5), 672.0, 100.0, 32.0, "turing", False,
            _RTX6000, "PCIe", ("Quadro RTX 6000",)),
    # GeForce: FP16 Tensor with FP32 accumulate runs at half rate (53.8; 107.6 with FP16 accumulate)
    GpuSpec("RTX2080Ti", 11.0, 68, _p(fp32=13.4, fp16=53.8), 616.0, 100.0, 32.0, "turing", False,
            _RTX2080TI, "PCIe", ("NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti")),
    GpuSpec("A10", 24.0, 72, _p(fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250), 600.0, None,
            64.0, "ampere", False, _A10, "PCIe", ("NVIDIA A10",)),
    GpuSpec("A30", 24.0, 56, _p(fp32=10.3, tf32=82, fp16=165, bf16=165, int8=330), 933.0, 200.0,
            64.0, "ampere", True, _A30, "PCIe", ("NVIDIA A30",)),
    GpuSpec("A40", 48.0, 84, _p(fp32=37.4, tf32=74.8, fp16=149.7, bf16=149.7, int8=299.3), 696.0,
            112.5, 64.0, "ampere", False, _A40, "PCIe", ("NVIDIA A40",)),
    # A100 40GB PCIe has the SXM4 40GB's figures (its NVLink bridge also 600 GB/s): one entry
    GpuSpec("A100-40GB", 40.0, 108, _p(**_AMPERE_TC), 1555.0, 600.0, 64.0, "ampere", True, _A100,
            "SXM", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB")),
    GpuSpec("A100-80GB", 80.0, 108, _p(**_AMPERE_TC), 2039.0, 600.0, 64.0, "ampere", True, _A100,
            "SXM", ("NVIDIA A100-SXM4-80GB",)),
    GpuSpec("A100-80GB-PCIE", 80.0, 108, _p(**_AMPERE_TC), 1935.0, 600.0, 64.0, "ampere", True,
            _A100, "PCIe", ("NVIDIA A100 80GB PCIe",)),
    GpuSpec("L4", 24.0, 58, _p(fp32=30.3, tf32=120 / 2, fp16=242 / 2, bf16=242 / 2, fp8=485 / 2,
                               int8=485 / 2), 300.0, None, 64.0, "ada", False, _L4, "PCIe",
            ("NVIDIA L4",)),
    GpuSpec("L40S", 48.0, 142, _p(fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733),
            864.0, None, 64.0, "ada", False, _L40S, "PCIe", ("NVIDIA L40S",)),
    GpuSpec("H100-SXM", 80.0, 132, _p(**_HOPPER_SXM), 3350.0, 900.0, 128.0, "hopper", True, _H100,
            "SXM", ("NVIDIA H100 80GB HBM3",)),
    GpuSpec("H100-PCIE", 80.0, 114, _p(fp32=51, tf32=756 / 2, fp16=1513 / 2, bf16=1513 / 2,
                                       fp8=3026 / 2, int8=3026 / 2),
            2000.0, 600.0, 128.0, "hopper", True, _H100, "PCIe", ("NVIDIA H100 PCIe",)),
    GpuSpec("H100-NVL", 94.0, 132, _p(fp32=60, tf32=835 / 2, fp16=1671 / 2, bf16=1671 / 2,
                                      fp8=3341 / 2, int8=3341 / 2),
            3900.0, 600.0, 128.0, "hopper", True, _H100, "PCIe", ("NVIDIA H100 NVL",)),
    GpuSpec("H200", 141.0, 132, _p(**_HOPPER_SXM), 4800.0, 900.0, 128.0, "hopper", True, _H200,
            "SXM", ("NVIDIA H200",)),
    GpuSpec("GH200", 96.0, 132, _p(**_HOPPER_SXM), 4000.0, 900.0, 900.0, "hopper", True, _GH200,
            "superchip", ("NVIDIA GH200 480GB",)),
    GpuSpec("B200", 180.0, None, _p(fp32=600 / 8, tf32=18000 / 8 / 2, fp16=36000 / 8 / 2,
                                    bf16=36000 / 8 / 2, fp8=72000 / 8 / 2, int8=72000 / 8 / 2),
            64000.0 / 8, 1800.0, None, "blackwell", True, _B200, "SXM", ("NVIDIA B200",),
            assumed="SMs and host interface: not in the datasheets"),
    GpuSpec("G2", 16.0, None, _p(), None, None, None, "unknown", False,
            "Alibaba cluster trace v2023 (anonymised model: no datasheet)", "", (),
            assumed="undisclosed model: 16 GiB ASSUMED (smallest disclosed size of its cluster); "
                    "every other figure unknown"),
    GpuSpec("G3", 16.0, None, _p(), None, None, None, "unknown", False,
            "Alibaba cluster trace v2023 (anonymised model: no datasheet)", "", (),
            assumed="undisclosed model: 16 GiB ASSUMED (smallest disclosed size of its cluster); "
                    "every other figure unknown"),
)

#: ElastiCo model name -> :class:`GpuSpec`.
GPUS: Mapping[str, GpuSpec] = MappingProxyType({s.name: s for s in _SPECS})

#: Other ElastiCo spellings -> the :data:`GPUS` key they name.  ``H100-80GB`` (the cluster
#: files', throughput model's and MIG table's name: the SXM5 part, whose figures the throughput
#: model always used), ``H100-94GB`` / ``H100-96GB`` (the MIG user guide's "H100 94GB" and
#: "H100 96GB (H100 on GH200)" tables; the 94 GB part NVIDIA sells is the H100 NVL).
ALIASES: Mapping[str, str] = MappingProxyType({
    "P100-PCIE-16GB": "P100", "P100-SXM2-16GB": "P100-SXM2",
    "V100-SXM2-16GB": "V100M16", "V100-SXM2-32GB": "V100M32",
    "A100-SXM4-40GB": "A100-40GB", "A100-PCIE-40GB": "A100-40GB",
    "A100-SXM4-80GB": "A100-80GB", "A100-PCIE-80GB": "A100-80GB-PCIE",
    "H100-80GB": "H100-SXM", "H100-SXM5": "H100-SXM", "H100-94GB": "H100-NVL",
    "H100-96GB": "GH200", "H200-141GB": "H200",
})

_NVML: Mapping[str, str] = MappingProxyType({n: s.name for s in _SPECS for n in s.nvml_names})


def gpu_spec(name: str) -> GpuSpec:
    """The :class:`GpuSpec` of ``name``: an ElastiCo model name (a :data:`GPUS` key or an
    :data:`ALIASES` spelling) or an exact NVML product name.  InvalidArgument (field ``gpu``,
    the value, the known names) otherwise."""
    if isinstance(name, str):
        key = name if name in GPUS else ALIASES.get(name) or _NVML.get(name)
        if key is not None:
            return GPUS[key]
    raise InvalidArgument("gpu", name, "a GPU model of the catalogue: "
                          + ", ".join(sorted(GPUS) + sorted(ALIASES))
                          + " (or an NVML product name such as 'NVIDIA A100-SXM4-80GB')")


def find_gpu_name(name: str) -> str:
    """A GPU name a user typed (``elastico llm --gpu``), in the catalogue's spelling: ``name``
    itself when :func:`gpu_spec` knows it, else the one catalogue model, alias or NVML product
    name that equals it ignoring case and surrounding spaces (``a100-80gb`` -> ``A100-80GB``);
    otherwise ``name`` unchanged, so that :func:`gpu_spec` raises its own error.  As
    :func:`elastico.perf.llm.find_llm_model` is for model names; not for internal look-ups."""
    if not isinstance(name, str) or name in GPUS or name in ALIASES or name in _NVML:
        return name
    folded = name.strip().casefold()
    same = [n for n in (*GPUS, *ALIASES, *_NVML) if n.casefold() == folded]
    return same[0] if len(same) == 1 else name


def gpu_specs(names: Iterable[str]) -> tuple[GpuSpec, ...]:
    """:func:`gpu_spec` of each name."""
    return tuple(gpu_spec(n) for n in names)


#: Memory of one GPU in GiB per ElastiCo model name (every :data:`GPUS` key and
#: :data:`ALIASES` spelling), derived from the catalogue.
GPU_MEMORY_GIB: Mapping[str, float] = MappingProxyType(
    {**{n: s.memory_gib for n, s in GPUS.items()},
     **{a: GPUS[k].memory_gib for a, k in ALIASES.items()}})

#: NVML product names (``nvmlDeviceGetName``) -> the GPU model names the scheduler places them
#: as (:data:`SCHEDULER_NAMES`): every catalogue product's NVML names (:attr:`GpuSpec.nvml_names`)
#: as its catalogue key (the MIG tables' spelling for H100 SXM / NVL and GH200), except the
#: trace's classes, which keep their pools (a V100 PCIe joins the V100M16 / V100M32 pool, an
#: A100 80GB PCIe the A100-80GB one).  Exact strings only: a name not listed must be written by
#: the node agent in ElastiCo's own spelling (e.g. ``A100-40GB``), never guessed from a
#: substring.  Every key is a catalogue NVML name (tested).
_TRACE_POOLS: Mapping[str, str] = {
    "Tesla P100-PCIE-16GB": "P100", "Tesla P100-SXM2-16GB": "P100",
    "Tesla V100-SXM2-16GB": "V100M16", "Tesla V100-PCIE-16GB": "V100M16",
    "Tesla V100-SXM2-32GB": "V100M32", "Tesla V100-PCIE-32GB": "V100M32",
    "Tesla V100S-PCIE-32GB": "V100M32",
    "Tesla T4": "T4", "NVIDIA A10": "A10",
    "NVIDIA A100-SXM4-40GB": "A100-40GB", "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA A100 80GB PCIe": "A100-80GB",
}

#: The spelling a catalogue model is placed as where it is not its :data:`GPUS` key: the MIG
#: tables' names (:data:`elastico.mig.MIG_PROFILES`, the MIG user guide's "H100 80GB",
#: "H100 94GB", "H100 96GB"), so a node of those GPUs in MIG mode finds its profile table.
_PLACED_AS: Mapping[str, str] = {"H100-SXM": "H100-80GB", "H100-NVL": "H100-94GB",
                                 "GH200": "H100-96GB"}

#: Every ElastiCo spelling of a catalogue GPU -- each :data:`GPUS` key, then each
#: :data:`ALIASES` spelling -- in catalogue order: the GPU models the scheduler places on
#: (:data:`elastico.perf.throughput.SCHEDULER_GPU_MODELS` is this; the training speed model
#: predicts each, the LLM model each with a 16-bit peak and a bandwidth).
SCHEDULER_NAMES: tuple[str, ...] = tuple(GPUS) + tuple(ALIASES)

NVML_NAMES: Mapping[str, str] = MappingProxyType({
    **{n: _PLACED_AS.get(s.name, s.name) for s in _SPECS for n in s.nvml_names},
    **_TRACE_POOLS,
})


def gpu_model_name(name: str, known: Iterable[str]) -> str | None:
    """ElastiCo's name of a GPU model reported as ``name`` (itself when known, else the
    :data:`NVML_NAMES` entry when that is known), or None."""
    known = set(known)
    if name in known:
        return name
    mapped = NVML_NAMES.get(name)
    return mapped if mapped in known else None
