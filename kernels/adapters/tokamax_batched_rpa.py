"""tokamax's batched ragged paged attention (``tokamax.ops.batched_ragged_paged_attention``, tokamax
0.0.17): one subject per entry of its implementation list, ``tokamax_batched_rpa[impl=reference]``
(pure JAX), ``[impl=mosaic_tpu]`` (the Pallas TPU kernel) and ``[impl=default]``
(``implementation=None``: ``api.py`` picks mosaic_tpu where it imports, else reference).

The op attends and writes: it takes the packed new tokens' ``queries``, ``keys`` and ``values``
``[T, H, D]`` with the ``kv_cache [P, page, 2*Hkv, align(D, 128)]`` and returns ``(out, updated
kv_cache)`` (and the lse with ``return_lse=True``). Read in tokamax 0.0.17's
``_src/ops/batched_rpa/`` (``api.py``, ``base.py``, ``reference.py``, ``pallas_mosaic_tpu.py``):

* Packing: ``kernels.adapters.ragged_paged_attention.pack`` (JAX's ragged paged attention has the
  same ragged layout: ``cu_q_lens``, a random page permutation, K head ``h`` at ``2h`` and V at
  ``2h + 1``, garbage in every unowned page and slot, spare tokens and one spare sequence slot).
  ``page_indices`` is that table flattened (``[max_num_seqs * pages_per_seq]``); ``distribution``
  is ``[0, 0, B]`` (every sequence in the mixed split: the reference reads only the last entry,
  the active count, so the spare slot and the spare tokens are inactive).
* The write-back (``reference.py`` step 1): query token ``i`` of a sequence is the cache position
  ``kv_len - q_len + i``; its K/V go to that position's page and slot. So the case's K/V at those
  positions are passed as ``keys``/``values``, and the cache the call gets holds stale garbage in
  their slots (and zeros in the head-dim padding lanes, which the write fills with zeros). The cache
  the call must return is the packed cache of the whole case: ``CacheWrite.expected``, judged
  bitwise by the ``kv_cache`` check. Spare tokens carry garbage K/V, which must land nowhere.
* Masks (``reference.py`` step 3): keys below ``kv_len``; ``use_causal_mask`` keeps ``col <= kv_len
  - q_len + row`` (canonical causal, ``bottom_right_valid``); ``sliding_window = W`` keeps ``col >
  pos - W`` (canonical left edge ``W - 1``, as JAX's ragged paged attention); ``soft_cap`` caps the
  scaled logits (canonical order); ``sm_scale`` the resolved scale. GQA: query head ``h`` reads kv
  head ``h // (Hq / Hkv)`` (``jnp.repeat``). A row with more query tokens than keys cannot be
  written (its first tokens would sit before the cache): its first ``q_len - kv_len`` rows, which see
  no key under the bottom-right causal mask, are not packed; without the causal mask such a case is
  not expressible (``new_tokens_in_cache``).
* lse (reference only: ``_with_lse``): ``return_lse=True`` gives ``[T, Hq]`` float32, natural log
  (``jax.nn.logsumexp`` of the masked, capped, scaled logits); rows not packed are NaN, as
  ``out``'s (``fully_masked_rows`` unspecified).
* Not declared: ``q_scale``/``k_scale``/``v_scale`` (the reference divides by them, and writes the
  float ``keys`` into the cache by a plain cast: quantizing is the caller's), ``kv_layout`` and
  ``decode_query_size`` (the reference reads neither: kernel layout and blocking), ``cp_*`` and
  ``attention_scope`` (context parallelism). No backward (an inference op).

``mosaic_tpu`` off a TPU: its ``supported_on`` asks for a TPU v5+ (``NotImplementedError: Not supported
on cpu``) and the kernel asks ``pltpu.get_tpu_info()`` at trace time; traced under an abstract TPU
with TPU interpret mode and compiled for the CPU, the interpreter fails inside the kernel
(``'BitcastTransform' object has no attribute 'indices'`` at jax 0.12.0.1: TPU interpret mode
resolves only indexer transforms, as for JAX's ragged paged attention). No version says so:
``availability()`` makes one tiny call that way per process (``interpreter_failure``), and a release
whose interpreter runs it makes the subject available; until then it lowers for a TPU.
The kernel takes the cache as ``[P, page, 2*Hkv / packing, packing, D']`` (``kernel/wrapper.py``:
``packing`` heads to a 32-bit row) where the reference takes ``[P, page, 2*Hkv, D']``: the adapter
reshapes (``kernel_cache``; the interleave is the same) and reshapes the returned cache back. The
kernel's wrapper raises ``ValueError('Only causal attention is supported.')`` without the causal mask
(``KERNEL_CONSTRAINTS``), and its pallas_calls carry no cost estimate (ledger).
``[impl=default]`` is observed the same way: on a CPU, with mosaic_tpu importable, its probe call
raises ``NotImplementedError``; where the API accepts it (a TPU, or without mosaic_tpu) it runs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, ClassVar, Literal

import numpy as np

from kernels.adapters import ragged_paged_attention as ragged
from kernels.adapters.paged_attention import GARBAGE_STD, PAGE_SIZE
from kernels.contract.base import (
    Availability,
    CacheWrite,
    Capabilities,
    ShapeConstraint,
    SubjectGrads,
    SubjectOutput,
)
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays, abstract_tpu
from kernels.runtime.jax_runtime import (
    Compiled,
    CompiledCache,
    TracedPrimitives,
    array_key,
    default_backend,
    installed_version,
    jit_observed,
    to_jax,
    to_numpy,
)
from kernels.runtime.tokamax_runtime import (
    DISTRIBUTION,
    absl_flags_parsed,
    availability_versions,
    interpretable_op,
)
from kernels.runtime.tpu_interpret import probe_failure, tpu_interpret_mode_missing
from reference.spec import AttentionInputs, AttentionSpec

Implementation = Literal["reference", "mosaic_tpu", "default"]
IMPLEMENTATIONS: tuple[str, ...] = ("reference", "mosaic_tpu", "default")
PUBLIC = "tokamax.ops"  # batched_ragged_paged_attention, public in 0.0.17
PACKAGE = "tokamax._src.ops.batched_rpa"
LANES = 128  # reference._merge_kv pads the head dim of the cache to a multiple of 128


def queries_in_cache(shape, spec) -> bool:  # noqa: ANN001 - ShapeConstraint.holds
    # Every query token is a new token of the cache: without the causal mask (which lets the
    # adapter drop rows that see no key) a row needs q_len <= kv_len.
    return spec.causal or shape.q_len <= shape.kv_len


CONSTRAINTS = (
    ShapeConstraint(
        name="new_tokens_in_cache",
        reason="each query token is a new token written at cache position kv_len - q_len + i: without "
        "the causal mask a row with more query tokens than keys (q_len > kv_len) cannot be expressed",
        holds=queries_in_cache,
        basis="api",
    ),
    ShapeConstraint(
        name="noncausal_lengths",
        reason="without the causal mask, a row's valid q_len may exceed its kv_len, which the cache "
        "cannot hold (new_tokens_in_cache); valid lengths are declared only with the causal mask",
        holds=lambda shape, spec: spec.causal,
        basis="api",
        features=("lengths",),
    ),
    ShapeConstraint(
        name="window_needs_causal",
        reason="sliding_window has no right edge: a window is expressible only under the causal mask",
        holds=lambda shape, spec: spec.window is None or spec.causal,
        basis="api",
    ),
)


# The kernel's wrapper (kernel/wrapper.py:609-610) refuses the non-causal call at trace time.
KERNEL_CONSTRAINTS = (
    ShapeConstraint(
        name="kernel_causal_only",
        reason="the Mosaic TPU kernel's wrapper raises ValueError('Only causal attention is supported.') "
        "for use_causal_mask=False (the reference takes it)",
        holds=lambda shape, spec: spec.causal,
        basis="raises",
        exceptions=("ValueError",),
    ),
)


def kernel_cache(cache: Any) -> Any:
    """The reference's cache ``[P, page, 2*Hkv, D']`` in the kernel's layout ``[P, page,
    2*Hkv / packing, packing, D']`` (``kernel/wrapper.py``: ``packing`` heads share a 32-bit row, 1
    for float32, 2 for bfloat16); K/V interleave alike, so it is a reshape, undone on the way back."""
    pages, page, heads, lanes = cache.shape
    packing = max(1, 4 // cache.dtype.itemsize)
    return cache.reshape(pages, page, heads // packing, packing, lanes)


@dataclasses.dataclass(frozen=True, eq=False)
class BatchedPack:
    """The op's arguments for one case (NumPy) and the cache it must return."""

    queries: np.ndarray  # [T + SPARE_TOKENS, Hq, D]
    keys: np.ndarray  # [T + SPARE_TOKENS, Hkv, D]
    values: np.ndarray
    kv_cache: np.ndarray  # [P, PAGE_SIZE, 2 * Hkv, align(D, 128)]: stale garbage in the new slots
    kv_lens: np.ndarray  # int32 [B + 1] (the spare sequence slot last)
    page_indices: np.ndarray  # int32 [(B + 1) * pages_per_seq]
    cu_q_lens: np.ndarray  # int32 [B + 2]
    distribution: np.ndarray  # int32 [3]
    expected_cache: np.ndarray  # the cache after a correct write-back
    packed: ragged.Packed  # rows: each batch row's token slice

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.queries,
            self.keys,
            self.values,
            self.kv_cache,
            self.kv_lens,
            self.page_indices,
            self.cu_q_lens,
            self.distribution,
        )


