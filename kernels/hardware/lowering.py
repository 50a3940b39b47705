"""What a Pallas kernel becomes on its target hardware, seen from a CPU: the one place for it.

An interpreter accepts kernels that a TPU or GPU rejects (a block of 8 rows where Mosaic
tiles by 128 lanes, a Triton block that is not a power of two). Lowering the very call an
adapter makes, with the interpreter off, runs the compiler front end of the target: Mosaic's
TPU lowering (platform ``tpu``) or Pallas's Triton lowering (platform
``cuda``). Both run on a machine with neither device, in about 0.1 s a call.

What the lowered module tells:

* whether it lowers at all, and the error verbatim where it does not;
* each kernel's custom call: its ``kernel_name`` and, on TPU, the ``cost_estimate``
  (flops, transcendentals, bytes accessed) that XLA's scheduler and profilers read;
* each kernel's grid and block shapes as traced (``TracedKernel``: the one walker of the
  pallas_calls in a call's jaxpr), kept even when the hardware rejects the call: the
  ``config_applied`` check compares them with the config the case asked for;
* each Triton kernel's shared memory, estimated from its trace (``kernels/hardware/shared_memory.py``);
* each TPU kernel's VMEM footprint, estimated from the pallas_call as traced for lowering:
  every VMEM block operand times its buffer count (2 unless the block spec says otherwise:
  Pallas double-buffers its pipeline), plus VMEM scratch once, each padded to the TPU tile
  (sublanes of 8 x 32 bits, lanes of 128). Blocks left in HBM (``memory_space=ANY``), SMEM
  and semaphores take no VMEM. Mosaic's own internal scratch is not counted, so the
  estimate is a lower bound.

Kernels that ask the device what chip they run on (ragged paged attention's tuning table,
``pltpu.get_tpu_info``) lower under an abstract TPU device (``LoweringCall.device_kind``),
so no TPU is needed for them either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from kernels.contract.base import PLATFORMS, Platform
from kernels.hardware.shared_memory import SharedMemoryFootprint, estimate, itemsize, num_stages
from kernels.runtime.call_description import CallDescription, cache_key
from reference.spec import AttentionInputs

# The custom-call targets Pallas lowers to, per platform.
_TARGETS = {"tpu": "tpu_custom_call", "cuda": "__gpu$xla.gpu.triton"}

# TPU tiles: a 32-bit vreg is 8 sublanes x 128 lanes; narrower dtypes pack into sublanes.
LANES = 128
SUBLANES_32BIT = 8
# Pallas's pipeline keeps two buffers of each blocked operand (copy-in of the next step
# overlaps compute of this one) unless the block spec sets pipeline_mode=pl.Buffered(n).
DEFAULT_BUFFERS = 2
# The device kind an abstract TPU device reports when a call asks for one (TPU v5e).
DEFAULT_DEVICE_KIND = "TPU v5 lite"
# The GPU a Triton lowering targets where this machine has none: JAX up to 0.10 picked compute
# capability 9.0 itself when no GPU was found; JAX 0.12 reads the chip from the device or an abstract
# one (pallas/triton/gpu_info.get_gpu_info) and raises "No supported GPU devices found" without.
# An H100 is that same 9.0 target.
DEFAULT_GPU_DEVICE_KIND = "NVIDIA H100"


@dataclasses.dataclass(frozen=True)
class LoweringCall:
    """A subject's call with the interpreter off, ready to lower for ``platform``.

    fn: a function of JAX arrays (the adapter's own translation, natively configured);
    args: its arguments (arrays or ``jax.ShapeDtypeStruct``: only shapes and dtypes matter).
    device_kind: lower under an abstract TPU device of this kind (kernels that query the chip
    at lowering time); None for none.
    key: what ``fn`` depends on, by value (``described``: its description's ``cache_key``), so that
    calls of equal ``program_key`` lower alike; None where ``fn`` has no description.
    """

    platform: Platform
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    device_kind: str | None = None
    key: Hashable | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"unknown lowering platform {self.platform!r}; use one of {PLATFORMS}")

    @classmethod
    def described(
        cls,
        platform: Platform,
        call: CallDescription,
        inputs: AttentionInputs,
        args: tuple[Any, ...],
        device_kind: str | None = None,
    ) -> LoweringCall:
        """``call``'s function for ``inputs`` (``static_function``), keyed by the description it is
        built from: the key the interpreted call compiles under (``cache_key``), the same by value."""
        return cls(platform, call.static_function(inputs), args, device_kind, cache_key(call, inputs))

    def program_key(self) -> Hashable | None:
        """What the lowered program depends on: the function's key, the platform, the abstract
        device, and the arguments' structure, shapes and dtypes (never their values: lowering reads
        none). None for a call without a key: its lowering is never shared."""
        if self.key is None:
            return None
        import jax

        leaves, structure = jax.tree.flatten(self.args)
        shapes = tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else a for a in leaves)
        return (self.key, self.platform, self.device_kind, str(structure), shapes)


@dataclasses.dataclass(frozen=True)
class LoweredKernel:
    """One Pallas kernel's custom call in the lowered module. ``cost``: its cost estimate
    (``flops``, ``transcendentals``, ``bytes_accessed``), empty when the call carries none."""

    name: str
    cost: dict[str, int]


@dataclasses.dataclass(frozen=True)
class VmemFootprint:
    """One TPU pallas_call's VMEM: ``blocks`` (pipelined operands, every buffer), ``scratch``,
    both tile-padded bytes; ``limit``: the kernel's own ``vmem_limit_bytes``, None when it
    leaves the compiler's scoped default."""

    name: str
    blocks: int
    scratch: int
    limit: int | None

    @property
    def total(self) -> int:
        return self.blocks + self.scratch


@dataclasses.dataclass(frozen=True)
class Lowering:
    """The outcome of lowering one call: ``error`` (verbatim) or what the module holds."""

    platform: Platform
    error: str | None
    kernels: tuple[LoweredKernel, ...] = ()
    footprints: tuple[VmemFootprint, ...] = ()
    seconds: float = 0.0
    # The pallas_calls as traced, in order; set whenever tracing succeeded (a call the
    # hardware's compiler then rejects still shows what it asked for).
    traced: tuple[TracedKernel, ...] = ()
    # CUDA: each Triton kernel's shared memory, estimated from its trace (kernels/hardware/shared_memory.py).
    shared_memory: tuple[SharedMemoryFootprint, ...] = ()

    @property
    def lowered(self) -> bool:
        return self.error is None


def abstract_arrays(*arrays: Any) -> tuple[Any, ...]:
    """NumPy arrays -> ``jax.ShapeDtypeStruct`` (None stays None): lowering needs no values."""
    import jax

    return tuple(None if a is None else jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)


def _has_abstract_devices() -> bool:
    """Whether this JAX has ``jax.sharding.AbstractDevice`` and meshes that take one (>= 0.7)."""
    import inspect

    import jax

    return hasattr(jax.sharding, "AbstractDevice") and (
        "abstract_device" in inspect.signature(jax.sharding.AbstractMesh).parameters
    )


@contextlib.contextmanager
def _abstract_device(device_kind: str, platform: str, num_cores: int | None) -> Iterator[None]:
    """An abstract one-device mesh of ``device_kind``: code asking which chip it runs on gets
    that answer on a CPU. Its axis is ``Auto``, as a call on one real device has no sharding in its
    types: under the default (``Explicit`` at jax 0.12) a ``jax.vmap`` whose batching rule loops
    (tokamax splash's bool mask per batch row) writes explicitly sharded rows into an unsharded
    buffer and raises ``ShardingTypeError: dynamic_update_slice operand sharding must be equal to
    update sharding``, which no device would."""
    import jax

    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform=platform)
    auto = (jax.sharding.AxisType.Auto,)
    mesh = jax.sharding.AbstractMesh((1,), ("lowering",), axis_types=auto, abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        yield


@contextlib.contextmanager
def abstract_tpu(device_kind: str | None) -> Iterator[None]:
    """An abstract one-device TPU mesh, so that code asking which chip it runs on gets an
    answer on a CPU (JAX >= 0.7 has ``jax.sharding.AbstractDevice``); a no-op for None."""
    if device_kind is None:
        yield
        return
    if not _has_abstract_devices():
        raise NotImplementedError(
            "this JAX has no abstract devices (jax.sharding.AbstractDevice): a kernel that asks which "
            "TPU it runs on cannot be lowered without one; use JAX >= 0.7.0"
        )
    with _abstract_device(device_kind, "tpu", 1):
        yield


@contextlib.contextmanager
def abstract_gpu_when_absent(platform: str) -> Iterator[None]:
    """For a ``cuda`` lowering on a machine without a GPU, an abstract ``DEFAULT_GPU_DEVICE_KIND``
    (the target JAX up to 0.10 chose itself there); a no-op for TPU, on a GPU, or on a JAX without
    abstract devices (which predates the need)."""
    import jax

    if platform != "cuda" or jax.default_backend() == "gpu" or not _has_abstract_devices():
        yield
        return
    with _abstract_device(DEFAULT_GPU_DEVICE_KIND, "gpu", None):
        yield


def lower(call: LoweringCall) -> Lowering:
    """Trace ``call`` once, then lower it for its platform; any exception (tracing or lowering)
    becomes ``error``, and what was traced before it is kept (``Lowering.traced``)."""
    import jax

    start = time.perf_counter()
    traced: tuple[TracedKernel, ...] = ()
    try:
        # the abstract device in the trace's context: the lowering reads it from there
        with abstract_tpu(call.device_kind), abstract_gpu_when_absent(call.platform):
            trace = jax.jit(call.fn).trace(*call.args)
            calls = pallas_calls(trace.jaxpr)  # one walk of the trace for every reader below
            traced = traced_kernels(trace.jaxpr, calls)
            text = _lowered_text(call, trace)
    except Exception as error:  # noqa: BLE001 - the hardware's verdict is the result
        return Lowering(
            call.platform,
            f"{type(error).__name__}: {error}",
            seconds=time.perf_counter() - start,
            traced=traced,
        )
    footprints = tuple(vmem_footprint(k) for k in traced) if call.platform == "tpu" else ()
    return Lowering(
        call.platform,
        None,
        custom_calls(text, call.platform),
        footprints,
        time.perf_counter() - start,
        traced,
        shared_memory_footprints(trace.jaxpr, calls) if call.platform == "cuda" else (),
    )


def _lowered_text(call: LoweringCall, trace: Any) -> str:
    """The lowered module's text, from ``trace`` (``jax.jit(call.fn).trace(*call.args)``): the one
    trace that ``lower`` reads the kernels from also lowers. (``jax.export`` traced the call again,
    a quarter of the lowering's time, for the same Mosaic custom calls.)"""
    return trace.lower(lowering_platforms=(call.platform,)).as_text()


# --- reading the lowered module --------------------------------------------------------

_STRING = r'"((?:[^"\\]|\\.)*)"'


def _mlir_string(escaped: str) -> str:
    """An MLIR string literal's text: ``\\22`` -> ``"`` (hex escapes), ``\\\\`` -> ``\\``."""
    return re.sub(
        r"\\([0-9A-Fa-f]{2}|\\)", lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1), 16)), escaped
    )


