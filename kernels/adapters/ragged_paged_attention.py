"""Ragged paged attention (``jax.experimental.pallas.ops.tpu.ragged_paged_attention``): mixed
prefill and decode over packed sequences and a paged KV cache, as TPU inference servers run it.

Translation from canonical semantics (``docs/semantics.md``), in pure functions below:

* Packing (``ragged_layout``): batch row ``b`` is one sequence with ``q_len[b]`` query tokens
  (``q_lengths``, else ``Sq``) and ``kv_len[b]`` keys (``kv_lengths``, else ``Sk``). Its valid
  query rows are concatenated into ``q: [T, Hq, D]`` with ``cu_q_lens`` their offsets; so a
  case with ``q_lengths (1, 40, 7)`` is one call holding a decode row beside two prefill rows.
  ``SPARE_TOKENS`` finite garbage tokens follow the last sequence and one spare sequence slot
  holds plausible garbage (``num_seqs`` excludes it), as a server's padded batch does.
* The KV cache (``sequence_page_table``, ``scatter_kv``): each row's ``Sk`` tokens (padding included)
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
* Query rows past ``q_len[b]`` are not in the pack: the call returns NaN there
  (``fully_masked_rows="unspecified"``; ``canonical_rows`` gathers the packed tokens back by
  ``token_index`` inside the jitted call). No lse, no backward (an inference kernel).
* Quantized K/V (``k_scale``/``v_scale``, from 0.6.0): ``kv_pages`` in an 8-bit type with one
  Python float scale for K and one for V, so a scale per tensor: the subject declares
  ``kv_storages`` ``<element>_per_tensor``. A case with such a ``kv_storage`` already holds
  ``w * step`` (``kernels/runtime/kv_storage.py``, ``step`` a power of two); the adapter quantizes K and V
  again (losslessly), scatters the weights into the pages and passes ``k_scale = step_k``,
  ``v_scale = step_v``. The kernel multiplies in float32 and rounds to q's dtype: exact, for a
  power of two times an 8-bit value. Unowned pages hold garbage weights.

The call is described once (``ragged_forward`` on ``ragged_layout``'s arrays,
``kernels/runtime/call_description.py``): the suite runs and lowers that description and a
standalone repro script is rendered from it, its packing helpers embedded. Off a TPU the script
runs the kernel in TPU interpret mode, as the suite would, so at a JAX whose interpreter cannot
follow the kernel (see below) the script fails as the availability probe does.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from kernels.adapters.paged_attention import GARBAGE_STD, PAGE_SIZE, page_table, scatter_pages
from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.contract.tunables import BlockDim, Config, Configurable, Tunable, Tunables
from kernels.hardware.lowering import DEFAULT_DEVICE_KIND, LoweringCall, abstract_arrays, abstract_tpu
from kernels.runtime.call_description import (
    NO_CONTEXT,
    Built,
    CallDescription,
    Decided,
    Module,
    Name,
    Star,
    cache_key,
    standalone,
    tpu_interpret_context,
)
from kernels.runtime.call_description import jax_call as described_call
from kernels.runtime.jax_runtime import CompiledCache, TracedPrimitives, installed_jax_versions
from kernels.runtime.kv_storage import quantize
from kernels.runtime.standalone import StandaloneCall
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


# The packing helpers below are NumPy only and reach one another by bare name: a standalone repro
# script embeds them (``kernels.runtime.call_description``), so they return tuples, not classes.


def row_lengths(
    q_lengths: np.ndarray | None, kv_lengths: np.ndarray | None, batch: int, q_len: int, kv_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(q_len [B], kv_len [B]) int32: each row's valid lengths, the tensor's ``q_len``/``kv_len``
    where none are given."""
    q = np.full(batch, q_len) if q_lengths is None else np.asarray(q_lengths)
    kv = np.full(batch, kv_len) if kv_lengths is None else np.asarray(kv_lengths)
    return q.astype(np.int32), kv.astype(np.int32)


def valid_lengths(inputs: AttentionInputs) -> tuple[np.ndarray, np.ndarray]:
    """``row_lengths`` of a case."""
    b, _, sq, _ = inputs.q.shape
    return row_lengths(inputs.q_lengths, inputs.kv_lengths, b, sq, inputs.k.shape[2])


def table_width(kv_len: int, kv_pages_per_block: int | None) -> int:
    """Pages per sequence: enough for ``kv_len`` tokens, and at least an explicit block's pages."""
    needed = max(1, math.ceil(kv_len / PAGE_SIZE))
    return needed if kv_pages_per_block is None else max(needed, kv_pages_per_block)


def sequence_page_table(seqs: int, width: int, seed: int) -> tuple[np.ndarray, int]:
    """(``page_indices [seqs + 1, width]`` int32, total pages): paged_attention's random table
    (``SPARE_PAGES`` owned by no row) plus the spare slot's row, which points at pages of other
    rows (it is never read)."""
    order, total = page_table(seqs, width, seed)
    spare = np.random.default_rng(seed + 1).integers(0, total, (1, width))
    return np.concatenate([order, spare]).astype(np.int32), total


