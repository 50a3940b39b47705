"""tokamax's ring attention (``make_ring_attention`` in
``tokamax._src.ops.experimental.tpu.splash_attention.ring_attention_kernel``, private in tokamax 0.0.11
to 0.0.17, run by MaxText's context-parallel attention): the Pallas TPU splash kernel applied to one
shard of keys at a time while k and v travel around a ring of devices (``lax.ppermute``), the
partial results merged by their running max and sum. Context parallelism is where silently wrong
answers hide (huggingface/diffusers#14265, NVIDIA/Megatron-LM#1464), and tokamax's own test of this
kernel is skipped on its runners ("no sharding on runners", ``ring_attention_kernel_test.py``).

One subject per configuration (``OPTIONS``):

* ``tokamax_ring``: ``config=None``, what ``make_ring_attention`` documents as "uses the default
  config" (``SplashConfig.get_default()``: 128 blocks, ``fuse_reciprocal=True``,
  ``use_base2_exp=True``);
* ``tokamax_ring[config=natural_exp]``: that default with ``use_base2_exp=False``, the configuration
  tokamax's own (skipped) ring test builds.

A softcap is the config's ``attn_logits_soft_cap`` (the kernel reads it there), set on either.

Translation from canonical semantics (``docs/semantics.md``), read in tokamax 0.0.17's
``ring_attention_kernel.py`` and ``splash_attention_kernel.py``:

* Layout ``[H, S, D]`` per call, no batch: one ring call per batch row (TPU interpret mode cannot
  vmap a Pallas TPU kernel). MQA (Hkv = 1, Hq > 1) is ``is_mqa=True`` with 2-D k and v; GQA is native.
* The ring: ``RING`` = 2 devices of a mesh with one axis, ``RING_AXIS``; q, k, v (and segment ids)
  split along their sequence (``q_seq_shards = kv_seq_shards = RING``), the kernel's mask info as its
  ``manual_sharding_spec()`` says, under ``jax.shard_map``, as the upstream test runs it. Each
  shard's length must be a multiple of the config's 128 block, so Sq and Sk are multiples of 256
  (``ring_shards_fit_blocks``: the API raises ValueError otherwise, and no other ring size fits).
* No scale argument: q is multiplied by the scale in float32 and rounded once to its dtype
  (``q_prescaled``).
* Masks: ``make_ring_attention`` takes a ``NumpyMask`` or a ``FullMask`` (it raises
  NotImplementedError for any other mask object): the structural mask (causal with its offset, a
  window, chunked) is built by ``kernels.adapters.splash``'s translation and materialised into a
  ``NumpyMask``, ANDed with a canonical boolean mask. The kernel takes one ``[Sq, Sk]`` mask, so a
  mask that differs across heads is one ring call per query head (with its kv head).
* ``sinks`` is an argument of the kernel that raises ``NotImplementedError("Sinks aren't supportd
  yet.")``: declared, and asserted by the ``raises`` check.
* No lse: the custom VJP's primal returns the output only, and ``save_residuals=True`` raises
  NotImplementedError ("Higher-order AD not supported"): ``lse`` is not observable.
* Gradients: ``jax.vjp`` of the same call, through the ring's own VJP (the splash backward per shard,
  dk and dv travelling back around the ring).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, ClassVar

import numpy as np

from kernels.adapters.splash import gradients_with_sinks, mask_layout, structural_mask
from kernels.adapters.tokamax_splash import mask_array
from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.runtime.call_description import (
    NO_CONTEXT,
    Built,
    CallDescription,
    Module,
    Name,
    cache_key,
    standalone,
    tpu_interpret_context,
)
from kernels.runtime.call_description import jax_call as described_call
from kernels.runtime.jax_runtime import (
    CompiledCache,
    TracedPrimitives,
    default_backend,
    installed_version,
)
from kernels.runtime.standalone import StandaloneCall
from kernels.runtime.tokamax_runtime import DISTRIBUTION, absl_flags_parsed, availability_versions
from kernels.runtime.tpu_interpret import tpu_interpret_mode_missing
from reference.spec import AttentionInputs, AttentionSpec

PACKAGE = "tokamax._src.ops.experimental.tpu.splash_attention"
RING_MODULE = f"{PACKAGE}.ring_attention_kernel"
RING_AXIS = "ring"
RING = 2  # devices in the ring: the one size every 256-long case fits (each shard a 128 block)
# XLA's flag for simulated CPU devices (the suite sets it too: conformance/suite/host_devices.py,
# a layer above this one).
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
HOST_DEVICES = 4  # what a script asks of JAX's CPU backend, as the suite does (host_devices.DEVICES)
BLOCK = 128  # SplashConfig.get_default()'s blocks, forward and backward
CONFIGS: tuple[str, ...] = ("default", "natural_exp")

EXECUTION_WORDS = {
    "native": "natively",
    "interpret": "Pallas TPU interpret mode (force_tpu_interpret_mode) on CPU",
}


def ring_config(splash_kernel: Any, config: str, softcap: float | None) -> Any:
    """The ``config=`` of ``make_ring_attention``: None (the library's default) where nothing changes
    it, else ``SplashConfig.get_default()`` with ``config``'s changes and the softcap."""
    # natural_exp: what tokamax's own ring test changes in the default
    changes: dict[str, Any] = {"use_base2_exp": False} if config == "natural_exp" else {}
    if softcap is not None:
        changes["attn_logits_soft_cap"] = float(softcap)
    if not changes:
        return None
    return dataclasses.replace(splash_kernel.SplashConfig.get_default(), **changes)


def ring_mask(masks: Any, layout: tuple, plane: Any, q_len: int, kv_len: int) -> Any:
    """The one 2-D mask a ring call takes: ``FullMask`` where nothing masks, else the structural mask
    (``layout``) materialised, ANDed with ``plane`` (``[Sq, Sk]`` bool) where there is one, as a
    ``NumpyMask`` (the only other mask ``make_ring_attention`` accepts)."""
    structural = structural_mask(masks, layout, q_len, kv_len)
    if plane is None and layout[0] == "full":
        return structural
    dense = np.asarray(structural[0:q_len, 0:kv_len], dtype=bool)
    if plane is not None:
        dense = dense & np.asarray(plane, dtype=bool)
    return masks.NumpyMask(dense)


def simulated_devices(count: int) -> None:
    """XLA_FLAGS asks JAX's CPU backend for ``count`` simulated devices, unless it names a count
    already. XLA reads it when JAX starts its backend, so a script calls this before any JAX
    computation; a TPU or GPU backend ignores it."""
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    if DEVICE_COUNT_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT_FLAG}={count}".strip()


