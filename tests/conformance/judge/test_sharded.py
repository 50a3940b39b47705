"""The sharded check: a subject's JAX call under ``jax.jit`` on inputs placed over a mesh of
simulated CPU devices, judged against the reference with the unsharded call as its baseline.

XLA reads the device count when JAX starts its CPU backend, once per process: the verdicts that
need a device count run ``run_check`` in a fresh interpreter with XLA_FLAGS set for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance.judge.checks.jax_calls import CANNOT_STATE
from conformance.judge.checks.sharded import NO_JAX_CALL, ONE_DEVICE, mesh_for
from conformance.judge.runner import run_check
from conformance.plan.cases import Case
from conformance.suite.host_devices import FLAG, with_host_devices
from tests.support import toy_subjects

CASE = Case("toy", "float32", batch=2, q_heads=2, kv_heads=2, q_len=64, kv_len=64, causal=True)
ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import json, sys
from conformance.judge.runner import run_check
from conformance.plan.cases import Case
causal = not sys.argv[1].startswith("--full")
impls = sys.argv[2:] if not causal else sys.argv[1:]
case = Case("toy", "float32", batch=2, q_heads=2, kv_heads=2, q_len=64, kv_len=64, causal=causal)
outcomes = {impl: run_check(case, "sharded", impl=impl) for impl in impls}
tensors = {impl: [m.tensor for m in o.metrics] for impl, o in outcomes.items()}
print(json.dumps({impl: [o.verdict, o.reason, tensors[impl]] for impl, o in outcomes.items()}))
"""


def _in_fresh_process(devices: int, *impls: str, causal: bool = True) -> dict[str, list]:
    """Each subject's sharded (verdict, reason, judged tensors) on the causal case (or, not
    ``causal``, the same case with no mask), in an interpreter with ``devices`` CPU devices."""
    env = {**os.environ, "XLA_FLAGS": f"{FLAG}={devices}", "JAX_PLATFORMS": "cpu"}
    argv = [*(() if causal else ("--full",)), *impls]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_subject_without_a_jax_call_is_unsupported_with_the_reason():
    outcome = run_check(CASE, "sharded", impl=f"{toy_subjects.__name__}:exact")
    assert outcome.verdict == "unsupported" and outcome.reason == NO_JAX_CALL


def test_one_device_is_unsupported_with_the_xla_flags_fix():
    verdict, reason, _ = _in_fresh_process(1, "tests.mutants.vmap:VmapAdapter")[
        "tests.mutants.vmap:VmapAdapter"
    ]
    assert (verdict, reason) == ("unsupported", ONE_DEVICE)
    assert f"XLA_FLAGS={FLAG}=4" in reason


def test_partitioned_as_it_computes_passes_and_local_keys_per_shard_fail():
    cannot_state = "tests.conformance.judge.test_vmap:CannotState"
    outcomes = _in_fresh_process(
        4, "tests.mutants.vmap:VmapAdapter", "tests.mutants.sharded:LocalKeysWhenSharded", cannot_state
    )
    # a call that declares the case beyond it: unsupported with its reason, not a failure
    verdict, reason, _ = outcomes[cannot_state]
    assert (verdict, reason) == (
        "unsupported",
        CANNOT_STATE.format(reason="the mask is built into one kernel per batch row"),
    )
    verdict, reason, tensors = outcomes["tests.mutants.vmap:VmapAdapter"]
    assert verdict == "pass", reason
    assert tensors == [f"{t} (sharded: batch 2, sequence 2)" for t in ("out", "lse", "dq", "dk", "dv")]
    verdict, reason, _ = outcomes["tests.mutants.sharded:LocalKeysWhenSharded"]
    assert verdict == "fail"
    assert "out (sharded: batch 2, sequence 2): OUT OF TOLERANCE" in reason
    # its gradients are the control's: XLA partitions them right
    assert "dq (sharded: batch 2, sequence 2): ok" in reason


def test_a_librarys_own_sharding_is_judged_on_the_same_mesh():
    """JaxCall.own_sharding: the call as the library shards it itself (tokamax's q_sharding). A
    shard_map that keeps the sequence whole passes; one that splits it and attends each shard to its
    own keys fails there, while XLA's partitioning of the plain call (the jit placement) passes, on
    a causal case and on one with no mask at all."""
    whole, local = (
        "tests.mutants.sharded:OwnShardingWholeSequence",
        "tests.mutants.sharded:OwnShardingLocalKeys",
    )
    outcomes = _in_fresh_process(4, whole, local)
    verdict, reason, tensors = outcomes[whole]
    assert verdict == "pass", reason
    assert "out (sharded: own sharding, batch 2, sequence 2)" in tensors
    verdict, reason, _ = outcomes[local]
    assert verdict == "fail"
    assert "out (sharded: own sharding, batch 2, sequence 2): OUT OF TOLERANCE" in reason
    assert "out (sharded: batch 2, sequence 2): ok" in reason
    full = _in_fresh_process(4, local, causal=False)[local]
    assert full[0] == "fail" and "own sharding, batch 2, sequence 2): OUT OF TOLERANCE" in full[1]


def test_local_keys_per_shard_pass_where_only_the_batch_is_split():
    """The mutant is wrong only where the keys are split: 2 devices give the batch of 2 both."""
    verdict, reason, tensors = _in_fresh_process(2, "tests.mutants.sharded:LocalKeysWhenSharded")[
        "tests.mutants.sharded:LocalKeysWhenSharded"
    ]
    assert verdict == "pass", reason
    assert tensors[0] == "out (sharded: batch 2)"


def test_the_mesh_takes_the_batch_first_then_the_sequence_then_heads():
    assert mesh_for(4, 2, 6, 64).mesh_shape == (2, 1, 2)
    assert mesh_for(4, 2, 6, 63).mesh_shape == (2, 2, 1)
    assert mesh_for(2, 3, 3, 64).mesh_shape == (1, 1, 2)
    assert mesh_for(2, 1, 1, 63) is None
    heads = mesh_for(2, 1, 4, 63)
    assert heads.name == "heads 2"
    # a broadcast bias (batch and heads of 1) stays whole; q's heads split, its batch of 1 not
    assert heads.spec((1, 4, 63, 16), True) == (None, "heads", None, None)
    assert heads.spec((1, 1, 63, 63), True) == (None, None, None, None)
    assert heads.spec((1, 4, 63, 16), False) == (None, None, None, None)
    both = mesh_for(4, 2, 1, 64)
    assert both.spec((2, 1, 64, 16), True) == ("batch", None, "sequence", None)
    assert both.spec((2, 64), True) == ("batch", None)  # segment ids: split along their batch only


def test_the_device_count_is_added_to_xla_flags_unless_the_user_named_one():
    assert with_host_devices("") == f"{FLAG}=4"
    assert with_host_devices("--xla_cpu_foo=1") == f"--xla_cpu_foo=1 {FLAG}=4"
    assert with_host_devices(f"{FLAG}=1 --xla_cpu_foo=1") == f"{FLAG}=1 --xla_cpu_foo=1"
