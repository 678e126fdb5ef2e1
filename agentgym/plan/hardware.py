"""GPUs and links as data: the peak numbers the time model divides by.

:data:`GPUS` holds one :class:`GpuSpec` per accelerator the planner knows (H100, H800,
H200, H20, A100), with the dense (no sparsity) peak tensor throughput in bf16 and fp8,
the HBM bandwidth and the NVLink bandwidth per direction, from NVIDIA's data sheets (SXM
parts). :class:`Cluster` adds how many GPUs a node holds and the inter-node fabric per
GPU. Efficiencies (what share of a peak a real kernel reaches) are not here: they are
stated assumptions in :class:`~agentgym.plan.settings.Efficiency`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym import ConfigError, UnknownNameError


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator's peak numbers (dense, per GPU).

    Attributes:
        name: short name (``h100``).
        bf16_tflops: peak dense bf16 tensor-core throughput, TFLOP/s.
        fp8_tflops: peak dense fp8 throughput, TFLOP/s; ``None`` where the GPU has no fp8
            tensor cores (fp8 weights are then converted and multiplied in bf16).
        hbm_tbps: HBM bandwidth, TB/s (10**12 bytes).
        memory_gb: HBM capacity, GB (10**9 bytes), for reference; the planner's memory
            budget is ``plan.gpu_mem_gib``.
        nvlink_gbps: NVLink bandwidth per GPU and direction, GB/s.
        network_gbit: the usual inter-node NIC per GPU, Gbit/s (a default for
            ``plan.network_gbit``).
        source: where the numbers come from.
    """

    name: str
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_tbps: float
    memory_gb: float
    nvlink_gbps: float
    network_gbit: float = 400.0
    source: str = ""

    def flops(self, dtype: str) -> float:
        """Peak FLOP/s for matrix products whose weights are ``dtype``.

        fp8 uses the fp8 tensor cores where the GPU has them; int4 (weight-only) and
        everything else run in bf16.
        """
        if dtype == "fp8" and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12


#: the accelerators the planner knows; numbers are dense peaks from NVIDIA data sheets
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("h100", 989.4, 1978.9, 3.35, 80, 450, 400, "NVIDIA H100 SXM data sheet (dense)"),
        GpuSpec(
            "h800",
            989.4,
            1978.9,
            3.35,
            80,
            200,
            400,
            "H100 compute with NVLink cut to 400 GB/s both ways (DeepSeek-V3 report, sec. 3.1)",
        ),
        GpuSpec("h200", 989.4, 1978.9, 4.8, 141, 450, 400, "NVIDIA H200 SXM data sheet (dense)"),
        GpuSpec("h20", 148.0, 296.0, 4.0, 96, 450, 400, "NVIDIA H20 product brief (dense)"),
        GpuSpec("a100", 312.0, None, 2.039, 80, 300, 200, "NVIDIA A100 SXM 80GB data sheet"),
    )
}


def gpu_spec(name: str) -> GpuSpec:
    """The :class:`GpuSpec` called ``name`` (case-insensitive), with "did you mean"."""
    key = name.lower().replace("-", "").replace(" ", "")
    if key not in GPUS:
        raise UnknownNameError("GPU", name, GPUS, hint="(plan.gpu)")
    return GPUS[key]


@dataclass(frozen=True)
class Cluster:
    """The machine a plan runs on: the GPU, how GPUs group into nodes, and the fabric.

    Attributes:
        gpu: the accelerator.
        gpus: GPUs of the run.
        gpus_per_node: GPUs joined by NVLink in one node.
        network_gbit: inter-node bandwidth per GPU and direction, Gbit/s (one NIC per GPU).
    """

    gpu: GpuSpec
    gpus: int
    gpus_per_node: int = 8
    network_gbit: float = 400.0

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.gpus < 1:
            raise ConfigError("plan.gpus and plan.gpus_per_node must be positive.")
        if self.network_gbit <= 0:
            raise ConfigError(f"plan.network_gbit must be > 0, got {self.network_gbit}.")

    @property
    def nodes(self) -> int:
        """Nodes of the run (a partly filled last node counts)."""
        return -(-self.gpus // self.gpus_per_node)

    @property
    def network_bytes_per_s(self) -> float:
        """Inter-node bandwidth per GPU and direction, bytes/s."""
        return self.network_gbit * 1e9 / 8

    @property
    def nvlink_bytes_per_s(self) -> float:
        """NVLink bandwidth per GPU and direction, bytes/s."""
        return self.gpu.nvlink_gbps * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth, bytes/s."""
        return self.gpu.hbm_tbps * 1e12

    def spans_nodes(self, group: int) -> bool:
        """Whether a group of ``group`` consecutive ranks leaves one node."""
        return group > self.gpus_per_node
