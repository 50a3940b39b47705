"""Hypothesis strategies that draw cases only from what an adapter declares.

``cases(subject, caps, profile)`` draws a runnable case: every feature is one the
Capabilities declare, and the drawn shape satisfies every ShapeConstraint (forward
and, when the subject has a backward pass, backward), so drawn cases exercise the
kernel rather than its input checks. ``draw_cases`` turns the strategy into a fixed
list for a seed; ``within(case, ...)`` is the space a failing case shrinks in.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from conformance.plan.cases import SINK_KINDS, Case
from conformance.plan.profiles import Profile
from kernels.base import Capabilities
from kernels.dtypes import DTYPES
from kernels.tunables import Config, Tunables
from reference.spec import AttentionShape, AttentionSpec

SOFTCAPS = (1.0, 5.0, 30.0)
BIAS_PATTERNS = ("bhqk", "1h1k", "b11k", "11qk", "111k", "b1qk", "1hqk")


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
def _lengths(draw: st.DrawFn, batch: int, full: int) -> tuple[int, ...]:
    return tuple(draw(st.integers(0, full)) for _ in range(batch))


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
def _case(draw: st.DrawFn, subject: str, caps: Capabilities, profile: Profile) -> Case:
    dtypes = tuple(d for d in caps.dtypes if d in DTYPES)
    head_dims = _admissible_dims(caps, profile.head_dims, 128)
    q_lengths_space, kv_lengths_space = _admissible_lengths(caps, profile.lengths, head_dims[0])
    batch = draw(st.integers(1, profile.max_batch))
    kv_heads = draw(st.integers(1, profile.max_kv_heads))
    group = draw(st.sampled_from((1, 2, 4, 8))) if caps.gqa else 1
    head_dim = draw(st.sampled_from(head_dims))
    q_len, kv_len = draw(st.sampled_from(q_lengths_space)), draw(st.sampled_from(kv_lengths_space))
    causal = bool(caps.causal_alignments) and draw(st.booleans())
    alignment = draw(st.sampled_from(caps.causal_alignments)) if caps.causal_alignments else "top_left"
    window = None
    if caps.window and draw(st.booleans()):
        edge = st.none() | st.integers(0, 8) | st.integers(0, 2 * max(q_len, kv_len))
        window = (draw(edge), draw(edge))
    segments = draw(st.integers(0, 4)) if caps.segment_ids else 0
    q_lengths = kv_lengths = None
    if caps.lengths and draw(st.booleans()):
        q_lengths = draw(st.none() | _lengths(batch, q_len)) if caps.q_lengths else None
        kv_lengths = draw(_lengths(batch, kv_len))
    padded = q_lengths is not None or kv_lengths is not None or segments > 0
    kinds = ["normal", "large", "integers"] + (["nan_padding"] if padded else [])
    bias = None
    if caps.bias and draw(st.booleans()):
        bias = draw(st.sampled_from(BIAS_PATTERNS)) if caps.bias_broadcast else "bhqk"
    return Case(
        subject=subject,
        kv_storage=caps.kv_storage,
        dtype=draw(st.sampled_from(dtypes)),
        batch=batch,
        q_heads=kv_heads * group,
        kv_heads=kv_heads,
        q_len=q_len,
        kv_len=kv_len,
        head_dim=head_dim,
        v_head_dim=draw(st.sampled_from(head_dims)) if caps.distinct_v_dim else head_dim,
        causal=causal,
        alignment=alignment,
        window=window,
        softcap=draw(st.none() | st.sampled_from(SOFTCAPS)) if caps.softcap else None,
        segments=segments,
        orphan_segment=bool(segments) and draw(st.booleans()),
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        bias=bias,
        mask=draw(st.none() | st.sampled_from(BIAS_PATTERNS)) if caps.bool_mask else None,
        input_kind=draw(st.sampled_from(kinds)),
        config=draw(_config(caps.tunables, q_len, kv_len, batch))
        if profile.draw_configs and caps.tunables
        else (),
        sinks=draw(st.none() | st.sampled_from(SINK_KINDS)) if caps.sinks else None,
    )


def cases(subject: str, caps: Capabilities, profile: Profile) -> st.SearchStrategy[Case]:
    """Runnable cases for ``subject``, drawn only from its declared capabilities."""
    return _case(subject, caps, profile).filter(lambda c: runnable(c, caps))


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

    collect()
    return tuple(dict.fromkeys(found))


def within(case: Case, caps: Capabilities) -> st.SearchStrategy[Case]:
    """Cases no bigger than ``case`` and with a subset of its features (same subject,
    dtype and input kind): the space a failure shrinks in. Hypothesis tries the
    simplest first, so the minimal failing case is found early."""

    @st.composite
    def smaller(draw: st.DrawFn) -> Case:
        def dim(n: int) -> int:
            return draw(st.integers(1, n))

        def maybe(value):
            """Keep or drop one feature (None/False drops it)."""
            if value in (None, 0, False):
                return value
            return draw(st.sampled_from((False, True) if value is True else (None, value)))

        batch = dim(case.batch)
        kv_heads = dim(case.kv_heads)
        group = case.q_heads // case.kv_heads
        lengths = lambda ls: None if ls is None else draw(st.sampled_from((None, ls[:batch])))  # noqa: E731
        q_len = draw(st.sampled_from(sorted({1, 7, 128, case.q_len} & set(range(1, case.q_len + 1)))))
        kv_len = draw(st.sampled_from(sorted({1, 7, 128, case.kv_len} & set(range(1, case.kv_len + 1)))))
        candidate = dataclasses.replace(
            case,
            batch=batch,
            kv_heads=kv_heads,
            q_heads=kv_heads * draw(st.sampled_from(sorted({1, group}))),
            q_len=q_len,
            kv_len=kv_len,
            causal=bool(maybe(case.causal)),
            window=maybe(case.window),
            softcap=maybe(case.softcap),
            scale=maybe(case.scale),
            segments=case.segments and draw(st.sampled_from((0, case.segments))),
            bias=maybe(case.bias),
            mask=maybe(case.mask),
            sinks=maybe(case.sinks),
            q_lengths=None,
            kv_lengths=None,
            orphan_segment=False,
            config=draw(st.sampled_from(((), case.config))) if case.config else (),
        )
        q_lengths, kv_lengths = lengths(case.q_lengths), lengths(case.kv_lengths)
        keeps_padding = case.input_kind != "nan_padding" or q_lengths or kv_lengths or candidate.segments
        fits = lambda ls, n: None if ls is None else tuple(min(x, n) for x in ls)  # noqa: E731
        return dataclasses.replace(
            candidate,
            q_lengths=fits(q_lengths, q_len),
            kv_lengths=fits(kv_lengths, kv_len),
            orphan_segment=case.orphan_segment and candidate.segments > 0,
            input_kind=case.input_kind if keeps_padding else "normal",
        )

    return smaller().filter(lambda c: runnable(c, caps))
