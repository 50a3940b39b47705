"""tokamax's splash attention (``tokamax.ops.experimental.splash_attention``, public from tokamax
0.0.17): one subject per implementation, ``tokamax_splash[impl=base]`` (XLA) and
``tokamax_splash[impl=mosaic_tpu]`` (the Pallas TPU kernel) (``OPTIONS``; ``--impl tokamax_splash``
is both).

Every call goes through the public ``splash_attention(q, k, v, mask, segment_ids, sinks, *, is_mqa,
mask_value, attn_logits_soft_cap, dropout_rate, prng_key, implementation)`` with ``implementation=``
a one-element tuple holding the implementation's op (``api.py:95-100`` takes a str, a callable or a
sequence); Mosaic TPU's op is built with its forward ``Config`` named explicitly (the op's own
``bind(...).default_config``), as ``kernels/adapters/tokamax.py`` does. Gradients are ``jax.vjp``
of that call:
the op's own VJP op (``base.SplashAttentionVjp``, ``pallas_mosaic_tpu_vjp``). The lse comes from the
op's residuals ``(max_logits, logsumexp)`` (``return_residuals=True``, through a callable passed as
the implementation: the public function has no such argument). ``jax_call`` is that call, a
function of batch-first JAX arrays (the boolean mask one of them), which ``forward``, ``gradients``
and ``dropout`` run and the ``vmap`` and ``sharded`` checks transform.

Translation from canonical semantics (``docs/semantics.md``), read in tokamax 0.0.17's
``_src/ops/experimental/tpu/splash_attention/`` (``api.py``, ``base.py``, ``reference.py``,
``pallas_mosaic_tpu.py``, ``splash_attention_mask.py``):

* Layout ``[H, S, D]`` per call, no batch (``api.py:50-52``): the batch is ``jax.vmap``-ed (one
  traced call, as a user batches it), or under TPU interpret mode one call per batch row (the TPU
  interpreter cannot vmap a Pallas TPU kernel, ``kernels/adapters/tokamax.py``); rows are independent, so
  both give the same values.
* No scale argument: the logits are ``q.k`` as given (``reference.py:87``, the kernel likewise). q is
  multiplied by the scale in float32 and rounded once to its dtype, as every caller must: declared
  ``q_prescaled``.
* GQA is native, consecutive query heads sharing a kv head (``reference.py:237-252``); MQA (Hkv = 1,
  Hq > 1) is passed as the API spells it: ``is_mqa=True`` with 2-D ``k``/``v`` ``[Sk, D]``.
* Masks are splash mask objects (``splash_attention_mask.py``), built by ``kernels.adapters.splash``'s own
  translation (``mask_layout``, ``structural_mask``): causal ``CausalMask(offset)`` with ``offset = 0``
  (top-left) or ``Sk - Sq`` (bottom-right), a window ``LocalMask(window, offset)`` (causal folded in),
  chunked ``ChunkedCausalMask`` (no offset: top-left only), ANDed with a ``LocalMask`` for a window.
  The API takes one ``[Sq, Sk]`` boolean mask for every head (``api.py:54``): a canonical boolean mask
  is ANDed with the structural one (materialised) per batch row, and where it differs across heads
  each query head is one call with its own plane (and its kv head and sink).
* ``segment_ids`` is ``SegmentIds(q, kv)`` per row; ``attn_logits_soft_cap`` caps ``q.k`` (after the
  scale, which q carries); ``sinks: [Hq]`` per query head, shared by every batch row (unbatched under
  the vmap), not capped (``reference.py:94-106``), as canonical.
* ``mask_value`` is left at its default, ``-0.7 * float32 max`` (``reference.py:28``). The API
  documents no value for a row that sees no key, so both implementations declare ``unspecified``
  (one reading for the family): the XLA one happens to average V, the kernel skips whole masked
  blocks; what each returns is recorded as observed behaviour.
* No bias, no valid lengths, dropout off (``dropout_rate=0``).

Lowering (``lowering``, ``lowers_for = "tpu"`` for mosaic_tpu): the same op and forward Config as the
interpreted call, no interpreter, the batch ``jax.vmap``-ed, under an abstract TPU v5e (the kernel
reads the chip's generation); the lowers, vmem and observable checks judge what a TPU would get.

Finding: ``base.py:90-91`` turns any ``CausalMask`` into ``Mask(is_causal=True)`` in ``bind``, for
both implementations: its ``offset`` is dropped, so bottom-right causal with Sq != Sk runs top-left
(ledger ``tokamax-splash-causal-mask-offset-dropped``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Literal

import numpy as np

from kernels.adapters.splash import gradients_with_sinks, mask_layout, structural_mask
from kernels.contract.base import (
    Availability,
    Capabilities,
    ShapeConstraint,
    SubjectGrads,
    SubjectOutput,
    compiled_where_run,
)
from kernels.contract.dropout import DROPOUT_FEATURE, DropoutRequest
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays, abstract_tpu
from kernels.runtime.call_description import (
    NO_CONTEXT,
    Built,
    CallDescription,
    Context,
    Decided,
    Module,
    Name,
    cache_key,
    constructed,
    standalone,
)
from kernels.runtime.call_description import jax_call as described_call
from kernels.runtime.jax_runtime import (
    CompiledCache,
    JaxCall,
    TracedPrimitives,
    default_backend,
    installed_version,
)
from kernels.runtime.standalone import StandaloneCall
from kernels.runtime.tokamax_runtime import (
    DISTRIBUTION,
    absl_flags_parsed,
    availability_versions,
    interpretable_op,
    interpreter_context,
)
from kernels.runtime.tpu_interpret import TPU_INTERPRET_NO_VMAP, tpu_interpret_mode_missing
from reference.spec import AttentionInputs, AttentionSpec

Implementation = Literal["base", "mosaic_tpu"]
IMPLEMENTATIONS: tuple[str, ...] = ("base", "mosaic_tpu")

PUBLIC = "tokamax.ops.experimental"  # splash_attention, public from tokamax 0.0.17
PACKAGE = "tokamax._src.ops.experimental.tpu.splash_attention"
NOT_IMPLEMENTED = ("NotImplementedError",)  # api.py:82-84, 123-127: a list falls back on it only
BLOCK = 128  # pallas_mosaic_tpu._get_heuristics_config: 128, or 1024 for multiples of 1024


@dataclasses.dataclass(frozen=True)
class _Kind:
    name: str
    module: str  # under PACKAGE
    op_class: str
    execution: Literal["native", "tpu"]  # on this CPU; native on its own hardware
    hardware: str  # "cpu" for the XLA one
    dtypes: tuple[str, ...]
    fully_masked_rows: str


KINDS: dict[str, _Kind] = {
    k.name: k
    for k in (
        # base.py: float32 logits and softmax, out cast to q's dtype; any float dtype.
        _Kind(
            "base",
            "base",
            "SplashAttention",
            "native",
            "cpu",
            ("float32", "bfloat16", "float16"),
            "unspecified",
        ),
        # The TPU kernel: float32 and bfloat16 (float16 runs in the interpreter, but no TPU runs it:
        # not declared).
        _Kind(
            "mosaic_tpu",
            "pallas_mosaic_tpu",
            "PallasMosaicTpuSplashAttention",
            "tpu",
            "tpu",
            ("float32", "bfloat16"),
            "unspecified",
        ),
    )
}


def _block_of(length: int) -> int:
    """pallas_mosaic_tpu._get_heuristics_config's block for a sequence of ``length``."""
    return 1024 if length >= 1024 and length % 1024 == 0 else BLOCK


