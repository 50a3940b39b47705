"""``--case``: a case of the user's own, checked for every subject next to the catalogue.

    --case "B=1,Hq=4,Hkv=2,Sq=128,Sk=256,D=64,causal=bottom_right,dtype=bfloat16"

Keys (all optional; defaults are ``conformance.plan.cases.Case``'s):
``B Hq Hkv Sq Sk D Dv`` sizes; ``dtype``; ``causal`` = top_left | bottom_right | no;
``window`` = LEFT:RIGHT (``inf`` for an unbounded side; the diagonal follows
``align`` = top_left | bottom_right); ``softcap``, ``scale`` numbers; ``bias``,
``mask`` broadcast patterns over ``bhqk`` such as ``1h1k``; ``segments`` count;
``q_lengths``, ``kv_lengths`` one length per batch row, ``/``-separated (``100/128``);
``input`` = normal | large | integers | nan_padding; ``sinks`` = normal | extreme | no
(one sink logit per query head, drawn as ``conformance.plan.draws.draw_sinks`` says).

A case is parsed and validated here, once, with ``reference.spec.validate``: a case that
cannot exist (Hq not a multiple of Hkv, a mask that does not broadcast, a length past
Sk) stops the run with one line naming the problem. Each subject then gets the case
filed like any other (``catalogue.classify``): outside its declared capabilities it
is ``unsupported`` with its reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.plan.cases import SINK_KINDS, Case
from conformance.plan.catalogue import Planned, classify
from conformance.plan.subjects import Subject
from conformance.suite.check_registry import REGISTRY
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
    "segments": "segments",
}
_ALIGNMENTS = ("top_left", "bottom_right", "bottom_right_valid")
# leak repeats calls many times and is planned for one small case per subject; not for these.
USER_CHECKS = tuple(d.name for d in REGISTRY if d.on_user_cases)


class CaseSyntaxError(ValueError):
    """A --case that cannot be read or cannot exist; the message names the problem and the fix."""


def _number(key: str, value: str, kind: type = int) -> Any:
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise CaseSyntaxError(f"{key}={value!r} is not {what}") from None


def _fields(text: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    align = None
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise CaseSyntaxError(f"{part!r} is not KEY=VALUE")
        if key in _SIZES:
            fields[_SIZES[key]] = _number(key, value)
        elif key == "dtype":
            fields["dtype"] = value
        elif key == "causal":
            if value in _ALIGNMENTS:
                fields.update(causal=True, alignment=value)
            elif value not in ("no", "false", "0"):
                raise CaseSyntaxError(f"causal={value!r}: use top_left, bottom_right or no")
        elif key == "align":
            align = value
        elif key == "window":
            left, colon, right = value.partition(":")
            if not colon:
                raise CaseSyntaxError(f"window={value!r}: write LEFT:RIGHT, e.g. 64:0 or inf:0")
            fields["window"] = tuple(
                None if e in ("inf", "none", "") else _number(key, e) for e in (left, right)
            )
        elif key in ("softcap", "scale"):
            fields[key] = _number(key, value, float)
        elif key in ("bias", "mask"):
            fields[key] = value
        elif key in ("q_lengths", "kv_lengths"):
            fields[key] = tuple(_number(key, n) for n in value.split("/"))
        elif key == "input":
            fields["input_kind"] = value
        elif key == "sinks":
            if value in SINK_KINDS:
                fields["sinks"] = value
            elif value not in ("no", "false", "0"):
                raise CaseSyntaxError(f"sinks={value!r}: use {', '.join(SINK_KINDS)} or no")
        else:
            known = [
                *_SIZES,
                "dtype",
                "causal",
                "align",
                "window",
                "softcap",
                "scale",
                "bias",
                "mask",
                "q_lengths",
                "kv_lengths",
                "input",
                "sinks",
            ]
            raise CaseSyntaxError(f"unknown key {key!r}; keys are {', '.join(known)}")
    if align is not None:
        if align not in _ALIGNMENTS:
            raise CaseSyntaxError(f"align={align!r}: use top_left, bottom_right or bottom_right_valid")
        fields["alignment"] = align
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
                case = dataclasses.replace(
                    template, subject=subject.name, kv_storage=subject.capabilities.kv_storage
                )
                item = classify(check, case, subject.capabilities)
                if item is not None and case.case_id not in seen:
                    out.setdefault(check, []).append(item)
                    seen.add(case.case_id)
    return {check: tuple(items) for check, items in out.items()}
