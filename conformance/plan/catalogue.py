"""Which (check, case) pairs a run holds, and what each one expects.

For each subject: the curated sets (``curated_sets.CURATED_SETS``: the edge matrix in every
declared dtype, and the sets of its tunables and features), plus cases drawn by hypothesis from
its capabilities. Each pair is filed as

  * ``run``          the check runs;
  * ``unsupported``  outside the declared capabilities, or a shape constraint the API
                     cannot express (basis ``api``; verdict "unsupported", with the reason);
  * ``raises``       a constraint declared to raise: only the ``raises`` check runs it;
  * ``unavailable``  the subject cannot run here (one pair per check, not per case).

Pure functions of (subjects, profile, seed): the xdist controller rebuilds the same
catalogue to name the case of a test whose worker died.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal

import numpy as np

from conformance.plan import curated_sets, edge_matrix, pairwise, strategies
from conformance.plan.case_syntax import CaseSyntaxError, bound, parse_case
from conformance.plan.cases import Case
from conformance.plan.draws import mask_arrays, neg_inf_bias
from conformance.plan.profiles import Profile
from conformance.plan.subjects import Subject
from conformance.suite.check_registry import (
    CHECKS,
    LOWERING_SAMPLINGS,
    PAIRWISE_CHECK,
    REGISTRY,
    CheckDeclaration,
    declaration,
)
from kernels.contract import features
from kernels.contract.base import CONSTRAINT_STAGES, Capabilities, ShapeConstraint
from kernels.contract.dtypes import DTYPES
from kernels.subjects import TIERS, CatalogueError, ci_cases
from reference.masks import full_visibility, has_mask
from reference.spec import AttentionInputs

Status = Literal["run", "unsupported", "raises", "unavailable"]

LEAK_MAX_FLOPS = 1 << 28


@dataclasses.dataclass(frozen=True)
class Planned:
    """One test item: a check of a case, and what the case is to that check.

    direction: for ``raises``, which call is declared to raise ("forward"/"backward").
    """

    check: str
    case: Case
    status: Status
    reason: str = ""
    direction: str = "forward"
    # Whether the backward pass runs for this case (the backward check would run): decided
    # here once, so the checks that also look at gradients never re-ask the planner.
    backward: bool = False

    @property
    def test_id(self) -> str:
        return self.case.case_id

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case.subject, self.case.case_id, self.check)


def unavailable_case(subject: str) -> Case:
    """The placeholder case of an unavailable subject (its id is ``<subject>-unavailable``)."""
    return Case(subject=subject, dtype="unavailable")


@functools.lru_cache(maxsize=4096)  # asked per check of a case and again to rank them, in every process
def has_fully_masked_rows(case: Case) -> bool:
    """Whether some query row may attend to no key (computed from the masks, no values).
    Never with a feature that keeps every row alive (``Feature.keeps_rows``: a sink stays in
    each denominator, so out and lse are the formula's, judged by forward and lse)."""
    if any(f.keeps_rows and f.present(case) for f in features.FEATURES):
        return False
    masks = mask_arrays(case)
    skeleton = dataclasses.replace(
        case.skeleton(),
        q_segment_ids=masks.q_segment_ids,
        kv_segment_ids=masks.kv_segment_ids,
        mask=masks.mask,
    )
    neg_inf = neg_inf_bias(case)  # a -inf bias masks its keys (docs/semantics.md)
    if not has_mask(case.spec, skeleton):
        return neg_inf is not None and bool((~(~neg_inf).any(axis=-1)).any())
    visible = full_visibility(case.spec, _small_heads(skeleton))
    if neg_inf is not None:
        visible = visible & ~neg_inf
    return bool((~visible.any(axis=-1)).any())


def _small_heads(inputs: AttentionInputs) -> AttentionInputs:
    """Visibility never depends on the head unless a boolean mask has a head axis; keep one
    head otherwise so the plane stays small."""
    if inputs.mask is not None and inputs.mask.shape[1] != 1:
        return inputs
    q = inputs.q[:, :1]
    return dataclasses.replace(inputs, q=q, k=inputs.k[:, :1], v=inputs.v[:, :1])


def cases_for(subject: Subject, profile: Profile, draw_seed: int) -> tuple[Case, ...]:
    """Each curated set (``curated_sets.CURATED_SETS``) in the dtypes it declares, then drawn cases;
    no duplicates. At ci, a built-in variant that declares its own ci cases
    (``kernels.subjects.ci_cases``) runs those instead."""
    caps = subject.capabilities
    declared = ci_cases(subject.name) if profile.name == TIERS[0] else ()
    if declared:
        return declared_cases(subject.name, declared, caps)
    dtypes = tuple(d for d in DTYPES if d in caps.dtypes)
    curated = [
        edge_matrix.instantiate(t, subject.name, d)
        for curated_set in curated_sets.CURATED_SETS
        for t in curated_set.templates(caps, profile.edge_level)
        for d in curated_set.dtypes_of(t, dtypes, profile.edge_level)
    ]
    # K/V in the subject's own storage (int8 pages, ...): its every case, rounded to it.
    # What a template leaves to the subject (a bias fill's kv block: ``features.for_subject``).
    curated = [
        dataclasses.replace(c, **features.subject_fields(caps), **features.for_subject(c, caps))
        for c in curated
    ]
    drawn = strategies.draw_cases(
        strategies.cases(subject.name, caps, profile), profile.drawn_cases, draw_seed
    )
    cases = list(dict.fromkeys([*curated, *drawn]))
    # Pairs of optional inputs the matrix leaves out, in the first dtype: they test how the
    # kernel combines masks and options, which no dtype changes.
    runs = runs_forward(caps)
    added, _ = (
        pairwise.covering_cases(subject.name, caps, dtypes[0], [c for c in cases if runs(c) is None], runs)
        if dtypes
        else ((), {})
    )
    return tuple(dict.fromkeys([*cases, *added]))


def declared_cases(subject: str, texts: tuple[str, ...], caps: Capabilities) -> tuple[Case, ...]:
    """``texts`` (``--case`` syntax) as ``subject``'s cases; CatalogueError naming the one that does
    not parse (a case in ``kernels/subjects.py`` that cannot exist, or in a dtype it does not declare)."""
    try:
        return tuple(bound(parse_case(text, caps.dtypes), subject, caps) for text in texts)
    except CaseSyntaxError as error:
        raise CatalogueError(f"{subject}'s ci_cases in kernels/subjects.py: {error}") from None


def runs_forward(caps: Capabilities) -> pairwise.RunsCheck:
    """Why the pairwise check (the forward check) would not run a case for this subject, or None
    when it runs."""
    check = declaration(PAIRWISE_CHECK)

    def why_not(case: Case) -> str | None:
        planned = _against_declaration(check, case, caps)
        if planned is None:
            return "not planned"
        return None if planned.status == "run" else planned.reason or planned.status

    return why_not


def pairwise_coverage(subject: Subject, cases: tuple[Case, ...]) -> pairwise.PairCoverage:
    """The subject's pairwise coverage over ``cases`` (its planned cases)."""
    caps = subject.capabilities
    dtype = next((d for d in DTYPES if d in caps.dtypes), "float32")
    return pairwise.report(subject.name, caps, dtype, cases, runs_forward(caps))


def _raising(
    constraints: tuple[ShapeConstraint, ...], stages: tuple[str, ...] = CONSTRAINT_STAGES
) -> ShapeConstraint | None:
    """The first constraint declared to raise at one of ``stages`` (``ShapeConstraint.stage``)."""
    return next((c for c in constraints if c.raises and c.stage in stages), None)


def _constraint_reasons(constraints: tuple[ShapeConstraint, ...]) -> str:
    # A constraint violated in both directions is one reason, said once.
    return "; ".join(dict.fromkeys(f"{c.name}: {c.reason}" for c in constraints))


def classify(check: str, case: Case, caps: Capabilities) -> Planned | None:
    """What ``case`` is to ``check``; None when the check does not apply to the case at all."""
    planned = _against_declaration(declaration(check), case, caps)
    return None if planned is None else _with_needs(planned, caps)


@dataclasses.dataclass(frozen=True)
class CaseExclusions:
    """What a subject's declaration says of one case, whatever the check: the declared-capability
    reason it is outside (None: inside), and the shape constraints it violates per direction."""

    reason: str | None
    forward: tuple[ShapeConstraint, ...]
    backward: tuple[ShapeConstraint, ...]


def case_exclusions(case: Case, caps: Capabilities) -> CaseExclusions:
    """The case against the subject's declared capabilities and constraints: the same for every
    check, so a plan computes it once per case (it is most of a plan's time)."""
    skeleton = case.skeleton()
    outside = caps.admits(skeleton, case.spec, case.dtype, "forward", case.features, case.config)
    outside_bwd = (
        caps.admits(skeleton, case.spec, case.dtype, "backward", case.features, case.config)
        if caps.backward
        else ()
    )
    return CaseExclusions(
        reason=next((e.text for e in outside if e.constraint is None), None),
        forward=tuple(e.constraint for e in outside if e.constraint is not None),
        backward=tuple(e.constraint for e in outside_bwd if e.constraint is not None),
    )


def _against_declaration(
    check: CheckDeclaration, case: Case, caps: Capabilities, exclusions: CaseExclusions | None = None
) -> Planned | None:
    """The case against the subject's declared capabilities and constraints, before the
    check's own needs (``_with_needs``): sampled checks pick their cases first. ``exclusions``:
    ``case_exclusions(case, caps)`` where the caller already has it."""
    found = case_exclusions(case, caps) if exclusions is None else exclusions
    reason, fwd, bwd = found.reason, found.forward, found.backward
    name = check.name
    if check.sampling in LOWERING_SAMPLINGS:
        return _for_lowering(check, case, caps, reason, fwd, bwd)
    # What only the hardware's compiler rejects still runs in the interpreter, and its numbers
    # are the kernel's math: judged like any case (the lowers check asserts the rejection).
    fwd = tuple(c for c in fwd if c.stage != "lowering")
    bwd = tuple(c for c in bwd if c.stage != "lowering")
    if check.sampling == "raising_cases":
        if reason is not None:
            return None
        if fwd and _raising(fwd) is None:
            return None  # outside a non-raising forward constraint: out of scope in both directions
        for direction, violated in (("forward", fwd), ("backward", bwd)):
            hit = _raising(violated)
            if hit is not None:
                return Planned(name, case, "raises", f"{hit.name}: {hit.reason}", direction)
        return None
    if check.runs_backward and case.input_kind == "nan_padding":
        return None  # 0 x NaN in dq = ds @ k: NaN padding is a forward-only input kind
    if check.sampling == "fully_masked_cases" and not has_fully_masked_rows(case):
        return None
    if reason is not None:
        return Planned(name, case, "unsupported", reason)
    violated = tuple(dict.fromkeys(fwd + (bwd if check.runs_backward else ())))  # "both": once
    if violated:
        note = " (declared to raise; see the raises check)" if _raising(violated) else ""
        return Planned(name, case, "unsupported", _constraint_reasons(violated) + note)
    return Planned(name, case, "run", backward=_backward_runs(case, caps, fwd, bwd))


def _for_lowering(
    check: CheckDeclaration,
    case: Case,
    caps: Capabilities,
    reason: str | None,
    fwd: tuple[ShapeConstraint, ...],
    bwd: tuple[ShapeConstraint, ...],
) -> Planned | None:
    """A case to a check that lowers its call: ``lowering_cases`` takes cases declared to raise
    too (status ``raises``: they must fail to lower), ``lowered_cases`` only those that lower.
    An interpreter's own limit (stage ``"interpreter"``) is no limit of the lowered call."""
    fwd = tuple(c for c in fwd if c.stage != "interpreter")
    bwd = tuple(c for c in bwd if c.stage != "interpreter")
    if reason is not None:
        return Planned(check.name, case, "unsupported", reason)
    unmet = check.unmet_needs(caps)  # a subject with nothing to lower has no case to refuse either
    if unmet:
        return Planned(check.name, case, "unsupported", unmet[0])
    hit = _raising(fwd) or _raising(bwd)
    if hit is not None:
        if check.sampling != "lowering_cases":
            return None
        direction = "forward" if _raising(fwd) else "backward"
        # a backward the API cannot express (a non-raising constraint) has no call to lower
        expressible = not any(not c.raises for c in bwd)
        return Planned(
            check.name, case, "raises", f"{hit.name}: {hit.reason}", direction, caps.backward and expressible
        )
    if fwd:
        return Planned(check.name, case, "unsupported", _constraint_reasons(fwd))
    return Planned(check.name, case, "run", backward=caps.backward and not bwd)


def _backward_runs(
    case: Case, caps: Capabilities, fwd: tuple[ShapeConstraint, ...], bwd: tuple[ShapeConstraint, ...]
) -> bool:
    """Whether the backward check runs on this case: what the other checks judge with it."""
    return caps.backward and case.input_kind != "nan_padding" and not fwd and not bwd


def _with_needs(planned: Planned, caps: Capabilities) -> Planned:
    """A runnable item whose check needs what the subject does not declare is unsupported."""
    if planned.status != "run":
        return planned
    unmet = declaration(planned.check).unmet_needs(caps)
    if unmet:
        return dataclasses.replace(planned, status="unsupported", reason=unmet[0], backward=False)
    return planned


def _runtime_subset(planned: list[Planned], per_dtype: int) -> list[Planned]:
    """The ``per_dtype`` largest cheap runnable cases of each dtype: runtime checks repeat
    calls, so they run on a sample, and nondeterminism hides in multi-block reductions,
    so the sample is as big as the leak case's cost cap allows. Cases whose every row sees a
    key come first: a batch of empty rows (a ragged pattern) reduces nothing, so it would hide
    the nondeterminism and the recompiles the sample is there to show."""
    chosen: list[Planned] = []
    counts: dict[str, int] = {}
    runnable = [p for p in planned if p.status == "run"]
    cheap = [p for p in runnable if p.case.shape.flops <= LEAK_MAX_FLOPS] or runnable
    ranked = sorted(cheap, key=lambda p: (has_fully_masked_rows(p.case), -p.case.shape.flops, p.case.case_id))
    for item in ranked:
        if counts.get(item.case.dtype, 0) < per_dtype:
            counts[item.case.dtype] = counts.get(item.case.dtype, 0) + 1
            chosen.append(item)
    return chosen


NO_BATCHED_CASE = (
    "no runnable case of this subject has batch >= 2: with one request there is no neighbour "
    "whose presence could change its answer"
)


def _distinct_requests(case: Case) -> bool:
    """Whether the requests of ``case`` differ by more than their values: per-request inputs
    (lengths, segment ids, a bias or mask with a batch axis: ``Feature.batch_inputs``), whose
    rows a kernel may slice, offset or pad per request."""
    skeleton = case.skeleton()
    return any(
        (array := getattr(skeleton, name)) is not None and array.shape[0] == case.batch
        for name in features.batch_inputs()
    )


def _batched_subset(planned: list[Planned], per_dtype: int) -> list[Planned]:
    """The batch-invariance check's cases (``batched_sample``): ``_runtime_subset`` of the cases
    with batch >= 2, first from those whose requests differ beyond their values (the request cut
    out then has its own lengths or ids, where a per-request offset goes wrong). A subject with
    no such case keeps one item, unsupported with the reason: the check is planned, never absent."""
    batched = [p for p in planned if p.case.batch >= 2]
    if not [p for p in batched if p.status == "run"]:
        first = planned[:1]
        return [dataclasses.replace(p, status="unsupported", reason=NO_BATCHED_CASE) for p in first]
    chosen: list[Planned] = []
    counts: dict[str, int] = {}
    for distinct in (True, False):
        tier = [p for p in batched if _distinct_requests(p.case) == distinct]
        for item in _runtime_subset(tier, per_dtype):
            if counts.get(item.case.dtype, 0) < per_dtype:
                counts[item.case.dtype] = counts.get(item.case.dtype, 0) + 1
                chosen.append(item)
    return chosen


def _one_batched_case(planned: list[Planned]) -> list[Planned]:
    """vmap's case (``one_batched_case``): one of ``batched_sample``'s, float32 first. A batching
    rule is structure, not arithmetic: one case shows it, and float32's tolerance is the tightest
    on a slice answered wrong. With no batch >= 2 case, the largest cheap one (a B = 1 case still
    shows a dropped or misplaced axis)."""
    batched = [p for p in _batched_subset(planned, 1) if p.status == "run"]
    chosen = batched or _runtime_subset(planned, 1)
    return sorted(chosen, key=lambda p: p.case.dtype != "float32")[:1]


def _vmap_cases(planned: list[Planned]) -> list[Planned]:
    """vmap's cases (``vmap_cases``): ``_one_batched_case``'s and, where its requests differ by
    per-request inputs, one batched case whose requests differ only in values, float32 first. A
    batching rule is structure, so one case per form shows it: the first slices lengths, segment
    ids or a per-row mask along the vmapped axis; the second is the plain batch, which a subject
    that builds a per-row input into its function (splash's mask planes) can still put under
    ``jax.vmap`` where it cannot the first (that item is unsupported, with the reason)."""
    first = _one_batched_case(planned)
    if not first or not _distinct_requests(first[0].case):
        return first
    plain = [p for p in planned if p.case.batch >= 2 and not _distinct_requests(p.case)]
    second = sorted(_runtime_subset(plain, 1), key=lambda p: p.case.dtype != "float32")[:1]
    return first + second


def _one_backward_case(planned: list[Planned]) -> list[Planned]:
    """dropout's case (``one_backward_case``): one of ``_runtime_subset``'s, float32 first (the
    tightest tolerance), among the cases whose backward runs where there are any, so that one mask
    is judged in both directions."""
    runnable = [p for p in planned if p.status == "run"]
    chosen = _runtime_subset([p for p in runnable if p.backward], 1) or _runtime_subset(runnable, 1)
    return sorted(chosen, key=lambda p: p.case.dtype != "float32")[:1]


def _race_subset(planned: list[Planned], per_dtype: int) -> list[Planned]:
    """The race check's cases: ``_runtime_subset``, first from cases with one batch row and
    several heads, then several programs of any kind, then any. Races need programs that may
    run at once (heads on a 'parallel' grid axis), and a batch that a wrapper vmaps becomes a
    grid axis the kernel never scheduled."""

    def tier(case: Case) -> int:
        return 0 if case.batch == 1 and case.q_heads > 1 else 1 if case.batch * case.q_heads > 1 else 2

    chosen: list[Planned] = []
    counts: dict[str, int] = {}
    for level in (0, 1, 2):
        for item in _runtime_subset([p for p in planned if tier(p.case) == level], per_dtype):
            if counts.get(item.case.dtype, 0) < per_dtype:
                counts[item.case.dtype] = counts.get(item.case.dtype, 0) + 1
                chosen.append(item)
    return chosen


def _largest_output_case(planned: list[Planned]) -> list[Planned]:
    """One case (``one_case``, the leak check's): the largest output among cheap cases, so a
    per-call leak of one output stands out of allocator noise without paying for a big kernel."""
    runnable = [p for p in planned if p.status == "run" and p.case.input_kind == "normal"]
    cheap = [p for p in runnable if p.case.shape.flops <= LEAK_MAX_FLOPS] or runnable
    cheap.sort(key=lambda p: (-_out_bytes(p.case), p.case.case_id))
    return cheap[:1]


def _configured(planned: list[Planned]) -> list[Planned]:
    """The cases that carry a config (``config_cases``); a subject with none (no tunables) keeps
    its first item, which its unmet need makes unsupported with the reason, not absent."""
    return [p for p in planned if p.case.config] or planned[:1]


def _out_bytes(case: Case) -> int:
    return case.batch * case.q_heads * case.q_len * case.v_head_dim * np.dtype(np.float32).itemsize


# The samplings that keep a subset of the cases their check applies to
# (``CheckDeclaration.sampling``); every other sampling keeps them all.
SAMPLES: dict[str, Callable[[list[Planned], Profile], list[Planned]]] = {
    "one_case": lambda items, profile: _largest_output_case([p for p in items if p.status == "run"]),
    "runtime_sample": lambda items, profile: _runtime_subset(items, profile.runtime_cases_per_dtype),
    "race_sample": lambda items, profile: _race_subset(items, profile.runtime_cases_per_dtype),
    "batched_sample": lambda items, profile: _batched_subset(items, profile.runtime_cases_per_dtype),
    "one_batched_case": lambda items, profile: _one_batched_case(items),
    "vmap_cases": lambda items, profile: _vmap_cases(items),
    "one_backward_case": lambda items, profile: _one_backward_case(items),
    "config_cases": lambda items, profile: _configured(items),
}


def plan(subjects: tuple[Subject, ...], profile: Profile, draw_seed: int) -> dict[str, tuple[Planned, ...]]:
    """check name -> its test items over every subject, in catalogue order."""
    by_check: dict[str, list[Planned]] = {check: [] for check in CHECKS}
    for subject in subjects:
        if not subject.available:
            for check in REGISTRY:
                if check.sampling != "raising_cases" and not (
                    subject.lowerable and check.sampling in LOWERING_SAMPLINGS
                ):
                    by_check[check.name].append(
                        Planned(check.name, unavailable_case(subject.name), "unavailable", subject.reason)
                    )
            if not subject.lowerable:
                continue
        cases = cases_for(subject, profile, draw_seed)
        caps = subject.capabilities
        exclusions = [case_exclusions(c, caps) for c in cases]
        for check in REGISTRY:
            if not subject.available and check.sampling not in LOWERING_SAMPLINGS:
                continue
            found = (_against_declaration(check, c, caps, e) for c, e in zip(cases, exclusions, strict=True))
            items = [p for p in found if p is not None]
            sample = SAMPLES.get(check.sampling)
            if sample is not None:
                items = sample(items, profile)
            if check.sampling == "declared_cases" and check.unmet_needs(caps):
                items = items[:1]  # one item says why, not one per case
            by_check[check.name].extend(_with_needs(p, caps) for p in items)
    return {check: tuple(items) for check, items in by_check.items()}
