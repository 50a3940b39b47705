"""The shared JAX runtime: one trace per interpreted program (``jit_observed``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.runtime.jax_runtime import TracedPrimitives, count_primitives, jit_observed


def test_what_ran_and_the_call_share_one_trace():
    """The trace that says what ran is the one the first call compiles: the Python function
    runs once for both (a separate make_jaxpr, as before, made it run twice)."""
    traced = []

    def attention(q, k):
        traced.append(q.shape)
        return jax.nn.softmax(q @ k.T) @ k

    q, k = jnp.ones((4, 8)), jnp.ones((6, 8))
    compiled = jit_observed(attention, (q, k), lambda p: f"dot_general x{p.count('dot_general')}")
    assert compiled.ran == "dot_general x2"
    assert len(traced) == 1
    compiled.fn(q, k)
    compiled.fn(q, k)
    assert len(traced) == 1, "the first call traced the function again"
    compiled.fn(jnp.ones((2, 8)), k)  # another shape is another program
    assert len(traced) == 2


def test_counts_reach_nested_jaxprs():
    """A primitive inside a nested jit, a custom_vjp or a scan body counts, as a pallas_call
    inside a kernel's custom VJP must."""

    @jax.custom_vjp
    def inner(x):
        return jnp.sin(x)

    inner.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))

    def outer(x):
        y = jax.jit(inner)(x)
        return jax.lax.scan(lambda c, _: (jnp.sin(c), None), y, None, length=2)[0]

    x = jnp.ones(3)
    seen = jit_observed(outer, (x,), lambda p: str(p.count("sin"))).ran
    assert seen == "2"  # one in the custom_vjp's primal, one in the scan body
    assert count_primitives(outer, (x,), "sin") == 2
    assert TracedPrimitives(("pallas_call", "pallas_call_x", "sin")).count("pallas_call") == 2


def test_a_cached_call_compiles_once_per_key_and_shapes_and_runs_in_its_context():
    import contextlib

    from kernels.runtime.jax_runtime import CompiledCache, JaxCall

    traced, entered = [], []

    @contextlib.contextmanager
    def context():
        entered.append(True)
        yield

    def call(q, k):
        traced.append(q.shape)
        return q @ k.T, None

    cache = CompiledCache()
    q, k = jnp.ones((4, 8)), jnp.ones((6, 8))
    ran = lambda p: f"dot_general x{p.count('dot_general')}"  # noqa: E731
    (out, lse), words = cache.run("key", JaxCall(call, (q, k), (True, True), context), ran)
    assert out.shape == (4, 6) and lse is None and words == "dot_general x1" and entered == [True]
    assert type(out).__module__ == "numpy"
    cache.run("key", JaxCall(call, (q, k), (True, True), context), ran)
    assert len(traced) == 1 and len(cache) == 1
    cache.run("key", JaxCall(call, (jnp.ones((2, 8)), k), (True, True)), ran)  # another shape
    assert len(traced) == 2 and len(cache) == 2
    cache.run("other", JaxCall(call, (q, k), (True, True)), ran)  # another key: another entry
    assert len(cache) == 3
