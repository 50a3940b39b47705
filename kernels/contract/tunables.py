"""Kernel tunables: the parameters a user may set that should not change the answer.

An adapter declares them in ``Capabilities.tunables`` (block sizes, a fused-backward flag)
with their legal space; a case carries a ``config`` (name -> value), and the empty config
is the implementation's own default. Legality here is what the API accepts regardless of
the shape; what the shape demands of the blocks (a block must divide the length, ...) is a
``ShapeConstraint`` that sees the config (``ShapeConstraint.sees_config``).

Stdlib only: the planner, the report and repro scripts all read it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from kernels.contract.optional_members import optional_member

Value = int | bool | str
Config = tuple[tuple[str, Value], ...]  # sorted (name, value) pairs, defaults left out: hashable
Axis = Literal["q", "kv", "batch", "flag", "choice"]
AXES: tuple[str, ...] = ("q", "kv", "batch", "flag", "choice")


@dataclasses.dataclass(frozen=True)
class BlockDim:
    """Where a tunable shows in the kernel as traced: dimension ``dim`` of the block shape
    (``BlockSpec.block_shape``) of operand ``operand`` of each ``pallas_call`` whose name
    ``kernel`` matches (a regular expression, searched: ``matches``); ``dim`` counts from the
    end when negative (``-2``: the rows of a ``[..., S, D]`` block), which
    holds when a wrapper vmaps a batch dimension in front.
    ``operand`` is the block's origin as Pallas names it: ``args[i]`` for the i-th operand of
    the call (scalar-prefetch operands counted), ``outputs[i]`` for an output (``outputs``
    when the call has one). The block there is the tunable's value times
    its ``unit``, clipped to the array (a kernel may clip a block to a shorter sequence).
    ``when``: (tunable, value) pairs the config must resolve to for this place to hold (a
    layout choice that moves the sequence dimension); empty: always.
    The ``config_applied`` check reads these (``kernels/hardware/lowering.py``: ``TracedKernel``)."""

    kernel: str
    operand: str
    dim: int
    when: tuple[tuple[str, Value], ...] = ()

    def matches(self, kernel_name: str) -> bool:
        """Whether a traced pallas_call is one of this place's kernels. A pattern, not a
        substring: some releases append the config to the name (splash at JAX 0.4.35:
        ``splash_mha_fwd_residuals_block_kv_dkv=256...``), where ``_dkv`` would also hit the forward."""
        return re.search(self.kernel, kernel_name) is not None

    def holds_under(self, resolved: Mapping[str, Value]) -> bool:
        """Whether this place applies to a config (every tunable's value, defaults filled in)."""
        return all(resolved.get(name) == value for name, value in self.when)

    def __post_init__(self) -> None:
        if not self.kernel or not self.operand:
            raise ValueError(
                f"BlockDim({self.kernel!r}, {self.operand!r}, {self.dim}): name a kernel (a pattern of its "
                "pallas_call name) and an operand ('args[0]', 'outputs[0]')"
            )
        try:
            re.compile(self.kernel)
        except re.error as error:
            raise ValueError(
                f"BlockDim kernel {self.kernel!r} is not a regular expression: {error}"
            ) from None  # noqa: E501


@dataclasses.dataclass(frozen=True)
class Tunable:
    """One parameter. A block is legal when it is a positive multiple of ``multiple_of``, at
    least ``minimum``, a power of two when ``power_of_two``, and divides the value of the
    block named by ``divides`` (a minor block inside its major one). A flag is True or False;
    a choice is one of ``choices`` (names, e.g. a parallelisation mode).

    axis: what the block tiles (``q``/``kv`` sequence, ``batch``), ``flag`` or ``choice``.
    backward: it sizes a backward kernel only (forward calls ignore it).
    unit: tokens per step of the value: 1 for a block counted in tokens, the page size for
    one counted in pages (a sequence of ``n`` tokens then spans ``ceil(n / unit)`` of them).
    blocks: where the value shows in the traced kernel (``BlockDim``: a pallas_call's block
    dimension); empty for a tunable no block spec carries (a loop step inside the kernel, a
    flag, a block of pages the kernel copies itself), which the ``config_applied`` check
    cannot observe and says so.
    """

    name: str
    default: Value
    axis: Axis
    backward: bool = False
    multiple_of: int = 1
    minimum: int = 1
    power_of_two: bool = False
    divides: str | None = None
    unit: int = 1
    choices: tuple[str, ...] = ()
    blocks: tuple[BlockDim, ...] = ()

    def __post_init__(self) -> None:
        if self.blocks and self.axis in ("flag", "choice"):
            raise ValueError(f"tunable {self.name!r}: a {self.axis} sets no block size; drop its blocks")
        if self.axis not in AXES:
            raise ValueError(f"tunable {self.name!r}: axis {self.axis!r} is not one of {AXES}")
        if self.unit < 1:
            raise ValueError(f"tunable {self.name!r}: unit {self.unit} must be a positive number of tokens")
        if (self.axis == "choice") != bool(self.choices) or (
            self.choices and self.default not in self.choices
        ):
            raise ValueError(
                f"tunable {self.name!r}: a choice (and only a choice) lists choices, its default among them"
            )

    def span(self, length: int) -> int:
        """How many of the value's units ``length`` (tokens, or the batch) takes: the value that
        covers it whole."""
        return length if self.axis == "batch" else max(1, -(-length // self.unit))

    @property
    def smallest(self) -> int:
        if self.axis in ("flag", "choice"):
            raise ValueError(f"{self.name} is a {self.axis}")
        value = max(self.minimum, self.multiple_of)
        while not self.legal_alone(value):
            value += 1
        return value

    def legal_alone(self, value: Any) -> bool:
        """Legal on its own (ignoring ``divides``)."""
        if self.axis == "flag":
            return isinstance(value, bool)
        if self.axis == "choice":
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum or value <= 0:
            return False
        if value % self.multiple_of:
            return False
        return not self.power_of_two or value & (value - 1) == 0

    def candidates(self, limit: int) -> tuple[int, ...]:
        """Legal values up to ``limit``: the smallest times powers of two, and ``limit`` itself
        when legal (a block as long as the whole sequence)."""
        out, value = [], self.smallest
        while value <= limit:
            out.append(value)
            value *= 2
        if self.legal_alone(limit):
            out.append(limit)
        return tuple(sorted(set(out)))


@dataclasses.dataclass(frozen=True)
class Tunables:
    """What an implementation lets a user tune, and the legal space of each parameter."""

    params: tuple[Tunable, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def get(self, name: str) -> Tunable:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"no tunable {name!r}; declared: {self.names}")

    def value(self, config: Mapping[str, Value] | Config, name: str) -> Value:
        """The value ``config`` gives ``name``, or its default."""
        return dict(config).get(name, self.get(name).default)

    def resolved(self, config: Mapping[str, Value] | Config) -> dict[str, Value]:
        """Every parameter's value under ``config`` (defaults filled in)."""
        given = dict(config)
        return {p.name: given.get(p.name, p.default) for p in self.params}

    def problems(self, config: Mapping[str, Value] | Config) -> tuple[str, ...]:
        """Why ``config`` is outside the declared space; empty when it is legal."""
        given = dict(config)
        unknown = sorted(set(given) - set(self.names))
        if unknown:
            return (f"config names {unknown}, which this subject does not declare (tunables: {self.names})",)
        values = self.resolved(given)
        out = []
        for p in self.params:
            value = values[p.name]
            if not p.legal_alone(value):
                out.append(f"{p.name}={value!r} is not legal ({_space(p)})")
            elif p.divides is not None and values[p.divides] % value:
                out.append(f"{p.name}={value} must divide {p.divides}={values[p.divides]}")
        return tuple(out)

    def length_boundaries(self, longest: int = 128) -> tuple[int, ...]:
        """Token lengths where the kernel's blocking of the key axis changes, from the declaration:
        each kv-axis block's unit when it is counted in pages (a page, ``unit > 1``) and its default
        in tokens (``default * unit``), up to ``longest``; sorted. A row length one short of, on or
        one past such a length is where page and block arithmetic goes wrong. Empty when the
        kernel declares no kv blocks."""
        out = set()
        for p in self.params:
            if p.axis == "kv" and isinstance(p.default, int) and not isinstance(p.default, bool):
                out |= {n for n in (p.unit if p.unit > 1 else None, p.default * p.unit) if n and n <= longest}
        return tuple(sorted(out))

    def normalized(self, config: Mapping[str, Value] | Config) -> Config:
        """``config`` as sorted pairs without the entries equal to their default."""
        return normalize({k: v for k, v in dict(config).items() if self.get(k).default != v})


def block_divides(block: int, length: int) -> bool:
    """Whether a block of ``block`` rows tiles ``length`` exactly: no larger than it and a divisor
    (the rule the Pallas TPU kernels and tokamax's check their blocks by; lengths are >= 1)."""
    return block <= length and length % block == 0


def normalize(config: Mapping[str, Value] | Config) -> Config:
    return tuple(sorted(dict(config).items()))


def _space(p: Tunable) -> str:
    if p.axis == "flag":
        return "True or False"
    if p.axis == "choice":
        return "one of " + ", ".join(p.choices)
    words = [f"a multiple of {p.multiple_of}"] if p.multiple_of > 1 else ["a positive integer"]
    if p.minimum > 1:
        words.append(f"at least {p.minimum}")
    if p.power_of_two:
        words.append("a power of two")
    return ", ".join(words)


def config_token(config: Config) -> str:
    """The case-id token of a config: ``cfg-bq64-bk128``; empty for the default config."""
    if not config:
        return ""
    return "-".join(["cfg", *(_param_token(name, value) for name, value in config)])


_ABBREVIATIONS = {"block": "b", "major": "maj", "compute": "c", "use": "", "kernel": "", "mode": ""}


def _param_token(name: str, value: Value) -> str:
    short = "".join(_ABBREVIATIONS.get(part, part) for part in name.split("_"))
    if isinstance(value, bool):
        return short if value else f"no{short}"
    return f"{short}{value}"


def configured(adapter: Any, config: Config) -> Any:
    """``adapter`` set to ``config`` (the adapter itself for the default config)."""
    if not config:
        return adapter
    configure = optional_member(adapter, "configured")
    if configure is None:
        raise TypeError(
            f"{adapter.name} declares tunables but has no configured(config) method; add one "
            "that returns a copy of the adapter using those values"
        )
    return configure(config)


class Configurable:
    """``configured(config)`` for an adapter dataclass with a ``config`` field, written once.

    The copy has ``config`` normalized against the tunables the adapter declares
    (``capabilities().tunables``: the declaration its cases are planned and judged by) and starts
    every private per-instance field (a leading ``_`` and a ``default_factory``: its compiled-call
    cache) afresh, so two configs never share compilations."""

    def configured(self, config: Mapping[str, Value] | Config) -> Any:
        """A copy that calls the kernel with ``config``'s tunables (and its own compile cache)."""
        tunables = self.capabilities().tunables  # type: ignore[attr-defined]
        fresh = {
            field.name: field.default_factory()
            for field in dataclasses.fields(self)  # type: ignore[arg-type]
            if field.name.startswith("_") and field.default_factory is not dataclasses.MISSING
        }
        return dataclasses.replace(self, config=tunables.normalized(config), **fresh)  # type: ignore[type-var]
