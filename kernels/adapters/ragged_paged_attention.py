"""Ragged paged attention (``jax.experimental.pallas.ops.tpu.ragged_paged_attention``): mixed
prefill and decode over packed sequences and a paged KV cache, as TPU inference servers run it.

Translation from canonical semantics (``docs/semantics.md``), in pure functions below:

* Packing (``pack``): batch row ``b`` is one sequence with ``q_len[b]`` query tokens
  (``q_lengths``, else ``Sq``) and ``kv_len[b]`` keys (``kv_lengths``, else ``Sk``). Its valid
  query rows are concatenated into ``q: [T, Hq, D]`` with ``cu_q_lens`` their offsets; so a
  case with ``q_lengths (1, 40, 7)`` is one call holding a decode row beside two prefill rows.
  ``SPARE_TOKENS`` finite garbage tokens follow the last sequence and one spare sequence slot
  holds plausible garbage (``num_seqs`` excludes it), as a server's padded batch does.
* The KV cache (``page_table``, ``scatter_kv``): each row's ``Sk`` tokens (padding included)
  go into pages of ``PAGE_SIZE`` tokens, K and V heads interleaved (``[P, page, 2*Hkv, D]``:
  K head ``h`` at ``2h``, V at ``2h + 1``), under a random page permutation; every page and
  slot no row owns holds finite garbage (``GARBAGE_STD``).
* The kernel is always causal, with each sequence's diagonal at ``kv_len - q_len``: canonical
  ``causal`` with alignment ``bottom_right_valid``. A non-causal case is expressible only with
  one query token per row (the diagonal then sees the whole valid cache).
* ``sliding_window = W`` masks ``col <= row - W`` (the kernel's ``row_ids - sliding_window >=
  col_ids``): canonical window ``(W - 1, *)`` under causal; a window without a left edge is no
  sliding window. ``soft_cap`` is ``softcap``, applied to the scaled logits (canonical order);
  ``sm_scale`` is the resolved scale.
* Query rows past ``q_len[b]`` are not in the pack: the adapter returns NaN there
  (``fully_masked_rows="unspecified"``). No lse, no backward (an inference kernel).
* Quantized K/V (``k_scale``/``v_scale``, from 0.6.0): ``kv_pages`` in an 8-bit type with one
  Python float scale for K and one for V, so a scale per tensor: the subject declares
  ``kv_storages`` ``<element>_per_tensor``. A case with such a ``kv_storage`` already holds
  ``w * step`` (``kernels/runtime/kv_storage.py``, ``step`` a power of two); the adapter quantizes K and V
  again (losslessly), scatters the weights into the pages and passes ``k_scale = step_k``,
  ``v_scale = step_v``. The kernel multiplies in float32 and rounds to q's dtype: exact, for a
  power of two times an 8-bit value. Unowned pages hold garbage weights.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, ClassVar

import numpy as np

from kernels.adapters import paged_attention as paged
from kernels.adapters.paged_attention import GARBAGE_STD, PAGE_SIZE
from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.contract.tunables import BlockDim, Config, Configurable, Tunable, Tunables
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays, abstract_tpu
from kernels.runtime import kv_storage
from kernels.runtime.jax_runtime import (
    Compiled,
    CompiledCache,
    array_key,
    installed_jax_versions,
    jit_observed,
    to_jax,
)
from kernels.runtime.tpu_interpret import (
    TpuExecution,
    choose_execution,
    pallas_ran,
    pallas_tpu_availability,
    probe_failure,
    race_detection_declared,
)
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec

MODULE = "jax.experimental.pallas.ops.tpu.ragged_paged_attention"
# The K/V storages its call takes: 8-bit pages with one Python float scale each for K and V.
KV_STORAGES = tuple(f"{element}_per_tensor" for element in ("int8", "float8_e4m3fn", "float8_e5m2"))
SPARE_TOKENS = 3  # garbage query tokens after the last sequence (a padded token batch)

# --- version compatibility: everything that differs between JAX versions --------------
# * 0.5.x: one file, ``ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices,
#   cu_q_lens, num_seqs, ...)`` with K and V in separate ``[P, page, Hkv, D]`` caches.
#   From 0.6.0 a package whose call takes one ``kv_pages [P, page, 2*Hkv, D]`` (K and V heads
#   interleaved) and adds sliding_window, soft_cap, k_scale, v_scale. ``_kv_arguments`` passes
#   either layout (read from the signature). 0.7.2 to 0.10.2 hold the same kernel (only
#   ``dtypes.bit_width`` -> ``itemsize_bits`` and ``pltpu.ANY`` -> ``pl.ANY`` differ).
# * The block sizes default through ``get_tuned_block_sizes``, which raises off a TPU (TPU
#   version < 4); off a TPU the adapter passes that function's own untuned default
#   explicitly: ``(min(pages_per_seq, 128), min(tokens, 32))``.
# * On CPU the kernel needs TPU interpret mode (DMAs, semaphores; JAX >= 0.7.0), and no release
#   seen so far runs it there: the kernel reshapes the VMEM ref a DMA filled
#   (``cur_async_copy_kv.wait().reshape(...)``), and TPU interpret mode resolves only indexer
#   transforms (``interpret ... to_range``: "'RefReshaper' object has no attribute 'indices'" at
#   0.7.2/0.8.3, "'ReshapeTransform' ..." at 0.9.2 through 0.12.0.1). The generic interpreter
#   (``interpret=True``) fails too (its store discharge gets ``TypedInt`` indices). No version
#   bound says so: ``availability()`` makes one tiny call under TPU interpret mode per process
#   (``interpreter_failure``), so a release whose interpreter runs it makes the subject available.
#   ``tests/kernels/test_ragged_paged_attention.py`` checks that verdict against a direct call.
DEFAULT_KV_PAGES_PER_BLOCK, DEFAULT_QUERIES_PER_BLOCK = 128, 32

TUNABLES = Tunables(
    (
        # Counted in pages (the API's unit, ``unit=PAGE_SIZE``; its default is capped at the
        # table's width, as the kernel's own default is). A larger value widens the page table
        # with unused pages, since the kernel requires num_kv_pages_per_block <= pages_per_seq.
        Tunable("num_kv_pages_per_block", DEFAULT_KV_PAGES_PER_BLOCK, "kv", unit=PAGE_SIZE),
        # Counted in packed query tokens (every sequence's together); any positive value.
        # It tiles the packed q [T, Hq, D] (args[5], after five scalar-prefetch operands; read at
        # 0.10.2). The kv block is copied page by page inside the kernel: no block spec shows it.
        Tunable(
            "num_queries_per_block",
            DEFAULT_QUERIES_PER_BLOCK,
            "q",
            blocks=(BlockDim("ragged_paged_attention_kernel", "args[5]", -3),),
        ),
    )
)


def _kv_heads_tile(shape: AttentionShape, spec: AttentionSpec) -> bool:
    # get_min_heads_per_blk: 2*Hkv must be 1, 2, 4, 8 or a multiple of 8 in float32 units
    # of packing; bfloat16 packs two, so Hkv in (1, 2, 4, 8) or a multiple of 8 fits both.
    return shape.kv_heads in (1, 2, 4, 8) or shape.kv_heads % 8 == 0


def _eight_bit_kv_heads_tile(shape: AttentionShape, spec: AttentionSpec) -> bool:
    # get_min_heads_per_blk with 8-bit pages (four to a 32-bit word): 2*Hkv must split into
    # words, and those words be 1, 2, 4, 8 or a multiple of 8: Hkv in (2, 4, 8, 16) or a multiple of 16.
    if spec.kv_storage is None:
        return True
    words = 2 * shape.kv_heads
    return words % 4 == 0 and (words // 4 in (1, 2, 4, 8) or (words // 4) % 8 == 0)


CONSTRAINTS = (
    ShapeConstraint(
        name="always_causal",
        reason="ragged_paged_attention has no parameter to turn its causal mask off (diagonal at "
        "each sequence's kv_len - q_len); a non-causal case is expressible only with one query "
        "token per row",
        holds=lambda shape, spec: spec.causal or shape.q_len == 1,
        basis="api",
    ),
    ShapeConstraint(
        name="head_dim_multiple_of_128",
        reason="the kernel's online softmax broadcasts its [rows, 128] running sums onto "
        "[rows, head_dim] by concatenation (broadcast_to_shape): an AssertionError unless "
        "head_dim is a multiple of 128",
        holds=lambda shape, spec: shape.head_dim % 128 == 0,
        basis="raises",
    ),
    ShapeConstraint(
        name="kv_heads_tiling",
        reason="get_min_heads_per_blk raises 'Not implemented: num_combined_kv_heads=... can not "
        "be XLA fully tiled' unless Hkv is 1, 2, 4, 8 or a multiple of 8",
        holds=_kv_heads_tile,
        basis="raises",
    ),
    ShapeConstraint(
        name="kv_heads_tiling_8bit",
        reason="with 8-bit K/V pages (a quantized kv_storage) get_min_heads_per_blk packs four "
        "heads to a word and raises 'Not implemented: num_combined_kv_heads=... can not be XLA "
        "fully tiled' unless Hkv is 2, 4, 8, 16 or a multiple of 16",
        holds=_eight_bit_kv_heads_tile,
        basis="raises",
        exceptions=("ValueError",),
    ),
)


@dataclasses.dataclass(frozen=True, eq=False)
class Packed:
    """The kernel's ragged layout of one case (NumPy). ``rows[b]``: the packed token slice of
    batch row ``b``; ``num_seqs`` excludes the spare slot."""

    q: np.ndarray  # [T + SPARE_TOKENS, Hq, D]
    kv_pages: np.ndarray  # [P, PAGE_SIZE, 2 * Hkv, D]
    kv_lens: np.ndarray  # int32 [B + 1]
    page_indices: np.ndarray  # int32 [B + 1, width]
    cu_q_lens: np.ndarray  # int32 [B + 2]
    num_seqs: np.ndarray  # int32 [1]
    rows: tuple[slice, ...]
    scales: tuple[float | None, float | None] = (None, None)  # (k_scale, v_scale) of quantized pages

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.q, self.kv_pages, self.kv_lens, self.page_indices, self.cu_q_lens, self.num_seqs)


def valid_lengths(inputs: AttentionInputs) -> tuple[np.ndarray, np.ndarray]:
    """(q_len [B], kv_len [B]) int: each row's valid lengths, the tensor's where none are given."""
    b, _, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    q_len = np.full(b, sq) if inputs.q_lengths is None else np.asarray(inputs.q_lengths)
    kv_len = np.full(b, sk) if inputs.kv_lengths is None else np.asarray(inputs.kv_lengths)
    return q_len.astype(np.int32), kv_len.astype(np.int32)


def table_width(kv_len: int, kv_pages_per_block: int | None) -> int:
    """Pages per sequence: enough for ``kv_len`` tokens, and at least an explicit block's pages."""
    needed = max(1, math.ceil(kv_len / PAGE_SIZE))
    return needed if kv_pages_per_block is None else max(needed, kv_pages_per_block)


