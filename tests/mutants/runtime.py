"""Mutants with right values and wrong runtime behaviour: nondeterminism, a leak, and a
compilation on every call. Each keeps state across calls on purpose: that state *is* the bug."""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core

CAUSAL_TL = Capabilities(jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",))


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _racy(q, k, v, key, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    out, _ = core.attention(q, k, v, scale=scale, causal=causal, alignment=alignment)
    # A racy atomic-add reduction, modelled: about 1% of the elements land one ulp away,
    # different ones on every call. Within tolerance, so only a bitwise rerun sees it.
    flip = jax.random.bernoulli(key, 0.01, out.shape)
    return jnp.where(flip, jnp.nextafter(out, jnp.inf), out)


def nondeterministic(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right to an ulp, but about 1% of the elements move one ulp from run to run (os.urandom)."""
    key = jax.random.key(int.from_bytes(os.urandom(4), "little"))
    out = core.call(_racy, q, k, v, key=key, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


nondeterministic.attention_capabilities = CAUSAL_TL


def leaks_buffers(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right values, but keeps every call's device inputs and outputs in a growing list."""
    q_dev, k_dev, v_dev = core.device(q), core.device(k), core.device(v)
    out, lse = core.attention(q_dev, k_dev, v_dev, scale=scale, causal=causal, alignment=alignment)
    # BUG: a "debug" history that nobody clears: live buffers and RSS grow with every call.
    leaks_buffers.history.append((q_dev, k_dev, v_dev, out, lse))
    return core.host(out, q.dtype)


leaks_buffers.history = []
leaks_buffers.attention_capabilities = CAUSAL_TL


def recompiles(
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


recompiles.attention_capabilities = CAUSAL_TL
