"""Batching under ``jax.vmap``: a control whose call batches as it computes, and a mutant whose
call is right unbatched but whose batching rule reads only the first slice (the class of a
``pallas_call`` or custom-call batching rule that drops or mixes the new axis)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels.runtime.jax_runtime import JaxCall
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.correct import CorrectAdapter, keywords


def _forward(q, k, v, **static: Any):
    out, lse = core.attention(q, k, v, **static)
    return out.astype(q.dtype), lse


def _gradients(q, k, v, dout, **static: Any):
    _, pullback = jax.vjp(lambda q, k, v: core.attention(q, k, v, **static)[0], q, k, v)
    return tuple(g.astype(q.dtype) for g in pullback(dout.astype(jnp.float32)))


@dataclasses.dataclass(frozen=True, eq=False)
class VmapAdapter(CorrectAdapter):
    """Control: ``CorrectAdapter`` with its call exposed to ``jax.vmap`` (``Adapter.jax_call``)."""

    name: str = "mutants_vmap_correct"
    description: str = "correct JAX attention, its call exposed to jax.vmap"

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        args = tuple(jnp.asarray(a) for a in (inputs.q, inputs.k, inputs.v))
        if dout is None:
            fn = functools.partial(_forward, **static)
        else:
            fn = functools.partial(_gradients, **static)
            args += (jnp.asarray(dout),)
        # q, k, v and dout keep their heads on axis 1: the call may be vmapped along heads too
        return JaxCall(self.batching(fn), args, (True,) * len(args), heads=(1,) * len(args))

    def batching(self, fn: Any) -> Any:
        return fn


@dataclasses.dataclass(frozen=True, eq=False)
class FirstSliceUnderVmap(VmapAdapter):
    """Right unbatched; under vmap its batching rule computes the first slice and returns it for
    every slice."""

    name: str = "mutants_vmap_first_slice"
    description: str = "a batching rule that answers every slice with the first one's answer"

    def batching(self, fn: Any) -> Any:
        @jax.custom_batching.custom_vmap
        def call(*args: Any) -> Any:
            return fn(*args)

        @call.def_vmap
        def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
            first = tuple(a[0] if batched else a for a, batched in zip(args, in_batched, strict=True))
            out = fn(*first)
            stacked = jax.tree.map(lambda o: jnp.broadcast_to(o, (axis_size, *o.shape)), out)
            return stacked, jax.tree.map(lambda _: True, out)

        return call