def _constraints(kind: str) -> tuple[ShapeConstraint, ...]:
    if kind != "mosaic_tpu":
        return ()
    return (
        ShapeConstraint(
            name="interpreter_no_dropout",
            reason="JAX's Pallas TPU interpret mode cannot run splash's in-kernel dropout: the kernel "
            "draws its mask from a Pallas PRNG key (pltpu.to_pallas_key), which the interpreter's "
            "io_callback cannot carry ('TypeError: Cannot interpret 'key<pl>' as a data type', "
            "observed at jax 0.12.0.1, tokamax 0.0.17); an interpreter limit, a TPU runs it",
            holds=lambda shape, spec: False,
            basis="raises",
            features=(DROPOUT_FEATURE,),
            stage="interpreter",
            exceptions=("TypeError",),
        ),
        ShapeConstraint(
            name="blocks_divide_lengths",
            reason="splash's mask info raises where its default block (128) does not divide a "
            "sequence ('q_block_size=128 should divide q_seq_len=64', likewise kv): the API's contract "
            "for an unsupported input is NotImplementedError (api.py falls back on it only), and "
            "0.0.17 raises ValueError (a finding, in kernels/known_issues.toml)",
            holds=lambda shape, spec: (
                shape.q_len % _block_of(shape.q_len) == 0 and shape.kv_len % _block_of(shape.kv_len) == 0
            ),
            basis="raises",
            exceptions=NOT_IMPLEMENTED,
        ),
    )


