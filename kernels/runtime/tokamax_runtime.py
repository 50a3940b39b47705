"""How tokamax's kernels run here: its release, the contexts that let its Pallas kernels run in an
interpreter on a CPU, and the small shims that need. None of them changes a value the kernel
computes; each says which interpreter limit or host quirk it works around, and from which
tokamax (or JAX) release.

* **absl flags.** From tokamax 0.0.10 every config read (``tokamax.config.*.value``) parses the
  host's ``sys.argv`` with absl when absl's flags are unparsed, so under pytest or
  ``python -m conformance --impl ...`` the first call raises ``UnrecognizedFlagError`` (fixed
  upstream after 0.0.12). ``absl_flags_parsed`` marks them parsed, with their defaults, before
  the first call; a host that parsed its own flags keeps them.
* **Generic Pallas interpreter (Triton kernels).** tokamax's Triton ``pallas_call`` takes no
  ``interpret=``; JAX reads its Pallas interpret-mode config (the one
  ``force_tpu_interpret_mode`` sets) in every ``pallas_call``. ``generic_interpret`` sets it to
  ``True``, the generic interpreter. ``tokamax.config.cross_compile(True)`` lets the Triton op
  pass its ``supported_on`` check off a GPU.
* **Grid indices read once (Triton kernels in the generic interpreter).** JAX's generic interpreter
  replaces ``pl.program_id`` by the grid indices only at a kernel's top level; tokamax's Triton
  kernels read it inside loop and cond bodies too (causal, lengths, windows, masks, the backward's
  last partial block), where it has no CPU lowering ("NotImplementedError: MLIR translation rule
  for primitive 'program_id'"). ``hoisted_program_ids`` reads every grid index once at the top
  of each kernel traced inside it and gives those values to every later ``pl.program_id`` call
  of that kernel: the same indices, so the same values.
* **TPU interpret mode (Mosaic TPU kernels).** ``pltpu.force_tpu_interpret_mode()``; the ops'
  ``supported_on`` asks for a TPU of generation >= 5, so the adapter runs subclasses that
  answer True (``interpretable_op``).
* **Remat optimisation.** ``Op.__call__`` declares its custom VJP with ``optimize_remat=True``;
  JAX refuses that for a forward function with IO effects, and the TPU interpreter's callbacks
  have them ("remat optimization for custom_vjp does not support forward functions with these
  side effects"). ``remat_optimization_off`` makes ``custom_vjp.defvjp`` ignore the flag while
  the call is traced: the optimisation only decides whether the forward is recomputed inside
  the backward; the forward and backward functions, and so the values, are the same.

Nothing here imports JAX or tokamax at module import time. A standalone repro script embeds
``interpreter_context`` and what it calls (and ``interpretable_op``) verbatim.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
from collections.abc import Iterator
from typing import Any

from kernels.runtime.jax_runtime import installed_jax_versions, installed_version, version_tuple

DISTRIBUTION = "tokamax"
# tokamax 0.0.10 registers Mosaic TPU attention, reads absl flags inside the call and resolves
# "mosaic" by device kind; the adapter is written against 0.0.10 to 0.0.17 (kernels/adapters/tokamax.py).
OLDEST = (0, 0, 10)


def tokamax_version() -> tuple[int, ...]:
    """The installed tokamax release as a tuple; ``()`` when it is not installed."""
    version = installed_version(DISTRIBUTION)
    return () if version is None else version_tuple(version)


def availability_versions() -> tuple[tuple[str, str], ...]:
    """The versions a tokamax subject's ``Availability`` names: JAX's, and tokamax's ("missing"
    where it is not installed)."""
    return (*installed_jax_versions(), (DISTRIBUTION, installed_version(DISTRIBUTION) or "missing"))


def absl_flags_parsed() -> None:
    """Mark absl's flags parsed (defaults kept) unless the host parsed them: tokamax >= 0.0.10
    otherwise parses ``sys.argv`` itself inside the first call and raises on pytest's options."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


@contextlib.contextmanager
def generic_interpret() -> Iterator[None]:
    """Every ``pallas_call`` traced inside runs in JAX's generic Pallas interpreter, through the
    interpret-mode config ``force_tpu_interpret_mode`` also sets (JAX >= 0.7: jax._src.config).
    It is part of the jit key, so a compiled call stays compiled for this mode."""
    from jax._src import config

    setting = config.pallas_tpu_interpret_mode_context_manager
    previous = setting.swap_local(True)
    try:
        yield
    finally:
        setting.set_local(previous)


