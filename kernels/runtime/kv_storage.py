"""How a subject stores K and V, and the values it then computes with.

A subject that keeps its KV cache in a narrower form than the case's dtype declares it
(``Capabilities.kv_storage``). Every case of that subject carries the storage
(``Case.kv_storage``), and its K/V are rounded to it when the inputs are built, right after
the rounding to the dtype: the reference, the baseline and the subject then all see exactly
the values the stored form holds (the project rule for dtypes, applied to the cache).

A storage is an element type and the group that shares one scale, named
``<element>_per_<group>`` (``"int8"`` alone is int8 per token, the first one there was; the
names: ``kernels/contract/kv_storage_names.py``):

* element ``int8``: ``w`` an integer in [-127, 127]; ``float8_e4m3fn`` / ``float8_e5m2``: ``w``
  an fp8 value, at most 448 / 57344 in magnitude;
* group (of ``x: [B, H, S, D]``) ``token``: one scale per (b, h, s) over D; ``channel``: one per
  (h, d) over batch and tokens (how KV caches quantize K); ``head``: one per h; ``tensor``: one.

Each group's value is ``w * step`` with ``step`` a power of two, the smallest for which the
group's largest magnitude fits ``w``'s range. A power-of-two step keeps ``w * step`` exact in
every float dtype (``w`` has at most 7 significant bits), so a kernel that dequantises with
``scale = c * step`` gets the very values the reference sees, whatever order it multiplies in.
Rounding is idempotent: values already on the grid come back unchanged, so an adapter quantises
its (already rounded) inputs again and loses nothing. A group holding NaN keeps NaN: its step
is NaN and its weights 0 (``0 * NaN`` is NaN again when dequantised).

NumPy (and ml_dtypes for the fp8 elements) only: the input builder and the adapters use it,
and standalone repro scripts embed its source.
"""

from __future__ import annotations

import numpy as np

# The names, element limits and groups (standard library only, so the feature table and the
# reports read them too); here as well, for the adapters and the scripts that embed this module.
from kernels.contract.kv_storage_names import ELEMENT_LIMITS, GROUP_AXES, storage_parts
from kernels.contract.kv_storage_names import KV_STORAGES as KV_STORAGES

INT8_LIMIT = 127  # |w| <= 127: symmetric, so -w is representable too


def quantize(x: np.ndarray, storage: str) -> tuple[np.ndarray, np.ndarray]:
    """``x: [B, H, S, D]`` -> (``w`` in the storage's element type, ``step`` float64 broadcastable
    to ``x``, one power of two per group): ``x ~ w * step``. An all-zero group gets step 1."""
    element, group = storage_parts(storage)
    limit = ELEMENT_LIMITS[element]
    wide = np.asarray(x, dtype=np.float64)
    axes = tuple(a - 4 + wide.ndim for a in GROUP_AXES[group] if a - 4 + wide.ndim >= 0)
    with np.errstate(invalid="ignore"):
        top = np.max(np.abs(wide), axis=axes, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.ceil(np.log2(top / limit))
    step = np.where(top > 0, np.exp2(exponent), 1.0)
    step = np.where(np.isfinite(top), step, np.nan)
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.isfinite(step), wide / step, 0.0)
    if element == "int8":
        return np.clip(np.rint(scaled), -limit, limit).astype(np.int8), step
    import ml_dtypes  # fp8 elements only: the int8 path needs NumPy alone

    return scaled.astype(getattr(ml_dtypes, element)), step


def int8_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x: [..., D]`` -> (``w: [..., D]`` int8, ``step: [..., 1]`` float64): ``x ~ w * step``
    per token, ``step`` a power of two (1 for an all-zero token, NaN for a token with NaN)."""
    return quantize(x, "int8")


def represent(x: np.ndarray, storage: str | None) -> np.ndarray:
    """``x`` as the storage holds it, in ``x``'s dtype (``x`` itself for ``None``)."""
    if storage is None:
        return x
    w, step = quantize(x, storage)
    return (w.astype(np.float64) * step).astype(np.asarray(x).dtype)


def storage_bytes(storage: str | None, dtype_bytes: int) -> int:
    """Bytes an element of K/V takes in this storage (``dtype_bytes`` without one)."""
    return dtype_bytes if storage is None else 1
