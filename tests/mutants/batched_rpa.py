"""Batched ragged paged attention (attention plus the KV-cache write-back) in NumPy and plain JAX,
over the tokamax_batched_rpa adapter's packing (``pack_batched``), correct and with a broken write-back.

``BatchedRaggedPaged`` writes each active packed token's K/V at its cache position ``kv_len - q_len
+ i``, reading the slot from the op's own arguments (``cu_q_lens``, ``kv_lens``, flat
``page_indices``, ``distribution``), then attends over the written pages (``tests.mutants.ragged``'s
``_ragged``) and returns the cache beside the one the adapter expects.

* ``WriteBackDropped``: attends with the new K/V but returns the cache as given: out is right,
  only the ``kv_cache`` check can see it.
* ``WriteBackOneSlotLate``: each new token written one slot past its position (wrapping in its
  sequence's pages), and attended there: the cache and out are both wrong.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from kernels.adapters.paged_attention import PAGE_SIZE
from kernels.adapters.ragged_paged_attention import CONSTRAINTS as RAGGED_CONSTRAINTS
from kernels.adapters.ragged_paged_attention import canonical_rows, layout_seed, sliding_window
from kernels.adapters.tokamax_batched_rpa import CONSTRAINTS, BatchedPack, pack_batched
from kernels.contract.base import Availability, CacheWrite, Capabilities, SubjectGrads, SubjectOutput
from kernels.contract.tunables import Tunables
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.ragged import CAPS as RAGGED_CAPS
from tests.mutants.ragged import _ragged

# ragged paged attention's mutant's declaration (_ragged is always causal), plus the cache it writes
# and the op's own limits.
CAPS = dataclasses.replace(
    RAGGED_CAPS,
    kv_cache=True,
    tunables=Tunables(),
    constraints=(*(c for c in RAGGED_CONSTRAINTS if c.name == "always_causal"), *CONSTRAINTS),
)


def written_cache(pack: BatchedPack, shift: int = 0) -> np.ndarray:
    """The given cache with each active token's K/V (zeros in the padding lanes) at its position
    ``kv_len - q_len + i`` (plus ``shift``, wrapping in the sequence's pages)."""
    cache = pack.kv_cache.copy()
    d = pack.keys.shape[-1]
    width = len(pack.page_indices) // len(pack.kv_lens)
    for seq in range(int(pack.distribution[-1])):
        start, end = int(pack.cu_q_lens[seq]), int(pack.cu_q_lens[seq + 1])
        for i, token in enumerate(range(start, end)):
            pos = (int(pack.kv_lens[seq]) - (end - start) + i + shift) % (width * PAGE_SIZE)
            page, slot = int(pack.page_indices[seq * width + pos // PAGE_SIZE]), pos % PAGE_SIZE
            cache[page, slot, 0::2, :d] = pack.keys[token]
            cache[page, slot, 1::2, :d] = pack.values[token]
            cache[page, slot, :, d:] = 0
    return cache


@dataclasses.dataclass(frozen=True, eq=False)
class BatchedRaggedPaged:
    """Correct: write back, then attend over the written pages (float32)."""

    BUG: ClassVar[str] = ""
    name: str = "mutants_batched_ragged_paged"
    description: str = "NumPy write-back and plain-JAX attention over tokamax_batched_rpa's layout"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return CAPS

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        pack = pack_batched(inputs, layout_seed(inputs.k.shape, inputs.q.shape[2]))
        written = written_cache(pack, shift=1 if self.BUG == "one_slot_late" else 0)
        d = inputs.q.shape[-1]
        table = pack.page_indices.reshape(len(pack.kv_lens), -1)
        out = _ragged(
            jnp.asarray(pack.queries),
            jnp.asarray(written[..., :d]),
            jnp.asarray(pack.kv_lens),
            jnp.asarray(table),
            jnp.asarray(pack.cu_q_lens),
            jnp.asarray(pack.distribution[-1:]),
            scale=spec.resolved_scale(d),
            window=sliding_window(spec),
            softcap=spec.softcap,
            tensor_offset=None,
        )
        returned = pack.kv_cache if self.BUG == "dropped" else written
        return SubjectOutput(
            out=core.host(canonical_rows(out, jnp.asarray(pack.token_index)), inputs.q.dtype),
            ran=f"{self.name}, pages of {PAGE_SIZE}",
            kv_cache=CacheWrite(returned=returned, expected=pack.expected_cache),
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("an inference op has no backward pass")


@dataclasses.dataclass(frozen=True, eq=False)
class WriteBackDropped(BatchedRaggedPaged):
    BUG: ClassVar[str] = "dropped"
    name: str = "mutants_write_back_dropped"


@dataclasses.dataclass(frozen=True, eq=False)
class WriteBackOneSlotLate(BatchedRaggedPaged):
    BUG: ClassVar[str] = "one_slot_late"
    name: str = "mutants_write_back_one_slot_late"