def packed_rows(inputs: AttentionInputs) -> AttentionInputs:
    """The case with each row's query tokens cut to the last ``min(q_len, kv_len)``: the rows before
    see no key (bottom-right causal) and cannot be written into the cache. Rows stay in place in
    the tensor; ``q_lengths`` says how many of each row's last tokens are packed."""
    q_len, kv_len = ragged.valid_lengths(inputs)
    kept = np.minimum(q_len, kv_len)
    if np.array_equal(kept, q_len):
        return inputs
    q = np.zeros_like(inputs.q)
    for row, (n, keep) in enumerate(zip(q_len, kept, strict=True)):
        q[row, :, :keep] = inputs.q[row, :, n - keep : n]
    return dataclasses.replace(inputs, q=q, q_lengths=kept.astype(np.int32))


def new_token_slots(packed: ragged.Packed, q_len: np.ndarray, kv_len: np.ndarray) -> np.ndarray:
    """int [T, 2]: (page, slot) of each packed token's cache position ``kv_len - q_len + i``."""
    slots = []
    for row, (n, total) in enumerate(zip(q_len, kv_len, strict=True)):
        positions = np.arange(total - n, total)
        slots += [(packed.page_indices[row, p // PAGE_SIZE], p % PAGE_SIZE) for p in positions]
    return np.asarray(slots, np.int64).reshape(-1, 2)


def pack_batched(inputs: AttentionInputs, seed: int) -> BatchedPack:
    """Canonical case -> the op's arguments and the cache it must return (module docstring)."""
    written = packed_rows(inputs)
    packed = ragged.pack(written, None, seed)
    q_len, kv_len = ragged.valid_lengths(written)
    d = inputs.q.shape[-1]
    lanes = -(-d // LANES) * LANES
    after = np.zeros((*packed.kv_pages.shape[:3], lanes), inputs.k.dtype)
    after[..., :d] = packed.kv_pages
    slots = new_token_slots(packed, q_len, kv_len)
    rng = np.random.default_rng(seed + 7)
    spare = packed.q.shape[0] - len(slots)
    garbage_kv = rng.normal(0.0, GARBAGE_STD, (spare, after.shape[2], d)).astype(inputs.k.dtype)
    new_kv = np.concatenate([after[slots[:, 0], slots[:, 1], :, :d], garbage_kv])
    before = after.copy()
    before[slots[:, 0], slots[:, 1], :, :d] = rng.normal(0.0, GARBAGE_STD, (len(slots), *after.shape[2:3], d))
    b = inputs.q.shape[0]
    return BatchedPack(
        queries=packed.q,
        keys=np.ascontiguousarray(new_kv[:, 0::2]),
        values=np.ascontiguousarray(new_kv[:, 1::2]),
        kv_cache=before,
        kv_lens=packed.kv_lens,
        page_indices=packed.page_indices.reshape(-1),
        cu_q_lens=packed.cu_q_lens,
        distribution=np.array([0, 0, b], np.int32),
        expected_cache=after,
        packed=packed,
    )


def unpack_lse(lse: np.ndarray, packed: ragged.Packed, like: np.ndarray) -> np.ndarray:
    """Op ``lse [T', Hq]`` -> canonical ``[B, Hq, Sq]``; rows not packed are NaN."""
    return ragged.unpack(lse[..., None], packed, np.empty((*like.shape[:3], 1)))[..., 0]


def unpack_rows(values: np.ndarray, inputs: AttentionInputs, like: np.ndarray) -> np.ndarray:
    """Undo ``packed_rows``: each row's packed tokens back at its last rows; NaN before them."""
    q_len, kv_len = ragged.valid_lengths(inputs)
    kept = np.minimum(q_len, kv_len)
    if np.array_equal(kept, q_len):
        return values
    full = np.full(like.shape, np.nan, values.dtype)
    for row, (n, keep) in enumerate(zip(q_len, kept, strict=True)):
        full[row, :, n - keep : n] = values[row, :, :keep]
    return full


# --- loading and executing -----------------------------------------------------------------


def _load_api() -> Any:
    """``tokamax.ops.batched_ragged_paged_attention``'s module (ImportError before 0.0.17)."""
    absl_flags_parsed()
    public = importlib.import_module(PUBLIC)
    if getattr(public, "batched_ragged_paged_attention", None) is None:
        raise ImportError(f"{PUBLIC} has no batched_ragged_paged_attention")
    return importlib.import_module(f"{PACKAGE}.api")


def _execution(impl: str) -> str:
    """``interpret`` for the kernel off a TPU (TPU interpret mode, as far as the probe finds it
    runs); ``native`` otherwise: reference anywhere, and the default as a user calls it."""
    return "interpret" if impl == "mosaic_tpu" and default_backend() != "tpu" else "native"


# The probe's kernel Config: the smallest blocks the Config accepts. The interpreted kernel's CPU
# program takes about 35 s to build with these and about 5 minutes with the default blocks; which
# blocks it has does not change whether the interpreter can follow the kernel.
PROBE_CONFIG = dict(
    prefill_bq_sz=16, prefill_bq_c_sz=16, bkv_sz=128, n_buffer=1, decode_batch_size=1, prefill_batch_size=1
)


def _op(api: Any, impl: str, execution: str, probe: bool = False) -> Any:
    """The callable taking the op's arguments: the public function with ``implementation=`` as
    given (None for the default); off a TPU the kernel's op with ``supported_on`` True and its
    default Config (``PROBE_CONFIG`` for the availability probe)."""
    if impl == "mosaic_tpu" and execution == "interpret":
        module = importlib.import_module(f"{PACKAGE}.pallas_mosaic_tpu")
        op_class, _ = interpretable_op(module.PallasTpuBatchedRpa, None)
        return op_class(config=module.Config(**(PROBE_CONFIG if probe else {})))
    return functools.partial(api.batched_ragged_paged_attention, implementation=_implementation(impl))


def _with_lse(impl: str) -> bool:
    """Whether the call asks for the lse: the reference's. The kernel's calls are the plain ``(out,
    cache)`` ones: its lse path did not lower under an abstract TPU whose mesh axis was ``Explicit``
    (jax 0.12.0.1: "Length of sharding.spec (5) must be equal to aval's ndim (2)" in
    ``bref_override.wait_out``), an artifact of that mesh; under the ``Auto`` one
    (``kernels/hardware/lowering.py``) the probe case lowers with lse (its six kernels, about 66 s).
    Asking for it is left to a run that can judge the kernel's lse on a TPU."""
    return impl == "reference"


def _implementation(impl: str) -> str | None:
    return None if impl == "default" else impl


def _runs_kernel(api: Any, impl: str) -> bool:
    """Whether the call runs the Mosaic TPU kernel (its cache layout): mosaic_tpu, and the default
    where mosaic_tpu imports (api.py's pick)."""
    return impl == "mosaic_tpu" or (impl == "default" and "mosaic_tpu" in api.IMPLEMENTATIONS)


def _call(op: Any, options: tuple, kernel_layout: bool) -> Any:
    scale, window, softcap, causal, with_lse = options

    def fn(queries, keys, values, kv_cache, kv_lens, page_indices, cu_q_lens, distribution):
        given = kernel_cache(kv_cache) if kernel_layout else kv_cache
        out, cache, *lse = op(
            queries,
            keys,
            values,
            given,
            kv_lens,
            page_indices,
            cu_q_lens,
            distribution,
            sm_scale=scale,
            sliding_window=window,
            soft_cap=softcap,
            use_causal_mask=causal,
            return_lse=with_lse,
        )
        return (out, cache.reshape(kv_cache.shape), *lse)

    return fn


def _interpreted(fn: Any, args: tuple, describe: Any) -> Compiled:
    """``fn`` traced under TPU interpret mode and an abstract TPU (the kernel asks which chip it
    runs on), compiled for this CPU: the Pallas TPU interpreter runs the kernel."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    with pltpu.force_tpu_interpret_mode(), abstract_tpu(DEFAULT_DEVICE_KIND):
        traced = jax.jit(fn).trace(*args)
        lowered = traced.lower(lowering_platforms=("cpu",))
    compiled = lowered.compile(device_assignment=(jax.devices("cpu")[0],))
    return Compiled(compiled, describe(TracedPrimitives.of(traced.jaxpr)))


@dataclasses.dataclass(frozen=True, eq=False)
class TokamaxBatchedRpaAdapter:
    """``tokamax.ops.batched_ragged_paged_attention`` with one implementation. Canonical layout in and out."""

    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"impl": IMPLEMENTATIONS}
    FAMILY_OPTION: ClassVar[str] = "impl"
    impl: Implementation = "reference"
    name: str = "tokamax_batched_rpa[impl=reference]"
    description: str = "tokamax.ops.batched_ragged_paged_attention"
    probe: bool = dataclasses.field(default=False, repr=False)  # the availability probe's call
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def __post_init__(self) -> None:
        if self.impl not in IMPLEMENTATIONS:
            raise ValueError(
                f"unknown batched RPA implementation {self.impl!r}; choose from {IMPLEMENTATIONS}"
            )
        object.__setattr__(self, "name", f"tokamax_batched_rpa[impl={self.impl}]")
        object.__setattr__(
            self,
            "description",
            f"tokamax.ops.batched_ragged_paged_attention(implementation={_implementation(self.impl)!r})",
        )

    def availability(self) -> Availability:
        """Available natively for reference (and the default where it picks reference or runs on a
        TPU); elsewhere only if a probe call runs (``interpreter_failure``); the kernel then lowers."""
        version = installed_version(DISTRIBUTION)
        versions = availability_versions()
        try:
            api = _load_api()
            execution = _execution(self.impl)
        except Exception as error:  # any import/API failure means "unavailable", never a crash
            line = str(error).splitlines()[0] if str(error) else type(error).__name__
            return Availability(
                False,
                f"tokamax {version or '(not installed)'} has no batched_ragged_paged_attention "
                f"({PUBLIC}, public in 0.0.17): {type(error).__name__}: {line}",
                versions,
            )
        if self.impl != "reference" and default_backend() != "tpu" and "mosaic_tpu" in api.IMPLEMENTATIONS:
            missing = tpu_interpret_mode_missing(fix="run it on a TPU") if execution == "interpret" else None
            failure = missing or interpreter_failure(self.impl)
            if failure is not None:
                what = {
                    "mosaic_tpu": "its Mosaic TPU kernel under Pallas TPU interpret mode",
                    "default": "implementation=None (api.py picks mosaic_tpu, importable here)",
                }[self.impl]
                return Availability(
                    False,
                    f"{self.name} needs a TPU here: a probe call of {what} failed: {failure}",
                    versions,
                    lowerable=self.impl == "mosaic_tpu" and _lowerable(),
                )
        if execution == "interpret":
            return Availability(True, "", versions, "interpret", "Pallas TPU interpret mode on CPU")
        return Availability(True, "", versions, "native", "natively")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("float32", "bfloat16"),
            causal_alignments=("bottom_right_valid",),
            window=True,
            lengths=True,
            gqa=True,
            softcap=True,
            lse=_with_lse(self.impl),
            kv_cache=True,
            fully_masked_rows="unspecified",
            constraints=CONSTRAINTS + self._kernel_constraints(),
            lowers_for="tpu" if self.impl == "mosaic_tpu" else None,
        )

    def _kernel_constraints(self) -> tuple[ShapeConstraint, ...]:
        """The kernel's limits where the call runs it (the default only where mosaic_tpu imports)."""
        try:
            return KERNEL_CONSTRAINTS if _runs_kernel(_load_api(), self.impl) else ()
        except Exception:  # noqa: BLE001 - no tokamax op: availability says why; declare nothing more
            return KERNEL_CONSTRAINTS if self.impl == "mosaic_tpu" else ()

    def _packed(self, inputs: AttentionInputs, spec: AttentionSpec) -> tuple[BatchedPack, tuple]:
        pack = pack_batched(inputs, ragged.layout_seed(inputs))
        softcap = None if spec.softcap is None else float(spec.softcap)
        scale = spec.resolved_scale(inputs.q.shape[-1])
        options = (scale, ragged.sliding_window(spec), softcap, spec.causal, _with_lse(self.impl))
        return pack, options

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The kernel's op (``supported_on`` True, its default Config) on the packed arguments, for
        Mosaic under an abstract TPU v5e."""
        pack, options = self._packed(inputs, spec)
        op = _op(_load_api(), "mosaic_tpu", "interpret")
        fn = _call(op, options, kernel_layout=True)
        return LoweringCall("tpu", fn, abstract_arrays(*pack.arrays), DEFAULT_DEVICE_KIND)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype and ``lse: [B, Hq, Sq]`` (NaN on rows not
        packed); ``kv_cache``: the returned cache beside the expected one."""
        api = _load_api()
        execution = _execution(self.impl)
        pack, options = self._packed(inputs, spec)
        args = tuple(to_jax(a) for a in pack.arrays)
        key = (execution, array_key(*pack.arrays), options)

        def build() -> Compiled:
            fn = _call(_op(api, self.impl, execution, self.probe), options, _runs_kernel(api, self.impl))
            if execution == "interpret":
                return _interpreted(fn, args, self._ran)
            return jit_observed(fn, args, self._ran)

        compiled = self._cache.get(key, build)
        out, cache, *rest = (to_numpy(a) for a in compiled.fn(*args))
        canonical = packed_rows(inputs)
        out = unpack_rows(ragged.unpack(out, pack.packed, canonical.q), inputs, inputs.q)
        lse = None
        if rest:
            lse = unpack_rows(unpack_lse(rest[0], pack.packed, canonical.q), inputs, inputs.q[..., 0])
        return SubjectOutput(
            out=out,
            lse=lse,
            ran=compiled.ran,
            kv_cache=CacheWrite(returned=cache, expected=pack.expected_cache),
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError(
            "batched_ragged_paged_attention is an inference op: it has no backward pass"
        )

    def _ran(self, primitives: TracedPrimitives) -> str:
        kernels = primitives.count("pallas_call")
        what = f"pallas_call x{kernels}" if kernels else "XLA ops"
        return (
            f"{self.description}: {what}; pages of {PAGE_SIZE} tokens in random order, new K/V written over "
            "stale garbage, finite garbage in unowned pages, slots, spare tokens and the spare sequence slot"
        )


def probe_case() -> tuple[AttentionInputs, AttentionSpec]:
    """One decode token over one page, D=128."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 1, 128)).astype(np.float32) for _ in range(3))
    return AttentionInputs(q=q, k=k, v=v), AttentionSpec(causal=True, alignment="bottom_right_valid")


@functools.cache
def interpreter_failure(impl: str) -> str | None:
    """Why ``impl`` cannot run off a TPU on this installation, in one line, or None when it can:
    observed by the adapter's own call on ``probe_case`` (once per process)."""
    inputs, spec = probe_case()
    return probe_failure(lambda: TokamaxBatchedRpaAdapter(impl=impl, probe=True).forward(inputs, spec))  # type: ignore[arg-type]


def _lowerable() -> bool:
    """Whether the kernel can be lowered for a TPU here (it imports; abstract devices exist)."""
    try:
        importlib.import_module(f"{PACKAGE}.pallas_mosaic_tpu")
        with abstract_tpu(DEFAULT_DEVICE_KIND):
            return True
    except Exception:  # noqa: BLE001 - not lowerable: the availability reason stands alone
        return False
