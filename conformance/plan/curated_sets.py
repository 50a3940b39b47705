"""The curated sets: the explicit templates a subject gets beside its drawn cases, each set declared
once in ``CURATED_SETS`` with the dtypes it runs in. ``catalogue.cases_for`` plans them in that
order, one loop over the table: a new set is one ``CuratedSet`` there.

A set names the features of ``kernels/contract/features.py`` whose edges it holds (none for the
general matrix and the tunables' edge configs); every one of its templates uses one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from conformance.plan import edge_matrix
from conformance.plan.cases import Case
from kernels.contract.base import Capabilities

Templates = Callable[[Capabilities, int], tuple[Case, ...]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CuratedSet:
    """One curated set.

    name:      what the set holds (unique in ``CURATED_SETS``).
    features:  the ``Feature.name``s whose edges it holds; empty for a set no feature owns.
    templates: ``(capabilities, edge level) -> templates``: the set at a profile's edge level for a
               subject declaring those capabilities (empty where it has none of them).
    dtypes:    ``"every"`` dtype the subject declares, or its ``"first"`` (in ``DTYPES`` order).
    fp8_core_at_level_0: in an fp8 dtype at edge level 0, only the templates of
               ``edge_matrix.FP8_CORE`` (``edge_matrix.in_dtype``).
    """

    name: str
    features: tuple[str, ...]
    templates: Templates
    dtypes: Literal["every", "first"]
    fp8_core_at_level_0: bool

    def dtypes_of(self, template: Case, declared: tuple[str, ...], level: int) -> tuple[str, ...]:
        """The dtypes of ``declared`` (in ``DTYPES`` order) that ``template`` runs in at ``level``."""
        chosen = declared if self.dtypes == "every" else declared[:1]
        if not self.fp8_core_at_level_0:
            return chosen
        return tuple(d for d in chosen if edge_matrix.in_dtype(template, d, level))


def _runs(caps: Capabilities, probe: Case) -> bool:
    """Whether the subject runs ``probe`` forward: what only the hardware's compiler rejects (stage
    ``"lowering"``) still runs, and is judged, in the interpreter."""
    outside = caps.admits(probe.skeleton(), probe.spec, probe.dtype, "forward", probe.features)
    return not [e for e in outside if e.constraint is None or e.constraint.stage != "lowering"]


def _config_shapes(caps: Capabilities) -> tuple[tuple[int, Case, bool], ...]:
    """The first config shape family whose first shape the subject can run: the prefill shapes
    for most; a decode kernel (Sq pinned to 1) or one causal only at the valid lengths gets its own."""
    for family in edge_matrix.CONFIG_SHAPE_FAMILIES:
        probe = dataclasses.replace(family[0][1], dtype=caps.dtypes[0])
        if _runs(caps, probe):
            return family
    return edge_matrix.CONFIG_SHAPES


def _edge_configs(every_dtype: bool) -> Templates:
    """The edge configs of a subject's tunables on those of its config shapes (``_config_shapes``)
    whose every-dtype flag is ``every_dtype``."""

    def templates(caps: Capabilities, level: int) -> tuple[Case, ...]:
        shapes = tuple(s for s in _config_shapes(caps) if s[2] == every_dtype)
        return edge_matrix.config_cases(caps.tunables, level, shapes)

    return templates


def ragged_cases(caps: Capabilities, level: int) -> tuple[Case, ...]:
    """The ragged length patterns (``edge_matrix.ragged_patterns``) up to ``level`` for a subject
    that declares lengths, on the first ragged shape it runs, at the lengths its own tunables
    declare (``Tunables.length_boundaries``); none for a subject without lengths."""
    if not caps.lengths or not caps.dtypes:
        return ()
    boundaries = caps.tunables.length_boundaries()
    shapes = [
        edge_matrix.ragged_case(s, p, boundaries, caps.q_lengths)
        for s in edge_matrix.RAGGED_SHAPES
        for p in edge_matrix.ragged_patterns(0)[:1]
    ]
    runs = [
        s
        for s, probe in zip(edge_matrix.RAGGED_SHAPES, shapes, strict=True)
        if _runs(caps, dataclasses.replace(probe, dtype=caps.dtypes[0]))
    ]
    if not runs:
        return ()
    return tuple(
        edge_matrix.ragged_case(runs[0], p, boundaries, caps.q_lengths)
        for p in edge_matrix.ragged_patterns(level)
    )


def _leading_batch_cases(caps: Capabilities, level: int) -> tuple[Case, ...]:
    """The leading-batch-dims templates up to ``level`` for a subject whose call takes them; none
    for the others (their call has one batch axis)."""
    return edge_matrix.leading_batch_cases(level) if caps.leading_batch_dims else ()


def storage_cases(caps: Capabilities, level: int) -> tuple[Case, ...]:
    """The curated quantized-input cases (``edge_matrix.storage_pairs``) on the first of
    ``edge_matrix.STORAGE_SHAPES`` the subject runs; none for a subject that declares no storage
    it accepts per call (a fixed K/V storage is every case's already)."""
    kv = () if caps.kv_storage is not None else caps.kv_storages
    if not (caps.q_storages or kv) or not caps.dtypes:
        return ()
    runs = [
        s
        for s in edge_matrix.STORAGE_SHAPES
        if not caps.admits(s.skeleton(), s.spec, caps.dtypes[0], "forward", s.features)
    ]
    if not runs:
        return ()
    return tuple(
        dataclasses.replace(runs[0], q_storage=q, kv_storage=k)
        for q, k in edge_matrix.storage_pairs(caps.q_storages, kv, level)
    )


# A set runs in the first dtype where it tests what no dtype changes (each case is a kernel of its
# own in interpret mode, which is slow): blocking, a mask, page and offset arithmetic, a call form.
# The config shapes say per shape (``edge_matrix.CONFIG_SHAPES``), so their configs are two sets.
# Storages run in every dtype: what a storage's rounding meets differs by dtype.
CURATED_SETS: tuple[CuratedSet, ...] = (
    CuratedSet(
        name="edge_matrix",
        features=(),
        templates=lambda caps, level: edge_matrix.edge_cases(level),
        dtypes="every",
        fp8_core_at_level_0=True,
    ),
    CuratedSet(
        name="edge_configs",
        features=(),
        templates=_edge_configs(every_dtype=False),
        dtypes="first",
        fp8_core_at_level_0=True,
    ),
    CuratedSet(
        name="edge_configs_every_dtype",
        features=(),
        templates=_edge_configs(every_dtype=True),
        dtypes="every",
        fp8_core_at_level_0=True,
    ),
    CuratedSet(
        name="chunk_edges",
        features=("chunked_causal",),
        templates=lambda caps, level: edge_matrix.chunk_cases(level),
        dtypes="first",
        fp8_core_at_level_0=False,
    ),
    CuratedSet(
        name="ragged_lengths",
        features=("lengths",),
        templates=ragged_cases,
        dtypes="first",
        fp8_core_at_level_0=False,
    ),
    CuratedSet(
        name="leading_batch_dims",
        features=("leading_batch_dims",),
        templates=_leading_batch_cases,
        dtypes="first",
        fp8_core_at_level_0=False,
    ),
    CuratedSet(
        name="storages",
        features=("q_storage", "kv_storage"),
        templates=storage_cases,
        dtypes="every",
        fp8_core_at_level_0=False,
    ),
)
