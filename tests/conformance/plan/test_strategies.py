"""Meta-tests of the hypothesis strategies: draws stay inside what an adapter declares,
draws are reproducible, and shrinking finds the minimal failing case."""

from __future__ import annotations

import dataclasses
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.plan import profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.shrink import shrink
from kernels.contract.base import Capabilities
from tests.support.fakes import BLOCKED, FULL

FLAGS = (
    "window",
    "segment_ids",
    "lengths",
    "bool_mask",
    "gqa",
    "bias",
    "bias_broadcast",
    "softcap",
    "sinks",
    "distinct_v_dim",
    "backward",
)


@st.composite
def capabilities(draw) -> Capabilities:
    flags = {flag: draw(st.booleans()) for flag in FLAGS}
    alignments = tuple(draw(st.lists(st.sampled_from(("top_left", "bottom_right")), unique=True)))
    return dataclasses.replace(
        BLOCKED if draw(st.booleans()) else FULL,
        dtypes=tuple(
            draw(
                st.lists(
                    st.sampled_from(("float32", "bfloat16", "float16", "float64")),
                    min_size=1,
                    max_size=4,
                    unique=True,
                )
            )
        ),
        causal_alignments=alignments,
        chunked_causal_alignments=tuple(a for a in alignments if draw(st.booleans())),
        **flags,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(caps=capabilities(), data=st.data())
def test_drawn_cases_use_only_declared_features(caps, data):
    for _ in range(3):
        case = data.draw(strategies.cases("s", caps, profiles.get("ci")))
        assert strategies.runnable(case, caps), case
        assert case.dtype in caps.dtypes
        assert caps.window or case.window is None
        assert caps.softcap or case.softcap is None
        assert caps.gqa or case.q_heads == case.kv_heads
        assert caps.causal_alignments or not case.causal
        assert case.chunk is None or (case.causal and case.alignment in caps.chunked_causal_alignments)
        assert caps.lengths or (case.q_lengths is None and case.kv_lengths is None)


def test_draws_are_reproducible_for_a_seed():
    strategy = strategies.cases("s", FULL, profiles.get("dev"))
    assert strategies.draw_cases(strategy, 10, 3) == strategies.draw_cases(strategy, 10, 3)
    assert strategies.draw_cases(strategy, 10, 3) != strategies.draw_cases(strategy, 10, 4)


def test_blocked_subject_draws_only_block_multiples():
    cases = strategies.draw_cases(strategies.cases("s", BLOCKED, profiles.get("dev")), 10, 0)
    assert cases and all(c.kv_len % 128 == 0 and c.q_len % 128 == 0 for c in cases)


def test_shrinking_finds_the_minimal_failing_case():
    big = Case(
        "s",
        "float32",
        batch=2,
        q_heads=4,
        kv_heads=2,
        q_len=256,
        kv_len=256,
        causal=True,
        bias="1h1k",
        softcap=30.0,
        window=(3, 3),
    )

    def fails(case: Case) -> bool:  # a bug that needs a window and at least 2 heads
        return case.window is not None and case.q_heads >= 2

    minimal = shrink(big, FULL, fails, budget_s=60)
    assert minimal is not None and fails(minimal)
    assert (minimal.batch, minimal.q_heads, minimal.kv_heads) == (1, 2, 1)
    assert minimal.q_len == 1 and minimal.kv_len == 1
    assert minimal.bias is None and minimal.softcap is None and not minimal.causal


def test_shrinking_stays_inside_the_failing_case():
    big = Case("s", "float32", batch=2, q_len=128, kv_len=256, segments=3, kv_lengths=(100, 256))
    seen = []
    shrink(big, FULL, lambda c: seen.append(c) or False, budget_s=30)
    for case in seen:
        assert case.batch <= 2 and case.q_len <= 128 and case.kv_len <= 256
        assert case.segments in (0, 3) and case.bias is None and not case.causal


def test_shrinking_that_runs_out_of_time_returns_the_best_so_far_without_raising():
    big = Case("s", "float32", batch=2, q_heads=2, kv_heads=2, q_len=256, kv_len=256, causal=True)

    def slow_fails(case: Case) -> bool:
        time.sleep(0.05)
        return case.causal

    minimal = shrink(big, FULL, slow_fails, budget_s=0.3)
    assert minimal is None or (minimal.causal and minimal.shape.flops <= big.shape.flops)


def test_a_decode_only_subject_gets_decode_draws_with_kv_lengths_and_megacore_configs():
    """paged_attention's declaration (Sq must be 1): draws are decode cases, not none at all."""
    from kernels.adapters.paged_attention import CONSTRAINTS, tunables

    caps = Capabilities(
        dtypes=("float32",),
        lengths=True,
        q_lengths=False,
        gqa=True,
        softcap=True,
        constraints=CONSTRAINTS,
        tunables=tunables(megacore=True),
    )
    drawn = strategies.draw_cases(strategies.cases("paged", caps, profiles.get("dev")), 40, 3)
    assert len(drawn) >= 20 and {c.q_len for c in drawn} == {1}
    assert all(strategies.runnable(c, caps) for c in drawn)
    assert any(c.kv_lengths is not None for c in drawn) and any(c.q_heads > c.kv_heads for c in drawn)
    assert {"kv_head", "batch"} & {dict(c.config).get("megacore_mode") for c in drawn}


def test_chunks_are_drawn_only_where_declared_and_draw_nothing_elsewhere():
    """The chunk draw comes after every other one and draws nothing for a subject without it: the
    same seed draws the same cases for a subject that does not declare chunks."""
    plain = dataclasses.replace(FULL, chunked_causal_alignments=())
    drawn = strategies.draw_cases(strategies.cases("s", FULL, profiles.get("dev")), 40, 3)
    assert any(c.chunk is not None for c in drawn) and all(c.chunk is None or c.causal for c in drawn)
    without = strategies.draw_cases(strategies.cases("s", plain, profiles.get("dev")), 40, 3)
    assert all(c.chunk is None for c in without)


def test_a_ragged_row_pattern_is_drawn_at_any_row_for_a_subject_with_lengths():
    """paged_attention's declaration: a page (16 tokens) and a 4-page compute block (64): drawn kv
    lengths hold an empty, one-token or boundary row somewhere other than the last row too."""
    from kernels.adapters.paged_attention import CONSTRAINTS, tunables

    caps = Capabilities(
        dtypes=("float32",),
        lengths=True,
        q_lengths=False,
        gqa=True,
        constraints=CONSTRAINTS,
        tunables=tunables(megacore=False),
    )
    drawn = strategies.draw_cases(strategies.cases("paged", caps, profiles.get("dev")), 60, 3)
    marked = {0, 1, 15, 16, 17, 63, 64, 65}
    early = [c for c in drawn if c.kv_lengths and any(n in marked for n in c.kv_lengths[:-1])]
    assert early, [c.kv_lengths for c in drawn]


def test_shrinking_a_ragged_batch_goes_toward_fewer_rows():
    big = Case("s", "float32", batch=4, q_len=1, kv_len=128, kv_lengths=(0, 1, 17, 128))
    minimal = shrink(big, FULL, lambda c: c.kv_lengths is not None and 1 in c.kv_lengths, budget_s=30)
    assert minimal is not None and minimal.batch <= 2 and 1 in minimal.kv_lengths