def _attributes(text: str, start: int) -> str:
    """The attribute dictionary that follows a custom call's operands (``{...}``). MLIR escapes
    every ``"`` inside a string (``\\22``), so a string ends at the next quote."""
    opening = text.find("{", start)
    depth, i = 0, opening
    while i < len(text):
        if text[i] == '"':
            i = text.index('"', i + 1)
        elif text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[opening : i + 1]
        i += 1
    return text[opening:]


def custom_calls(text: str, platform: Platform) -> tuple[LoweredKernel, ...]:
    """Every Pallas custom call of ``platform`` in a lowered module's text, in order."""
    kernels = []
    for match in re.finditer(re.escape(f"@{_TARGETS[platform]}("), text):
        attributes = _attributes(text, match.end())
        name = re.search(rf"\b(?:kernel_name|name) = {_STRING}", attributes)
        cost: dict[str, int] = {}
        config = re.search(rf"\bbackend_config = {_STRING}", attributes)
        if platform == "tpu" and config:
            decoded = json.loads(_mlir_string(config.group(1)) or "{}")
            inner = decoded.get("custom_call_config", decoded)
            cost = {k: int(v) for k, v in (inner.get("cost_estimate") or {}).items()}
            if name is None and inner.get("kernel_name"):
                kernels.append(LoweredKernel(str(inner["kernel_name"]), cost))
                continue
        kernels.append(LoweredKernel(_mlir_string(name.group(1)) if name else "", cost))
    return tuple(kernels)


