"""TPU flash attention (``jax.experimental.pallas.ops.tpu.flash_attention``): the primary subject.

Translation from canonical semantics (``docs/semantics.md``):

* Layout is already ``[B, H, S, D]``; there is no GQA (one kv head per query head).
* ``sm_scale`` defaults to 1.0 in the kernel; we always pass the canonical scale.
* The kernel adds its bias ``ab`` *before* scaling: ``logits = (q.k + ab) * sm_scale``.
  Canonical adds the bias after scaling, so we pass ``ab = bias / scale``
  (computed in float32: the kernel reads ``ab`` as float32 anyway). ``ab`` must be
  the full ``[B, H, Sq, Sk]``; a broadcastable canonical bias is broadcast here,
  and JAX's autodiff sums ``dbias`` back over the broadcast axes.
* Segment ids map to ``SegmentIds(q, kv)``; causal is top-left (``col <= row``).
* Masked logits get ``DEFAULT_MASK_VALUE = -0.7 * float32 max`` *added*, which in
  float32 swamps the logit. A row that sees no key therefore averages V over the
  kv blocks the kernel visits: all of them without causal, only those up to the
  diagonal block with causal. That depends on block sizes, so the convention is
  declared ``unspecified``.

Forward runs ``_flash_attention_impl(..., save_residuals=True)``, the function that
the public ``flash_attention`` wraps (through its custom VJP), so ``out`` and the
softmax statistics ``l`` and ``m`` come from one ``pallas_call``; ``lse = m + log(l)``.
Gradients go through the public ``flash_attention`` and its custom VJP.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Hashable
from typing import Any, ClassVar

import numpy as np

from kernels.contract.base import (
    Availability,
    Capabilities,
    ShapeConstraint,
    SubjectGrads,
    SubjectOutput,
)
from kernels.contract.dtypes import FP8_DTYPES
from kernels.contract.tunables import BlockDim, Config, Configurable, Tunable, Tunables, block_divides
from kernels.hardware.lowering import LoweringCall, abstract_arrays
from kernels.runtime.call_description import (
    GRADIENT_OUTPUTS,
    NO_CONTEXT,
    CallDescription,
    Module,
    Name,
    cache_key,
    jax_call,
    standalone,
    tpu_interpret_context,
)
from kernels.runtime.jax_runtime import CompiledCache, JaxCall, TracedPrimitives
from kernels.runtime.standalone import StandaloneCall
from kernels.runtime.tpu_interpret import (
    INTERPRETERS,
    TPU_INTERPRET_NO_VMAP,
    Interpreter,
    TpuExecution,
    choose_execution,
    interpreted_copy,
    pallas_ran,
    pallas_tpu_availability,
    race_detection_declared,
)
from reference.spec import AttentionInputs, AttentionSpec

MODULE = "jax.experimental.pallas.ops.tpu.flash_attention"
# The kernel's default BlockSizes.get_default(): every block is 128 (one TPU lane width).
BLOCK = 128


# Each constraint reads the case's blocks (its config with the defaults filled in); the
# reasons name the default 128 because that is what most cases run with.
CONSTRAINTS = (
    ShapeConstraint(
        name="kv_len_multiple_of_block_k",
        reason="block_k_major and block_k (default 128) must divide kv_len "
        "(_verify_block raises ValueError otherwise)",
        holds=lambda shape, spec, b: (
            block_divides(b["block_k_major"], shape.kv_len) and block_divides(b["block_k"], shape.kv_len)
        ),
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="q_len_at_least_block_q",
        reason="block_q (default 128) must not exceed q_len (_verify_block raises ValueError)",
        holds=lambda shape, spec, b: shape.q_len >= b["block_q"],
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="batch_at_least_block_b",
        reason="block_b (default 1) must not exceed the batch (_verify_block raises ValueError)",
        holds=lambda shape, spec, b: shape.batch >= b["block_b"],
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="head_dim_lane_multiple",
        reason="with more than one kv block the kernel tiles its softmax statistics over D in "
        "lanes of 128, so D above 128 must be a multiple of 128 (NotImplementedError otherwise)",
        holds=lambda shape, spec, b: (
            shape.kv_len <= b["block_k_major"] or shape.head_dim <= BLOCK or shape.head_dim % BLOCK == 0
        ),
        basis="raises",
        applies_to="forward",
        sees_config=True,
    ),
    ShapeConstraint(
        name="backward_blocks_divide_lengths",
        reason="the backward kernels' q blocks (block_q_major_dkv, block_q_dkv, block_q_dq) must "
        "divide q_len and their kv blocks kv_len (default 128; _verify_block raises ValueError)",
        holds=lambda shape, spec, b: (
            all(block_divides(b[n], shape.q_len) for n in ("block_q_major_dkv", "block_q_dkv", "block_q_dq"))
            and all(
                block_divides(b[n], shape.kv_len)
                for n in ("block_k_major_dkv", "block_k_dkv", "block_k_major_dq", "block_k_dq")
            )
        ),
        basis="raises",
        applies_to="backward",
        sees_config=True,
    ),
    ShapeConstraint(
        name="fp8_bias",
        reason="with a bias, fp8 q/k/v raise TypePromotionError: the pallas_call's cost estimate "
        "traces mha_reference, which adds the float32 bias to the fp8 logits of its einsum, and "
        "JAX never promotes 8-bit floats implicitly",
        holds=lambda shape, spec: False,
        basis="raises",
        features=("bias",),
        dtypes=FP8_DTYPES,
        exceptions=("TypePromotionError",),
    ),
)


# --- version compatibility: everything that differs between JAX versions --------------
# The kernel's API is the same from 0.4.35 to 0.10.2; what differs is how it can be
# interpreted on CPU (kernels/runtime/tpu_interpret.py) and whether the private
# _flash_attention_impl keeps the signature we call for lse.
# Tunables: BlockSizes has the same eleven fields, defaults (all 128, block_b 1) and
# checks at every version from 0.4.35 to 0.10.2. Minor blocks must divide their major
# (BlockSizes.__post_init__); kv blocks are multiples of 128 (the kernels tile kv in
# lanes: NotImplementedError otherwise); q blocks multiples of 8 (a TPU sublane tile).
# Where each shows (BlockDim, read at 0.10.2): the major blocks (and block_b, block_q_dq) are the
# [B, H, S, D] block specs of q (args[0]) and k (args[1]) of the forward, dkv and dq kernels; the
# minor ones (block_k, block_q_dkv, block_k_dkv, block_k_dq) are loop steps inside a kernel.
FORWARD_KERNEL, DKV_KERNEL, DQ_KERNEL = (
    "_flash_attention_kernel",
    "_flash_attention_dkv_kernel",
    "_flash_attention_dq_kernel",
)


def _q_block(
    name: str, backward: bool = False, divides: str | None = None, shows: tuple[BlockDim, ...] = ()
) -> Tunable:
    return Tunable(name, BLOCK, "q", backward, multiple_of=8, divides=divides, blocks=shows)


def _kv_block(
    name: str, backward: bool = False, divides: str | None = None, shows: tuple[BlockDim, ...] = ()
) -> Tunable:
    return Tunable(name, BLOCK, "kv", backward, multiple_of=BLOCK, divides=divides, blocks=shows)


def _seq(kernel: str, operand: str) -> tuple[BlockDim, ...]:
    return (BlockDim(kernel, operand, -2),)  # [B, H, S, D]: the sequence dimension


TUNABLES = Tunables(
    (
        _q_block("block_q", shows=_seq(FORWARD_KERNEL, "args[0]")),
        _kv_block("block_k_major", shows=_seq(FORWARD_KERNEL, "args[1]")),
        _kv_block("block_k", divides="block_k_major"),
        Tunable("block_b", 1, "batch", blocks=(BlockDim(FORWARD_KERNEL, "args[0]", -4),)),
        _q_block("block_q_major_dkv", backward=True, shows=_seq(DKV_KERNEL, "args[0]")),
        _q_block("block_q_dkv", backward=True, divides="block_q_major_dkv"),
        _kv_block("block_k_major_dkv", backward=True, shows=_seq(DKV_KERNEL, "args[1]")),
        _kv_block("block_k_dkv", backward=True, divides="block_k_major_dkv"),
        _kv_block("block_k_major_dq", backward=True, shows=_seq(DQ_KERNEL, "args[1]")),
        _kv_block("block_k_dq", backward=True, divides="block_k_major_dq"),
        _q_block("block_q_dq", backward=True, shows=_seq(DQ_KERNEL, "args[0]")),
    )
)

_IMPL_PARAMS = (
    "q",
    "k",
    "v",
    "ab",
    "segment_ids",
    "save_residuals",
    "causal",
    "sm_scale",
    "block_b",
    "block_q",
    "block_k_major",
    "block_k",
    "debug",
)


@dataclasses.dataclass(frozen=True)
class _Api:
    module: Any  # the kernel module, or its interpreting copy
    has_lse: bool  # _flash_attention_impl exists with the signature _IMPL_PARAMS (flash_forward calls it)


def _load_api(execution: TpuExecution) -> _Api:
    """The kernel module's entry points: the real module natively, else an interpreting copy."""
    if execution.mode == "native":
        import importlib

        module = importlib.import_module(MODULE)
    else:
        module = interpreted_copy(MODULE)
    impl = getattr(module, "_flash_attention_impl", None)
    return _Api(module, impl is not None and tuple(inspect.signature(impl).parameters) == _IMPL_PARAMS)


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class TpuFlashAdapter(Configurable):
    """Pallas TPU flash attention. Canonical ``[B, H, S, D]`` in, ``[B, H, Sq, D]`` out.

    interpreter: ``"generic"`` (fast, every JAX version) or ``"tpu"`` (TPU interpret
    mode, JAX >= 0.7.0); ignored on a real TPU, where the kernel runs natively.
    """

    # What ``--impl "NAME[interpreter=tpu]"`` may set (kernels/contract/subject_spec.py).
    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"interpreter": INTERPRETERS}
    interpreter: Interpreter = "generic"
    config: Config = ()  # the case's tunables (TUNABLES); () = BlockSizes.get_default()
    name: str = "tpu_flash"
    description: str = "Pallas TPU flash attention (jax.experimental.pallas.ops.tpu.flash_attention)"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def availability(self) -> Availability:
        return pallas_tpu_availability(self.interpreter, MODULE, _load_api)

    def _blocks(self) -> dict[str, int] | None:
        """Every ``BlockSizes`` field under this adapter's config (all set, so the backward
        runs), or None for the kernel's own defaults (the empty config)."""
        return TUNABLES.resolved(self.config) if self.config else None

    def capabilities(self) -> Capabilities:
        try:
            has_lse = _load_api(choose_execution(self.interpreter)).has_lse
        except Exception:
            has_lse = False
        return Capabilities(
            jax_runtime=True,
            race_detection=race_detection_declared(choose_execution(self.interpreter)),
            dtypes=("float32", "bfloat16", *FP8_DTYPES),
            # fp8: both matmuls accumulate in float32, and P is rounded to V's dtype before
            # the PV matmul (``p.astype(v.dtype)``; ``p.T.astype(do.dtype)`` for dv). out comes
            # back in the input dtype (``out_shape`` is q's), lse float32.
            internal_quantization="p_fp8",
            causal_alignments=("top_left",),
            segment_ids=True,
            bias=True,
            bias_broadcast=True,
            backward=True,
            bias_grad=True,
            lse=has_lse,
            fully_masked_rows="unspecified",
            constraints=CONSTRAINTS,
            tunables=TUNABLES,
            lowers_for="tpu",
        )

    # -- forward ---------------------------------------------------------------------

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, H, Sq, D]`` in the input dtype; ``lse: [B, H, Sq]`` float32."""
        key, call = self._call(inputs, spec, None)
        (out, lse), ran = self._cache.run(key, call, self._ran)
        return SubjectOutput(out=out, lse=lse, ran=ran)

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call (``dout`` None) or the gradients call on the kernel module as this
        adapter runs it (interpreted off TPU), on JAX arrays in the canonical layout."""
        return self._call(inputs, spec, dout)[1]

    def _call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None
    ) -> tuple[Hashable, JaxCall]:
        """``jax_call``'s call and its compile-cache key, both from this direction's description (the
        execution is in it: the module's interpreting copy and the interpreter's context)."""
        described = self._description(inputs, spec, dout is not None)
        # Every array is batch-first; a broadcast bias's batch axis is 1, as one row's would be.
        no_vmap = TPU_INTERPRET_NO_VMAP if choose_execution(self.interpreter).mode == "tpu" else ""
        return cache_key(described, inputs, dout), jax_call(described, inputs, dout, no_vmap=no_vmap)

    def _description(
        self, inputs: AttentionInputs, spec: AttentionSpec, backward: bool, lowering: bool = False
    ) -> CallDescription:
        """``flash_forward`` or ``flash_gradients`` on the kernel module (an interpreting copy off
        TPU; as shipped for ``lowering``), on q, k, v, bias and segment ids (and dout)."""
        execution = TpuExecution("native") if lowering else choose_execution(self.interpreter)
        api = _load_api(execution)
        keywords = (("scale", spec.resolved_scale(inputs.shape.head_dim)), ("causal", spec.causal))
        if self.config:  # the case's block sizes, every BlockSizes field
            keywords += (("blocks", self._blocks()),)
        arrays = tuple(Name(n) for n in ("q", "k", "v", "bias", "q_segment_ids", "kv_segment_ids"))
        module = (Module("module", MODULE, api.module, interpreted_off_tpu=True),)
        context = NO_CONTEXT if lowering else tpu_interpret_context(self.interpreter)
        note = f"{self.description}; off TPU: {TpuExecution(self.interpreter).description}" + (
            f"; block sizes {dict(self.config)}" if self.config else ""
        )
        if not backward:
            keywords += (("with_lse", api.has_lse),)
            return CallDescription(flash_forward, arrays, module, keywords, context=context, note=note)
        arrays += (Name("dout"),)
        return CallDescription(flash_gradients, arrays, module, keywords, GRADIENT_OUTPUTS, context, note)

    def _ran(self, primitives: TracedPrimitives) -> str:
        return pallas_ran(
            primitives, choose_execution(self.interpreter), fallback="fell back to plain attention"
        )

    # -- lowering for the TPU --------------------------------------------------------

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The forward or gradients call on the kernel module as shipped (no interpreter), for Mosaic."""
        call = self._description(inputs, spec, direction != "forward", lowering=True)
        args = abstract_arrays(*self._description(inputs, spec, False, True).traced_arguments(inputs))
        args = args if direction == "forward" else (*args, args[0])  # the gradients call takes dout
        return LoweringCall.described("tpu", call, inputs, args)

    # -- backward --------------------------------------------------------------------

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` through the kernel's custom VJP, canonical layout."""
        key, call = self._call(inputs, spec, dout)
        (dq, dk, dv, dbias), _ = self._cache.run(key, call, self._ran)
        return SubjectGrads(dq=dq, dk=dk, dv=dv, dbias=dbias)

    # -- standalone repro ------------------------------------------------------------

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """Both calls as standalone script text, rendered from their descriptions."""
        return standalone(self._description(inputs, spec, False), self._description(inputs, spec, True))


