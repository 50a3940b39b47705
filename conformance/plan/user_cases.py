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

import dataclasses
from typing import Any

from conformance.plan.cases import Case
from conformance.plan.catalogue import Planned, classify
from conformance.plan.subjects import Subject
from conformance.suite.check_registry import REGISTRY
from kernels.contract import features
from reference.spec import validate

EXAMPLE = "B=1,Hq=4,Hkv=2,Sq=128,Sk=256,D=64,causal=bottom_right,dtype=bfloat16"
_SIZES = {
    "B": "batch",
    "Hq": "q_heads",
    "Hkv": "kv_heads",
    "Sq": "q_len",
    "Sk": "kv_len",
    "D": "head_dim",
    "Dv": "v_head_dim",
}
# leak repeats calls many times and is planned for one small case per subject; not for these.
USER_CHECKS = tuple(d.name for d in REGISTRY if d.on_user_cases)


class CaseSyntaxError(ValueError):
    """A --case that cannot be read or cannot exist; the message names the problem and the fix."""


def _number(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise CaseSyntaxError(f"{key}={value!r} is not an integer") from None


def _fields(text: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    feature_keys = features.parse_keys()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise CaseSyntaxError(f"{part!r} is not KEY=VALUE")
        if key in _SIZES:
            fields[_SIZES[key]] = _number(key, value)
        elif key == "dtype":
            fields["dtype"] = value
        elif key == "input":
            fields["input_kind"] = value
        elif key in feature_keys:
            try:
                fields.update(feature_keys[key](value))
            except features.FeatureSyntaxError as error:
                raise CaseSyntaxError(str(error)) from None
        else:
            known = [*_SIZES, "dtype", "input", *feature_keys]
            raise CaseSyntaxError(f"unknown key {key!r}; keys are {', '.join(known)}")
    fields.setdefault("v_head_dim", fields.get("head_dim", 64))
    return fields


def parse_case(text: str, dtypes: tuple[str, ...]) -> Case:
    """The case ``text`` describes (subject ``user``, set per subject later).
    Raises CaseSyntaxError with a one-line message naming the problem."""
    try:
        fields = _fields(text)
        case = Case(subject="user", dtype=fields.pop("dtype", "float32"), **fields)
        if case.dtype not in dtypes:
            raise CaseSyntaxError(f"dtype {case.dtype!r} is not one of {', '.join(dtypes)}")
        validate(case.skeleton())
    except CaseSyntaxError as error:
        raise CaseSyntaxError(f"--case {text!r}: {error}; e.g. --case {EXAMPLE!r}") from None
    except (ValueError, TypeError) as error:
        raise CaseSyntaxError(f"--case {text!r}: {error}") from None
    return case


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
                caps = subject.capabilities
                case = dataclasses.replace(
                    template,
                    subject=subject.name,
                    **features.subject_fields(caps),
                    **features.for_subject(template, caps),
                )
                item = classify(check, case, subject.capabilities)
                if item is not None and case.case_id not in seen:
                    out.setdefault(check, []).append(item)
                    seen.add(case.case_id)
    return {check: tuple(items) for check, items in out.items()}