# --- the pallas_calls as traced: grid, block specs, scratch --------------------------------


@dataclasses.dataclass(frozen=True)
class TracedBlock:
    """One blocked operand of a pallas_call, as traced.

    origin: Pallas's name for it (``args[i]``, scalar-prefetch operands counted; ``outputs[i]``);
    block_shape: its BlockSpec's block shape, a squeezed dimension counted as 1;
    array_shape: the whole operand's shape;
    ref_shape, itemsize, memory_space, buffers: the kernel's view of the block (for VMEM).
    """

    origin: str
    block_shape: tuple[int, ...]
    array_shape: tuple[int, ...]
    ref_shape: tuple[int, ...]
    itemsize: int
    memory_space: str
    buffers: int


@dataclasses.dataclass(frozen=True)
class TracedKernel:
    """One pallas_call in a call's jaxpr: its name (``name=``, else the kernel function's),
    grid, blocked operands, VMEM scratch (shape, itemsize) and ``vmem_limit_bytes``."""

    name: str
    grid: tuple[int, ...]
    blocks: tuple[TracedBlock, ...]
    scratch: tuple[tuple[tuple[int, ...], int], ...] = ()
    vmem_limit: int | None = None

    def block(self, origin: str) -> TracedBlock | None:
        """The blocked operand Pallas calls ``origin``, or None."""
        return next((b for b in self.blocks if b.origin == origin), None)

    @property
    def operands_named(self) -> bool:
        """Whether Pallas named every block by its operand's position (``args[i]``,
        ``outputs[j]``). Before JAX 0.5 it may name a block after the kernel's parameter
        (``q_tile_ref``) and number the next ones from there, one off: those names identify
        no operand, so nothing can be read by them."""
        return all(_POSITIONAL_ORIGIN.fullmatch(b.origin) for b in self.blocks)


