"""``fully_masked``: rows that see no key follow the declared convention and poison no
other row. ``finite``: no NaN or Inf wherever the reference is finite."""

from __future__ import annotations

import dataclasses

import numpy as np

from conformance.judge import behaviour
from conformance.judge.checks.base import CheckContext, Outcome, failed, from_judgements, passed
from conformance.judge.dtypes import name_of
from conformance.judge.tolerance import judge
from kernels.contract import features


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _fraction(mask: np.ndarray, total: int) -> str:
    return f"{int(mask.sum())} of {total} ({100 * mask.sum() / max(total, 1):.3g}%)"


def _poisoned(ctx: CheckContext) -> list[str]:
    """Rows that see keys but came out non-finite (the classic NaN spreading from a masked row)."""
    got, valid = ctx.run.forward, ctx.oracle.valid_rows
    problems = []
    bad = valid & ~np.isfinite(np.asarray(got.out, dtype=np.float64)).all(axis=-1)
    if bad.any():
        problems.append(
            f"{_fraction(bad, int(valid.sum()))} rows that see keys have non-finite out, "
            f"first at [b, h, q] = {list(_first(bad))}"
        )
    if got.lse is not None and ctx.capabilities.lse:
        bad_lse = valid & ~np.isfinite(np.asarray(got.lse, dtype=np.float64))
        if bad_lse.any():
            problems.append(
                f"{_fraction(bad_lse, int(valid.sum()))} rows that see keys have non-finite lse, "
                f"first at {list(_first(bad_lse))}"
            )
    return problems


def mean_v(v: np.ndarray, q_heads: int) -> np.ndarray:
    """[B, Hq, Dv]: each query head's kv head's mean over all keys (v: [B, Hkv, Sk, Dv])."""
    mean = np.asarray(v, dtype=np.float64).mean(axis=2)
    return np.repeat(mean, q_heads // v.shape[1], axis=1)


def fully_masked(ctx: CheckContext) -> Outcome:
    """Fully masked rows follow ``capabilities.fully_masked_rows``; other rows stay finite. Whatever
    the convention, what the rows (and their lse) really hold is recorded as observed behaviour."""
    outcome = _fully_masked_verdict(ctx)
    return dataclasses.replace(outcome, observed=_observed_fully_masked(ctx))


def _observed_fully_masked(ctx: CheckContext) -> dict[str, str]:
    got, rows = ctx.run.forward, ctx.oracle.reference.fully_masked
    if np.shape(got.out)[:3] != rows.shape:
        return {}  # shape_dtype reports it
    out_dtype = ctx.capabilities.output_dtype(ctx.dtype)  # the ulps a mean(v) row is told apart in
    observed = {"fully_masked_out": behaviour.fully_masked_out(got.out, rows, ctx.oracle.inputs.v, out_dtype)}
    if ctx.capabilities.lse and got.lse is not None and np.shape(got.lse) == rows.shape:
        observed["fully_masked_lse"] = behaviour.fully_masked_lse(got.lse, rows)
    return observed


# Conventions a row meets element by element: what the row must be, and which rows break it.
_ELEMENTWISE = {
    "zeros": ("0", lambda out: (out != 0).any(axis=-1)),
    "nan": ("NaN", lambda out: ~np.isnan(out).all(axis=-1)),
}


def _fully_masked_verdict(ctx: CheckContext) -> Outcome:
    got, rows = ctx.run.forward, ctx.oracle.reference.fully_masked
    out = np.asarray(got.out, dtype=np.float64)
    convention = ctx.capabilities.fully_masked_rows
    problems = _poisoned(ctx)
    n_rows = int(rows.sum())
    if convention in _ELEMENTWISE:
        what, breaks = _ELEMENTWISE[convention]
        bad = rows & breaks(out)
        if bad.any():
            where = _first(bad)
            problems.append(
                f"convention {convention!r}: {_fraction(bad, n_rows)} fully masked rows are not {what}, "
                f"first at [b, h, q] = {list(where)}: {out[where][:4].tolist()}..."
            )
    elif convention == "mean_v":
        expected = np.broadcast_to(mean_v(ctx.oracle.inputs.v, ctx.case.q_heads)[:, :, None, :], out.shape)
        judged = judge(
            "out", got.out, expected, ctx.baseline.out, name_of(ctx.baseline.out.dtype), rows[..., None]
        )
        if not judged.passed:
            return from_judgements(
                [judged], "convention 'mean_v': fully masked rows are not mean(v); " + "; ".join(problems)
            )
    if problems:
        return failed("; ".join(problems), fully_masked_rows=n_rows)
    return passed(f"{n_rows} fully masked rows; convention {convention!r}", fully_masked_rows=n_rows)


def _nonfinite(
    name: str, got: np.ndarray | None, want: np.ndarray, keep: np.ndarray | None = None
) -> str | None:
    if got is None or np.shape(got) != np.shape(want):
        return None  # shape_dtype and the numeric checks report these
    g = np.asarray(got, dtype=np.float64)
    expected_finite = np.isfinite(want)
    if keep is not None:
        expected_finite &= np.broadcast_to(keep, want.shape)
    bad = expected_finite & ~np.isfinite(g)
    if not bad.any():
        return None
    where = _first(bad)
    return (
        f"{name}: {_fraction(bad, int(expected_finite.sum()))} elements are non-finite where the "
        f"reference is finite; first at {list(where)}: subject {g[where]}, reference {want[where]:.6g}"
    )


def finite(ctx: CheckContext) -> Outcome:
    """No NaN/Inf in out, lse (rows that see keys) or the gradients, where float64 has none."""
    got, ref = ctx.run.forward, ctx.oracle.reference
    valid = ctx.oracle.valid_rows
    problems = [_nonfinite("out", got.out, ref.out, valid[..., None])]
    if ctx.capabilities.lse:
        problems.append(_nonfinite("lse", got.lse, ref.lse, valid))
    if ctx.backward:
        grads, want = ctx.run.gradients, ctx.oracle.reference_grads
        declared = {g.tensor: getattr(ctx.capabilities, g.declared_by) for g in features.gradients()}
        for name in ("dq", "dk", "dv", *declared):
            if getattr(want, name) is not None and declared.get(name, True):
                problems.append(_nonfinite(name, getattr(grads, name), getattr(want, name)))
    found = [p for p in problems if p]
    outcome = failed("\n".join(found)) if found else passed()
    if ctx.case.input_kind == "nan_padding" and np.shape(got.out)[:3] == valid.shape:
        outcome = dataclasses.replace(
            outcome, observed={"masked_nonfinite": behaviour.masked_nonfinite(got.out, ref.fully_masked)}
        )
    return outcome
