"""What every JAX-based adapter needs: the installed version, lazy imports, array
conversion, a per-adapter cache of compiled functions, and a check of what ran.

Nothing here imports JAX at module import time: an adapter module must import
cleanly on a machine without JAX so that ``availability()`` can say why it is
unavailable instead of crashing the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from packaging.version import InvalidVersion, Version

from kernels.contract.base import Availability


@functools.cache  # read per call by tokamax's adapters (1.3% of a worker's time): fixed for a process
def installed_version(distribution: str) -> str | None:
    """The installed version string of ``distribution``, or None when it is missing."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.4.38"`` -> ``(0, 4, 38)``: the release numbers of the PEP 440 version (``packaging``,
    as ``reports.jax_versions`` reads it); ``rc1``, ``.dev20250101`` or ``+cpu`` are dropped;
    ``()`` when not PEP 440."""
    try:
        return Version(version).release
    except InvalidVersion:
        return ()


def jax_version() -> tuple[int, ...]:
    """The installed JAX version as a tuple; ``()`` when JAX is not installed."""
    version = installed_version("jax")
    return () if version is None else version_tuple(version)


def installed_jax_versions() -> tuple[tuple[str, str], ...]:
    """(("jax", ...), ("jaxlib", ...)) for ``Availability.versions``."""
    return tuple((name, installed_version(name) or "missing") for name in ("jax", "jaxlib"))


def import_modules(*names: str) -> list[Any]:
    """Import each module by name; the caller turns an ImportError into an Availability."""
    return [importlib.import_module(name) for name in names]


def unavailable_because(error: BaseException, what: str) -> Availability:
    """An Availability that names the failing import or call in one sentence."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    return Availability(
        available=False,
        reason=f"{what} failed on this installation: {type(error).__name__}: {message}",
        versions=installed_jax_versions(),
    )


def default_backend() -> str:
    """``"cpu"``, ``"gpu"`` or ``"tpu"``: the platform JAX runs on here."""
    import jax

    return jax.default_backend()


def to_jax(x: np.ndarray | None) -> Any:
    """A NumPy array (any dtype, including ml_dtypes' bfloat16) as a JAX array; None stays None."""
    if x is None:
        return None
    import jax.numpy as jnp

    return jnp.asarray(x)


def to_numpy(x: Any) -> np.ndarray:
    """A JAX array as a NumPy array of the same dtype."""
    return np.asarray(x)


@dataclasses.dataclass(frozen=True)
class TracedPrimitives:
    """The primitive names of one traced call, nested jaxprs included, in order: what ran.

    An adapter whose trace holds no ``pallas_call`` has fallen back to something else, and
    its ``ran`` sentence must say so."""

    names: tuple[str, ...]

    @classmethod
    def of(cls, jaxpr: Any) -> TracedPrimitives:
        """From a ``ClosedJaxpr`` (``make_jaxpr``) or a ``Jaxpr`` (``jit(f).trace(...).jaxpr``
        on JAX >= 0.12)."""
        inner = getattr(jaxpr, "jaxpr", jaxpr)
        return cls(tuple(eqn.primitive.name for eqn in _iter_equations(inner)))

    def count(self, name_prefix: str) -> int:
        """How many equations' primitive names start with ``name_prefix``."""
        return sum(1 for name in self.names if name.startswith(name_prefix))


def count_primitives(fn: Callable[..., Any], args: tuple[Any, ...], name_prefix: str) -> int:
    """How many equations whose primitive name starts with ``name_prefix`` tracing
    ``fn(*args)`` produces, nested jaxprs included (a trace of its own: ``jit_observed``
    reads the same from the trace that runs)."""
    import jax

    return TracedPrimitives.of(jax.make_jaxpr(fn)(*args)).count(name_prefix)


def jit_observed(
    fn: Callable[..., Any], args: tuple[Any, ...], describe: Callable[[TracedPrimitives], str]
) -> Compiled:
    """``fn`` jitted, with the sentence ``describe`` writes from the primitives it traces to.

    The call is traced once: ``jit(fn).trace(*args)`` says what ran, and JAX keeps that trace
    on the jitted function, so its first call on arrays shaped like ``args`` (in the same
    context, e.g. TPU interpret mode) lowers and compiles it without tracing again. (JAX 0.8 to
    0.12 also share a ``make_jaxpr`` trace of the same function with ``jit``; this makes it one
    trace by construction, in one place, for every adapter.)"""
    import jax

    jitted = jax.jit(fn)
    return Compiled(jitted, describe(TracedPrimitives.of(jitted.trace(*args).jaxpr)))


