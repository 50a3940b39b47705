"""A mutant that reads padded keys: NaN written past the valid lengths reaches valid rows."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _additive_padding(
    q, k, v, q_lengths, kv_lengths, *, scale, causal=False, alignment="top_left", window=None, softcap=None
):
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(
        q.shape[2], k.shape[2], causal=causal, alignment=alignment, q_lengths=q_lengths, kv_lengths=kv_lengths
    )
    # BUG: masks by adding -inf instead of selecting: a NaN logit from a padded key stays
    # NaN (NaN + -inf = NaN), and the row's max and sum turn NaN with it.
    s = s + jnp.where(keep, 0.0, -jnp.inf)
    m = s.max(axis=-1, keepdims=True)
    e = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(total == 0, 1.0, total)
    return jnp.einsum("bhqk,bhkd->bhqd", p, core.group(v, q.shape[1]).astype(jnp.float32))


def nan_padding_leak(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    q_lengths: np.ndarray | None = None,
    kv_lengths: np.ndarray | None = None,
) -> np.ndarray:
    """Masks padding additively (s + -inf), so NaN in padded keys poisons valid rows."""
    out = core.call(
        _additive_padding,
        q,
        k,
        v,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        scale=scale,
        causal=causal,
        alignment=alignment,
    )
    return core.host(out, q.dtype)


nan_padding_leak.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left", "bottom_right"), lengths=True
)