def kernel_travels_sharded(ring_module: Any) -> bool:
    """Whether the ring kernel is passed through ``shard_map`` with its own spec (its mask info split
    along the ring: ``RingSplashAttentionKernel.manual_sharding_spec()``, made with ``q_seq_shards =
    kv_seq_shards`` = the ring), the form this adapter calls. tokamax 0.0.10's ring kernel is a
    ``SplashAttentionKernel`` whose ``manual_sharding_spec(sharding)`` returns a spec of that class,
    not of the ring's (``shard_map`` rejects the pair), and closed over whole, as 0.0.10's ring test
    runs it, its blocks index the whole sequence on each shard (TPU interpret mode: "Out-of-bounds
    block index"): another call form, not run here."""
    import inspect

    own = ring_module.RingSplashAttentionKernel.__dict__.get("manual_sharding_spec")
    return own is not None and not list(inspect.signature(own).parameters)[1:]


def ring_call(ring_module, segment_ids_class, config, mask, ring, q, k, v, q_seg, kv_seg, sinks):
    """One ring call, ``q: [Hq, Sq, D]``, ``k: [Hkv, Sk, D]``, ``v: [Hkv, Sk, Dv]`` -> out ``[Hq, Sq,
    Dv]``: the kernel from ``make_ring_attention`` under ``jax.shard_map`` over the first ``ring``
    devices, every sequence split ``ring`` ways along ``RING_AXIS``."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mqa = k.shape[0] == 1 and q.shape[0] > 1
    if mqa:
        k, v = k[0], v[0]
    devices = jax.devices()[:ring]
    if len(devices) < ring:  # a ring of one device merges nothing: it would hide what is judged
        raise ValueError(
            f"a ring of {ring} needs {ring} devices and JAX has {len(devices)}: set "
            f"XLA_FLAGS={DEVICE_COUNT_FLAG}={ring} before JAX starts"
        )
    sequence = P(None, RING_AXIS, None)
    kv_spec = P(RING_AXIS, None) if mqa else sequence
    segments, segment_spec = None, None
    if q_seg is not None:
        segments = segment_ids_class(q_seg.astype(jnp.int32), kv_seg.astype(jnp.int32))
        segment_spec = segment_ids_class(P(RING_AXIS), P(RING_AXIS))
    sinks_spec = None if sinks is None else P()
    mesh = Mesh(np.array(devices), (RING_AXIS,))
    specs = (sequence, kv_spec, kv_spec, segment_spec, sinks_spec)
    kernel = ring_module.make_ring_attention(
        mask, config=config, is_mqa=mqa, ring_axis=RING_AXIS, q_seq_shards=ring, kv_seq_shards=ring
    )
    sharded = jax.shard_map(
        lambda kernel, *arrays: kernel(*arrays),
        mesh=mesh,
        in_specs=(kernel.manual_sharding_spec(), *specs),
        out_specs=sequence,
        check_vma=False,
    )
    return sharded(kernel, q, k, v, segments, sinks)


def tokamax_ring_attention(
    ring_module,
    masks,
    segment_ids_class,
    config,
    planes,
    q,
    k,
    v,
    q_seg,
    kv_seg,
    sinks,
    *,
    scale,
    layout,
    ring,
):
    """Canonical ``[B, H, S, D]`` -> (out ``[B, Hq, Sq, Dv]``, None: no lse). ``planes``: None or the
    boolean mask as ``[Bm, Hm, Sq, Sk]`` (``mask_array``), NumPy, built into each call's mask; with
    Hm > 1 each query head is its own ring call. One ring call per batch row."""
    import jax.numpy as jnp

    q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)
    batch, q_heads, q_len = q.shape[:3]
    kv_len = k.shape[2]
    group = q_heads // k.shape[1]
    per_head = planes is not None and planes.shape[1] > 1
    call = functools.partial(ring_call, ring_module, segment_ids_class, config, ring=ring)
    # Without planes every row's mask is the structural one: materialised once.
    shared = ring_mask(masks, layout, None, q_len, kv_len) if planes is None else None
    rows = []
    for b in range(batch):
        plane_row = None if planes is None else planes[b if planes.shape[0] > 1 else 0]
        q_row = None if q_seg is None else q_seg[b]
        kv_row = None if kv_seg is None else kv_seg[b]
        if not per_head:
            mask = shared if plane_row is None else ring_mask(masks, layout, plane_row[0], q_len, kv_len)
            rows.append(call(mask, q=q[b], k=k[b], v=v[b], q_seg=q_row, kv_seg=kv_row, sinks=sinks))
            continue
        heads = []
        for h in range(q_heads):
            kv = slice(h // group, h // group + 1)
            mask = ring_mask(masks, layout, plane_row[h], q_len, kv_len)
            head_sinks = None if sinks is None else sinks[h : h + 1]
            heads.append(
                call(
                    mask,
                    q=q[b, h : h + 1],
                    k=k[b, kv],
                    v=v[b, kv],
                    q_seg=q_row,
                    kv_seg=kv_row,
                    sinks=head_sinks,
                )
            )
        rows.append(jnp.concatenate(heads))
    return jnp.stack(rows), None


def tokamax_ring_gradients(*args, **options):
    """(dq, dk, dv, dsinks or None) of ``sum(out * dout)`` by ``jax.vjp`` of ``tokamax_ring_attention``
    on the same arguments and keywords (``args``: its arguments, then dout): the ring's own VJP. dq
    includes the scale (q is scaled inside)."""
    *bound, q, k, v, q_seg, kv_seg, sinks, dout = args

    def attend(q, k, v, sinks):
        return tokamax_ring_attention(*bound, q, k, v, q_seg, kv_seg, sinks, **options)[0]

    return gradients_with_sinks(attend, q, k, v, sinks, dout)


def _fits_the_ring(shape: Any, spec: Any) -> bool:
    return shape.q_len % (RING * BLOCK) == 0 and shape.kv_len % (RING * BLOCK) == 0


CONSTRAINTS = (
    ShapeConstraint(
        name="ring_shards_fit_blocks",
        reason=f"each of the {RING} ring shards must hold a whole number of the config's {BLOCK} blocks: "
        f"Sq and Sk multiples of {RING * BLOCK} ('q_block_size=128 should divide "
        "q_seq_len_per_shard=64', ValueError, from the kernel's mask info)",
        holds=_fits_the_ring,
        basis="raises",
        exceptions=("ValueError",),
    ),
    ShapeConstraint(
        name="no_sinks",
        reason="the ring forward raises NotImplementedError('Sinks aren't supportd yet.') "
        "(ring_attention_kernel.py, tokamax 0.0.11 to 0.0.17)",
        holds=lambda shape, spec: False,
        basis="raises",
        features=("sinks",),
        exceptions=("NotImplementedError",),
    ),
)


@dataclasses.dataclass(frozen=True)
class _Api:
    ring_module: Any
    masks: Any
    segment_ids: type
    splash_kernel: Any


def _load_api() -> _Api:
    """tokamax's ring kernel, its mask module, ``SegmentIds`` and the splash kernel module (whose
    ``SplashConfig`` it takes); ImportError where any is missing."""
    absl_flags_parsed()
    ring_module = importlib.import_module(RING_MODULE)
    base = importlib.import_module(f"{PACKAGE}.base")
    return _Api(
        ring_module,
        importlib.import_module(f"{PACKAGE}.splash_attention_mask"),
        base.SegmentIds,
        importlib.import_module(f"{PACKAGE}.splash_attention_kernel"),
    )


def _execution() -> str:
    return "native" if default_backend() == "tpu" else "interpret"


@dataclasses.dataclass(frozen=True, eq=False)
class TokamaxRingAdapter:
    """tokamax's ring attention over ``RING`` devices with one configuration. Canonical ``[B, H, S, D]``."""

    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"config": CONFIGS}
    config: str = "default"
    name: str = "tokamax_ring"
    description: str = "tokamax ring attention (make_ring_attention), config=None"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def __post_init__(self) -> None:
        if self.config not in CONFIGS:
            raise ValueError(f"unknown tokamax ring config {self.config!r}; choose from {CONFIGS}")
        if self.config != "default":
            object.__setattr__(self, "name", f"tokamax_ring[config={self.config}]")
            object.__setattr__(
                self,
                "description",
                "tokamax ring attention (make_ring_attention), "
                "SplashConfig.get_default() with use_base2_exp=False",
            )

    def availability(self) -> Availability:
        versions = availability_versions()
        try:
            _load_api()
        except Exception as error:  # any import failure means "unavailable", never a crash
            line = str(error).splitlines()[0] if str(error) else type(error).__name__
            return Availability(
                False,
                f"tokamax {installed_version(DISTRIBUTION) or '(not installed)'} has no ring attention "
                f"({RING_MODULE}): {type(error).__name__}: {line}",
                versions,
            )
        if not kernel_travels_sharded(_load_api().ring_module):
            return Availability(
                False,
                f"tokamax {installed_version(DISTRIBUTION)}'s ring kernel has no "
                "RingSplashAttentionKernel.manual_sharding_spec() (0.0.10's is SplashAttentionKernel's, "
                "taking a sharding): the call form this adapter runs is tokamax 0.0.11's on",
                versions,
            )
        execution = _execution()
        if execution == "interpret":
            missing = tpu_interpret_mode_missing(fix="run it on a TPU")
            if missing is not None:
                return Availability(False, missing, versions)
        import jax

        if jax.device_count() < RING:
            return Availability(
                False,
                f"a ring needs {RING} devices and this process has {jax.device_count()}: set "
                f"XLA_FLAGS={DEVICE_COUNT_FLAG}={HOST_DEVICES} before JAX starts (pytest conformance sets "
                "it unless XLA_FLAGS names a count)",
                versions,
            )
        return Availability(True, "", versions, execution, EXECUTION_WORDS[execution])

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("float32", "bfloat16"),
            q_prescaled=True,  # no scale argument: the caller passes q * scale in q's dtype
            causal_alignments=("top_left", "bottom_right"),  # any mask, as a NumpyMask
            chunked_causal_alignments=("top_left",),  # splash's ChunkedCausalMask, materialised
            window=True,
            segment_ids=True,
            bool_mask=True,
            gqa=True,
            softcap=True,  # SplashConfig.attn_logits_soft_cap
            sinks=True,  # an argument; the forward raises NotImplementedError (CONSTRAINTS)
            distinct_v_dim=True,
            backward=True,
            fully_masked_rows="unspecified",
            constraints=CONSTRAINTS,
        )

    def _description(self, inputs: AttentionInputs, spec: AttentionSpec, backward: bool) -> CallDescription:
        """``tokamax_ring_attention`` or ``tokamax_ring_gradients`` bound to the ring module, the mask
        module, ``SegmentIds``, the config (``ring_config``) and the mask planes (static: the kernel
        processes its mask in NumPy when it is made), on q, k, v, segment ids and sinks (and dout)."""
        api = _load_api()
        sq, sk = Name("SQ"), Name("SK")
        chunk = () if spec.chunk is None else (spec.chunk,)
        splash_kernel = Module("splash_kernel", f"{PACKAGE}.splash_attention_kernel", api.splash_kernel)
        softcap = None if spec.softcap is None else float(spec.softcap)
        bound = (
            Module("ring_attention_kernel", RING_MODULE, api.ring_module),
            Module("masks", f"{PACKAGE}.splash_attention_mask", api.masks),
            Module("SegmentIds", f"{PACKAGE}.base", api.segment_ids, attribute="SegmentIds"),
            Built("config", ring_config, (splash_kernel, self.config, softcap), comment="None: the default"),
            Built("planes", mask_array, (Name("mask"), sq, sk), comment="[Bm, Hm, Sq, Sk] or None"),
        )
        layout = Built(
            "layout",
            mask_layout,
            (spec.causal, spec.alignment, spec.window, sq, sk, *chunk),
            comment="(kind, offset, window, chunk)",
        )
        keywords = (("scale", spec.resolved_scale(inputs.shape.head_dim)), ("layout", layout), ("ring", RING))
        arrays = (
            Name("q"),
            Name("k"),
            Name("v"),
            Name("q_segment_ids"),
            Name("kv_segment_ids"),
            Name("sinks"),
        )
        context = NO_CONTEXT if _execution() == "native" else tpu_interpret_context("tpu")
        flags = Built("", absl_flags_parsed, comment="tokamax >= 0.0.10 parses sys.argv with absl otherwise")
        devices = Built("", simulated_devices, (HOST_DEVICES,), comment="off a TPU: the ring's devices")
        note = f"{self.description}, a ring of {RING} devices, {EXECUTION_WORDS[_execution()]}"
        if not backward:
            return CallDescription(
                tokamax_ring_attention,
                arrays,
                bound,
                keywords,
                context=context,
                note=note,
                prepare=(devices, flags),
            )
        return CallDescription(
            tokamax_ring_gradients,
            (*arrays, Name("dout")),
            bound,
            keywords,
            ("dq", "dk", "dv", "dsinks"),
            context,
            note,
            (devices, flags),
        )

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """Both calls as standalone script text, from the descriptions the suite runs (jax, numpy and
        tokamax; the script sets XLA_FLAGS for its simulated devices off a TPU)."""
        return standalone(self._description(inputs, spec, False), self._description(inputs, spec, True))

    def _run(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: Any = None
    ) -> tuple[tuple[Any, ...], str]:
        """The described call jitted (once per its key and shapes) and run: its outputs and ``ran``.
        The key holds the mask by its shape and bytes: its planes are compiled into the call."""
        described = self._description(inputs, spec, dout is not None)
        call = described_call(described, inputs, dout)
        return self._cache.run(cache_key(described, inputs, dout), call, self._ran)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, Dv]`` in the input dtype; no lse (the ring's primal returns none)."""
        (out, _), ran = self._run(inputs, spec)
        return SubjectOutput(out=out, ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` through the ring's VJP."""
        (dq, dk, dv, dsinks), _ = self._run(inputs, spec, dout)
        return SubjectGrads(dq=dq, dk=dk, dv=dv, dsinks=dsinks)

    def _ran(self, primitives: TracedPrimitives) -> str:
        kernels = primitives.count("pallas_call")
        where = EXECUTION_WORDS[_execution()]
        what = f"pallas_call x{kernels}" if kernels else "no pallas_call traced"
        return f"ring of {RING} over '{RING_AXIS}' ({what}, {where}); {self.description}"
