"""How a subject stores K and V, and the values it then computes with.

A subject that keeps its KV cache in a narrower form than the case's dtype declares it
(``Capabilities.kv_storage``). Every case of that subject carries the storage
(``Case.kv_storage``), and its K/V are rounded to it when the inputs are built, right after
the rounding to the dtype: the reference, the baseline and the subject then all see exactly
the values the stored form holds (the project rule for dtypes, applied to the cache).

``int8``: each token's vector (the last axis) is ``w * step`` with ``w`` an int8 in
[-127, 127] and ``step`` a power of two, the smallest that fits the token's largest
magnitude. A power-of-two step keeps ``w * step`` exact in every float dtype (``w`` has 7
bits), so a kernel that dequantises as ``w * scale / c`` with ``scale = c * step`` gets the
very values the reference sees, whatever order it multiplies and divides in. Rounding is
idempotent: values already on the grid come back unchanged, so an adapter quantises its
(already rounded) inputs again and loses nothing. A token holding NaN keeps NaN: its step is
NaN and its weights 0 (``0 * NaN`` is NaN again when dequantised).

NumPy only: the input builder and the adapters both use it.
"""

from __future__ import annotations

import numpy as np

KV_STORAGES: tuple[str, ...] = ("int8",)
INT8_LIMIT = 127  # |w| <= 127: symmetric, so -w is representable too


def int8_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x: [..., D]`` -> (``w: [..., D]`` int8, ``step: [..., 1]`` float64): ``x ~ w * step``
    per token, ``step`` a power of two (1 for an all-zero token, NaN for a token with NaN)."""
    wide = np.asarray(x, dtype=np.float64)
    top = np.max(np.abs(wide), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.ceil(np.log2(top / INT8_LIMIT))
    step = np.where(top > 0, np.exp2(exponent), 1.0)
    step = np.where(np.isfinite(top), step, np.nan)
    with np.errstate(invalid="ignore"):
        w = np.where(np.isfinite(step), np.rint(wide / step), 0.0)
    return np.clip(w, -INT8_LIMIT, INT8_LIMIT).astype(np.int8), step


def represent(x: np.ndarray, storage: str | None) -> np.ndarray:
    """``x`` as the storage holds it, in ``x``'s dtype (``x`` itself for ``None``)."""
    if storage is None:
        return x
    if storage != "int8":
        raise ValueError(f"unknown K/V storage {storage!r}; choose from {KV_STORAGES} (or None)")
    w, step = int8_quantize(x)
    return (w.astype(np.float64) * step).astype(np.asarray(x).dtype)
