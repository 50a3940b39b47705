"""The feature table: every optional input or option of a case, declared once.

A *feature* is a dimension a case may or may not use beyond its shape and dtype: a causal
mask, a window, segment ids, valid lengths, a boolean mask, a bias, a softcap, a scale,
attention sinks, the storage of q and of K/V, GQA, Dv != D, leading batch dims (a call form).
Each ``Feature`` below states everything the suite needs to know of it, and every consumer
iterates ``FEATURES``:

* the ``Case`` fields it owns, their defaults and validation (``conformance/plan/cases.py``
  builds its dataclass from them),
* the ``Capabilities`` attribute that declares it and the sentence a case outside the
  declaration gets (``Capabilities.admits``),
* the canonical keywords a plain function receives for it (``kernels/adapters/function_adapter.py``)
  and the ``AttentionSpec`` fields it sets,
* its case-id token, its grid column and label, and its words in a review,
* how ``--case`` spells it, how hypothesis draws and shrinks it, and its pairwise
  present/absent edits,
* how one request of a batch is cut out of it (``batch_inputs``, ``request``, ``not_per_request``:
  the ``batch_invariance`` check runs a request alone).

Standard library only: report tools that run with no installs read the labels here. The
callables take a case, a ``Capabilities`` or ``AttentionInputs`` by attribute access; the
hypothesis module and an array factory come in as arguments.

**Order.** ``FEATURES`` is in case-id token order, which is also the order of the grid's
columns, of the words and of the refusals. Drawing and shrinking follow their own
sequence numbers (``Draw.at``): hypothesis replays a seed as a sequence of choices, so
the ci profile's drawn cases (seed 0) stay the same only while that sequence does. A new
feature takes numbers after every existing one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from kernels.contract import kv_storage_names
from kernels.contract.kv_storage_names import STORAGES

# A broadcast pattern names the full axes; "1" marks a broadcast (size-1) axis.
BIAS_AXES = "bhqk"
BROADCAST_DIMS: tuple[str, ...] = ("batch", "heads", "q", "kv")
ALIGNMENTS: tuple[str, ...] = ("top_left", "bottom_right", "bottom_right_valid")
ALIGNMENT_TOKENS = {"top_left": "tl", "bottom_right": "br", "bottom_right_valid": "brv"}
# How sink logits are drawn (conformance.plan.draws.draw_sinks): ``normal`` near a row's
# lse, so the sink takes a real share of the denominator; ``extreme`` gives the heads in
# turn +30 (the sink dominates), -1e4 (it vanishes) and a normal draw.
SINK_KINDS: tuple[str, ...] = ("normal", "extreme")
SOFTCAPS = (1.0, 5.0, 30.0)
BIAS_PATTERNS = ("bhqk", "1h1k", "b11k", "11qk", "111k", "b1qk", "1hqk")
NO = ("no", "false", "0")

Fields = dict[str, Any]


class FeatureSyntaxError(ValueError):
    """A ``--case`` value a feature cannot read; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One ``Case`` field a feature owns. ``absent`` is the value meaning "not used"."""

    name: str
    type: Any
    default: Any


@dataclasses.dataclass(frozen=True)
class Draw:
    """One hypothesis draw: ``fn(ctx) -> field updates`` at position ``at`` of the sequence
    (``conformance/plan/strategies.py`` runs the core draws and these in ``at`` order)."""

    at: int
    fn: Callable[[Any], Fields]


@dataclasses.dataclass(frozen=True)
class PairwiseEdit:
    """One optional input of the pairwise coverage: whether a subject declares it, whether a
    case has it, and how to give a case it or take it away (``fields`` -> updates)."""

    name: str
    declared: Callable[[Any], bool]
    present: Callable[[Any], bool]
    add: Callable[[Any, Any], Fields]
    remove: Callable[[Any], Fields]
    # The edits this one is present only with (a bias fill needs a bias): a combination with it
    # present and one of these absent cannot exist, and pairwise coverage says so.
    needs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Gradient:
    """A gradient the backward pass may return for this feature's input: its tensor name,
    the input field it is the gradient of, and the ``Capabilities`` flag that declares it."""

    tensor: str
    input: str
    declared_by: str


def _none(*_: Any) -> None:
    return None


def _no_fields(*_: Any) -> Fields:
    return {}


@dataclasses.dataclass(frozen=True)
class Feature:
    """One optional input or option of a case. Every callable is pure.

    name:        the feature's name (``ShapeConstraint.features``, pairwise, docs).
    fields:      the ``Case`` fields it owns, with defaults (none: derived from the shape).
    capability:  the ``Capabilities`` attribute that declares it, or None (every subject).
    present:     ``case -> bool``: the case uses it.
    refusals:    ``(caps, shape, spec, inputs|None) -> sentence|None`` each: why a call is outside
                 the declaration (``inputs`` None: a bare shape, which shows no arrays).
    grid:        ``case -> grid column name|None``; ``labels``: column name -> words.
    token:       ``case -> case-id token|None``; ``words``: ``case -> words|None`` for a review.
    spec_fields: the ``AttentionSpec`` fields it sets (the same names on ``Case``).
    inputs:      the ``AttentionInputs`` fields it adds; ``skeleton(case, make)`` -> their
                 stand-ins (``make(shape, kind)`` with kind float|int|bool, ``make.values(t)``).
    keywords:    ``(inputs, spec) -> canonical keywords`` a plain function receives;
                 ``accepts``: the keyword names a function declaring it must take.
    parse:       ``--case`` key -> ``value -> field updates``.
    draws, shrinks: hypothesis draws (``Draw``); ``pairwise``: its present/absent edits.
    validate:    ``case -> problem|None`` at construction.
    pads:        ``case -> bool``: the case has padding (``nan_padding`` inputs need some).
    keeps_rows:  a case using it has no fully-masked row (a sink stays in every denominator).
    gradients:   the gradients of its inputs, where a subject declares them.
    from_subject: a ``Capabilities`` attribute with which a subject fixes the field: every case of
                 a subject that sets it carries its value (``subject_fields``); elsewhere the field
                 is the case's own (drawn, where the feature draws).
    for_subject: ``(case, caps) -> field updates`` that a template left to the subject (a curated
                 or ``--case`` case, before it is a subject's): e.g. a bias fill's kv block.
    batch_inputs: the ``inputs`` it adds that carry a leading batch axis (``[B, ...]``; a size-1
                 axis there is a broadcast, the same for every request): one request's slice is
                 its own (segment ids, lengths, a ``b...`` bias or mask).
    request:     ``(case, b) -> field updates`` of request ``b`` run alone (a batch of 1): its
                 per-request fields (lengths: ``(lengths[b],)``).
    not_per_request: ``case -> reason|None``: why a request alone would not be the same input as
                 the request in its batch (a storage scale shared across the batch).
    """

    name: str
    fields: tuple[Field, ...] = ()
    capability: str | None = None
    present: Callable[[Any], bool] = lambda case: False
    refusals: tuple[Callable[[Any, Any, Any, Any], str | None], ...] = ()
    grid: Callable[[Any], str | None] = _none
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    token: Callable[[Any], str | None] = _none
    words: Callable[[Any], str | None] = _none
    spec_fields: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    skeleton: Callable[[Any, Any], Fields] = _no_fields
    keywords: Callable[[Any, Any], Fields] = _no_fields
    accepts: tuple[str, ...] = ()
    parse: Mapping[str, Callable[[str], Fields]] = dataclasses.field(default_factory=dict)
    draws: tuple[Draw, ...] = ()
    shrinks: tuple[Draw, ...] = ()
    pairwise: tuple[PairwiseEdit, ...] = ()
    validate: Callable[[Any], str | None] = _none
    pads: Callable[[Any], bool] = lambda case: False
    keeps_rows: bool = False
    gradients: tuple[Gradient, ...] = ()
    from_subject: str | None = None
    for_subject: Callable[[Any, Any], Fields] = _no_fields
    batch_inputs: tuple[str, ...] = ()
    request: Callable[[Any, int], Fields] = _no_fields
    not_per_request: Callable[[Any], str | None] = _none

    def declared(self, caps: Any) -> bool:
        """Whether ``caps`` declares this feature (always, for one no attribute declares)."""
        return self.capability is None or bool(getattr(caps, self.capability))


# -- helpers the entries share --------------------------------------------------------------


def _edge(value: int | None) -> str:
    return "inf" if value is None else str(value)


def _number(key: str, value: str, kind: type = int) -> Any:
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise FeatureSyntaxError(f"{key}={value!r} is not {what}") from None


def is_pattern(pattern: str) -> bool:
    """A broadcast pattern over ``bhqk``, e.g. ``1h1k``."""
    return (
        isinstance(pattern, str)
        and len(pattern) == 4
        and all(c in (axis, "1") for c, axis in zip(pattern, BIAS_AXES, strict=True))
    )


def pattern_shape(case: Any, pattern: str) -> tuple[int, ...]:
    """The array shape of a ``bhqk`` broadcast pattern for ``case``."""
    full = (case.batch, case.q_heads, case.q_len, case.kv_len)
    return tuple(1 if c == "1" else n for c, n in zip(pattern, full, strict=True))


def broadcast_over(array: Any, shape: Any) -> tuple[str, ...]:
    """The dims (``BROADCAST_DIMS``) a ``[B|1, H|1, Sq|1, Sk|1]`` array broadcasts over."""
    if array is None:
        return ()
    full = (shape.batch, shape.q_heads, shape.q_len, shape.kv_len)
    sizes = (1,) * (4 - len(array.shape)) + tuple(array.shape)  # broadcasting pads on the left
    return tuple(n for n, size, want in zip(BROADCAST_DIMS, sizes, full, strict=True) if size == 1 < want)


def _maybe(ctx: Any, value: Any) -> Any:
    """Keep or drop one value while shrinking (None/0/False is already dropped)."""
    if value in (None, 0, False):
        return value
    return ctx.draw(ctx.st.sampled_from((False, True) if value is True else (None, value)))


def _optional(field: str) -> Callable[[Any], bool]:
    return lambda case: getattr(case, field) is not None


def _from_inputs(*names: str) -> Callable[[Any, Any], Fields]:
    def keywords(inputs: Any, spec: Any) -> Fields:
        return {n: getattr(inputs, n) for n in names if getattr(inputs, n) is not None}

    return keywords


def _has_input(name: str) -> Callable[[Any], bool]:
    return lambda inputs: inputs is not None and getattr(inputs, name) is not None


def _refuse(when: Callable[[Any, Any, Any, Any], bool], text: str) -> Callable[..., str | None]:
    return lambda caps, shape, spec, inputs: text if when(caps, shape, spec, inputs) else None


def _per_row_lengths(length: int, batch: int, short: int) -> tuple[int, ...]:
    return tuple(length if b % 2 == 0 else short for b in range(batch))


# Ragged serving batches (docs/suite.md): the row lengths where page and offset arithmetic breaks,
# from a kernel's key-axis boundaries (``Tunables.length_boundaries``: its page and its default kv
# block); ``DEFAULT_BOUNDARY`` where it declares none (a kernel that takes full rows): 128 keys, the
# TPU lane width and the most common kernel block.
DEFAULT_BOUNDARY = 128
RAGGED_ROWS = ("empty", "one", "page+1", "block-1", "block", "block+1", "long")


def ragged_row_lengths(boundaries: tuple[int, ...], length: int) -> dict[str, int]:
    """Pattern name -> its row length on a sequence of ``length`` keys (clipped to it): ``empty`` 0
    (a finished request), ``one`` 1 (a fresh decode step), ``page+1`` one key into a second page,
    ``block-1``/``block``/``block+1`` around the kernel's default kv block, ``long`` the whole."""
    page = boundaries[0] if boundaries else DEFAULT_BOUNDARY
    block = boundaries[-1] if boundaries else DEFAULT_BOUNDARY
    values = (0, 1, page + 1, block - 1, block, block + 1, length)
    return {name: min(n, length) for name, n in zip(RAGGED_ROWS, values, strict=True)}


def _lengths_value(key: str) -> Callable[[str], Fields]:
    return lambda value: {key: tuple(_number(key, n) for n in value.split("/"))}


def _choice(key: str, choices: tuple[str, ...], field: str) -> Callable[[str], Fields]:
    def parse(value: str) -> Fields:
        if value in choices:
            return {field: value}
        if value in NO:
            return {}
        raise FeatureSyntaxError(f"{key}={value!r}: use {', '.join(choices)} or no")

    return parse


# -- the entries, in case-id token order ----------------------------------------------------


def _causal_parse(value: str) -> Fields:
    if value in ALIGNMENTS:
        return {"causal": True, "alignment": value}
    if value in NO:
        return {}
    raise FeatureSyntaxError(f"causal={value!r}: use top_left, bottom_right or no")


def _align_parse(value: str) -> Fields:
    if value not in ALIGNMENTS:
        raise FeatureSyntaxError(f"align={value!r}: use top_left, bottom_right or bottom_right_valid")
    return {"alignment": value}


def _causal_refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
    if spec.causal and spec.alignment not in caps.causal_alignments:
        return f"causal alignment {spec.alignment} not supported"
    return None


CAUSAL = Feature(
    "causal",
    fields=(Field("causal", bool, False), Field("alignment", str, "top_left")),
    capability="causal_alignments",
    present=lambda case: case.causal,
    refusals=(_causal_refusal,),
    grid=lambda case: f"causal_{case.alignment}" if case.causal else None,
    labels={
        "causal_top_left": "causal (top-left)",
        "causal_bottom_right": "causal (bottom-right)",
        "causal_bottom_right_valid": "causal (bottom-right of valid lengths)",
    },
    token=lambda case: f"causal_{ALIGNMENT_TOKENS[case.alignment]}" if case.causal else None,
    words=lambda case: f"causal ({case.alignment.replace('_', '-')})" if case.causal else None,
    spec_fields=("causal", "alignment"),
    keywords=lambda inputs, spec: {"causal": True, "alignment": spec.alignment} if spec.causal else {},
    accepts=("causal", "alignment"),
    parse={"causal": _causal_parse, "align": _align_parse},
    draws=(
        Draw(70, lambda ctx: {"causal": bool(ctx.caps.causal_alignments) and ctx.draw(ctx.st.booleans())}),
        Draw(
            80,
            lambda ctx: {
                "alignment": ctx.draw(ctx.st.sampled_from(ctx.caps.causal_alignments))
                if ctx.caps.causal_alignments
                else "top_left"
            },
        ),
    ),
    shrinks=(Draw(60, lambda ctx: {"causal": bool(_maybe(ctx, ctx.case.causal))}),),
    validate=lambda case: (
        None
        if case.alignment in ALIGNMENTS
        else f"unknown alignment {case.alignment!r}; choose from {ALIGNMENTS}"
    ),
)


def _window_token(case: Any) -> str | None:
    if case.window is None:
        return None
    left, right = case.window
    align = "" if case.causal else f"_{ALIGNMENT_TOKENS[case.alignment]}"
    return f"win{_edge(left)}.{_edge(right)}{align}"


def _window_words(case: Any) -> str | None:
    if case.window is None:
        return None
    left, right = case.window
    return f"window (left {'∞' if left is None else left}, right {'∞' if right is None else right})"


def _window_parse(value: str) -> Fields:
    left, colon, right = value.partition(":")
    if not colon:
        raise FeatureSyntaxError(f"window={value!r}: write LEFT:RIGHT, e.g. 64:0 or inf:0")
    return {
        "window": tuple(None if e in ("inf", "none", "") else _number("window", e) for e in (left, right))
    }


def _window_draw(ctx: Any) -> Fields:
    if not (ctx.caps.window and ctx.draw(ctx.st.booleans())):
        return {"window": None}
    st, longest = ctx.st, max(ctx.fields["q_len"], ctx.fields["kv_len"])
    edge = st.none() | st.integers(0, 8) | st.integers(0, 2 * longest)
    return {"window": (ctx.draw(edge), ctx.draw(edge))}


WINDOW = Feature(
    "window",
    fields=(Field("window", "tuple[int | None, int | None] | None", None),),
    capability="window",
    present=_optional("window"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: spec.window is not None and not caps.window,
            "local window not supported",
        ),
        # A window sits on the same diagonal as causal; it only moves when Sq != Sk.
        lambda caps, shape, spec, inputs: (
            f"window alignment {spec.alignment} not supported"
            if spec.window is not None
            and shape.q_len != shape.kv_len
            and spec.alignment not in caps.causal_alignments
            else None
        ),
    ),
    grid=lambda case: "window" if case.window is not None else None,
    token=_window_token,
    words=_window_words,
    spec_fields=("window",),
    keywords=lambda inputs, spec: {"window": spec.window} if spec.window is not None else {},
    accepts=("window",),
    parse={"window": _window_parse},
    draws=(Draw(90, _window_draw),),
    shrinks=(Draw(70, lambda ctx: {"window": _maybe(ctx, ctx.case.window)}),),
    pairwise=(
        PairwiseEdit(
            "window",
            lambda caps: caps.window,
            _optional("window"),
            lambda case, caps: {"window": (24, 8)},
            lambda case: {"window": None},
        ),
    ),
)


