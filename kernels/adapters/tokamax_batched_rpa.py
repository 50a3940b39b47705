"""tokamax's batched ragged paged attention (``tokamax.ops.batched_ragged_paged_attention``, tokamax
0.0.17): one subject per entry of its implementation list, ``tokamax_batched_rpa[impl=reference]``
(pure JAX), ``[impl=mosaic_tpu]`` (the Pallas TPU kernel) and ``[impl=default]``
(``implementation=None``: ``api.py`` picks mosaic_tpu where it imports, else reference).

The op attends and writes: it takes the packed new tokens' ``queries``, ``keys`` and ``values``
``[T, H, D]`` with the ``kv_cache [P, page, 2*Hkv, align(D, 128)]`` and returns ``(out, updated
kv_cache)`` (and the lse with ``return_lse=True``). Read in tokamax 0.0.17's
``_src/ops/batched_rpa/`` (``api.py``, ``base.py``, ``reference.py``, ``pallas_mosaic_tpu.py``):

* Packing: ``kernels.adapters.ragged_paged_attention.packed_arrays`` (JAX's ragged paged attention
  has the same ragged layout: ``cu_q_lens``, a random page permutation, K head ``h`` at ``2h`` and V at
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

The call is described once (``batched_rpa_forward`` on ``batched_layout``'s arrays,
``kernels/runtime/call_description.py``): the suite runs it, and a standalone repro script (jax,
numpy, tokamax) is rendered from it with the packing helpers embedded; it returns out, lse and the
written-back cache. The kernel off a TPU (traced under an abstract TPU, compiled for the CPU) has
no script form: its ``standalone`` refuses, saying why.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Hashable
from typing import Any, ClassVar, Literal

import numpy as np

from kernels.adapters.paged_attention import GARBAGE_STD, PAGE_SIZE
from kernels.adapters.ragged_paged_attention import (
    canonical_rows,
    layout_seed,
    packed_arrays,
    row_lengths,
    sliding_window,
    token_index,
)
from kernels.contract.base import (
    Availability,
    CacheWrite,
    Capabilities,
    ShapeConstraint,
    SubjectGrads,
    SubjectOutput,
)
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays, abstract_tpu
from kernels.runtime.call_description import (
    Built,
    CallDescription,
    Decided,
    Module,
    Name,
    Star,
    cache_key,
    standalone,
)
from kernels.runtime.jax_runtime import (
    Compiled,
    CompiledCache,
    JaxCall,
    TracedPrimitives,
    array_key,
    default_backend,
    installed_version,
    to_jax,
    to_numpy,
)
from kernels.runtime.standalone import StandaloneCall
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
    """The op's arguments for one case (NumPy), where its packed rows go back, and the cache it must
    return (``write_back``'s)."""

    queries: np.ndarray  # [T + SPARE_TOKENS, Hq, D]
    keys: np.ndarray  # [T + SPARE_TOKENS, Hkv, D]
    values: np.ndarray
    kv_cache: np.ndarray  # [P, PAGE_SIZE, 2 * Hkv, align(D, 128)]: stale garbage in the new slots
    kv_lens: np.ndarray  # int32 [B + 1] (the spare sequence slot last)
    page_indices: np.ndarray  # int32 [(B + 1) * pages_per_seq]
    cu_q_lens: np.ndarray  # int32 [B + 2]
    distribution: np.ndarray  # int32 [3]
    token_index: np.ndarray  # int32 [B, Sq]: each canonical query row's packed token, -1 for none
    expected_cache: np.ndarray  # the cache after a correct write-back

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """What the call is traced on (``batched_layout``'s): the op's arguments, then ``token_index``."""
        return (
            self.queries,
            self.keys,
            self.values,
            self.kv_cache,
            self.kv_lens,
            self.page_indices,
            self.cu_q_lens,
            self.distribution,
            self.token_index,
        )


# The packing helpers below are NumPy only and reach one another by bare name: a standalone repro
# script embeds them, so they return tuples.


def last_rows(q: np.ndarray, q_len: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """``q [B, H, Sq, D]`` with each row's last ``kept`` of its ``q_len`` query tokens moved to its
    first rows (zeros after them): the rows before see no key (bottom-right causal) and cannot be
    written into the cache. ``q`` itself where every row keeps all its tokens."""
    if np.array_equal(kept, q_len):
        return q
    moved = np.zeros_like(q)
    for row, (n, keep) in enumerate(zip(q_len, kept, strict=True)):
        moved[row, :, :keep] = q[row, :, n - keep : n]
    return moved


def new_token_slots(table: np.ndarray, q_len: np.ndarray, kv_len: np.ndarray) -> np.ndarray:
    """int [T, 2]: (page, slot) of each packed token's cache position ``kv_len - q_len + i``, pages
    from ``table [B + 1, width]``."""
    slots = []
    for row, (n, total) in enumerate(zip(q_len, kv_len, strict=True)):
        positions = np.arange(total - n, total)
        slots += [(table[row, p // PAGE_SIZE], p % PAGE_SIZE) for p in positions]
    return np.asarray(slots, np.int64).reshape(-1, 2)


def write_back(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_lengths: np.ndarray | None,
    kv_lengths: np.ndarray | None,
    seed: int,
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """A case's arrays (``[B, H, S, D]``) -> (the op's eight arguments then ``token_index``, the cache
    after a correct write-back), as the module docstring says."""
    b, _, sq, d = q.shape
    q_len, kv_len = row_lengths(q_lengths, kv_lengths, b, sq, k.shape[2])
    kept = np.minimum(q_len, kv_len)
    queries, kv_pages, kv_lens, table, cu_q_lens, _ = packed_arrays(
        last_rows(q, q_len, kept), k, v, kept, kv_len, None, seed
    )
    lanes = -(-d // LANES) * LANES
    after = np.zeros((*kv_pages.shape[:3], lanes), k.dtype)
    after[..., :d] = kv_pages
    slots = new_token_slots(table, kept, kv_len)
    rng = np.random.default_rng(seed + 7)
    spare = queries.shape[0] - len(slots)
    garbage_kv = rng.normal(0.0, GARBAGE_STD, (spare, after.shape[2], d)).astype(k.dtype)
    new_kv = np.concatenate([after[slots[:, 0], slots[:, 1], :, :d], garbage_kv])
    before = after.copy()
    before[slots[:, 0], slots[:, 1], :, :d] = rng.normal(0.0, GARBAGE_STD, (len(slots), *after.shape[2:3], d))
    arrays = (
        queries,
        np.ascontiguousarray(new_kv[:, 0::2]),
        np.ascontiguousarray(new_kv[:, 1::2]),
        before,
        kv_lens,
        table.reshape(-1),
        cu_q_lens,
        np.array([0, 0, b], np.int32),
        token_index(q_len, kept, sq),
    )
    return arrays, after


def batched_layout(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_lengths: np.ndarray | None,
    kv_lengths: np.ndarray | None,
    seed: int,
) -> tuple[np.ndarray, ...]:
    """``write_back``'s arrays: what the call is traced on."""
    return write_back(q, k, v, q_lengths, kv_lengths, seed)[0]


def pack_batched(inputs: AttentionInputs, seed: int) -> BatchedPack:
    """Canonical case -> the op's arguments and the cache it must return (module docstring)."""
    arrays, expected = write_back(inputs.q, inputs.k, inputs.v, inputs.q_lengths, inputs.kv_lengths, seed)
    return BatchedPack(*arrays, expected_cache=expected)


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


def kernel_op(probe: bool = False) -> Any:
    """The kernel's op as it runs off a TPU: its subclass whose ``supported_on`` answers True, with
    its default Config (``PROBE_CONFIG`` for the availability probe)."""
    module = importlib.import_module(f"{PACKAGE}.pallas_mosaic_tpu")
    op_class, _ = interpretable_op(module.PallasTpuBatchedRpa, None)
    return op_class(config=module.Config(**(PROBE_CONFIG if probe else {})))


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


def batched_rpa_forward(
    attention,
    selection,
    kernel_layout,
    queries,
    keys,
    values,
    kv_cache,
    kv_lens,
    page_indices,
    cu_q_lens,
    distribution,
    token_index,
    *,
    scale,
    window,
    softcap,
    causal,
    with_lse,
):
    """(out ``[B, Hq, Sq, D]``, lse ``[B, Hq, Sq]`` or None, the returned cache ``[P, page, 2*Hkv, D']``):
    ``attention`` (the public function, ``selection`` its ``implementation=``; or an op) on
    ``batched_layout``'s arrays (as JAX arrays), the cache in the kernel's layout for
    ``kernel_layout`` (``kernel_cache``, reshaped back), out and lse gathered back to canonical rows
    (``canonical_rows``: NaN on rows not packed)."""
    given = kernel_cache(kv_cache) if kernel_layout else kv_cache
    out, cache, *lse = attention(
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
        **dict(selection),
    )
    canonical_lse = canonical_rows(lse[0], token_index) if lse else None
    return canonical_rows(out, token_index), canonical_lse, cache.reshape(kv_cache.shape)


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

    def _options(self, inputs: AttentionInputs, spec: AttentionSpec) -> tuple[tuple[str, Any], ...]:
        """The op's keywords for a case: scale, sliding window, softcap, causal mask, lse."""
        return (
            ("scale", spec.resolved_scale(inputs.shape.head_dim)),
            ("window", sliding_window(spec)),
            ("softcap", None if spec.softcap is None else float(spec.softcap)),
            ("causal", spec.causal),
            ("with_lse", _with_lse(self.impl)),
        )

    def _description(self, inputs: AttentionInputs, spec: AttentionSpec, execution: str) -> CallDescription:
        """``batched_rpa_forward`` on ``batched_layout``'s arrays (its seed fixed by the shapes), bound
        to the public function with ``implementation=`` (the default's kernel layout decided where the
        call runs, by api.py's pick); for ``execution`` ``interpret`` to the kernel's op (``kernel_op``),
        which has no script form here."""
        api = _load_api()
        seed = Built("", layout_seed, (Name("k.shape"), Name("SQ")))
        lengths = (Name("q_lengths"), Name("kv_lengths"))
        layout = Built(
            "layout",
            batched_layout,
            (Name("q"), Name("k"), Name("v"), *lengths, seed),
            comment="packed, paged, shuffled; stale garbage in the new slots",
        )
        if execution == "interpret":
            attention: Any = Built("op", kernel_op, (self.probe,))
            selection: tuple = ()
        else:
            name = "batched_ragged_paged_attention"
            attention = Module(name, PUBLIC, getattr(importlib.import_module(PUBLIC), name), attribute=name)
            selection = (("implementation", _implementation(self.impl)),)
        kernel_layout: Any = _runs_kernel(api, self.impl)
        if self.impl == "default":
            picks = f"'mosaic_tpu' in importlib.import_module({PACKAGE + '.api'!r}).IMPLEMENTATIONS"
            kernel_layout = Decided(kernel_layout, picks)
        flags = Built("", absl_flags_parsed, comment="tokamax >= 0.0.10 parses sys.argv with absl otherwise")
        return CallDescription(
            batched_rpa_forward,
            (Star(layout),),
            (attention, selection, kernel_layout),
            self._options(inputs, spec),
            ("out", "lse", "kv_cache"),
            note=f"{self.description}; {self._ran_words()}",
            prepare=(flags,),
        )

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The described call with the kernel's op (``supported_on`` True, its default Config) on the
        packed arguments, for Mosaic under an abstract TPU v5e."""
        call = self._description(inputs, spec, "interpret")
        arrays = abstract_arrays(*call.traced_arguments(inputs))
        return LoweringCall.described("tpu", call, inputs, arrays, DEFAULT_DEVICE_KIND)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype and ``lse: [B, Hq, Sq]`` (NaN on rows not
        packed); ``kv_cache``: the returned cache beside the expected one. The described call on
        ``pack_batched``'s arrays (``batched_layout``'s), jitted once per shapes and options."""
        execution = _execution(self.impl)
        described = self._description(inputs, spec, execution)
        pack = pack_batched(inputs, layout_seed(inputs.k.shape, inputs.shape.q_len))
        args = tuple(to_jax(a) for a in pack.arrays)
        call = JaxCall(described.static_function(inputs), args, (False,) * len(args))
        key = cache_key(described, inputs)
        if execution == "interpret":
            out, lse, cache, ran = self._run_interpreted(key, call)
        else:
            (out, lse, cache), ran = self._cache.run(key, call, self._ran)
        written = CacheWrite(returned=cache, expected=pack.expected_cache)
        return SubjectOutput(out=out, lse=lse, ran=ran, kv_cache=written)

    def _run_interpreted(self, key: Hashable, call: JaxCall) -> tuple[Any, ...]:
        """``CompiledCache.run`` for the kernel off a TPU, which ``jit`` cannot compile as it runs
        (``_interpreted``): (out, lse, cache) as NumPy arrays, then ``ran``."""
        compiled = self._cache.get(
            (key, *array_key(*call.args)), lambda: _interpreted(call.fn, call.args, self._ran)
        )
        return (*(None if a is None else to_numpy(a) for a in compiled.fn(*call.args)), compiled.ran)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """The call as standalone script text (jax, numpy, tokamax), rendered from its description:
        the packing embedded, the public function with this ``implementation=``. The kernel off a
        TPU runs traced under an abstract TPU and compiled for this CPU, which no script writes."""
        execution = _execution(self.impl)
        if execution == "interpret":
            raise NotImplementedError(
                f"{self.name} runs off a TPU only traced under an abstract TPU in TPU interpret mode and "
                "compiled for the CPU: no standalone script of that call (on a TPU it gets one)"
            )
        return standalone(self._description(inputs, spec, execution))

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError(
            "batched_ragged_paged_attention is an inference op: it has no backward pass"
        )

    def _ran(self, primitives: TracedPrimitives) -> str:
        kernels = primitives.count("pallas_call")
        what = f"pallas_call x{kernels}" if kernels else "XLA ops"
        return f"{self.description}: {what}; {self._ran_words()}"

    @staticmethod
    def _ran_words() -> str:
        return (
            f"pages of {PAGE_SIZE} tokens in random order, new K/V written over stale garbage, finite "
            "garbage in unowned pages, slots, spare tokens and the spare sequence slot"
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
