"""One syntax for a built-in subject with options: ``NAME[key=value,key=value]``.

``--impl "tpu_flash[interpreter=tpu]"`` runs the TPU flash kernel through Pallas's TPU
interpret mode instead of the generic interpreter. The same text is the subject's name
everywhere a name appears: the case ids (``tpu_flash[interpreter=tpu]-float32-...``), the
records, the report, the gate's pairing of base and candidate subjects and repro scripts,
so two variants of one kernel are two subjects that never mix.

Options equal to the adapter's default are dropped from the name, so ``tpu_flash`` and
``tpu_flash[interpreter=generic]`` are the same subject; keys are sorted, so the name does
not depend on the order they were written in. Values stay strings: every built-in option
so far is a choice among names (an adapter's ``OPTIONS``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

_SPEC = re.compile(r"^(?P<base>[^\[\]=,]+?)\s*(?:\[(?P<options>[^\[\]]*)\])?$")
_KEY = re.compile(r"^[A-Za-z_]\w*$")


class SubjectSyntaxError(ValueError):
    """Text that is not ``NAME`` or ``NAME[key=value,...]``; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class SubjectSpec:
    """A subject name and its options (sorted ``(key, value)`` pairs)."""

    base: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        if not self.options:
            return self.base
        return f"{self.base}[{','.join(f'{key}={value}' for key, value in self.options)}]"

    def without_defaults(self, defaults: Mapping[str, str]) -> SubjectSpec:
        """The same subject with the options that equal the adapter's defaults left out."""
        kept = tuple((k, v) for k, v in self.options if defaults.get(k) != v)
        return dataclasses.replace(self, options=kept)


def parse_subject(text: str) -> SubjectSpec:
    """``"tpu_flash[interpreter=tpu]"`` -> SubjectSpec("tpu_flash", (("interpreter", "tpu"),))."""
    text = text.strip()
    match = _SPEC.match(text)
    if match is None:
        raise SubjectSyntaxError(
            f"{text!r}: write a subject as NAME or NAME[key=value,...], e.g. tpu_flash[interpreter=tpu]"
        )
    options: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (match["options"] or "").split(","))):
        key, equals, value = (s.strip() for s in part.partition("="))
        if not equals or not _KEY.match(key) or not value:
            raise SubjectSyntaxError(
                f"{text!r}: option {part!r} must read key=value, e.g. tpu_flash[interpreter=tpu]"
            )
        if key in options:
            raise SubjectSyntaxError(f"{text!r}: option {key!r} is given twice; give it once")
        options[key] = value
    if match["options"] is not None and not options:
        raise SubjectSyntaxError(f"{text!r}: empty brackets; drop them or write [key=value]")
    return SubjectSpec(match["base"].strip(), tuple(sorted(options.items())))


def split_subjects(text: str) -> list[str]:
    """``"tpu_flash[interpreter=tpu],xla"`` -> ["tpu_flash[interpreter=tpu]", "xla"]: commas
    inside brackets separate options, not subjects."""
    names, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SubjectSyntaxError(f"{text!r}: a ']' without its '['")
        if char == "," and depth == 0:
            names.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SubjectSyntaxError(f"{text!r}: a '[' without its ']'")
    names.append("".join(current))
    return [name.strip() for name in names if name.strip()]