# Chunked causal attention: the chunk sizes the draws and the pairwise edit use (1: only the
# diagonal; 7 and 48 do not divide the lengths drawn, leaving a short last chunk).
CHUNKS = (1, 7, 16, 48, 64, 128)


def _chunk_refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
    if spec.chunk is None or spec.alignment in caps.chunked_causal_alignments:
        return None
    if not caps.chunked_causal_alignments:
        return "chunked causal mask not supported"
    return (
        f"chunked causal alignment {spec.alignment} not supported "
        f"(only {', '.join(caps.chunked_causal_alignments)})"
    )


def _chunk_parse(value: str) -> Fields:
    if value in NO:
        return {}
    chunk = _number("chunk", value)
    if chunk < 1:
        raise FeatureSyntaxError(f"chunk={value!r}: use a positive number of keys per chunk, e.g. chunk=64")
    return {"chunk": chunk, "causal": True}  # chunked attention is causal within its chunk


def _chunk_draw(ctx: Any) -> Fields:
    # Draws nothing unless declared and causal at a declared alignment, so the seeds of other
    # subjects keep drawing the same cases.
    chunked = ctx.caps.chunked_causal_alignments
    if not (chunked and ctx.fields["causal"] and ctx.fields["alignment"] in chunked):
        return {"chunk": None}
    if not ctx.draw(ctx.st.booleans()):
        return {"chunk": None}
    longest = max(ctx.fields["q_len"], ctx.fields["kv_len"])
    return {"chunk": ctx.draw(ctx.st.sampled_from(CHUNKS) | ctx.st.integers(1, 2 * longest))}


