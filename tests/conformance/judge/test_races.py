"""The ``races`` check: TPU interpret mode's race detector, read through ``kernels.runtime.tpu_interpret``.

A racy toy kernel (two programs of a 'parallel' grid axis writing one output block) must fail
it while its numbers pass; the same kernel with a block per program must pass; a subject that
declares race detection but runs nothing under it must not pass; a subject without the
capability gets the check ``unsupported`` with the reason.
"""

from __future__ import annotations

import dataclasses

import pytest

from conformance.judge.inputs import build_inputs
from conformance.judge.runner import Runner, run_check
from conformance.plan.cases import Case
from conformance.plan.catalogue import plan
from conformance.plan.profiles import get
from conformance.plan.subjects import resolve_subjects
from kernels.runtime import tpu_interpret
from kernels.runtime.tpu_interpret import parse_races
from tests.support import fakes, race_toys

TOYS = "tests.support.race_toys"
CASE = Case(
    "toy", "float32", batch=1, q_heads=2, kv_heads=2, q_len=8, kv_len=128, head_dim=128, v_head_dim=128
)

# What the detector printed at 0.10.2 (vector clocks) and at 0.7.2 (none, memory space 'any').
PRINTED_0_10 = """RACE DETECTED
  write of ('hbm', 104, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from 0, 0, pallas_call
  clock: [15  0  0  0]
  write of ('hbm', 104, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from 0, 1, pallas_call
  clock: [ 0 15  0  0]

"""
PRINTED_0_7 = """RACE DETECTED
  write of ('any', 101, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from 0, 1, pallas_call
  write of ('any', 101, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from 0, 0, pallas_call
"""
# What the detector logged at 0.12.0.1 (on_race="warn"; a thread key for the accessing core).
LOGGED_0_12 = """RACE DETECTED
  write of ('hbm', 104, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from (0, 1), pallas_call
  clock: <jax._src.pallas.mosaic.interpret.vector_clock.NpVectorClock object at 0x7f0a3dfd4bf0>
  write of ('hbm', 104, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from (0, 0), pallas_call
  clock: <jax._src.pallas.mosaic.interpret.vector_clock.NpVectorClock object at 0x7f0a3dfd47d0>
"""


def _needs_detector() -> None:
    missing = tpu_interpret.race_detection_missing()
    if missing is not None:
        pytest.skip(missing)


def test_printed_races_become_one_line_each():
    assert parse_races(PRINTED_0_10) == (
        "write of ('hbm', 104, 0, 0)[0:8, 0:128] from 0, 0, pallas_call"
        " / write of ('hbm', 104, 0, 0)[0:8, 0:128] from 0, 1, pallas_call",
    )
    assert parse_races(PRINTED_0_7 + PRINTED_0_7)[1].startswith(
        "write of ('any', 101, 0, 0)[0:8, 0:128] from 0, 1"
    )
    assert parse_races("compiling...\n") == ()
    assert parse_races(LOGGED_0_12) == (
        "write of ('hbm', 104, 0, 0)[0:8, 0:128] from 0, 1, pallas_call"
        " / write of ('hbm', 104, 0, 0)[0:8, 0:128] from 0, 0, pallas_call",
    )


def test_the_detector_reports_every_race_instead_of_raising_at_the_first():
    """JAX 0.12's detector raises at the first race by default (``on_race``); the check needs every
    race named and the call's numbers back."""
    _needs_detector()
    from jax.experimental.pallas import tpu as pltpu

    params = tpu_interpret.race_detecting_params()
    pltpu.InterpretParams(**params)  # every keyword is this release's
    if "on_race" in {f.name for f in dataclasses.fields(pltpu.InterpretParams)}:
        assert params["on_race"] == "warn"


def test_the_detector_parameters_use_this_jax_field_names():
    _needs_detector()
    from jax.experimental.pallas import tpu as pltpu

    params = pltpu.InterpretParams(**tpu_interpret.race_detecting_params(2))  # a wrong name raises here
    assert params.detect_races


def test_a_subject_without_a_race_detector_gets_the_check_unsupported():
    (subject,) = resolve_subjects("tests.support.toy_subjects:exact")
    items = plan((subject,), get("ci"), 0)["races"]
    assert items and {p.status for p in items} == {"unsupported"}
    assert "no race detector" in items[0].reason and "interpreter=tpu" in items[0].reason
    assert Runner((subject,), get("ci"), shrink=False).evaluate(items[0]).verdict == "unsupported"


def test_only_the_tpu_interpret_variants_declare_race_detection():
    _needs_detector()
    generic, tpu = resolve_subjects("tpu_flash,tpu_flash[interpreter=tpu]")
    if not tpu.available:
        pytest.skip(tpu.reason)
    assert not generic.capabilities.race_detection and tpu.capabilities.race_detection
    assert not tpu_interpret.race_detection_declared(tpu_interpret.TpuExecution("generic"))


def test_a_declared_subject_that_runs_nothing_under_the_detector_is_not_passed():
    _needs_detector()
    outcome = run_check(CASE, "races", impl=f"{TOYS}:no_kernel")
    assert outcome.verdict == "fail" and "nothing was checked" in outcome.reason


@pytest.mark.slow
def test_a_shared_output_block_is_a_race_and_a_block_per_program_is_not():
    """~20 s: three kernels compiled under TPU interpret mode."""
    _needs_detector()
    racy = run_check(CASE, "races", impl=f"{TOYS}:shared_stats")
    assert racy.verdict == "fail", racy.reason
    assert "forward of tests.support.race_toys:shared_stats (2 simulated cores): 1 data race" in racy.reason
    assert "write of" in racy.reason and "from 0, 0" in racy.reason and "from 0, 1" in racy.reason
    # The same numbers as the race-free kernel: only the race check tells them apart.
    inputs = build_inputs(CASE)
    same = [
        getattr(race_toys, n)(inputs.q, inputs.k, inputs.v, scale=0.1)
        for n in ("shared_stats", "separate_stats")
    ]
    assert same[0].tobytes() == same[1].tobytes()
    correct = run_check(CASE, "races", impl=f"{TOYS}:separate_stats")
    assert correct.verdict == "pass", correct.reason
    assert correct.details == {"forward_races": 0, "cores": 2}


def test_a_racy_toy_fails_the_check():
    """The fast half of the test above: the racy kernel alone."""
    _needs_detector()
    outcome = run_check(CASE, "races", impl=f"{TOYS}:shared_stats")
    assert outcome.verdict == "fail" and "1 data race(s) detected by TPU interpret mode" in outcome.reason


def test_the_race_sample_prefers_one_batch_row_with_several_heads():
    """A few cases per dtype; one batch row with several heads where the matrix has one."""
    caps = dataclasses.replace(fakes.FULL, race_detection=True)
    items = plan((fakes.subject("full", caps),), get("ci"), 0)["races"]
    per_dtype = get("ci").runtime_cases_per_dtype
    assert len(items) == per_dtype * len(caps.dtypes) and {p.status for p in items} == {"run"}
    assert all(p.case.batch == 1 and p.case.q_heads > 1 for p in items)
    (toy,) = resolve_subjects(f"{TOYS}:separate_stats")  # no GQA: no such case in ci, so several programs
    assert all(p.case.batch * p.case.q_heads > 1 for p in plan((toy,), get("ci"), 0)["races"])
