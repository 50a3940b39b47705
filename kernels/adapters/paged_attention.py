"""Paged attention (``jax.experimental.pallas.ops.tpu.paged_attention``): decode over a paged
KV cache, TPU, run on CPU through Pallas TPU interpret mode.

Translation from canonical semantics (``docs/semantics.md``):

* Decode: one query token per sequence. Canonical ``q: [B, Hq, 1, D]`` becomes the kernel's
  ``q: [B, Hq, D]``; ``Sq > 1`` cannot be expressed (a declared ``api`` constraint).
* The kernel applies no softmax scale: we pass ``q * scale``, computed in float32 and rounded
  once to the subject dtype, as a user would (the same as splash).
* The KV cache: canonical ``k, v: [B, Hkv, Sk, D]`` are cut into pages of ``PAGE_SIZE`` tokens
  and scattered into ``k_pages, v_pages: [Hkv, P, PAGE_SIZE, D]`` under a random page
  permutation (``page_table``), so the page table is not monotone and rows share no page.
  Every page and slot no sequence owns holds finite garbage (``GARBAGE_STD``), which a correct
  kernel never reads. Each row's table is padded with unused pages up to a multiple of
  ``pages_per_compute_block`` (the kernel requires that of the table's width).
* ``kv_lengths`` map to ``lengths`` (``Sk`` where a case has none). The kernel has no query
  lengths, causal mask, window, segments, bias, lse or backward.
* Softcap maps to ``attn_logits_soft_cap``, applied to the scaled logits, as canonical.
* A row with kv length 0 sees no key; the kernel skips it and leaves its output unwritten
  (``fully_masked_rows="unspecified"``).
* int8 pages: the pages hold int8 weights and a scale per token (``QuantizedTensor``); the
  kernel dequantises ``w * scale / 127.5``. The call takes them case by case: the subject
  declares ``kv_storages=("int8",)`` and a case with ``kv_storage="int8"`` (``spec.kv_storage``)
  gets them; ``[kv=int8]`` fixes it for every case (``kv_storage="int8"``). Such a case's K/V
  are already on the int8 grid of ``kernels.runtime.kv_storage`` (``w * step``, ``step`` a power of
  two) when the reference sees them; the adapter quantises them again, losslessly, and passes
  ``scale = 127.5 * step``, which the kernel turns back into exactly those values.
* ``megacore_mode`` (``none``, ``kv_head``, ``batch``) splits the grid over a chip's two
  TensorCores. On one core the kernel waits forever on a DMA the other core's half issues,
  so it runs only with two: TPU interpret mode simulates two cores for it; natively it is
  declared only on the megacore chips (TPU v4, v5p).

Found by this suite: without quantisation the kernel still "dequantizes" every K/V page to
bfloat16 (``MultiPageAsyncCopyDescriptor._maybe_dequantize``'s default dtype), so float32
caches lose 16 mantissa bits. The ledger tracks it (``kernels/known_issues.toml``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable
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
from kernels.contract.tunables import Config, Configurable, Tunable, Tunables
from kernels.hardware.lowering import LoweringCall, abstract_arrays
from kernels.runtime.call_description import (
    NO_CONTEXT,
    Built,
    CallDescription,
    Module,
    Name,
    Star,
    cache_key,
    standalone,
    tpu_interpret_context,
)
from kernels.runtime.call_description import jax_call as described_call
from kernels.runtime.jax_runtime import CompiledCache, JaxCall, TracedPrimitives
from kernels.runtime.kv_storage import int8_quantize
from kernels.runtime.standalone import StandaloneCall
from kernels.runtime.tpu_interpret import (
    TPU_INTERPRET_NO_VMAP,
    TpuExecution,
    choose_execution,
    pallas_ran,
    pallas_tpu_availability,
    race_detection_declared,
)
from reference.spec import AttentionInputs, AttentionSpec

MODULE = "jax.experimental.pallas.ops.tpu.paged_attention"
KV_FORMS = ("float", "int8")  # pages in the case dtype, or int8 with a scale per token
INT8_SCALE_DIVISOR = 127.5  # the kernel's dequantisation: w * scale / 127.5 (quantization_utils)
MEGACORE_MODES = ("none", "kv_head", "batch")  # "none" is the API's None
MEGACORE_CHIPS = ("TPU v4", "TPU v5")  # device kinds with two TensorCores per chip (v5p is "TPU v5")
PAGE_SIZE = 16  # tokens per page: a serving engine's choice, fixed here and named in "ran"
SPARE_PAGES = 3  # pages no sequence owns: garbage the kernel must not read
GARBAGE_STD = 4.0  # finite garbage in unowned pages and slots, larger than the data (std ~1)

# --- version compatibility: everything that differs between JAX versions --------------
# * The module and its signature (q, k_pages, v_pages, lengths, page_indices, *, mask_value,
#   attn_logits_soft_cap, pages_per_compute_block, megacore_mode, inline_seq_dim) are the
#   same from 0.4.35 to 0.10.2 (read in each installed version).
# * It issues DMAs and waits on semaphores, which only TPU interpret mode models on CPU:
#   from JAX 0.7.0 (kernels/runtime/tpu_interpret.py); before that the subject is unavailable.
# * pages_per_compute_block has no default in any version; the table width must be a
#   multiple of it (ValueError), which the adapter guarantees by padding the table.
# * megacore_mode ("kv_head" needs an even Hkv, "batch" an even B: ValueError otherwise) and
#   QuantizedTensor pages are in every version. TPU interpret mode simulates the second core
#   under a field name that changed per release (kernels/runtime/tpu_interpret.py, TpuExecution.context).


def tunables(megacore: bool) -> Tunables:
    """The declaration; ``megacore``: the chip (or the simulation) has two TensorCores."""
    return Tunables(
        (
            # Counted in pages (the API's unit, ``unit=PAGE_SIZE``): smallest 1; a value past
            # the sequence's pages makes one compute block cover the whole (padded) table.
            Tunable("pages_per_compute_block", 4, "kv", power_of_two=True, unit=PAGE_SIZE),
            Tunable("megacore_mode", "none", "choice", choices=MEGACORE_MODES if megacore else ("none",)),
        )
    )


TUNABLES = tunables(megacore=True)

CONSTRAINTS = (
    ShapeConstraint(
        name="head_dim_multiple_of_128",
        reason="lowered for TPU, the kernel's [B, Hq, 1, 1]-shaped softmax-statistics outputs get "
        "blocks whose last dimension is head_dim: only a multiple of 128 lowers (Mosaic raises "
        "ValueError: 'the last two dimensions of your block shape are divisible by 8 and 128'); "
        "TPU interpret mode runs any head_dim",
        holds=lambda shape, spec: shape.head_dim % 128 == 0,
        basis="raises",
        stage="lowering",
    ),
    ShapeConstraint(
        name="decode_one_query_token",
        reason="paged_attention decodes one query token per sequence (q is [B, Hq, D]): Sq > 1 "
        "cannot be expressed",
        holds=lambda shape, spec: shape.q_len == 1,
        basis="api",
    ),
    ShapeConstraint(
        name="megacore_kv_head_even_kv_heads",
        reason="megacore_mode='kv_head' splits the KV heads over two cores: Hkv must be even (ValueError)",
        holds=lambda shape, spec, blocks: blocks.get("megacore_mode") != "kv_head" or shape.kv_heads % 2 == 0,
        basis="raises",
        sees_config=True,
    ),
    ShapeConstraint(
        name="megacore_batch_even_batch",
        reason="megacore_mode='batch' splits the batch over two cores: B must be even (ValueError)",
        holds=lambda shape, spec, blocks: blocks.get("megacore_mode") != "batch" or shape.batch % 2 == 0,
        basis="raises",
        sees_config=True,
    ),
)


def pages_per_sequence(kv_len: int, pages_per_compute_block: int) -> int:
    """The page table's width: enough pages for ``kv_len``, padded to a multiple of the compute block."""
    needed = max(1, math.ceil(kv_len / PAGE_SIZE))
    return math.ceil(needed / pages_per_compute_block) * pages_per_compute_block


