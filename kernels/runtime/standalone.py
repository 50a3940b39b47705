"""How a self-contained repro script calls a subject exactly as its adapter does.

An adapter that offers ``standalone(inputs, spec) -> StandaloneCall`` keeps its translation
(canonical case -> kernel call) in small module-level functions that use only JAX and
NumPy; a JAX adapter describes its call once (``kernels/runtime/call_description.py``), runs
that description and renders this from it, and the script generator
(``conformance/judge/standalone.py``) embeds the result. The script then runs the very code the
suite ran, and the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from reference.spec import AttentionInputs

# The names a StandaloneCall's statements read (NumPy arrays, None when the case has none; sinks
# [Hq] in the case dtype): a call's arrays, which the script draws under their own names
# (``conformance/judge/inputs.py::RECIPES``). It must set the outputs (dsinks: only a subject that
# returns d(sinks), whose Capabilities.sinks_grad makes the script judge it).
INPUT_NAMES = tuple(f.name for f in dataclasses.fields(AttentionInputs))
FORWARD_SETS = ("out", "lse")
GRADIENT_SETS = ("dq", "dk", "dv", "dbias", "dsinks")


@dataclasses.dataclass(frozen=True)
class StandaloneCall:
    """A subject's call as script text.

    imports: import lines (e.g. ``import jax``), in order;
    definitions: source of the adapter's own translation functions and constants;
    setup: statements run once before the calls (e.g. loading the kernel module);
    forward: statements that read ``INPUT_NAMES`` and set ``out`` and ``lse`` (NumPy; lse None
        when the subject exposes none);
    gradients: statements that also read ``dout`` and set dq, dk, dv, dbias (and dsinks, see
        GRADIENT_SETS); None without a backward;
    note: what runs, in words (a comment at the top of the script).
    """

    imports: tuple[str, ...]
    definitions: tuple[str, ...]
    forward: str
    setup: str = ""
    gradients: str | None = None
    note: str = ""


def source_of(*objects: Callable[..., Any] | type) -> tuple[str, ...]:
    """The dedented source of each function or class, as the script embeds it."""
    return tuple(_source(obj) for obj in objects)


@functools.lru_cache(maxsize=1024)  # every repro of a run embeds the same few dozen functions
def _source(obj: Callable[..., Any] | type) -> str:
    return textwrap.dedent(inspect.getsource(obj)).rstrip() + "\n"
