"""cuDNN attention: ``jax.nn.dot_product_attention(implementation='cudnn')``.

Needs an NVIDIA GPU with cuDNN; elsewhere ``availability()`` says so and the suite
skips it. The declarations below come from JAX's ``jax/_src/cudnn/fused_attention_stablehlo.py``
(read, not run here, when no GPU is attached):

* dtypes float16 and bfloat16 only (``check_layout`` raises NotImplementedError for float32);
* head dim at most 128 (256 from Hopper on) and a multiple of 8 (``check_is_flash_attention``);
* a window only as a left window with causal (``cuDNN doesn't support right window``),
  exclusive of its edge inside cuDNN; jax.nn converts, but we leave windows undeclared
  until they are checked on a GPU;
* Dv != D only on Hopper with cuDNN >= 9.10 (MLA), so undeclared;
* the bias gradient only for some bias shapes (``should_export_dbias``), so undeclared;
* a bias or mask broadcast over batch and heads only (``check_layout``: "Bias must have same
  seq length as QKV");
* even Sq and Sk in every backward call (a placeholder bias meets the bias-only rule).

The last two were seen natively (an H200, JAX 0.11.2) and then read in the source.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.adapters.jax_nn_attention import JaxNnRunner, api_availability, api_has_lse, jax_nn_contract
from kernels.contract.api_contract import ContractCall
from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.runtime.jax_runtime import JaxCall, default_backend, installed_jax_versions
from kernels.runtime.standalone import StandaloneCall
from reference.spec import AttentionInputs, AttentionSpec

CONSTRAINTS = (
    ShapeConstraint(
        name="head_dim_multiple_of_8_at_most_128",
        reason="cuDNN flash attention needs D a multiple of 8 and at most 128 (256 on Hopper); "
        "check_is_flash_attention raises NotImplementedError otherwise",
        holds=lambda shape, spec: shape.head_dim % 8 == 0 and shape.head_dim <= 128,
        basis="raises",
    ),
    ShapeConstraint(
        name="even_lengths_backward",
        reason="cuDNN's backward needs even Sq and Sk (NotImplementedError 'Unsupported sequence "
        "length'): check_is_flash_attention means the rule for a bias, but jax.nn hands it a "
        "placeholder bias when there is none, so every backward call meets it (seen on an H200 "
        "at 0.11.2: Sq=Sk=1, 7, 113/129 without a bias)",
        holds=lambda shape, spec: shape.q_len % 2 == 0 and shape.kv_len % 2 == 0,
        basis="raises",
        applies_to="backward",
    ),
)


@dataclasses.dataclass(frozen=True, eq=False)
class CudnnAdapter:
    """``jax.nn.dot_product_attention`` with ``implementation='cudnn'``. Canonical ``[B, H, S, D]``."""

    name: str = "cudnn"
    description: str = "jax.nn.dot_product_attention(implementation='cudnn')"
    _runner: JaxNnRunner = dataclasses.field(default_factory=lambda: JaxNnRunner("cudnn"), repr=False)

    def availability(self) -> Availability:
        api = api_availability("cuDNN fused attention on an NVIDIA GPU")
        if not api.available:
            return api
        try:
            backend = default_backend()
        except Exception as error:
            return Availability(False, f"JAX has no usable backend: {error}", installed_jax_versions())
        if backend != "gpu":
            return Availability(
                False,
                f"cuDNN attention needs an NVIDIA GPU with cuDNN; JAX's backend here is {backend!r}",
                installed_jax_versions(),
            )
        try:
            from jax._src.cudnn.fused_attention_stablehlo import check_cudnn_version

            check_cudnn_version()
        except Exception as error:
            return Availability(
                False, f"cuDNN is not usable from JAX here: {error}", installed_jax_versions()
            )
        return api

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("bfloat16", "float16"),
            causal_alignments=("top_left",),
            lengths=True,
            bool_mask=True,
            gqa=True,
            bias=True,
            bias_broadcast=True,
            # check_layout: "Bias must have same seq length as QKV" (ValueError) unless the bias
            # (and a mask, folded into it) is whole along Sq and Sk; seen on an H200 at 0.11.2
            broadcast_dims=("batch", "heads"),
            backward=True,
            lse=api_has_lse(),
            fully_masked_rows="unspecified",
            constraints=CONSTRAINTS,
            api_contract=jax_nn_contract("cudnn"),
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
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