def _chunk_shrink(ctx: Any) -> Fields:
    if not ctx.fields.get("causal", ctx.case.causal):
        return {"chunk": None}
    return {"chunk": _maybe(ctx, ctx.case.chunk)}


def _chunk_add(case: Any, caps: Any) -> Fields:
    fields: Fields = {"chunk": 48, "causal": True}
    if case.alignment not in caps.chunked_causal_alignments:
        fields["alignment"] = caps.chunked_causal_alignments[0]
    return fields


CHUNK = Feature(
    "chunked_causal",
    fields=(Field("chunk", "int | None", None),),
    capability="chunked_causal_alignments",
    present=_optional("chunk"),
    refusals=(_chunk_refusal,),
    grid=lambda case: "chunked_causal" if case.chunk is not None else None,
    labels={"chunked_causal": "chunked causal"},
    token=lambda case: f"chunk{case.chunk}" if case.chunk is not None else None,
    words=lambda case: f"chunked causal (chunks of {case.chunk} keys)" if case.chunk is not None else None,
    spec_fields=("chunk",),
    keywords=lambda inputs, spec: {"chunk": spec.chunk} if spec.chunk is not None else {},
    accepts=("chunk",),
    parse={"chunk": _chunk_parse},
    draws=(Draw(210, _chunk_draw),),
    shrinks=(Draw(210, _chunk_shrink),),
    pairwise=(
        PairwiseEdit(
            "chunked_causal",
            lambda caps: bool(caps.chunked_causal_alignments),
            _optional("chunk"),
            _chunk_add,
            lambda case: {"chunk": None},
        ),
    ),
)


def _segments_validate(case: Any) -> str | None:
    if case.segments < 0:
        return f"segments must be >= 0, got {case.segments}"
    return None


SEGMENTS = Feature(
    "segment_ids",
    fields=(Field("segments", int, 0), Field("orphan_segment", bool, False)),
    capability="segment_ids",
    present=lambda case: case.segments > 0,
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: _has_input("q_segment_ids")(inputs) and not caps.segment_ids,
            "segment ids not supported",
        ),
    ),
    grid=lambda case: "segment_ids" if case.segments else None,
    labels={"segment_ids": "segment ids"},
    token=lambda case: (
        (f"seg{case.segments}" + ("x" if case.orphan_segment else "")) if case.segments else None
    ),
    words=lambda case: "segment ids" if case.segments else None,
    inputs=("q_segment_ids", "kv_segment_ids"),
    skeleton=lambda case, make: (
        {
            "q_segment_ids": make((case.batch, case.q_len), "int"),
            "kv_segment_ids": make((case.batch, case.kv_len), "int"),
        }
        if case.segments
        else {}
    ),
    keywords=_from_inputs("q_segment_ids", "kv_segment_ids"),
    accepts=("q_segment_ids", "kv_segment_ids"),
    parse={"segments": lambda value: {"segments": _number("segments", value)}},
    draws=(
        Draw(100, lambda ctx: {"segments": ctx.draw(ctx.st.integers(0, 4)) if ctx.caps.segment_ids else 0}),
        Draw(
            160,
            lambda ctx: {"orphan_segment": bool(ctx.fields["segments"]) and ctx.draw(ctx.st.booleans())},
        ),
    ),
    shrinks=(
        Draw(
            90,
            lambda ctx: {
                "segments": ctx.case.segments and ctx.draw(ctx.st.sampled_from((0, ctx.case.segments)))
            },
        ),
    ),
    pairwise=(
        PairwiseEdit(
            "segment_ids",
            lambda caps: caps.segment_ids,
            lambda case: case.segments > 0,
            lambda case, caps: {"segments": 3},
            lambda case: {"segments": 0, "orphan_segment": False},
        ),
    ),
    validate=_segments_validate,
    pads=lambda case: case.segments > 0,
    batch_inputs=("q_segment_ids", "kv_segment_ids"),
)


