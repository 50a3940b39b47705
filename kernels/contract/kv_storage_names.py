"""The storages of q, K and V by name, and how a person reads each: the one list, standard
library only.

A storage is an element type and the group of ``x: [B, H, S, D]`` that shares one scale,
named ``<element>_per_<group>`` (``"int8"`` alone is int8 per token, the first one there
was). The same names serve every tensor a subject stores quantized: q (``Case.q_storage``)
and K/V (``Case.kv_storage``). The rounding to a storage is ``kernels/runtime/kv_storage.py``
(NumPy); this module holds only the names, so that the feature table and the report grid
(whose gate runs with no installs) read the same list.
"""

from __future__ import annotations

# The largest magnitude of each element type ``w`` (int8: symmetric, so -w is representable too).
ELEMENT_LIMITS = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# The axes of [B, H, S, D] one scale spans, per group: ``token`` one scale per (b, h, s) over
# D; ``channel`` one per (h, d) over batch and tokens (how KV caches quantize K); ``head`` one
# per h; ``tensor`` one.
GROUP_AXES = {"token": (3,), "channel": (0, 2), "head": (0, 2, 3), "tensor": (0, 1, 2, 3)}
STORAGES: tuple[str, ...] = ("int8",) + tuple(
    f"{element}_per_{group}"
    for element in ELEMENT_LIMITS
    for group in GROUP_AXES
    if (element, group) != ("int8", "token")  # that one is "int8"
)
KV_STORAGES = STORAGES  # the name the K/V storage had first
# The tensors a storage can hold, by the case field that names it, and how a report reads them.
TENSORS = {"q_storage": "q", "kv_storage": "K/V"}


def storage_parts(storage: str) -> tuple[str, str]:
    """``"int8_per_channel"`` -> ``("int8", "channel")``; ``"int8"`` -> ``("int8", "token")``."""
    if storage not in KV_STORAGES:
        raise ValueError(f"unknown storage {storage!r}; choose from {STORAGES} (or None)")
    element, _, group = storage.partition("_per_")
    return element, group or "token"


def label(storage: str, tensors: str = "K/V") -> str:
    """How a report reads a storage of ``tensors``: ``"int8 K/V"`` (per token),
    ``"float8_e4m3fn K/V per head"``, ``"int8 q per channel"``."""
    element, group = storage_parts(storage)
    return f"{element} {tensors}" + ("" if storage == "int8" else f" per {group}")
