"""The shared memory estimate of Pallas Triton kernels (``kernels/hardware/shared_memory.py``),
on kernels made by hand and on JAX's Pallas Triton attention at the shapes a native H200 run
measured, and the GPU table the ``smem`` check budgets against (``kernels/hardware/gpu_chips.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from kernels.hardware.gpu_chips import GPU_CHIPS, parse_gpu_targets, smallest_shared_memory
from kernels.hardware.lowering import lower, shared_memory_footprints
from kernels.hardware.shared_memory import DEFAULT_NUM_STAGES, num_stages
from reference.spec import AttentionSpec
from tests.kernels.cases import make_inputs

ROWS, COLS = 32, 64  # a (32, 64) float32 tile: 8192 bytes
TILE = ROWS * COLS * 4


def _matmul_kernel(steps: int, *, loop: str = "static", rhs: str = "loaded", twice: bool = False):
    """A Triton kernel summing x @ w_i.T over ``steps`` chunks w_i of w's rows: each chunk, a
    loaded (ROWS, COLS) tile, is the dot's right-hand operand inside the loop."""
    from jax.experimental import pallas as pl

    def kernel(x_ref, w_ref, o_ref):
        x = x_ref[...]

        def body(i, acc):
            w = w_ref[pl.ds(i * ROWS, ROWS), :]
            if rhs == "computed":
                w = jnp.exp(w)  # made in registers: nothing staged from a load
            part = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))
            if twice:
                part = part + jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))
            return acc + part

        start = jnp.zeros((ROWS, ROWS), jnp.float32)
        if loop == "dynamic":  # a bound read at run time: a while loop
            upper = steps + jnp.minimum(pl.program_id(0), 0)
            o_ref[...] = jax.lax.fori_loop(0, upper, body, start)
        else:  # a scan of static length (what fori_loop makes of static bounds above one step)

            def step(carry, _):
                i, acc = carry
                return (i + 1, body(i, acc)), None

            o_ref[...] = jax.lax.scan(step, (0, start), None, length=steps)[0][1]

    return kernel


def _footprint(steps: int, stages: int | None = 2, **options):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    call = pl.pallas_call(
        _matmul_kernel(steps, **options),
        out_shape=jax.ShapeDtypeStruct((ROWS, ROWS), jnp.float32),
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=stages),
        grid=(1,),
        name="hand_made",
    )
    x = jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)
    w = jax.ShapeDtypeStruct((ROWS * steps, COLS), jnp.float32)
    (footprint,) = shared_memory_footprints(jax.make_jaxpr(call)(x, w))
    return footprint


def test_a_loaded_right_operand_in_a_loop_of_several_steps_is_staged_once_per_pipeline_stage():
    footprint = _footprint(4, stages=3)
    assert footprint.name == "hand_made" and footprint.num_stages == 3
    assert footprint.total == 3 * TILE
    assert footprint.explain() == f"32x64 tile ({TILE} B) x3"


def test_a_kernel_that_names_no_stages_gets_pallas_cuda_default():
    assert _footprint(4, stages=None).total == DEFAULT_NUM_STAGES * TILE
    assert num_stages(None) == DEFAULT_NUM_STAGES == 3
    assert num_stages({"triton": {"num_stages": 5}}) == 5  # the dict older JAX versions take


def test_a_loop_of_one_step_is_not_pipelined():
    assert _footprint(1, stages=3).total == TILE


def test_a_loop_bounded_at_run_time_counts_one_tile():
    assert _footprint(4, stages=3, loop="dynamic").total == TILE


def test_an_operand_made_in_registers_takes_no_shared_memory():
    assert _footprint(4, stages=3, rhs="computed").total == 0


def test_a_tile_read_by_two_dots_counts_once():
    assert _footprint(4, stages=2, twice=True).total == 2 * TILE


@pytest.fixture(scope="module")
def pallas_gpu():
    from kernels.adapters.pallas_gpu import PallasGpuAdapter

    return PallasGpuAdapter()


def _forward_bytes(adapter, sk: int, d: int, causal: bool = False) -> int:
    inputs = make_inputs(5, b=1, hq=2, hkv=2, sq=sk, sk=sk, d=d)
    lowering = lower(adapter.lowering(inputs, AttentionSpec(causal=causal), "forward"))
    assert lowering.lowered, lowering.error
    (footprint,) = lowering.shared_memory
    return footprint.total


def test_jax_pallas_triton_attention_asks_what_the_h200_reported(pallas_gpu):
    """Native, H200, JAX 0.11.2: float32, head dim 96 (padded to 128), kv 256, default blocks asked
    262144 bytes of 232448; kv 128 compiled; so did the causal cases at head dim 128."""
    h200 = GPU_CHIPS["h200"].shared_memory
    assert h200 == 232448
    assert _forward_bytes(pallas_gpu, 256, 96) == 262144 > h200
    assert _forward_bytes(pallas_gpu, 128, 96) <= h200
    assert _forward_bytes(pallas_gpu, 128, 128, causal=True) <= h200
    assert _forward_bytes(pallas_gpu, 256, 32) <= h200


def test_a_tpu_lowering_has_no_shared_memory_estimate():
    from tests.mutants.lowering import LoweringCopy

    inputs = make_inputs(5, b=1, hq=1, hkv=1, sq=128, sk=128, d=64)
    lowering = lower(LoweringCopy().lowering(inputs, AttentionSpec(causal=True), "forward"))
    assert lowering.lowered and lowering.footprints and lowering.shared_memory == ()


def test_the_gpu_targets_and_their_smallest_budget():
    assert parse_gpu_targets(" H100, a100,h100") == ("h100", "a100")
    assert smallest_shared_memory(("h100", "a100")) == ("a100", 163 * 1024)
    with pytest.raises(ValueError, match=r"--gpu 'v100': unknown GPU\(s\) \['v100'\]; choose from a100"):
        parse_gpu_targets("v100")
    with pytest.raises(ValueError, match="none given"):
        parse_gpu_targets(" , ")


def test_a_smaller_head_dim_stages_smaller_tiles(pallas_gpu):
    """D=64, kv 256, default 128-row blocks, 2 stages: k and v tiles of 128 x 64 float32, twice each."""
    assert _forward_bytes(pallas_gpu, 256, 64) == 2 * 2 * 128 * 64 * 4


def test_the_gpu_table_in_the_docs_is_the_one_in_the_code():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "KiB) |" in line]
    expected = [
        f"| {c.name} | {key} | {c.compute_capability} | {c.shared_memory} ({c.shared_memory // 1024} KiB) |"
        for key, c in GPU_CHIPS.items()
    ]
    assert rows == expected