def _lengths_validate(case: Any) -> str | None:
    for name in ("q_lengths", "kv_lengths"):
        lengths = getattr(case, name)
        if lengths is not None and len(lengths) != case.batch:
            return f"{name} needs one length per batch element ({case.batch}), got {lengths}"
    return None


def _lengths_token(case: Any) -> str | None:
    tokens = [
        prefix + ".".join(map(str, lengths))
        for prefix, lengths in (("lenq", case.q_lengths), ("lenkv", case.kv_lengths))
        if lengths is not None
    ]
    return "-".join(tokens) or None


def _lengths_draw(ctx: Any) -> Fields:
    caps, st, f = ctx.caps, ctx.st, ctx.fields
    if not (caps.lengths and ctx.draw(st.booleans())):
        return {"q_lengths": None, "kv_lengths": None}

    q_lengths = ctx.draw(st.none() | ctx.per_row(f["batch"], f["q_len"])) if caps.q_lengths else None
    return {"q_lengths": q_lengths, "kv_lengths": ctx.draw(ctx.per_row(f["batch"], f["kv_len"]))}


def _ragged_row_draw(ctx: Any) -> Fields:
    """One ragged row pattern (``RAGGED_ROWS``, at the subject's own boundaries) placed at a drawn
    batch position, over the lengths drawn so far (full rows where none were). Draws nothing for a
    subject without lengths, so the seeds of other subjects keep drawing the same cases."""
    caps, st, f = ctx.caps, ctx.st, ctx.fields
    if not (caps.lengths and ctx.draw(st.booleans())):
        return {}
    pattern = ctx.draw(st.sampled_from(RAGGED_ROWS[:-1]))
    row = ctx.draw(st.integers(0, f["batch"] - 1))
    boundaries = caps.tunables.length_boundaries()
    out: Fields = {}
    for name, full in (("kv_lengths", f["kv_len"]), ("q_lengths", f["q_len"])):
        lengths = f.get(name)
        if name == "kv_lengths" or lengths is not None:
            placed = list(lengths if lengths is not None else (full,) * f["batch"])
            placed[row] = ragged_row_lengths(boundaries, full)[pattern]
            out[name] = tuple(placed)
    return out


def _lengths_shrink(ctx: Any) -> Fields:
    st, case, f = ctx.st, ctx.case, ctx.fields

    def drawn(lengths: tuple[int, ...] | None, full: int) -> tuple[int, ...] | None:
        if lengths is None:
            return None
        kept = ctx.draw(st.sampled_from((None, lengths[: f["batch"]])))
        return None if kept is None else tuple(min(x, full) for x in kept)

    q_lengths = drawn(case.q_lengths, f["q_len"])
    return {"q_lengths": q_lengths, "kv_lengths": drawn(case.kv_lengths, f["kv_len"])}


