"""Pallas GPU (Triton) flash attention, ``jax.experimental.pallas.ops.gpu.attention.mha``.

Runs natively on an NVIDIA GPU and through Pallas's generic interpreter
(``mha(..., interpret=True)``) elsewhere.

Translation from canonical semantics (``docs/semantics.md``):

* Layout ``[B, S, H, D]``: q, k, v and out are transposed. No GQA, Dv == D.
* ``sm_scale`` defaults to 1.0; we always pass the canonical scale. No bias, no softcap.
* Causal is top-left (``q_index >= k_index``).
* Segment ids: the kernel takes *one* ``[B, S]`` array and reads it for queries and
  keys alike, so it cannot express distinct q/kv ids or Sq != Sk; the capability is
  left undeclared rather than half-declared.
* ``lse`` comes from ``return_residuals=True`` where this JAX has it. The kernel
  keeps its softmax in base 2 (``exp2`` of logits times log2(e)), so its lse is
  ``log2`` of the denominator: we multiply by ln 2.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from collections.abc import Hashable
from typing import Any

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
from kernels.contract.tunables import BlockDim, Config, Configurable, Tunable, Tunables
from kernels.hardware.lowering import LoweringCall, abstract_arrays
from kernels.runtime.call_description import (
    Built,
    CallDescription,
    Decided,
    Module,
    Name,
    cache_key,
    jax_call,
    off_chip,
    standalone,
)
from kernels.runtime.jax_runtime import (
    CompiledCache,
    JaxCall,
    TracedPrimitives,
    default_backend,
    installed_jax_versions,
    jax_version,
    unavailable_because,
)
from kernels.runtime.standalone import StandaloneCall
from reference.spec import AttentionInputs, AttentionSpec

MODULE = "jax.experimental.pallas.ops.gpu.attention"
BLOCK = 128  # default forward block_q = block_k = 128 (clipped to the lengths)


# --- version compatibility: everything that differs between JAX versions --------------
# * the module lives at jax.experimental.pallas.ops.gpu.attention from 0.4.29 on;
# * before the BlockSizes object (0.5.1) the kernel sized kv blocks from the *query*
#   length and checks neither Sq == Sk nor, in its backward, equal block counts;
# * from 0.6.2 lengths that the (clipped) 128-blocks do not divide raise ValueError;
#   before, nothing checks them (those cases run; see kernels/known_issues.toml);
# * return_residuals= (the lse) exists from 0.6 on;
# * tunables: before 0.5.1 mha takes block_q= and block_k=, which size the backward too;
#   from 0.5.1 it takes block_sizes=BlockSizes(block_q, block_k, block_q_dkv,
#   block_kv_dkv, block_q_dq, block_kv_dq) (defaults read from get_default()). Triton
#   blocks are powers of two of at least 16 (tl.dot's smallest tile); the kernel clips
#   each block to its length, so a block longer than the sequence is legal.

RAISES_ON_NON_MULTIPLE_SINCE = (0, 6, 2)
FORWARD_BLOCKS = ("block_q", "block_k")
# Lowered for a GPU (kernels/hardware/lowering.py), Pallas's Triton dot refused operands under 16 (its
# lowering.py, _dot_general_lowering): both operands before 0.5.1 ("all dimensions of x and y"
# / "of a and b must be >= 16", so a q block of 1 too), the right-hand one (k and v blocks,
# head_dim) from 0.5.1 ("all dimensions of b"); 0.9.2 dropped the check. Measured by lowering
# at 0.4.35 (Sq=1 refused), 0.7.2 and 0.8.3 (Sq=1 lowers, Sq=Sk=1 does not), 0.10.2 (both lower).
TRITON_LHS_SMALL_DOT_SINCE = (0, 5, 1)
TRITON_SMALL_DOT_SINCE = (0, 9, 2)
TRITON_MIN_DOT = 16
# Before 0.6.2 the kernel did not pad head_dim to a power of two (head_dim_padded), so D=96
# met the power-of-two rule; measured by lowering at 0.4.35.
HEAD_DIM_PADDED_SINCE = (0, 6, 2)
BACKWARD_BLOCKS = ("block_q_dkv", "block_kv_dkv", "block_q_dq", "block_kv_dq")


# Where each block shows (BlockDim, read at 0.10.2; [B, S, H, D] blocks, the sequence 3rd from last):
# block_q is the forward's q block (mha_forward, args[0]); the fused backward (mha_backward) tiles
# dq by block_q_dq and dk, dv by block_kv_dkv (its outputs). block_k, block_q_dkv and block_kv_dq
# are loop steps inside a kernel, which no block spec shows.
SHOWN_AT = {
    "block_q": BlockDim("mha_forward", "args[0]", -3),
    "block_q_dq": BlockDim("mha_backward", "outputs[0]", -3),
    "block_kv_dkv": BlockDim("mha_backward", "outputs[1]", -3),
}


def _triton_block(name: str, default: int) -> Tunable:
    axis = "q" if name.startswith("block_q") else "kv"
    shows = (SHOWN_AT[name],) if name in SHOWN_AT else ()
    return Tunable(name, default, axis, name in BACKWARD_BLOCKS, minimum=16, power_of_two=True, blocks=shows)


def _tunables(module: Any) -> Tunables:
    """The installed kernel's tunables, with its own defaults."""
    if not hasattr(module, "BlockSizes"):
        return Tunables(tuple(_triton_block(name, BLOCK) for name in FORWARD_BLOCKS))
    default = module.BlockSizes.get_default()
    names = FORWARD_BLOCKS + BACKWARD_BLOCKS
    return Tunables(tuple(_triton_block(name, getattr(default, name)) for name in names))