# --- the translation: pure functions of JAX arrays, embedded verbatim in standalone repros --


def kernel_bias(bias: Any, q: Any, k: Any, scale: float) -> Any:
    """Canonical bias (added after scaling) -> the kernel's ``ab`` (added before): ``bias / scale``,
    broadcast to the full ``[B, H, Sq, Sk]`` the kernel requires, in float32."""
    if bias is None:
        return None
    import jax.numpy as jnp

    b, h, sq, _ = q.shape
    full = (b, h, sq, k.shape[2])
    return jnp.broadcast_to(bias.astype(jnp.float32) / jnp.float32(scale), full)


def flash_forward(module, q, k, v, bias, q_seg, kv_seg, *, scale, causal, with_lse, blocks=None):
    """(out ``[B, H, Sq, D]``, lse ``[B, H, Sq]`` or None) from the kernel ``module``. With lse it
    calls ``_flash_attention_impl(..., save_residuals=True)``, the function the public
    ``flash_attention`` wraps, so out and the softmax statistics come from one pallas_call.
    ``blocks``: every ``BlockSizes`` field by name, or None for the kernel's defaults."""
    import jax.numpy as jnp

    ab = kernel_bias(bias, q, k, scale)
    segment_ids = (
        None if q_seg is None else module.SegmentIds(q_seg.astype(jnp.int32), kv_seg.astype(jnp.int32))
    )
    sizes = None if blocks is None else module.BlockSizes(**blocks)
    if not with_lse:
        return module.flash_attention(
            q, k, v, ab, segment_ids, causal=causal, sm_scale=scale, block_sizes=sizes
        ), None
    if sizes is None:
        b, h, sq, d = q.shape
        sizes = module.BlockSizes.get_default(b, h, sq, k.shape[2], d)
    out, denominator, row_max = module._flash_attention_impl(
        q,
        k,
        v,
        ab,
        segment_ids,
        True,  # save_residuals
        causal,
        scale,
        sizes.block_b,
        sizes.block_q,
        sizes.block_k_major,
        sizes.block_k,
        False,  # debug
    )
    return out, row_max + jnp.log(denominator)


def flash_gradients(module, q, k, v, bias, q_seg, kv_seg, dout, *, scale, causal, blocks=None):
    """(dq, dk, dv, dbias or None) of ``sum(out * dout)`` through the public ``flash_attention``'s
    custom VJP; JAX's autodiff sums dbias back over the bias's broadcast axes. ``blocks``: every
    ``BlockSizes`` field by name (the backward's too), or None for the kernel's defaults."""
    import jax
    import jax.numpy as jnp

    sizes = None if blocks is None else module.BlockSizes(**blocks)

    def attention(q, k, v, bias):
        segment_ids = (
            None if q_seg is None else module.SegmentIds(q_seg.astype(jnp.int32), kv_seg.astype(jnp.int32))
        )
        ab = kernel_bias(bias, q, k, scale)
        return module.flash_attention(
            q, k, v, ab, segment_ids, causal=causal, sm_scale=scale, block_sizes=sizes
        )

    if bias is None:
        _, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, None), q, k, v)
        return (*vjp(dout), None)
    _, vjp = jax.vjp(attention, q, k, v, bias)
    return vjp(dout)