LENGTHS = Feature(
    "lengths",
    fields=(
        Field("q_lengths", "tuple[int, ...] | None", None),
        Field("kv_lengths", "tuple[int, ...] | None", None),
    ),
    capability="lengths",
    present=lambda case: case.q_lengths is not None or case.kv_lengths is not None,
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: (
                (_has_input("q_lengths")(inputs) or _has_input("kv_lengths")(inputs)) and not caps.lengths
            ),
            "per-batch valid lengths not supported",
        ),
        _refuse(
            lambda caps, shape, spec, inputs: (
                _has_input("q_lengths")(inputs) and caps.lengths and not caps.q_lengths
            ),
            "query valid lengths not supported (kv lengths only)",
        ),
    ),
    grid=lambda case: "lengths" if case.q_lengths is not None or case.kv_lengths is not None else None,
    labels={"lengths": "valid lengths"},
    token=_lengths_token,
    words=lambda case: (
        "valid lengths (padding)" if case.q_lengths is not None or case.kv_lengths is not None else None
    ),
    inputs=("q_lengths", "kv_lengths"),
    skeleton=lambda case, make: {
        "q_lengths": None if case.q_lengths is None else make.values(case.q_lengths),
        "kv_lengths": None if case.kv_lengths is None else make.values(case.kv_lengths),
    },
    keywords=_from_inputs("q_lengths", "kv_lengths"),
    accepts=("q_lengths", "kv_lengths"),
    parse={"q_lengths": _lengths_value("q_lengths"), "kv_lengths": _lengths_value("kv_lengths")},
    draws=(Draw(110, _lengths_draw), Draw(220, _ragged_row_draw)),
    shrinks=(Draw(200, _lengths_shrink),),
    pairwise=(
        PairwiseEdit(
            "q_lengths",
            lambda caps: caps.lengths and caps.q_lengths,
            lambda case: case.q_lengths is not None,
            lambda case, caps: {"q_lengths": _per_row_lengths(case.q_len, case.batch, case.q_len * 3 // 4)},
            lambda case: {"q_lengths": None},
        ),
        PairwiseEdit(
            "kv_lengths",
            lambda caps: caps.lengths,
            lambda case: case.kv_lengths is not None,
            # A one-token row first, before the others (where a row's offset is a cumulative sum).
            lambda case, caps: {
                "kv_lengths": (1, *_per_row_lengths(case.kv_len, case.batch, case.kv_len * 5 // 8)[1:])
                if case.batch > 1
                else (case.kv_len * 5 // 8,)
            },
            lambda case: {"kv_lengths": None},
        ),
    ),
    validate=_lengths_validate,
    pads=lambda case: case.q_lengths is not None or case.kv_lengths is not None,
    batch_inputs=("q_lengths", "kv_lengths"),
    request=lambda case, b: {
        name: None if lengths is None else (lengths[b],)
        for name in ("q_lengths", "kv_lengths")
        for lengths in (getattr(case, name),)
    },
)


def _pattern_validate(field: str) -> Callable[[Any], str | None]:
    def validate(case: Any) -> str | None:
        pattern = getattr(case, field)
        if pattern is not None and not is_pattern(pattern):
            return f"{field} pattern {pattern!r} must be 4 of 'bhqk' or '1', e.g. '1h1k'"
        return None

    return validate


def _pattern_field_edit(field: str, capability: str, value: str) -> PairwiseEdit:
    return PairwiseEdit(
        field,
        lambda caps: bool(getattr(caps, capability)),
        _optional(field),
        lambda case, caps: {field: value},
        lambda case: {field: None},
    )


MASK = Feature(
    "bool_mask",
    fields=(Field("mask", "str | None", None),),
    capability="bool_mask",
    present=_optional("mask"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: _has_input("mask")(inputs) and not caps.bool_mask,
            "boolean mask not supported",
        ),
    ),
    grid=lambda case: "bool_mask" if case.mask is not None else None,
    labels={"bool_mask": "boolean mask", "mask": "boolean mask"},
    token=lambda case: f"mask_{case.mask}" if case.mask is not None else None,
    words=lambda case: "boolean mask" if case.mask is not None else None,
    inputs=("mask",),
    skeleton=lambda case, make: {
        "mask": None if case.mask is None else make(pattern_shape(case, case.mask), "bool")
    },
    keywords=_from_inputs("mask"),
    accepts=("mask",),
    parse={"mask": lambda value: {"mask": value}},
    draws=(
        Draw(
            170,
            lambda ctx: {
                "mask": ctx.draw(ctx.st.none() | ctx.st.sampled_from(BIAS_PATTERNS))
                if ctx.caps.bool_mask
                else None
            },
        ),
    ),
    shrinks=(Draw(110, lambda ctx: {"mask": _maybe(ctx, ctx.case.mask)}),),
    pairwise=(_pattern_field_edit("mask", "bool_mask", "b1qk"),),
    validate=_pattern_validate("mask"),
    batch_inputs=("mask",),
)


def _bias_draw(ctx: Any) -> Fields:
    caps, st = ctx.caps, ctx.st
    if not (caps.bias and ctx.draw(st.booleans())):
        return {"bias": None}
    return {"bias": ctx.draw(st.sampled_from(BIAS_PATTERNS)) if caps.bias_broadcast else "bhqk"}


def _bias_broadcast_refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
    bias = None if inputs is None else inputs.bias
    if bias is not None and caps.bias and not caps.bias_broadcast:
        if tuple(bias.shape) != (shape.batch, shape.q_heads, shape.q_len, shape.kv_len):
            return "broadcast bias not supported (needs full [B, Hq, Sq, Sk])"
    return None


def _broadcast_dims_refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
    # A boolean mask broadcasts like the bias (jax.nn folds it into the bias).
    if inputs is None or not caps.bias_broadcast:
        return None
    over = set(broadcast_over(inputs.bias, shape) + broadcast_over(inputs.mask, shape))
    if over - set(caps.broadcast_dims):
        refused = ", ".join(d for d in BROADCAST_DIMS if d not in caps.broadcast_dims)
        allowed = ", ".join(caps.broadcast_dims)
        return f"bias or mask broadcast over {refused} not supported (only over {allowed})"
    return None


BIAS = Feature(
    "bias",
    fields=(Field("bias", "str | None", None),),
    capability="bias",
    present=_optional("bias"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: _has_input("bias")(inputs) and not caps.bias,
            "bias not supported",
        ),
        _bias_broadcast_refusal,
        _broadcast_dims_refusal,
    ),
    grid=lambda case: "bias" if case.bias is not None else None,
    token=lambda case: f"bias_{case.bias}" if case.bias is not None else None,
    words=lambda case: f"bias {list(pattern_shape(case, case.bias))}" if case.bias is not None else None,
    inputs=("bias",),
    skeleton=lambda case, make: {
        "bias": None if case.bias is None else make(pattern_shape(case, case.bias), "float")
    },
    keywords=_from_inputs("bias"),
    accepts=("bias",),
    parse={"bias": lambda value: {"bias": value}},
    draws=(Draw(120, _bias_draw),),
    shrinks=(Draw(100, lambda ctx: {"bias": _maybe(ctx, ctx.case.bias)}),),
    # Taking the bias away takes its fill (``BIAS_FILL``) with it: a fill needs a bias.
    pairwise=(
        PairwiseEdit(
            "bias",
            lambda caps: caps.bias,
            _optional("bias"),
            lambda case, caps: {"bias": "bhqk"},
            lambda case: {"bias": None, "bias_fill": None},
        ),
    ),
    validate=_pattern_validate("bias"),
    gradients=(Gradient("dbias", "bias", "bias_grad"),),
    batch_inputs=("bias",),
)


# -inf and large negative numbers in an additive bias (``BIAS_FILL``): where they go, and which.
# jax.nn's documentation tells users to pass an additive mask as ``bias``, so -inf over a whole
# kv block is an ordinary input; an online softmax whose running max starts at -inf gives NaN on
# a row whose first kv block is all -inf. Places: the first and the last kv block at the
# subject's kv block size (``bias_fill_block``), one whole query row (it sees no key when the
# value is -inf), a scattered quarter of the entries. Values: -inf (a mask, docs/semantics.md),
# -1e9 and the dtype's most negative finite number (``min``), the finite masks users write:
# ordinary bias values to the reference.
BIAS_FILL_PLACES: tuple[str, ...] = ("first_block", "last_block", "row", "scattered")
BIAS_FILL_VALUES: tuple[str, ...] = ("-inf", "-1e9", "min")
_FILL_PLACE_TOKENS = {"first_block": "first", "last_block": "last", "row": "row", "scattered": "scat"}
_FILL_VALUE_TOKENS = {"-inf": "ninf", "-1e9": "m1e9", "min": "min"}
NEG_INF = float("-inf")


def subject_kv_block(caps: Any) -> int:
    """The kv block a bias fill covers for a subject: its default kv block (the largest key-axis
    boundary its tunables declare, ``Tunables.length_boundaries``), ``DEFAULT_BOUNDARY`` (128)
    where it declares none."""
    boundaries = caps.tunables.length_boundaries()
    return boundaries[-1] if boundaries else DEFAULT_BOUNDARY


def fill_value(value: str, dtype_max: float) -> float:
    """The number a fill writes, for a dtype whose largest finite value is ``dtype_max``: -inf,
    -1e9 (the dtype's most negative finite number where -1e9 is outside its range: float16, fp8),
    or that most negative finite number (``min``)."""
    if value == "-inf":
        return NEG_INF
    return -min(1e9, dtype_max) if value == "-1e9" else -dtype_max


def has_neg_inf_bias(inputs: Any) -> bool:
    """Whether a call's bias holds -inf (a skeleton's stand-in shows it: ``BIAS_FILL.skeleton``)."""
    return inputs is not None and inputs.bias is not None and bool((inputs.bias == NEG_INF).any())


def _bias_fill_token(case: Any) -> str | None:
    if case.bias_fill is None:
        return None
    block = case.bias_fill_block if case.bias_fill.endswith("_block") else ""
    return f"fill_{_FILL_PLACE_TOKENS[case.bias_fill]}{block}_{_FILL_VALUE_TOKENS[case.bias_fill_value]}"


def _bias_fill_words(case: Any) -> str | None:
    if case.bias_fill is None:
        return None
    where = {
        "first_block": f"the first {case.bias_fill_block}-key block",
        "last_block": f"the last {case.bias_fill_block}-key block",
        "row": "one whole query row",
        "scattered": "scattered entries",
    }[case.bias_fill]
    return f"bias {case.bias_fill_value} over {where}"


def _bias_fill_validate(case: Any) -> str | None:
    if case.bias_fill is None:
        return None
    if case.bias_fill not in BIAS_FILL_PLACES:
        return f"unknown bias_fill {case.bias_fill!r}; choose from {BIAS_FILL_PLACES} (or None)"
    if case.bias_fill_value not in BIAS_FILL_VALUES:
        return f"unknown bias_fill_value {case.bias_fill_value!r}; choose from {BIAS_FILL_VALUES}"
    if case.bias is None:
        return "bias_fill needs a bias: add bias=bhqk (or another pattern)"
    if case.bias_fill_block < 0:
        return f"bias_fill_block must be >= 0 (0: the subject's kv block), got {case.bias_fill_block}"
    return None


def _bias_fill_parse(value: str) -> Fields:
    """``bias_fill=PLACE[:VALUE[:BLOCK]]``, e.g. ``first_block:-inf:64``; VALUE defaults to -inf,
    BLOCK to the subject's kv block."""
    if value in NO:
        return {}
    place, _, rest = value.partition(":")
    fill_value_, _, block = rest.partition(":")
    if place not in BIAS_FILL_PLACES:
        raise FeatureSyntaxError(
            f"bias_fill={value!r}: use PLACE[:VALUE[:BLOCK]], PLACE one of {BIAS_FILL_PLACES}"
        )
    if fill_value_ and fill_value_ not in BIAS_FILL_VALUES:
        raise FeatureSyntaxError(f"bias_fill={value!r}: VALUE is one of {BIAS_FILL_VALUES}")
    fields: Fields = {"bias_fill": place, "bias_fill_value": fill_value_ or "-inf"}
    if block:
        fields["bias_fill_block"] = _number("bias_fill", block)
    return fields


def _bias_fill_draw(ctx: Any) -> Fields:
    # Draws nothing unless the case drew a bias, so the seeds of other subjects keep drawing the
    # same cases.
    if ctx.fields.get("bias") is None or not ctx.draw(ctx.st.booleans()):
        return {"bias_fill": None}
    return {
        "bias_fill": ctx.draw(ctx.st.sampled_from(BIAS_FILL_PLACES)),
        "bias_fill_value": ctx.draw(ctx.st.sampled_from(BIAS_FILL_VALUES)),
        "bias_fill_block": subject_kv_block(ctx.caps),
    }


def _bias_fill_shrink(ctx: Any) -> Fields:
    if ctx.fields.get("bias", ctx.case.bias) is None:
        return {"bias_fill": None}
    return {"bias_fill": _maybe(ctx, ctx.case.bias_fill)}


def _softcap_neg_inf_refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
    if spec.softcap is not None and caps.softcap_neg_inf_bias == "caps" and has_neg_inf_bias(inputs):
        return (
            "a -inf bias under softcap is capped to -softcap here, not masked "
            "(declared softcap_neg_inf_bias='caps'; canonical: it masks)"
        )
    return None


BIAS_FILL = Feature(
    "bias_fill",
    fields=(
        Field("bias_fill", "str | None", None),
        Field("bias_fill_value", str, "-inf"),
        # Keys per block for the block places; 0 until a subject's is set (``for_subject``).
        Field("bias_fill_block", int, 0),
    ),
    capability="bias",
    present=_optional("bias_fill"),
    refusals=(_softcap_neg_inf_refusal,),
    grid=lambda case: (
        None
        if case.bias_fill is None
        else ("bias_neg_inf" if case.bias_fill_value == "-inf" else "bias_large_negative")
    ),
    labels={"bias_neg_inf": "-inf in bias", "bias_large_negative": "large negative bias (-1e9, min)"},
    token=_bias_fill_token,
    words=_bias_fill_words,
    # The stand-in bias of a -inf fill is -inf, so a declaration sees it (``has_neg_inf_bias``).
    skeleton=lambda case, make: (
        {"bias": make(pattern_shape(case, case.bias), "-inf")}
        if case.bias_fill is not None and case.bias_fill_value == "-inf"
        else {}
    ),
    parse={
        "bias_fill": _bias_fill_parse,
        "bias_fill_block": lambda value: {"bias_fill_block": _number("bias_fill_block", value)},
    },
    draws=(Draw(250, _bias_fill_draw),),
    shrinks=(Draw(250, _bias_fill_shrink),),
    pairwise=(
        PairwiseEdit(
            "bias_fill",
            lambda caps: caps.bias,
            _optional("bias_fill"),
            lambda case, caps: {
                "bias": case.bias or "bhqk",
                "bias_fill": "first_block",
                "bias_fill_value": "-inf",
                "bias_fill_block": subject_kv_block(caps),
            },
            lambda case: {"bias_fill": None},
            needs=("bias",),
        ),
    ),
    validate=_bias_fill_validate,
    for_subject=lambda case, caps: (
        {"bias_fill_block": subject_kv_block(caps)}
        if case.bias_fill is not None and not case.bias_fill_block
        else {}
    ),
)


def _float_field(key: str) -> Callable[[str], Fields]:
    return lambda value: {key: _number(key, value, float)}


SOFTCAP = Feature(
    "softcap",
    fields=(Field("softcap", "float | None", None),),
    capability="softcap",
    present=_optional("softcap"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: spec.softcap is not None and not caps.softcap,
            "softcap not supported",
        ),
    ),
    grid=lambda case: "softcap" if case.softcap is not None else None,
    token=lambda case: f"cap{case.softcap:g}" if case.softcap is not None else None,
    words=lambda case: f"softcap {case.softcap:g}" if case.softcap is not None else None,
    spec_fields=("softcap",),
    keywords=lambda inputs, spec: {"softcap": spec.softcap} if spec.softcap is not None else {},
    accepts=("softcap",),
    parse={"softcap": _float_field("softcap")},
    draws=(
        Draw(
            150,
            lambda ctx: {
                "softcap": ctx.draw(ctx.st.none() | ctx.st.sampled_from(SOFTCAPS))
                if ctx.caps.softcap
                else None
            },
        ),
    ),
    shrinks=(Draw(80, lambda ctx: {"softcap": _maybe(ctx, ctx.case.softcap)}),),
    pairwise=(
        PairwiseEdit(
            "softcap",
            lambda caps: caps.softcap,
            _optional("softcap"),
            lambda case, caps: {"softcap": 20.0},
            lambda case: {"softcap": None},
        ),
    ),
)

# Every subject takes a scale (the canonical default is 1/sqrt(D)); a case may set another.
SCALE = Feature(
    "scale",
    fields=(Field("scale", "float | None", None),),
    present=_optional("scale"),
    token=lambda case: f"scale{case.scale:g}" if case.scale is not None else None,
    words=lambda case: f"scale {case.scale:g}" if case.scale is not None else None,
    spec_fields=("scale",),
    parse={"scale": _float_field("scale")},
    shrinks=(Draw(85, lambda ctx: {"scale": _maybe(ctx, ctx.case.scale)}),),
)


def _sinks_validate(case: Any) -> str | None:
    if case.sinks is not None and case.sinks not in SINK_KINDS:
        return f"unknown sink kind {case.sinks!r}; choose from {SINK_KINDS} (or None)"
    return None


SINKS = Feature(
    "sinks",
    fields=(Field("sinks", "str | None", None),),
    capability="sinks",
    present=_optional("sinks"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: _has_input("sinks")(inputs) and not caps.sinks,
            "attention sinks not supported",
        ),
    ),
    grid=lambda case: "sinks" if case.sinks is not None else None,
    token=lambda case: (
        None if case.sinks is None else ("sink" if case.sinks == "normal" else f"sink_{case.sinks}")
    ),
    words=lambda case: f"{case.sinks} sinks" if case.sinks is not None else None,
    inputs=("sinks",),
    skeleton=lambda case, make: {"sinks": None if case.sinks is None else make((case.q_heads,), "float")},
    keywords=_from_inputs("sinks"),
    accepts=("sinks",),
    parse={"sinks": _choice("sinks", SINK_KINDS, "sinks")},
    draws=(
        Draw(
            200,
            lambda ctx: {
                "sinks": ctx.draw(ctx.st.none() | ctx.st.sampled_from(SINK_KINDS)) if ctx.caps.sinks else None
            },
        ),
    ),
    shrinks=(Draw(120, lambda ctx: {"sinks": _maybe(ctx, ctx.case.sinks)}),),
    pairwise=(
        PairwiseEdit(
            "sinks",
            lambda caps: caps.sinks,
            _optional("sinks"),
            lambda case, caps: {"sinks": "normal"},
            lambda case: {"sinks": None},
        ),
    ),
    validate=_sinks_validate,
    keeps_rows=True,
    gradients=(Gradient("dsinks", "sinks", "sinks_grad"),),
)