@dataclasses.dataclass(frozen=True)
class _Api:
    mha: Any
    has_lse: bool
    has_block_sizes: bool
    backward_block: int | None  # BlockSizes.get_default()'s dq/dkv blocks: 128 before 0.6.2, then 32
    raises_on_non_multiple: bool
    tunables: Tunables = Tunables()
    block_sizes: Any = None  # the BlockSizes class (None before 0.5.1)


def _load_api() -> _Api:
    module = importlib.import_module(MODULE)
    params = inspect.signature(module.mha).parameters
    if "interpret" not in params:
        raise TypeError("mha has no interpret= argument on this version")
    return _Api(
        mha=module.mha,
        has_lse="return_residuals" in params,
        has_block_sizes=hasattr(module, "BlockSizes"),
        backward_block=module.BlockSizes.get_default().block_q_dq if hasattr(module, "BlockSizes") else None,
        raises_on_non_multiple=jax_version() >= RAISES_ON_NON_MULTIPLE_SINCE,
        tunables=_tunables(module),
        block_sizes=getattr(module, "BlockSizes", None),
    )


def _constraints(api: _Api) -> tuple[ShapeConstraint, ...]:
    """What this JAX's kernel rejects. Before 0.6.2 it checks neither divisibility nor (before
    0.5.1) Sq == Sk: those cases run and are judged like any other (a wrong answer there is a
    finding for the known-issue ledger, not something to declare away)."""

    def divides(block: int, length: int) -> bool:
        return length % min(block, length) == 0

    constraints = []
    if api.raises_on_non_multiple:
        constraints.append(
            ShapeConstraint(
                name="lengths_multiple_of_block",
                reason="the forward blocks min(block_q, q_len) and min(block_k, kv_len) (default 128) "
                "must divide q_len and kv_len (ValueError otherwise)",
                holds=lambda shape, spec, b: (
                    divides(b["block_q"], shape.q_len) and divides(b["block_k"], shape.kv_len)
                ),
                basis="raises",
                sees_config=True,
            )
        )
    if api.backward_block is not None:
        block = api.backward_block
        constraints.append(
            ShapeConstraint(
                name="backward_same_block_count",
                reason="the fused backward needs q_len split into as many min(block_q_dq, q_len) "
                "blocks as kv_len into min(block_kv_dkv, kv_len) blocks "
                f"(default {block}; ValueError otherwise)",
                holds=lambda shape, spec, b: (
                    shape.q_len // min(b["block_q_dq"], shape.q_len)
                    == shape.kv_len // min(b["block_kv_dkv"], shape.kv_len)
                ),
                basis="raises",
                applies_to="backward",
                sees_config=True,
            )
        )
    constraints += _triton_constraints(api)
    return tuple(constraints)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _triton_constraints(api: _Api) -> list[ShapeConstraint]:
    """What only Triton rejects (the interpreter runs these): every array in the kernel is a
    power of two in size, so each block as clipped to its length, and head_dim."""
    names = set(api.tunables.names) if api.tunables is not None else {"block_q", "block_k"}
    backward = [n for n in BACKWARD_BLOCKS if n in names]

    version = jax_version()
    small_dots = version >= TRITON_SMALL_DOT_SINCE
    small_lhs = version >= TRITON_LHS_SMALL_DOT_SINCE
    padded_head_dim = version >= HEAD_DIM_PADDED_SINCE

    def blocks_ok(shape: Any, blocks: dict, which: tuple[str, ...]) -> bool:
        lengths = {"q": shape.q_len, "k": shape.kv_len, "kv": shape.kv_len}
        clipped = {n: min(blocks[n], lengths[n.split("_")[1]]) for n in which}
        if not padded_head_dim and not _power_of_two(shape.head_dim):
            return False
        if not small_dots:
            # the dots' right-hand operands hold the kv blocks and head_dim; before 0.5.1 the
            # left-hand ones (q blocks) too
            checked = [v for n, v in clipped.items() if not small_lhs or n.split("_")[1] in ("k", "kv")]
            if min([*checked, shape.head_dim]) < TRITON_MIN_DOT:
                return False
        return all(_power_of_two(s) for s in clipped.values())

    triton = (
        "Pallas's Triton lowering raises ValueError unless every array is a power of two in size "
        "('all operations have array arguments and results whose size is a power of 2'); "
        "the interpreter accepts any"
    )
    limits = []  # what this JAX adds to the power-of-two rule
    if not small_dots:
        operands = "kv blocks and head_dim" if small_lhs else "q and kv blocks and head_dim"
        limits.append(f"the {operands} at least {TRITON_MIN_DOT} (a dot operand under 16 raises)")
    if not padded_head_dim:
        limits.append("head_dim a power of two (not padded before 0.6.2)")
    extra = f" ({'; '.join(limits)})" if limits else ""
    constraints = [
        ShapeConstraint(
            name="triton_power_of_two_forward",
            reason=f"lowered for a GPU, the forward blocks min(block_q, q_len) and min(block_k, kv_len) "
            f"must be powers of two{extra}: {triton}",
            holds=lambda shape, spec, b: blocks_ok(shape, b, FORWARD_BLOCKS),
            basis="raises",
            sees_config=True,
            stage="lowering",
        )
    ]
    if backward:
        constraints.append(
            ShapeConstraint(
                name="triton_power_of_two_backward",
                reason=f"lowered for a GPU, the backward blocks ({', '.join(backward)}, each clipped "
                f"to its length) must be powers of two{extra}: {triton}",
                holds=lambda shape, spec, b: blocks_ok(shape, b, tuple(backward)),
                basis="raises",
                applies_to="backward",
                sees_config=True,
                stage="lowering",
            )
        )
    return constraints


# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class PallasGpuAdapter(Configurable):
    """Pallas Triton flash attention; canonical ``[B, H, S, D]`` in and out."""

    config: Config = ()  # the case's tunables (_tunables); () = the kernel's defaults
    name: str = "pallas_gpu"
    description: str = "Pallas GPU (Triton) flash attention (jax.experimental.pallas.ops.gpu.attention)"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def _blocks(self, api: _Api) -> dict[str, int] | None:
        """Every block under this adapter's config (defaults filled in), or None for the
        kernel's own defaults (the empty config)."""
        return api.tunables.resolved(self.config) if self.config else None

    def _native(self) -> bool:
        return default_backend() == "gpu"

    def _execution(self) -> str:
        if self._native():
            return "native Triton on GPU"
        return "Pallas generic interpreter (interpret=True) on CPU"

    def availability(self) -> Availability:
        try:
            _load_api()
            native, detail = self._native(), self._execution()
        except Exception as error:  # any import/API failure means "unavailable", never a crash
            return unavailable_because(error, f"importing {MODULE}")
        return Availability(True, "", installed_jax_versions(), "native" if native else "interpret", detail)

    def capabilities(self) -> Capabilities:
        try:
            api = _load_api()
        except Exception:
            api = _Api(None, False, True, None, True)
        return Capabilities(
            jax_runtime=True,
            dtypes=("float32", "bfloat16", "float16", *FP8_DTYPES),
            # fp8: the matmuls accumulate in float32; P is rounded to V's dtype before the PV
            # matmul (``s_curr.astype(v.dtype)``; ``p.astype(do.dtype)`` for dv): "p_fp8". out
            # comes back in the input dtype, lse float32. Its backward also rounds ds * sm_scale
            # to fp8 before the dk/dq matmuls (within tolerance undeclared, as for tpu_flash), and
            # computes delta = rowsum(o * do) in fp8: that defect fails dq on large logits in
            # e4m3fn and is the known issue pallas-gpu-fp8-delta-in-fp8, not a narrower declaration.
            internal_quantization="p_fp8",
            causal_alignments=("top_left",),
            backward=True,
            lse=api.has_lse,
            fully_masked_rows="unspecified",
            constraints=compiled_where_run(_constraints(api), self._native()),
            tunables=api.tunables,
            lowers_for="cuda",
        )

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call (``dout`` None) or the gradients call through the kernel's custom VJP,
        interpreted off GPU, on JAX arrays in the canonical layout (q, k, v and dout batch-first)."""
        return self._call(inputs, spec, dout)[1]

    def _call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None
    ) -> tuple[Hashable, JaxCall]:
        """``jax_call``'s call and its compile-cache key, both from this direction's description (the
        execution is in it: ``interpret=``, decided for this machine)."""
        described = self._description(inputs, spec, dout is not None)
        return cache_key(described, inputs, dout), jax_call(described, inputs, dout)

    def _description(
        self, inputs: AttentionInputs, spec: AttentionSpec, backward: bool, lowering: bool = False
    ) -> CallDescription:
        """``mha_forward`` or ``mha_gradients`` on the kernel's ``mha``, interpreted off a GPU (never
        for ``lowering``), at the config's blocks (``mha_block_kwargs``), on q, k, v (and dout)."""
        api = _load_api()
        interpret = Decided(False, "False") if lowering else off_chip("gpu")
        keywords = (
            ("scale", spec.resolved_scale(inputs.shape.head_dim)),
            ("causal", spec.causal),
            ("interpret", interpret),
        )
        if self.config:  # the case's block sizes, exactly as the suite passes them
            block_sizes = Module("BlockSizes", MODULE, api.block_sizes, attribute="BlockSizes")
            blocks = Built("block_kwargs", mha_block_kwargs, (block_sizes, self._blocks(api)))
            keywords += (("block_kwargs", blocks),)
        mha = (Module("mha", MODULE, api.mha, attribute="mha"),)
        arrays = (Name("q"), Name("k"), Name("v"))
        note = f"{self.description}; off GPU: Pallas generic interpreter (interpret=True)" + (
            f"; block sizes {dict(self.config)}" if self.config else ""
        )
        if not backward:
            keywords += (("with_lse", api.has_lse),)
            return CallDescription(mha_forward, arrays, mha, keywords, note=note)
        return CallDescription(
            mha_gradients, (*arrays, Name("dout")), mha, keywords, ("dq", "dk", "dv"), note=note
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, H, Sq, D]`` in the input dtype; ``lse: [B, H, Sq]`` float32 where exposed."""
        key, call = self._call(inputs, spec, None)
        (out, lse), ran = self._cache.run(key, call, self._ran)
        return SubjectOutput(out=out, lse=lse, ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` through the kernel's custom VJP (Triton backward)."""
        key, call = self._call(inputs, spec, dout)
        (dq, dk, dv), _ = self._cache.run(key, call, self._ran)
        return SubjectGrads(dq=dq, dk=dk, dv=dv)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The forward or gradients call with ``interpret=False``, for Pallas's Triton lowering."""
        call = self._description(inputs, spec, direction != "forward", lowering=True)
        args = abstract_arrays(inputs.q, inputs.k, inputs.v)
        args = args if direction == "forward" else (*args, args[0])  # the gradients call takes dout
        return LoweringCall.described("cuda", call, inputs, args)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """Both calls as standalone script text, rendered from their descriptions."""
        return standalone(self._description(inputs, spec, False), self._description(inputs, spec, True))

    def _ran(self, primitives: TracedPrimitives) -> str:
        n = primitives.count("pallas_call")
        if n == 0:
            return f"no pallas_call traced: fell back ({self._execution()})"
        return f"pallas_call x{n} ({self._execution()})"


