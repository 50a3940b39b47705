"""Splash attention (``jax.experimental.pallas.ops.tpu.splash_attention``), TPU, interpreted on CPU.

Translation from canonical semantics (``docs/semantics.md``):

* Splash works on one batch element, ``q: [Hq, Sq, D]``, ``k/v: [Hkv, Sk, D]``; we
  ``vmap`` it over the batch. GQA is native (query head ``h`` reads kv head ``h // G``).
* Splash does not scale: the caller multiplies q. We pass ``q * scale``, computed in
  float32 and rounded once to the subject dtype, as a splash user would. The adapter
  declares it (``Capabilities.q_prescaled``), so the baseline rounds its q the same way: in
  fp8 that rounding is large, and it is the API's, not the kernel's.
* Masks are static objects built into the kernel: causal is ``CausalMask(offset)``
  and a window ``LocalMask(window, offset)``, both with ``diag(i) = i + offset``, so
  ``offset = 0`` is top-left and ``offset = Sk - Sq`` bottom-right. Causal with a
  window is one ``LocalMask`` whose right edge is ``min(right, 0)``. A boolean mask
  becomes a ``NumpyMask`` per head; one that differs across the batch gets a kernel
  per batch element.
* Chunked causal (``chunk``, JAX >= 0.6.0) is ``ChunkedCausalMask(shape, chunk)``: key ``j``
  visible from query ``i`` iff ``i // C == j // C`` and ``i >= j``, which is canonical top-left
  (chunks on the key axis from key 0, a query in its diagonal's chunk). It has no offset, so
  bottom-right is not declared; with a window it is ANDed with the ``LocalMask``.
* Segment ids map to ``SegmentIds(q, kv)``; softcap to ``attn_logits_soft_cap``
  (applied to the scaled logits, as canonical). There is no bias and no lengths.
* Sinks (JAX >= 0.7.1) map to the kernel's ``sinks: [Hq]`` argument, shared by every batch
  row (unbatched under the ``vmap``, so their gradient is summed over the batch). The kernel
  caps only ``q.k`` and starts each row's max at the sink, as canonical; its backward
  returns d(sinks), computed outside the Pallas kernels from ``out``, ``dout`` and ``lse``.
* ``lse`` comes from a second kernel built with ``save_residuals=True`` (a kernel that
  saves residuals has no VJP, so gradients use the plain one).
* Masked logits become ``mask_value`` and whole masked blocks are skipped: a row that
  sees no key averages V over the visited blocks, or is NaN when none is visited.

The translation lives in module-level functions of NumPy/JAX values (``mask_layout``,
``mask_planes``, ``structural_mask`` (shared with ``kernels/adapters/tokamax_splash.py``), ``splash_mask``,
``kernel_blocks``, ``splash_kernels``, ``splash_attention``, ``splash_forward``, ``splash_gradients``)
that the adapter's call description (``kernels/runtime/call_description.py``) runs and renders as a
repro script, so script and suite build the same kernels.
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
    compiled_where_run,
)
from kernels.contract.dtypes import FP8_DTYPES
from kernels.contract.tunables import BlockDim, Config, Configurable, Tunable, Tunables, block_divides
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays
from kernels.runtime.call_description import (
    NO_CONTEXT,
    Built,
    CallDescription,
    Decided,
    Module,
    Name,
    cache_key,
    off_chip,
    standalone,
    tpu_interpret_context,
)
from kernels.runtime.call_description import jax_call as described_call
from kernels.runtime.jax_runtime import CompiledCache, JaxCall, TracedPrimitives, jax_version
from kernels.runtime.standalone import StandaloneCall
from kernels.runtime.tpu_interpret import (
    INTERPRETERS,
    Interpreter,
    TpuExecution,
    choose_execution,
    pallas_ran,
    pallas_tpu_availability,
    race_detection_declared,
)
from reference.spec import AttentionInputs, AttentionSpec

MODULE = "jax.experimental.pallas.ops.tpu.splash_attention"
BLOCK = 128  # BlockSizes.get_default(): every block 128


# Each constraint reads the case's blocks (its config, defaults filled in).
CONSTRAINTS = (
    ShapeConstraint(
        name="q_len_multiple_of_block_q",
        reason="block_q (default 128) must divide q_len (mask processing raises ValueError)",
        holds=lambda shape, spec, b: block_divides(b["block_q"], shape.q_len),
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="kv_len_multiple_of_block_kv",
        reason="block_kv (default 128) must divide kv_len (mask processing raises ValueError)",
        holds=lambda shape, spec, b: block_divides(b["block_kv"], shape.kv_len),
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="backward_blocks_divide_lengths",
        reason="the backward blocks (block_q_dkv, block_q_dq on q; block_kv_dkv, block_kv_dq on kv; "
        "default 128) must divide the lengths (mask processing raises ValueError)",
        holds=lambda shape, spec, b: (
            block_divides(b["block_q_dkv"], shape.q_len)
            and block_divides(b["block_kv_dkv"], shape.kv_len)
            and (
                b["use_fused_bwd_kernel"]
                or (
                    block_divides(b["block_q_dq"], shape.q_len)
                    and block_divides(b["block_kv_dq"], shape.kv_len)
                )
            )
        ),
        basis="raises",
        applies_to="backward",
        sees_config=True,
    ),
    ShapeConstraint(
        name="segment_ids_block_q_dkv_multiple_of_128",
        reason="with segment ids the dkv kernel lays q along the lanes: block_q_dkv must be a "
        "multiple of 128 (NotImplementedError 'block_q must be a multiple of 128', every version)",
        holds=lambda shape, spec, b: b["block_q_dkv"] % BLOCK == 0,
        basis="raises",
        applies_to="backward",
        features=("segment_ids",),
        sees_config=True,
    ),
)


def _lanes(block: int, q_len: int) -> bool:
    return block % BLOCK == 0 or block == q_len


# What only the TPU's compiler rejects: the interpreter runs these cases, Mosaic does not lower them.
LOWERING_CONSTRAINTS = (
    ShapeConstraint(
        name="backward_q_blocks_on_lanes",
        reason="lowered for TPU, the backward kernels take q blocks along the lanes of their "
        "per-row statistics (lse, di): block_q_dkv, and block_q_dq unless use_fused_bwd_kernel, "
        "must be a multiple of 128 or the whole q_len (Mosaic raises ValueError: 'the last two "
        "dimensions of your block shape are divisible by 8 and 128'); the interpreters accept any",
        holds=lambda shape, spec, b: (
            _lanes(b["block_q_dkv"], shape.q_len)
            and (b["use_fused_bwd_kernel"] or _lanes(b["block_q_dq"], shape.q_len))
        ),
        basis="raises",
        applies_to="backward",
        sees_config=True,
        stage="lowering",
    ),
)


# --- version compatibility: everything that differs between JAX versions --------------
# * make_splash_mha gained keyword arguments over time; the sharding ones are passed
#   only where they exist.
# * Sinks: ``_splash_attention`` (what a kernel object's call forwards to) has a ``sinks``
#   argument from 0.7.1; it is looked for there, and sinks are unsupported (with the reason)
#   where it is missing.
# A standalone script gets these decided for the JAX that wrote it: the sharding keywords as
# a literal, and no script for a sinks case where the kernel takes no sinks.
# * Head dims: up to 0.4.38 the forward kernel needs D % 128 == 0 and has no separate
#   Dv; 0.5.3 and 0.6.2 allow Dv != D but need Dv % 128 == 0; from 0.7.2 neither limit
#   exists (NotImplementedError where they do). Thresholds are the first versions
#   verified without the limit; versions in between were not run.

ANY_HEAD_DIM_SINCE = (0, 5, 3)
ANY_V_HEAD_DIM_SINCE = (0, 7, 2)
# * Chunked causal: ``ChunkedCausalMask`` arrives in 0.6.0 (looked for in the module; 0.5.3 has
#   none). Where it is missing, chunked cases are unsupported with CHUNKED_REASON (a constraint of
#   basis ``api``); it has no offset at any version, so only top-left is declared.
CHUNKED_MASK_SINCE = (0, 6, 0)
CHUNKED_REASON = "splash has ChunkedCausalMask from JAX 0.6.0; this JAX's splash has no chunked causal mask"

# Tunables: BlockSizes has the same fields, defaults (every block 128, the unfused
# backward) and checks from 0.4.35 to 0.10.2. kv blocks and their compute blocks are
# multiples of 128 (ValueError / NotImplementedError otherwise), a compute block divides
# its block; q blocks are multiples of 8 (a TPU sublane tile). The fused backward has no
# dq kernel: its dq blocks must be unset (BlockSizes raises), so the adapter drops them.


# Where each shows (BlockDim, read at 0.10.2): q (args[3]) and k (args[4]) block specs, [..., S, D]
# (batch, when more than one, and heads squeezed), of the forward, dkv and dq kernels (after two
# scalar-prefetch and one mask operand); the compute blocks are loop steps inside a kernel.
_OPERANDS = {"q": "args[3]", "kv": "args[4]"}
# Kernel names are ``splash_{mha|mqa}_{phase}...`` at every release; up to JAX 0.4.x they end in the
# block sizes (``..._block_kv_dkv=256``), so the phase is matched where it stands, after the type.
SPLASH_KERNEL = {phase: rf"^splash_m[hq]a_{phase}" for phase in ("fwd", "dkv", "dq")}


def _block(
    name: str, axis: str, backward: bool = False, divides: str | None = None, kernel: str | None = None
) -> Tunable:
    shows = () if kernel is None else (BlockDim(kernel, _OPERANDS[axis], -2),)
    return Tunable(
        name, BLOCK, axis, backward, multiple_of=8 if axis == "q" else BLOCK, divides=divides, blocks=shows
    )


TUNABLES = Tunables(
    (
        _block("block_q", "q", kernel=SPLASH_KERNEL["fwd"]),
        _block("block_kv", "kv", kernel=SPLASH_KERNEL["fwd"]),
        _block("block_kv_compute", "kv", divides="block_kv"),
        _block("block_q_dkv", "q", backward=True, kernel=SPLASH_KERNEL["dkv"]),
        _block("block_kv_dkv", "kv", backward=True, kernel=SPLASH_KERNEL["dkv"]),
        _block("block_kv_dkv_compute", "kv", backward=True, divides="block_kv_dkv"),
        _block("block_q_dq", "q", backward=True, kernel=SPLASH_KERNEL["dq"]),
        _block("block_kv_dq", "kv", backward=True, kernel=SPLASH_KERNEL["dq"]),
        Tunable("use_fused_bwd_kernel", False, "flag", backward=True),
    )
)


@dataclasses.dataclass(frozen=True)
class _Api:
    """What differs by version, decided once (a standalone script gets these as literals)."""

    module: Any  # the splash package: make_splash_mha, BlockSizes, SegmentIds and the mask classes
    shard_kwargs: tuple[tuple[str, int], ...]  # make_splash_mha's sharding keywords, where they exist
    sinks: bool  # the kernel takes sinks=[Hq]
    chunked: bool  # the module has ChunkedCausalMask


def _load_api() -> _Api:
    import importlib

    splash = importlib.import_module(MODULE)
    params = inspect.signature(splash.make_splash_mha).parameters
    if "interpret" not in params:
        raise TypeError("make_splash_mha has no interpret= argument on this version")
    shards = tuple((name, 1) for name in ("head_shards", "q_seq_shards") if name in params)
    masks = importlib.import_module(MODULE + ".splash_attention_mask")  # not re-exported by the package
    return _Api(splash, shards, _takes_sinks(), hasattr(masks, "ChunkedCausalMask"))


def _takes_sinks() -> bool:
    import importlib

    kernel = importlib.import_module(MODULE + ".splash_attention_kernel")
    call = getattr(kernel, "_splash_attention", None)
    if call is None:
        return False
    call = getattr(call, "__wrapped__", call)  # under jax.jit
    try:
        return "sinks" in inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False


SINKS_REASON = "attention sinks not supported: splash takes sinks from JAX 0.7.1"
PER_ROW_MASK_NO_VMAP = (
    "the boolean mask differs across the batch, so each batch row runs its own kernel with that row's "
    "mask built in: under jax.vmap the batch-reversed request would meet the other rows' masks, "
    "a question the call cannot be asked, not a batching rule's answer"
)


def _chunked_constraints(chunked: bool) -> tuple[ShapeConstraint, ...]:
    """Where this JAX's splash has no ``ChunkedCausalMask``: chunked cases cannot be expressed."""
    if chunked:
        return ()
    return (
        ShapeConstraint(
            name="chunked_causal_mask_missing",
            reason=CHUNKED_REASON,
            holds=lambda shape, spec: spec.chunk is None,
            basis="api",
            features=("chunked_causal",),
        ),
    )


