"""The reference's hand-written backward pass against two independent derivatives:
central finite differences of its own forward, and JAX autodiff (x64) of the same
math written here in jax.numpy (with JAX's own broadcasting reducing dbias)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from reference import AttentionShape, attention_backward, attention_forward
from tests.reference.assertions import assert_close
from tests.reference.profiles import profiled
from tests.reference.prose_masks import visibility
from tests.reference.strategies import Case, cases, shapes

SMALL = shapes(max_seq=4, max_dim=3, max_group=2)
# A few fixed shapes for JAX, so that its compiled functions are reused between examples:
# (B, Hq, Hkv, Sq, Sk, D, Dv) with GQA, MQA, Sq < Sk, Sq > Sk and Dv != D among them.
JAX_SHAPES = st.sampled_from(
    [
        AttentionShape(2, 4, 2, 3, 5, 3, 2),
        AttentionShape(1, 3, 1, 5, 3, 2, 4),
        AttentionShape(2, 2, 2, 4, 4, 4, 4),
    ]
)

# Central differences with h = 1e-6 carry O(h^2 f''') truncation and O(eps f / h)
# rounding error: at most ~1.3e-9 of the scale over 150 drawn cases; a wrong gradient
# is off by O(1e-2) or more.
FD_RTOL = 1e-7
FD_STEP = 1e-6
JAX_RTOL = 1e-12


def _loss(case: Case, name: str, x: np.ndarray) -> float:
    inputs = dataclasses.replace(case.inputs, **{name: x})
    return float(np.sum(attention_forward(inputs, case.spec).out * case.dout))


def finite_difference(case: Case, name: str) -> np.ndarray:
    """d sum(out * dout) / d ``name`` by central differences; -inf bias entries have none."""
    base = np.asarray(getattr(case.inputs, name), dtype=np.float64)
    grad = np.zeros_like(base)
    for idx in np.ndindex(*base.shape):
        if not np.isfinite(base[idx]):
            continue
        h = FD_STEP * max(1.0, abs(base[idx]))
        up, down = base.copy(), base.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (_loss(case, name, up) - _loss(case, name, down)) / (up[idx] - down[idx])
    return grad


@profiled(80)
@given(cases(shape=SMALL))
def test_gradients_match_central_finite_differences(case: Case) -> None:
    grads = attention_backward(case.inputs, case.dout, case.spec)
    for name in ("q", "k", "v") + (("bias",) if case.inputs.bias is not None else ()):
        assert_close(getattr(grads, "d" + name), finite_difference(case, name), FD_RTOL, "d" + name)


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """float64 in JAX for the block only; the flag is restored for every other test."""
    import jax

    if hasattr(jax, "enable_x64"):
        with jax.enable_x64(True):
            yield
    elif hasattr(jax.experimental, "enable_x64"):
        with jax.experimental.enable_x64():
            yield
    else:
        before = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            yield
        finally:
            jax.config.update("jax_enable_x64", before)


@functools.cache
def jax_attention_vjp():
    """A jitted (out, lse, (dq, dk, dv, dbias)) in jax.numpy, written from docs/semantics.md.

    Jitted because op-by-op JAX recompiles every primitive for every new shape
    (seconds per example); one compile per shape is ~0.3 s.
    """
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, static_argnames=("group",))
    def run(q, k, v, bias, vis, dout, scale, cap, group: int):
        def f(q, k, v, bias):
            k = jnp.repeat(k, group, axis=1)  # query head h reads kv head h // G
            v = jnp.repeat(v, group, axis=1)
            logits = jnp.einsum("bhqd,bhkd->bhqk", q, k) * scale + bias
            logits = cap * jnp.tanh(logits / cap)
            safe = jnp.where(vis, logits, 0.0)  # keeps -inf (and NaN gradients) out of the graph
            top = jnp.max(jnp.where(vis, logits, -jnp.inf), axis=-1, keepdims=True)
            top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
            e = jnp.where(vis, jnp.exp(safe - top), 0.0)
            denom = jnp.sum(e, axis=-1, keepdims=True)
            live = denom > 0
            denom = jnp.where(live, denom, 1.0)
            out = jnp.einsum("bhqk,bhkd->bhqd", e / denom, v)
            lse = jnp.where(live, top + jnp.log(denom), -jnp.inf)[..., 0]
            return out, lse

        (out, lse), pullback = jax.vjp(f, q, k, v, bias)
        return out, lse, pullback((dout, jnp.zeros_like(lse)))

    return run


@profiled(12)
@given(cases(shape=JAX_SHAPES))
def test_forward_and_gradients_match_jax_autodiff_in_x64(case: Case) -> None:
    import jax.numpy as jnp

    s = case.shape
    vis = visibility(case.spec, case.inputs)
    bias = np.zeros((1, 1, 1, 1)) if case.inputs.bias is None else case.inputs.bias
    bias = np.where(np.isneginf(bias), 0.0, bias)  # already in vis; -inf would poison autodiff
    fwd = attention_forward(case.inputs, case.spec)
    grads = attention_backward(case.inputs, case.dout, case.spec, fwd)
    with x64():
        q, k, v, b, dout = (
            jnp.asarray(x) for x in (case.inputs.q, case.inputs.k, case.inputs.v, bias, case.dout)
        )
        assert q.dtype == jnp.float64, "x64 is not on: the comparison would be float32"
        # No softcap is cap = 1e200: tanh(x) rounds to x for |x| < 1e-8, so the forward is the
        # identity to an ulp and its derivative exactly 1; one compiled function serves both.
        cap = case.spec.softcap or 1e200
        out, lse, (dq, dk, dv, dbias) = jax_attention_vjp()(
            q,
            k,
            v,
            b,
            jnp.asarray(vis),
            dout,
            case.spec.resolved_scale(s.head_dim),
            cap,
            group=s.group_size,
        )
        expected = {
            n: np.asarray(x)
            for n, x in zip(
                ("out", "lse", "dq", "dk", "dv", "dbias"), (out, lse, dq, dk, dv, dbias), strict=True
            )
        }
    assert_close(fwd.out, expected["out"], JAX_RTOL, "out")
    assert_close(fwd.lse, expected["lse"], JAX_RTOL, "lse")
    for name in ("dq", "dk", "dv"):
        assert_close(getattr(grads, name), expected[name], JAX_RTOL, name)
    if case.inputs.bias is not None:
        assert_close(grads.dbias, expected["dbias"], JAX_RTOL, "dbias")


def test_x64_does_not_leak() -> None:
    import jax
    import jax.numpy as jnp

    before = jnp.zeros(1).dtype
    with x64():
        assert jnp.zeros(1).dtype == jnp.float64
    assert jnp.zeros(1).dtype == before
    assert jax.config.jax_enable_x64 == (before == jnp.float64)
