"""Hypothesis strategies that draw cases only from what an adapter declares.

``cases(subject, caps, profile)`` draws a runnable case: every feature is one the
Capabilities declare, and the drawn shape satisfies every ShapeConstraint (forward
and, when the subject has a backward pass, backward), so drawn cases exercise the
kernel rather than its input checks. ``draw_cases`` turns the strategy into a fixed
list for a seed; ``within(case, ...)`` is the space a failing case shrinks in.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as hypothesis_providers

from conformance.plan.cases import Case
from conformance.plan.profiles import Profile
from kernels.contract import features as feature_table
from kernels.contract.base import Capabilities
from kernels.contract.dtypes import DTYPES
from kernels.contract.features import Draw
from kernels.contract.tunables import Config, Tunables
from reference.spec import AttentionShape, AttentionSpec


@dataclasses.dataclass
class DrawContext:
    """What a feature's draw sees (``kernels.contract.features.Draw``): hypothesis's ``draw`` and
    strategies, the subject's declaration, the fields drawn so far (``fields``), the case
    being shrunk (``case``, when shrinking) and the admissible head dims."""

    draw: st.DrawFn
    st: Any
    caps: Capabilities
    fields: dict[str, Any]
    case: Case | None = None
    head_dims: tuple[int, ...] = ()

    @staticmethod
    def per_row(batch: int, full: int) -> st.SearchStrategy[tuple[int, ...]]:
        """One length in [0, full] per batch row."""
        return _lengths(batch, full)


@st.composite
def _lengths(draw: st.DrawFn, batch: int, full: int) -> tuple[int, ...]:
    # A composite of its own (not st.tuples): hypothesis mutates earlier draws by their
    # labels, so the drawn cases of a seed stay the same only while this one does.
    return tuple(draw(st.integers(0, full)) for _ in range(batch))


def _run(steps: list[Draw], ctx: DrawContext) -> dict[str, Any]:
    """Run the core draws and the features' in sequence order, each seeing the fields before it."""
    for step in sorted(steps, key=lambda d: d.at):
        ctx.fields.update(step.fn(ctx))
    return ctx.fields


def runnable(case: Case, caps: Capabilities) -> bool:
    """Inside the declared capabilities and every shape constraint of the directions it has."""
    directions = ("forward", "backward") if caps.backward else ("forward",)
    skeleton = case.skeleton()
    return not any(
        caps.admits(skeleton, case.spec, case.dtype, d, case.features, case.config) for d in directions
    )