def _iter_equations(jaxpr: Any):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                yield from _iter_equations(sub)


def _sub_jaxprs(value: Any):
    """Jaxprs hidden in an equation's params (pjit, custom_vjp, cond branches, scan bodies)."""
    values = value if isinstance(value, tuple | list) else (value,)
    for item in values:
        inner = getattr(item, "jaxpr", None)
        if inner is not None and hasattr(inner, "eqns"):
            yield inner
        elif hasattr(item, "eqns"):
            yield item


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A jitted function and the sentence that says what it runs (``SubjectOutput.ran``)."""

    fn: Callable[..., Any]
    ran: str


# The axes of the mesh the ``sharded`` check places a call on, in the order it gives out devices; a
# library's own sharding entry (``JaxCall.own_sharding``) names them in its own layout.
MESH_AXES = ("batch", "heads", "sequence")


@dataclasses.dataclass(frozen=True)
class JaxCall:
    """An adapter's call as JAX sees it: ``fn(*args)`` returns the canonical outputs, ``(out,
    lse)`` forward or ``(dq, dk, dv, dbias)`` backward (``args`` then end with ``dout``), and runs
    inside ``context()`` (TPU interpret mode is a tracing-time setting).

    It is what a check transforms the way users do (``jax.vmap`` adds a leading axis to every
    array in ``batched``: each one's axis 0 is the case's batch; ``sharded`` places them over a
    mesh, reading a batched 4-D array as ``[B, H, S, ...]``: q, k, v, dout, a bias or mask). The adapter's own
    ``forward``/``gradients`` run this same call, so what is transformed is what was judged.

    ``no_vmap``: where set, why ``jax.vmap`` of this call cannot be judged here, a limit of the
    context it runs in (an interpreter) or of the call's form (an input built into the function per
    batch row), not a batching rule's answer: the ``vmap`` check is unsupported with it.

    ``heads``: each array's head axis (None for one without heads: segment ids, lengths), where the
    call says so: what ``vmap`` along heads splits. None as a whole: undeclared (an array built
    from the case, a quantized leaf), so the call is not put under ``jax.vmap`` along heads.

    ``own_sharding``: where the library shards the call itself (tokamax's ``q_sharding``), the
    function of the same arrays that asks it to, given a ``jax.sharding.Mesh`` whose axes are
    ``MESH_AXES``; the ``sharded`` check runs it on the same placement as ``fn``.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    batched: tuple[bool, ...]
    context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    no_vmap: str = ""
    heads: tuple[int | None, ...] | None = None
    own_sharding: Callable[[Any], Callable[..., Any]] | None = None

    def __post_init__(self) -> None:
        if len(self.batched) != len(self.args):
            raise ValueError(f"JaxCall: {len(self.args)} args but {len(self.batched)} batched flags")
        if self.heads is not None and len(self.heads) != len(self.args):
            raise ValueError(f"JaxCall: {len(self.args)} args but {len(self.heads)} head axes")


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledCache:
    """Compiled functions of one adapter instance, keyed by shapes, dtypes and static options.

    It lives on the adapter (never at module level), so two adapters never share
    or evict each other's entries, and dropping the adapter frees its compilations.
    """

    entries: dict[Hashable, Compiled] = dataclasses.field(default_factory=dict)

    def get(self, key: Hashable, build: Callable[[], Compiled]) -> Compiled:
        if key not in self.entries:
            self.entries[key] = build()
        return self.entries[key]

    def run(
        self, key: Hashable, call: JaxCall, describe: Callable[[TracedPrimitives], str]
    ) -> tuple[tuple[np.ndarray | None, ...], str]:
        """``call`` inside its context, jitted once per ``key`` and its arguments' shapes and dtypes
        (``jit_observed``): its outputs as NumPy arrays (None stays None) and what ran."""
        with call.context():
            compiled = self.get(
                (key, *array_key(*call.args)), lambda: jit_observed(call.fn, call.args, describe)
            )
            result = compiled.fn(*call.args)
            return tuple(None if r is None else to_numpy(r) for r in result), compiled.ran

    def __len__(self) -> int:
        return len(self.entries)


def array_key(*arrays: np.ndarray | None) -> tuple[Hashable, ...]:
    """Shapes and dtypes of the arrays (None for absent ones): the traced part of a cache key."""
    return tuple(None if a is None else (a.shape, str(a.dtype)) for a in arrays)
