"""Subjects built from bare Capabilities, for meta-tests that never call a kernel."""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.plan.subjects import Subject
from kernels.contract import features
from kernels.contract.base import Availability, Capabilities, ShapeConstraint
from kernels.contract.kv_storage_names import STORAGES

# Not every feature, despite the name: a fixed declaration whose draws tests pin (a seed's cases,
# test_reproducible_draws.py). Features added to the table since (sinks, q/K/V storages, leading batch
# dims) stay off here, and a test that needs one adds it (``dataclasses.replace(FULL, sinks=True)``) and
# compares with FULL's draws. The correct control's declaration of every feature is
# ``tests/mutants/correct.py::FULL``.
FULL = Capabilities(
    dtypes=("float32", "bfloat16", "float16"),
    causal_alignments=("top_left", "bottom_right"),
    chunked_causal_alignments=("top_left", "bottom_right"),
    window=True,
    segment_ids=True,
    lengths=True,
    bool_mask=True,
    gqa=True,
    bias=True,
    bias_broadcast=True,
    softcap=True,
    distinct_v_dim=True,
    backward=True,
    bias_grad=True,
    lse=True,
    fully_masked_rows="zeros",
    jax_runtime=True,
)
# Every choice of a declaring attribute whose value is a tuple (a bool one is just True).
_EVERY_CHOICE = {
    "causal_alignments": features.ALIGNMENTS,
    "chunked_causal_alignments": features.ALIGNMENTS,
    "q_storages": STORAGES,
    "kv_storages": STORAGES,
}


def declaring(attribute: str) -> Any:
    """The widest value of the ``Capabilities`` attribute that declares a feature: True, or every
    choice; a new kind of attribute fails here, naming where its choices go."""
    if isinstance(getattr(Capabilities(dtypes=("float32",)), attribute), bool):
        return True
    if attribute not in _EVERY_CHOICE:
        raise KeyError(
            f"name every choice of Capabilities.{attribute} in tests/support/fakes.py's _EVERY_CHOICE"
        )
    return _EVERY_CHOICE[attribute]


# FULL with every feature of the table declared (``features.FEATURES``, each at its widest): what a
# test that must admit any feature at all declares.
EVERY_FEATURE = dataclasses.replace(
    FULL, **{f.capability: declaring(f.capability) for f in features.FEATURES if f.capability is not None}
)
BLOCKED = Capabilities(
    dtypes=("float32", "bfloat16"),
    causal_alignments=("top_left",),
    segment_ids=True,
    bias=True,
    backward=True,
    lse=False,
    constraints=(
        ShapeConstraint(
            "kv_multiple_of_128", "blocks of 128 keys", lambda s, _: s.kv_len % 128 == 0, basis="raises"
        ),
        ShapeConstraint(
            "q_at_least_128", "one block of 128 queries", lambda s, _: s.q_len >= 128, basis="api"
        ),
        ShapeConstraint(
            "bwd_q_multiple_of_128",
            "backward blocks",
            lambda s, _: s.q_len % 128 == 0,
            basis="raises",
            applies_to="backward",
        ),
    ),
)


def subject(name: str, caps: Capabilities, available: bool = True) -> Subject:
    availability = Availability(available, "" if available else "needs a TPU")
    return Subject(
        name,
        name,
        adapter=None,
        availability=availability,  # type: ignore[arg-type]
        capabilities=caps if available else None,
    )
