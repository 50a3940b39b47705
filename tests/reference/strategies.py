"""Hypothesis strategies for attention cases: shapes, specs, masks, bias and values.

Shapes stay tiny (every property runs the reference several times per example) but
cover the edges that matter: Sq != Sk both ways, GQA/MQA, Dv != D, batch > 1,
broadcast bias/mask shapes, empty valid lengths and fully masked rows. Values mix
plain normals, wide normals (peaked softmax, large logits) and small integers
(exact products), since near-uniform inputs let wrong answers pass as mean(V).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from reference.spec import ALIGNMENTS, AttentionInputs, AttentionShape, AttentionSpec

VALUE_KINDS = ("normal", "wide", "ints")


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """One attention call plus the cotangent for its backward pass (dout: [B, Hq, Sq, Dv])."""

    spec: AttentionSpec
    inputs: AttentionInputs
    dout: np.ndarray

    @property
    def shape(self) -> AttentionShape:
        return self.inputs.shape

    def replace(self, spec: AttentionSpec | None = None, dout: np.ndarray | None = None, **inputs) -> Case:
        return Case(
            spec=self.spec if spec is None else spec,
            inputs=dataclasses.replace(self.inputs, **inputs),
            dout=self.dout if dout is None else dout,
        )


def values(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "wide":
        return 4.0 * rng.standard_normal(shape)
    return rng.integers(-3, 4, size=shape).astype(np.float64)


@st.composite
def shapes(draw: st.DrawFn, max_seq: int = 6, max_dim: int = 4, max_group: int = 3) -> AttentionShape:
    kv_heads = draw(st.integers(1, 2))
    return AttentionShape(
        batch=draw(st.integers(1, 2)),
        q_heads=kv_heads * draw(st.integers(1, max_group)),
        kv_heads=kv_heads,
        q_len=draw(st.integers(1, max_seq)),
        kv_len=draw(st.integers(1, max_seq)),
        head_dim=draw(st.integers(1, max_dim)),
        v_head_dim=draw(st.integers(1, max_dim)),
    )


def _edge() -> st.SearchStrategy[int | None]:
    return st.none() | st.integers(0, 4)


@st.composite
def specs(draw: st.DrawFn, *, positional: bool = True, softcap: bool = True) -> AttentionSpec:
    """Scale, softcap and (when ``positional``) causal/window with either alignment, and a chunk
    (chunked causal) on some causal ones."""
    fields = dict(
        scale=draw(st.none() | st.sampled_from([0.3, 1.0, 2.5])),
        softcap=draw(st.none() | st.sampled_from([0.5, 2.0, 30.0])) if softcap else None,
        causal=draw(st.booleans()) if positional else False,
        alignment=draw(st.sampled_from(ALIGNMENTS)),
        window=draw(st.none() | st.tuples(_edge(), _edge())) if positional else None,
    )
    chunk = draw(st.none() | st.integers(1, 6)) if fields["causal"] else None
    return AttentionSpec(**fields, chunk=chunk)


@st.composite
def broadcast_shapes(draw: st.DrawFn, full: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``full``: each axis either full size or 1."""
    return tuple(n if draw(st.booleans()) else 1 for n in full)


def _sometimes(draw: st.DrawFn, label: str) -> bool:
    """On for about a third of cases: with every mask kind at 1/2, most rows came out dead."""
    return draw(st.sampled_from([True, False, False]), label=label)


def _lengths(rng: np.random.Generator, n: int, batch: int) -> np.ndarray:
    """Valid lengths: usually the upper half (rows stay live), sometimes 0 (all padding)."""
    lengths = rng.integers((n + 1) // 2, n + 1, size=batch)
    return np.where(rng.random(batch) < 0.15, 0, lengths)


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    shape: st.SearchStrategy[AttentionShape] | None = None,
    positional: bool = True,
    segments: bool = True,
    lengths: bool = True,
    mask: bool = True,
    bias: bool = True,
    neg_inf_bias: bool = True,
    softcap: bool = True,
) -> Case:
    """A random case; each keyword turns one feature off (it is otherwise drawn on or off)."""
    s = draw(shape if shape is not None else shapes())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    kind = draw(st.sampled_from(VALUE_KINDS), label="values")
    full = (s.batch, s.q_heads, s.q_len, s.kv_len)
    fields: dict[str, np.ndarray | None] = {
        "q": values(rng, (s.batch, s.q_heads, s.q_len, s.head_dim), kind),
        "k": values(rng, (s.batch, s.kv_heads, s.kv_len, s.head_dim), kind),
        "v": values(rng, (s.batch, s.kv_heads, s.kv_len, s.v_head_dim), kind),
    }
    if bias and draw(st.booleans(), label="bias"):
        b = values(rng, draw(broadcast_shapes(full), label="bias shape"), kind)
        if neg_inf_bias and _sometimes(draw, "-inf in bias"):
            b[rng.random(b.shape) < 0.15] = -np.inf
        fields["bias"] = b
    if segments and _sometimes(draw, "segment ids"):
        ids = draw(st.integers(1, 3), label="distinct segment ids")
        q_ids = rng.integers(0, ids, size=(s.batch, s.q_len))
        kv_ids = rng.integers(0, ids, size=(s.batch, s.kv_len))
        if draw(st.booleans(), label="packed (sorted) segments"):
            q_ids, kv_ids = np.sort(q_ids, axis=1), np.sort(kv_ids, axis=1)
        fields["q_segment_ids"], fields["kv_segment_ids"] = q_ids, kv_ids
    if lengths and _sometimes(draw, "q_lengths"):
        fields["q_lengths"] = _lengths(rng, s.q_len, s.batch)
    if lengths and positional and _sometimes(draw, "kv_lengths"):
        fields["kv_lengths"] = _lengths(rng, s.kv_len, s.batch)
    if mask and _sometimes(draw, "boolean mask"):
        density = draw(st.sampled_from([0.5, 0.8, 0.95]), label="mask density")
        fields["mask"] = rng.random(draw(broadcast_shapes(full), label="mask shape")) < density
    dout = rng.standard_normal((s.batch, s.q_heads, s.q_len, s.v_head_dim))
    spec = draw(specs(positional=positional, softcap=softcap), label="spec")
    return Case(spec=spec, inputs=AttentionInputs(**fields), dout=dout)
