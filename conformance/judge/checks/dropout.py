"""``dropout``: attention dropout judged against the float64 reference with the mask the call
realised (docs/semantics.md, "Dropout": the normalised weights times ``keep / (1 - rate)``).

What the mask is depends on how the API takes it (``Capabilities.dropout``):

* ``"mask"``: the suite draws ``keep`` from the case's seed and passes it; the realised mask is the
  one passed. The call is rerun on the same mask (bitwise the same answer).
* ``"key"``: the suite passes a seed; the kernel draws the mask. It is read back by probe calls
  under the same key: the case's q and k (so its logits, masks and blocks) with a V whose column c
  is one-hot on key ``c0 + c``, so each output column is one key's weight ``p_ij keep_ij / (1 - rate)``
  (``ceil(Sk / Dv)`` calls cover the keys). A weight reads as kept where it is not zero; where the
  float64 softmax gives it at least ``OBSERVABLE_P`` a zero is a drop for sure, and only those
  weights count below. The probe assumes the mask does not depend on the values: it is read a
  second time with q = 0 and must agree. The same key must give bitwise the same answer, another
  key another mask, and the share of weights dropped must pass an exact two-sided binomial test at
  ``rate`` with false-alarm probability ``FALSE_ALARM``.

Then out (and, where the case runs backward, dq, dk, dv of the call with the same mask or key) is
judged as ``forward`` and ``backward`` judge theirs, against the reference and the same-dtype
baseline both computed with the realised mask. A direction an implementation declares to reject
dropout (a ``ShapeConstraint`` on feature ``dropout``, basis ``raises``) must raise the declared
exception; a forward that does makes the check ``unsupported`` with the reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from conformance.judge import baseline as plain
from conformance.judge.baseline import numerics
from conformance.judge.binomial import acceptance_range, two_sided_p
from conformance.judge.checks.base import CheckContext, Outcome, failed, from_judgements, unsupported
from conformance.judge.dtypes import name_of
from conformance.judge.tolerance import Judgement, judge
from kernels.contract.base import ShapeConstraint
from kernels.contract.dropout import DROPOUT_FEATURE, DropoutRequest
from kernels.contract.optional_members import optional_member
from reference import ReferenceOutput, attention_backward, attention_forward
from reference.spec import AttentionInputs, Dropout

RATE = 0.25  # inexact in binary as 1 / (1 - rate) is: a kernel's rounding of the scale shows
FALSE_ALARM = 1e-6  # the binomial test's two-sided probability of failing a right kernel
# A float64 softmax weight at least this large reads as nonzero in every dtype a kernel writes
# (and is far from any underflow): a zero read there is a drop, not a rounding.
OBSERVABLE_P = 1e-6
NO_MEMBER = (
    "the subject declares Capabilities.dropout but its adapter has no dropout call "
    "(Adapter.dropout): there is no way to ask it for dropout"
)


@dataclasses.dataclass(frozen=True)
class _Declared:
    """The declared dropout rejections of this case, by direction."""

    forward: ShapeConstraint | None
    backward: ShapeConstraint | None


def _declared(ctx: CheckContext) -> _Declared:
    features = (*ctx.case.features, DROPOUT_FEATURE)

    def rejection(direction: str) -> ShapeConstraint | None:
        exclusions = ctx.capabilities.admits(
            ctx.oracle.inputs, ctx.case.spec, ctx.dtype, direction, features, ctx.case.config
        )
        return next(
            (
                e.constraint
                for e in exclusions
                if e.constraint is not None and e.raises and DROPOUT_FEATURE in e.constraint.features
            ),
            None,
        )

    return _Declared(rejection("forward"), rejection("backward"))


def _first_line(error: BaseException) -> str:
    """``Type ('its first line')``, or the type alone for an empty message."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__} ({text!r})" if text else type(error).__name__


