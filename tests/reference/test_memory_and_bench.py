"""The reference's memory stays chunk-sized, and its benchmark's quick mode reports JSON.

The memory test is a scaled-down guard for docs/suite.md's promise (a 32k x 32k forward
under 1 GiB, measured by ``python -m reference.bench``): at 4096 x 4096 one naive
[Sq, Sk] float64 plane is already 128 MiB, and a chunked forward needs a few chunks.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reference import attention as attention_module
from tests.support.suite import child_environment

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20

# Peak RSS over a warmed-up baseline, in a fresh process so that this one's heap
# cannot hide or inflate it. Not ru_maxrss: Linux carries the parent's high-water
# mark across fork/exec into the child's ru_maxrss, so after this pytest process has
# imported JAX the child reported a peak of 0 over baseline even for a full-plane
# forward. /proc/self/status VmHWM belongs to the child's own address space, and
# writing 5 to /proc/self/clear_refs resets it to the current RSS just before the call.
RSS_SCRIPT = textwrap.dedent(
    """
    import json, re, sys
    import numpy as np
    from reference import AttentionInputs, AttentionSpec, attention_forward

    def status_kib(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\\s+(\\d+) kB", f.read()).group(1))

    n, d, masked = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "masked"
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, d)) for _ in range(3))
    extra, spec = {}, AttentionSpec()
    if masked:
        ids = np.zeros((1, n), dtype=int)
        extra = dict(bias=rng.standard_normal((1, 1, 1, n)), kv_lengths=np.array([n - 7]),
                     q_segment_ids=ids, kv_segment_ids=ids)
        spec = AttentionSpec(causal=True, alignment="bottom_right", window=(n // 4, None), softcap=30.0)
    attention_forward(AttentionInputs(q=q[:, :, :8], k=k[:, :, :8], v=v[:, :, :8]), spec)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kib("VmRSS")
    result = attention_forward(AttentionInputs(q=q, k=k, v=v, **extra), spec)
    after = status_kib("VmHWM")
    assert result.lse.shape == (1, 1, n) and np.isfinite(result.lse).all()
    print(json.dumps({"peak_over_baseline_mib": (after - before) / 1024}))
    """
)


def _child_env() -> dict[str, str]:
    env = child_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS accounting"
)
@pytest.mark.parametrize("variant, chunks", [("plain", 4), ("masked", 6)])
def test_forward_peak_memory_is_a_few_chunks_not_a_full_plane(variant: str, chunks: int) -> None:
    """Allowed: ``chunks`` logits blocks (measured: ~2.4 plain, ~4.7 with every mask, bias
    and softcap; the latter adds bool masks and the tanh copy) plus the outputs."""
    chunk_bytes = attention_module.CHUNK_ELEMENTS * 8
    d = 64
    bound = chunks * chunk_bytes
    # A naive implementation holds at least one [Sq, Sk] plane; grow Sq = Sk until that plane
    # is at least twice the bound, so the guard still discriminates if the chunk size grows.
    n = max(4096, 1024 * math.ceil(math.sqrt(2 * bound / 8) / 1024))
    bound += n * d * 8 + n * 8 * 2  # out, lse, fully_masked
    done = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(n), str(d), variant],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_child_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peak_over_baseline_mib"]
    naive = n * n * 8 / MIB
    assert peak * MIB <= bound, (
        f"{variant} forward at Sq=Sk={n}, D={d} peaked {peak:.1f} MiB over baseline; allowed "
        f"{bound / MIB:.1f} MiB ({chunks} chunks of {chunk_bytes / MIB:.1f} MiB + outputs); "
        f"one naive [Sq, Sk] plane is {naive:.0f} MiB"
    )


def test_bench_quick_prints_json_with_its_keys_last() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reference.bench", "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_child_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    for key in ("matmul_gflops", "reference_gflops", "ratio"):
        assert isinstance(result.get(key), int | float), f"{key} missing or not a number in {last}"
        assert result[key] > 0, f"{key} = {result[key]} in {last}"
    # The ratio is the one the two rates imply (both are rounded before printing).
    assert result["ratio"] == pytest.approx(
        result["reference_gflops"] / result["matmul_gflops"], rel=0.02, abs=2e-3
    )
