"""Run profiles: how many cases, how big, and how hard each check pushes.

ci        derandomized (seed 0): the same cases on every run, within the CI budget
          (all CPU subjects in under 10 minutes on a 2-core machine)
dev       the whole curated edge matrix plus random draws with a fresh seed each run
thorough  nightly: bigger shapes, many more draws, longer leak runs
"""

from __future__ import annotations

import dataclasses

from kernels.hardware.gpu_chips import DEFAULT_GPU_TARGETS
from kernels.hardware.tpu_chips import DEFAULT_TPU_TARGETS


@dataclasses.dataclass(frozen=True)
class Profile:
    """edge_level: curated cases up to this level (0 core, 1 dev, 2 thorough).
    drawn_cases: hypothesis-drawn cases per subject, from what it declares.
    lengths/head_dims/max_batch/max_kv_heads: the space the draws come from.
    runtime_cases_per_dtype: cases per (subject, dtype) for determinism and recompilation.
    leak_calls: calls per leak measurement. shrink_seconds: budget per session for shrinking.
    derandomize: fixed seed 0 unless one is given. all_variants: subjects with options that
    ``--impl all`` adds (kernels/contract/subject_spec.py)."""

    name: str
    edge_level: int
    drawn_cases: int
    lengths: tuple[int, ...]
    head_dims: tuple[int, ...]
    max_batch: int
    max_kv_heads: int
    runtime_cases_per_dtype: int
    leak_calls: int
    shrink_seconds: float
    derandomize: bool
    # Variants ``--impl all`` adds in this profile: costly ones (TPU interpret mode runs a kernel
    # several times slower than the generic interpreter) only where there is time for them.
    all_variants: tuple[str, ...] = ()
    # Members of a family (``--impl tokamax``: one subject per implementation) that ``--impl all``
    # keeps in this profile; empty keeps every member. ``--impl tokamax`` always runs them all.
    family_in_all: tuple[str, ...] = ()
    # Drawn cases also draw a config of the subject's tunables (``ci`` keeps the defaults
    # for its draws: its edge configs come from the curated matrix).
    draw_configs: bool = False
    # TPU chips the vmem check budgets for (``--tpu``; kernels/hardware/tpu_chips.py).
    tpu_targets: tuple[str, ...] = DEFAULT_TPU_TARGETS
    # GPUs the smem check budgets for (``--gpu``; kernels/hardware/gpu_chips.py).
    gpu_targets: tuple[str, ...] = DEFAULT_GPU_TARGETS


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "ci",
            0,
            3,
            (1, 7, 64, 113, 128, 129, 256),
            (32, 64, 128),
            2,
            2,
            1,
            12,
            60.0,
            True,
            # Each tokamax implementation costs about 2 to 5 minutes of ci on 2 cores (XLA compiles
            # per shape; the kernels interpret); `all` keeps the XLA one, which covers tokamax's API
            # layer natively, and the GPU ones (unavailable here: free), within the +3 minute budget.
            # The interpreted kernels join `all` in dev and thorough, and `--impl tokamax` runs them.
            # tokamax's splash likewise: its XLA implementation (base) natively, its Mosaic TPU one
            # (TPU interpret mode) in dev and thorough and through `--impl tokamax_splash`.
            family_in_all=(
                "tokamax[impl=xla]",
                "tokamax[impl=mosaic_gpu]",
                "tokamax[impl=cudnn]",
                "tokamax_splash[impl=base]",
            ),
        ),
        Profile(
            "dev",
            1,
            30,
            (1, 7, 64, 113, 127, 128, 129, 200, 256, 384, 512),
            (32, 64, 96, 128, 256),
            3,
            2,
            2,
            20,
            300.0,
            False,
            draw_configs=True,
        ),
        Profile(
            "thorough",
            2,
            200,
            (1, 7, 64, 113, 127, 128, 129, 200, 256, 384, 512, 1000, 1024, 2048),
            (16, 32, 64, 96, 128, 192, 256),
            4,
            4,
            4,
            40,
            1800.0,
            False,
            ("tpu_flash[interpreter=tpu]", "splash[interpreter=tpu]", "paged_attention[kv=int8]"),
            draw_configs=True,
        ),
    )
}


def get(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose from {sorted(PROFILES)}")
    return PROFILES[name]
