"""The floating dtypes the suite knows, by name: the one list, in report order.

Standard library only: ``reports`` (whose gate runs with no installs) reads it too,
and ``kernels/__init__.py`` imports nothing, so importing this module pulls in no
NumPy or JAX. NumPy dtypes for these names: ``conformance.judge.dtypes``.
"""

from __future__ import annotations

# The 8-bit floats of inference stacks (q/k/v and KV caches). Kernels that take them compute
# in float32 (matmuls accumulate there): the baseline models that (conformance/judge/baseline.py).
FP8_DTYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float64", *FP8_DTYPES)
