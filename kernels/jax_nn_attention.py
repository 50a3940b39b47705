"""``jax.nn.dot_product_attention`` as a subject: the translation shared by the ``xla``
and ``cudnn`` adapters, which differ only in ``implementation=`` and in what they support.

Translation from canonical semantics (``docs/semantics.md``):

* Layout: canonical ``[B, H, S, D]`` <-> jax.nn's ``[B, T, N, H]`` (sequence before
  heads): q, k, v and out are transposed on the way in and out.
* ``scale`` is passed resolved; the bias is added after scaling, as canonical.
* ``local_window_size=(left, right)`` is inclusive on both sides and top-left
  aligned, as canonical; an unbounded side (``None``) becomes ``Sq + Sk``, wider
  than any distance between a query and a key.
* Valid lengths map to ``query_seq_lengths``/``key_value_seq_lengths`` (int32);
  the boolean mask is passed as is (True = may attend).
* ``lse`` comes from ``return_residual=True`` where this JAX has it; it is laid out
  ``[B, T, N]`` and transposed to ``[B, H, Sq]``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Literal

import numpy as np

from kernels.base import Availability, SubjectGrads, SubjectOutput
from kernels.jax_runtime import (
    Compiled,
    CompiledCache,
    array_key,
    count_primitives,
    installed_jax_versions,
    to_jax,
    to_numpy,
    unavailable_because,
)
from reference.spec import AttentionInputs, AttentionSpec

Implementation = Literal["xla", "cudnn"]


# --- version compatibility: everything that differs between JAX versions --------------
# jax.nn.dot_product_attention has had implementation=, local_window_size= and the
# sequence-length arguments since before 0.4.35; return_residual= (the lse) is newer.


@dataclasses.dataclass(frozen=True)
class _Api:
    dot_product_attention: Any
    has_lse: bool  # accepts return_residual=True


def _load_api() -> _Api:
    import jax

    fn = jax.nn.dot_product_attention
    params = inspect.signature(fn).parameters
    for needed in ("implementation", "local_window_size", "query_seq_lengths", "key_value_seq_lengths"):
        if needed not in params:
            raise TypeError(f"jax.nn.dot_product_attention has no {needed}= argument")
    return _Api(fn, "return_residual" in params)


def api_has_lse() -> bool:
    """Whether this JAX's dot_product_attention returns the lse (``return_residual``)."""
    try:
        return _load_api().has_lse
    except Exception:
        return False


def api_availability(execution_detail: str) -> Availability:
    """Available when dot_product_attention exists with the arguments the adapters use."""
    try:
        _load_api()
    except Exception as error:
        return unavailable_because(error, "looking up jax.nn.dot_product_attention")
    return Availability(True, "", installed_jax_versions(), "native", execution_detail)


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Static:
    """The hashable, non-array part of one call: becomes the compiled function's closure."""

    implementation: Implementation
    scale: float
    causal: bool
    window: tuple[int, int] | None
    lse: bool


def _static(
    implementation: Implementation, inputs: AttentionInputs, spec: AttentionSpec, lse: bool
) -> _Static:
    window = None
    if spec.window is not None:
        unbounded = inputs.q.shape[2] + inputs.k.shape[2]
        left, right = spec.window
        window = (unbounded if left is None else int(left), unbounded if right is None else int(right))
    return _Static(implementation, spec.resolved_scale(inputs.q.shape[-1]), spec.causal, window, lse)


def _arrays(inputs: AttentionInputs) -> tuple[np.ndarray | None, ...]:
    lengths = (
        None if x is None else np.asarray(x, dtype=np.int32) for x in (inputs.q_lengths, inputs.kv_lengths)
    )
    return (inputs.q, inputs.k, inputs.v, inputs.bias, inputs.mask, *lengths)


