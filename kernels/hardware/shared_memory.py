"""How much shared memory a Pallas Triton kernel asks of its GPU, estimated from its trace on a CPU.

Lowering for CUDA (``kernels/hardware/lowering.py``) stops at Triton IR: the shared memory a kernel needs
is decided later, on the GPU, when Triton compiles it for the chip, and a kernel that needs more
than the chip has fails there ("Shared memory size limit exceeded"). This module estimates it from
the kernel's jaxpr, by the rule Triton's NVIDIA backend follows for the matmuls of a kernel:

* the right-hand operand of a ``dot`` that comes straight from a load (through a transpose, a
  reshape or a dtype conversion) is staged in shared memory: a tile of the loaded block;
* inside a loop of a static trip count above one (a ``scan``), Triton's software pipeliner keeps
  ``num_stages`` such tiles in flight (``CompilerParams.num_stages``; Pallas's default is 3 on
  CUDA). A loop of one iteration is folded away before that. A loop whose bound is known only at
  run time (a ``while``: the causal kernels' ``upper_bound``) counts one tile, as measured;
* a tile loaded once and read by several dots counts once; everything else (the left-hand operand,
  accumulators, masks) lives in registers.

The rule is calibrated on the one native run there is (an H200, JAX 0.11.2, docs/hardware.md):
JAX's Pallas Triton attention (``pallas_gpu``), float32, head dim 96 padded to 128, kv length 256,
default 128-row blocks, 2 stages, asked 262144 bytes of the H200's 232448 (k and v tiles of 64 KiB,
2 stages each), while kv length 128 (one iteration) compiled; so did the causal float32 cases at
head dim 128 (a run-time bound: 2 tiles of 64 KiB), and 256-row k and v blocks (256 KiB) did not.

It is an estimate, not a bound either way. Triton reuses the buffers of loops that run one after
another, which this rule adds up, so for a kernel with two loops (a fused backward) it can say
more than Triton asks: tokamax's Triton VJP at head dim 512 in bfloat16 asked 203136 bytes of an
A100 (tokamax pull request 1122) where this says 262144. And the layout-conversion scratch Triton
adds (6528 bytes there) is not counted. Its verdicts agree with every native one known: the
H200's above, and the A100's from that pull request (tokamax's default VJP config fits head dim
256 in bfloat16, not in float32, nor 320 or 512 in bfloat16).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# Pallas lowers a Triton kernel with 3 pipeline stages when its CompilerParams name none.
DEFAULT_NUM_STAGES = 3
# What a loaded tile passes through unchanged in size on its way to a dot (the staged tile is
# the load's, in the loaded dtype).
_PASS_THROUGH = frozenset(
    {"transpose", "convert_element_type", "reshape", "squeeze", "expand_dims", "copy", "copy_p"}
)
_LOADS = frozenset({"load", "get", "masked_load"})
_SCALED = frozenset({"mul", "div", "add", "sub"})


@dataclasses.dataclass(frozen=True)
class StagedTile:
    """One loaded tile a dot reads from shared memory: its shape, bytes of one copy, and copies."""

    shape: tuple[int, ...]
    tile_bytes: int
    copies: int

    @property
    def total(self) -> int:
        return self.tile_bytes * self.copies


@dataclasses.dataclass(frozen=True)
class SharedMemoryFootprint:
    """One Triton pallas_call's estimated shared memory (module doc: what counts)."""

    name: str
    num_stages: int
    tiles: tuple[StagedTile, ...]

    @property
    def total(self) -> int:
        return sum(t.total for t in self.tiles)

    def explain(self) -> str:
        """``128x128 tile (65536 B) x2 + ...``: where the bytes come from."""
        parts = [
            f"{'x'.join(map(str, t.shape))} tile ({t.tile_bytes} B)" + (f" x{t.copies}" * (t.copies > 1))
            for t in self.tiles
        ]
        return " + ".join(parts) or "no dot reads a loaded tile"


@dataclasses.dataclass(frozen=True)
class _Load:
    key: int
    shape: tuple[int, ...]
    tile_bytes: int
    pipelined: bool


