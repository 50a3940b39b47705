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
from kernels.subjects import checked_tier


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """name: the profile, and the cost tier whose variants ``--impl all`` runs here, with every
    cheaper one's (``kernels/subjects.py``: ``TIERS``, each variant's ``tier``).
    edge_level: curated cases up to this level (0 core, 1 dev, 2 thorough).
    drawn_cases: hypothesis-drawn cases per subject, from what it declares.
    lengths/head_dims/max_batch/max_kv_heads: the space the draws come from.
    runtime_cases_per_dtype: cases per (subject, dtype) for determinism and recompilation.
    leak_calls: calls per leak measurement. shrink_seconds: budget per session for shrinking.
    derandomize: fixed seed 0 unless one is given."""

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
    # Drawn cases also draw a config of the subject's tunables (``ci`` keeps the defaults
    # for its draws: its edge configs come from the curated matrix).
    draw_configs: bool = False
    # TPU chips the vmem check budgets for (``--tpu``; kernels/hardware/tpu_chips.py).
    tpu_targets: tuple[str, ...] = DEFAULT_TPU_TARGETS
    # GPUs the smem check budgets for (``--gpu``; kernels/hardware/gpu_chips.py).
    gpu_targets: tuple[str, ...] = DEFAULT_GPU_TARGETS

    def __post_init__(self) -> None:
        checked_tier(self.name)  # a profile is a cost tier: --impl all selects variants by it


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="ci",
            edge_level=0,
            drawn_cases=3,
            lengths=(1, 7, 64, 113, 128, 129, 256),
            head_dims=(32, 64, 128),
            max_batch=2,
            max_kv_heads=2,
            runtime_cases_per_dtype=1,
            leak_calls=12,
            shrink_seconds=60.0,
            derandomize=True,
        ),
        Profile(
            name="dev",
            edge_level=1,
            drawn_cases=30,
            lengths=(1, 7, 64, 113, 127, 128, 129, 200, 256, 384, 512),
            head_dims=(32, 64, 96, 128, 256),
            max_batch=3,
            max_kv_heads=2,
            runtime_cases_per_dtype=2,
            leak_calls=20,
            shrink_seconds=300.0,
            derandomize=False,
            draw_configs=True,
        ),
        Profile(
            name="thorough",
            edge_level=2,
            drawn_cases=200,
            lengths=(1, 7, 64, 113, 127, 128, 129, 200, 256, 384, 512, 1000, 1024, 2048),
            head_dims=(16, 32, 64, 96, 128, 192, 256),
            max_batch=4,
            max_kv_heads=4,
            runtime_cases_per_dtype=4,
            leak_calls=40,
            shrink_seconds=1800.0,
            derandomize=False,
            draw_configs=True,
        ),
    )
}


def get(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose from {sorted(PROFILES)}")
    return PROFILES[name]