def _capabilities(kind: _Kind, execution: str) -> Capabilities:
    return Capabilities(
        jax_runtime=True,
        dtypes=kind.dtypes,
        q_prescaled=True,  # no scale argument: the caller passes q * scale in q's dtype
        causal_alignments=("top_left", "bottom_right"),  # CausalMask/LocalMask(offset)
        chunked_causal_alignments=("top_left",),  # ChunkedCausalMask has no offset
        window=True,
        segment_ids=True,
        bool_mask=True,
        gqa=True,
        softcap=True,
        sinks=True,
        sinks_grad=True,  # SplashAttentionGrads(sinks=...) from both VJP ops
        distinct_v_dim=True,
        backward=True,
        lse=True,
        fully_masked_rows=kind.fully_masked_rows,  # type: ignore[arg-type]
        # dropout_rate and prng_key: the kernel draws the mask (base.py: jax.random.bernoulli, True
        # dropped; the Mosaic kernel per tile), forward and VJP alike under the same key
        dropout="key",
        constraints=compiled_where_run(_constraints(kind.name), execution == "native"),
        # the kernel's call lowers for a TPU with the interpreter off (``lowering``); base is XLA
        lowers_for="tpu" if kind.hardware == "tpu" else None,
    )


# --- loading ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Api:
    attention: Callable[..., Any]  # tokamax.ops.experimental.splash_attention
    masks: Any  # splash_attention_mask: CausalMask, LocalMask, ChunkedCausalMask, FullMask
    segment_ids: type  # SegmentIds(q, kv)
    op_class: type
    vjp_class: type | None


def _load_api(kind: _Kind) -> _Api:
    """The installed tokamax's public splash attention and ``kind``'s op (ImportError where missing:
    tokamax before 0.0.17 has no ``tokamax.ops.experimental.splash_attention``)."""
    absl_flags_parsed()
    public = importlib.import_module(PUBLIC)
    attention = getattr(public, "splash_attention", None)
    if attention is None:
        raise ImportError(f"{PUBLIC} has no splash_attention")
    module = importlib.import_module(f"{PACKAGE}.{kind.module}")
    op_class = getattr(module, kind.op_class)
    vjp = op_class().vjp
    base = importlib.import_module(f"{PACKAGE}.base")
    masks = importlib.import_module(f"{PACKAGE}.splash_attention_mask")
    return _Api(attention, masks, base.SegmentIds, op_class, None if vjp is None else type(vjp))


def _execution(kind: _Kind) -> str:
    if kind.execution == "native" or default_backend() == kind.hardware:
        return "native"
    return kind.execution


_EXECUTION_WORDS = {
    "native": "natively",
    "tpu": "Pallas TPU interpret mode (force_tpu_interpret_mode) on CPU",
}


# --- the translation: functions of JAX arrays ------------------------------------------------


def _with_residuals(op, *args, **kwargs):
    """An ``implementation=`` callable: the op, returning ``(out, (max_logits, logsumexp))``."""
    return op(*args, return_residuals=True, **kwargs)


def splash_call(
    attention,
    op,
    segment_ids_class,
    mask,
    q,
    k,
    v,
    q_seg,
    kv_seg,
    sinks,
    *,
    softcap,
    with_lse,
    dropout_rate=0.0,
    prng_key=None,
):
    """One batch row, ``q: [Hq, Sq, D]``, ``k: [Hkv, Sk, D]``, ``v: [Hkv, Sk, Dv]`` -> (out
    ``[Hq, Sq, Dv]``, lse ``[Hq, Sq]`` or None). ``mask``: a splash mask object or an ``[Sq, Sk]`` bool
    array; ``softcap``: ``attn_logits_soft_cap``. MQA (one kv head for several query heads) goes as
    ``is_mqa=True`` with 2-D k and v. ``dropout_rate`` with ``prng_key``: the mask drawn inside."""
    import jax.numpy as jnp

    mqa = k.shape[0] == 1 and q.shape[0] > 1
    if mqa:
        k, v = k[0], v[0]
    segments = None if q_seg is None else segment_ids_class(q_seg.astype(jnp.int32), kv_seg.astype(jnp.int32))
    implementation = functools.partial(_with_residuals, op) if with_lse else op
    result = attention(
        q,
        k,
        v,
        mask,
        segments,
        sinks,
        is_mqa=mqa,
        attn_logits_soft_cap=softcap,
        dropout_rate=dropout_rate,
        prng_key=prng_key,
        implementation=(implementation,),
    )
    if not with_lse:
        return result, None
    out, (_, lse) = result
    return out, lse.astype(jnp.float32)