def scatter_kv(k: np.ndarray, v: np.ndarray, table: np.ndarray, total: int, seed: int) -> np.ndarray:
    """``k, v: [B, Hkv, Sk, D]`` -> ``[total, PAGE_SIZE, 2 * Hkv, D]``: paged_attention's pages
    (``scatter_pages``: garbage in every slot no row owns) with K head ``h`` at ``2h`` and V head
    ``h`` at ``2h + 1``."""
    k_pages, v_pages = scatter_pages(k, table, total, seed), scatter_pages(v, table, total, seed + 1)
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
    (w_k, step_k), (w_v, step_v) = quantize(k, storage), quantize(v, storage)
    return w_k, w_v, (float(step_k.reshape(-1)[0]), float(step_v.reshape(-1)[0]))


def kv_scales(k: np.ndarray, v: np.ndarray, storage: str | None) -> tuple[float | None, float | None]:
    """(k_scale, v_scale) the kernel takes for ``storage`` (``stored_kv``'s): static Python floats."""
    return stored_kv(k, v, storage)[2]


def packed_arrays(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_len: np.ndarray,
    kv_len: np.ndarray,
    kv_pages_per_block: int | None,
    seed: int,
) -> tuple[np.ndarray, ...]:
    """Canonical rows (``k``, ``v``: the pages' values, weights for a quantized storage) -> the
    kernel's ragged layout (see the module docstring): (q ``[T + SPARE_TOKENS, Hq, D]``, kv_pages
    ``[P, PAGE_SIZE, 2 * Hkv, D]``, kv_lens int32 ``[B + 1]``, page_indices int32 ``[B + 1, width]``,
    cu_q_lens int32 ``[B + 2]``, num_seqs int32 ``[1]``, the spare slot excluded)."""
    b, hq, _, d = q.shape
    rng = np.random.default_rng(seed)
    tokens = [q[row, :, : q_len[row]].transpose(1, 0, 2) for row in range(b)]
    spare = rng.normal(0.0, GARBAGE_STD, (SPARE_TOKENS, hq, d)).astype(q.dtype)
    offsets = np.concatenate([[0], np.cumsum(q_len)])
    table, total = sequence_page_table(b, table_width(k.shape[2], kv_pages_per_block), seed + 1)
    return (
        np.concatenate([*tokens, spare]),
        scatter_kv(k, v, table, total, seed + 2),
        # the spare slot: a plausible sequence of one page and no query token
        np.append(kv_len, PAGE_SIZE).astype(np.int32),
        table,
        np.append(offsets, offsets[-1]).astype(np.int32),
        np.array([b], np.int32),
    )


def token_index(q_len: np.ndarray, packed_len: np.ndarray, sq: int) -> np.ndarray:
    """int32 ``[B, Sq]``: the packed token of each canonical query row, -1 where none. Row ``b``
    packs the last ``packed_len[b]`` of its ``q_len[b]`` valid rows, rows in batch order."""
    index = np.full((len(q_len), sq), -1, np.int32)
    start = 0
    for row, (n, keep) in enumerate(zip(q_len, packed_len, strict=True)):
        index[row, n - keep : n] = np.arange(start, start + keep)
        start += keep
    return index


def ragged_layout(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_lengths: np.ndarray | None,
    kv_lengths: np.ndarray | None,
    kv_pages_per_block: int | None,
    seed: int,
    storage: str | None = None,
) -> tuple[np.ndarray, ...]:
    """A case's arrays (``[B, H, S, D]``) -> ``packed_arrays``' six, K/V weights in ``storage`` (per
    tensor; scales: ``kv_scales``), then ``token_index`` (every valid row packed)."""
    q_len, kv_len = row_lengths(q_lengths, kv_lengths, q.shape[0], q.shape[2], k.shape[2])
    w_k, w_v, _ = stored_kv(k, v, storage)
    packed = packed_arrays(q, w_k, w_v, q_len, kv_len, kv_pages_per_block, seed)
    return (*packed, token_index(q_len, q_len, q.shape[2]))


