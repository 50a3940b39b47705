"""Subjects that leave ``Capabilities.jax_runtime`` unset, as a new user's first function does.

The suite observes their runtime instead of trusting the flag (``observe_jax`` in
``conformance/judge/checks/runtime.py``): ``leak`` judges host memory on every subject, and
its live JAX arrays, like ``recompile``, wherever JAX ran during the first call.

``leaks_host``: NumPy attention that keeps every output and a 256 KiB buffer per call (``leak``).
``recompiles_undeclared``: JAX attention that jits a fresh closure on every call (``recompile``).
``numpy_attention`` and ``jax_attention``: their correct twins, which must pass.
"""

from __future__ import annotations

import jax
import numpy as np

from kernels.contract.base import Capabilities
from reference import AttentionInputs, AttentionSpec, attention_forward
from tests.mutants import jax_attention as core

UNDECLARED = Capabilities(dtypes=("float32",), causal_alignments=("top_left",))  # jax_runtime unset
DEBUG_BUFFER_BYTES = 256 << 10


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool, alignment: str):
    spec = AttentionSpec(scale=scale, causal=causal, alignment=alignment)
    return attention_forward(AttentionInputs(q=q, k=k, v=v), spec).out.astype(q.dtype)


def numpy_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Correct float64 NumPy attention, rounded to the input dtype; no JAX anywhere."""
    return _reference(q, k, v, scale, causal, alignment)


def leaks_host(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right values, but every call's output and a 256 KiB scratch buffer stay in a list."""
    out = _reference(q, k, v, scale, causal, alignment)
    # BUG: a "debug" history that nobody clears: host memory grows with every call.
    leaks_host.history.append((out.copy(), np.ones(DEBUG_BUFFER_BYTES // 8)))
    return out


def jax_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Correct JAX attention, jitted once at import (``core.attention``)."""
    out, _ = core.call(core.attention, q, k, v, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


def recompiles_undeclared(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right values, but jits a fresh closure on every call, so every call compiles again."""

    def attend(q, k, v):
        return core.attention(q, k, v, scale=scale, causal=causal, alignment=alignment)[0]

    out = jax.jit(attend)(core.device(q), core.device(k), core.device(v))  # BUG: a new jit per call
    return core.host(out, q.dtype)


leaks_host.history = []
for _function in (numpy_attention, leaks_host, jax_attention, recompiles_undeclared):
    _function.attention_capabilities = UNDECLARED