_POSITIONAL_ORIGIN = re.compile(r"(args|outputs)\[\d+\]|outputs")


def pallas_calls(closed_jaxpr: Any) -> tuple[Any, ...]:
    """Every pallas_call equation in a traced call (``jax.make_jaxpr`` or
    ``jit(...).trace(...).jaxpr``), nested jaxprs included, in order."""
    from kernels.runtime.jax_runtime import _iter_equations

    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    return tuple(e for e in _iter_equations(jaxpr) if e.primitive.name == "pallas_call")


def traced_kernels(closed_jaxpr: Any, calls: tuple[Any, ...] | None = None) -> tuple[TracedKernel, ...]:
    """Every pallas_call in a traced call, in order (``calls``: its ``pallas_calls``, when already
    listed): the one reader of what a kernel was asked to tile."""
    calls = pallas_calls(closed_jaxpr) if calls is None else calls
    return tuple(_traced_kernel(eqn, index) for index, eqn in enumerate(calls))


def _traced_kernel(eqn: Any, index: int) -> TracedKernel:
    mapping = eqn.params["grid_mapping"]
    refs = [v.aval for v in eqn.params["jaxpr"].invars]
    first_block = mapping.num_index_operands  # scalar-prefetch operands live in SMEM
    block_refs = refs[first_block : first_block + len(mapping.block_mappings)]
    scratch_refs = refs[first_block + len(mapping.block_mappings) :]
    blocks = tuple(
        TracedBlock(
            origin=str(getattr(m, "origin", f"#{i}")),
            block_shape=tuple(_block_size(b) for b in m.block_shape),
            array_shape=tuple(_array_shape(m)),
            ref_shape=tuple(a.shape),
            itemsize=itemsize(a.dtype),
            memory_space=_memory_space(a),
            buffers=_buffers(m),
        )
        for i, (m, a) in enumerate(zip(mapping.block_mappings, block_refs, strict=True))
    )
    scratch = tuple((tuple(a.shape), itemsize(a.dtype)) for a in scratch_refs if _memory_space(a) == "vmem")
    return TracedKernel(
        kernel_name(eqn, index),
        tuple(g if isinstance(g, int) else -1 for g in mapping.grid),  # -1: a dynamic grid size
        blocks,
        scratch,
        _vmem_limit(eqn.params.get("compiler_params")),
    )


def _block_size(dim: Any) -> int:
    """A block shape entry as a size: an int; ``Blocked(n)``/``Element(n)`` -> n; a squeezed
    dimension (None before JAX 0.6, ``pl.Squeezed()`` after) -> 1."""
    if isinstance(dim, int):
        return dim
    size = getattr(dim, "block_size", None)
    return size if isinstance(size, int) else 1