def _rejected(call: Any, constraint: ShapeConstraint, direction: str) -> tuple[bool, str]:
    """(as declared, the sentence): the call must raise ``constraint``'s exception."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - what it raised is the observation
        if constraint.expects(error):
            return True, (
                f"dropout {direction} raised {_first_line(error)}, as declared ({constraint.name}: "
                f"{constraint.reason})"
            )
        return False, (
            f"dropout {direction} is declared to raise {constraint.exceptions} ({constraint.name}) "
            f"but raised {_first_line(error)}"
        )
    return False, (
        f"dropout {direction} is declared to raise ({constraint.name}: {constraint.reason}) but returned"
    )


def drawn_keep(ctx: CheckContext) -> np.ndarray:
    """``[B, Hq, Sq, Sk]`` bool drawn from the case's seed: each weight kept with ``1 - RATE``."""
    shape = ctx.oracle.inputs.shape
    rng = np.random.default_rng([ctx.case.seed, 0xD0])
    return rng.random((shape.batch, shape.q_heads, shape.q_len, shape.kv_len)) >= RATE


def _one_hot_values(inputs: AttentionInputs, first: int) -> np.ndarray:
    """V ``[B, Hkv, Sk, Dv]`` in v's dtype whose column c is 1 on key ``first + c`` (0 elsewhere)."""
    b, hkv, sk, dv = inputs.v.shape
    v = np.zeros((b, hkv, sk, dv), dtype=inputs.v.dtype)
    for c in range(min(dv, sk - first)):
        v[:, :, first + c, c] = 1
    return v


def observed_weights(call: Any, inputs: AttentionInputs, seed: int) -> np.ndarray:
    """``[B, Hq, Sq, Sk]`` float64: each weight ``p_ij keep_ij / (1 - rate)`` as the call under
    ``seed`` gives it, read by probes with one-hot V (``ceil(Sk / Dv)`` forward calls)."""
    b, hq, sq, _ = inputs.q.shape
    sk, dv = inputs.v.shape[2], inputs.v.shape[3]
    weights = np.zeros((b, hq, sq, sk))
    for first in range(0, sk, dv):
        probe = dataclasses.replace(inputs, v=_one_hot_values(inputs, first))
        out = np.asarray(call(probe, DropoutRequest(RATE, seed=seed)).out, dtype=np.float64)
        width = min(dv, sk - first)
        weights[..., first : first + width] = out[..., :width]
    return weights


def softmax_weights(inputs: AttentionInputs, spec: Any) -> np.ndarray:
    """``[B, Hq, Sq, Sk]``: the float64 softmax weights (out of the reference with V the identity)."""
    b, hkv, sk, _ = inputs.k.shape
    eye = np.broadcast_to(np.eye(sk), (b, hkv, sk, sk))
    return attention_forward(dataclasses.replace(inputs, v=eye), spec).out


@dataclasses.dataclass(frozen=True)
class _Realised:
    """The mask a call realised (``keep``), and what the key-driven reading found wrong."""

    keep: np.ndarray
    problems: tuple[str, ...] = ()
    details: tuple[tuple[str, object], ...] = ()


def _read_by_key(ctx: CheckContext, call: Any, seed: int) -> _Realised:
    """The mask drawn under ``seed``, read back (``observed_weights``), with the key's checks:
    values-independence, another key another mask, the rate's binomial test."""
    inputs, spec = ctx.oracle.inputs, ctx.case.spec
    keep = observed_weights(call, inputs, seed) != 0
    observable = softmax_weights(inputs, spec) >= OBSERVABLE_P
    zero_q = dataclasses.replace(inputs, q=np.zeros_like(inputs.q))
    observable_zero_q = softmax_weights(zero_q, spec) >= OBSERVABLE_P
    keep_zero_q = observed_weights(call, zero_q, seed) != 0
    other = observed_weights(call, inputs, seed + 1) != 0
    problems = []
    both = observable & observable_zero_q
    moved = int(np.count_nonzero((keep != keep_zero_q) & both))
    if moved:
        problems.append(
            f"the mask depends on the values: with q = 0 under the same key {moved} of "
            f"{int(both.sum())} weights readable both ways are kept or dropped otherwise (the probe "
            "that reads the mask assumes it does not, so the judgement below is not of this mask)"
        )
    n = int(observable.sum())
    if n and np.array_equal(keep[observable], other[observable]):
        problems.append(f"another key ({seed + 1}) drew the same mask on all {n} readable weights")
    dropped = int(np.count_nonzero(~keep & observable))
    p_value = two_sided_p(dropped, n, RATE) if n else 1.0
    if p_value < FALSE_ALARM:
        low, high = acceptance_range(n, RATE, FALSE_ALARM)
        problems.append(
            f"{dropped} of {n} readable weights dropped ({dropped / n:.4f}), rate {RATE}: the exact "
            f"two-sided binomial test gives p = {p_value:.3g} < {FALSE_ALARM:g} (a right kernel drops "
            f"{low} to {high} with probability 1 - {FALSE_ALARM:g})"
        )
    details = (("dropped", dropped), ("readable", n), ("binomial_p", p_value))
    return _Realised(keep, tuple(problems), details)


