"""The config_applied check's comparison (``conformance/judge/checks/config.py``) on traced kernels
made by hand, and the declaration it reads (``Tunable.blocks``)."""

from __future__ import annotations

import pytest

from conformance.judge.checks.config import compare, unnamed_operands
from kernels.contract.tunables import BlockDim, Tunable, Tunables
from kernels.hardware.lowering import TracedBlock, TracedKernel

TUNABLES = Tunables(
    (
        Tunable("block_q", 128, "q", blocks=(BlockDim("fwd", "args[0]", 2),)),
        Tunable("block_k", 128, "kv"),  # a loop step: no block shows it
        Tunable("pages", 4, "kv", unit=16, blocks=(BlockDim("fwd", "args[1]", 1),)),
        Tunable("block_q_dq", 128, "q", True, blocks=(BlockDim("dq", "outputs[0]", 0),)),
        Tunable("layout", "A", "choice", choices=("A", "B")),
        Tunable(
            "block_kv",
            128,
            "kv",
            blocks=(
                BlockDim("fwd", "args[2]", 1, when=(("layout", "A"),)),
                BlockDim("fwd", "args[2]", 2, when=(("layout", "B"),)),
            ),
        ),
    )
)


def _block(origin, block, array):
    return TracedBlock(origin, block, array, block, 4, "vmem", 2)


def _forward(block_q=64, kv_block=(1, 128, 64), pages_rows=64, name="attention_fwd_kernel"):
    return TracedKernel(
        name,
        (1, 4),
        (
            _block("args[0]", (1, 1, block_q, 64), (1, 1, 256, 64)),
            _block("args[1]", (1, pages_rows, 64), (1, 256, 64)),
            _block("args[2]", kv_block, (1, 256, 64)),
        ),
    )


def _dq(rows=32):
    return TracedKernel("attention_dq", (8,), (_block("outputs[0]", (rows, 64), (256, 64)),))


def test_a_kernel_tiled_as_asked_passes_and_says_what_it_read():
    problems, notes = compare(TUNABLES, (("block_q", 64),), {"forward": (_forward(),)})
    assert problems == [] and notes == ["block_q=64 in 1 block(s)"]


def test_a_kernel_tiled_by_its_default_fails_naming_both_sizes():
    problems, _ = compare(TUNABLES, (("block_q", 64),), {"forward": (_forward(block_q=128),)})
    (problem,) = problems
    assert "block_q=64" in problem and "tiles args[0] by 128" in problem and "requested 64" in problem


def test_every_traced_kernel_of_the_name_must_agree_across_directions():
    traces = {"forward": (_forward(),), "backward": (_forward(block_q=128), _dq())}
    problems, _ = compare(TUNABLES, (("block_q", 64),), traces)
    assert len(problems) == 1 and "backward kernel attention_fwd_kernel" in problems[0]


def test_a_block_longer_than_its_array_is_read_clipped_and_pages_count_their_unit():
    problems, _ = compare(TUNABLES, (("block_q", 512), ("pages", 4)), {"forward": (_forward(block_q=256),)})
    assert problems == []
    problems, _ = compare(TUNABLES, (("pages", 2),), {"forward": (_forward(),)})  # 2 pages = 32 rows
    assert len(problems) == 1 and "requested 32" in problems[0]


def test_no_kernel_of_the_declared_name_is_a_failure_not_a_pass():
    problems, notes = compare(TUNABLES, (("block_q", 64),), {"forward": ()})
    assert notes == [] and "no traced pallas_call named like ['fwd']" in problems[0]
    problems, _ = compare(TUNABLES, (("block_q", 64),), {"forward": (_forward(name="xla_fallback"),)})
    assert len(problems) == 1


