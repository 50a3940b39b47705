"""fp8 case dtypes: inputs meaningful in 8 bits, the baseline following each subject's declared
arithmetic, declarations that raise with the subject's own error, and the plan at ci."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance.judge import baseline, dtypes
from conformance.judge.checks.base import CheckContext
from conformance.judge.checks.contract import raises, shape_dtype
from conformance.judge.inputs import build_inputs, padding_sentinel
from conformance.plan import catalogue, edge_matrix, profiles
from conformance.plan.cases import Case
from conformance.plan.subjects import resolve_subjects
from conformance.plan.user_cases import parse_case
from kernels.contract.base import Capabilities, ShapeConstraint
from kernels.contract.dtypes import DTYPES, FP8_DTYPES
from reference import attention_forward

FP8 = pytest.mark.parametrize("dtype", FP8_DTYPES)


def test_fp8_dtypes_are_case_dtypes_with_their_ranges():
    assert set(FP8_DTYPES) <= set(DTYPES)
    assert dtypes.max_value("float8_e4m3fn") == 448 and dtypes.max_value("float8_e5m2") == 57344
    assert dtypes.eps("float8_e4m3fn") == 0.125 and dtypes.eps("float8_e5m2") == 0.25
    assert dtypes.logits_dtype("float8_e5m2") == "float32" and dtypes.logits_dtype("bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="choose from"):
        dtypes.numpy_dtype("float8_e4m3")


@FP8
@pytest.mark.parametrize("kind", ["normal", "large", "integers"])
def test_every_input_kind_is_finite_and_meaningful_in_fp8(dtype, kind):
    case = Case("x", dtype, input_kind=kind, q_len=64, kv_len=64, sinks="extreme", q_heads=3, kv_heads=3)
    inputs = build_inputs(case)
    for name in ("q", "k", "v", "sinks"):
        array = getattr(inputs, name)
        assert dtypes.name_of(array.dtype) == dtype and np.isfinite(array.astype(np.float64)).all(), name
    logits = np.einsum("bhqd,bhkd->bhqk", inputs.q.astype(np.float64), inputs.k.astype(np.float64))
    logits *= case.spec.resolved_scale(case.head_dim)
    if kind == "large":  # fp8 logits live in float32: they must pass its exp range, as bf16's do
        assert np.abs(logits).max() > dtypes.exp_overflow("float32")
    if kind == "integers":  # exact in both fp8 dtypes
        assert set(np.unique(inputs.k.astype(np.float64))) <= set(range(-3, 4))
    # The vanishing sink is inside the dtype's range (e4m3fn: -448, not NaN) and still vanishes.
    assert inputs.sinks.astype(np.float64)[1] <= -448


@FP8
def test_nan_padding_in_fp8_writes_nan_and_a_sentinel_far_above_v(dtype):
    case = Case("x", dtype, batch=2, q_len=64, kv_len=64, kv_lengths=(64, 20), input_kind="nan_padding")
    inputs = build_inputs(case)
    assert np.isnan(inputs.k[1, :, 20:].astype(np.float64)).all()
    sentinel = inputs.v[1, :, 20:].astype(np.float64)
    assert (
        np.isfinite(sentinel).all() and sentinel.min() >= 16 * np.abs(inputs.v[0].astype(np.float64)).mean()
    )
    assert padding_sentinel(case) < dtypes.max_value(dtype)


@FP8
def test_the_baseline_follows_the_declared_p_quantization_and_output_dtype(dtype):
    case = Case("x", dtype, q_len=64, kv_len=64)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    f32_p = baseline.forward(inputs, case.spec, baseline.Numerics(False, "bfloat16"))
    fp8_p = baseline.forward(inputs, case.spec, baseline.Numerics(True, "bfloat16"))
    assert dtypes.name_of(f32_p.out.dtype) == "bfloat16" and f32_p.lse.dtype == np.float32
    error = lambda out: np.abs(out.astype(np.float64) - ref.out).mean()  # noqa: E731
    # Rounding P to 3 or 2 mantissa bits costs an order of magnitude over bf16's rounding of out.
    assert error(fp8_p.out) > 5 * error(f32_p.out)
    plain = baseline.forward(inputs, case.spec)
    assert dtypes.name_of(plain.out.dtype) == dtype
    declared = Capabilities(
        dtypes=FP8_DTYPES, internal_quantization="p_fp8", output_dtypes=((dtype, "float32"),)
    )
    assert baseline.numerics(declared, dtype) == baseline.Numerics(True, "float32")
    assert baseline.numerics(Capabilities(dtypes=("float32",)), "float32") == baseline.Numerics()


def test_declarations_of_fp8_arithmetic_are_validated():
    with pytest.raises(ValueError, match="internal_quantization"):
        Capabilities(dtypes=FP8_DTYPES, internal_quantization="p_int8")
    with pytest.raises(ValueError, match="fp8 cases only"):
        Capabilities(dtypes=("float32",), internal_quantization="p_fp8")
    with pytest.raises(ValueError, match="output_dtypes"):
        Capabilities(dtypes=("float32",), output_dtypes=(("float8_e5m2", "bfloat16"),))
    with pytest.raises(ValueError, match="unknown dtypes"):
        ShapeConstraint("x", "r", lambda s, p: False, "raises", dtypes=("float8",))
    with pytest.raises(ValueError, match="only a 'raises' constraint"):
        ShapeConstraint("x", "r", lambda s, p: False, "api", exceptions=("TypeError",))
    caps = Capabilities(dtypes=FP8_DTYPES, output_dtypes=(("float8_e5m2", "bfloat16"),))
    assert (
        caps.output_dtype("float8_e5m2") == "bfloat16"
        and caps.output_dtype("float8_e4m3fn") == "float8_e4m3fn"
    )


def test_the_case_option_parses_fp8():
    assert parse_case("D=64,dtype=float8_e4m3fn", DTYPES).dtype == "float8_e4m3fn"
    assert parse_case("dtype=float8_e5m2", DTYPES).dtype == "float8_e5m2"


def test_ci_runs_the_fp8_core_on_tpu_flash_and_declares_xla_raises():
    """Done-when of the issue: at ci, fp8 cases run on each subject declaring fp8, and jax.nn's
    rejection is declared with its own error."""
    ci = profiles.get("ci")
    assert all(t in edge_matrix.edge_cases(0) for t in edge_matrix.FP8_CORE)
    (flash,) = resolve_subjects("tpu_flash")
    (xla,) = resolve_subjects("xla")
    plan = catalogue.plan((flash, xla), ci, 0)
    fp8 = lambda items: [p for p in items if p.case.dtype in FP8_DTYPES]  # noqa: E731
    runs = {(p.case.subject, p.case.dtype) for p in fp8(plan["forward"]) if p.status == "run"}
    assert {("tpu_flash", d) for d in FP8_DTYPES} <= runs and not {s for s, _ in runs} - {"tpu_flash"}
    raising = fp8(plan["raises"])
    assert {(p.case.subject, p.case.dtype) for p in raising} >= {("xla", d) for d in FP8_DTYPES}
    assert all("TypePromotionError" in p.reason for p in raising if p.case.subject == "xla")
    assert {p.case.subject for p in raising if p.case.bias} >= {"tpu_flash"}  # its cost estimate's einsum
    in_fp8 = [c for c in catalogue.cases_for(flash, ci, 0) if c.dtype in FP8_DTYPES]
    assert len(in_fp8) <= 2 * len(edge_matrix.FP8_CORE) + ci.drawn_cases  # ci stays small


@dataclasses.dataclass(frozen=True)
class _Call:
    error: BaseException | None
    value: object = None


@dataclasses.dataclass(frozen=True)
class _Run:
    forward_call: _Call

    @property
    def forward(self):
        return self.forward_call.value


def _context(caps: Capabilities, call: _Call, case: Case) -> CheckContext:
    return CheckContext(case, None, caps, None, _Run(call), profiles.get("ci"))  # type: ignore[arg-type]


def test_raises_requires_the_declared_error_where_one_is_named():
    rejects = ShapeConstraint(
        "fp8", "r", lambda s, p: False, "raises", dtypes=FP8_DTYPES, exceptions=("ArithmeticError",)
    )
    caps = Capabilities(dtypes=("float32", *FP8_DTYPES), constraints=(rejects,))
    case = Case("x", "float8_e5m2")
    assert raises(_context(caps, _Call(ZeroDivisionError("x")), case)).verdict == "pass"  # a subclass
    wrong = raises(_context(caps, _Call(KeyError("adapter bug")), case))
    assert wrong.verdict == "fail" and "ArithmeticError" in wrong.reason
    assert caps.admits(case.skeleton(), case.spec, "float32", "forward") == ()  # fp8 only


def test_shape_dtype_expects_the_declared_output_dtype():
    case = Case("x", "float8_e4m3fn", q_len=4, kv_len=4, head_dim=4, v_head_dim=4)
    caps = Capabilities(dtypes=FP8_DTYPES, output_dtypes=(("float8_e4m3fn", "bfloat16"),))
    out = lambda name: np.zeros((1, 1, 4, 4), dtype=dtypes.numpy_dtype(name))  # noqa: E731

    class _Out:
        def __init__(self, array):
            self.out, self.lse = array, None

    good = _context(caps, _Call(None, _Out(out("bfloat16"))), case)
    bad = _context(caps, _Call(None, _Out(out("float8_e4m3fn"))), case)
    assert shape_dtype(good).verdict == "pass"
    assert shape_dtype(bad).verdict == "fail" and "expected bfloat16" in shape_dtype(bad).reason


def test_a_constraint_on_some_dtypes_concerns_only_those():
    (xla,) = resolve_subjects("xla")
    shape = Case("x", "float32").shape
    spec = Case("x", "float32").spec
    assert not xla.capabilities.violated_constraints(shape, spec, "forward")  # no dtype: not fp8
    assert xla.capabilities.admits(shape, spec, "float32", "forward") == ()
    (outside,) = xla.capabilities.admits(shape, spec, "float8_e4m3fn", "forward")
    assert outside.raises and outside.constraint.exceptions == ("TypePromotionError",)


@FP8
def test_the_baseline_prescales_q_where_the_api_takes_no_scale(dtype):
    """An API without a scale (splash) makes its caller round q * scale to q's dtype: declared
    (``q_prescaled``), the baseline does the same. That rounding is the bulk of such a subject's
    lse error in fp8, so the baseline that ignored it was 1e2x to 1e5x too strict there; one that
    models it agrees with exact attention on the rounded product to float32 precision."""
    case = Case("x", dtype, q_len=64, kv_len=64, scale=0.3)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    plain = baseline.forward(inputs, case.spec)
    prescaled = baseline.forward(inputs, case.spec, baseline.Numerics(prescale_q=True))
    assert baseline.numerics(Capabilities(dtypes=FP8_DTYPES, q_prescaled=True), dtype).prescale_q
    error = lambda lse: np.abs(lse.astype(np.float64) - ref.lse).max()  # noqa: E731
    assert error(prescaled.lse) > 100 * error(plain.lse)
    q = (inputs.q.astype(np.float32) * np.float32(0.3)).astype(inputs.q.dtype)
    exact = attention_forward(dataclasses.replace(inputs, q=q), dataclasses.replace(case.spec, scale=1.0))
    assert np.abs(prescaled.lse.astype(np.float64) - exact.lse).max() < 1e-5 * np.abs(exact.lse).max()
    grads = baseline.gradients(inputs, case.spec, np.ones_like(inputs.q), baseline.Numerics(prescale_q=True))
    assert grads.dq.dtype == inputs.q.dtype and np.isfinite(grads.dk.astype(np.float64)).all()


def test_prescaling_in_float32_changes_the_baseline_by_float32_rounding_only():
    case = Case("x", "float32", q_len=64, kv_len=64, scale=0.3)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    plain = baseline.forward(inputs, case.spec)
    prescaled = baseline.forward(inputs, case.spec, baseline.Numerics(prescale_q=True))
    assert np.abs(prescaled.lse.astype(np.float64) - ref.lse).max() < 1e-5
    assert np.abs(prescaled.out - plain.out).max() < 1e-5