def _judged_forward(ctx: CheckContext, out: np.ndarray, dropout: Dropout, ref: ReferenceOutput) -> Judgement:
    inputs, spec = ctx.oracle.inputs, ctx.case.spec
    base = plain.forward(inputs, spec, numerics(ctx.capabilities, ctx.dtype), dropout).out
    valid = ctx.oracle.valid_rows[..., None]
    return judge("out", out, ref.out, base, name_of(base.dtype), valid)


def _judged_gradients(
    ctx: CheckContext, grads: Any, dropout: Dropout, forward: ReferenceOutput
) -> list[Judgement]:
    inputs, spec, dout = ctx.oracle.inputs, ctx.case.spec, ctx.oracle.dout
    ref = attention_backward(inputs, dout, spec, forward, dropout)
    base = plain.gradients(inputs, spec, dout, numerics(ctx.capabilities, ctx.dtype), dropout)
    return [
        judge(
            name,
            getattr(grads, name),
            getattr(ref, name),
            getattr(base, name),
            ctx.dtype,
            cancellation=base.cancellation.get(name, 0.0),
            recomputed_p=base.recomputed_p.get(name, 0.0),
        )
        for name in ("dq", "dk", "dv")
    ]


def dropout(ctx: CheckContext) -> Outcome:
    """out (and dq, dk, dv where the case runs backward) with dropout at ``RATE``, against the
    reference with the realised mask; a rerun bitwise; for a drawn mask, the key's checks too."""
    member = optional_member(ctx.adapter, "dropout")
    if not callable(member):
        return unsupported(NO_MEMBER)
    inputs, spec = ctx.oracle.inputs, ctx.case.spec
    declared = _declared(ctx)
    by_key = ctx.capabilities.dropout == "key"
    seed = ctx.case.seed
    request = DropoutRequest(RATE, seed=seed) if by_key else DropoutRequest(RATE, keep=drawn_keep(ctx))

    def call(inputs: AttentionInputs, request: DropoutRequest, dout: Any = None) -> Any:
        return member(inputs, spec, request, dout) if dout is not None else member(inputs, spec, request)

    if declared.forward is not None:
        as_declared, sentence = _rejected(lambda: call(inputs, request), declared.forward, "forward")
        return unsupported(sentence) if as_declared else failed(sentence)
    out = np.asarray(call(inputs, request).out)
    again = np.asarray(call(inputs, request).out)
    problems = []
    if out.tobytes() != again.tobytes():
        differ = int(np.count_nonzero(out != again))
        problems.append(
            f"the same {'key' if by_key else 'mask'} gave another out on a rerun ({differ} elements)"
        )
    realised = _read_by_key(ctx, call, seed) if by_key else _Realised(request.keep)
    problems += realised.problems
    mask = Dropout(realised.keep, RATE)
    reference = attention_forward(inputs, spec, mask)
    judgements = [_judged_forward(ctx, out, mask, reference)]
    notes = []
    if ctx.backward:
        if declared.backward is not None:
            as_declared, sentence = _rejected(
                lambda: call(inputs, request, ctx.oracle.dout), declared.backward, "backward"
            )
            (notes if as_declared else problems).append(sentence)
        else:
            judgements += _judged_gradients(ctx, call(inputs, request, ctx.oracle.dout), mask, reference)
    outcome = from_judgements(judgements)
    kept = float(np.mean(realised.keep))
    details = {"rate": RATE, "kept_share": kept, **dict(realised.details)}
    reason = "\n".join(x for x in (*problems, outcome.reason, *notes) if x)
    verdict = "fail" if problems else outcome.verdict
    return dataclasses.replace(outcome, verdict=verdict, reason=reason, details=details)
