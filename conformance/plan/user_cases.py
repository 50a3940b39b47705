"""``--case``: a case of the user's own, checked for every subject next to the catalogue.

    --case "B=1,Hq=4,Hkv=2,Sq=128,Sk=256,D=64,causal=bottom_right,dtype=bfloat16"

Keys (all optional; defaults are ``conformance.plan.cases.Case``'s): ``B Hq Hkv Sq Sk D Dv``
sizes, ``dtype``, ``input`` = normal | large | integers | nan_padding, and each feature's
keys as ``kernels/contract/features.py`` declares them (``causal`` = top_left | bottom_right | no,
``window`` = LEFT:RIGHT, ``q_lengths`` = ``100/128``, ...; an unknown key's error lists them all).

A case is parsed and validated here, once, with ``reference.spec.validate``: a case that
cannot exist (Hq not a multiple of Hkv, a mask that does not broadcast, a length past
Sk) stops the run with one line naming the problem. Each subject then gets the case
filed like any other (``catalogue.classify``): outside its declared capabilities it
is ``unsupported`` with its reason.
"""

from __future__ import annotations

from conformance.plan.case_syntax import EXAMPLE, CaseSyntaxError, bound, parse_case
from conformance.plan.cases import Case
from conformance.plan.catalogue import Planned, classify
from conformance.plan.subjects import Subject
from conformance.suite.check_registry import REGISTRY

# leak repeats calls many times and is planned for one small case per subject; not for these.
USER_CHECKS = tuple(d.name for d in REGISTRY if d.on_user_cases)

__all__ = ["EXAMPLE", "USER_CHECKS", "CaseSyntaxError", "extend_plan", "parse_case"]


def extend_plan(
    planned: dict[str, tuple[Planned, ...]], subjects: tuple[Subject, ...], cases: tuple[Case, ...]
) -> dict[str, tuple[Planned, ...]]:
    """``planned`` plus each user case for each available subject (ids already planned are kept once)."""
    out = {check: list(items) for check, items in planned.items()}
    for check in USER_CHECKS:
        seen = {p.case.case_id for p in out.get(check, ())}
        for subject in subjects:
            if not subject.available:
                continue
            for template in cases:
                case = bound(template, subject.name, subject.capabilities)
                item = classify(check, case, subject.capabilities)
                if item is not None and case.case_id not in seen:
                    out.setdefault(check, []).append(item)
                    seen.add(case.case_id)
    return {check: tuple(items) for check, items in out.items()}