def _admissible_lengths(
    caps: Capabilities, lengths: tuple[int, ...], head_dim: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(q lengths, kv lengths) that pass every constraint in some plain probe shape with a
    length of the other side, so the joint filter rarely rejects (hypothesis gives up on
    filters that reject most draws). Decode kernels (Sq must be 1) get q lengths (1,)."""

    spec = _probe_spec(caps)

    def ok(sq: int, sk: int) -> bool:
        shape = AttentionShape(1, 1, 1, sq, sk, head_dim, head_dim)
        return not any(
            caps.admits(shape, spec, caps.dtypes[0], d)
            for d in ("forward", "backward")
            if d == "forward" or caps.backward
        )

    same = tuple(n for n in lengths if ok(n, n))
    if len(same) > 1:  # both sides free (one common length: a side is pinned, e.g. decode's Sq 1)
        return same, same
    q_good = tuple(n for n in lengths if any(ok(n, m) for m in lengths))
    kv_good = tuple(m for m in lengths if any(ok(n, m) for n in lengths))
    return q_good or lengths, kv_good or lengths


def _probe_spec(caps: Capabilities) -> AttentionSpec:
    """The spec of the probes: plain, except for a subject whose only alignment is
    bottom_right_valid (a serving kernel, always causal), probed causal."""
    if caps.causal_alignments == ("bottom_right_valid",):
        return AttentionSpec(causal=True, alignment="bottom_right_valid")
    return AttentionSpec()


def _admissible_dims(caps: Capabilities, dims: tuple[int, ...], length: int) -> tuple[int, ...]:
    def ok(d: int) -> bool:
        shape = AttentionShape(1, 1, 1, length, length, d, d)
        return not caps.admits(shape, _probe_spec(caps), caps.dtypes[0], "forward")

    good = tuple(d for d in dims if ok(d))
    return good or dims


@st.composite
def _config(draw: st.DrawFn, tunables: Tunables, q_len: int, kv_len: int, batch: int) -> Config:
    """A legal config whose blocks divide the lengths: each parameter keeps its default or takes
    a drawn legal value; a minor block that no longer divides its major keeps its default."""
    limits = {"q": q_len, "kv": kv_len, "batch": batch}
    values: dict[str, object] = {}
    for p in tunables.params:
        if p.axis == "flag":
            choice = draw(st.booleans())
        elif p.axis == "choice":
            choice = draw(st.sampled_from(p.choices))
        else:
            span = p.span(limits[p.axis])
            fitting = [v for v in p.candidates(span) if span % v == 0 or p.axis == "batch"]
            choice = draw(st.sampled_from([p.default, *fitting]))
        values[p.name] = choice
    for p in tunables.params:
        if p.divides is not None and tunables.problems({**values, p.name: values[p.name]}):
            values[p.name] = p.default
    return () if tunables.problems(values) else tunables.normalized(values)


@st.composite
def _case(
    draw: st.DrawFn,
    subject: str,
    caps: Capabilities,
    profile: Profile,
    head_dims: tuple[int, ...],
    lengths_spaces: tuple[tuple[int, ...], tuple[int, ...]],
) -> Case:
    dtypes = tuple(d for d in caps.dtypes if d in DTYPES)
    q_lengths_space, kv_lengths_space = lengths_spaces

    def padded_kinds(ctx: DrawContext) -> dict[str, Any]:
        kinds = ["normal", "large", "integers"] + (["nan_padding"] if _padded(ctx.fields) else [])
        return {"input_kind": ctx.draw(st.sampled_from(kinds))}

    core = [
        Draw(10, lambda ctx: {"batch": draw(st.integers(1, profile.max_batch))}),
        Draw(20, lambda ctx: {"kv_heads": draw(st.integers(1, profile.max_kv_heads))}),
        Draw(40, lambda ctx: {"head_dim": draw(st.sampled_from(head_dims))}),
        Draw(50, lambda ctx: {"q_len": draw(st.sampled_from(q_lengths_space))}),
        Draw(60, lambda ctx: {"kv_len": draw(st.sampled_from(kv_lengths_space))}),
        Draw(130, lambda ctx: {"dtype": draw(st.sampled_from(dtypes))}),
        Draw(180, padded_kinds),
        Draw(
            190,
            lambda ctx: {
                "config": draw(
                    _config(caps.tunables, ctx.fields["q_len"], ctx.fields["kv_len"], ctx.fields["batch"])
                )
                if profile.draw_configs and caps.tunables
                else ()
            },
        ),
    ]
    steps = core + [d for f in feature_table.FEATURES for d in f.draws]
    fields = _run(steps, DrawContext(draw, st, caps, {}, head_dims=head_dims))
    group = fields.pop("group", 1)
    return Case(
        subject=subject,
        **feature_table.subject_fields(caps),
        q_heads=fields["kv_heads"] * group,
        v_head_dim=fields.pop("v_head_dim", fields["head_dim"]),
        **fields,
    )


def _padded(fields: dict[str, Any]) -> bool:
    """Whether the features drawn so far leave padding (``nan_padding`` inputs need some)."""
    view = SimpleNamespace(**{**{f.name: f.default for f in feature_table.case_fields()}, **fields})
    return any(f.pads(view) for f in feature_table.FEATURES)


def cases(subject: str, caps: Capabilities, profile: Profile) -> st.SearchStrategy[Case]:
    """Runnable cases for ``subject``, drawn only from its declared capabilities."""
    # The admissible spaces depend on the declaration alone: probed once here, not at every
    # draw (a constrained subject's filter rejects most draws, and probing was 3/4 of each).
    head_dims = _admissible_dims(caps, profile.head_dims, 128)
    lengths_spaces = _admissible_lengths(caps, profile.lengths, head_dims[0])
    return _case(subject, caps, profile, head_dims, lengths_spaces).filter(lambda c: runnable(c, caps))


def draw_cases(strategy: st.SearchStrategy[Case], count: int, draw_seed: int) -> tuple[Case, ...]:
    """``count`` examples of ``strategy``, the same ones for the same seed (and hypothesis
    version). Hypothesis starts from its simplest example, so the first case is small."""
    if count <= 0:
        return ()
    found: list[Case] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(draw_seed)
    @given(strategy)
    def collect(case: Case) -> None:
        found.append(case)

    with seed_only_draws():
        collect()
    return tuple(dict.fromkeys(found))


@contextlib.contextmanager
def seed_only_draws() -> Iterator[None]:
    """Draws that depend on the seed and the strategy alone.

    Hypothesis (6.13x on) mixes in "local constants": the literals of every module outside
    site-packages and the standard library that happens to be imported, this suite's own
    kernels and checks included. The drawn ci cases would then change when an unrelated
    literal is edited, or when a run imports another set of modules (``--impl xla`` vs
    ``all``), and a gate between two revisions would see cases come and go. Inside this
    context the local pool is empty and the shared constants cache is cleared on entry and
    exit, so hypothesis's own global constants still apply and nothing leaks either way.
    Hypothesis is pinned (pyproject.toml); ``tests/conformance/plan/test_reproducible_draws.py``
    fails if these internals move."""
    empty = hypothesis_providers.Constants()
    original = hypothesis_providers._get_local_constants
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()
    hypothesis_providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        hypothesis_providers._get_local_constants = original
        hypothesis_providers.CONSTANTS_CACHE.cache.clear()


def within(case: Case, caps: Capabilities) -> st.SearchStrategy[Case]:
    """Cases no bigger than ``case`` and with a subset of its features (same subject,
    dtype and input kind): the space a failure shrinks in. Hypothesis tries the
    simplest first, so the minimal failing case is found early."""

    @st.composite
    def smaller(draw: st.DrawFn) -> Case:
        def dim(n: int) -> int:
            return draw(st.integers(1, n))

        group = case.q_heads // case.kv_heads

        def lengths_upto(n: int) -> Any:
            return st.sampled_from(sorted({1, 7, 128, n} & set(range(1, n + 1))))

        core = [
            Draw(10, lambda ctx: {"batch": dim(case.batch)}),
            Draw(20, lambda ctx: {"kv_heads": dim(case.kv_heads)}),
            Draw(30, lambda ctx: {"group": draw(st.sampled_from(sorted({1, group})))}),
            Draw(40, lambda ctx: {"q_len": draw(lengths_upto(case.q_len))}),
            Draw(50, lambda ctx: {"kv_len": draw(lengths_upto(case.kv_len))}),
            Draw(
                130,
                lambda ctx: {"config": draw(st.sampled_from(((), case.config))) if case.config else ()},
            ),
        ]
        steps = core + [d for f in feature_table.FEATURES for d in f.shrinks]
        fields = _run(steps, DrawContext(draw, st, caps, {}, case=case))
        group_kept = fields.pop("group")
        candidate = dataclasses.replace(
            case,
            **fields,
            q_heads=fields["kv_heads"] * group_kept,
            orphan_segment=case.orphan_segment and bool(fields.get("segments", case.segments)),
            input_kind="normal",
        )
        keeps_padding = case.input_kind != "nan_padding" or candidate.padded
        return dataclasses.replace(candidate, input_kind=case.input_kind if keeps_padding else "normal")

    return smaller().filter(lambda c: runnable(c, caps))