def page_table(seqs: int, width: int, seed: int) -> tuple[np.ndarray, int]:
    """(``page_indices [seqs + 1, width]`` int32, total pages): paged_attention's random table
    (``SPARE_PAGES`` owned by no row) plus the spare slot's row, which points at pages of other
    rows (it is never read)."""
    order, total = paged.page_table(seqs, width, seed)
    spare = np.random.default_rng(seed + 1).integers(0, total, (1, width))
    return np.concatenate([order, spare]).astype(np.int32), total


def scatter_kv(k: np.ndarray, v: np.ndarray, table: np.ndarray, total: int, seed: int) -> np.ndarray:
    """``k, v: [B, Hkv, Sk, D]`` -> ``[total, PAGE_SIZE, 2 * Hkv, D]``: paged_attention's pages
    (``scatter_pages``: garbage in every slot no row owns) with K head ``h`` at ``2h`` and V head
    ``h`` at ``2h + 1``."""
    k_pages, v_pages = (
        paged.scatter_pages(k, table, total, seed),
        paged.scatter_pages(v, table, total, seed + 1),
    )
    hkv, _, page, d = k_pages.shape
    pages = np.empty((total, page, 2 * hkv, d), k.dtype)
    pages[:, :, 0::2] = np.moveaxis(k_pages, 0, 2)
    pages[:, :, 1::2] = np.moveaxis(v_pages, 0, 2)
    return pages


