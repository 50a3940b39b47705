"""API contracts (the ``api_contract`` check): a control whose API keeps the promises tokamax documents
(an implementation list that falls back on NotImplementedError only, ``ExceptionGroup`` when every
entry raises it, a default that works, ``precision`` and ``logits_dtype`` honoured, partial results over
key ranges returned unnormalised with residuals ``(max, denominator)`` that its combine function
merges), and two mutants: a list that falls back past any error (a failing entry is silently skipped,
so a user never learns that the implementation asked for broke), and residuals ``(max, logsumexp)``
where the documented pair is ``(max, denominator)`` (as tokamax's Mosaic TPU returns them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from kernels.contract.api_contract import ApiContract, ContractCall, NotExpressible, failing_entry
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


def partial_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> tuple[np.ndarray, tuple]:
    """Unnormalised out ``[B, Hq, Sq, Dv]`` float32 over these keys and the residuals
    ``(row max, softmax denominator)``, each ``[B, Hq, Sq]``: the documented pair."""
    group = q.shape[1] // k.shape[1]
    k, v = (np.repeat(x.astype(np.float32), group, axis=1) for x in (k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float32), k) * np.float32(scale)
    row_max = s.max(-1)
    e = np.exp(s - row_max[..., None])
    return e @ v, (row_max, e.sum(-1))


def combine_partial_results(outs: np.ndarray, residuals: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The library's combine: partial results stacked on a leading axis, merged and normalised."""
    maxima, denominators = residuals
    top = maxima.max(0)
    alpha = np.exp(maxima - top)
    return (outs * alpha[..., None]).sum(0) / (denominators * alpha).sum(0)[..., None]


def residuals_as_documented(residuals: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return residuals


def split_kv(q, k, v, spec: AttentionSpec, residuals: Callable[[tuple], tuple]) -> np.ndarray:
    """Each half of the keys through ``partial_attention``, merged by ``combine_partial_results``."""
    if spec.causal or spec.window is not None or spec.chunk is not None or k.shape[2] % 2:
        raise NotExpressible("a causal, windowed or chunked case, or an odd key count: no plain key halves")
    half = k.shape[2] // 2
    scale = spec.resolved_scale(q.shape[-1])
    parts = [partial_attention(q, k[:, :, r], v[:, :, r], scale) for r in (slice(0, half), slice(half, None))]
    stacked = tuple(np.stack(x) for x in zip(*(residuals(p[1]) for p in parts), strict=True))
    return combine_partial_results(np.stack([p[0] for p in parts]), stacked).astype(q.dtype)


CONTRACT = ApiContract(
    fallback=True,
    default=True,
    precision=True,
    logits_dtype=True,
    split_kv=True,
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
    residuals: ClassVar[Callable[[tuple], tuple]] = staticmethod(residuals_as_documented)

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(BACKWARD, dtypes=("float32", "bfloat16"), api_contract=CONTRACT)

    def contract_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, request: ContractCall
    ) -> SubjectOutput:
        if request.implementation == "split_kv":
            if inputs.q_lengths is not None or inputs.kv_lengths is not None or inputs.bias is not None:
                raise NotExpressible("valid lengths or a bias: the halves here take plain q, k and v only")
            return SubjectOutput(
                out=split_kv(inputs.q, inputs.k, inputs.v, spec, self.residuals), ran=self.name
            )
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


def residuals_with_logsumexp(residuals: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    row_max, denominator = residuals
    return row_max, row_max + np.log(denominator)  # BUG: the documented pair's second is the denominator


@dataclasses.dataclass(frozen=True, eq=False)
class ResidualsWithLogsumexp(ImplementationList):
    """Partial results with residuals (max, logsumexp), not the documented (max, denominator)."""

    name: str = "mutants_api_contract_residuals_lse"
    description: str = "split-kv residuals (max, logsumexp) where (max, denominator) is documented"
    residuals: ClassVar[Callable[[tuple], tuple]] = staticmethod(residuals_with_logsumexp)
