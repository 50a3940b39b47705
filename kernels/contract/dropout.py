"""Attention dropout as the ``dropout`` check asks an adapter for it (docs/semantics.md, "Dropout").

An API takes dropout in one of two ways (``Capabilities.dropout``):

* ``"mask"``: the caller passes the boolean mask and the rate (tokamax.dot_product_attention's
  ``dropout_mask``, True where a weight is kept, and ``dropout_rate``); the realised mask is the one
  passed.
* ``"key"``: the caller passes the rate and a PRNG key, and the kernel draws the mask inside
  (splash's ``dropout_rate`` and ``prng_key``); the realised mask is observed, not known.

An implementation that rejects dropout declares it with a ``ShapeConstraint`` whose ``features``
name ``DROPOUT_FEATURE`` (basis ``raises``, its exception, its direction): the check asserts that
the call raises there.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

DropoutKind = Literal["", "mask", "key"]
DROPOUT_KINDS: tuple[str, ...] = ("", "mask", "key")
# The feature a dropout rejection concerns (``ShapeConstraint.features``): no planned case carries
# it, only the ``dropout`` check's own calls.
DROPOUT_FEATURE = "dropout"


@dataclasses.dataclass(frozen=True, eq=False)
class DropoutRequest:
    """One dropout call. ``rate``: the drop probability, in ``(0, 1)``. ``keep`` (``"mask"``):
    ``[B, Hq, Sq, Sk]`` bool, True where a weight is kept. ``seed`` (``"key"``): the adapter's call
    builds ``jax.random.key(seed)`` (and documents how it derives each batch row's key from it)."""

    rate: float
    keep: np.ndarray | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.rate < 1.0:
            raise ValueError(f"dropout rate {self.rate} is outside (0, 1); pass the drop probability")
        if (self.keep is None) == (self.seed is None):
            raise ValueError(
                "a DropoutRequest takes a keep mask (kind 'mask') or a seed (kind 'key'), one of them"
            )