def _attention(api: _Api, static: _Static):
    """A function of canonical-layout JAX arrays -> (out [B,H,Sq,Dv], lse [B,H,Sq] or None)."""
    import jax.numpy as jnp

    def attention(q, k, v, bias, mask, q_lengths, kv_lengths):
        to_bthd = (0, 2, 1, 3)  # [B, H, S, D] <-> [B, S, H, D]; the permutation is its own inverse
        result = api.dot_product_attention(
            jnp.transpose(q, to_bthd),
            jnp.transpose(k, to_bthd),
            jnp.transpose(v, to_bthd),
            bias,
            mask,
            scale=static.scale,
            is_causal=static.causal,
            query_seq_lengths=q_lengths,
            key_value_seq_lengths=kv_lengths,
            local_window_size=static.window,
            implementation=static.implementation,
            **({"return_residual": True} if static.lse else {}),
        )
        if static.lse:
            out, lse = result
            return jnp.transpose(out, to_bthd), jnp.transpose(lse, (0, 2, 1))
        return jnp.transpose(result, to_bthd), None

    return attention


@dataclasses.dataclass(frozen=True, eq=False)
class JaxNnRunner:
    """Runs canonical cases through ``jax.nn.dot_product_attention(implementation=...)``,
    caching one jitted function per shapes/dtypes/static options."""

    implementation: Implementation
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec, lse: bool) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype; ``lse: [B, Hq, Sq]`` (dtype of k) or None."""
        import jax

        static = _static(self.implementation, inputs, spec, lse)
        arrays = _arrays(inputs)
        args = tuple(to_jax(a) for a in arrays)

        def build() -> Compiled:
            fn = _attention(_load_api(), static)
            return Compiled(jax.jit(fn), self._ran(fn, args))

        compiled = self._cache.get(("forward", static, array_key(*arrays)), build)
        out, lse_out = compiled.fn(*args)
        return SubjectOutput(
            out=to_numpy(out), lse=None if lse_out is None else to_numpy(lse_out), ran=compiled.ran
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` by JAX autodiff; ``dbias`` has the bias's own shape."""
        import jax

        static = _static(self.implementation, inputs, spec, lse=False)
        arrays = _arrays(inputs)
        args = tuple(to_jax(a) for a in arrays)
        dout_j = to_jax(np.asarray(dout, dtype=inputs.q.dtype))

        def build() -> Compiled:
            attention = _attention(_load_api(), static)

            def grads(q, k, v, bias, mask, q_lengths, kv_lengths, dout):
                if bias is None:
                    _, vjp = jax.vjp(
                        lambda q, k, v: attention(q, k, v, None, mask, q_lengths, kv_lengths)[0], q, k, v
                    )
                    return (*vjp(dout), None)
                _, vjp = jax.vjp(
                    lambda q, k, v, b: attention(q, k, v, b, mask, q_lengths, kv_lengths)[0], q, k, v, bias
                )
                return vjp(dout)

            return Compiled(jax.jit(grads), self._ran(grads, (*args, dout_j)))

        compiled = self._cache.get(("backward", static, array_key(*arrays)), build)
        dq, dk, dv, dbias = compiled.fn(*args, dout_j)
        dbias = None if dbias is None else to_numpy(dbias)
        return SubjectGrads(to_numpy(dq), to_numpy(dk), to_numpy(dv), dbias)

    def _ran(self, fn: Any, args: tuple) -> str:
        if self.implementation == "cudnn":
            # jax.nn's cuDNN path traces to dot_product_attention_fwd/_bwd primitives.
            n = count_primitives(fn, args, "dot_product_attention")
            if n == 0:
                return "no cuDNN attention primitive traced: fell back"
            return f"cuDNN fused attention x{n}"
        n = count_primitives(fn, args, "pallas_call") + count_primitives(fn, args, "dot_product_attention")
        if n:
            return f"unexpected fused kernel x{n} under implementation='xla'"
        return "XLA ops (jax.nn.dot_product_attention, implementation='xla')"