def _head_dim_constraints() -> tuple[tuple[ShapeConstraint, ...], bool]:
    """(constraints on D and Dv, whether Dv != D is supported) for the installed JAX."""
    version = jax_version()
    if version < ANY_HEAD_DIM_SINCE:
        return (
            ShapeConstraint(
                name="head_dim_multiple_of_128",
                reason="before JAX 0.5 the splash forward kernel tiles D in lanes of 128 "
                "(NotImplementedError otherwise)",
                holds=lambda shape, spec: shape.head_dim % BLOCK == 0,
                basis="raises",
            ),
        ), False
    if version < ANY_V_HEAD_DIM_SINCE:
        return (
            ShapeConstraint(
                name="v_head_dim_multiple_of_128",
                reason="before JAX 0.7 the splash forward kernel tiles Dv in lanes of 128 "
                "(NotImplementedError otherwise)",
                holds=lambda shape, spec: shape.v_head_dim % BLOCK == 0,
                basis="raises",
            ),
        ), True
    return (), True


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class SplashAdapter(Configurable):
    """Splash attention at its default block sizes or a config's. Canonical ``[B, H, S, D]`` in and out.

    interpreter: ``"generic"`` (every JAX version) or ``"tpu"`` (JAX >= 0.7.0); native on a TPU.
    """

    # What ``--impl "NAME[interpreter=tpu]"`` may set (kernels/contract/subject_spec.py).
    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"interpreter": INTERPRETERS}
    interpreter: Interpreter = "generic"
    config: Config = ()  # the case's tunables (TUNABLES); () = BlockSizes.get_default()
    name: str = "splash"
    description: str = "Pallas TPU splash attention (jax.experimental.pallas.ops.tpu.splash_attention)"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def availability(self) -> Availability:
        return pallas_tpu_availability(self.interpreter, MODULE, lambda execution: _load_api())

    def capabilities(self) -> Capabilities:
        head_dim_constraints, distinct_v_dim = _head_dim_constraints()
        sinks, chunked = self._sinks_supported(), self._chunked_supported()
        return Capabilities(
            jax_runtime=True,
            race_detection=race_detection_declared(choose_execution(self.interpreter)),
            dtypes=("float32", "bfloat16", *FP8_DTYPES),
            # Splash takes no scale: its caller passes q * scale in q's dtype, which in fp8 keeps
            # 3 (e4m3fn) or 2 (e5m2) mantissa bits (subnormal below 2^-6 in e4m3fn). That rounding
            # is the API's, not the kernel's: every splash user pays it, and no kernel fix can
            # remove it. Declared, the baseline pre-scales its q the same way, so the checks judge
            # only what the kernel adds to that product: a real fp8 defect still fails (red means
            # a defect), and no known-issue entry blankets every fp8 lse check (green hides
            # nothing). Undeclared, lse ratios were 2e2 to 1e5 (docs/tolerances.md). P stays
            # float32 (V is upcast before the PV matmul): no internal quantization.
            q_prescaled=True,
            causal_alignments=("top_left", "bottom_right"),
            chunked_causal_alignments=("top_left",),  # ChunkedCausalMask has no offset
            window=True,
            segment_ids=True,
            bool_mask=True,
            gqa=True,
            softcap=True,
            sinks=sinks,
            sinks_grad=sinks,
            distinct_v_dim=distinct_v_dim,
            backward=True,
            lse=True,
            fully_masked_rows="unspecified",
            constraints=compiled_where_run(
                CONSTRAINTS + LOWERING_CONSTRAINTS + head_dim_constraints + _chunked_constraints(chunked),
                choose_execution(self.interpreter).mode == "native",
            ),
            tunables=TUNABLES,
            lowers_for="tpu",
        )

    def _sinks_supported(self) -> bool:
        try:
            return _load_api().sinks
        except Exception:  # noqa: BLE001 - unavailable: availability() says why
            return False

    def _chunked_supported(self) -> bool:
        try:
            return _load_api().chunked
        except Exception:  # noqa: BLE001 - unavailable: availability() says why
            return jax_version() >= CHUNKED_MASK_SINCE

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, Dv]`` in the input dtype; ``lse: [B, Hq, Sq]`` float32."""
        key, call = self._call(inputs, spec, None)
        (out, lse), ran = self._cache.run(key, call, self._ran)
        return SubjectOutput(out=out, lse=lse, ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` through splash's custom VJP; q's includes the scale;
        ``dsinks: [Hq]`` with sinks."""
        key, call = self._call(inputs, spec, dout)
        (dq, dk, dv, dsinks), _ = self._cache.run(key, call, self._ran)
        return SubjectGrads(dq=dq, dk=dk, dv=dv, dsinks=dsinks)

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call (``dout`` None) or the gradients call over this case's kernels that
        ``forward``/``gradients`` run, on JAX arrays in the canonical layout, in this subject's
        interpreter context. q, k, v, segment ids and dout are batch-first; sinks (``[Hq]``) are
        shared by every request. The mask is a static object built into the kernels: one kernel for
        every row is independent of the batch order; a mask that differs across the batch (one
        kernel per row) is not, so ``no_vmap`` says so (``PER_ROW_MASK_NO_VMAP``); placed on a mesh
        the call is still the same function, so ``sharded`` runs it."""
        return self._call(inputs, spec, dout)[1]

    def _call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None
    ) -> tuple[Hashable, JaxCall]:
        """``jax_call``'s call and its compile-cache key, both from this direction's description (the
        mask, blocks and interpreter are in it). No head axes: the kernels are built for the case's
        Hq heads (one mask each), so a call vmapped along heads would meet kernels of the wrong width."""
        described = self._description(inputs, spec, dout is not None)
        batched = (True, True, True, True, True, False) + ((True,) if dout is not None else ())
        planes = mask_planes(inputs.mask, inputs.shape.q_heads, inputs.shape.q_len, inputs.shape.kv_len)
        no_vmap = PER_ROW_MASK_NO_VMAP if planes is not None and len(planes) > 1 else ""
        call = described_call(described, inputs, dout, batched, no_vmap)
        return cache_key(described, inputs, dout), dataclasses.replace(call, heads=None)

    def _ran(self, primitives: TracedPrimitives) -> str:
        return pallas_ran(primitives, choose_execution(self.interpreter), fallback="fell back")

    def _description(
        self, inputs: AttentionInputs, spec: AttentionSpec, backward: bool, lowering: bool = False
    ) -> CallDescription:
        """``splash_forward`` (kernels that save residuals) or ``splash_gradients`` over this case's
        kernels: its structural mask (``mask_layout``) and boolean mask planes (``mask_planes``), the
        config's blocks, built in the interpreter's context (``interpret=`` off a TPU; never for
        ``lowering``), on q, k, v, segment ids and sinks (and dout)."""
        api = _load_api()
        if inputs.sinks is not None and not api.sinks:
            raise NotImplementedError(SINKS_REASON)
        splash = Module("splash", MODULE, api.module)
        sq, sk = Name("SQ"), Name("SK")
        chunk = () if spec.chunk is None else (spec.chunk,)
        mask = (spec.causal, spec.alignment, spec.window, sq, sk, *chunk)
        layout = Built("layout", mask_layout, mask, comment="(kind, offset, window, chunk)")
        planes = Built(
            "planes",
            mask_planes,
            (Name("mask"), Name("HQ"), sq, sk),
            comment="the boolean mask, [Hq, Sq, Sk] per batch row",
        )
        options = (
            ("save_residuals", not backward),
            ("softcap", spec.softcap),
            ("blocks", Built("", kernel_blocks, (TUNABLES.resolved(self.config),))),
            ("interpret", Decided(False, "False") if lowering else off_chip("tpu")),
            ("shard_kwargs", dict(api.shard_kwargs)),
        )
        kernels = Built(
            "kernels", splash_kernels, (splash, layout, planes, Name("HQ"), sq, sk), options, in_context=True
        )
        arrays = tuple(Name(n) for n in ("q", "k", "v", "q_segment_ids", "kv_segment_ids", "sinks"))
        scale = (("scale", spec.resolved_scale(inputs.shape.head_dim)),)
        context = NO_CONTEXT if lowering else tpu_interpret_context(self.interpreter)
        note = f"{self.description}; off TPU: {TpuExecution(self.interpreter).description}" + (
            f"; config {dict(self.config)}" if self.config else ""
        )
        if not backward:
            return CallDescription(
                splash_forward, arrays, (splash, kernels), scale, context=context, note=note
            )
        outputs = ("dq", "dk", "dv", "dsinks")
        arrays += (Name("dout"),)
        return CallDescription(splash_gradients, arrays, (splash, kernels), scale, outputs, context, note)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The same kernels built with ``interpret=False``, for Mosaic."""
        call = self._description(inputs, spec, direction == "backward", lowering=True)
        arrays = (inputs.q, inputs.k, inputs.v, inputs.q_segment_ids, inputs.kv_segment_ids, inputs.sinks)
        args = abstract_arrays(*arrays)
        if direction == "backward":
            import jax

            b, hq, sq, _ = inputs.q.shape
            args += (jax.ShapeDtypeStruct((b, hq, sq, inputs.v.shape[-1]), inputs.q.dtype),)
        # A ChunkedCausalMask is computed in the kernel from a 1-D q_sequence, whose block Mosaic
        # tiles by the chip's lanes and sublanes: lowered under an abstract TPU (the default kind).
        device_kind = DEFAULT_DEVICE_KIND if spec.chunk is not None else None
        return LoweringCall.described("tpu", call, inputs, args, device_kind)

    # -- standalone repro ------------------------------------------------------------

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """Both calls as standalone script text, rendered from their descriptions: the same mask,
        kernels and calls, decided for the installed JAX (its sharding keywords, whether it takes
        sinks); ``inputs`` may be a skeleton (only shapes and which arrays are set matter)."""
        return standalone(self._description(inputs, spec, False), self._description(inputs, spec, True))


