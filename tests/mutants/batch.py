"""A mutant whose answer depends on the other requests of its batch, and only there: the
softmax's max is taken over the whole batch instead of per row.

Any constant subtracted before ``exp`` cancels in the softmax, so every output stays within
rounding of the right one (forward and lse pass), and a rerun of the same batch gives the same
bits (determinism passes). What changes is the rounding: ``exp(s - m)`` and its sum round
differently when ``m`` is a neighbour's, so a request's bits move with the batch it runs in,
which only ``batch_invariance`` (the request alone against the request in its batch) sees.
Kernels do this when they hoist a "safe" softmax constant out of the per-row loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.mutants import correct
from tests.mutants import jax_attention as core


def batch_wide_max(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float, **keywords: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Attention whose softmax max spans the batch: (out, lse), right within rounding."""
    # BUG: one max per (head, query) over every request of the batch, not per row
    out, lse = core.call(core.attention, q, k, v, scale=scale, max_axes=(0, 3), **keywords)
    return core.host(out, q.dtype), np.asarray(lse)


# What the correct control declares: the same cases, so the control passes where this fails.
batch_wide_max.attention_capabilities = correct.FULL
