"""API contracts (the ``api_contract`` check): a control whose API keeps the promises tokamax documents
(an implementation list that falls back on NotImplementedError only, ``ExceptionGroup`` when every
entry raises it, a default that works, ``precision`` and ``logits_dtype`` honoured), and a mutant whose
list falls back past any error: a failing entry is silently skipped, so a user never learns that the
implementation asked for broke."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from kernels.contract.api_contract import ApiContract, ContractCall, failing_entry
from kernels.contract.base import Capabilities, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants.correct import BACKWARD, CorrectAdapter, attention, keywords


def _elsewhere(*args: Any, **kwargs: Any) -> Any:
    """An implementation for another platform: rejects every input here, as tokamax's do."""
    raise NotImplementedError("Not supported on this platform.")


def _plain(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, precision: Any, logits_dtype: Any, **kw: Any):
    """The correct attention: float32 logits and dot products whatever is asked (so HIGHEST and a
    float32 logits dtype are honoured), its out in q's dtype."""
    if logits_dtype not in (None, "float32"):
        raise NotImplementedError(f"logits_dtype {logits_dtype!r}: float32 only")
    return attention(q, k, v, **kw)[0]


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {"elsewhere": _elsewhere, "plain": _plain}
DEFAULT = ("elsewhere", "plain")


def list_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    implementation: tuple[Any, ...] | None = None,
    precision: Any = None,
    logits_dtype: Any = None,
    catches: type[Exception] = NotImplementedError,
    **kw: Any,
) -> np.ndarray:
    """An API over ``IMPLEMENTATIONS``: the first entry that does not raise ``catches`` answers;
    every entry raising it raises an ExceptionGroup; None is ``DEFAULT``."""
    entries = DEFAULT if implementation is None else implementation
    errors = []
    for entry in entries:
        fn = IMPLEMENTATIONS[entry] if isinstance(entry, str) else entry
        try:
            return fn(q, k, v, precision=precision, logits_dtype=logits_dtype, **kw)
        except catches as error:
            if len(entries) == 1:
                raise
            errors.append(error)
    raise ExceptionGroup("all implementations failed", errors)


CONTRACT = ApiContract(
    fallback=True,
    default=True,
    precision=True,
    logits_dtype=True,
    own="plain",
    documentation="list_attention",
)
ENTRIES: dict[str, tuple[Any, ...] | None] = {
    "own": ("plain",),
    "default": None,
    "rejecting": ("elsewhere",),
    "after_rejection": ("elsewhere", "plain"),
    "all_rejecting": ("elsewhere", "elsewhere"),
    "after_other_error": (failing_entry, "plain"),
}


@dataclasses.dataclass(frozen=True, eq=False)
class ImplementationList(CorrectAdapter):
    """Control: ``list_attention``, falling back on NotImplementedError only, float32 and bfloat16."""

    name: str = "mutants_api_contract_correct"
    description: str = "correct JAX attention behind an implementation list that falls back as documented"
    catches: ClassVar[type[Exception]] = NotImplementedError
    api: ClassVar[Callable[..., Any]] = staticmethod(list_attention)

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(BACKWARD, dtypes=("float32", "bfloat16"), api_contract=CONTRACT)

    def contract_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, request: ContractCall
    ) -> SubjectOutput:
        out = self.api(
            inputs.q,
            inputs.k,
            inputs.v,
            implementation=ENTRIES[request.implementation],
            precision=request.precision,
            logits_dtype=request.logits_dtype,
            catches=self.catches,
            **keywords(inputs, spec),
        )
        return SubjectOutput(out=out, ran=self.name)


@dataclasses.dataclass(frozen=True, eq=False)
class FallsBackOnAnyError(ImplementationList):
    """The list falls back past any error: a failing entry is skipped silently."""

    name: str = "mutants_api_contract_any_error"
    description: str = "implementation list that falls back on any exception"
    catches: ClassVar[type[Exception]] = Exception  # BUG: only NotImplementedError may fall back