# --- the translation: functions of NumPy/JAX values, embedded verbatim in standalone repros --


def gradients_with_sinks(attend, q, k, v, sinks, dout):
    """(dq, dk, dv, dsinks or None) of ``sum(attend(q, k, v, sinks) * dout)`` by ``jax.vjp``: the
    sinks get a gradient only where the case has them (splash-style calls take ``sinks=None``)."""
    import jax

    if sinks is None:
        _, vjp = jax.vjp(lambda q, k, v: attend(q, k, v, None), q, k, v)
        return (*vjp(dout), None)
    _, vjp = jax.vjp(attend, q, k, v, sinks)
    return vjp(dout)


def mask_layout(
    causal: bool, alignment: str, window: Any, q_len: int, kv_len: int, chunk: Any = None
) -> tuple:
    """(kind, offset, window, chunk) of the structural mask: kind ``"full"``, ``"causal"``,
    ``"local"`` or ``"chunked"`` (``ChunkedCausalMask`` of ``chunk`` keys, top-left, ANDed with a
    ``LocalMask`` when ``window`` is set); ``offset`` puts the diagonal at ``i + offset`` (0 top-left,
    Sk - Sq bottom-right); ``window`` (left, right) for ``LocalMask``, causal folded in as
    ``right = min(right, 0)``."""
    offset = 0 if alignment == "top_left" else kv_len - q_len
    if causal and window is not None:
        left, right = window
        window = (left, 0 if right is None else min(right, 0))
    # A window with no bound on the left adds nothing to causal (right <= 0 here), and one with
    # no bound on either side is no mask: name them CausalMask / FullMask, as a user would.
    # (LocalMask((None, None)) itself fails in splash's kernel with "captures constants".)
    if window in ((None, 0), (None, None)) and (causal or window == (None, None)):
        window = None
    if chunk is not None:
        return "chunked", offset, window, chunk
    kind = "local" if window is not None else "causal" if causal else "full"
    return kind, offset, window, None