def _storage_validate(field: str) -> Callable[[Any], str | None]:
    def validate(case: Any) -> str | None:
        value = getattr(case, field)
        if value is not None and value not in STORAGES:
            return f"unknown {field} {value!r}; choose from {STORAGES} (or None)"
        return None

    return validate


def _storage_refusal(field: str, declared: str, tensors: str) -> Callable[..., str | None]:
    def refusal(caps: Any, shape: Any, spec: Any, inputs: Any) -> str | None:
        value = getattr(spec, field)
        if value is not None and value not in getattr(caps, declared):
            return (
                f"{tensors} stored as {value} not supported (declared: {getattr(caps, declared) or 'none'})"
            )
        return None

    return refusal


def _storage_draw(field: str, declared: str, fixed: Callable[[Any], bool]) -> Callable[[Any], Fields]:
    def draw(ctx: Any) -> Fields:
        if fixed(ctx.caps):
            return {}  # the subject's own storage (``subject_fields``), not drawn
        choices = getattr(ctx.caps, declared)
        return {field: ctx.draw(ctx.st.none() | ctx.st.sampled_from(choices)) if choices else None}

    return draw


def _storage_across_batch(field: str, tensors: str) -> Callable[[Any], str | None]:
    """Why a request alone is another input where ``field``'s storage shares a scale across the
    batch (a ``channel``, ``head`` or ``tensor`` group): its stored form depends on its neighbours."""

    def reason(case: Any) -> str | None:
        storage = getattr(case, field)
        if storage is None:
            return None
        _, group = kv_storage_names.storage_parts(storage)
        if 0 not in kv_storage_names.GROUP_AXES[group]:  # axis 0 of [B, H, S, D]: the batch
            return None
        return (
            f"{tensors} stored as {storage}: one scale spans the batch, so a request's stored "
            "values depend on the other requests, and alone it is another input"
        )

    return reason


