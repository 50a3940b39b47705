"""A wrapper of tokamax's splash attention that threads every argument through, and one that drops
what it was given: the attention sinks.

``SplashWrapped`` is the control: ``tokamax.ops.experimental.splash_attention(implementation='base')``
through the suite's own adapter, unchanged but for its name and float32 alone (the meta-test's budget:
each dtype is another compile per case). It must pass every check it runs, forward and backward,
sinks (and their gradient), the lse and key-drawn dropout included.

``SinksDropped`` runs ``tokamax.ops.experimental.splash_attention(implementation='base')`` through
the suite's own adapter, but calls it without ``sinks``, as a wrapper that forgets to thread the
argument through would: every sink case comes out as plain softmax attention. The ``forward`` check
must reject it on every sink case (the curated matrix's ``sink`` cases).
"""

from __future__ import annotations

import dataclasses

from kernels.adapters.tokamax_splash import TokamaxSplashAdapter
from kernels.contract.base import Capabilities, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec


@dataclasses.dataclass(frozen=True, eq=False)
class SplashWrapped(TokamaxSplashAdapter):
    name: str = "tokamax_splash_wrapped"

    def capabilities(self) -> Capabilities:
        # float32 only: the meta-test's budget (each dtype is another compile per case)
        return dataclasses.replace(super().capabilities(), dtypes=("float32",))


@dataclasses.dataclass(frozen=True, eq=False)
class SinksDropped(TokamaxSplashAdapter):
    name: str = "tokamax_splash_sinks_dropped"

    def capabilities(self) -> Capabilities:
        # float32 only: the meta-test's budget (each dtype is another compile per case)
        return dataclasses.replace(super().capabilities(), dtypes=("float32",))

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        return super().forward(dataclasses.replace(inputs, sinks=None), spec)  # BUG: sinks dropped