def mask_planes(mask: Any, q_heads: int, q_len: int, kv_len: int) -> Any:
    """A boolean mask broadcastable to ``[Bm, Hq, Sq, Sk]`` -> one ``[Hq, Sq, Sk]`` plane per batch
    row (only one when every row's is the same), or None without a mask."""
    if mask is None:
        return None
    full = np.broadcast_to(mask, (mask.shape[0], q_heads, q_len, kv_len))
    planes = tuple(np.ascontiguousarray(full[i]) for i in range(full.shape[0]))
    if len(planes) > 1 and all(np.array_equal(planes[0], p) for p in planes[1:]):
        planes = planes[:1]
    return planes


def structural_mask(masks: Any, layout: tuple, q_len: int, kv_len: int) -> Any:
    """``layout``'s structural mask (``mask_layout``) as one 2-D splash mask object of ``masks``, a
    splash mask module (JAX's ``splash_attention_mask``, or tokamax's copy of it, which has the
    same classes): ``CausalMask``/``LocalMask`` with their offset, ``ChunkedCausalMask`` (ANDed
    with a ``LocalMask`` when a window is set), or ``FullMask``."""
    kind, offset, window, chunk = layout
    shape = (q_len, kv_len)
    if kind == "chunked":
        structural = masks.ChunkedCausalMask(shape, chunk_size=chunk)
        if window is not None:
            structural = structural & masks.LocalMask(shape, window_size=window, offset=offset)
        return structural
    if kind == "causal":
        return masks.CausalMask(shape, offset=offset)
    if kind == "local":
        return masks.LocalMask(shape, window_size=window, offset=offset)
    return masks.FullMask(shape)


