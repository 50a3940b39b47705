"""``api_contract``: the promises a multi-implementation API documents, each judged on one case
(``Capabilities.api_contract``, kernels/contract/api_contract.py; docs/semantics.md, "API contracts").

* Fallback (``ApiContract.fallback``): an entry that rejects the case on this platform must raise
  NotImplementedError alone (else there is nothing to fall back from: that part is unsupported);
  that entry followed by the subject's own implementation must answer with the own
  implementation's answer, bitwise, and within tolerance of the float64 reference; two rejecting
  entries must raise the declared ``fallback_error``; an entry failing with another error
  (``other_error()``, a ValueError) followed by the own implementation must raise that error, not
  fall back.
* Default (``ApiContract.default``): ``implementation=None`` answers within tolerance of the float64
  reference; where the documentation names the default (``default_is``) and it is the subject's own
  implementation (``own``), bitwise its answer. The same on the case's twin in each other dtype the
  subject declares and admits for it (judged against the twin's reference): "every input".
* Precision (``ApiContract.precision``): ``precision=HIGHEST`` on float32 inputs (the case's, or its
  float32 twin) is judged as ``forward`` judges a float32 out; a declared rejection (a
  ``ShapeConstraint`` on feature ``precision``) must raise as declared.
* Split kv (``ApiContract.split_kv``): the own implementation on each half of the keys, unnormalised
  with its residuals, merged by the library's own combine function, judged as ``forward`` judges out
  (a residual convention other than the documented one shows here); a case whose halves the adapter
  cannot state (``NotExpressible``: causal, windows, lengths) leaves it unsupported.
* Logits dtype (``ApiContract.logits_dtype``): ``logits_dtype=float32`` on the case's bfloat16 twin is
  judged as a bfloat16 out, and is bitwise the call without it (the documented default is the q-k
  dot's accumulator type, float32 for bfloat16 inputs); a declared rejection likewise.

Fail where any part fails; pass where some part passed and none failed; unsupported where no part
could be observed (each reason said).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

from conformance.judge import baseline as plain
from conformance.judge.baseline import numerics
from conformance.judge.checks.base import CheckContext, Outcome, unsupported
from conformance.judge.dtypes import name_of
from conformance.judge.inputs import build_inputs
from conformance.judge.tolerance import Judgement, judge
from kernels.contract.api_contract import (
    LOGITS_DTYPE_FEATURE,
    OTHER_ERROR,
    PRECISION_FEATURE,
    ApiContract,
    ContractCall,
    NotExpressible,
)
from kernels.contract.base import ShapeConstraint
from kernels.contract.optional_members import optional_member
from reference import attention_forward
from reference.spec import AttentionInputs

NO_MEMBER = (
    "the subject declares Capabilities.api_contract but its adapter has no contract call "
    "(Adapter.contract_call): there is no way to ask it for an implementation list or a precision"
)
Verdict = Literal["pass", "fail", "unsupported"]


@dataclasses.dataclass(frozen=True)
class _Part:
    """One promise's name, verdict, sentence, and the tensors it judged."""

    name: str
    verdict: Verdict
    sentence: str
    judgements: tuple[Judgement, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """One dtype's inputs with their float64 reference out and same-dtype baseline out."""

    dtype: str
    inputs: AttentionInputs
    reference: np.ndarray
    baseline: np.ndarray


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__} ({text!r})" if text else type(error).__name__


def _is_a(error: BaseException, name: str) -> bool:
    """Whether ``error`` is an instance of the class called ``name`` (a base class counts)."""
    return any(cls.__name__ == name for cls in type(error).__mro__)


