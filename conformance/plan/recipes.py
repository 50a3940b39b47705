"""Recipes: how each input array of a case is drawn, written once and read twice.

A ``Recipe`` names an array, the pure draw of ``conformance/plan/draws.py`` that makes it and
that draw's arguments: literals, named case constants (``SEED``, ``B``, ``HQ``, ...: ``Name``)
and numbers the case decides (``Of``). The suite *evaluates* a recipe with the case's values
(``run``: ``conformance/judge/inputs.py::build_inputs``); a standalone repro script *renders*
the same recipe as a statement (``statements``: ``conformance/judge/standalone.py``), so the
script calls the very draw the suite called, with the same arguments, and cannot drift from it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

from conformance.plan.cases import Case

KINDS = ("float", "int", "bool")


@dataclasses.dataclass(frozen=True)
class Name:
    """An argument the script defines by name: ``key`` in the values the suite passes
    (``case_values``), written ``text`` in the script (``key`` itself unless given)."""

    key: str
    text: str = ""

    @property
    def written(self) -> str:
        return self.text or self.key


@dataclasses.dataclass(frozen=True)
class Of:
    """An argument the case decides (a bias's shape, a dtype's sentinel): ``fn(case)``, written in
    the script as the literal it evaluates to."""

    fn: Callable[[Case], Any]


# The case constants a standalone script defines (``standalone._case_block``). The salt is always 0
# there: a script reproduces the suite's first draw; the recompilation and determinism checks' fresh
# draws (salt != 0) are never scripted.
SEED, SALT = Name("SEED"), Name("SALT", "0")
B, HQ, HKV, SQ, SK, D, DV = (Name(n) for n in ("B", "HQ", "HKV", "SQ", "SK", "D", "DV"))


def case_values(case: Case, salt: int = 0) -> dict[str, Any]:
    """The values of the named constants for ``case`` (``salt``: fresh values, same shapes)."""
    return {
        "SEED": case.seed,
        "SALT": salt,
        "B": case.batch,
        "HQ": case.q_heads,
        "HKV": case.kv_heads,
        "SQ": case.q_len,
        "SK": case.kv_len,
        "D": case.head_dim,
        "DV": case.v_head_dim,
    }


@dataclasses.dataclass(frozen=True)
class Call:
    """``fn(*args)``: a draw of ``conformance/plan/draws.py`` (plain NumPy, so a script embeds its
    source) and its positional arguments (literals, ``Name``, ``Of``, or tuples of them)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


def _always(case: Case) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Fill:
    """A post-step where the case has it (``when``): ``array[where] = value``, ``where`` a boolean
    array drawn by its own call (a bias fill's -inf over a kv block)."""

    where: Call
    value: Of
    when: Callable[[Case], bool] = _always
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One input array (or a pair one draw returns together: ``names``) of a case.

    kind:    float (cast to the subject's dtype), int or bool;
    call:    the draw that makes it, where the case has it (``when``), else it is None;
    fill:    a post-step on the drawn array;
    helpers: other draws the call's source calls (a script embeds them too);
    note:    a comment after the script's statement (``Of``-like: ``case -> str``, or a string).
    """

    names: tuple[str, ...]
    kind: str
    call: Call
    when: Callable[[Case], bool] = _always
    fill: Fill | None = None
    helpers: tuple[Callable[..., Any], ...] = ()
    note: str | Callable[[Case], str] = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"recipe {self.names}: kind {self.kind!r} is not one of {KINDS}")


def value(arg: Any, case: Case, values: dict[str, Any]) -> Any:
    """An argument's value for ``case`` (``values``: ``case_values`` and any extra names)."""
    if isinstance(arg, Name):
        return values[arg.key]
    if isinstance(arg, Of):
        return arg.fn(case)
    if isinstance(arg, tuple):
        return tuple(value(a, case, values) for a in arg)
    return arg


def run(call: Call, case: Case, values: dict[str, Any]) -> Any:
    """What the call returns for ``case``."""
    return call.fn(*(value(a, case, values) for a in call.args))


def _tuple(parts: list[str]) -> str:
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def literal(x: Any) -> str:
    """Python source for a plain value (a non-finite float as ``float('-inf')``)."""
    if isinstance(x, float) and not math.isfinite(x):
        return f"float('{x!r}')"
    if isinstance(x, tuple):
        return _tuple([literal(e) for e in x])
    return repr(x)


def _text(arg: Any, case: Case) -> str:
    if isinstance(arg, Name):
        return arg.written
    if isinstance(arg, Of):
        return literal(arg.fn(case))
    if isinstance(arg, tuple):
        return _tuple([_text(a, case) for a in arg])
    return literal(arg)


def call_text(call: Call, case: Case) -> str:
    """The call as script source. Trailing arguments equal to the draw's own defaults are left
    out (the script reads as the draw is usually called); their values are the same."""
    args = list(call.args)
    params = list(inspect.signature(call.fn).parameters.values())
    while args and len(args) <= len(params):
        param = params[len(args) - 1]
        last = args[-1]
        if param.default is inspect.Parameter.empty or isinstance(last, Name | tuple):
            break
        if value(last, case, {}) != param.default:
            break
        args.pop()
    return f"{call.fn.__name__}({', '.join(_text(a, case) for a in args)})"


def _comment(note: str | Callable[[Case], str], case: Case) -> str:
    text = note(case) if callable(note) else note
    return f"  # {text}" if text else ""


def build(recipe: Recipe, case: Case, values: dict[str, Any]) -> dict[str, Any]:
    """name -> array (None where the case has none) for ``recipe``, evaluated for ``case``."""
    if not recipe.when(case):
        return dict.fromkeys(recipe.names)
    made = run(recipe.call, case, values)
    arrays = dict(zip(recipe.names, made if len(recipe.names) > 1 else (made,), strict=True))
    if recipe.fill is not None and recipe.fill.when(case):
        (name,) = recipe.names
        arrays[name][run(recipe.fill.where, case, values)] = value(recipe.fill.value, case, values)
    return arrays


def statements(recipe: Recipe, case: Case) -> list[str]:
    """``recipe`` as script statements for ``case`` (``name = None`` where the case has none)."""
    if not recipe.when(case):
        return [f"{' = '.join(recipe.names)} = None"]
    lines = [f"{', '.join(recipe.names)} = {call_text(recipe.call, case)}{_comment(recipe.note, case)}"]
    if recipe.fill is not None and recipe.fill.when(case):
        (name,) = recipe.names
        fill = recipe.fill
        lines.append(
            f"{name}[{call_text(fill.where, case)}] = {_text(fill.value, case)}{_comment(fill.note, case)}"
        )
    return lines


def functions(recipe: Recipe, case: Case) -> list[Callable[..., Any]]:
    """The draws a script embeds for ``recipe`` on ``case`` (none where the case has no array)."""
    if not recipe.when(case):
        return []
    out = [*recipe.helpers, recipe.call.fn]
    if recipe.fill is not None and recipe.fill.when(case):
        out.append(recipe.fill.where.fn)
    return out
