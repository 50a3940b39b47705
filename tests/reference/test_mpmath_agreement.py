"""The reference agrees with an independent 40-digit mpmath computation, feature by feature.

Sizes are tiny so that mpmath stays fast, but every case has B = 2 (batch-indexed
lengths, segment ids and bias) and most have Sq != Sk, where alignment matters.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward
from tests.reference import mp_oracle
from tests.reference.assertions import assert_close
from tests.reference.prose_masks import visibility
from tests.reference.strategies import Case, values

# float64 softmax and GEMMs over a handful of terms lose a few ulps; 1e-13 leaves
# ~500x headroom and still fails on any semantic slip (those are O(1e-3) or worse).
RTOL = 1e-13


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A deterministic tiny case. shape: (B, Hq, Hkv, Sq, Sk, D, Dv)."""

    name: str
    spec: AttentionSpec = AttentionSpec()
    shape: tuple[int, int, int, int, int, int, int] = (2, 2, 2, 3, 5, 3, 2)
    kind: str = "normal"
    bias: tuple[int, int, int, int] | None = None  # -1 = full size on that axis
    neg_inf_bias: bool = False
    segments: bool = False
    q_lengths: tuple[int, ...] | None = None
    kv_lengths: tuple[int, ...] | None = None
    mask: tuple[int, int, int, int] | None = None
    mask_density: float = 0.6
    sinks: tuple[float | None, ...] | None = None  # per query head; None = a N(1, 2^2) draw

    def build(self) -> Case:
        b, hq, hkv, sq, sk, d, dv = self.shape
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        full = (b, hq, sq, sk)
        fields: dict[str, np.ndarray] = {
            "q": values(rng, (b, hq, sq, d), self.kind),
            "k": values(rng, (b, hkv, sk, d), self.kind),
            "v": values(rng, (b, hkv, sk, dv), self.kind),
        }
        if self.bias is not None:
            bias = values(rng, _resolve(self.bias, full), self.kind)
            if self.neg_inf_bias:
                bias.flat[::3] = -np.inf
            fields["bias"] = bias
        if self.segments:
            # Sorted, like packed documents: contiguous runs leave window edges exposed.
            fields["q_segment_ids"] = np.sort(rng.integers(0, 2, size=(b, sq)), axis=1)
            fields["kv_segment_ids"] = np.sort(rng.integers(0, 2, size=(b, sk)), axis=1)
        if self.q_lengths is not None:
            fields["q_lengths"] = np.array(self.q_lengths)
        if self.kv_lengths is not None:
            fields["kv_lengths"] = np.array(self.kv_lengths)
        if self.mask is not None:
            fields["mask"] = rng.random(_resolve(self.mask, full)) < self.mask_density
        if self.sinks is not None:
            drawn = 1.0 + 2.0 * rng.standard_normal(hq)
            fields["sinks"] = np.array(
                [d if x is None else x for x, d in zip(self.sinks, drawn, strict=True)]
            )
        return Case(self.spec, AttentionInputs(**fields), rng.standard_normal((b, hq, sq, dv)))