def page_table(batch: int, width: int, seed: int) -> tuple[np.ndarray, int]:
    """(``page_indices [B, width]`` int32, total pages): a random permutation of the pages, so
    consecutive pages of a row are not neighbours and ``SPARE_PAGES`` pages belong to no row."""
    total = batch * width + SPARE_PAGES
    order = np.random.default_rng(seed).permutation(total)[: batch * width]
    return order.reshape(batch, width).astype(np.int32), total


def scatter_pages(x: np.ndarray, table: np.ndarray, total: int, seed: int) -> np.ndarray:
    """``x: [B, Hkv, Sk, D]`` -> pages ``[Hkv, total, PAGE_SIZE, D]``: token ``t`` of row ``b`` at
    page ``table[b, t // PAGE_SIZE]``, slot ``t % PAGE_SIZE``; every other slot finite garbage."""
    b, hkv, sk, d = x.shape
    garbage = np.random.default_rng(seed).normal(0.0, GARBAGE_STD, (hkv, total, PAGE_SIZE, d))
    pages = garbage.astype(x.dtype)
    for row in range(b):
        for t0 in range(0, sk, PAGE_SIZE):
            chunk = x[row, :, t0 : t0 + PAGE_SIZE]
            pages[:, table[row, t0 // PAGE_SIZE], : chunk.shape[1]] = chunk
    return pages


def int8_pages(x: np.ndarray, table: np.ndarray, total: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``x: [B, Hkv, Sk, D]`` on the int8 grid (``kernels.runtime.kv_storage``) -> (int8 weight pages
    ``[Hkv, total, PAGE_SIZE, D]``, scale pages ``[Hkv, total, PAGE_SIZE, 1]`` in ``x``'s dtype)
    with ``x == w * scale / 127.5`` exactly; garbage in unowned slots of both. ValueError when
    ``x`` is off the grid: the reference would then see values the kernel never gets."""
    w, step = int8_quantize(x)
    back = (w.astype(np.float64) * step).astype(x.dtype)
    if not np.array_equal(back, x, equal_nan=True):
        raise ValueError(
            "K/V are not on the int8 grid: build the case with kv_storage='int8' (the subject "
            "declares it), so the reference sees the values the int8 pages hold"
        )
    scales = (step * INT8_SCALE_DIVISOR).astype(x.dtype)  # 127.5 * 2^e: exact in every dtype
    return scatter_pages(w, table, total, seed), scatter_pages(scales, table, total, seed + 1)


@dataclasses.dataclass(frozen=True, eq=False)
class PagedAttentionAdapter(Configurable):
    """Paged attention at ``pages_per_compute_block`` 4 or a config's. Canonical layout in and out.

    kv: ``"float"`` (pages in the case dtype) or ``"int8"`` (int8 pages with a scale per token).
    """

    # What ``--impl "paged_attention[kv=int8]"`` may set (kernels/contract/subject_spec.py).
    OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"kv": KV_FORMS}
    kv: str = "float"
    config: Config = ()
    name: str = "paged_attention"
    description: str = "Pallas TPU paged attention (jax.experimental.pallas.ops.tpu.paged_attention)"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def availability(self) -> Availability:
        fix = "off a TPU only it runs paged_attention's DMAs and semaphores: use JAX >= 0.7.0, or a TPU"
        return pallas_tpu_availability("tpu", MODULE, lambda execution: _load(), fix)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            race_detection=race_detection_declared(choose_execution("tpu")),
            dtypes=("float32", "bfloat16"),
            lengths=True,
            q_lengths=False,
            gqa=True,
            softcap=True,
            fully_masked_rows="unspecified",
            constraints=compiled_where_run(CONSTRAINTS, choose_execution("tpu").mode == "native"),
            tunables=tunables(_two_cores(choose_execution("tpu"))),
            kv_storage=None if self.kv == "float" else self.kv,
            # QuantizedTensor pages: int8 weights, one scale per token (kernels/runtime/kv_storage.py "int8").
            kv_storages=("int8",),
            lowers_for="tpu",
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, 1, D]`` in the input dtype; no lse. The call ``jax_call`` states, jitted once
        per its description's key (``cache_key``: scale, softcap, pages and megacore mode, execution)."""
        _, megacore = self._settings()
        key, call = self._call(inputs, spec)
        (out, _), ran = self._cache.run(key, call, _ran(choose_execution("tpu"), megacore, self._kv(spec)))
        return SubjectOutput(out=out, lse=None, ran=ran)

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward call as ``forward`` runs it (interpreted off a TPU): ``paged_forward`` on q and
        the case's page layout, as JAX arrays. q, the lengths and the page table are per request
        (batch-first); the pages are one pool that every request's table indexes, shared (not
        batched): a vmapped or sharded batch keeps the pool whole, as a serving engine does. The
        kernel has no backward (NotImplementedError for ``dout``)."""
        if dout is not None:
            raise NotImplementedError("paged_attention is an inference kernel: it has no backward pass")
        return self._call(inputs, spec)[1]

    def _call(self, inputs: AttentionInputs, spec: AttentionSpec) -> tuple[Hashable, JaxCall]:
        """``jax_call``'s call and its compile-cache key, both from the description (the pages' form
        and layout, the config's block and megacore mode, the interpreter's context are in it)."""
        described = self._description(inputs, spec)
        pages = 4 if self._kv(spec) == "int8" else 2  # k and v pages, with their scales for int8
        batched = (True, *(False,) * pages, True, True)  # q, the pages, lengths, page table
        no_vmap = TPU_INTERPRET_NO_VMAP if choose_execution("tpu").mode == "tpu" else ""
        return cache_key(described, inputs), described_call(described, inputs, None, batched, no_vmap)

    def _description(
        self, inputs: AttentionInputs, spec: AttentionSpec, lowering: bool = False
    ) -> CallDescription:
        """``paged_forward`` on q and the case's pages (``paged_layout``: a random page order, garbage in
        unowned slots, int8 pages where the case stores K/V so), in TPU interpret mode off a TPU
        (two simulated TensorCores for a megacore mode; no interpreter for ``lowering``)."""
        block, megacore = self._settings()
        kv = self._kv(spec)
        seed = Built("", layout_seed, (Name("k.shape"),))
        layout = Built("layout", paged_layout, (Name("k"), Name("v"), Name("kv_lengths"), block, kv, seed))
        kernel = Module("paged_attention", MODULE, _load(), attribute="paged_attention")
        quantized = Module(
            "QuantizedTensor",
            MODULE + ".quantization_utils",
            _quantized_tensor(),
            attribute="QuantizedTensor",
        )
        scale = spec.resolved_scale(inputs.shape.head_dim)
        bound = (kernel, quantized, scale, spec.softcap, block, megacore, kv)
        context = NO_CONTEXT if lowering else tpu_interpret_context("tpu", cores=_cores(megacore))
        note = (
            f"{self.description}; off TPU: {TpuExecution('tpu').description}; pages of {PAGE_SIZE} tokens "
            "in a random order, garbage in unowned slots" + (f"; {dict(self.config)}" if self.config else "")
        )
        return CallDescription(paged_forward, (Name("q"), Star(layout)), bound, context=context, note=note)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        """The kernel call on the same paged layout, for Mosaic (a forward-only kernel)."""
        call = self._description(inputs, spec, lowering=True)
        return LoweringCall.described("tpu", call, inputs, abstract_arrays(*call.traced_arguments(inputs)))

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """The call as standalone script text, rendered from its description."""
        return standalone(self._description(inputs, spec))

    def _kv(self, spec: AttentionSpec) -> str:
        """The pages' form for a case: int8 where the case stores K/V so (or the subject fixes it)."""
        return "int8" if spec.kv_storage == "int8" or self.kv == "int8" else "float"

    def _settings(self) -> tuple[int, str]:
        """(pages_per_compute_block, megacore_mode) of this config."""
        block = int(TUNABLES.value(self.config, "pages_per_compute_block"))
        return block, str(TUNABLES.value(self.config, "megacore_mode"))

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("paged_attention is an inference kernel: it has no backward pass")


def paged_layout(
    k: np.ndarray, v: np.ndarray, kv_lengths: np.ndarray | None, block: int, kv: str, seed: int
) -> tuple[np.ndarray, ...]:
    """Canonical ``k, v: [B, Hkv, Sk, D]`` -> the kernel's cache arguments: (k pages, v pages,
    lengths, page table) for ``kv="float"``; (k weights, k scales, v weights, v scales, lengths,
    page table) for ``"int8"``. ``kv_lengths`` None: every row is ``Sk`` long."""
    b, _, sk, _ = k.shape
    table, total = page_table(b, pages_per_sequence(sk, block), seed)
    if kv == "int8":
        k_pages, k_scales = int8_pages(k, table, total, seed + 1)
        v_pages, v_scales = int8_pages(v, table, total, seed + 3)
        pages = (k_pages, k_scales, v_pages, v_scales)
    else:
        pages = (scatter_pages(k, table, total, seed + 1), scatter_pages(v, table, total, seed + 2))
    lengths = np.full(b, sk, np.int32) if kv_lengths is None else kv_lengths.astype(np.int32)
    return (*pages, lengths, table)


def layout_seed(k_shape: tuple[int, ...]) -> int:
    """The page permutation's seed: fixed by the shapes, so every call of a case sees one layout."""
    return int(np.prod(k_shape)) % (2**31)


def paged_forward(
    paged_attention: Any,
    quantized_tensor: Any,
    scale: float,
    softcap: float | None,
    block: int,
    megacore: str,
    kv: str,
    q: Any,
    *layout: Any,
) -> tuple[Any, None]:
    """(out ``[B, Hq, 1, D]``, no lse): the kernel's call on the decode step's one query row of
    ``q: [B, Hq, 1, D]`` and ``paged_layout``'s arrays (as JAX arrays), ``q`` pre-scaled in float32
    and rounded once to its dtype (the kernel applies no scale)."""
    import jax.numpy as jnp

    q = q[:, :, 0, :]  # [B, Hq, D], as the kernel takes it
    *pages, lengths, table = layout
    if kv == "int8":
        k_w, k_s, v_w, v_s = pages
        k_pages, v_pages = quantized_tensor(weight=k_w, scales=k_s), quantized_tensor(weight=v_w, scales=v_s)
    else:
        k_pages, v_pages = pages
    q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)
    out = paged_attention(
        q,
        k_pages,
        v_pages,
        lengths,
        table,
        attn_logits_soft_cap=softcap,
        pages_per_compute_block=block,
        megacore_mode=None if megacore == "none" else megacore,
    )
    return out[:, :, None, :], None


def _cores(megacore: str) -> int:
    """Simulated TensorCores: on one, a megacore mode waits forever on the other core's DMA."""
    return 1 if megacore == "none" else 2


def _two_cores(execution: TpuExecution) -> bool:
    """Whether megacore modes can run: TPU interpret mode simulates two cores; natively, a megacore chip."""
    if execution.mode != "native":
        return True
    import jax

    return jax.devices()[0].device_kind in MEGACORE_CHIPS


def _load() -> Any:
    import importlib

    return importlib.import_module(MODULE).paged_attention


def _quantized_tensor() -> Any:
    import importlib

    return importlib.import_module(MODULE + ".quantization_utils").QuantizedTensor


def _ran(execution: TpuExecution, megacore: str, kv: str) -> Callable[[TracedPrimitives], str]:
    """The ``ran`` sentence's writer for the call's traced primitives."""
    cores = "" if megacore == "none" else f", megacore {megacore} on 2 cores"
    int8 = " (int8, a scale per token)" if kv == "int8" else ""
    return lambda primitives: (
        f"{pallas_ran(primitives, execution, fallback='no kernel')}; pages of "
        f"{PAGE_SIZE} tokens{int8}, random page order, garbage in unowned slots{cores}"
    )
