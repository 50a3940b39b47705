"""Which (check, case) pairs a run holds, and what each one expects.

For each subject: the curated edge matrix in every declared dtype, plus cases drawn
by hypothesis from its capabilities. Each pair is filed as

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
from typing import Literal

import numpy as np

from conformance.judge.dtypes import DTYPE_NAMES
from conformance.judge.inputs import mask_arrays
from conformance.plan import edge_matrix, strategies
from conformance.plan.cases import Case
from conformance.plan.profiles import Profile
from conformance.plan.subjects import Subject
from kernels.base import Capabilities, ShapeConstraint
from reference.masks import full_visibility, has_mask
from reference.spec import AttentionInputs

Status = Literal["run", "unsupported", "raises", "unavailable"]

# The checks, in the order they run for one case (so cached outputs are reused and a
# crash in a late check cannot hide an early result).
CHECKS: tuple[str, ...] = (
    "raises",
    "shape_dtype",
    "forward",
    "lse",
    "fully_masked",
    "backward",
    "finite",
    "no_mutation",
    "determinism",
    "recompile",
    "leak",
)
FORWARD_CHECKS = frozenset({"shape_dtype", "forward", "lse", "fully_masked", "finite", "no_mutation"})
RUNTIME_CHECKS = frozenset({"determinism", "recompile", "leak"})
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

    @property
    def test_id(self) -> str:
        return self.case.case_id

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case.subject, self.case.case_id, self.check)


def unavailable_case(subject: str) -> Case:
    """The placeholder case of an unavailable subject (its id is ``<subject>-unavailable``)."""
    return Case(subject=subject, dtype="unavailable")


def has_fully_masked_rows(case: Case) -> bool:
    """Whether some query row may attend to no key (computed from the masks, no values)."""
    masks = mask_arrays(case)
    skeleton = dataclasses.replace(
        case.skeleton(),
        q_segment_ids=masks.q_segment_ids,
        kv_segment_ids=masks.kv_segment_ids,
        mask=masks.mask,
    )
    if not has_mask(case.spec, skeleton):
        return False
    return bool((~full_visibility(case.spec, _small_heads(skeleton)).any(axis=-1)).any())


def _small_heads(inputs: AttentionInputs) -> AttentionInputs:
    """Visibility never depends on the head unless a boolean mask has a head axis; keep one
    head otherwise so the plane stays small."""
    if inputs.mask is not None and inputs.mask.shape[1] != 1:
        return inputs
    q = inputs.q[:, :1]
    return dataclasses.replace(inputs, q=q, k=inputs.k[:, :1], v=inputs.v[:, :1])


def cases_for(subject: Subject, profile: Profile, draw_seed: int) -> tuple[Case, ...]:
    """The curated matrix in each declared dtype, then drawn cases; no duplicates."""
    caps = subject.capabilities
    dtypes = tuple(d for d in DTYPE_NAMES if d in caps.dtypes)
    curated = [
        edge_matrix.instantiate(t, subject.name, d)
        for t in edge_matrix.edge_cases(profile.edge_level)
        for d in dtypes
    ]
    drawn = strategies.draw_cases(
        strategies.cases(subject.name, caps, profile), profile.drawn_cases, draw_seed
    )
    return tuple(dict.fromkeys([*curated, *drawn]))


def _raising(constraints: tuple[ShapeConstraint, ...]) -> ShapeConstraint | None:
    return next((c for c in constraints if c.raises), None)


def _constraint_reasons(constraints: tuple[ShapeConstraint, ...]) -> str:
    return "; ".join(f"{c.name}: {c.reason}" for c in constraints)


def classify(check: str, case: Case, caps: Capabilities) -> Planned | None:
    """What ``case`` is to ``check``; None when the check does not apply to the case at all."""
    reason = caps.unsupported_reason(case.skeleton(), case.spec, case.dtype)
    fwd = caps.violated_constraints(case.shape, case.spec, "forward", case.features)
    bwd = caps.violated_constraints(case.shape, case.spec, "backward", case.features) if caps.backward else ()
    if check == "raises":
        if reason is not None:
            return None
        if fwd and _raising(fwd) is None:
            return None  # outside a non-raising forward constraint: out of scope in both directions
        for direction, violated in (("forward", fwd), ("backward", bwd)):
            hit = _raising(violated)
            if hit is not None:
                return Planned(check, case, "raises", f"{hit.name}: {hit.reason}", direction)
        return None
    backwardish = check == "backward"
    if backwardish and case.input_kind == "nan_padding":
        return None  # 0 x NaN in dq = ds @ k: NaN padding is a forward-only input kind
    if check == "fully_masked" and not has_fully_masked_rows(case):
        return None
    if reason is not None:
        return Planned(check, case, "unsupported", reason)
    violated = fwd + (bwd if backwardish else ())
    if violated:
        raising = _raising(violated)
        note = " (declared to raise; see the raises check)" if raising else ""
        return Planned(check, case, "unsupported", _constraint_reasons(violated) + note)
    if backwardish and not caps.backward:
        return Planned(check, case, "unsupported", "backward pass not declared")
    if check == "lse" and not caps.lse:
        return Planned(check, case, "unsupported", "lse not exposed")
    return Planned(check, case, "run")


def _runtime_subset(planned: list[Planned], per_dtype: int) -> list[Planned]:
    """The ``per_dtype`` largest cheap runnable cases of each dtype: runtime checks repeat
    calls, so they run on a sample, and nondeterminism hides in multi-block reductions,
    so the sample is as big as the leak case's cost cap allows."""
    chosen: list[Planned] = []
    counts: dict[str, int] = {}
    runnable = [p for p in planned if p.status == "run"]
    cheap = [p for p in runnable if p.case.shape.flops <= LEAK_MAX_FLOPS] or runnable
    for item in sorted(cheap, key=lambda p: (-p.case.shape.flops, p.case.case_id)):
        if counts.get(item.case.dtype, 0) < per_dtype:
            counts[item.case.dtype] = counts.get(item.case.dtype, 0) + 1
            chosen.append(item)
    return chosen


