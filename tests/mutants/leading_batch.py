"""Leading batch dims (``Capabilities.leading_batch_dims``): a function that takes its batch as
``[*batch_dims, ...]`` and flattens it, and a mutant that flattens the lengths in another order.

A case with ``batch_dims`` (e.g. ``(2, 3)``) reaches these functions as q, k, v ``[2, 3, H, S, D]``,
lengths ``[2, 3]``, segment ids ``[2, 3, S]``, a bias or mask ``[2|1, 3|1, H, Sq, Sk]``
(``kernels/adapters/function_adapter.py``). ``attention`` flattens every one of them row-major, the
order the suite's ``B`` holds them in. ``lengths_transposed`` flattens the lengths transposed, as a
wrapper that reads a ``[*B]`` lengths array with the wrong index does (tokamax indexes them as if
there were one batch axis): with one batch axis transposing is nothing, so every plain case passes,
and with two, each request gets another request's lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core

# What the leading-batch cases use (causal, GQA, q and kv lengths), in float32: the control runs every
# check on every smoke case it admits, so it declares no more than these need.
LEADING = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    lengths=True,
    gqa=True,
    lse=True,
    fully_masked_rows="zeros",
    leading_batch_dims=True,
)
_LENGTHS = ("q_lengths", "kv_lengths")
_BATCHED = ("q_segment_ids", "kv_segment_ids", "q_lengths", "kv_lengths", "mask", "bias")


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, lengths_order: str, **keywords: Any):
    """Attention over ``[*lead, H, S, D]`` inputs: every batch-first array flattened to one batch axis
    (the lengths in ``lengths_order``, NumPy's "C" or "F"), the answer in the same leading dims."""
    lead = q.shape[:-3]

    def flat(name: str, x: np.ndarray) -> np.ndarray:
        rows = x.shape[: len(lead)]
        order = lengths_order if name in _LENGTHS else "C"
        return np.reshape(np.asarray(x), (int(np.prod(rows)), *x.shape[len(lead) :]), order=order)

    flattened = {n: flat(n, x) if n in _BATCHED and x is not None else x for n, x in keywords.items()}
    q, k, v = (np.reshape(x, (-1, *x.shape[-3:])) for x in (q, k, v))
    out, lse = core.call(core.attention, q, k, v, scale=scale, **flattened)
    return core.host(out, q.dtype).reshape((*lead, *out.shape[1:])), np.asarray(lse).reshape(
        (*lead, *lse.shape[1:])
    )


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float, **keywords: Any):
    """Correct attention over leading batch dims, flattened row-major: (out, lse)."""
    return _attend(q, k, v, scale, "C", **keywords)


attention.attention_capabilities = LEADING


def lengths_transposed(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float, **keywords: Any):
    """The same, its lengths flattened column-major: right with one batch axis only."""
    # BUG: lengths [2, 3] flattened in Fortran order, while q's rows are flattened row-major
    return _attend(q, k, v, scale, "F", **keywords)


lengths_transposed.attention_capabilities = LEADING
