"""What a Pallas kernel becomes on its target hardware, seen from a CPU: the one place for it.

An interpreter accepts kernels that a TPU or GPU rejects (a block of 8 rows where Mosaic
tiles by 128 lanes, a Triton block that is not a power of two). Lowering the very call an
adapter makes, with the interpreter off, runs the compiler front end of the target: Mosaic's
TPU lowering (``jax.export`` for platform ``tpu``) or Pallas's Triton lowering (platform
``cuda``). Both run on a machine with neither device, in about 0.1 s a call.

What the lowered module tells:

* whether it lowers at all, and the error verbatim where it does not;
* each kernel's custom call: its ``kernel_name`` and, on TPU, the ``cost_estimate``
  (flops, transcendentals, bytes accessed) that XLA's scheduler and profilers read;
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
from collections.abc import Callable, Iterator
from typing import Any

from kernels.base import PLATFORMS, Platform

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


@dataclasses.dataclass(frozen=True)
class LoweringCall:
    """A subject's call with the interpreter off, ready to lower for ``platform``.

    fn: a function of JAX arrays (the adapter's own translation, natively configured);
    args: its arguments (arrays or ``jax.ShapeDtypeStruct``: only shapes and dtypes matter).
    device_kind: lower under an abstract TPU device of this kind (kernels that query the chip
    at lowering time); None for none.
    """

    platform: Platform
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    device_kind: str | None = None

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"unknown lowering platform {self.platform!r}; use one of {PLATFORMS}")


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

    @property
    def lowered(self) -> bool:
        return self.error is None


def abstract_arrays(*arrays: Any) -> tuple[Any, ...]:
    """NumPy arrays -> ``jax.ShapeDtypeStruct`` (None stays None): lowering needs no values."""
    import jax

    return tuple(None if a is None else jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays)


@contextlib.contextmanager
def abstract_tpu(device_kind: str | None) -> Iterator[None]:
    """An abstract one-device TPU mesh, so that code asking which chip it runs on gets an
    answer on a CPU (JAX >= 0.5 has ``jax.sharding.AbstractDevice``); a no-op for None."""
    if device_kind is None:
        yield
        return
    import inspect

    import jax

    device_type = getattr(jax.sharding, "AbstractDevice", None)
    if (
        device_type is None
        or "abstract_device" not in inspect.signature(jax.sharding.AbstractMesh).parameters
    ):
        raise NotImplementedError(
            "this JAX has no abstract devices (jax.sharding.AbstractDevice): a kernel that asks which "
            "TPU it runs on cannot be lowered without one; use JAX >= 0.7.0"
        )
    device = device_type(device_kind=device_kind, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("lowering",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def lower(call: LoweringCall) -> Lowering:
    """Lower ``call`` for its platform; any exception (tracing or lowering) becomes ``error``."""
    start = time.perf_counter()
    try:
        with abstract_tpu(call.device_kind):
            text = _lowered_text(call)
            footprints = vmem_footprints(call.fn, call.args) if call.platform == "tpu" else ()
    except Exception as error:  # noqa: BLE001 - the hardware's verdict is the result
        return Lowering(
            call.platform, f"{type(error).__name__}: {error}", seconds=time.perf_counter() - start
        )
    return Lowering(
        call.platform,
        None,
        custom_calls(text, call.platform),
        footprints,
        time.perf_counter() - start,
    )


def _lowered_text(call: LoweringCall) -> str:
    import jax

    if call.platform == "tpu":
        from jax import export  # a submodule older releases do not import with jax

        return export.export(jax.jit(call.fn), platforms=["tpu"])(*call.args).mlir_module()
    return jax.jit(call.fn).trace(*call.args).lower(lowering_platforms=("cuda",)).as_text()


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


# --- VMEM: from the pallas_call as traced for lowering ---------------------------------------


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


def _itemsize(dtype: Any) -> int:
    import numpy as np

    try:
        return max(1, np.dtype(dtype).itemsize)
    except TypeError:
        return 4


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


def _kernel_name(params: dict[str, Any], index: int) -> str:
    info = params.get("name_and_src_info")
    name = getattr(info, "name", None) or params.get("name")
    return str(name) if name else f"pallas_call #{index}"


def _buffers(mapping: Any) -> int:
    mode = getattr(mapping, "pipeline_mode", None)
    count = getattr(mode, "buffer_count", None)
    return int(count) if count else DEFAULT_BUFFERS


def vmem_footprints(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[VmemFootprint, ...]:
    """Every pallas_call's VMEM footprint in ``fn(*args)``'s trace (module doc: what counts)."""
    import jax

    from kernels.jax_runtime import _iter_equations

    footprints = []
    closed = jax.make_jaxpr(fn)(*args)
    calls = [e for e in _iter_equations(closed.jaxpr) if e.primitive.name == "pallas_call"]
    for index, eqn in enumerate(calls):
        mapping = eqn.params["grid_mapping"]
        refs = [v.aval for v in eqn.params["jaxpr"].invars]
        first_block = mapping.num_index_operands  # scalar-prefetch operands live in SMEM
        block_refs = refs[first_block : first_block + len(mapping.block_mappings)]
        scratch_refs = refs[first_block + len(mapping.block_mappings) :]
        blocks = sum(
            _buffers(m) * tile_padded_bytes(tuple(a.shape), _itemsize(a.dtype))
            for m, a in zip(mapping.block_mappings, block_refs, strict=True)
            if _memory_space(a) == "vmem"
        )
        scratch = sum(
            tile_padded_bytes(tuple(a.shape), _itemsize(a.dtype))
            for a in scratch_refs
            if _memory_space(a) == "vmem"
        )
        limit = _vmem_limit(eqn.params.get("compiler_params"))
        footprints.append(VmemFootprint(_kernel_name(eqn.params, index), blocks, scratch, limit))
    return tuple(footprints)
