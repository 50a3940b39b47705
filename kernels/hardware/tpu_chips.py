"""TPU chips a user can target (``--tpu``), and the VMEM each gives a kernel: the one table.

``vmem``: VMEM per TensorCore, as JAX's own chip table states it
(``jax/_src/pallas/mosaic/tpu_info.py``, JAX 0.10.2). ``scoped``: the compiler's default
scoped-VMEM limit, what a kernel gets when its ``CompilerParams`` set no ``vmem_limit_bytes``
(XLA's ``xla_tpu_scoped_vmem_limit_kib`` default). A kernel that sets its own limit gets that
much, up to the chip's VMEM. docs/hardware.md renders this table.
"""

from __future__ import annotations

import dataclasses

from kernels.contract.target_list import parse_target_list

MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class TpuChip:
    name: str
    device_kind: str  # what jax.devices()[0].device_kind reports on it
    vmem: int
    scoped: int


TPU_CHIPS: dict[str, TpuChip] = {
    "v4": TpuChip("TPU v4", "TPU v4", 16 * MIB, 16 * MIB),
    "v5e": TpuChip("TPU v5e", "TPU v5 lite", 128 * MIB, 16 * MIB),
    "v5p": TpuChip("TPU v5p", "TPU v5", 64 * MIB, 16 * MIB),
    "v6e": TpuChip("TPU v6e", "TPU v6 lite", 128 * MIB, 32 * MIB),
    "v7x": TpuChip("TPU v7x", "TPU7x", 64 * MIB, 32 * MIB),
}
# The most common target: v5e, whose 16 MiB scoped default is also v4's and v5p's.
DEFAULT_TPU_TARGETS: tuple[str, ...] = ("v5e",)


def parse_targets(text: str) -> tuple[str, ...]:
    """``"v5e,v6e"`` -> ("v5e", "v6e"); a one-line ValueError naming the chips otherwise."""
    return parse_target_list(text, TPU_CHIPS, "--tpu", "chip", "v5e,v6e")


def vmem_budget(targets: tuple[str, ...], kernel_limit: int | None) -> tuple[str, int, str]:
    """(chip, bytes, why) of the smallest VMEM a kernel gets among ``targets``: its own
    ``vmem_limit_bytes`` capped by the chip's VMEM, else the chip's scoped default."""
    options = []
    for key in targets:
        chip = TPU_CHIPS[key]
        if kernel_limit is None:
            options.append((chip.scoped, key, "its scoped default; the kernel sets no vmem_limit_bytes"))
        elif kernel_limit > chip.vmem:
            options.append((chip.vmem, key, f"its VMEM; the kernel asks for {kernel_limit / MIB:.0f} MiB"))
        else:
            options.append((kernel_limit, key, "the kernel's own vmem_limit_bytes"))
    budget, key, why = min(options)
    return key, budget, why
