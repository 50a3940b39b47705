"""``kv_cache``: the KV cache a call returns holds each new token's K and V in its own slot and
every other element as it was given (``SubjectOutput.kv_cache``, ``kernels.contract.base.CacheWrite``).
A write-back is a copy, so the comparison is bitwise: a token written one slot off, a padding
token written at all, or a write dropped is a difference."""

from __future__ import annotations

import numpy as np

from conformance.judge.checks.base import CheckContext, Outcome, failed, passed


def differing(returned: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Boolean mask of the elements whose bits differ (NaN equals the same NaN)."""
    a, b = np.ascontiguousarray(returned), np.ascontiguousarray(expected)
    if a.dtype != b.dtype or a.shape != b.shape:
        return np.ones(a.shape, bool)
    as_bytes = (x.view(np.uint8).reshape(*x.shape, x.dtype.itemsize) for x in (a, b))
    return np.not_equal(*as_bytes).any(-1)


def kv_cache(ctx: CheckContext) -> Outcome:
    """The returned cache against the expected one, every element, bitwise."""
    write = ctx.run.forward.kv_cache
    if write is None:
        return failed("kv_cache is missing (None); the subject declares kv_cache=True")
    got, want = np.asarray(write.returned), np.asarray(write.expected)
    if got.shape != want.shape or got.dtype != want.dtype:
        return failed(
            f"kv_cache has shape {got.shape} {got.dtype}, expected {want.shape} {want.dtype} "
            "(the cache given)"
        )
    diff = differing(got, want)
    if not diff.any():
        return passed(f"{got.size} cache elements as expected ({got.shape[0]} pages)")
    where = tuple(int(i) for i in np.argwhere(diff)[0])
    slots = {tuple(int(i) for i in idx[:2]) for idx in np.argwhere(diff)}
    return failed(
        f"kv_cache: {int(diff.sum())} of {diff.size} elements differ from the cache expected (the given "
        f"cache with each new token's K/V in its own slot), in {len(slots)} (page, slot) pairs; first at "
        f"index {where}: {got[where]!r}, expected {want[where]!r}",
        differing=int(diff.sum()),
    )
