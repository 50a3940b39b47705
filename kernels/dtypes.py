"""The floating dtypes the suite knows, by name: the one list, in report order.

Standard library only: ``reports`` (whose gate runs with no installs) reads it too,
and ``kernels/__init__.py`` imports nothing, so importing this module pulls in no
NumPy or JAX. NumPy dtypes for these names: ``conformance.judge.dtypes``.
"""

from __future__ import annotations

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float64")