def _to_bshd(*arrays: Any) -> tuple[Any, ...]:
    import jax.numpy as jnp

    return tuple(jnp.transpose(a, (0, 2, 1, 3)) for a in arrays)


def _from_bshd(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.transpose(x, (0, 2, 1, 3))


# --- the translation: pure functions of JAX arrays, embedded verbatim in standalone repros --


def mha_block_kwargs(block_sizes_class, blocks):
    """``mha``'s keywords for ``blocks`` (every block by name; None: the kernel's defaults). From
    JAX 0.5.1 mha takes ``block_sizes=BlockSizes(...)``; before, ``block_q=`` and ``block_k=``."""
    if blocks is None:
        return {}
    if block_sizes_class is None:
        return dict(blocks)
    return {"block_sizes": block_sizes_class(**blocks)}


def mha_forward(mha, q, k, v, *, scale, causal, interpret, with_lse, block_kwargs=None):
    """(out ``[B, H, Sq, D]``, lse ``[B, H, Sq]`` or None) from the kernel's ``mha``. The kernel keeps
    its softmax in base 2, so its lse is log2 of the denominator: times ln 2 gives the natural log.
    ``block_kwargs``: ``mha_block_kwargs``'s keywords (None: the kernel's default blocks)."""
    import jax.numpy as jnp

    result = mha(
        *_to_bshd(q, k, v),
        None,
        sm_scale=scale,
        causal=causal,
        interpret=interpret,
        **(block_kwargs or {}),
        **({"return_residuals": True} if with_lse else {}),
    )
    if not with_lse:
        return _from_bshd(result), None
    out, lse_base2 = result  # lse: [B, H, Sq], log2 of the softmax denominator
    return _from_bshd(out), lse_base2 * jnp.float32(math.log(2.0))


def mha_gradients(mha, q, k, v, dout, *, scale, causal, interpret, block_kwargs=None):
    """(dq, dk, dv) of ``sum(out * dout)`` through the kernel's custom VJP (its backward blocks
    come from ``block_kwargs`` too)."""
    import jax

    def attention(q, k, v):
        out = mha(
            *_to_bshd(q, k, v),
            None,
            sm_scale=scale,
            causal=causal,
            interpret=interpret,
            **(block_kwargs or {}),
        )
        return _from_bshd(out)

    _, vjp = jax.vjp(attention, q, k, v)
    return vjp(dout)