def _leak_case(planned: list[Planned]) -> list[Planned]:
    """One case for the leak check: the largest output among cheap cases, so a per-call
    leak of one output stands out of allocator noise without paying for a big kernel."""
    runnable = [p for p in planned if p.status == "run" and p.case.input_kind == "normal"]
    cheap = [p for p in runnable if p.case.shape.flops <= LEAK_MAX_FLOPS] or runnable
    cheap.sort(key=lambda p: (-_out_bytes(p.case), p.case.case_id))
    return cheap[:1]


def _out_bytes(case: Case) -> int:
    return case.batch * case.q_heads * case.q_len * case.v_head_dim * np.dtype(np.float32).itemsize


def plan(subjects: tuple[Subject, ...], profile: Profile, draw_seed: int) -> dict[str, tuple[Planned, ...]]:
    """check name -> its test items over every subject, in catalogue order."""
    by_check: dict[str, list[Planned]] = {check: [] for check in CHECKS}
    for subject in subjects:
        if not subject.available:
            for check in CHECKS:
                if check != "raises":
                    by_check[check].append(
                        Planned(check, unavailable_case(subject.name), "unavailable", subject.reason)
                    )
            continue
        cases = cases_for(subject, profile, draw_seed)
        for check in CHECKS:
            items = [p for p in (classify(check, c, subject.capabilities) for c in cases) if p is not None]
            if check == "leak":
                items = _leak_case([p for p in items if p.status == "run"])
            elif check in RUNTIME_CHECKS:
                items = _runtime_subset(items, profile.runtime_cases_per_dtype)
            by_check[check].extend(items)
    return {check: tuple(items) for check, items in by_check.items()}