def num_stages(compiler_params: Any) -> int:
    """The kernel's Triton ``num_stages``: a CompilerParams field (JAX >= 0.5), else the
    ``{"triton": {...}}`` dict older versions take; Pallas's CUDA default when unset."""
    if isinstance(compiler_params, dict):
        compiler_params = compiler_params.get("triton") or {}
        value = compiler_params.get("num_stages") if isinstance(compiler_params, dict) else None
    else:
        value = getattr(compiler_params, "num_stages", None)
    return DEFAULT_NUM_STAGES if value is None else int(value)


def estimate(name: str, kernel_jaxpr: Any, stages: int) -> SharedMemoryFootprint:
    """The shared memory of a kernel whose body is ``kernel_jaxpr``, run with ``stages`` stages."""
    staged: dict[int, StagedTile] = {}
    _walk(getattr(kernel_jaxpr, "jaxpr", kernel_jaxpr), {}, False, stages, staged)
    return SharedMemoryFootprint(name, stages, tuple(staged.values()))


def _walk(jaxpr: Any, sources: dict[Any, _Load], pipelined: bool, stages: int, staged: dict) -> None:
    env = dict(sources)
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim in _LOADS and eqn.outvars:
            aval = eqn.outvars[0].aval
            shape = tuple(getattr(aval, "shape", ()))
            size = math.prod(shape) * itemsize(getattr(aval, "dtype", None))
            env[eqn.outvars[0]] = _Load(id(eqn), shape, size, pipelined)
        elif (source := _passed_through(eqn, env)) is not None:
            env[eqn.outvars[0]] = source
        elif prim == "dot_general":
            rhs = eqn.invars[1]
            load = env.get(rhs) if _is_var(rhs) else None
            if load is not None and load.key not in staged:
                staged[load.key] = StagedTile(load.shape, load.tile_bytes, stages if load.pipelined else 1)
        for inner, operands, loops in _sub_jaxprs(eqn):
            # a loop body's inputs are its operands in order (scan: consts, carry, xs)
            bound = zip(inner.invars, operands, strict=False)
            inner_sources = {var: env[outer] for var, outer in bound if _is_var(outer) and outer in env}
            _walk(inner, inner_sources, pipelined or loops, stages, staged)


def _passed_through(eqn: Any, env: dict[Any, _Load]) -> _Load | None:
    """The loaded tile an equation passes on unchanged in size: a transpose or a conversion of it,
    or it scaled by a scalar (tokamax multiplies every loaded tile by its dequantization scale,
    1.0 for plain inputs)."""
    prim, operands = eqn.primitive.name, [v for v in eqn.invars if _is_var(v)]
    tiles = [env[v] for v in operands if v in env]
    if len(tiles) != 1:
        return None
    if prim in _PASS_THROUGH:
        return tiles[0]
    scalars = all(v in env or not getattr(v.aval, "shape", ()) for v in operands)
    return tiles[0] if prim in _SCALED and scalars else None


def _sub_jaxprs(eqn: Any) -> list[tuple[Any, list[Any], bool]]:
    """(inner jaxpr, the outer operands its inputs bind to, whether it is a pipelined loop body)."""
    params, operands = eqn.params, list(eqn.invars)
    prim = eqn.primitive.name
    if prim == "scan":
        return [(_open(params["jaxpr"]), operands, int(params.get("length", 2)) > 1)]
    if prim == "while":
        skip = int(params.get("cond_nconsts", 0))
        return [(_open(params["body_jaxpr"]), operands[skip:], False)]
    if prim == "cond":
        return [(_open(b), operands[1:], False) for b in params["branches"]]
    inner = params.get("jaxpr") or params.get("call_jaxpr")
    return [(_open(inner), operands, False)] if inner is not None and hasattr(_open(inner), "eqns") else []


def _open(jaxpr: Any) -> Any:
    return getattr(jaxpr, "jaxpr", jaxpr)


def _is_var(atom: Any) -> bool:
    return not hasattr(atom, "val")  # a Literal carries .val; a Var does not


def itemsize(dtype: Any) -> int:
    """Bytes of one element of a traced array's dtype (4 for a JAX-only dtype NumPy cannot name)."""
    import numpy as np

    try:
        return max(1, np.dtype(dtype).itemsize)
    except TypeError:
        return 4