def _storage_feature(field: str, declared: str, prefix: str, at: int, fixed_by: str | None = None) -> Feature:
    """A tensor's storage (``kernels/runtime/kv_storage.py``): the case passes it quantized, weights with
    scales, in the named storage, and its values are rounded to what that storage holds when the
    inputs are built (so the reference, the baseline and the subject all see exactly those).
    Declared by ``Capabilities.<declared>`` (the storages its call accepts); drawn at ``at``.
    ``fixed_by``: the ``Capabilities`` attribute with which a subject fixes the storage of every
    case of its own (then it is neither drawn, shrunk nor paired)."""
    tensors = kv_storage_names.TENSORS[field]

    def fixed(caps: Any) -> bool:
        return fixed_by is not None and getattr(caps, fixed_by) is not None

    return Feature(
        field,
        fields=(Field(field, "str | None", None),),
        capability=declared,
        present=_optional(field),
        refusals=(_storage_refusal(field, declared, tensors),),
        grid=lambda case: f"{prefix}_{getattr(case, field)}" if getattr(case, field) is not None else None,
        labels={f"{prefix}_{storage}": kv_storage_names.label(storage, tensors) for storage in STORAGES},
        token=lambda case: f"{prefix}{getattr(case, field)}" if getattr(case, field) is not None else None,
        words=lambda case: (
            f"{tensors} stored as {getattr(case, field)}" if getattr(case, field) is not None else None
        ),
        spec_fields=(field,),
        keywords=lambda inputs, spec: (
            {field: getattr(spec, field)} if getattr(spec, field) is not None else {}
        ),
        accepts=(field,),
        parse={field: _choice(field, STORAGES, field)},
        draws=(Draw(at, _storage_draw(field, declared, fixed)),),
        shrinks=(
            Draw(at, lambda ctx: {} if fixed(ctx.caps) else {field: _maybe(ctx, getattr(ctx.case, field))}),
        ),
        pairwise=(
            PairwiseEdit(
                field,
                lambda caps: bool(getattr(caps, declared)) and not fixed(caps),
                _optional(field),
                lambda case, caps: {field: getattr(caps, declared)[0]},
                lambda case: {field: None},
            ),
        ),
        validate=_storage_validate(field),
        from_subject=fixed_by,
        not_per_request=_storage_across_batch(field, tensors),
    )


# q and K/V each in a storage the call accepts (``Capabilities.q_storages``, ``kv_storages``), or
# plain. A subject that fixes its K/V storage (``Capabilities.kv_storage``, e.g. int8 pages) sets
# it on every case (``subject_fields``). One grid column per storage and tensor (``q_int8``,
# ``kv_float8_e4m3fn_per_head``, ...), labelled from its name.
Q_STORAGE = _storage_feature("q_storage", "q_storages", "q", 230)
KV_STORAGE = _storage_feature("kv_storage", "kv_storages", "kv", 240, fixed_by="kv_storage")


def _gqa_grid(case: Any) -> str | None:
    if case.kv_heads == 1 and case.q_heads > 1:
        return "mqa"
    return "gqa" if case.kv_heads != case.q_heads else None


# Heads and head dims are shape fields; GQA and Dv != D are what a subject declares about them.
GQA = Feature(
    "gqa",
    capability="gqa",
    present=lambda case: case.q_heads != case.kv_heads,
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: shape.group_size != 1 and not caps.gqa, "GQA/MQA not supported"
        ),
    ),
    grid=_gqa_grid,
    labels={"gqa": "GQA", "mqa": "MQA"},
    draws=(
        Draw(30, lambda ctx: {"group": ctx.draw(ctx.st.sampled_from((1, 2, 4, 8))) if ctx.caps.gqa else 1}),
    ),
    pairwise=(
        PairwiseEdit(
            "gqa",
            lambda caps: caps.gqa,
            lambda case: case.q_heads != case.kv_heads,
            lambda case, caps: {"q_heads": 4, "kv_heads": 2},
            lambda case: {"q_heads": case.kv_heads},
        ),
    ),
)

DISTINCT_V_DIM = Feature(
    "dv_ne_d",
    capability="distinct_v_dim",
    present=lambda case: case.v_head_dim != case.head_dim,
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: shape.v_head_dim != shape.head_dim and not caps.distinct_v_dim,
            "Dv != D not supported",
        ),
    ),
    grid=lambda case: "dv_ne_d" if case.v_head_dim != case.head_dim else None,
    labels={"dv_ne_d": "Dv ≠ D"},
    draws=(
        Draw(
            140,
            lambda ctx: {
                "v_head_dim": ctx.draw(ctx.st.sampled_from(ctx.head_dims))
                if ctx.caps.distinct_v_dim
                else ctx.fields["head_dim"]
            },
        ),
    ),
)

# Leading batch dims (``AttentionSpec.batch_dims``): the case's ``B`` requests passed as
# ``[*batch_dims, ...]``, as tokamax documents its arrays (``"*B T N H"``, lengths ``"*#B"``). The
# canonical inputs, the reference and every check stay ``[B, ...]``: only the subject's call form
# changes, so an index into a per-batch input that assumes one batch axis (lengths read as ``[:, None]``)
# is what these cases reach. Never drawn: curated and ``--case`` only, so the ci draws stay the same.


def batch_dims_text(batch_dims: tuple[int, ...]) -> str:
    """``(2, 3)`` -> ``"2x3"``: how an id, a ``--case`` and a review write leading batch dims."""
    return "x".join(map(str, batch_dims))


def _batch_dims_validate(case: Any) -> str | None:
    dims = case.batch_dims
    if dims is None:
        return None
    if len(dims) < 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in dims):
        return f"batch_dims must be 2 or more positive sizes, e.g. (2, 3), got {dims!r}"
    held = 1
    for n in dims:
        held *= n
    if held != case.batch:
        return (
            f"batch_dims {batch_dims_text(dims)} holds {held} requests but batch is {case.batch}: "
            f"set B={held} (or batch_dims whose product is {case.batch})"
        )
    return None


def _batch_dims_parse(value: str) -> Fields:
    if value in NO:
        return {}
    dims = tuple(_number("batch_dims", n) for n in value.split("x"))
    if len(dims) < 2 or min(dims) < 1:
        raise FeatureSyntaxError(f"batch_dims={value!r}: write 2 or more positive sizes, e.g. batch_dims=2x3")
    return {"batch_dims": dims}