def _array_shape(mapping: Any) -> tuple[int, ...]:
    """The whole operand's shape (``array_aval`` from JAX 0.6, ``array_shape_dtype`` before)."""
    aval = getattr(mapping, "array_aval", None)
    if aval is None:
        aval = getattr(mapping, "array_shape_dtype", None)
    return tuple(getattr(aval, "shape", ()))


# --- VMEM: from the pallas_calls as traced for lowering --------------------------------------


def tile_padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of a VMEM buffer of ``shape``: the last dim padded to 128 lanes, the one before to a
    sublane tile (8 rows of 32 bits: 16 for 16-bit dtypes, 32 for 8-bit); a vector is one row."""
    dims = (1, 1, *shape)[-max(2, len(shape)) :] if len(shape) < 2 else tuple(shape)
    *lead, rows, lanes = dims
    sublanes = SUBLANES_32BIT * max(1, 4 // max(1, itemsize))
    padded = math.ceil(rows / sublanes) * sublanes * math.ceil(lanes / LANES) * LANES
    return math.prod(lead) * padded * itemsize


def _memory_space(aval: Any) -> str:
    """``vmem``, ``smem``, ``hbm`` or ``semaphore`` for a kernel ref's aval (None/default: VMEM)."""
    dtype = str(getattr(aval, "dtype", "")).lower()
    if "sem" in dtype:
        return "semaphore"
    space = str(getattr(aval, "memory_space", None)).lower()
    for token, name in (("smem", "smem"), ("any", "hbm"), ("hbm", "hbm"), ("sem", "semaphore")):
        if token in space:
            return name
    return "vmem"


def _vmem_limit(params: Any) -> int | None:
    """The kernel's ``vmem_limit_bytes``: a CompilerParams field (JAX >= 0.6), else the
    ``{"mosaic": {...}}`` dict older versions take."""
    if params is None:
        return None
    if isinstance(params, dict):
        params = params.get("mosaic") or params.get("mosaic_tpu") or {}
        value = params.get("vmem_limit_bytes") if isinstance(params, dict) else None
    else:
        value = getattr(params, "vmem_limit_bytes", None)
    return None if value is None else int(value)


def kernel_name(eqn: Any, index: int) -> str:
    """The pallas_call's ``name=`` (``name_and_src_info`` before JAX 0.8, ``name`` after), else its
    kernel function's name (the traced kernel jaxpr's debug info), else its position."""
    params = eqn.params
    name = getattr(params.get("name_and_src_info"), "name", None) or params.get("name")
    if not name:
        debug = getattr(params["jaxpr"], "debug_info", None)
        name = (
            getattr(debug, "func_name", None) or str(getattr(debug, "func_src_info", "") or "").split(" ")[0]
        )
    return str(name) if name else f"pallas_call #{index}"


def _buffers(mapping: Any) -> int:
    mode = getattr(mapping, "pipeline_mode", None)
    count = getattr(mode, "buffer_count", None)
    return int(count) if count else DEFAULT_BUFFERS


def vmem_footprint(kernel: TracedKernel) -> VmemFootprint:
    """A traced TPU kernel's VMEM (module doc: what counts)."""
    blocks = sum(
        b.buffers * tile_padded_bytes(b.ref_shape, b.itemsize)
        for b in kernel.blocks
        if b.memory_space == "vmem"
    )
    scratch = sum(tile_padded_bytes(shape, itemsize) for shape, itemsize in kernel.scratch)
    return VmemFootprint(kernel.name, blocks, scratch, kernel.vmem_limit)


def shared_memory_footprints(
    closed_jaxpr: Any, calls: tuple[Any, ...] | None = None
) -> tuple[SharedMemoryFootprint, ...]:
    """Every Triton pallas_call's shared memory estimate in a traced call, in order (``calls``: its
    ``pallas_calls``, when already listed)."""
    calls = pallas_calls(closed_jaxpr) if calls is None else calls
    return tuple(
        estimate(kernel_name(eqn, i), eqn.params["jaxpr"], num_stages(eqn.params.get("compiler_params")))
        for i, eqn in enumerate(calls)
    )


def vmem_footprints(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[VmemFootprint, ...]:
    """Every pallas_call's VMEM footprint in ``fn(*args)``'s trace (module doc: what counts)."""
    import jax

    return tuple(vmem_footprint(k) for k in traced_kernels(jax.make_jaxpr(fn)(*args)))