def splash_mask(splash: Any, layout: tuple, plane: Any, q_heads: int, q_len: int, kv_len: int) -> Any:
    """The ``MultiHeadMask`` of one kernel: ``layout``'s structural mask, ANDed into a ``NumpyMask``
    per head with ``plane`` (``[Hq, Sq, Sk]`` bool) when there is one."""
    import importlib  # ChunkedCausalMask is not re-exported by the splash package

    kind = layout[0]
    masks = importlib.import_module(splash.__name__ + ".splash_attention_mask")
    structural = structural_mask(masks, layout, q_len, kv_len)
    heads = []
    for h in range(q_heads):
        if plane is None:
            heads.append(structural)
            continue
        head = plane[h]
        if kind != "full":
            # Materialise the structural mask and AND it in: one NumpyMask per head.
            head = head & np.asarray(structural[0:q_len, 0:kv_len])
        heads.append(splash.NumpyMask(head))
    return splash.MultiHeadMask(heads)


def kernel_blocks(values: dict) -> dict:
    """``BlockSizes`` keywords from every tunable's value: the fused backward has no dq kernel,
    so its dq blocks stay unset (``BlockSizes`` raises otherwise)."""
    values = dict(values)
    if values["use_fused_bwd_kernel"]:
        del values["block_q_dq"], values["block_kv_dq"]
    return values


