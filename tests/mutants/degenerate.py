"""Mutants that do not attend at all, in NumPy: the answers that pass loose suites on
uniform [0, 1) inputs (KernelBench's zeros, a softmax flattened to mean(V), an identity)."""

from __future__ import annotations

import numpy as np

from kernels.contract.base import Capabilities

PLAIN = Capabilities(dtypes=("float32",), causal_alignments=("top_left",))


def returns_zeros(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Returns zeros of the right shape and dtype."""
    return np.zeros((*q.shape[:3], v.shape[-1]), dtype=q.dtype)


returns_zeros.attention_capabilities = PLAIN


def returns_mean_v(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Returns mean(V) over all keys for every query (a uniform softmax)."""
    mean = v.astype(np.float64).mean(axis=2, keepdims=True)
    return np.broadcast_to(mean, (*q.shape[:3], v.shape[-1])).astype(q.dtype)


returns_mean_v.attention_capabilities = PLAIN


def passes_q_through(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Returns q itself (same shape as out, since Dv == D is all it declares)."""
    return q.copy()


passes_q_through.attention_capabilities = PLAIN
