"""The floating dtypes the suite knows, by name, as NumPy dtypes.

bfloat16 and the fp8 dtypes (``float8_e4m3fn``, ``float8_e5m2``) come from ``ml_dtypes`` (a
JAX dependency), so subject inputs can be held as plain NumPy arrays in every dtype and
up-cast exactly to float64.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from kernels.contract.dtypes import DTYPES, FP8_DTYPES

DTYPE_NAMES = DTYPES  # the one list (kernels.contract.dtypes), under the name conformance uses
ML_DTYPES: tuple[str, ...] = ("bfloat16", *FP8_DTYPES)  # not NumPy's own: held by ml_dtypes


def numpy_dtype(name: str) -> np.dtype:
    """``"bfloat16"`` -> ``np.dtype(ml_dtypes.bfloat16)``; raises ValueError naming the choices."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; choose from {DTYPE_NAMES}")
    if name in ML_DTYPES:
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def is_fp8(name: str) -> bool:
    """One of the 8-bit floats (``kernels.contract.dtypes.FP8_DTYPES``)."""
    return name in FP8_DTYPES


def logits_dtype(name: str) -> str:
    """The dtype the logits and softmax of plain attention live in for inputs of ``name``: the
    dtype itself, except fp8, whose matmuls accumulate in float32 and whose softmax runs there
    (no kernel exponentiates in 8 bits). Input kinds that aim at the logits' range use it."""
    return "float32" if is_fp8(name) else name


def eps(name: str) -> float:
    """Machine epsilon: the spacing of the dtype's values just above 1.0."""
    return float(ml_dtypes.finfo(numpy_dtype(name)).eps)


def max_value(name: str) -> float:
    """The largest finite value of the dtype."""
    return float(ml_dtypes.finfo(numpy_dtype(name)).max)


def exp_overflow(name: str) -> float:
    """The logit above which ``exp`` overflows in this dtype: ``log(max)``."""
    return math.log(max_value(name))


def cast(x: np.ndarray, name: str) -> np.ndarray:
    """Round ``x`` to the dtype (round-to-nearest-even, as every backend does)."""
    return np.asarray(x).astype(numpy_dtype(name))


def name_of(dtype: np.dtype | str) -> str:
    """The suite's name of a NumPy dtype: ``np.dtype(ml_dtypes.bfloat16)`` -> ``"bfloat16"``."""
    return str(np.dtype(dtype))
