"""Paged decode in plain JAX, correct and with the paging bugs serving kernels have.

``PagedDecode`` lays K/V out exactly as the paged_attention adapter does (``page_table``,
``scatter_pages``: random page order, garbage in every page and slot no row owns), then reads
them back through the page table and attends over each row's ``kv_len`` keys. It declares
what paged_attention declares (one query token, kv lengths, GQA, softcap, its compute-block
tunable), so the suite runs it on the same decode cases. The mutants break only the paging:

* ``PageOffByOne``: logical page ``j`` of a row is read from ``table[b, j + 1]``: the next page
  of the row, and past its last page one it does not own (garbage).
* ``DropsLastPartialPage``: the keys of a row's last, partly filled page are never read
  (lengths that end on a page edge come out right).
* ``OneTokenRowEmpty``: a row of one key is taken for an empty one (a ``length <= 1`` "nothing to
  attend" fast path that should read ``length == 0``): a fresh decode step sees no key.

``Int8PagedDecode`` stores the pages as paged_attention[kv=int8] does (``int8_pages``: int8
weights, a scale per token) and declares ``kv_storage="int8"``; it dequantises
``w * scale / 127.5`` as the kernel does. Its mutant:

* ``IgnoresDequantScale``: the int8 weights are used as they are, the scale never applied.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from kernels.adapters.paged_attention import (
    CONSTRAINTS,
    INT8_SCALE_DIVISOR,
    PAGE_SIZE,
    TUNABLES,
    int8_pages,
    page_table,
    pages_per_sequence,
    scatter_pages,
    tunables,
)
from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.contract.tunables import Config
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core

CAPS = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    lengths=True,
    q_lengths=False,
    gqa=True,
    softcap=True,
    fully_masked_rows="unspecified",
    # The paging's declaration without megacore (a split over cores this plain-JAX decode has
    # not, nor the ValueError it raises for an odd B or Hkv).
    constraints=tuple(c for c in CONSTRAINTS if not c.raises),
    tunables=tunables(megacore=False),
)


INT8_CAPS = dataclasses.replace(CAPS, kv_storage="int8")


@functools.partial(jax.jit, static_argnames=("scale", "softcap", "shift"))
def _decode(q, k_pages, v_pages, lengths, table, *, scale, softcap, shift):
    """q [B, Hq, 1, D], pages [Hkv, P, page, D] (float) -> out [B, Hq, 1, D] (float32)."""
    read = table
    if shift:  # page j read from table[b, j + 1]; past the last, a page of another row or none
        read = jnp.concatenate([table[:, 1:], jnp.full_like(table[:, :1], table.size)], axis=1)

    def gather(pages):  # -> [B, Hkv, width * page, D]
        g = pages[:, read]  # [Hkv, B, width, page, D]
        return jnp.moveaxis(g, 0, 1).reshape(read.shape[0], pages.shape[0], -1, pages.shape[-1])

    def attend(request):  # one request's [1, H, S, D] slices, as a server decodes it
        q, k, v, length = (x[None] for x in request)
        s, _ = core.logits(q, k.astype(jnp.float32), scale, softcap=softcap)
        keys = jnp.arange(k.shape[2])
        s = jnp.where(keys[None, None, None, :] < length[:, None, None, None], s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1)
        out = jnp.einsum(
            "bhqk,bhkd->bhqd", p, core.group(v, q.shape[1]).astype(jnp.float32), precision=core.HIGHEST
        )
        return out[0]

    # Request by request (lax.map), not one batched dot: XLA:CPU picks its dot kernel per shape
    # (a YNN fusion or not, by the batch's size), so a batched einsum's bits change with the
    # batch, and this control must pass batch_invariance.
    return jax.lax.map(attend, (q, gather(k_pages), gather(v_pages), lengths))


@dataclasses.dataclass(frozen=True, eq=False)
class PagedDecode:
    """Correct paged decode (float32) over the adapter's page layout."""

    BUG: ClassVar[str] = ""
    config: Config = ()
    name: str = "mutants_paged_decode"
    description: str = "plain-JAX paged decode over paged_attention's page layout"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return CAPS

    def configured(self, config: Config) -> PagedDecode:
        return dataclasses.replace(self, config=TUNABLES.normalized(config))

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        b, _, sk, _ = inputs.k.shape
        block = int(TUNABLES.value(self.config, "pages_per_compute_block"))
        table, total = page_table(b, pages_per_sequence(sk, block), seed=sk)
        k_pages = scatter_pages(inputs.k, table, total, seed=1)
        v_pages = scatter_pages(inputs.v, table, total, seed=2)
        lengths = np.full(b, sk) if inputs.kv_lengths is None else np.asarray(inputs.kv_lengths)
        if self.BUG == "drops_last_partial_page":
            lengths = lengths // PAGE_SIZE * PAGE_SIZE
        if self.BUG == "one_token_row_empty":
            lengths = np.where(lengths <= 1, 0, lengths)
        out = _decode(
            jnp.asarray(inputs.q),
            jnp.asarray(k_pages),
            jnp.asarray(v_pages),
            jnp.asarray(lengths, jnp.int32),
            jnp.asarray(table),
            scale=spec.resolved_scale(inputs.q.shape[-1]),
            softcap=spec.softcap,
            shift=1 if self.BUG == "page_off_by_one" else 0,
        )
        return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("a decode kernel has no backward pass")


@dataclasses.dataclass(frozen=True, eq=False)
class PageOffByOne(PagedDecode):
    BUG: ClassVar[str] = "page_off_by_one"
    name: str = "mutants_page_off_by_one"


@dataclasses.dataclass(frozen=True, eq=False)
class DropsLastPartialPage(PagedDecode):
    BUG: ClassVar[str] = "drops_last_partial_page"
    name: str = "mutants_drops_last_partial_page"


@dataclasses.dataclass(frozen=True, eq=False)
class OneTokenRowEmpty(PagedDecode):
    BUG: ClassVar[str] = "one_token_row_empty"
    name: str = "mutants_one_token_row_empty"


@dataclasses.dataclass(frozen=True, eq=False)
class Int8PagedDecode(PagedDecode):
    """Correct paged decode over int8 pages with a scale per token (paged_attention[kv=int8])."""

    name: str = "mutants_int8_paged_decode"

    def capabilities(self) -> Capabilities:
        return INT8_CAPS

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        b, _, sk, _ = inputs.k.shape
        block = int(TUNABLES.value(self.config, "pages_per_compute_block"))
        table, total = page_table(b, pages_per_sequence(sk, block), seed=sk)

        def pages(x: np.ndarray, seed: int) -> jnp.ndarray:
            w, scales = int8_pages(x, table, total, seed)
            if self.BUG == "ignores_dequant_scale":
                return jnp.asarray(w, jnp.float32)
            return jnp.asarray(w, jnp.float32) * jnp.asarray(scales, jnp.float32) / INT8_SCALE_DIVISOR

        lengths = np.full(b, sk) if inputs.kv_lengths is None else np.asarray(inputs.kv_lengths)
        out = _decode(
            jnp.asarray(inputs.q),
            pages(inputs.k, 1),
            pages(inputs.v, 3),
            jnp.asarray(lengths, jnp.int32),
            jnp.asarray(table),
            scale=spec.resolved_scale(inputs.q.shape[-1]),
            softcap=spec.softcap,
            shift=0,
        )
        return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)


@dataclasses.dataclass(frozen=True, eq=False)
class IgnoresDequantScale(Int8PagedDecode):
    BUG: ClassVar[str] = "ignores_dequant_scale"
    name: str = "mutants_ignores_dequant_scale"
