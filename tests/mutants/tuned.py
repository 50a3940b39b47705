"""Mutants with tunables: right at their default blocks, wrong only at some other config.

``TunedAdapter`` is correct at every config: a blocked online softmax over ``block_k`` keys
(``tests.mutants.blocked``) with ``jax.vjp`` gradients, whose backward blocks only decide
how many keys the backward visits. Its blocks must divide the lengths (it raises otherwise,
as the Pallas kernels do). The mutants break it only where the blocks differ:

* ``RescaleSquareOnly``: the online softmax rescales its running sum and output only when
  the tiles are square (block_q == block_k), as a kernel that reuses a q-tile-shaped
  correction factor would; the default blocks (128, 128) are square.
* ``BackwardDropsTail``: the backward walks ``kv_len // block_k`` blocks (the *forward*
  block count) of ``block_k_bwd`` keys each, so a smaller backward block drops the keys
  past ``(kv_len // block_k) * block_k_bwd``; the default blocks are equal.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.contract.tunables import Config, Tunable, Tunables
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.blocked import Blocking, online_softmax

NAMES = ("block_q", "block_k", "block_q_bwd", "block_k_bwd")
TUNABLES = Tunables(
    tuple(
        Tunable(
            name, 128, "q" if "_q" in name else "kv", name.endswith("_bwd"), minimum=32, power_of_two=True
        )
        for name in NAMES
    )
)


def _divide(shape, spec, blocks) -> bool:
    q_blocks = (blocks["block_q"], blocks["block_q_bwd"])
    kv_blocks = (blocks["block_k"], blocks["block_k_bwd"])
    return all(shape.q_len % b == 0 for b in q_blocks) and all(shape.kv_len % b == 0 for b in kv_blocks)


CAPS = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    backward=True,
    constraints=(
        ShapeConstraint(
            name="blocks_divide_lengths",
            reason="every block must divide its length (ValueError otherwise)",
            holds=_divide,
            basis="raises",
            sees_config=True,
        ),
    ),
    tunables=TUNABLES,
)


@functools.partial(jax.jit, static_argnames=("scale", "causal", "blocking", "keys"))
def _attention(q, k, v, *, scale, causal, blocking, keys):
    """Attention over the first ``keys`` keys, one key block at a time."""
    k, v = k[:, :, :keys], v[:, :, :keys]
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], keys, causal=causal) if causal else None
    return online_softmax(s, keep, v, blocking)


@dataclasses.dataclass(frozen=True, eq=False)
class TunedAdapter:
    """Correct blocked attention with tunable blocks (float32, causal top-left)."""

    BUG: ClassVar[str] = ""
    config: Config = ()
    name: str = "mutants_tuned"
    description: str = "correct blocked JAX attention with tunable blocks"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return CAPS

    def configured(self, config: Config) -> TunedAdapter:
        return dataclasses.replace(self, config=TUNABLES.normalized(config))

    def _blocks(self, inputs: AttentionInputs) -> dict:
        blocks = TUNABLES.resolved(self.config)
        if not _divide(inputs.shape, None, blocks):
            raise ValueError(f"blocks {blocks} must divide q_len and kv_len {inputs.shape}")
        return blocks

    def _blocking(self, blocks: dict) -> Blocking:
        square = blocks["block_q"] == blocks["block_k"]
        return Blocking(block=blocks["block_k"], rescale=square or self.BUG != "rescale_square_only")

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        blocks = self._blocks(inputs)
        scale = spec.resolved_scale(inputs.q.shape[-1])
        out = core.call(
            functools.partial(_attention, blocking=self._blocking(blocks), keys=inputs.k.shape[2]),
            inputs.q,
            inputs.k,
            inputs.v,
            scale=scale,
            causal=spec.causal,
        )
        return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        blocks = self._blocks(inputs)
        scale = spec.resolved_scale(inputs.q.shape[-1])
        kv_len = inputs.k.shape[2]
        keys = kv_len
        if self.BUG == "backward_drops_tail":
            keys = min(kv_len, kv_len // blocks["block_k"] * blocks["block_k_bwd"])
        blocking = Blocking(block=min(blocks["block_k_bwd"], keys))
        fn = functools.partial(_attention, scale=scale, causal=spec.causal, blocking=blocking, keys=keys)
        _, vjp = jax.vjp(fn, *(jnp.asarray(x) for x in (inputs.q, inputs.k, inputs.v)))
        dq, dk, dv = vjp(jnp.asarray(dout, jnp.float32))
        return SubjectGrads(*(core.host(g, inputs.q.dtype) for g in (dq, dk, dv)))


@dataclasses.dataclass(frozen=True, eq=False)
class RescaleSquareOnly(TunedAdapter):
    """Online softmax rescaled only when block_q == block_k."""

    BUG: ClassVar[str] = "rescale_square_only"
    name: str = "mutants_rescale_square_only"


@dataclasses.dataclass(frozen=True, eq=False)
class BackwardDropsTail(TunedAdapter):
    """Backward walks the forward's block count of backward blocks, dropping a tail."""

    BUG: ClassVar[str] = "backward_drops_tail"
    name: str = "mutants_backward_drops_tail"