def tokamax_splash_attention(
    attention,
    op,
    segment_ids_class,
    masks,
    q,
    k,
    v,
    mask,
    q_seg,
    kv_seg,
    sinks,
    *,
    scale,
    layout,
    softcap,
    loop,
    with_lse,
    dropout_rate=0.0,
    prng_key=None,
):
    """Canonical ``[B, H, S, D]`` -> (out ``[B, Hq, Sq, Dv]``, lse ``[B, Hq, Sq]`` or None).

    q is multiplied by ``scale`` in float32 and rounded once to its dtype (splash takes no scale).
    ``layout``: ``kernels.adapters.splash.mask_layout``'s structural mask. ``mask``: None or a boolean
    ``[Bm, Hm, Sq, Sk]`` (Bm in 1, B; Hm in 1, Hq), ANDed with the structural mask; with Hm > 1 each
    query head is its own call. ``sinks: [Hq]`` or None, shared by every row. ``loop``: one call per
    batch row instead of ``vmap``. ``dropout_rate`` with ``prng_key``: batch row b draws its mask
    under ``jax.random.split(prng_key, B)[b]``, as a user gives each example its own key (a head
    called on its own, under that key folded with the head)."""
    import jax
    import jax.numpy as jnp

    q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)
    sq, sk = q.shape[2], k.shape[2]
    structural = structural_mask(masks, layout, sq, sk)
    dense = None if layout[0] == "full" else jnp.asarray(np.asarray(structural[0:sq, 0:sk]))
    splash = functools.partial(
        splash_call, attention, op, segment_ids_class, softcap=softcap, with_lse=with_lse
    )
    keys = None if prng_key is None else jax.random.split(prng_key, q.shape[0])

    def row(q, k, v, plane, q_seg, kv_seg, key):
        def call(*args, key=key):
            if key is None:
                return splash(*args)
            return splash(*args, dropout_rate=dropout_rate, prng_key=key)

        if plane is None:
            return call(structural, q, k, v, q_seg, kv_seg, sinks)
        if dense is not None:
            plane = plane & dense
        if plane.shape[0] == 1:
            return call(plane[0], q, k, v, q_seg, kv_seg, sinks)
        group = q.shape[0] // k.shape[0]
        heads = [
            call(
                plane[h],
                q[h : h + 1],
                k[h // group : h // group + 1],
                v[h // group : h // group + 1],
                q_seg,
                kv_seg,
                None if sinks is None else sinks[h : h + 1],
                key=None if key is None else jax.random.fold_in(key, h),
            )
            for h in range(q.shape[0])
        ]
        lse = None if heads[0][1] is None else jnp.concatenate([h[1] for h in heads])
        return jnp.concatenate([h[0] for h in heads]), lse

    batch = q.shape[0]
    mask_batched = mask is not None and mask.shape[0] > 1
    if loop:
        rows = [
            row(
                q[b],
                k[b],
                v[b],
                None if mask is None else mask[b if mask_batched else 0],
                None if q_seg is None else q_seg[b],
                None if kv_seg is None else kv_seg[b],
                None if keys is None else keys[b],
            )
            for b in range(batch)
        ]
        out = jnp.stack([r[0] for r in rows])
        return out, None if rows[0][1] is None else jnp.stack([r[1] for r in rows])
    seg_axis = None if q_seg is None else 0
    key_axis = None if keys is None else 0
    if mask is not None and not mask_batched:
        plane = mask[0]
        return jax.vmap(
            lambda q, k, v, qs, ks, key: row(q, k, v, plane, qs, ks, key),
            in_axes=(0, 0, 0, seg_axis, seg_axis, key_axis),
        )(q, k, v, q_seg, kv_seg, keys)
    mask_axis = None if mask is None else 0
    return jax.vmap(row, in_axes=(0, 0, 0, mask_axis, seg_axis, seg_axis, key_axis))(
        q, k, v, mask, q_seg, kv_seg, keys
    )


def tokamax_splash_gradients(
    attention,
    op,
    segment_ids_class,
    masks,
    q,
    k,
    v,
    mask,
    q_seg,
    kv_seg,
    sinks,
    dout,
    *,
    scale,
    layout,
    softcap,
    loop,
    dropout_rate=0.0,
    prng_key=None,
):
    """(dq, dk, dv, dsinks ``[Hq]`` or None) of ``sum(out * dout)`` by ``jax.vjp`` of the public call:
    the op's own VJP. dq includes the scale (q is scaled inside). ``dropout_rate``, ``prng_key``: as
    ``tokamax_splash_attention`` takes them (the VJP draws the same mask under the same key)."""

    def attend(q, k, v, sinks):
        return tokamax_splash_attention(
            attention,
            op,
            segment_ids_class,
            masks,
            q,
            k,
            v,
            mask,
            q_seg,
            kv_seg,
            sinks,
            scale=scale,
            layout=layout,
            softcap=softcap,
            loop=loop,
            with_lse=False,
            dropout_rate=dropout_rate,
            prng_key=prng_key,
        )[0]

    return gradients_with_sinks(attend, q, k, v, sinks, dout)


# --- the adapter -----------------------------------------------------------------------------


def with_prng_key(fn, rate, *args):
    """``fn(*arrays, dropout_rate=rate, prng_key=key)``, ``key`` the last of ``args``: the key as one
    more argument of a jitted call (its value changes, its program not)."""
    *arrays, key = args
    return fn(*arrays, dropout_rate=rate, prng_key=key)


def mask_array(mask: Any, q_len: int, kv_len: int) -> np.ndarray | None:
    """The canonical boolean mask as ``[Bm, Hm, Sq, Sk]``: batch and heads kept only where they
    differ (size 1 otherwise)."""
    if mask is None:
        return None
    full = np.broadcast_to(np.asarray(mask, dtype=bool), (mask.shape[0], mask.shape[1], q_len, kv_len))
    if full.shape[1] > 1 and all(np.array_equal(full[:, 0], full[:, h]) for h in range(1, full.shape[1])):
        full = full[:, :1]
    if full.shape[0] > 1 and all(np.array_equal(full[0], full[i]) for i in range(1, full.shape[0])):
        full = full[:1]
    return np.ascontiguousarray(full)


def splash_op(op_class: Any, vjp_class: Any = None, config: Any = None, any_device: bool = False) -> Any:
    """The implementation's op, as ``implementation=`` takes it: its own VJP op where it has one, and
    its forward ``config`` where one is named (None: the op picks its default); ``any_device``: the
    subclasses whose ``supported_on`` answers True anywhere (``interpretable_op``)."""
    if any_device:
        op_class, vjp_class = interpretable_op(op_class, vjp_class)
    keywords: dict[str, Any] = {} if vjp_class is None else {"vjp": vjp_class()}
    if config is not None:
        keywords["config"] = config
    return op_class(**keywords)


@dataclasses.dataclass(frozen=True, eq=False)
class TokamaxSplashAdapter:
    """``tokamax.ops.experimental.splash_attention`` with one implementation. Canonical ``[B, H, S, D]``."""

    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"impl": IMPLEMENTATIONS}
    # ``--impl tokamax_splash`` (and ``all``) means one subject per value of this option.
    FAMILY_OPTION: ClassVar[str] = "impl"
    impl: Implementation = "base"
    name: str = "tokamax_splash[impl=base]"
    description: str = "tokamax.ops.experimental.splash_attention"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def __post_init__(self) -> None:
        if self.impl not in KINDS:
            raise ValueError(
                f"unknown tokamax splash implementation {self.impl!r}; choose from {IMPLEMENTATIONS}"
            )
        if self.name == "tokamax_splash[impl=base]" and self.impl != "base":
            object.__setattr__(self, "name", f"tokamax_splash[impl={self.impl}]")
        object.__setattr__(
            self, "description", f"tokamax.ops.experimental.splash_attention(implementation={self.impl!r})"
        )

    @property
    def _kind(self) -> _Kind:
        return KINDS[self.impl]

    def availability(self) -> Availability:
        kind = self._kind
        versions = availability_versions()
        try:
            _load_api(kind)
        except Exception as error:  # any import/API failure means "unavailable", never a crash
            line = str(error).splitlines()[0] if str(error) else type(error).__name__
            return Availability(
                False,
                f"tokamax {installed_version(DISTRIBUTION) or '(not installed)'} has no public splash "
                f"attention ({PUBLIC}.splash_attention, public from 0.0.17): {type(error).__name__}: {line}",
                versions,
            )
        execution = _execution(kind)
        if execution == "tpu":
            missing = tpu_interpret_mode_missing(fix="run it on a TPU")
            if missing is not None:
                return Availability(False, missing, versions)
        mode = "native" if execution == "native" else "interpret"
        return Availability(True, "", versions, mode, _EXECUTION_WORDS[execution])

    def capabilities(self) -> Capabilities:
        try:
            execution = _execution(self._kind)
        except Exception:  # no JAX: availability says why
            execution = "native"
        return _capabilities(self._kind, execution)

    # -- calls ------------------------------------------------------------------------------

    @property
    def _any_device(self) -> bool:
        """Whether the op runs as its subclass whose ``supported_on`` answers True anywhere: the
        kernel's, interpreted here or lowered for a TPU that is not here (on a TPU too: the answer
        changes no value)."""
        return self._kind.hardware != "cpu"

    def _config(self, api: _Api, args: tuple, dropout_rate: float = 0.0) -> Any:
        """Mosaic TPU's forward Config, the op's own default for these shapes and dtype, to be named,
        and for this dropout rate (its heuristics set the dropout blocks only where the bound call
        has a rate: a Config bound without one raises ValueError with dropout); None for the base op.
        ``args``: q, k and v, batch-first (only their shapes and dtypes are read)."""
        if self.impl == "base":
            return None
        import jax

        q, k, v = (jax.ShapeDtypeStruct(a.shape[1:], a.dtype) for a in args[:3])
        dropout = {} if not dropout_rate else {"dropout_rate": dropout_rate, "prng_key": jax.random.key(0)}
        op = splash_op(api.op_class, api.vjp_class, any_device=self._any_device)
        return op.bind(q, k, v, **dropout).default_config

    def _description(
        self,
        inputs: AttentionInputs,
        spec: AttentionSpec,
        backward: bool,
        config: Any = None,
        loop: bool = False,
    ) -> CallDescription:
        """``tokamax_splash_attention`` (out and lse) or ``tokamax_splash_gradients`` through the public
        ``splash_attention``, bound to it, the implementation's op, ``SegmentIds`` and the mask module,
        on q, k, v, the boolean mask (``mask_array``), segment ids and sinks (and dout), with the
        structural mask's layout (``mask_layout``), the scale and the softcap as keywords.

        The op is built from its classes, with its forward ``config`` (Mosaic TPU's, ``_config``)
        written as its constructor call (``constructed``), as its interpretable subclass for the kernel
        (``_any_device``).
        ``loop``: one call per batch row (TPU interpret mode); a script decides it where it runs."""
        kind = self._kind
        api = _load_api(kind)
        op_class = Module("op_class", f"{PACKAGE}.{kind.module}", api.op_class, attribute=kind.op_class)
        vjp = api.vjp_class
        vjp_class = () if vjp is None else (Module("vjp_class", vjp.__module__, vjp, attribute=vjp.__name__),)
        options: tuple[tuple[str, Any], ...] = ()
        if config is not None:
            options += (("config", constructed("splash_config", config, "SplashConfig")),)
        if self._any_device:
            options += (("any_device", True),)
        op = Built("op", splash_op, (op_class, *vjp_class), options, comment="the op and its own VJP op")
        execution = _execution(kind)
        off_tpu = "jax.default_backend() != 'tpu'"
        looped: Any = Decided(loop, off_tpu) if kind.execution == "tpu" else loop
        bound = (
            Module("splash_attention", PUBLIC, api.attention, attribute="splash_attention"),
            op,
            Module("SegmentIds", f"{PACKAGE}.base", api.segment_ids, attribute="SegmentIds"),
            Module("masks", f"{PACKAGE}.splash_attention_mask", api.masks),
        )
        sq, sk = Name("SQ"), Name("SK")
        chunk = () if spec.chunk is None else (spec.chunk,)
        layout = Built(
            "layout",
            mask_layout,
            (spec.causal, spec.alignment, spec.window, sq, sk, *chunk),
            comment="(kind, offset, window, chunk)",
        )
        keywords = (
            ("scale", spec.resolved_scale(inputs.shape.head_dim)),
            ("layout", layout),
            ("softcap", None if spec.softcap is None else float(spec.softcap)),
            ("loop", looped),
        )
        planes = Built(
            "splash_mask",
            mask_array,
            (Name("mask"), sq, sk),
            comment="[Bm, Hm, Sq, Sk], 1 where all alike",
            head_axis=1,
        )
        names = ("q_segment_ids", "kv_segment_ids", "sinks")
        arrays = (Name("q"), Name("k"), Name("v"), planes, *(Name(n) for n in names))
        context = NO_CONTEXT
        if kind.execution != "native":
            context = Context(
                functools.partial(interpreter_context, execution),
                f"interpreter_context({kind.execution!r} if {off_tpu} else 'native')",
                functions=(interpreter_context,),
            )
        flags = Built("", absl_flags_parsed, comment="tokamax >= 0.0.10 parses sys.argv with absl otherwise")
        note = f"{self.description}, {_EXECUTION_WORDS[execution]}"
        if not backward:
            return CallDescription(
                tokamax_splash_attention,
                arrays,
                bound,
                (*keywords, ("with_lse", True)),
                context=context,
                note=note,
                prepare=(flags,),
            )
        return CallDescription(
            tokamax_splash_gradients,
            (*arrays, Name("dout")),
            bound,
            keywords,
            ("dq", "dk", "dv", "dsinks"),
            context,
            note,
            (flags,),
        )

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The forward or gradients call as a TPU runs it, for Mosaic (``kernels/hardware/lowering.py``):
        the same op and forward Config as the interpreted call (``_op``, the op's own default for
        these shapes; only ``supported_on`` answers True here, where the chip is absent), with no
        interpreter and none of its shims (the batch ``jax.vmap``-ed, not looped; the VJP's remat
        optimisation on), under an abstract TPU (``DEFAULT_DEVICE_KIND``: the kernel reads the chip's
        generation, ``pltpu.get_tpu_info``)."""
        import jax

        kind = self._kind
        if kind.hardware != "tpu":
            raise NotImplementedError(f"{self.name} has no Pallas call to lower (Capabilities.lowers_for)")
        backward = direction == "backward"
        with abstract_tpu(DEFAULT_DEVICE_KIND):  # the default Config as the call picks it
            config = self._config(_load_api(kind), (inputs.q, inputs.k, inputs.v))
        call = dataclasses.replace(self._description(inputs, spec, backward, config), context=NO_CONTEXT)
        arrays = call.traced_arguments(inputs)
        if backward:  # dout, the description's last array, is none here: its shape and dtype
            b, hq, sq, _ = inputs.q.shape
            args = (
                *abstract_arrays(*arrays[:-1]),
                jax.ShapeDtypeStruct((b, hq, sq, inputs.v.shape[-1]), inputs.q.dtype),
            )
        else:
            args = abstract_arrays(*arrays)
        return LoweringCall.described("tpu", call, inputs, args, DEFAULT_DEVICE_KIND)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """Both calls as standalone script text, rendered from the descriptions the suite runs, with
        jax, numpy and tokamax: Mosaic TPU's forward Config the one the suite names for the case
        (``inputs``: a skeleton in the case's dtype), off a TPU in TPU interpret mode (the interpreter
        context of ``kernels/runtime/tokamax_runtime.py`` embedded) one call per batch row."""
        execution = _execution(self._kind)
        with interpreter_context(execution):
            config = self._config(_load_api(self._kind), (inputs.q, inputs.k, inputs.v))
        loop = execution == "tpu"
        return standalone(
            self._description(inputs, spec, False, config, loop),
            self._description(inputs, spec, True, config, loop),
        )

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call (``dout`` None) or the gradients call as this adapter runs it: the public
        ``splash_attention`` with this implementation's op (Mosaic TPU's forward Config named), on JAX
        arrays in the canonical layout, inside the interpreter's context off a TPU. q, k, v, the
        boolean mask (``[Bm, Hm, Sq, Sk]``, a batch axis of 1 where every row's is the same), segment
        ids and dout are batch-first; sinks (``[Hq]``) are shared by every row. The mask is an
        argument, not built into the function, so nothing is per batch row; off a TPU the Mosaic
        kernel runs one call per batch row in TPU interpret mode, which cannot vmap it
        (``TPU_INTERPRET_NO_VMAP``)."""
        return self._call(inputs, spec, dout)[0]

    def _call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None, rate: float = 0.0
    ) -> tuple[JaxCall, Hashable, Callable[[TracedPrimitives], str]]:
        """``jax_call``'s call, from ``_description`` (Mosaic TPU's op and Config bound for dropout
        ``rate``: ``_op``), the description's key (``cache_key``), and the ``ran`` sentence's writer
        for the primitives it traces to."""
        kind = self._kind
        execution = _execution(kind)
        with interpreter_context(execution):
            config = self._config(_load_api(kind), (inputs.q, inputs.k, inputs.v), rate)
        # the interpreter's limit makes the call loop over the batch rows, and keeps vmap out
        loop = execution == "tpu"
        call = self._description(inputs, spec, dout is not None, config, loop)
        batched = (True, True, True, True, True, True, False) + ((True,) if dout is not None else ())
        no_vmap = TPU_INTERPRET_NO_VMAP if loop else ""
        describe = functools.partial(self._ran, execution=execution, config=config)
        return described_call(call, inputs, dout, batched, no_vmap), cache_key(call, inputs, dout), describe

    def _run(
        self,
        inputs: AttentionInputs,
        spec: AttentionSpec,
        dout: Any = None,
        dropout: DropoutRequest | None = None,
    ) -> tuple[tuple[Any, ...], str]:
        """``_call``'s call jitted (once per its key and shapes) and run: its outputs and ``ran``.
        With ``dropout``, the call takes ``dropout_rate`` and ``prng_key = jax.random.key(seed)``,
        the key as one more argument."""
        rate = 0.0 if dropout is None else dropout.rate
        call, key, describe = self._call(inputs, spec, dout, rate)
        if dropout is not None:
            call, key = self._with_prng_key(call, rate, dropout.seed), ("dropout", rate, key)
        return self._cache.run(key, call, describe)

    @staticmethod
    def _with_prng_key(call: JaxCall, rate: float, seed: int) -> JaxCall:
        """``call`` with ``dropout_rate=rate`` and ``prng_key = jax.random.key(seed)``, the key one
        more argument (made in the call's context, where its arrays are)."""
        import jax

        with call.context():
            args = (*call.args, jax.random.key(seed))
        fn = functools.partial(with_prng_key, call.fn, rate)
        return JaxCall(fn, args, (*call.batched, False), call.context)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, Dv]`` in the input dtype; ``lse: [B, Hq, Sq]`` float32."""
        (out, lse), ran = self._run(inputs, spec)
        return SubjectOutput(out=out, lse=lse, ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` through the op's VJP; ``dsinks: [Hq]`` with sinks."""
        (dq, dk, dv, dsinks), _ = self._run(inputs, spec, dout)
        return SubjectGrads(dq=dq, dk=dk, dv=dv, dsinks=dsinks)

    def dropout(
        self,
        inputs: AttentionInputs,
        spec: AttentionSpec,
        request: DropoutRequest,
        dout: np.ndarray | None = None,
    ) -> SubjectOutput | SubjectGrads:
        """The forward (``dout`` None) or gradients call of ``jax_call`` with ``dropout_rate`` and
        ``prng_key = jax.random.key(request.seed)`` (each batch row under its split of it:
        ``tokamax_splash_attention``); the mask is drawn inside, in both directions."""
        if request.seed is None:
            raise ValueError(f"{self.name} draws its dropout mask from a key (Capabilities.dropout 'key')")
        result, ran = self._run(inputs, spec, dout, request)
        if dout is None:
            out, lse = result
            return SubjectOutput(out=out, lse=lse, ran=ran)
        dq, dk, dv, dsinks = result
        return SubjectGrads(dq=dq, dk=dk, dv=dv, dsinks=dsinks)

    def _ran(self, primitives: TracedPrimitives, execution: str, config: Any) -> str:
        kernels = primitives.count("pallas_call")
        where = _EXECUTION_WORDS[execution]
        if self._kind.hardware != "cpu" and kernels == 0:
            what = f"no pallas_call traced: tokamax fell back ({where})"
        elif kernels:
            what = f"{self.impl}: pallas_call x{kernels} ({where})"
        else:
            what = f"{self.impl}: XLA ops"
        if config is None:
            return f"{what}; config none"
        words = ", ".join(
            f"{f.name}={getattr(getattr(config, f.name), 'name', getattr(config, f.name))}"
            for f in dataclasses.fields(config)
        )
        return f"{what}; config ({words})"
