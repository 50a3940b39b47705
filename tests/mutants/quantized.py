"""Attention over quantized inputs: right, and ones that forget a dequantization scale. Plain
functions (forward only).

The cases' tensors already hold the stored values (``kernels/runtime/kv_storage.py``), so each function
quantizes them again (exactly: the grid is idempotent) into weights ``w`` and power-of-two
scales, and dequantizes inside the computation as a quantized kernel does.

A fixed K/V storage (``Capabilities.kv_storage``): K's scale per channel multiplies q before the
QK^T matmul, V's multiplies the PV matmul's result.

* ``int8_per_channel`` / ``fp8_per_head``: correct. Controls.
* ``forgets_v_scale``: the PV matmul's result is never multiplied by V's scale. Mutant.

Storages taken case by case (``Capabilities.q_storages``, ``kv_storages``: every storage): the
call receives ``q_storage``/``kv_storage`` and multiplies each tensor's weights by its scale.

* ``per_call``: correct. Control.
* ``forgets_q_scale``: q's weights go into the QK^T matmul unscaled. Mutant.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from kernels.contract.kv_storage_names import STORAGES
from kernels.runtime import kv_storage


def _declare(storage: str) -> Capabilities:
    return Capabilities(
        jax_runtime=True,
        dtypes=("float32", "bfloat16"),
        causal_alignments=("top_left",),
        gqa=True,
        fully_masked_rows="zeros",
        kv_storage=storage,
    )


@functools.partial(jax.jit, static_argnames=("scale", "causal", "v_scale"))
def _attention(q, w_k, k_step, w_v, v_step, *, scale, causal, v_scale):
    """q: [B, Hq, Sq, D]; w_k, w_v: [B, Hkv, Sk, D|Dv] weights as float32; *_step broadcastable."""
    group = q.shape[1] // w_k.shape[1]
    w_k, w_v = jnp.repeat(w_k, group, axis=1), jnp.repeat(w_v, group, axis=1)
    k_step = jnp.repeat(k_step, group, axis=1) if k_step.shape[1] > 1 else k_step
    v_step = jnp.repeat(v_step, group, axis=1) if v_step.shape[1] > 1 else v_step
    hi = jax.lax.Precision.HIGHEST
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32) * k_step, w_k, precision=hi) * scale
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], dtype=bool)), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, w_v, precision=hi)
    return out * v_step if v_scale else out


def _call(q, k, v, storage: str, *, scale: float, causal: bool, v_scale: bool = True) -> np.ndarray:
    (w_k, k_step), (w_v, v_step) = kv_storage.quantize(k, storage), kv_storage.quantize(v, storage)
    weights = [jnp.asarray(np.asarray(w, dtype=np.float32)) for w in (w_k, w_v)]
    steps = [jnp.asarray(step.astype(np.float32)) for step in (k_step, v_step)]
    out = _attention(
        jnp.asarray(q),
        weights[0],
        steps[0],
        weights[1],
        steps[1],
        scale=scale,
        causal=causal,
        v_scale=v_scale,
    )
    return np.asarray(out).astype(q.dtype)


def int8_per_channel(
    q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left", kv_storage=None
):
    """Correct: int8 K/V, one scale per (head, channel)."""
    return _call(q, k, v, "int8_per_channel", scale=scale, causal=causal)


int8_per_channel.attention_capabilities = _declare("int8_per_channel")


def fp8_per_head(
    q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left", kv_storage=None
):
    """Correct: e4m3fn K/V, one scale per head."""
    return _call(q, k, v, "float8_e4m3fn_per_head", scale=scale, causal=causal)


fp8_per_head.attention_capabilities = _declare("float8_e4m3fn_per_head")


def forgets_v_scale(
    q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left", kv_storage=None
):
    """Wrong: V's per-channel scale is never applied (out is in units of V's int8 weights)."""
    return _call(q, k, v, "int8_per_channel", scale=scale, causal=causal, v_scale=False)


forgets_v_scale.attention_capabilities = _declare("int8_per_channel")


def _dequantized(x: np.ndarray, storage: str | None, *, apply_scale: bool = True) -> jnp.ndarray:
    """``x`` as a kernel holding it in ``storage`` computes with: weights (as float32) times the
    scale (``apply_scale``), or ``x`` itself for None."""
    if storage is None:
        return jnp.asarray(x, dtype=jnp.float32)
    w, step = kv_storage.quantize(x, storage)
    weights = jnp.asarray(np.asarray(w, dtype=np.float32))
    return weights * jnp.asarray(step.astype(np.float32)) if apply_scale else weights


@functools.partial(jax.jit, static_argnames=("scale", "causal"))
def _plain(q, k, v, *, scale, causal):
    """q: [B, Hq, Sq, D]; k, v: [B, Hkv, Sk, D|Dv], float32 (dequantized)."""
    group = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
    hi = jax.lax.Precision.HIGHEST
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, precision=hi) * scale
    if causal:
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], dtype=bool)), s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v, precision=hi)


def _per_call(q, k, v, q_storage, kv_storage, *, scale: float, causal: bool, q_scale: bool) -> np.ndarray:
    out = _plain(
        _dequantized(q, q_storage, apply_scale=q_scale),
        _dequantized(k, kv_storage),
        _dequantized(v, kv_storage),
        scale=scale,
        causal=causal,
    )
    return np.asarray(out).astype(q.dtype)


def _declare_per_call() -> Capabilities:
    # bfloat16 alone: the scale a mutant drops is as visible there, at half the meta-test's time.
    return Capabilities(
        jax_runtime=True,
        dtypes=("bfloat16",),
        causal_alignments=("top_left",),
        gqa=True,
        fully_masked_rows="zeros",
        q_storages=STORAGES,
        kv_storages=STORAGES,
    )


def per_call(q, k, v, *, scale: float, causal=False, alignment="top_left", q_storage=None, kv_storage=None):
    """Correct: q and K/V in the storages the case names, each dequantized with its own scale."""
    return _per_call(q, k, v, q_storage, kv_storage, scale=scale, causal=causal, q_scale=True)


per_call.attention_capabilities = _declare_per_call()


def forgets_q_scale(
    q, k, v, *, scale: float, causal=False, alignment="top_left", q_storage=None, kv_storage=None
):
    """Wrong: q's scale is never applied (the logits are in units of q's weights)."""
    # BUG: q_scale=False: q's weights reach the QK^T matmul without their scale.
    return _per_call(q, k, v, q_storage, kv_storage, scale=scale, causal=causal, q_scale=False)


forgets_q_scale.attention_capabilities = _declare_per_call()
