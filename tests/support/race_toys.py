"""Toy Pallas TPU attention kernels for the ``races`` check's own tests, reached as
``--impl tests.support.race_toys:<name>``. One program per (batch, head), on a grid axis
declared 'parallel'; each also writes the row maxima of its logits to a ``stats`` output.

``separate_stats`` gives each program its own stats block: no race. ``shared_stats`` maps
every program to the same stats block: on a two-core chip two programs write it at once, a
data race, though ``out`` is right (the numeric checks pass it). ``no_kernel`` declares race
detection but runs NumPy: the check must not pass it, since nothing was observed.
They run in TPU interpret mode (JAX >= 0.7.0), inside ``TpuExecution("tpu").context()``,
which is where ``kernels.runtime.tpu_interpret.detect_races`` turns the detector on.
"""

from __future__ import annotations

import functools

import numpy as np

from kernels.contract.base import Capabilities
from kernels.runtime.tpu_interpret import TpuExecution
from reference import AttentionInputs, AttentionSpec, attention_forward

CAPS = Capabilities(dtypes=("float32",), jax_runtime=True, race_detection=True)
STATS_ROWS = 8  # the stats block: 8 x 128 float32, one TPU tile


@functools.cache
def _kernel_call(shared: bool):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(q_ref, k_ref, v_ref, o_ref, stats_ref, *, scale):
        q, k, v = q_ref[0], k_ref[0], v_ref[0]
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
        m = s.max(axis=-1, keepdims=True)
        p = jnp.exp(s - m)
        o_ref[0] = (jnp.dot(p, v, preferred_element_type=jnp.float32) / p.sum(-1, keepdims=True)).astype(
            o_ref.dtype
        )
        stats_ref[...] = jnp.broadcast_to(m.max(), stats_ref.shape)

    params = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams  # name before 0.6.2

    @functools.partial(jax.jit, static_argnames="scale")
    def call(q, k, v, *, scale):
        programs, sq, d = q.shape
        sk, dv = k.shape[1], v.shape[2]
        stats_map = (lambda i: (0, 0)) if shared else (lambda i: (i, 0))  # BUG when shared
        out, _ = pl.pallas_call(
            functools.partial(kernel, scale=scale),
            grid=(programs,),
            in_specs=[
                pl.BlockSpec((1, sq, d), lambda i: (i, 0, 0)),
                pl.BlockSpec((1, sk, d), lambda i: (i, 0, 0)),
                pl.BlockSpec((1, sk, dv), lambda i: (i, 0, 0)),
            ],
            out_specs=[
                pl.BlockSpec((1, sq, dv), lambda i: (i, 0, 0)),
                pl.BlockSpec((STATS_ROWS, 128), stats_map),
            ],
            out_shape=[
                jax.ShapeDtypeStruct((programs, sq, dv), q.dtype),
                jax.ShapeDtypeStruct((programs * STATS_ROWS, 128), jnp.float32),
            ],
            compiler_params=params(dimension_semantics=("parallel",)),
        )(q, k, v)
        return out

    return call


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, shared: bool) -> np.ndarray:
    b, h, sq, d = q.shape
    flat = lambda x: x.reshape(b * h, x.shape[2], x.shape[3])  # noqa: E731
    with TpuExecution("tpu").context():
        out = _kernel_call(shared)(flat(q), flat(k), flat(v), scale=float(scale))
        return np.asarray(out).reshape(b, h, sq, v.shape[-1])


def separate_stats(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float) -> np.ndarray:
    """Each program writes its own stats block."""
    return _attention(q, k, v, scale, shared=False)


def shared_stats(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float) -> np.ndarray:
    """Every program writes the one shared stats block: a write-write race across cores."""
    return _attention(q, k, v, scale, shared=True)


def no_kernel(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float) -> np.ndarray:
    """float64 attention in NumPy that claims race detection: nothing runs under the detector."""
    out = attention_forward(AttentionInputs(q=q, k=k, v=v), AttentionSpec(scale=scale)).out
    return out.astype(q.dtype)


for _toy in (separate_stats, shared_stats, no_kernel):
    _toy.attention_capabilities = CAPS