@contextlib.contextmanager
def hoisted_program_ids() -> Iterator[None]:
    """While inside, every ``pl.pallas_call`` kernel reads its grid indices once at its top level,
    and ``pl.program_id(axis)`` anywhere in it returns that value (see the module docstring). An
    axis past the grid raises ValueError, as ``pl.program_id`` does (tokamax counts the axes so).
    Patches ``jax.experimental.pallas.program_id``/``pallas_call`` (what tokamax calls) until exit."""
    import jax.experimental.pallas as pl
    from jax._src.pallas import core as pallas_core

    real_program_id, real_pallas_call = pl.program_id, pl.pallas_call
    # The grid indices of the kernel being traced; None outside one. Local to this function, so
    # that a standalone script that embeds it has it too.
    grid_indices: contextvars.ContextVar[tuple[Any, ...] | None] = contextvars.ContextVar(
        "tokamax_grid_indices", default=None
    )

    def program_id(axis: int) -> Any:
        indices = grid_indices.get()
        if indices is None:
            return real_program_id(axis)
        if not 0 <= axis < len(indices):
            raise ValueError(f"Axis {axis} is out of bounds for a grid of {len(indices)} axes")
        return indices[axis]

    def pallas_call(kernel: Any, *args: Any, **kwargs: Any) -> Any:
        @functools.wraps(kernel)
        def with_indices(*refs: Any, **keywords: Any) -> Any:
            axes = len(tuple(pallas_core.axis_frame().grid))
            token = grid_indices.set(tuple(real_program_id(axis) for axis in range(axes)))
            try:
                return kernel(*refs, **keywords)
            finally:
                grid_indices.reset(token)

        return real_pallas_call(with_indices, *args, **kwargs)

    pl.program_id, pl.pallas_call = program_id, pallas_call
    try:
        yield
    finally:
        pl.program_id, pl.pallas_call = real_program_id, real_pallas_call


@contextlib.contextmanager
def remat_optimization_off() -> Iterator[None]:
    """``jax.custom_vjp.defvjp(..., optimize_remat=True)`` declared while inside is declared with
    False (see the module docstring); restored on exit. Only tracing needs it."""
    import jax

    original = jax.custom_vjp.defvjp

    def defvjp(self: Any, fwd: Any, bwd: Any, symbolic_zeros: bool = False, optimize_remat: bool = False):
        del optimize_remat  # the interpreter's IO effects forbid it; values do not depend on it
        return original(self, fwd, bwd, symbolic_zeros=symbolic_zeros, optimize_remat=False)

    jax.custom_vjp.defvjp = defvjp
    try:
        yield
    finally:
        jax.custom_vjp.defvjp = original


@contextlib.contextmanager
def interpreter_context(execution: str) -> Iterator[None]:
    """The context every trace and call of a tokamax op runs in for ``execution``: ``"generic"``
    (Triton kernels: ``cross_compile``, the generic interpreter, grid indices hoisted), ``"tpu"``
    (Mosaic TPU kernels: TPU interpret mode, the VJP's remat optimisation off) or ``"native"``
    (nothing)."""
    with contextlib.ExitStack() as stack:
        if execution == "generic":
            tokamax = importlib.import_module("tokamax")
            stack.enter_context(tokamax.config.cross_compile(True))
            stack.enter_context(generic_interpret())
            stack.enter_context(hoisted_program_ids())
        elif execution == "tpu":
            from jax.experimental.pallas import tpu as pltpu

            stack.enter_context(pltpu.force_tpu_interpret_mode())
            stack.enter_context(remat_optimization_off())
        yield


def _supported_anywhere(self: Any, device: Any) -> bool:
    del self, device
    return True


@functools.cache
def _interpretable(cls: type) -> type:
    """One subclass per op class, made once: tokamax caches per op type (its pydantic argument
    spec, its autotuning lookups), so a new class per call grew the host heap by 172 KiB a call
    (the leak check, tokamax[impl=mosaic_tpu] and [impl=triton] in bfloat16)."""
    return type(f"Interpreted{cls.__name__}", (cls,), {"supported_on": _supported_anywhere})


def interpretable_op(op_class: type, vjp_class: type | None) -> tuple[type, type | None]:
    """Subclasses of a tokamax op (and its VJP op) whose ``supported_on`` is True on any device:
    the originals ask for the kernel's hardware, which an interpreter stands in for."""
    return _interpretable(op_class), None if vjp_class is None else _interpretable(vjp_class)