def _batch_dims_shrink(ctx: Any) -> Fields:
    # Draws nothing for a case without them, so other cases shrink as before; a smaller batch
    # drops them (their product must stay the batch).
    dims = ctx.case.batch_dims
    if dims is None:
        return {}
    held = 1
    for n in dims:
        held *= n
    if held != ctx.fields.get("batch", ctx.case.batch):
        return {"batch_dims": None}
    return {"batch_dims": _maybe(ctx, dims)}


LEADING_BATCH_DIMS = Feature(
    "leading_batch_dims",
    fields=(Field("batch_dims", "tuple[int, ...] | None", None),),
    capability="leading_batch_dims",
    present=_optional("batch_dims"),
    refusals=(
        _refuse(
            lambda caps, shape, spec, inputs: spec.batch_dims is not None and not caps.leading_batch_dims,
            "leading batch dims not supported (the call takes one batch axis, [B, ...])",
        ),
    ),
    grid=lambda case: "leading_batch_dims" if case.batch_dims is not None else None,
    labels={"leading_batch_dims": "leading batch dims"},
    token=lambda case: None if case.batch_dims is None else f"lead{batch_dims_text(case.batch_dims)}",
    words=lambda case: (
        None
        if case.batch_dims is None
        else f"{len(case.batch_dims)} leading batch dims ({batch_dims_text(case.batch_dims)})"
    ),
    spec_fields=("batch_dims",),
    parse={"batch_dims": _batch_dims_parse},
    shrinks=(Draw(260, _batch_dims_shrink),),
    validate=_batch_dims_validate,
    # A request alone is a batch of 1: the same call form, every leading dim 1.
    request=lambda case, b: {} if case.batch_dims is None else {"batch_dims": (1,) * len(case.batch_dims)},
)

FEATURES: tuple[Feature, ...] = (
    CAUSAL,
    CHUNK,
    WINDOW,
    SEGMENTS,
    LENGTHS,
    MASK,
    BIAS,
    BIAS_FILL,
    SOFTCAP,
    SCALE,
    SINKS,
    Q_STORAGE,
    KV_STORAGE,
    GQA,
    DISTINCT_V_DIM,
    LEADING_BATCH_DIMS,
)
BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}

# Grid columns that are no feature's: Sq != Sk and a non-default config are the shape's and
# the tunables'; ``causal`` and ``mask`` are how records before the table named two columns.
SHAPE_COLUMNS = {"sq_ne_sk": "Sq ≠ Sk", "config": "non-default config"}


def _check_table() -> None:
    """Fail at import, naming the clash, if two features own a field, a token slot of the
    draw sequence, or a ``--case`` key."""
    seen: dict[str, str] = {}
    for kind, items in (
        ("field", [(fld.name, f.name) for f in FEATURES for fld in f.fields]),
        ("--case key", [(key, f.name) for f in FEATURES for key in f.parse]),
        ("draw position", [(str(d.at), f.name) for f in FEATURES for d in f.draws]),
        ("shrink position", [(str(d.at), f.name) for f in FEATURES for d in f.shrinks]),
    ):
        seen.clear()
        for key, owner in items:
            if key in seen:
                raise ValueError(f"features {seen[key]!r} and {owner!r} both declare {kind} {key!r}")
            seen[key] = owner


_check_table()


def case_fields() -> tuple[Field, ...]:
    """Every ``Case`` field the features own, in table order."""
    return tuple(fld for f in FEATURES for fld in f.fields)


def grid_names(case: Any) -> tuple[str, ...]:
    """The grid columns ``case`` counts towards, from its features (table order)."""
    return tuple(name for f in FEATURES if (name := f.grid(case)) is not None)


def tokens(case: Any) -> list[str]:
    """The case-id tokens of ``case``'s features, in table order."""
    return [token for f in FEATURES if (token := f.token(case)) is not None]


def words(case: Any) -> list[str]:
    """``case``'s features in words, for a review."""
    return [text for f in FEATURES if (text := f.words(case)) is not None]


def labels() -> dict[str, str]:
    """Grid column -> how a person reads it."""
    out = {name: label for f in FEATURES for name, label in f.labels.items()}
    return {**out, **SHAPE_COLUMNS}


def grid_order() -> tuple[str, ...]:
    """The grid's feature columns in order (a feature's columns, then the shape's)."""
    names: list[str] = []
    for f in FEATURES:
        names += list(f.labels) or ([f.name] if f.grid is not _none else [])
    return tuple(dict.fromkeys([*names, *SHAPE_COLUMNS]))


def refusals(caps: Any, shape: Any, spec: Any, inputs: Any) -> list[str]:
    """Every sentence for a feature the call uses and ``caps`` does not declare (table order)."""
    return [text for f in FEATURES for refuse in f.refusals if (text := refuse(caps, shape, spec, inputs))]


def call_keywords(inputs: Any, spec: Any) -> Fields:
    """The canonical keywords of one call, beyond ``scale``: each feature's when the call uses it."""
    out: Fields = {}
    for f in FEATURES:
        out.update(f.keywords(inputs, spec))
    return out


def accepted_keywords(caps: Any) -> tuple[str, ...]:
    """The keywords a plain function must accept for what ``caps`` declares."""
    return tuple(
        name for f in FEATURES if f.capability is not None and f.declared(caps) for name in f.accepts
    )


def input_fields() -> tuple[str, ...]:
    """The optional ``AttentionInputs`` arrays the features add, in table order."""
    return tuple(name for f in FEATURES for name in f.inputs)


def parse_keys() -> dict[str, Callable[[str], Fields]]:
    """``--case`` key -> its parser, over every feature."""
    return {key: parse for f in FEATURES for key, parse in f.parse.items()}


def pairwise_edits() -> tuple[PairwiseEdit, ...]:
    return tuple(edit for f in FEATURES for edit in f.pairwise)


def gradients() -> tuple[Gradient, ...]:
    return tuple(g for f in FEATURES for g in f.gradients)


def batch_inputs() -> tuple[str, ...]:
    """The optional ``AttentionInputs`` arrays with a leading batch axis (``Feature.batch_inputs``)."""
    return tuple(name for f in FEATURES for name in f.batch_inputs)


def request_fields(case: Any, b: int) -> Fields:
    """The feature field updates of request ``b`` of ``case`` run alone (``Feature.request``)."""
    out: Fields = {}
    for f in FEATURES:
        out.update(f.request(case, b))
    return out


def not_per_request(case: Any) -> list[str]:
    """Why a request of ``case`` alone is not the same input as in its batch (empty: it is)."""
    return [text for f in FEATURES if (text := f.not_per_request(case))]


def subject_fields(caps: Any) -> Fields:
    """The case fields a subject sets on every case of its own (``Feature.from_subject``), where
    it sets one (a subject that fixes none leaves the field to the case)."""
    return {
        f.fields[0].name: value
        for f in FEATURES
        if f.from_subject and (value := getattr(caps, f.from_subject)) is not None
    }


def for_subject(case: Any, caps: Any) -> Fields:
    """The field updates that make a template ``case`` a case of the subject declaring ``caps``:
    every feature's ``for_subject`` (empty when the template leaves nothing to the subject)."""
    out: Fields = {}
    for f in FEATURES:
        out.update(f.for_subject(case, caps))
    return out


def problems(case: Any) -> list[str]:
    """What is wrong with ``case``'s feature fields (empty when nothing)."""
    return [text for f in FEATURES if (text := f.validate(case))]
