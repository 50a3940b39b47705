"""What a multi-implementation API documents about choosing its implementation and about its numerics
arguments, as the ``api_contract`` check asks an adapter for it (docs/semantics.md, "API contracts").

A subject declares ``Capabilities.api_contract`` (an ``ApiContract``: which promises its API makes)
and implements ``Adapter.contract_call(inputs, spec, request)`` (``kernels/contract/optional_members.py``):
the forward call with the implementation argument, ``precision`` and ``logits_dtype`` as the
``ContractCall`` asks, returning a ``SubjectOutput``. A promise the API does not make is not declared;
an implementation that rejects ``precision`` or ``logits_dtype`` declares a ``ShapeConstraint`` on
feature ``PRECISION_FEATURE`` or ``LOGITS_DTYPE_FEATURE`` (basis ``raises``, its exception).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

# The implementation argument of one contract call:
#   own              the subject's own implementation alone (the answer a fallback must equal, bitwise);
#   default          the API's default (implementation=None);
#   rejecting        an entry that rejects this input on this platform, alone (it must raise
#                    NotImplementedError: without a rejection there is nothing to fall back from);
#   after_rejection  that rejecting entry, then the subject's own implementation;
#   all_rejecting    the rejecting entry twice (every entry raises NotImplementedError);
#   after_other_error  an entry that raises ``other_error()`` (a ValueError), then the own implementation;
#   split_kv         the own implementation on each half of the keys, unnormalised with its residuals,
#                    merged by the library's own combine function (``ApiContract.split_kv``).
ContractImplementation = Literal[
    "own", "default", "rejecting", "after_rejection", "all_rejecting", "after_other_error", "split_kv"
]
CONTRACT_IMPLEMENTATIONS: tuple[str, ...] = (
    "own",
    "default",
    "rejecting",
    "after_rejection",
    "all_rejecting",
    "after_other_error",
    "split_kv",
)
# The features a precision or logits-dtype rejection concerns (``ShapeConstraint.features``): no
# planned case carries them, only the ``api_contract`` check's own calls.
PRECISION_FEATURE = "precision"
LOGITS_DTYPE_FEATURE = "logits_dtype"
OTHER_ERROR = "the suite's first implementation entry fails with an error other than NotImplementedError"


class NotExpressible(Exception):
    """Raised by ``Adapter.contract_call`` for a request the adapter cannot state for this case (e.g. a
    key split under a causal mask, whose second half needs key offsets the call does not take): the
    check records that part as unsupported, with the message, never as the library's answer."""


def other_error() -> ValueError:
    """The error the ``after_other_error`` entry raises: it must reach the caller as it is."""
    return ValueError(OTHER_ERROR)


REJECTED_EVERYWHERE = (
    "the suite's entry that rejects every input (no registered implementation rejects this input here)"
)


def rejecting_entry(*args: Any, **kwargs: Any) -> Any:
    """An implementation entry that rejects every input with NotImplementedError, for an API where no
    entry of its own rejects the case on this platform (so the fallback is still exercised)."""
    raise NotImplementedError(REJECTED_EVERYWHERE)


def failing_entry(*args: Any, **kwargs: Any) -> Any:
    """An implementation entry that fails with ``other_error()`` whatever it is given."""
    raise other_error()


@dataclasses.dataclass(frozen=True)
class ApiContract:
    """The promises an API's documentation makes, each judged by the ``api_contract`` check.

    ``fallback``: ``implementation=`` takes a sequence, and the first entry that does not raise
    NotImplementedError answers (another error propagates; every entry raising NotImplementedError
    raises ``fallback_error``). ``default``: ``implementation=None`` answers every input the API
    accepts; ``default_is`` names the implementation the documentation says it is (its answer then
    bitwise, where it is the subject's ``own``), "" where it says only "the best available".
    ``precision``: the call takes ``precision=`` (``jax.lax.Precision.HIGHEST`` on float32 inputs:
    float32 dot products). ``logits_dtype``: it takes ``logits_dtype=`` (float32 on bfloat16
    inputs: the documented default, the q-k dot's float32 accumulator, so the answer of the call
    without it, bitwise). ``split_kv``: the implementation returns, on request, its output unnormalised
    with the residuals the library documents, and the library's own function combines partial results
    over key ranges (the halves' combination must match the reference). ``documentation``: where the
    promises are written, for the report."""

    fallback: bool = False
    fallback_error: str = "ExceptionGroup"
    default: bool = False
    default_is: str = ""
    own: str = ""  # the subject's own implementation, as the API names it
    precision: bool = False
    logits_dtype: bool = False
    split_kv: bool = False
    documentation: str = ""

    def __post_init__(self) -> None:
        if self.default_is and not self.default:
            raise ValueError(
                f"default_is {self.default_is!r} names the default's implementation; set default"
            )
        if not (self.fallback or self.default or self.precision or self.logits_dtype or self.split_kv):
            raise ValueError(
                "an ApiContract promises something (fallback, default, precision, logits_dtype, split_kv)"
            )


@dataclasses.dataclass(frozen=True)
class ContractCall:
    """One call of ``Adapter.contract_call``: the implementation argument (``ContractImplementation``),
    ``precision`` ("highest": ``jax.lax.Precision.HIGHEST``; None: not passed) and ``logits_dtype``
    ("float32"; None: not passed)."""

    implementation: ContractImplementation = "own"
    precision: Literal["highest"] | None = None
    logits_dtype: Literal["float32"] | None = None

    def __post_init__(self) -> None:
        if self.implementation not in CONTRACT_IMPLEMENTATIONS:
            raise ValueError(
                f"unknown implementation {self.implementation!r}; choose from {CONTRACT_IMPLEMENTATIONS}"
            )
        if self.precision not in (None, "highest"):
            raise ValueError(f"precision {self.precision!r}: the check asks for 'highest' or None")
        if self.logits_dtype not in (None, "float32"):
            raise ValueError(f"logits_dtype {self.logits_dtype!r}: the check asks for 'float32' or None")