def _differing(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements differ in their bits (all of them when shapes or dtypes differ)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return int(max(a.size, b.size))
    as_bytes = (x.view(np.uint8).reshape(*x.shape, x.dtype.itemsize) for x in (a, b))
    return int(np.count_nonzero(np.not_equal(*as_bytes).any(-1)))


class _Caller:
    """The adapter's ``contract_call`` on one case: outputs or the exception raised."""

    def __init__(self, ctx: CheckContext, member: Any):
        self.ctx, self.member = ctx, member

    def __call__(self, inputs: AttentionInputs, request: ContractCall) -> tuple[np.ndarray | None, Any]:
        try:
            return np.asarray(self.member(inputs, self.ctx.case.spec, request).out), None
        except Exception as error:  # noqa: BLE001 - what it raised is the observation
            return None, error


def _twin(ctx: CheckContext, dtype: str) -> _Inputs | None:
    """The case's inputs in ``dtype`` (the case itself when it is in it) with their reference and
    baseline; None where the subject does not declare the dtype."""
    if ctx.dtype == dtype:
        inputs = ctx.oracle.inputs
        return _Inputs(dtype, inputs, ctx.oracle.reference.out, ctx.baseline.out)
    if dtype not in ctx.capabilities.dtypes:
        return None
    return _judged_twin(ctx, dtype, build_inputs(dataclasses.replace(ctx.case, dtype=dtype)))


def _judged_twin(ctx: CheckContext, dtype: str, inputs: AttentionInputs) -> _Inputs:
    reference = attention_forward(inputs, ctx.case.spec).out
    base = plain.forward(inputs, ctx.case.spec, numerics(ctx.capabilities, dtype)).out
    return _Inputs(dtype, inputs, reference, base)


def _judged(ctx: CheckContext, out: np.ndarray, twin: _Inputs) -> Judgement:
    """out as ``forward`` judges it, in the twin's dtype (the record names each part's tensor "out")."""
    valid = ctx.oracle.valid_rows[..., None]  # which rows see a key is the masks', not the dtype's
    return judge("out", out, twin.reference, twin.baseline, name_of(twin.baseline.dtype), valid)


def _judged_part(name: str, words: str, judgement: Judgement) -> _Part:
    """A part that rests on one judgement alone: a weak pass (a trivial answer passes too) observes
    nothing."""
    if not judgement.passed:
        return _Part(name, "fail", words, (judgement,))
    if judgement.weak:
        return _Part(name, "unsupported", words, (judgement,))
    return _Part(name, "pass", f"{words}: within tolerance of the float64 reference", (judgement,))


def _declared_rejection(ctx: CheckContext, twin: _Inputs, feature: str) -> ShapeConstraint | None:
    features = (*ctx.case.features, feature)
    exclusions = ctx.capabilities.admits(
        twin.inputs, ctx.case.spec, twin.dtype, "forward", features, ctx.case.config
    )
    return next(
        (
            e.constraint
            for e in exclusions
            if e.constraint is not None and e.raises and feature in e.constraint.features
        ),
        None,
    )


def _excluded(ctx: CheckContext, twin: _Inputs) -> str:
    """Why the subject declines ``twin`` (a constraint of the case in that dtype), or ""."""
    exclusions = ctx.capabilities.admits(
        twin.inputs, ctx.case.spec, twin.dtype, "forward", ctx.case.features, ctx.case.config
    )
    return "; ".join(e.text for e in exclusions)


def _expect_raise(
    name: str, call: Any, twin: _Inputs, request: ContractCall, what: str, expected: str, text: str = ""
) -> _Part:
    """A part whose call must raise ``expected`` (a class name; with ``text`` in its message)."""
    out, error = call(twin.inputs, request)
    if error is None:
        return _Part(name, "fail", f"{what}: returned an answer; expected {expected}")
    if _is_a(error, expected) and text in str(error):
        return _Part(name, "pass", f"{what}: raised {_first_line(error)}, as documented")
    return _Part(name, "fail", f"{what}: raised {_first_line(error)}; expected {expected}")


def _fallback(ctx: CheckContext, call: _Caller, contract: ApiContract, own: np.ndarray) -> list[_Part]:
    twin = _twin(ctx, ctx.dtype)
    assert twin is not None
    _, rejected = call(twin.inputs, ContractCall("rejecting"))
    if rejected is None:
        return [
            _Part(
                "fallback",
                "unsupported",
                "fallback: the entry meant to reject this input on this platform answered it: "
                "there is no NotImplementedError to fall back from",
            )
        ]
    if not _is_a(rejected, "NotImplementedError"):
        return [
            _Part(
                "fallback",
                "fail",
                f"fallback: the rejecting entry alone raised {_first_line(rejected)}, not the "
                "NotImplementedError the documentation names for an input an implementation cannot take",
            )
        ]
    parts = []
    out, error = call(twin.inputs, ContractCall("after_rejection"))
    what = f"fallback past an entry that raised {_first_line(rejected)}"
    if error is not None:
        parts.append(
            _Part(
                "fallback", "fail", f"{what}: raised {_first_line(error)} instead of the next entry's answer"
            )
        )
    else:
        differ = _differing(out, own)
        judgement = _judged(ctx, out, twin)
        if differ:
            parts.append(
                _Part(
                    "fallback",
                    "fail",
                    f"{what}: {differ} of {own.size} elements differ from the next entry's own answer "
                    "(bitwise)",
                    (judgement,),
                )
            )
        else:
            parts.append(_Part("fallback", "pass", f"{what}: the next entry's answer, bitwise", (judgement,)))
    parts.append(
        _expect_raise(
            "all_rejecting",
            call,
            twin,
            ContractCall("all_rejecting"),
            "every entry raising NotImplementedError",
            contract.fallback_error,
        )
    )
    parts.append(
        _expect_raise(
            "other_error",
            call,
            twin,
            ContractCall("after_other_error"),
            "an entry failing with a ValueError before the own implementation (it must propagate, "
            "not fall back)",
            "ValueError",
            OTHER_ERROR,
        )
    )
    return parts


def _default(ctx: CheckContext, call: _Caller, contract: ApiContract, own: np.ndarray) -> _Part:
    twin = _twin(ctx, ctx.dtype)
    assert twin is not None
    out, error = call(twin.inputs, ContractCall("default"))
    if error is not None:
        return _Part(
            "default", "fail", f"implementation=None raised {_first_line(error)} on an input the API accepts"
        )
    judgement = _judged(ctx, out, twin)
    if contract.default_is and contract.default_is == contract.own:
        differ = _differing(out, own)
        if differ:
            return _Part(
                "default",
                "fail",
                f"implementation=None: {differ} of {own.size} elements differ from "
                f"implementation={contract.own!r}, which the documentation names as the default (bitwise)",
                (judgement,),
            )
        return _Part(
            "default", "pass", f"implementation=None: {contract.own!r}'s answer, bitwise", (judgement,)
        )
    return _judged_part("default", "implementation=None answered", judgement)


def _default_in_other_dtypes(ctx: CheckContext, call: _Caller) -> list[_Part]:
    """``implementation=None`` on the case's twin in every other dtype the subject declares and admits
    for it (a dtype declared to raise for the case is one the API does not accept): "every input".
    Judged against the twin's reference; a raise fails."""
    parts = []
    for dtype in ctx.capabilities.dtypes:
        if dtype == ctx.dtype:
            continue
        inputs = build_inputs(dataclasses.replace(ctx.case, dtype=dtype))
        if ctx.capabilities.admits(
            inputs, ctx.case.spec, dtype, "forward", ctx.case.features, ctx.case.config
        ):
            continue
        name, words = f"default_{dtype}", f"implementation=None, {dtype}"
        out, error = call(inputs, ContractCall("default"))
        if error is not None:
            parts.append(
                _Part(name, "fail", f"{words}: raised {_first_line(error)} on an input the API accepts")
            )
        else:
            parts.append(_judged_part(name, words, _judged(ctx, out, _judged_twin(ctx, dtype, inputs))))
    return parts


def _argument(
    ctx: CheckContext, call: _Caller, dtype: str, feature: str, request: ContractCall, words: str
) -> _Part:
    """precision or logits_dtype: honoured (judged) or rejected as declared."""
    twin = _twin(ctx, dtype)
    if twin is None:
        return _Part(feature, "unsupported", f"{words}: the subject declares no {dtype} inputs")
    excluded = _excluded(ctx, twin)
    if excluded:
        return _Part(feature, "unsupported", f"{words}: the case in {dtype} is declined ({excluded})")
    declared = _declared_rejection(ctx, twin, feature)
    out, error = call(twin.inputs, request)
    if declared is not None:
        if error is not None and declared.expects(error):
            return _Part(
                feature, "pass", f"{words}: raised {_first_line(error)}, as declared ({declared.reason})"
            )
        got = "returned" if error is None else f"raised {_first_line(error)}"
        return _Part(
            feature, "fail", f"{words}: declared to raise {declared.exceptions} ({declared.name}) but {got}"
        )
    if error is not None:
        return _Part(feature, "fail", f"{words}: raised {_first_line(error)} (no rejection declared)")
    judgement = _judged(ctx, out, twin)
    if request.logits_dtype is None:
        return _judged_part(feature, words, judgement)
    plain_out, plain_error = call(twin.inputs, ContractCall("own"))
    if plain_error is not None:
        return _Part(
            feature, "fail", f"{words}: the call without it raised {_first_line(plain_error)}", (judgement,)
        )
    differ = _differing(out, plain_out)
    if differ:
        return _Part(
            feature,
            "fail",
            f"{words}: {differ} of {out.size} elements differ from the call without it, whose documented "
            "default is the q-k dot's accumulator type, float32 for bfloat16 inputs (bitwise)",
            (judgement,),
        )
    return _Part(feature, "pass", f"{words}: the default's answer, bitwise", (judgement,))


def _split_kv(ctx: CheckContext, call: _Caller) -> _Part:
    """The halves of the keys, each unnormalised with its residuals, merged by the library's combine
    function: the full answer, within tolerance of the reference."""
    twin = _twin(ctx, ctx.dtype)
    assert twin is not None
    words = "split kv: the two halves of the keys combined by the library's own function"
    shape = twin.inputs.shape
    half = dataclasses.replace(shape, kv_len=shape.kv_len // 2)
    declined = ctx.capabilities.admits(
        half, ctx.case.spec, ctx.dtype, "forward", ctx.case.features, ctx.case.config
    )
    if declined:
        reasons = "; ".join(e.text for e in declined)
        return _Part(
            "split_kv", "unsupported", f"split kv: a half of {half.kv_len} keys is declined ({reasons})"
        )
    out, error = call(twin.inputs, ContractCall("split_kv"))
    if isinstance(error, NotExpressible):
        return _Part("split_kv", "unsupported", f"split kv: {error}")
    if error is not None:
        return _Part("split_kv", "fail", f"{words}: raised {_first_line(error)}")
    return _judged_part("split_kv", words, _judged(ctx, out, twin))


def api_contract(ctx: CheckContext) -> Outcome:
    """Each promise ``Capabilities.api_contract`` declares, on this case (module docstring)."""
    contract = ctx.capabilities.api_contract
    member = optional_member(ctx.adapter, "contract_call")
    if contract is None or not callable(member):
        return unsupported(NO_MEMBER)
    call = _Caller(ctx, member)
    own, error = call(ctx.oracle.inputs, ContractCall("own"))
    if error is not None:
        reason = f"the own implementation through the contract call raised {_first_line(error)}"
        return Outcome("fail", reason, details={"parts": {"own": "fail"}})
    parts: list[_Part] = []
    if contract.fallback:
        parts += _fallback(ctx, call, contract, own)
    if contract.default:
        parts.append(_default(ctx, call, contract, own))
        parts += _default_in_other_dtypes(ctx, call)
    if contract.precision:
        request = ContractCall("own", precision="highest")
        parts.append(
            _argument(ctx, call, "float32", PRECISION_FEATURE, request, "precision=HIGHEST, float32")
        )
    if contract.logits_dtype:
        request = ContractCall("own", logits_dtype="float32")
        parts.append(
            _argument(ctx, call, "bfloat16", LOGITS_DTYPE_FEATURE, request, "logits_dtype=float32, bfloat16")
        )
    if contract.split_kv:
        parts.append(_split_kv(ctx, call))
    not_promised = [
        words
        for promised, words in (
            (contract.fallback, "no implementation list"),
            (contract.default, "no default implementation"),
            (contract.precision, "no precision argument"),
            (contract.logits_dtype, "no logits_dtype argument"),
            (contract.split_kv, "no combine of partial results over key ranges"),
        )
        if not promised
    ]
    return _outcome(parts, not_promised, contract.documentation)


def _outcome(parts: list[_Part], not_promised: list[str], documentation: str) -> Outcome:
    judgements = [j for p in parts for j in p.judgements]
    failing = [p for p in parts if p.verdict == "fail" or any(not j.passed for j in p.judgements)]
    lines = [p.sentence for p in failing]
    explained = [(p.name, j) for p in parts for j in p.judgements]
    lines += [f"{name}: {j.explain()}" for name, j in explained if not j.passed]
    lines += [p.sentence for p in parts if p not in failing]
    lines += [f"{name}: {j.explain()}" for name, j in explained if j.passed and not j.weak]
    lines += [f"{name}: {j.explain_weak()}" for name, j in explained if j.passed and j.weak]
    if not_promised:
        lines.append(f"not observed, the API documents {', '.join(not_promised)} ({documentation})")
    verdicts = {p.name: "fail" if p in failing else p.verdict for p in parts}
    # the record keeps numbers only: how many parts ended each way; the names are in the reason
    counts = {f"parts_{v}": sum(x == v for x in verdicts.values()) for v in ("pass", "fail", "unsupported")}
    details = {"parts": verdicts, **counts}
    metrics = tuple(j.metrics for j in judgements)
    if failing:
        verdict: Verdict = "fail"
    elif any(p.verdict == "pass" for p in parts):
        verdict = "pass"
    else:
        verdict = "unsupported"
    return Outcome(verdict, "\n".join(lines), metrics, details=details)
