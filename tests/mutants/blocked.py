"""Mutants of a blocked (flash-style) online softmax over key blocks: a dropped tail block,
a forgotten rescaling, a low-precision running accumulator, and a running max that starts at
-inf unguarded (NaN on a row whose first key block is all -inf); and its bug-free control, with
an additive bias."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core


@dataclasses.dataclass(frozen=True)
class Blocking:
    """block: keys per block. rescale: multiply the running sum and output by exp(m_old - m_new)
    when the running max grows. floor_blocks: Sk // block blocks (drops a partial tail block)
    instead of ceil. accumulator: dtype of the running sum and output. guard_neg_inf: subtract 0,
    not the running max, while the max is still -inf (a row whose keys so far are all masked);
    unguarded, exp(-inf - (-inf)) is NaN and poisons the row for good."""

    block: int = 128
    rescale: bool = True
    floor_blocks: bool = False
    accumulator: str = "float32"
    guard_neg_inf: bool = True


def online_softmax(s: jax.Array, keep: jax.Array | None, v: jax.Array, blocking: Blocking) -> jax.Array:
    """out [B, Hq, Sq, Dv] float32 from logits s [B, Hq, Sq, Sk], one key block at a time."""
    v = core.group(v, s.shape[1]).astype(jnp.float32)
    if keep is not None:
        s = jnp.where(keep, s, -jnp.inf)
    size, kv_len = blocking.block, s.shape[-1]
    used = kv_len - kv_len % size if blocking.floor_blocks and kv_len > size else kv_len
    blocks = -(-used // size)
    pad = blocks * size - used
    s = jnp.pad(s[..., :used], [(0, 0)] * 3 + [(0, pad)], constant_values=-jnp.inf)
    v = jnp.pad(v[:, :, :used], [(0, 0), (0, 0), (0, pad), (0, 0)])
    b, h, q_len, _ = s.shape
    s_blocks = jnp.moveaxis(s.reshape(b, h, q_len, blocks, size), 3, 0)
    v_blocks = jnp.moveaxis(v.reshape(b, h, blocks, size, v.shape[-1]), 2, 0)
    acc_dtype = jnp.dtype(blocking.accumulator)

    def step(carry, block):
        m, total, acc = carry
        s_blk, v_blk = block
        m_new = jnp.maximum(m, s_blk.max(axis=-1, keepdims=True))
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0) if blocking.guard_neg_inf else m_new
        alpha = jnp.exp(m - m_safe) if blocking.rescale else jnp.ones_like(m)
        e = jnp.exp(s_blk - m_safe)
        total = (alpha * total + e.sum(axis=-1, keepdims=True)).astype(acc_dtype)
        partial = jnp.einsum("bhqk,bhkd->bhqd", e, v_blk, precision=core.HIGHEST)
        acc = (alpha * acc + partial).astype(acc_dtype)
        return (m_new, total, acc), None

    init = (
        jnp.full((b, h, q_len, 1), -jnp.inf),
        jnp.zeros((b, h, q_len, 1), acc_dtype),
        jnp.zeros((b, h, q_len, v.shape[-1]), acc_dtype),
    )
    (_, total, acc), _ = jax.lax.scan(step, init, (s_blocks, v_blocks))
    total = total.astype(jnp.float32)
    return acc.astype(jnp.float32) / jnp.where(total == 0, 1.0, total)


@functools.partial(jax.jit, static_argnames=(*core.STATIC, "blocking"))
def _blocked(q, k, v, *, scale, blocking, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return online_softmax(s, keep, v, blocking)


@functools.partial(jax.jit, static_argnames=(*core.STATIC, "blocking"))
def _blocked_bias(
    q, k, v, bias=None, *, scale, blocking, causal=False, alignment="top_left", window=None, softcap=None
):
    s, _ = core.logits(q, k, scale)
    if bias is not None:  # after the scale; a -inf entry stays -inf in the logits, masking its key
        s = s + bias.astype(jnp.float32)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return online_softmax(s, keep, v, blocking)


def _run(
    blocking: Blocking,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal: bool,
    alignment: str,
) -> np.ndarray:
    out = core.call(
        functools.partial(_blocked, blocking=blocking),
        q,
        k,
        v,
        scale=scale,
        causal=causal,
        alignment=alignment,
    )
    return core.host(out, q.dtype)


CAPS = Capabilities(jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",))


def drops_tail_block(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Blocked over 128 keys; loops over Sk // 128 blocks, dropping a partial tail block (Sk > 128)."""
    return _run(Blocking(floor_blocks=True), q, k, v, scale, causal, alignment)


drops_tail_block.attention_capabilities = CAPS


def online_softmax_no_rescale(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Online softmax over 64-key blocks that never rescales the running sum and output."""
    return _run(Blocking(block=64, rescale=False), q, k, v, scale, causal, alignment)


online_softmax_no_rescale.attention_capabilities = CAPS


def bf16_accumulator(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Online softmax that accumulates key by key in bfloat16 (running sum and output rounded
    to bfloat16 after every key), where plain attention accumulates in float32."""
    # Per key, not per block: with 16-key blocks the loss is no worse than the plain bf16
    # baseline's own rounding of every intermediate (measured: ratio < 2), so not a bug.
    return _run(Blocking(block=1, accumulator="bfloat16"), q, k, v, scale, causal, alignment)


bf16_accumulator.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("bfloat16",), causal_alignments=("top_left",)
)


# With an additive bias (a -inf entry is a mask) over 128-key blocks: what a user writes when
# jax.nn's documentation tells them to pass a mask as ``bias``. A fully masked row has out 0.
BIAS_CAPS = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    bias=True,
    bias_broadcast=True,
    fully_masked_rows="zeros",
)


def _run_bias(blocking: Blocking, q, k, v, scale, bias, causal, alignment) -> np.ndarray:
    fn = functools.partial(_blocked_bias, blocking=blocking)
    out = core.call(fn, q, k, v, bias=bias, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


def online_softmax_bias(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Online softmax over 128-key blocks with an additive bias, its running max guarded while it
    is -inf: the bug-free control of ``nan_on_masked_first_block``."""
    return _run_bias(Blocking(), q, k, v, scale, bias, causal, alignment)


online_softmax_bias.attention_capabilities = BIAS_CAPS


def nan_on_masked_first_block(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Online softmax over 128-key blocks whose running max starts at -inf unguarded: a row whose
    first block is all -inf (from the bias) computes exp(-inf - (-inf)) = NaN and stays NaN."""
    return _run_bias(Blocking(guard_neg_inf=False), q, k, v, scale, bias, causal, alignment)


nan_on_masked_first_block.attention_capabilities = BIAS_CAPS
