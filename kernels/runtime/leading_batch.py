"""Leading batch dims (``AttentionSpec.batch_dims``): the canonical batch axis as the call takes it.

A case's inputs are ``[B, ...]``; a subject that declares ``Capabilities.leading_batch_dims`` is
called with them as ``[*batch_dims, ...]`` (``B = prod(batch_dims)``, row-major), and what it returns
comes back to ``[B, ...]`` for the checks. Pure functions of anything with ``.shape`` and
``.reshape`` (NumPy and JAX arrays, qwix ``QArray``), so a standalone repro script embeds them as is.
"""

from __future__ import annotations

from typing import Any


def with_leading(x: Any, batch_dims: tuple[int, ...] | None) -> Any:
    """``x: [B, ...]`` -> ``[*batch_dims, ...]``; a broadcast batch axis of 1 (``[1, ...]``) becomes
    ``len(batch_dims)`` axes of 1, still broadcast. Lengths ``(B,)`` become ``batch_dims``. ``x`` as it
    is for ``batch_dims`` None, and None for None."""
    if x is None or batch_dims is None:
        return x
    lead = tuple(batch_dims) if x.shape[0] != 1 else (1,) * len(batch_dims)
    return x.reshape((*lead, *x.shape[1:]))


def without_leading(x: Any, batch_dims: tuple[int, ...] | None) -> Any:
    """``x: [*batch_dims, ...]`` -> ``[B, ...]`` (``with_leading``'s inverse); ``x`` as it is for
    ``batch_dims`` None, and None for None."""
    if x is None or batch_dims is None:
        return x
    rest = tuple(x.shape[len(batch_dims) :])
    return x.reshape((-1, *rest))
