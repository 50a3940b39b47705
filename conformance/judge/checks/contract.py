"""The call contract: ``shape_dtype`` of every output, ``no_mutation`` of the inputs, and
``raises`` for cases the adapter declares the implementation rejects."""

from __future__ import annotations

import numpy as np

from conformance.judge.checks.base import CheckContext, Outcome, failed, passed
from conformance.judge.dtypes import name_of
from kernels.contract import features

LSE_DTYPES = ("float32", "float64")


def _expect(name: str, got: object, shape: tuple[int, ...], dtypes: tuple[str, ...]) -> str | None:
    if not isinstance(got, np.ndarray):
        return f"{name} is a {type(got).__name__}, expected a NumPy array of shape {shape}"
    problems = []
    if got.shape != shape:
        problems.append(f"shape {got.shape}, expected {shape}")
    if name_of(got.dtype) not in dtypes:
        problems.append(f"dtype {name_of(got.dtype)}, expected {' or '.join(dtypes)}")
    return f"{name} has " + " and ".join(problems) if problems else None


def shape_dtype(ctx: CheckContext) -> Outcome:
    """out [B, Hq, Sq, Dv] in the input dtype, or the output dtype the subject declares for it
    (``Capabilities.output_dtypes``: an fp8 kernel writing bf16); lse [B, Hq, Sq] in float32/64
    or out's dtype; each gradient in its input's shape and dtype."""
    c, got = ctx.case, ctx.run.forward
    out_dtype = ctx.capabilities.output_dtype(c.dtype)
    problems = [_expect("out", got.out, (c.batch, c.q_heads, c.q_len, c.v_head_dim), (out_dtype,))]
    if ctx.capabilities.lse:
        lse_dtypes = tuple(dict.fromkeys((c.dtype, out_dtype, *LSE_DTYPES)))
        problems.append(_expect("lse", got.lse, (c.batch, c.q_heads, c.q_len), lse_dtypes))
    if ctx.backward:
        grads, inputs = ctx.run.gradients, ctx.oracle.inputs
        for name, source in (("dq", inputs.q), ("dk", inputs.k), ("dv", inputs.v)):
            problems.append(_expect(name, getattr(grads, name), source.shape, (c.dtype,)))
        for gradient in features.gradients():
            source = getattr(inputs, gradient.input)
            if source is not None and getattr(ctx.capabilities, gradient.declared_by):
                problems.append(
                    _expect(gradient.tensor, getattr(grads, gradient.tensor), source.shape, (c.dtype,))
                )
    found = [p for p in problems if p]
    return failed("; ".join(found)) if found else passed()


def no_mutation(ctx: CheckContext) -> Outcome:
    """Every input array (and dout) is bitwise unchanged after forward and gradients."""
    ctx.run.forward  # noqa: B018 - raises SubjectError if the call failed
    problems = []
    if ctx.run.forward_call.mutated:
        problems.append(f"forward wrote into its inputs {list(ctx.run.forward_call.mutated)}")
    if ctx.backward:
        ctx.run.gradients  # noqa: B018
        if ctx.run.gradients_call.mutated:
            problems.append(f"gradients wrote into its inputs {list(ctx.run.gradients_call.mutated)}")
    return failed("; ".join(problems)) if problems else passed()


def raises(ctx: CheckContext) -> Outcome:
    """A case outside a constraint with basis ``raises`` must raise, not return garbage; and where
    the broken constraints name the exception (``ShapeConstraint.exceptions``), raise that one."""
    call = ctx.run.forward_call if ctx.direction == "forward" else ctx.run.gradients_call
    outside = ctx.capabilities.admits(
        ctx.case.skeleton(), ctx.case.spec, ctx.case.dtype, ctx.direction, ctx.case.features, ctx.case.config
    )
    violated = [e.constraint for e in outside if e.raises and e.constraint is not None]
    if call.error is not None:
        raised = f"{ctx.direction} raised {type(call.error).__name__}: {str(call.error)[:200]}"
        if violated and not any(c.expects(call.error) for c in violated):
            expected = sorted({name for c in violated for name in c.exceptions})
            return failed(
                f"{raised}; the adapter declares that constraint(s) {[c.name for c in violated]} make it "
                f"raise {' or '.join(expected)}: any other exception is a finding, not that rejection"
            )
        return passed(raised)
    return failed(
        f"{ctx.direction} returned normally, but the adapter declares that constraint(s) "
        f"{[c.name for c in violated]} make it raise; fix the declaration or the input validation"
    )
