"""A wrapper of tokamax's attention that breaks what a wrapper must keep: the same options in the
forward and the backward call.

``SoftcapForwardOnly`` runs ``tokamax.dot_product_attention(implementation='xla')`` through the
suite's own adapter, but drops ``logits_soft_cap`` from the call it differentiates, as a wrapper
that threads the option into its forward only would: its outputs are right, its gradients are the
gradients of uncapped attention. The ``backward`` check must reject it on every softcap case.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.adapters.tokamax import TokamaxAdapter
from kernels.contract.base import Capabilities, SubjectGrads
from reference.spec import AttentionInputs, AttentionSpec


@dataclasses.dataclass(frozen=True, eq=False)
class SoftcapForwardOnly(TokamaxAdapter):
    name: str = "softcap_forward_only"

    def capabilities(self) -> Capabilities:
        # float32 only: the meta-test's budget (each dtype is another compile per case)
        return dataclasses.replace(super().capabilities(), dtypes=("float32",))

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        return super().gradients(inputs, dataclasses.replace(spec, softcap=None), dout)  # BUG: cap dropped
