"""Ragged paged attention in plain JAX, correct and with its diagonal at the tensor lengths.

``RaggedPaged`` packs a case exactly as the ragged_paged_attention adapter does (``ragged_layout``: rows
concatenated by ``cu_q_lens``, K/V heads interleaved in randomly ordered pages, garbage in every
page, slot, token and sequence slot no row owns), then reads the pages back through the page
table and attends, each packed token at its own sequence's diagonal. It declares what the
adapter declares, so the suite runs it on the same mixed prefill/decode cases.

* ``DiagonalAtTensorLengths``: every sequence's diagonal at ``Sk - Sq`` of the canonical tensors
  (``bottom_right``) instead of its own ``kv_len - q_len``; right whenever a row's valid
  lengths differ from the tensor's by the same amount.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from kernels.adapters.ragged_paged_attention import (
    CONSTRAINTS,
    PAGE_SIZE,
    TUNABLES,
    canonical_rows,
    ragged_layout,
    sliding_window,
)
from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.contract.tunables import Config
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core

CAPS = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("bottom_right_valid",),
    window=True,
    lengths=True,
    gqa=True,
    softcap=True,
    fully_masked_rows="unspecified",
    constraints=tuple(c for c in CONSTRAINTS if not c.raises),  # plain JAX raises for none of them
    tunables=TUNABLES,
)


@functools.partial(jax.jit, static_argnames=("scale", "window", "softcap", "tensor_offset"))
def _ragged(q, kv_pages, kv_lens, table, cu_q_lens, num_seqs, *, scale, window, softcap, tensor_offset):
    """Packed q [T, Hq, D] over pages [P, page, 2*Hkv, D] -> out [T, Hq, D] (float32).
    ``tensor_offset``: None for each sequence's kv_len - q_len, else that one offset for all."""
    seqs = table.shape[0] - 1  # the spare slot is never read
    pages = kv_pages[table[:seqs]]  # [B, width, page, 2*Hkv, D]
    pages = pages.reshape(seqs, -1, *kv_pages.shape[2:]).astype(jnp.float32)
    k, v = pages[:, :, 0::2], pages[:, :, 1::2]  # [B, width*page, Hkv, D]
    t = jnp.arange(q.shape[0])
    seq = jnp.clip(jnp.searchsorted(cu_q_lens[1 : seqs + 1], t, side="right"), 0, seqs - 1)
    row = t - cu_q_lens[seq]
    q_len = cu_q_lens[seq + 1] - cu_q_lens[seq]
    diag = row + (kv_lens[seq] - q_len if tensor_offset is None else tensor_offset)
    # Scores against every sequence's keys, then each token keeps its own sequence's (small
    # intermediates: no per-token copy of a sequence's cache).
    kq = core.group(jnp.moveaxis(k, 2, 1), q.shape[1])  # [B, Hq, Sk, D]
    vq = core.group(jnp.moveaxis(v, 2, 1), q.shape[1])
    s = jnp.einsum("thd,bhkd->tbhk", q.astype(jnp.float32), kq, precision=core.HIGHEST) * scale
    s = jnp.take_along_axis(s, seq[:, None, None, None], axis=1)[:, 0]  # [T, Hq, Sk]
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    j = jnp.arange(k.shape[1])[None, :]
    visible = (j < kv_lens[seq][:, None]) & (j <= diag[:, None])
    if window is not None:
        visible &= j > diag[:, None] - window
    s = jnp.where(visible[:, None, :], s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)[:, None] * (jnp.arange(seqs) == seq[:, None])[:, :, None, None]
    return jnp.einsum("tbhk,bhkd->thd", p, vq, precision=core.HIGHEST)


@dataclasses.dataclass(frozen=True, eq=False)
class RaggedPaged:
    """Correct ragged paged attention (float32) over the adapter's packing and page layout."""

    BUG: ClassVar[str] = ""
    config: Config = ()
    name: str = "mutants_ragged_paged"
    description: str = "plain-JAX ragged paged attention over ragged_paged_attention's layout"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return CAPS

    def configured(self, config: Config) -> RaggedPaged:
        return dataclasses.replace(self, config=TUNABLES.normalized(config))

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        explicit = dict(self.config).get("num_kv_pages_per_block")
        block = None if explicit is None else int(explicit)
        *packed, token_index = ragged_layout(
            inputs.q, inputs.k, inputs.v, inputs.q_lengths, inputs.kv_lengths, block, inputs.k.shape[2]
        )
        _, _, sq, d = inputs.q.shape
        offset = inputs.k.shape[2] - sq if self.BUG == "diagonal_at_tensor_lengths" else None
        out = _ragged(
            *(jnp.asarray(a) for a in packed),
            scale=spec.resolved_scale(d),
            window=sliding_window(spec),
            softcap=spec.softcap,
            tensor_offset=offset,
        )
        return SubjectOutput(
            out=core.host(canonical_rows(out, token_index), inputs.q.dtype),
            ran=f"{self.name}, pages of {PAGE_SIZE}",
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("an inference kernel has no backward pass")


@dataclasses.dataclass(frozen=True, eq=False)
class DiagonalAtTensorLengths(RaggedPaged):
    BUG: ClassVar[str] = "diagonal_at_tensor_lengths"
    name: str = "mutants_diagonal_at_tensor_lengths"
