"""Copy-pasteable repro scripts for a failing (check, case).

``script`` gives a standalone one (``conformance/judge/standalone.py``: NumPy, JAX and the
subject's own module, nothing of this checkout) wherever it can. Otherwise, and for the
checks a standalone script cannot observe (``recompile``, ``leak``, ...), it gives one that
runs from the checkout: it rebuilds the case from its fields (``Case`` is a plain frozen
dataclass whose repr is valid Python), so the inputs are bit-identical to the failing
run's, calls the subject by the name ``--impl`` used, and prints what the check saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.judge import standalone
from conformance.plan.cases import Case
from conformance.suite.check_registry import CheckDeclaration
from run_records.results_file import TensorMetrics

_HEADER = '''"""Repro: the {check} check of {case_id}.
Not standalone ({why}): run it from the attention-conformance checkout:  python repro.py"""
from conformance.suite.check_registry import CheckDeclaration
from conformance.plan.cases import Case
'''

_FORWARD = """from conformance.judge import baseline
from conformance.judge.inputs import build_inputs
from conformance.judge.tolerance import judge
from kernels.registry import resolve
from kernels.contract.tunables import configured
from reference import attention_forward

case = {case!r}
inputs = build_inputs(case)  # q, k, v, bias already in {dtype}; masks as arrays
subject = configured(resolve({impl!r}), case.config)  # case.config: tunables
got = subject.forward(inputs, case.spec)
ref = attention_forward(inputs, case.spec)  # float64 reference on the same values
model = baseline.numerics(subject.capabilities(), case.dtype)  # what it declares it rounds (fp8)
base = baseline.forward(inputs, case.spec, model)  # plain one-pass attention at {dtype} precision
valid = ~ref.fully_masked  # rows that see at least one key
floors_in = str(base.{tensor}.dtype)  # ulps of the dtype the tensor ends in (fp8 inputs: lse float32)
print(judge({tensor!r}, got.{tensor}, ref.{tensor}, base.{tensor}, floors_in, valid{extra}).explain())
"""

_BACKWARD = """from conformance.judge import baseline
from conformance.judge.inputs import build_dout, build_inputs
from conformance.judge.tolerance import judge
from kernels.registry import resolve
from kernels.contract.tunables import configured
from reference import attention_backward, attention_forward

case = {case!r}
inputs = build_inputs(case)  # q, k, v, bias already in {dtype}
ref_out = attention_forward(inputs, case.spec)
dout = build_dout(case, ref_out.fully_masked)  # zero on fully masked rows
subject = configured(resolve({impl!r}), case.config)
got = subject.gradients(inputs, case.spec, dout)
ref = attention_backward(inputs, dout, case.spec, ref_out)  # float64
model = baseline.numerics(subject.capabilities(), case.dtype)  # what it declares it rounds (fp8)
base = baseline.gradients(inputs, case.spec, dout, model)  # plain attention's gradients at {dtype} precision
for name in ("dq", "dk", "dv", "dbias", "dsinks"):
    if getattr(ref, name) is not None and getattr(got, name) is not None:
        print(judge(name, getattr(got, name), getattr(ref, name), getattr(base, name), case.dtype,
                    cancellation=base.cancellation.get(name, 0.0),
                    recomputed_p=base.recomputed_p.get(name, 0.0)).explain())
"""

_GENERIC = """import os

from conformance.suite.host_devices import set_host_devices

set_host_devices(os.environ)  # the suite's simulated CPU devices, before JAX starts (sharded's mesh)
from conformance.judge.runner import run_check  # noqa: E402

case = {case!r}
outcome = run_check(case, {check!r}, impl={impl!r})
print(outcome.verdict)
print(outcome.reason)
"""


def script(
    case: Case,
    check: CheckDeclaration,
    impl: str,
    *,
    adapter: Any = None,
    recorded: Iterable[TensorMetrics] = (),
    reason: str = "",
    versions: str = "",
    minimal: Case | None = None,
    gradients: bool = False,
) -> str:
    """The repro script for ``check`` on ``case``; ``impl`` is the name ``resolve`` takes.

    Standalone when ``adapter`` can describe its call (``standalone.supports``): for ``case``
    itself, whose judged ``recorded`` metrics hold the tolerances it embeds. Otherwise the
    checkout script, for ``minimal`` (a smaller failing case from shrinking) when given.
    ``gradients``: the case's backward pass ran (verdict checks looked at it too).
    """
    why = "this subject's adapter has no standalone() call" if adapter is not None else "no adapter here"
    if adapter is not None and standalone.supports(check, adapter):
        try:
            return standalone.script(case, check, adapter, recorded, reason, versions, gradients)
        except Exception as error:  # a repro must never cost the run its record
            why = f"writing it failed: {type(error).__name__}: {error}"
    elif adapter is not None and check.repro == "suite_only":
        why = f"the {check.name} check observes the suite's own machinery"
    return _checkout_script(minimal or case, check, impl, why.replace('"', "'"))


def _checkout_script(case: Case, check: CheckDeclaration, impl: str, why: str) -> str:
    head = _HEADER.format(check=check.name, case_id=case.case_id, why=why)
    fields = {"case": case, "impl": impl, "dtype": case.dtype, "check": check.name}
    if check.repro == "out_tensor":
        return head + _FORWARD.format(tensor="out", extra="[..., None]", **fields)
    if check.repro == "lse_tensor":
        return head + _FORWARD.format(tensor="lse", extra="", **fields)
    if check.repro == "gradient_tensors":
        return head + _BACKWARD.format(**fields)
    return head + _GENERIC.format(**fields)
