"""The ``--case`` syntax: one case as ``KEY=VALUE`` pairs, parsed and validated, and bound to a subject.

    B=1,Hq=4,Hkv=2,Sq=128,Sk=256,D=64,causal=bottom_right,dtype=bfloat16

Two readers: ``--case`` (``conformance/plan/user_cases.py``: a user's case beside the catalogue)
and a subject's own ci cases (``kernels/subjects.py``: ``Variant.ci_cases``, planned by
``conformance/plan/catalogue.py`` in place of its catalogue at ci). Keys: see ``user_cases``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.plan.cases import Case
from kernels.contract import features
from kernels.contract.base import Capabilities
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


def bound(template: Case, subject: str, caps: Capabilities) -> Case:
    """A parsed case as ``subject``'s: its name, and what a template leaves to the subject (its own
    K/V storage, a bias fill's kv block: ``features.subject_fields``, ``features.for_subject``)."""
    return dataclasses.replace(
        template,
        subject=subject,
        **features.subject_fields(caps),
        **features.for_subject(template, caps),
    )
