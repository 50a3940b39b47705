"""A precision regression inside tolerance, for calibrating the gate on real suite runs.

``blocked_attention`` is a blocked online softmax over 16-key blocks whose running sum and
output accumulate in the dtype named by ``GATE_CALIBRATION_ACCUMULATOR`` (float32 unless
set). One name, two behaviours: run the suite once with float32 (the base) and once with
bfloat16 (the candidate, one reduction in bfloat16), then gate the second against the
first. In bfloat16 the loss stays inside the tolerance policy (ratio < 2 against the plain
bf16 baseline, k = 3; see tests/mutants/blocked.py), so no check fails and only the
gate's drift rules can see it::

    SUBJECT=tests.reports.gate.precision_mutant:blocked_attention
    python -m conformance --impl $SUBJECT --report-dir runs/mutant/jax-base -k test_forward
    GATE_CALIBRATION_ACCUMULATOR=bfloat16 \\
        python -m conformance --impl $SUBJECT --report-dir runs/mutant/jax-bf16 -k test_forward
    python -m reports gate runs/mutant/jax-base runs/mutant/jax-bf16     # must FAIL
"""

from __future__ import annotations

import os

import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import blocked

ACCUMULATOR = "GATE_CALIBRATION_ACCUMULATOR"


def blocked_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Online softmax over 16-key blocks; running sum and output in $GATE_CALIBRATION_ACCUMULATOR."""
    # Read per call, not at import: the suite imports the subject in its own worker process.
    accumulator = os.environ.get(ACCUMULATOR, "float32")
    return blocked._run(
        blocked.Blocking(block=16, accumulator=accumulator), q, k, v, scale, causal, alignment
    )


blocked_attention.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("bfloat16",), causal_alignments=("top_left",)
)
