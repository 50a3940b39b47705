"""kernels/hardware/lowering.py and kernels/hardware/tpu_chips.py: what a lowered Pallas call is read as."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from kernels.hardware.lowering import LoweringCall, lower, tile_padded_bytes, traced_kernels, vmem_footprint
from kernels.hardware.tpu_chips import MIB, parse_targets, vmem_budget


def test_tile_padding_rounds_rows_to_the_sublane_tile_and_lanes_to_128():
    assert tile_padded_bytes((8, 128), 4) == 8 * 128 * 4
    assert tile_padded_bytes((1, 64), 4) == 8 * 128 * 4  # one row still takes a whole tile
    assert tile_padded_bytes((9, 129), 2) == 16 * 256 * 2  # bfloat16 packs 16 rows a tile
    assert tile_padded_bytes((3, 8, 128), 1) == 3 * 32 * 128  # int8: 32 rows a tile


def test_budget_is_the_smallest_among_targets_and_honours_a_kernels_own_limit():
    assert vmem_budget(("v5e", "v6e"), None)[1] == 16 * MIB
    assert vmem_budget(("v6e",), None)[1] == 32 * MIB
    assert vmem_budget(("v5e",), 100 * MIB)[1] == 100 * MIB
    assert vmem_budget(("v4", "v5e"), 100 * MIB)[:2] == ("v4", 16 * MIB)


def test_an_unknown_chip_is_one_line_naming_the_choices():
    with pytest.raises(ValueError, match="unknown chip.*v5e"):
        parse_targets("v9z")


def _copy(rows, estimate):
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def fn(x):
        spec = pl.BlockSpec((rows, 128), lambda i: (i, 0))
        extra = {"cost_estimate": pl.CostEstimate(flops=7, transcendentals=0, bytes_accessed=9)}
        return pl.pallas_call(
            kernel,
            grid=(x.shape[0] // rows,),
            in_specs=[spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            **(extra if estimate else {}),
        )(x)

    return fn


def test_a_legal_kernel_lowers_with_its_name_cost_and_vmem():
    lowering = lower(LoweringCall("tpu", _copy(128, True), (jax.ShapeDtypeStruct((256, 128), jnp.float32),)))
    assert lowering.lowered, lowering.error
    (kernel,) = lowering.kernels
    assert kernel.name == "kernel" and kernel.cost["flops"] == 7 and kernel.cost["bytes_accessed"] == 9
    (footprint,) = lowering.footprints
    assert footprint.blocks == 2 * 2 * 128 * 128 * 4 and footprint.scratch == 0  # in + out, two buffers


def test_a_block_mosaic_cannot_tile_does_not_lower_and_the_error_is_kept():
    lowering = lower(LoweringCall("tpu", _copy(100, False), (jax.ShapeDtypeStruct((200, 128), jnp.float32),)))
    assert not lowering.lowered
    assert "divisible by 8 and 128" in lowering.error


def test_without_a_cost_estimate_the_kernel_carries_none():
    lowering = lower(LoweringCall("tpu", _copy(128, False), (jax.ShapeDtypeStruct((256, 128), jnp.float32),)))
    assert lowering.lowered and lowering.kernels[0].cost.get("flops", 0) == 0


def test_the_chip_table_in_the_docs_is_the_one_in_the_code():
    from pathlib import Path

    from kernels.hardware.tpu_chips import MIB, TPU_CHIPS

    text = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| TPU ")]
    expected = [
        f"| {c.name} | {key} | {c.device_kind} | {c.vmem // MIB} MiB | {c.scoped // MIB} MiB |"
        for key, c in TPU_CHIPS.items()
    ]
    assert rows == expected


# --- the traced pallas_calls: grid and block shapes (traced_kernels) -----------------------------


def _two_operand_kernel(x, y):
    """A kernel with known specs: x in (8, 128) row blocks, y whole with its leading dim squeezed,
    a 2-D grid, named ``sum_rows``, in the generic interpreter."""
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    return pl.pallas_call(
        kernel,
        grid=(x.shape[0] // 8, 2),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            pl.BlockSpec((None, 8, 128), lambda i, j: (j, 0, 0)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
        name="sum_rows",
    )(x, y)


def test_the_reader_sees_each_block_shape_grid_and_name_as_traced():
    x, y = jnp.zeros((32, 128), jnp.float32), jnp.zeros((2, 8, 128), jnp.float32)
    (kernel,) = traced_kernels(jax.make_jaxpr(_two_operand_kernel)(x, y))
    assert kernel.name == "sum_rows" and kernel.grid == (4, 2)
    assert [b.origin for b in kernel.blocks] == ["args[0]", "args[1]", "outputs"]
    assert kernel.block("args[0]").block_shape == (8, 128)
    assert kernel.block("args[0]").array_shape == (32, 128)
    assert kernel.block("args[1]").block_shape == (1, 8, 128)  # the squeezed dim counts 1
    assert kernel.block("args[1]").array_shape == (2, 8, 128)
    assert kernel.block("args[7]") is None
    assert jnp.array_equal(_two_operand_kernel(x + 1, y), jnp.ones((32, 128)))  # it runs as traced


def test_an_unnamed_kernel_is_named_by_its_function_and_a_call_without_one_traces_none():
    fn = _copy(64, False)
    (kernel,) = traced_kernels(jax.make_jaxpr(fn)(jnp.zeros((256, 128), jnp.float32)))
    assert kernel.name == "kernel" and kernel.grid == (4,)
    assert kernel.block("args[0]").block_shape == (64, 128)
    assert traced_kernels(jax.make_jaxpr(lambda x: x * 2)(jnp.zeros(3))) == ()


def test_a_call_the_hardware_rejects_keeps_what_it_traced():
    lowering = lower(LoweringCall("tpu", _copy(100, False), (jax.ShapeDtypeStruct((200, 128), jnp.float32),)))
    assert not lowering.lowered
    (kernel,) = lowering.traced
    assert kernel.block("args[0]").block_shape == (100, 128) and kernel.grid == (2,)


def test_the_vmem_estimate_reads_the_same_trace():
    lowering = lower(LoweringCall("tpu", _copy(128, True), (jax.ShapeDtypeStruct((256, 128), jnp.float32),)))
    assert lowering.footprints == (vmem_footprint(lowering.traced[0]),)
    assert lowering.footprints[0].name == lowering.traced[0].name == "kernel"
