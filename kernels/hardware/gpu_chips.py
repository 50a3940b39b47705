"""NVIDIA GPUs a user can target (``--gpu``), and the shared memory each gives one kernel: the one table.

``shared_memory``: the most shared memory one thread block may use, with the opt-in a Triton
kernel makes (CUDA's ``cudaDevAttrMaxSharedMemoryPerBlockOptin``; the CUDA C programming guide's
table of compute capabilities). Triton refuses to compile a kernel that needs more ("Shared
memory size limit exceeded ... Reducing block sizes or `num_stages` may help"). The H200 run of
``scripts/device-bench`` reported exactly this number for Hopper: 232448 bytes available.
docs/hardware.md renders this table.
"""

from __future__ import annotations

import dataclasses

from kernels.contract.target_list import parse_target_list

KIB = 1024


@dataclasses.dataclass(frozen=True)
class GpuChip:
    name: str
    compute_capability: str
    shared_memory: int


GPU_CHIPS: dict[str, GpuChip] = {
    "a100": GpuChip("A100", "8.0", 163 * KIB),
    "l4": GpuChip("L4", "8.9", 99 * KIB),
    "h100": GpuChip("H100", "9.0", 227 * KIB),
    "h200": GpuChip("H200", "9.0", 227 * KIB),
    "b200": GpuChip("B200", "10.0", 227 * KIB),
}
# Hopper: the GPUs JAX's Mosaic GPU kernels and tokamax's autotuned configs are tuned for.
DEFAULT_GPU_TARGETS: tuple[str, ...] = ("h100",)


def parse_gpu_targets(text: str) -> tuple[str, ...]:
    """``"h100,a100"`` -> ("h100", "a100"); a one-line ValueError naming the GPUs otherwise."""
    return parse_target_list(text, GPU_CHIPS, "--gpu", "GPU", "h100,a100")


def smallest_shared_memory(targets: tuple[str, ...]) -> tuple[str, int]:
    """(GPU, bytes) of the least shared memory per block among ``targets``."""
    return min(((key, GPU_CHIPS[key].shared_memory) for key in targets), key=lambda pair: pair[1])
