"""XLA attention: ``jax.nn.dot_product_attention(implementation='xla')``, the platform-native path.

Translation lives in ``kernels.adapters.jax_nn_attention`` (layout ``[B, T, N, H]``, windows,
lengths, lse). What this implementation does differently from canonical:

* Softmax runs in float32 whatever the input dtype; bf16/f16 logits come from a
  matmul with float32 accumulation.
* Masked logits are *replaced* by ``-0.7 * float32 max``: a row that sees no key
  returns the mean of V, except rows past ``q_lengths``, which are zeroed after
  the softmax; a row whose bias is all ``-inf`` gives NaN. No single convention
  holds, so it is declared ``unspecified``.
* ``value`` must have the shape of ``key`` (no Dv != D); segment ids have no
  argument (use a boolean mask); there is no softcap.
* Chunked causal attention has no argument either: the adapter passes it as a boolean mask
  (``kernels.runtime.chunked_mask``), top-left as ``is_causal`` is.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.adapters.jax_nn_attention import JaxNnRunner, api_availability, api_has_lse, jax_nn_contract
from kernels.contract.api_contract import ContractCall
from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.contract.dtypes import FP8_DTYPES
from kernels.runtime.jax_runtime import JaxCall, default_backend, jax_version
from kernels.runtime.standalone import StandaloneCall
from reference.spec import AttentionInputs, AttentionSpec

# --- version compatibility ---------------------------------------------------------------
# From 0.5.3 (verified; 0.4.38 is without it) jax.nn asks dot_general for the
# F16_F16_F32 algorithm on float16 inputs, which XLA:CPU rejects at compile time
# ("not supported by dot_general on CPU"): float16 is then declared only off CPU.
F16_ALGORITHM_SINCE = (0, 5, 3)


def _dtypes() -> tuple[str, ...]:
    try:
        f16_fails = default_backend() == "cpu" and jax_version() >= F16_ALGORITHM_SINCE
    except Exception:
        f16_fails = True
    return (
        ("float32", "bfloat16", *FP8_DTYPES) if f16_fails else ("float32", "bfloat16", "float16", *FP8_DTYPES)
    )


# fp8 q/k/v: declared, and rejected. jax.nn.dot_product_attention mixes its inputs with float32
# (the softmax's dtype) without an explicit cast, and JAX never promotes 8-bit floats implicitly
# (seen at 0.10.2 on CPU: TypePromotionError at trace time).
FP8_REJECTED = ShapeConstraint(
    name="fp8_inputs",
    reason="jax.nn.dot_product_attention raises TypePromotionError for fp8 q/k/v: it combines them "
    "with float32 without an explicit cast, and JAX never promotes 8-bit floats implicitly",
    holds=lambda shape, spec: False,
    basis="raises",
    dtypes=FP8_DTYPES,
    exceptions=("TypePromotionError",),
)


@dataclasses.dataclass(frozen=True, eq=False)
class XlaAdapter:
    """``jax.nn.dot_product_attention`` with ``implementation='xla'``. Canonical ``[B, H, S, D]``."""

    name: str = "xla"
    description: str = "jax.nn.dot_product_attention(implementation='xla')"
    _runner: JaxNnRunner = dataclasses.field(default_factory=lambda: JaxNnRunner("xla"), repr=False)

    def availability(self) -> Availability:
        return api_availability("XLA on the default JAX backend")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=_dtypes(),
            causal_alignments=("top_left",),
            chunked_causal_alignments=("top_left",),  # as a boolean mask (kernels.runtime.chunked_mask)
            window=True,
            lengths=True,
            bool_mask=True,
            gqa=True,
            bias=True,
            bias_broadcast=True,
            backward=True,
            bias_grad=True,
            lse=api_has_lse(),
            fully_masked_rows="unspecified",
            constraints=(FP8_REJECTED,),
            api_contract=jax_nn_contract("xla"),
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype; ``lse: [B, Hq, Sq]`` where this JAX exposes it."""
        return self._runner.forward(inputs, spec, lse=api_has_lse())

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        return self._runner.gradients(inputs, spec, dout)

    def contract_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, request: ContractCall
    ) -> SubjectOutput:
        """The forward call as the api_contract check asks (``jax_nn_contract``)."""
        return self._runner.contract_call(inputs, spec, request)

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        """The forward or gradients call, for checks that transform it (``vmap``)."""
        return self._runner.jax_call(inputs, spec, api_has_lse(), dout)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """This adapter's calls as standalone script text (``kernels.runtime.standalone``)."""
        return self._runner.standalone(inputs, spec, lse=api_has_lse())
