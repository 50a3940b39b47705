"""``config_applied``: the kernel ran the config the case asked for.

A config that silently does not apply makes every verdict on it meaningless: the case says
``block_q=64`` and the kernel tiles q by 128 (a wrapper that drops the config, a library that
swaps in its autotuned one per device kind). So the check does not take the adapter's word for
it: it reads the grid and block shapes of the ``pallas_call``s in the trace of the case's own
call (``kernels/hardware/lowering.py``: ``TracedKernel``, traced once with the lowering the ``lowers``
check shares), and compares each tunable the config names with the block dimension its
adapter declares it sets (``Tunable.blocks``). A tunable that no block spec carries (a loop
step inside a kernel, a flag) cannot be read back: a config of only such tunables is
``unsupported``, never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from conformance.judge.artifacts import SubjectError
from conformance.judge.checks.base import CheckContext, Outcome, failed, passed, unsupported
from kernels.contract.tunables import Config, Tunable, Tunables, Value
from kernels.hardware.lowering import TracedKernel


def config_applied(ctx: CheckContext) -> Outcome:
    """Every tunable the case's config names, and that a block spec shows, tiles its kernel by
    the requested value in every traced direction's pallas_calls that it declares."""
    tunables = ctx.capabilities.tunables
    directions = ("forward", "backward") if ctx.backward else ("forward",)
    shown = [p for p in _named(tunables, ctx.case.config) if p.blocks]
    if not shown:
        hidden = ", ".join(name for name, _ in ctx.case.config) or "nothing (the default config)"
        return unsupported(
            f"the config sets {hidden}, which no pallas_call block spec shows (a loop step inside a "
            "kernel, a flag or a choice): there is no block to read back; an adapter declares the "
            "block dimension a tunable sets in Tunable.blocks"
        )
    traces = {d: _traced(ctx, d) for d in directions}
    unreadable = unnamed_operands(traces)
    if unreadable:
        return unsupported(unreadable)
    problems, notes = compare(tunables, ctx.case.config, traces)
    details = {"kernels_traced": sum(len(k) for k in traces.values()), "tunables_read": len(notes)}
    traced = "; ".join(
        f"{d}: " + (", ".join(f"{k.name} grid {list(k.grid)}" for k in kernels) or "no pallas_call")
        for d, kernels in traces.items()
    )
    if problems:
        return failed("\n".join(problems) + f"\n  traced {traced}", **details)
    if not notes:
        return unsupported(
            "every block the config names sizes the backward pass, which this case does not run "
            f"({', '.join(p.name for p in shown)})"
        )
    return passed("; ".join(notes) + f" (traced {traced})", **details)


def unnamed_operands(traces: Mapping[str, tuple[TracedKernel, ...]]) -> str | None:
    """Why no block of these kernels can be read by its operand, or None when every one can."""
    unnamed = sorted({k.name for kernels in traces.values() for k in kernels if not k.operands_named})
    if not unnamed:
        return None
    return (
        f"this JAX's Pallas names the blocks of {', '.join(unnamed)} after kernel parameters, not "
        "operand positions (JAX < 0.5): no block can be told apart to read the config back"
    )


def compare(
    tunables: Tunables, config: Config, traces: Mapping[str, tuple[TracedKernel, ...]]
) -> tuple[list[str], list[str]]:
    """(problems, notes) of ``config`` against the traced kernels of each direction run.

    A named tunable with declared blocks must show its value (times its unit, clipped to the
    array) at each declared place in every traced kernel of that name, and in one at least; a
    backward one is skipped when no backward was traced."""
    resolved = tunables.resolved(config)
    problems, notes = [], []
    for p in _named(tunables, config):
        if not p.blocks or (p.backward and "backward" not in traces):
            continue
        places = [b for b in p.blocks if b.holds_under(resolved)]
        value = resolved[p.name]
        seen = 0
        for direction, kernels in traces.items():
            for kernel in kernels:
                for place in (b for b in places if b.matches(kernel.name)):
                    problem = _mismatch(p, value, place.operand, place.dim, kernel, direction)
                    if problem:
                        problems.append(problem)
                    seen += 1
        if not seen:
            names = {d: [k.name for k in ks] or ["no pallas_call"] for d, ks in traces.items()}
            problems.append(
                f"{p.name}={value}: no traced pallas_call named like "
                f"{sorted({b.kernel for b in places}) or 'any declared place'} (traced: {names}): the "
                "call ran other kernels than the tunable sizes, so the config cannot have applied "
                "(or Tunable.blocks names a kernel this version no longer has)"
            )
        else:
            notes.append(f"{p.name}={value} in {seen} block(s)")
    return problems, notes


def _named(tunables: Tunables, config: Config) -> list[Tunable]:
    """The tunables the config names (a value other than the default)."""
    return [tunables.get(name) for name, _ in config]


def _mismatch(
    p: Tunable, value: Value, operand: str, dim: int, kernel: TracedKernel, direction: str
) -> str | None:
    """Why ``kernel`` does not tile ``operand``'s dimension ``dim`` by ``value``; None when it does."""
    block = kernel.block(operand)
    where = f"{direction} kernel {kernel.name}"
    if block is None or not -len(block.block_shape) <= dim < len(block.block_shape):
        held = ", ".join(f"{b.origin} {list(b.block_shape)}" for b in kernel.blocks)
        return (
            f"{p.name}={value}: {where} has no blocked operand {operand} with a dimension {dim} "
            f"(its blocks: {held}); Tunable.blocks names a place this kernel does not have"
        )
    want = int(value) * p.unit
    if len(block.array_shape) == len(block.block_shape):
        want = min(want, block.array_shape[dim])  # a block no longer than its array
    got = block.block_shape[dim]
    if got == want:
        return None
    return (
        f"{p.name}={value}: {where} tiles {operand} by {got} along dimension {dim} (block "
        f"{list(block.block_shape)} of {list(block.array_shape)}, grid {list(kernel.grid)}), not "
        f"the requested {want}: the kernel ran another config than the case asked for"
    )


def _traced(ctx: CheckContext, direction: str) -> tuple[TracedKernel, ...]:
    """The direction's pallas_calls as traced for lowering; an error when nothing was traced."""
    lowering = ctx.run.lowering(direction)
    if not lowering.traced and not lowering.lowered:
        raise SubjectError(f"tracing the {direction} call", RuntimeError(lowering.error))
    return lowering.traced