def test_a_declared_operand_the_kernel_lacks_is_a_failure():
    kernel = TracedKernel("fwd", (1,), (_block("args[5]", (64,), (256,)),))
    problems, _ = compare(TUNABLES, (("block_q", 64),), {"forward": (kernel,)})
    assert "no blocked operand args[0]" in problems[0] and "args[5] [64]" in problems[0]


def test_a_backward_block_is_read_only_where_the_backward_was_traced():
    config = (("block_q_dq", 32),)
    assert compare(TUNABLES, config, {"forward": (_forward(),)}) == ([], [])
    assert compare(TUNABLES, config, {"forward": (_forward(),), "backward": (_dq(32),)})[0] == []
    assert compare(TUNABLES, config, {"forward": (_forward(),), "backward": (_dq(128),)})[0]


def test_unobservable_tunables_are_not_read_and_a_choice_picks_the_place():
    assert compare(TUNABLES, (("block_k", 64),), {"forward": (_forward(),)}) == ([], [])
    a = compare(TUNABLES, (("block_kv", 64),), {"forward": (_forward(kv_block=(1, 64, 32)),)})
    assert a[0] == []
    b = compare(TUNABLES, (("block_kv", 64), ("layout", "B")), {"forward": (_forward(kv_block=(1, 64, 32)),)})
    assert len(b[0]) == 1 and "along dimension 2" in b[0][0]


def test_a_negative_dimension_counts_from_the_end_whatever_leads_the_block():
    tunables = Tunables((Tunable("block_q", 128, "q", blocks=(BlockDim("fwd", "args[0]", -2),)),))
    batched = TracedKernel("fwd", (2,), (_block("args[0]", (1, 1, 64, 64), (2, 1, 256, 64)),))
    single = TracedKernel("fwd", (2,), (_block("args[0]", (1, 64, 64), (1, 256, 64)),))
    for kernel in (batched, single):
        assert compare(tunables, (("block_q", 64),), {"forward": (kernel,)})[0] == []
        assert compare(tunables, (("block_q", 32),), {"forward": (kernel,)})[0]


def test_a_block_place_is_declared_whole():
    with pytest.raises(ValueError, match="name a kernel"):
        BlockDim("", "args[0]", -1)
    with pytest.raises(ValueError, match="sets no block size"):
        Tunable("fused", False, "flag", blocks=(BlockDim("k", "args[0]", 0),))


def test_blocks_named_after_kernel_parameters_cannot_be_read_and_say_so():
    """JAX 0.4.35's Pallas names tpu_flash's q block ``q_tile_ref`` and k's ``args[0]``: reading
    ``args[0]`` there would compare k's block with block_q (a false fail)."""
    shifted = TracedKernel(
        "_flash_attention_kernel",
        (1, 4),
        (
            _block("q_tile_ref", (1, 1, 8, 64), (1, 1, 256, 64)),
            _block("args[0]", (1, 1, 128, 64), (1, 1, 256, 64)),
        ),
    )
    assert not shifted.operands_named and _forward().operands_named
    reason = unnamed_operands({"forward": (_forward(), shifted)})
    assert reason and "_flash_attention_kernel" in reason and "attention_fwd_kernel" not in reason
    assert unnamed_operands({"forward": (_forward(),), "backward": (_dq(),)}) is None


def test_a_kernel_pattern_matches_the_phase_and_not_a_config_in_the_name():
    """Splash up to JAX 0.4.x appends its block sizes to each kernel's name."""
    from kernels.adapters.splash import SPLASH_KERNEL

    forward = "splash_mha_fwd_residuals_block_kv_256_block_kv_dkv_256_block_q_8"
    dkv = BlockDim(SPLASH_KERNEL["dkv"], "args[3]", -2)
    assert not dkv.matches(forward) and dkv.matches("splash_mqa_dkv_no_residuals")
    assert BlockDim(SPLASH_KERNEL["fwd"], "args[3]", -2).matches(forward)
    with pytest.raises(ValueError, match="not a regular expression"):
        BlockDim("splash_(", "args[0]", -2)
