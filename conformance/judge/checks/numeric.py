"""Numeric checks against the float64 reference under the tolerance policy:
``forward`` (out), ``lse``, ``backward`` (dq, dk, dv, dbias, dsinks).

Fully masked rows are left out here (their value is a convention, judged by
``fully_masked``); gradients use a dout that is zero on those rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from conformance.judge.checks.base import CheckContext, Outcome, failed, from_judgements
from conformance.judge.dtypes import name_of
from conformance.judge.tolerance import judge
from kernels.contract import features


def unobserved(gradient: features.Gradient) -> str:
    """The reason's line for a gradient the reference has and the subject does not declare."""
    return (
        f"{gradient.tensor} not observed: the subject declares no {gradient.tensor} "
        f"(Capabilities.{gradient.declared_by})"
    )


def _shape_mismatch(name: str, got: np.ndarray | None, want: np.ndarray) -> str | None:
    if got is None:
        return f"{name} is missing (None)"
    if np.shape(got) != np.shape(want):
        return f"{name} has shape {tuple(np.shape(got))}, expected {tuple(np.shape(want))}"
    return None


def forward(ctx: CheckContext) -> Outcome:
    """out [B, Hq, Sq, Dv] on rows that see some key: subject vs baseline vs float64."""
    got, ref = ctx.run.forward, ctx.oracle.reference
    problem = _shape_mismatch("out", got.out, ref.out)
    if problem:
        return failed(problem)
    valid = ctx.oracle.valid_rows[..., None]
    base = ctx.baseline.out  # the floors are ulps of the dtype out ends in (fp8 inputs: may be bf16)
    return from_judgements([judge("out", got.out, ref.out, base, name_of(base.dtype), valid)])


def lse(ctx: CheckContext) -> Outcome:
    """lse [B, Hq, Sq] (natural log of the softmax denominator) on rows that see some key."""
    got, ref = ctx.run.forward, ctx.oracle.reference
    problem = _shape_mismatch("lse", got.lse, ref.lse)
    if problem:
        return failed(problem + "; the subject declares lse=True")
    valid = ctx.oracle.valid_rows
    # The baseline stores lse as the subject does (observed, never declared): in float32 where the
    # subject returns float32 or wider (``BaselineOutput.lse_wide``), else in the inputs' dtype
    # (float32 for fp8 inputs: no kernel keeps its lse in 8 bits). The floors are ulps of that dtype.
    wide = np.dtype(got.lse.dtype).kind == "f" and np.finfo(got.lse.dtype).eps <= np.finfo(np.float32).eps
    base = ctx.baseline.lse_wide if wide else ctx.baseline.lse
    return from_judgements([judge("lse", got.lse, ref.lse, base, name_of(base.dtype), valid)])


def backward(ctx: CheckContext) -> Outcome:
    """dq, dk, dv (and each feature's gradient where declared, ``kernels/contract/features.py``) of
    sum(out * dout), every element. A case whose input has a gradient the subject does not
    declare still judges dq, dk, dv, and says that gradient was not observed (in the reason,
    also when it passes)."""
    got, ref, base = ctx.run.gradients, ctx.oracle.reference_grads, ctx.baseline_grads
    tensors = [(n, getattr(got, n), getattr(ref, n), getattr(base, n)) for n in ("dq", "dk", "dv")]
    missing = []
    for gradient in features.gradients():
        name = gradient.tensor
        if getattr(ref, name) is None:
            continue
        if getattr(ctx.capabilities, gradient.declared_by):
            tensors.append((name, getattr(got, name), getattr(ref, name), getattr(base, name)))
        else:
            missing.append(unobserved(gradient))
    unobserved_text = "; ".join(missing)
    problems = [p for p in (_shape_mismatch(n, g, r) for n, g, r, _ in tensors) if p]
    if problems:
        return failed("; ".join([*problems, *missing]))
    cancel, recomputed = base.cancellation, base.recomputed_p
    outcome = from_judgements(
        [
            judge(
                name,
                g,
                r,
                b,
                ctx.dtype,
                cancellation=cancel.get(name, 0.0),
                recomputed_p=recomputed.get(name, 0.0),
            )
            for name, g, r, b in tensors
        ]
    )
    if unobserved_text:  # recorded with a pass too: the record says what the verdict did not cover
        outcome = dataclasses.replace(
            outcome, reason=(outcome.reason + "\n" if outcome.reason else "") + unobserved_text
        )
    return outcome
