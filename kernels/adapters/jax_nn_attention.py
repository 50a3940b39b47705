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
* A chunked causal mask (``chunk``) has no argument: ``kernels.runtime.chunked_mask`` folds it into the
  boolean mask (``[B|1, 1, Sq, Sk]``, ANDed with the case's), and ``is_causal`` stays on.
* ``lse`` comes from ``return_residual=True`` where this JAX has it; it is laid out
  ``[B, T, N]`` and transposed to ``[B, H, Sq]``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Literal

import numpy as np

from kernels.contract.api_contract import ApiContract, ContractCall
from kernels.contract.base import Availability, SubjectGrads, SubjectOutput
from kernels.runtime.call_description import (
    GRADIENT_OUTPUTS,
    Built,
    CallDescription,
    Name,
    cache_key,
    jax_call,
    standalone,
)
from kernels.runtime.chunked_mask import diagonal_offsets, fold_chunk
from kernels.runtime.jax_runtime import (
    CompiledCache,
    JaxCall,
    TracedPrimitives,
    installed_jax_versions,
    unavailable_because,
)
from kernels.runtime.standalone import StandaloneCall
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec

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


def jax_nn_contract(own: Implementation) -> ApiContract:
    """What jax.nn.dot_product_attention documents about its implementation argument: a string, no
    list; ``None`` "currently falls back to `xla`" (its code calls the same function as 'xla'); no
    precision or logits_dtype argument."""
    return ApiContract(
        default=True,
        default_is="xla",
        own=own,
        documentation="jax.nn.dot_product_attention's docstring: implementation 'xla', 'cudnn' or None, "
        "'It defaults to `None`, which currently falls back to `xla`'; no precision or logits_dtype",
    )


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Static:
    """The hashable, non-array part of one call: the keywords of ``jax_nn_attention``."""

    implementation: Implementation
    scale: float
    causal: bool
    window: tuple[int, int] | None

    def options(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _static(implementation: Implementation, shape: AttentionShape, spec: AttentionSpec) -> _Static:
    window = jax_nn_window(spec.window, shape.q_len, shape.kv_len)
    return _Static(implementation, spec.resolved_scale(shape.head_dim), spec.causal, window)


def _with_keyword(described: CallDescription, name: str, value: Any) -> CallDescription:
    """``described`` with its static keyword ``name`` set to ``value``."""
    keywords = tuple((key, value if key == name else given) for key, given in described.keywords)
    return dataclasses.replace(described, keywords=keywords)


# --- the translation: pure functions of JAX arrays, embedded verbatim in standalone repros --


def jax_nn_window(window, q_len, kv_len):
    """Canonical ``(left, right)`` (None = unbounded) -> jax.nn's ``local_window_size`` (ints)."""
    if window is None:
        return None
    unbounded = q_len + kv_len  # wider than any distance between a query and a key
    left, right = window
    return (unbounded if left is None else int(left), unbounded if right is None else int(right))


def jax_nn_attention(
    q, k, v, bias, mask, q_lengths, kv_lengths, *, implementation, scale, causal, window, lse
):
    """Canonical ``[B, H, S, D]`` JAX arrays -> (out ``[B, Hq, Sq, Dv]``, lse ``[B, Hq, Sq]`` or None)
    through ``jax.nn.dot_product_attention``, whose layout is ``[B, S, H, D]``."""
    import jax
    import jax.numpy as jnp

    to_bthd = (0, 2, 1, 3)  # [B, H, S, D] <-> [B, S, H, D]; the permutation is its own inverse
    result = jax.nn.dot_product_attention(
        jnp.transpose(q, to_bthd),
        jnp.transpose(k, to_bthd),
        jnp.transpose(v, to_bthd),
        bias,
        mask,
        scale=scale,
        is_causal=causal,
        query_seq_lengths=q_lengths,
        key_value_seq_lengths=kv_lengths,
        local_window_size=window,
        implementation=implementation,
        **({"return_residual": True} if lse else {}),
    )
    if lse:
        out, lse_out = result
        return jnp.transpose(out, to_bthd), jnp.transpose(lse_out, (0, 2, 1))
    return jnp.transpose(result, to_bthd), None


def jax_nn_gradients(
    q, k, v, bias, mask, q_lengths, kv_lengths, dout, *, implementation, scale, causal, window
):
    """(dq, dk, dv, dbias or None) of ``sum(out * dout)``, by JAX autodiff of ``jax_nn_attention``;
    dbias has the bias's own shape."""
    import jax

    options = dict(implementation=implementation, scale=scale, causal=causal, window=window, lse=False)
    if bias is None:
        _, vjp = jax.vjp(
            lambda q, k, v: jax_nn_attention(q, k, v, None, mask, q_lengths, kv_lengths, **options)[0],
            q,
            k,
            v,
        )
        return (*vjp(dout), None)
    _, vjp = jax.vjp(
        lambda q, k, v, b: jax_nn_attention(q, k, v, b, mask, q_lengths, kv_lengths, **options)[0],
        q,
        k,
        v,
        bias,
    )
    return vjp(dout)


@dataclasses.dataclass(frozen=True, eq=False)
class JaxNnRunner:
    """Runs canonical cases through ``jax.nn.dot_product_attention(implementation=...)``,
    caching one jitted function per shapes/dtypes/static options."""

    implementation: Implementation
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def description(
        self, inputs: AttentionInputs, spec: AttentionSpec, lse: bool, backward: bool = False
    ) -> CallDescription:
        """The forward call (or the gradients call) on the canonical arrays, batch-first: q, k, v,
        bias, mask, lengths (and dout); a chunked case's mask is the chunk folded into it
        (``kernels.runtime.chunked_mask``)."""
        _load_api()  # the arguments used here exist on this JAX
        mask: Any = Name("mask")
        if spec.chunk is not None:
            offsets = diagonal_offsets(inputs, spec)
            chunk = (Name("mask"), Name("SQ"), Name("SK"), offsets, spec.chunk)
            mask = Built(
                "mask", fold_chunk, chunk, comment="the chunked causal mask as jax.nn's boolean mask"
            )
        arrays = (Name("q"), Name("k"), Name("v"), Name("bias"), mask, Name("q_lengths"), Name("kv_lengths"))
        options = tuple(_static(self.implementation, inputs.shape, spec).options().items())
        note = f"jax.nn.dot_product_attention(implementation={self.implementation!r}), jitted"
        if not backward:
            return CallDescription(jax_nn_attention, arrays, keywords=(*options, ("lse", lse)), note=note)
        return CallDescription(
            jax_nn_gradients, (*arrays, Name("dout")), keywords=options, outputs=GRADIENT_OUTPUTS, note=note
        )

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, lse: bool, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call (``dout`` None) or the gradients call (``description``) on JAX arrays."""
        return jax_call(self.description(inputs, spec, lse, dout is not None), inputs, dout)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec, lse: bool) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype; ``lse: [B, Hq, Sq]`` (dtype of k) or None."""
        (out, lse_out), ran = self._run(self.description(inputs, spec, lse), inputs, None)
        return SubjectOutput(out=out, lse=lse_out, ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` by JAX autodiff; ``dbias`` has the bias's own shape."""
        (dq, dk, dv, dbias), _ = self._run(self.description(inputs, spec, False, True), inputs, dout)
        return SubjectGrads(dq, dk, dv, dbias)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec, lse: bool) -> StandaloneCall:
        """Both calls as standalone script text, rendered from their descriptions."""
        return standalone(self.description(inputs, spec, lse), self.description(inputs, spec, lse, True))

    def contract_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, request: ContractCall
    ) -> SubjectOutput:
        """The forward call with ``implementation=`` this runner's (``own``) or None (``default``), for
        the api_contract check (``JAX_NN_CONTRACT``); jax.nn takes no implementation list, precision or
        logits dtype (NotImplementedError: the contract declares none of them)."""
        if request.implementation not in ("own", "default") or request.precision or request.logits_dtype:
            raise NotImplementedError(f"jax.nn.dot_product_attention cannot express {request}")
        implementation = None if request.implementation == "default" else self.implementation
        described = _with_keyword(self.description(inputs, spec, False), "implementation", implementation)
        (out, _), ran = self._run(described, inputs, None)
        return SubjectOutput(out=out, ran=ran)

    def _run(
        self, described: CallDescription, inputs: AttentionInputs, dout: np.ndarray | None
    ) -> tuple[tuple[np.ndarray | None, ...], str]:
        """The described call's outputs and what ran, compiled once per its key (``cache_key``)."""
        return self._cache.run(
            cache_key(described, inputs, dout), jax_call(described, inputs, dout), self._ran
        )

    def _ran(self, primitives: TracedPrimitives) -> str:
        if self.implementation == "cudnn":
            # jax.nn's cuDNN path traces to dot_product_attention_fwd/_bwd primitives.
            n = primitives.count("dot_product_attention")
            if n == 0:
                return "no cuDNN attention primitive traced: fell back"
            return f"cuDNN fused attention x{n}"
        n = primitives.count("pallas_call") + primitives.count("dot_product_attention")
        if n:
            return f"unexpected fused kernel x{n} under implementation='xla'"
        return "XLA ops (jax.nn.dot_product_attention, implementation='xla')"
