"""A stand-in for the compile behind ``CompiledCache.run``, for tests of what an adapter keys its
compiled calls by (``len(adapter._cache)``): nothing is traced or compiled, so a kernel that needs a
TPU, an interpreter that cannot follow it or a ring of devices is keyed here all the same."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernels.runtime import jax_runtime


def stand_in_compile(monkeypatch: pytest.MonkeyPatch, outputs: int) -> list[Any]:
    """Replace ``jax_runtime.jit_observed`` for this test: each build appends the function it was
    given to the returned list, and the stand-in it returns gives ``outputs`` zero arrays."""
    built: list[Any] = []

    def compile_nothing(fn: Any, args: tuple[Any, ...], describe: Any) -> jax_runtime.Compiled:
        built.append(fn)
        return jax_runtime.Compiled(lambda *_: (np.zeros(1),) * outputs, "stand-in")

    monkeypatch.setattr(jax_runtime, "jit_observed", compile_nothing)
    return built
