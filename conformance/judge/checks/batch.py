"""``batch_invariance``: a request's answer does not depend on the other requests of its batch.

A server batches requests it did not choose together, so a request must get the same bits
whether it runs among others or alone. ``determinism`` reruns the same batch and the numeric
checks allow rounding, so a kernel that takes a softmax statistic over the whole batch, orders
its reduction by the batch size, or reads a neighbour's row stays within tolerance and passes
both. This check cuts the last request out of the case (``Case.request``: batch 1, its own
lengths; ``inputs.request_inputs``: its rows of every batched array, the very same bits), runs
it alone, and compares bitwise with its rows of the batch's forward (the run's own, already
computed), and of its gradients where the case runs backward.

The last request, because an offset or a row shift shows on it (row 0 starts at offset 0 in
any layout), and a kernel that mixes requests changes every row of the batch.
"""

from __future__ import annotations

import numpy as np

from conformance.judge.artifacts import call_forward, call_gradients
from conformance.judge.bitwise import bitwise_diff
from conformance.judge.checks.base import CheckContext, Outcome, failed, passed, unsupported
from conformance.judge.inputs import BATCH_INPUTS, request_inputs
from conformance.plan.cases import Case
from kernels.contract import features
from kernels.contract.base import Capabilities

ONE_REQUEST = (
    "batch 1: there is no other request whose presence could change this one's answer "
    "(the check runs on cases with batch >= 2)"
)
PAIR = "{a} in the batch, {b} alone"


def _outside(caps: Capabilities, case: Case, direction: str) -> str | None:
    """Why ``case`` is outside what ``caps`` declares for ``direction``, or None. A constraint only
    the hardware's compiler enforces (stage ``lowering``) runs in the interpreter, as the planner
    has it (``catalogue._against_declaration``)."""
    outside = caps.admits(case.skeleton(), case.spec, case.dtype, direction, case.features, case.config)
    texts = [e.text for e in outside if e.constraint is None or e.constraint.stage != "lowering"]
    return "; ".join(texts) or None


def _defined(x: np.ndarray | None, dead: np.ndarray, convention: str) -> np.ndarray | None:
    """``x`` with the rows that see no key zeroed where the subject leaves them unspecified (a
    kernel may skip them and return whatever its buffer held): only defined values are compared."""
    if x is None or convention != "unspecified" or not dead.any():
        return x
    kept = np.array(x, copy=True)
    kept[dead] = 0
    return kept


def batch_invariance(ctx: CheckContext) -> Outcome:
    """The last request of the batch, run alone, gets bitwise the outputs (and gradients) it got
    in the batch."""
    case = ctx.case
    if case.batch < 2:
        return unsupported(ONE_REQUEST)
    why = features.not_per_request(case)
    if why:
        return unsupported("; ".join(why))
    b = case.batch - 1
    alone = case.request(b)
    outside = _outside(ctx.capabilities, alone, "forward")
    if outside:
        return unsupported(f"request {b} alone (batch 1) is outside the declaration: {outside}")
    inputs = request_inputs(case, ctx.oracle.inputs, b)
    single = call_forward(ctx.adapter, alone, inputs).get("forward")
    batch = ctx.run.forward
    between = f"request {b} in the batch of {case.batch} and alone"
    convention = ctx.capabilities.fully_masked_rows
    dead = ctx.oracle.reference.fully_masked[b : b + 1]
    problems = [
        bitwise_diff(
            name,
            _defined(None if got is None else got[b : b + 1], dead, convention),
            _defined(own, dead, convention),
            between,
            PAIR,
        )
        for name, got, own in (("out", batch.out, single.out), ("lse", batch.lse, single.lse))
    ]
    compared = ["out"] + (["lse"] if batch.lse is not None else [])
    notes = []
    if ctx.backward:
        outside = _outside(ctx.capabilities, alone, "backward")
        if outside:
            notes.append(f"gradients not compared: alone, it is outside the backward declaration: {outside}")
        else:
            grads = ctx.run.gradients
            own = call_gradients(ctx.adapter, alone, inputs, ctx.oracle.dout[b : b + 1]).get("gradients")
            per_request = ["dq", "dk", "dv"]
            for gradient in features.gradients():
                given = getattr(ctx.oracle.inputs, gradient.input)
                if getattr(grads, gradient.tensor) is None or given is None:
                    continue
                if gradient.input in BATCH_INPUTS and given.shape[0] == case.batch:
                    per_request.append(gradient.tensor)
                else:
                    # An input shared by the batch (sinks, a broadcast bias) gets the sum of every
                    # request's gradient: alone, the request's share only.
                    notes.append(f"{gradient.tensor} not compared: {gradient.input} is shared by the batch")
            problems += [
                bitwise_diff(name, getattr(grads, name)[b : b + 1], getattr(own, name), between, PAIR)
                for name in per_request
            ]
            compared += per_request
    found = [p for p in problems if p]
    details = {"request": b, "batch": case.batch, "compared": ",".join(compared)}
    if found:
        return failed("\n".join(found + notes), **details)
    summary = f"request {b} of {case.batch} alone: {', '.join(compared)} bitwise identical"
    return passed("; ".join([summary, *notes]), **details)
