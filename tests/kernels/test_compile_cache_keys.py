"""Each JAX adapter's compile cache is keyed by its call's description (``call_description.cache_key``):
equal calls share one compiled function, and calls that differ in one static keyword, or in an array
built into the call (splash's mask), get one each.

A key built by hand apart from the call can leave out something the call depends on; the second
call would then run the first call's compiled function, with the first call's keyword, and no new
entry. Each row's two calls differ in one such thing, which changes the output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from kernels.registry import resolve
from kernels.runtime.jax_runtime import CompiledCache
from reference.spec import AttentionInputs, AttentionSpec
from tests.kernels.cases import make_inputs

pytestmark = pytest.mark.timeout(300)


def _decode(seed: int) -> AttentionInputs:
    """A decode step for paged attention: one query row, ragged kv lengths."""
    rng = np.random.default_rng(seed)
    return AttentionInputs(
        q=rng.standard_normal((2, 2, 1, 64)).astype(np.float32),
        k=rng.standard_normal((2, 2, 64, 64)).astype(np.float32),
        v=rng.standard_normal((2, 2, 64, 64)).astype(np.float32),
        kv_lengths=np.asarray([64, 21], np.int32),
    )


def _masked(seed: int) -> AttentionInputs:
    """A boolean mask shared by the batch (one splash kernel), its values drawn from ``seed``."""
    mask = np.random.default_rng(seed).random((1, 1, 128, 128)) > 0.3
    return make_inputs(0, b=1, hq=1, hkv=1, sq=128, sk=128, d=128, mask=mask)


def _square(b: int, h: int, s: int, d: int) -> Callable[[int], AttentionInputs]:
    return lambda seed: make_inputs(seed, b=b, hq=h, hkv=h, sq=s, sk=s, d=d)


@dataclasses.dataclass(frozen=True)
class Differing:
    """Two forward calls of ``subject`` that differ in one thing the call depends on: ``spec`` and
    ``other_spec``, or ``inputs(0)`` and ``inputs(other_seed)`` where the arrays are built in."""

    subject: str
    inputs: Callable[[int], AttentionInputs]
    spec: AttentionSpec
    other_spec: AttentionSpec | None = None
    other_seed: int = 0


ROWS = {
    "tpu_flash-causal": Differing(
        "tpu_flash", _square(1, 1, 128, 128), AttentionSpec(), AttentionSpec(causal=True)
    ),
    "splash-softcap": Differing(
        "splash", _square(1, 1, 128, 128), AttentionSpec(), AttentionSpec(softcap=2.0)
    ),
    "splash-mask-values": Differing("splash", _masked, AttentionSpec(), other_seed=1),
    "pallas_gpu-causal": Differing(
        "pallas_gpu", _square(1, 1, 128, 64), AttentionSpec(), AttentionSpec(causal=True)
    ),
    "xla-window": Differing("xla", _square(1, 2, 32, 16), AttentionSpec(), AttentionSpec(window=(3, 2))),
    "paged_attention-softcap": Differing(
        "paged_attention", _decode, AttentionSpec(), AttentionSpec(softcap=2.0)
    ),
    "tokamax[impl=xla]-causal": Differing(
        "tokamax[impl=xla]", _square(1, 2, 32, 16), AttentionSpec(), AttentionSpec(causal=True)
    ),
}


def _cache(adapter: object) -> CompiledCache:
    """The adapter's compile cache (the jax.nn adapters keep it on their runner)."""
    owner = getattr(adapter, "_runner", adapter)
    return owner._cache  # type: ignore[attr-defined]


@pytest.mark.parametrize("row", ROWS)
def test_equal_calls_share_a_compiled_function_and_a_differing_call_gets_its_own(row):
    differing = ROWS[row]
    adapter = resolve(differing.subject)
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"{differing.subject} unavailable: {availability.reason}")
    cache = _cache(adapter)
    first = adapter.forward(differing.inputs(0), differing.spec)
    entries = len(cache)
    # built afresh: new arrays and a new spec, equal by value
    again = adapter.forward(differing.inputs(0), dataclasses.replace(differing.spec))
    assert len(cache) == entries, "an equal call compiled again"
    np.testing.assert_array_equal(again.out, first.out)
    other = adapter.forward(differing.inputs(differing.other_seed), differing.other_spec or differing.spec)
    assert len(cache) == entries + 1, "a call differing in what it depends on reused a compiled function"
    assert not np.array_equal(other.out, first.out), "the differing call's output is the first call's"
