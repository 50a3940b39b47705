"""Plug-in functions whose signatures do not fit the canonical one
(``kernels/adapters/function_adapter.py``)."""

from __future__ import annotations


def two_positional(q, k, *, scale):
    """Forgets v."""
    return q


def unpassable(q, k, v, *, scale, flavour):
    """Requires a keyword the suite never passes."""
    return q