def splash_kernels(
    splash: Any,
    layout: tuple,
    planes: Any,
    q_heads: int,
    q_len: int,
    kv_len: int,
    *,
    save_residuals: bool,
    softcap: float | None,
    blocks: dict,
    interpret: bool,
    shard_kwargs: dict,
) -> list:
    """One kernel per mask plane (one per batch row when the boolean mask differs across rows),
    else one for every row. ``save_residuals``: the kernel also returns lse (and has no VJP)."""
    return [
        splash.make_splash_mha(
            splash_mask(splash, layout, plane, q_heads, q_len, kv_len),
            save_residuals=save_residuals,
            attn_logits_soft_cap=softcap,
            block_sizes=splash.BlockSizes(**blocks),
            interpret=interpret,
            **shard_kwargs,
        )
        for plane in planes or (None,)
    ]


def splash_attention(
    splash: Any, kernels: list, q: Any, k: Any, v: Any, q_seg: Any, kv_seg: Any, sinks: Any, *, scale: float
) -> Any:
    """``[B, H, S, D]`` -> out ``[B, Hq, Sq, Dv]`` (and lse ``[B, Hq, Sq]`` from kernels that save
    residuals). Splash does not scale: q is multiplied in float32 and rounded once to its dtype.
    One kernel is vmapped over the batch; with one kernel per batch row each row gets its own.
    ``sinks: [Hq]`` (or None) are shared by every row: unbatched under the vmap."""
    import jax
    import jax.numpy as jnp

    q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)

    def one(kernel, q, k, v, q_seg, kv_seg):
        segments = (
            None if q_seg is None else splash.SegmentIds(q_seg.astype(jnp.int32), kv_seg.astype(jnp.int32))
        )
        # sinks only where given: a kernel from before 0.7.1 takes no such argument.
        result = kernel(q, k, v, segments) if sinks is None else kernel(q, k, v, segments, sinks=sinks)
        if isinstance(result, tuple):  # saved residuals: (out, (lse,))
            out, (lse,) = result
            return out, lse
        return result

    if len(kernels) > 1:
        results = [
            one(
                kernel,
                q[i],
                k[i],
                v[i],
                None if q_seg is None else q_seg[i],
                None if kv_seg is None else kv_seg[i],
            )
            for i, kernel in enumerate(kernels)
        ]
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *results)
    seg_axes = 0 if q_seg is not None else None
    return jax.vmap(
        lambda q, k, v, qs, ks: one(kernels[0], q, k, v, qs, ks),
        in_axes=(0, 0, 0, seg_axes, seg_axes),
    )(q, k, v, q_seg, kv_seg)


def splash_forward(
    splash: Any, kernels: list, q: Any, k: Any, v: Any, q_seg: Any, kv_seg: Any, sinks: Any, *, scale: float
) -> tuple:
    """(out ``[B, Hq, Sq, Dv]``, lse ``[B, Hq, Sq]`` float32) from kernels built with ``save_residuals``."""
    return splash_attention(splash, kernels, q, k, v, q_seg, kv_seg, sinks, scale=scale)


def splash_gradients(
    splash: Any,
    kernels: list,
    q: Any,
    k: Any,
    v: Any,
    q_seg: Any,
    kv_seg: Any,
    sinks: Any,
    dout: Any,
    *,
    scale: float,
) -> tuple:
    """(dq, dk, dv, dsinks ``[Hq]`` or None) of ``sum(out * dout)`` through splash's custom VJP, from
    kernels built without ``save_residuals``; dq includes the scale (q is scaled inside)."""
    import jax

    def attention(q, k, v, sinks):
        return splash_attention(splash, kernels, q, k, v, q_seg, kv_seg, sinks, scale=scale)

    if sinks is None:
        _, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, None), q, k, v)
        return (*vjp(dout), None)
    _, vjp = jax.vjp(attention, q, k, v, sinks)
    return vjp(dout)