def _resolve(shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(f if n == -1 else n for n, f in zip(shape, full, strict=True))


F = -1  # full size on that axis
TL, BR, BRV = "top_left", "bottom_right", "bottom_right_valid"
WIDE = (2, 2, 2, 5, 3, 3, 2)  # Sq > Sk
MIXED = dict(
    bias=(1, F, F, F),
    mask=(F, 1, F, F),
    mask_density=0.85,
    segments=True,
    q_lengths=(4, 3),
    kv_lengths=(6, 5),
)
RECIPES = [
    Recipe("plain", shape=(2, 2, 2, 4, 4, 3, 3)),
    Recipe("plain-wide-logits", kind="wide"),
    Recipe("plain-small-ints", kind="ints"),
    Recipe("causal-top_left-sq<sk", AttentionSpec(causal=True, alignment=TL)),
    Recipe("causal-top_left-sq>sk", AttentionSpec(causal=True, alignment=TL), shape=WIDE),
    Recipe("causal-bottom_right-sq<sk", AttentionSpec(causal=True, alignment=BR)),
    Recipe("causal-bottom_right-sq>sk", AttentionSpec(causal=True, alignment=BR), shape=WIDE),
    Recipe("window-1-1-top_left", AttentionSpec(window=(1, 1), alignment=TL)),
    Recipe("window-2-0-bottom_right-sq>sk", AttentionSpec(window=(2, 0), alignment=BR), shape=WIDE),
    Recipe("window-0-0-bottom_right", AttentionSpec(window=(0, 0), alignment=BR)),
    Recipe("window-None-1", AttentionSpec(window=(None, 1), alignment=BR)),
    Recipe("window-1-None", AttentionSpec(window=(1, None), alignment=TL), shape=WIDE),
    Recipe("window-None-None", AttentionSpec(window=(None, None))),
    Recipe("causal-and-window-2-None", AttentionSpec(causal=True, window=(2, None), alignment=BR)),
    # Chunked causal: chunks of 2 keys from key 0, a query in its diagonal's chunk.
    Recipe("chunk-2-top_left-sq>sk", AttentionSpec(causal=True, chunk=2, alignment=TL), shape=WIDE),
    Recipe("chunk-2-bottom_right", AttentionSpec(causal=True, chunk=2, alignment=BR)),
    Recipe(
        "chunk-3-bottom_right_valid-padding",
        AttentionSpec(causal=True, chunk=3, alignment=BRV),
        q_lengths=(2, 3),
        kv_lengths=(5, 4),
    ),
    # Bottom-right of the valid lengths: each batch row's diagonal at kv_len[b] - q_len[b]
    # (row 1 of the first has kv 2 < q 3: its first query sees no key).
    Recipe(
        "causal-bottom_right_valid-padding",
        AttentionSpec(causal=True, alignment=BRV),
        q_lengths=(2, 3),
        kv_lengths=(5, 2),
    ),
    Recipe(
        "window-1-0-bottom_right_valid-gqa",
        AttentionSpec(window=(1, 0), alignment=BRV),
        shape=(2, 4, 2, 3, 6, 3, 2),
        q_lengths=(3, 1),
        kv_lengths=(4, 6),
    ),
    Recipe("causal-bottom_right_valid-kv-only", AttentionSpec(causal=True, alignment=BRV), kv_lengths=(3, 5)),
    Recipe("segment-ids", segments=True),
    Recipe("padding-q-and-kv", q_lengths=(2, 0), kv_lengths=(4, 1)),
    Recipe("padding-kv-empty", kv_lengths=(0, 5)),
    Recipe("mask-full", mask=(F, F, F, F)),
    Recipe("mask-broadcast-1-1-sq-sk", mask=(1, 1, F, F)),
    Recipe("mask-broadcast-b-1-1-sk", mask=(F, 1, 1, F)),
    Recipe("softcap-2", AttentionSpec(softcap=2.0)),
    Recipe("softcap-0.5-wide-logits", AttentionSpec(softcap=0.5), kind="wide"),
    Recipe("bias-full", bias=(F, F, F, F)),
    Recipe("bias-1-h-1-sk", bias=(1, F, 1, F)),
    Recipe("bias-b-1-sq-1", bias=(F, 1, F, 1)),
    Recipe("bias-scalar", bias=(1, 1, 1, 1)),
    Recipe("bias-neg-inf", bias=(F, 1, F, F), neg_inf_bias=True),
    Recipe("bias-neg-inf-softcap", AttentionSpec(softcap=1.5), bias=(1, F, F, F), neg_inf_bias=True),
    Recipe("bias-and-softcap", AttentionSpec(softcap=3.0), bias=(F, F, F, F), kind="wide"),
    Recipe("gqa-4-2", shape=(2, 4, 2, 3, 4, 3, 2)),
    Recipe("gqa-4-2-bias-per-q-head", shape=(2, 4, 2, 3, 4, 3, 2), bias=(1, F, F, F)),
    Recipe("mqa-3-1", shape=(2, 3, 1, 4, 3, 2, 3), mask=(1, F, F, 1)),
    Recipe("dv>d", shape=(2, 2, 1, 3, 4, 2, 5)),
    Recipe("dv<d", shape=(2, 2, 2, 3, 4, 5, 1)),
    Recipe("custom-scale", AttentionSpec(scale=0.7), kind="wide"),
    # Sinks: drawn near the logits, dominant (+30), vanishing (-1e4) and absent (-inf) per head.
    Recipe("sinks", sinks=(None, None)),
    Recipe("sinks-extreme-gqa", shape=(2, 4, 2, 3, 4, 3, 2), sinks=(30.0, -1e4, None, -np.inf)),
    # Rows that see no key: only the sink remains, out = 0 and lse = sink.
    Recipe(
        "sinks-padding-causal-br",
        AttentionSpec(causal=True, alignment=BR),
        q_lengths=(2, 0),
        sinks=(None, 30.0),
    ),
    Recipe("sinks-softcap-wide-logits", AttentionSpec(softcap=0.5), kind="wide", sinks=(3.0, None)),
    Recipe(
        "combination-gqa-causal-br-window-segments-padding-mask-bias-softcap",
        AttentionSpec(causal=True, alignment=BR, window=(3, 1), softcap=2.5),
        shape=(2, 4, 2, 4, 6, 3, 2),
        **MIXED,
    ),
    Recipe(
        "combination-tl-window-sq<sk",
        AttentionSpec(alignment=TL, window=(1, 2), scale=0.9),
        shape=(2, 2, 1, 4, 6, 2, 3),
        bias=(F, 1, 1, F),
        segments=True,
        kv_lengths=(6, 5),
        mask=(1, 1, F, F),
        mask_density=0.85,
    ),
]


@pytest.fixture(params=RECIPES, ids=lambda r: r.name)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param.build()


def test_forward_and_backward_match_mpmath(case: Case) -> None:
    exact = mp_oracle.attention(case.spec, case.inputs, case.dout)
    fwd = attention_forward(case.inputs, case.spec)
    grads = attention_backward(case.inputs, case.dout, case.spec, fwd)
    np.testing.assert_array_equal(fwd.fully_masked, exact.fully_masked, err_msg="fully_masked")
    assert_close(fwd.out, exact.out, RTOL, "out")
    assert_close(fwd.lse, exact.lse, RTOL, "lse")
    for name in ("dq", "dk", "dv", "dbias", "dsinks"):
        expected = getattr(exact, name)
        if expected is None:
            assert getattr(grads, name) is None, f"{name} given without its input"
        else:
            assert_close(getattr(grads, name), expected, RTOL, name)


def test_recipes_exercise_what_they_name(case: Case) -> None:
    """Guard against cases too easy to tell conventions apart (a test that cannot fail)."""
    spec, s = case.spec, case.shape
    vis = visibility(spec, case.inputs)
    assert vis.any(axis=-1).mean() >= 0.25, "most rows are fully masked: little is compared"
    if any(x is not None for x in (case.inputs.mask, case.inputs.q_lengths, case.inputs.q_segment_ids)):
        assert not vis.all(), "a masked case masks nothing"
    if (spec.causal or spec.window not in (None, (None, None))) and s.q_len != s.kv_len:
        other = TL if spec.alignment == BR else BR
        swapped = visibility(dataclasses.replace(spec, alignment=other), case.inputs)
        assert (swapped != vis).any(), "alignment makes no difference in this case"
    if spec.window is not None:
        # Exclusive edges (an off-by-one seen in the wild) must change something. With
        # causal on, the right edge is hidden behind the diagonal.
        left, right = spec.window
        narrower = []
        if left is not None and left > 0:
            narrower.append((left - 1, right))
        if right is not None and right > 0 and not spec.causal:
            narrower.append((left, right - 1))
        for window in narrower:
            other = visibility(dataclasses.replace(spec, window=window), case.inputs)
            assert (other != vis).any(), f"window {spec.window} and {window} see the same keys"


DIFF_RECIPES = [
    Recipe(
        "diff-gqa-bias-softcap-mask",
        AttentionSpec(softcap=2.0, causal=True, alignment=BR),
        shape=(1, 2, 1, 3, 4, 2, 2),
        bias=(1, 1, F, F),
        neg_inf_bias=True,
        kv_lengths=(3,),
    ),
    Recipe(
        "diff-broadcast-bias-fully-masked-rows",
        AttentionSpec(window=(0, 1), alignment=BR),
        shape=(2, 2, 2, 3, 2, 2, 3),
        bias=(F, 1, 1, F),
        q_lengths=(2, 3),
    ),
    Recipe(
        "diff-sinks-gqa-softcap-fully-masked-rows",
        AttentionSpec(softcap=2.0, causal=True, alignment=BR),
        shape=(2, 2, 1, 3, 2, 2, 2),
        q_lengths=(2, 3),
        sinks=(None, 1.5),
    ),
]


@pytest.mark.parametrize("recipe", DIFF_RECIPES, ids=lambda r: r.name)
def test_mpmath_analytic_backward_matches_mpmath_diff(recipe: Recipe) -> None:
    """The oracle's own backward is a formula; check it against numerical differentiation."""
    case = recipe.build()
    exact = mp_oracle.attention(case.spec, case.inputs, case.dout)
    for name in ("q", "k", "v", "bias", "sinks"):
        if getattr(case.inputs, name) is None:
            continue
        numeric = mp_oracle.numerical_grad(case.spec, case.inputs, case.dout, name)
        assert_close(getattr(exact, "d" + name), numeric, 1e-30, f"d{name} (mpmath analytic vs diff)")