def stored_kv(k: np.ndarray, v: np.ndarray, storage: str | None) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(K weights, V weights, (k_scale, v_scale)) for a per-tensor ``storage``: ``k == w_k * k_scale``
    exactly (``kernels/runtime/kv_storage.py``); ``k, v, (None, None)`` for None."""
    if storage is None:
        return k, v, (None, None)
    (w_k, step_k), (w_v, step_v) = kv_storage.quantize(k, storage), kv_storage.quantize(v, storage)
    return w_k, w_v, (float(step_k.reshape(-1)[0]), float(step_v.reshape(-1)[0]))


def pack(
    inputs: AttentionInputs, kv_pages_per_block: int | None, seed: int, storage: str | None = None
) -> Packed:
    """Canonical rows -> the kernel's ragged layout (see the module docstring); K/V weights in
    ``storage`` (per tensor), their scales in ``Packed.scales``."""
    b, hq, _, d = inputs.q.shape
    q_len, kv_len = valid_lengths(inputs)
    rng = np.random.default_rng(seed)
    tokens = [inputs.q[row, :, : q_len[row]].transpose(1, 0, 2) for row in range(b)]
    spare = rng.normal(0.0, GARBAGE_STD, (SPARE_TOKENS, hq, d)).astype(inputs.q.dtype)
    q = np.concatenate([*tokens, spare])
    offsets = np.concatenate([[0], np.cumsum(q_len)])
    width = table_width(inputs.k.shape[2], kv_pages_per_block)
    table, total = page_table(b, width, seed + 1)
    k, v, scales = stored_kv(inputs.k, inputs.v, storage)
    return Packed(
        q=q,
        kv_pages=scatter_kv(k, v, table, total, seed + 2),
        # the spare slot: a plausible sequence of one page and no query token
        kv_lens=np.append(kv_len, PAGE_SIZE).astype(np.int32),
        page_indices=table,
        cu_q_lens=np.append(offsets, offsets[-1]).astype(np.int32),
        num_seqs=np.array([b], np.int32),
        rows=tuple(slice(int(offsets[r]), int(offsets[r + 1])) for r in range(b)),
        scales=scales,
    )


def unpack(out: np.ndarray, packed: Packed, like: np.ndarray) -> np.ndarray:
    """Kernel ``out [T', Hq, D]`` -> canonical ``[B, Hq, Sq, D]``; rows not packed are NaN."""
    canonical = np.full(like.shape, np.nan, dtype=out.dtype)
    for row, rows in enumerate(packed.rows):
        canonical[row, :, : rows.stop - rows.start] = out[rows].transpose(1, 0, 2)
    return canonical


def sliding_window(spec: AttentionSpec) -> int | None:
    """The kernel's ``sliding_window`` for a canonical window: it keeps ``col > row - W``, the
    canonical left edge ``W - 1`` (inclusive); the right edge is the causal diagonal's."""
    if spec.window is None or spec.window[0] is None:
        return None
    return spec.window[0] + 1


def block_sizes(config: Config, width: int, tokens: int, native: bool) -> tuple[int | None, int | None]:
    """(num_kv_pages_per_block, num_queries_per_block) to pass: a config's values; for the default,
    None on a TPU (the kernel's tuned table) and the table's own fallback elsewhere."""
    given = dict(config)
    kv = given.get("num_kv_pages_per_block")
    q = given.get("num_queries_per_block")
    if native and kv is None and q is None:
        return None, None
    return (
        int(kv) if kv is not None else min(width, DEFAULT_KV_PAGES_PER_BLOCK),
        int(q) if q is not None else min(tokens, DEFAULT_QUERIES_PER_BLOCK),
    )


@dataclasses.dataclass(frozen=True, eq=False)
class RaggedPagedAttentionAdapter(Configurable):
    """Ragged paged attention at the kernel's default blocks or a config's. Canonical layout in and out."""

    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {}
    config: Config = ()
    name: str = "ragged_paged_attention"
    description: str = (
        "Pallas TPU ragged paged attention (jax.experimental.pallas.ops.tpu.ragged_paged_attention)"
    )
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def availability(self) -> Availability:
        """Native on a TPU; elsewhere available only if TPU interpret mode runs the kernel, as
        observed once per process (``interpreter_failure``). Unavailable, it still lowers."""
        found = pallas_tpu_availability("tpu", MODULE, lambda execution: _load(), fix=NEEDS_A_TPU)
        if found.available and found.execution == "interpret":
            failure = interpreter_failure()
            if failure is not None:
                found = Availability(
                    False,
                    f"{NEEDS_A_TPU}: a probe call of the kernel under Pallas TPU interpret mode failed "
                    f"on this JAX: {failure}",
                    installed_jax_versions(),
                )
        return found if found.available else dataclasses.replace(found, lowerable=_lowerable())

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            race_detection=race_detection_declared(choose_execution("tpu")),
            dtypes=("float32", "bfloat16"),
            causal_alignments=("bottom_right_valid",),
            window=True,
            lengths=True,
            gqa=True,
            softcap=True,
            fully_masked_rows="unspecified",
            constraints=CONSTRAINTS,
            tunables=TUNABLES,
            lowers_for="tpu",
            kv_storages=KV_STORAGES if _takes_kv_scales() else (),
        )

    def _packed(self, inputs: AttentionInputs, spec: AttentionSpec, native: bool) -> tuple[Packed, tuple]:
        """The packed arrays and the kernel options of a case (``_call``'s)."""
        explicit = dict(self.config).get("num_kv_pages_per_block")
        packed = pack(
            inputs, None if explicit is None else int(explicit), layout_seed(inputs), spec.kv_storage
        )
        width, tokens = packed.page_indices.shape[1], packed.q.shape[0]  # the kernel's max_num_batched_tokens
        blocks = block_sizes(self.config, width, tokens, native)
        options = (spec.resolved_scale(inputs.q.shape[-1]), sliding_window(spec), spec.softcap, blocks)
        return packed, (*options, packed.scales)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The kernel call on the same packed layout, for Mosaic, under an abstract TPU v5e. The
        default blocks are passed as off a TPU (the tuning table reads ``jax.devices()``, which an
        abstract device does not change)."""
        packed, options = self._packed(inputs, spec, native=False)
        return LoweringCall("tpu", _call(options), abstract_arrays(*packed.arrays), DEFAULT_DEVICE_KIND)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype (NaN on rows past q_lengths); no lse."""
        execution = choose_execution("tpu")
        packed, options = self._packed(inputs, spec, execution.mode == "native")
        key = (execution.mode, array_key(*packed.arrays), options)
        with execution.context():
            args = tuple(to_jax(a) for a in packed.arrays)
            compiled = self._cache.get(key, lambda: _build(execution, options, args))
            out = np.asarray(compiled.fn(*args))
        return SubjectOutput(out=unpack(out, packed, inputs.q), lse=None, ran=compiled.ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("ragged_paged_attention is an inference kernel: it has no backward pass")


NEEDS_A_TPU = "ragged_paged_attention needs a TPU here"


def probe_case() -> tuple[AttentionInputs, AttentionSpec]:
    """The smallest case the kernel takes: one decode token over one page, D=128 (its tiling)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 1, 128)).astype(np.float32) for _ in range(3))
    return AttentionInputs(q=q, k=k, v=v), AttentionSpec(causal=True, alignment="bottom_right_valid")


@functools.cache
def interpreter_failure() -> str | None:
    """Why TPU interpret mode cannot run the kernel on this JAX, in one line, or None when it can:
    observed by the adapter's own call on ``probe_case`` (a few seconds, hence once per process)."""
    inputs, spec = probe_case()
    return probe_failure(lambda: RaggedPagedAttentionAdapter().forward(inputs, spec))


def _lowerable() -> bool:
    """Whether the kernel can at least be lowered for a TPU here (it imports, and this JAX has the
    abstract devices its tuning table needs): then lowers, vmem and observable still run."""
    try:
        _load()
        with abstract_tpu(DEFAULT_DEVICE_KIND):
            return True
    except Exception:  # noqa: BLE001 - not lowerable: the availability reason stands alone
        return False


def _takes_kv_scales() -> bool:
    """Whether the installed kernel takes ``k_scale``/``v_scale`` (0.6.0 on); False without JAX."""
    try:
        return "k_scale" in inspect.signature(_load()).parameters
    except Exception:  # noqa: BLE001 - not importable: availability says why; declare nothing
        return False


def layout_seed(inputs: AttentionInputs) -> int:
    """The layout's seed: fixed by the shapes, so every call of a case sees one layout."""
    return int(np.prod(inputs.k.shape) + inputs.q.shape[2]) % (2**31)


def _load() -> Any:
    import importlib

    return importlib.import_module(MODULE).ragged_paged_attention


def _kv_arguments(kernel: Any, kv_pages: Any) -> tuple[Any, ...]:
    """The cache as the installed signature takes it: one interleaved ``kv_pages`` (>= 0.6), or
    ``k_pages, v_pages`` de-interleaved (0.5)."""
    if "kv_pages" in inspect.signature(kernel).parameters:
        return (kv_pages,)
    return kv_pages[:, :, 0::2], kv_pages[:, :, 1::2]


def _call(options: tuple) -> Any:
    """The kernel's call on ``Packed.arrays`` (as JAX arrays) with ``options``
    (scale, sliding window, softcap, (kv pages per block, queries per block))."""
    kernel = _load()
    scale, window, softcap, (kv_block, q_block), (k_scale, v_scale) = options
    extra = {} if window is None and softcap is None else {"sliding_window": window, "soft_cap": softcap}
    if k_scale is not None:
        extra.update(k_scale=k_scale, v_scale=v_scale)

    def fn(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
        return kernel(
            q,
            *_kv_arguments(kernel, kv_pages),
            kv_lens,
            page_indices,
            cu_q_lens,
            num_seqs,
            sm_scale=scale,
            num_kv_pages_per_block=kv_block,
            num_queries_per_block=q_block,
            **extra,
        )

    return fn


def _build(execution: TpuExecution, options: tuple, args: tuple) -> Compiled:

    fn = _call(options)
    return jit_observed(
        fn,
        args,
        lambda primitives: (
            f"{pallas_ran(primitives, execution, fallback='no kernel')}; "
            f"{len(args[4]) - 2} sequences packed, pages of {PAGE_SIZE} tokens in random order, "
            "finite garbage in unowned pages, slots, spare tokens and the spare sequence slot"
        ),
    )