def canonical_rows(packed: Any, index: Any) -> Any:
    """JAX: packed ``[T', H, ...]`` -> canonical ``[B, H, Sq, ...]``, row ``(b, s)`` the packed token
    ``index[b, s]`` (``token_index``), NaN where it is -1. A gather: the values are copied."""
    import jax.numpy as jnp

    taken = jnp.take(packed, jnp.maximum(index, 0), axis=0)  # [B, Sq, H, ...]
    kept = (index >= 0).reshape(index.shape + (1,) * (taken.ndim - 2))
    return jnp.moveaxis(jnp.where(kept, taken, jnp.asarray(jnp.nan, packed.dtype)), 2, 1)


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

    def _description(
        self, inputs: AttentionInputs, spec: AttentionSpec, lowering: bool = False
    ) -> CallDescription:
        """``ragged_forward`` bound to the kernel, on ``ragged_layout``'s arrays of the case (its seed
        fixed by the shapes), in TPU interpret mode off a TPU. The default blocks are the kernel's
        tuned ones on a TPU and its untuned fallback elsewhere (``block_sizes``), decided where the
        call runs; ``lowering``: no interpreter, the default blocks as off a TPU (the tuning table
        reads ``jax.devices()``, which an abstract device does not change)."""
        explicit = dict(self.config).get("num_kv_pages_per_block")
        block = None if explicit is None else int(explicit)
        seed = Built("", layout_seed, (Name("k.shape"), Name("SQ")))
        arrays = (Name("q"), Name("k"), Name("v"), Name("q_lengths"), Name("kv_lengths"), block, seed)
        layout = Built("layout", ragged_layout, (*arrays, spec.kv_storage), comment="packed, paged, shuffled")
        stored = (Name("k"), Name("v"), spec.kv_storage)
        # compiled in as Python floats: keyed by their values, not by K's and V's bytes
        scales = Built("scales", kv_scales, stored, comment="(k_scale, v_scale)", keyed_by_value=True)
        native = Decided(choose_execution("tpu").mode == "native", "jax.default_backend() == 'tpu'")
        bound = (
            Module("ragged_paged_attention", MODULE, _load(), attribute="ragged_paged_attention"),
            spec.resolved_scale(inputs.shape.head_dim),
            sliding_window(spec),
            spec.softcap,
            tuple(self.config),
            False if lowering else native,
            scales,
        )
        context = NO_CONTEXT if lowering else tpu_interpret_context("tpu")
        note = (
            f"{self.description}; off TPU: {TpuExecution('tpu').description}; packed sequences, pages "
            f"of {PAGE_SIZE} tokens in a random order, garbage in unowned pages, slots, spare tokens "
            "and the spare sequence slot" + (f"; {dict(self.config)}" if self.config else "")
        )
        return CallDescription(ragged_forward, (Star(layout),), bound, context=context, note=note)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The described kernel call on the same packed layout, for Mosaic, under an abstract TPU v5e."""
        call = self._description(inputs, spec, lowering=True)
        arrays = abstract_arrays(*call.traced_arguments(inputs))
        return LoweringCall.described("tpu", call, inputs, arrays, DEFAULT_DEVICE_KIND)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype (NaN on rows past q_lengths); no lse. The
        described call, jitted once per its key (``cache_key``) and the packed arrays' shapes."""
        described = self._description(inputs, spec)
        describe = _ran(choose_execution("tpu"), inputs.shape.batch)
        call = described_call(described, inputs)
        (out, _), ran = self._cache.run(cache_key(described, inputs), call, describe)
        return SubjectOutput(out=out, lse=None, ran=ran)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """The call as standalone script text, rendered from its description: natively on a TPU, in
        TPU interpret mode elsewhere (where no JAX so far runs it: the script then fails as the
        availability probe does)."""
        return standalone(self._description(inputs, spec))

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


def layout_seed(k_shape: tuple[int, ...], q_len: int) -> int:
    """The layout's seed: fixed by the shapes (K's, and the query length), so every call of a case
    sees one layout."""
    return int(np.prod(k_shape) + q_len) % (2**31)


def _load() -> Any:
    import importlib

    return importlib.import_module(MODULE).ragged_paged_attention


def _kv_arguments(kernel: Any, kv_pages: Any) -> tuple[Any, ...]:
    """The cache as the installed signature takes it: one interleaved ``kv_pages`` (>= 0.6), or
    ``k_pages, v_pages`` de-interleaved (0.5)."""
    if "kv_pages" in inspect.signature(kernel).parameters:
        return (kv_pages,)
    return kv_pages[:, :, 0::2], kv_pages[:, :, 1::2]


def ragged_forward(
    kernel: Any,
    scale: float,
    window: int | None,
    softcap: float | None,
    config: Config,
    native: bool,
    scales: tuple[float | None, float | None],
    q: Any,
    kv_pages: Any,
    kv_lens: Any,
    page_indices: Any,
    cu_q_lens: Any,
    num_seqs: Any,
    token_index: Any,
) -> tuple[Any, None]:
    """(out ``[B, Hq, Sq, D]``, no lse): the kernel on ``ragged_layout``'s arrays (as JAX arrays),
    its blocks ``block_sizes`` of ``config`` (``native``: on a TPU), ``scales`` the quantized pages'
    (k_scale, v_scale), its packed output gathered back to canonical rows (``canonical_rows``)."""
    kv_block, q_block = block_sizes(config, page_indices.shape[1], q.shape[0], native)
    extra = {} if window is None and softcap is None else {"sliding_window": window, "soft_cap": softcap}
    k_scale, v_scale = scales
    if k_scale is not None:
        extra.update(k_scale=k_scale, v_scale=v_scale)
    out = kernel(
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
    return canonical_rows(out, token_index), None


def _ran(execution: TpuExecution, sequences: int) -> Callable[[TracedPrimitives], str]:
    """The ``ran`` sentence's writer for the call's traced primitives."""
    return lambda primitives: (
        f"{pallas_ran(primitives, execution, fallback='no kernel')}; {sequences} sequences packed, pages of "
        f"{PAGE_SIZE} tokens in random order, finite garbage in unowned pages, slots, spare tokens "
        "and the spare sequence slot"
    )
