"""The gate's error-ratio rules on noisy records: healthy upgrades pass, precision loss fails.

Per-case ratios of real runs move by up to x5 between JAX releases where the baseline's own
error is a few ulp (docs/reports.md, the calibration); these tests build such noise and
check that only a systematic shift of a group, or a single case brought close to its
tolerance, fails the gate.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from reports.gate.calibrate import calibrate, legacy_drifted, scale_subject, write_like
from reports.gate.comparison import gate
from reports.gate.drift_statistics import median_lower_bound
from reports.gate.rules import ratio_pairs
from reports.gate.thresholds import Thresholds
from run_records.results_file import CaseResult
from run_records.run_folder import load_run
from tests.support.report_folders import case, metric, write_run

K = {"out": 3.0, "lse": 3.0, "dq": 5.0, "dk": 5.0, "dv": 5.0, "dbias": 5.0}
CHECK = {"out": "forward", "lse": "lse", "dq": "backward", "dk": "backward", "dv": "backward"}
CASES = 16  # per subject x dtype x check, as in a ci run's bigger groups

# (subject, dtype, tensor, case number) -> (max-abs ratio, mean-abs ratio)
Ratios = dict[tuple[str, str, str, int], tuple[float, float]]


def layout(median: float = 1.0) -> Ratios:
    """Two subjects, two dtypes, out/lse/dq/dk/dv, CASES cases each, every ratio at ``median``."""
    return {
        (subject, dtype, tensor, n): (median, median)
        for subject in ("flash", "xla")
        for dtype in ("float32", "bfloat16")
        for tensor in CHECK
        for n in range(CASES)
    }


def noisy(ratios: Ratios, seed: int, spread: float = 2.0) -> Ratios:
    """Each ratio times its own log-uniform factor in [1/spread, spread]: ulp-level noise."""
    rng = random.Random(seed)
    return {
        key: tuple(r * math.exp(rng.uniform(-math.log(spread), math.log(spread))) for r in pair)
        for key, pair in ratios.items()
    }


def scaled(ratios: Ratios, factor: float, match: Callable[[tuple[str, str, str, int]], bool]) -> Ratios:
    return {key: tuple(r * factor for r in pair) if match(key) else pair for key, pair in ratios.items()}


def records(ratios: Ratios) -> list[CaseResult]:
    """One passing record per (subject, dtype, check, case) holding its tensors' ratios."""
    by_check: dict[tuple[str, str, str, int], list] = {}
    for (subject, dtype, tensor, n), (ratio, mean_ratio) in sorted(ratios.items()):
        m = metric(tensor, ratio, k=K[tensor], mean_ratio=mean_ratio)
        m = dataclasses.replace(m, mean_abs=m.baseline_mean_abs * mean_ratio, k_mean=K[tensor])
        by_check.setdefault((subject, dtype, CHECK[tensor], n), []).append(m)
    return [
        CaseResult(
            case=case(subject, dtype=dtype, length=128 + n, case_id=f"{dtype}-L{128 + n}"),
            check=check,
            verdict="pass",
            metrics=tuple(metrics),
            features=(check, dtype),
        )
        for (subject, dtype, check, n), metrics in by_check.items()
    ]


def run_gate(tmp_path: Path, base: Ratios, cand: Ratios, thresholds: Thresholds | None = None):
    base_dir = write_run(tmp_path / "jax-0.9.2", records(base), jax="0.9.2")
    cand_dir = write_run(tmp_path / "jax-0.10.2", records(cand))
    return gate(base_dir, cand_dir, thresholds)


@pytest.mark.parametrize("seed", range(5))
def test_noisy_healthy_pair_passes(tmp_path, seed):
    # Every ratio of both runs scattered x0.5 to x2 around 1: per-case changes up to x4 either
    # way, as where the baseline's error is a few ulp. No group moved; no case nears k.
    base = noisy(layout(), seed)
    cand = noisy(layout(), seed + 100)
    changes = [c[0] / b[0] for b, c in zip(base.values(), cand.values(), strict=True)]
    assert max(changes) > 3 and min(changes) < 1 / 3  # the noise is real
    result = run_gate(tmp_path, base, cand)
    assert result.passed, result.regressions


def test_systematic_x4_in_one_group_fails(tmp_path):
    base = noisy(layout(0.5), 1)
    # flash float32 dq: every case x4 (still inside k = 5: at most 0.5 * 2 * 4 = 4), on top of
    # the same noise as every other group.
    cand = scaled(noisy(layout(0.5), 2), 4.0, lambda key: key[:3] == ("flash", "float32", "dq"))
    result = run_gate(tmp_path, base, cand)
    drifts = [f for f in result.regressions if f.rule == "ratio drift"]
    assert [(f.subject, f.what) for f in drifts] == [
        ("flash", f"float32 · dq mean ratio · {CASES} cases"),
        ("flash", f"float32 · dq ratio · {CASES} cases"),
    ]
    assert all(f.detail.startswith("typical case ×") for f in drifts)
    assert {f.subject for f in result.regressions} == {"flash"}


def test_systematic_x2_without_noise_fails_and_x1_4_passes(tmp_path):
    dq = lambda key: key[:3] == ("xla", "bfloat16", "dq")  # noqa: E731
    assert not run_gate(tmp_path / "a", layout(0.4), scaled(layout(0.4), 2.0, dq)).passed
    assert run_gate(tmp_path / "b", layout(0.4), scaled(layout(0.4), 1.4, dq)).passed


def test_single_case_from_0_2k_to_0_8k_fails(tmp_path):
    base, cand = layout(), layout()
    base[("flash", "float32", "dq", 3)] = (0.2 * K["dq"], 1.0)
    cand[("flash", "float32", "dq", 3)] = (0.8 * K["dq"], 1.0)
    result = run_gate(tmp_path, noisy(base, 5, 1.05), noisy(cand, 6, 1.05))
    assert [(f.rule, f.what) for f in result.regressions] == [
        ("ratio jump", "backward · float32-L131 · dq ratio")
    ]
    assert re.fullmatch(
        r"(19|20|21)% → (76|77|78|79|80|81|82|83|84)% of its tolerance \(k 5 \+ floor\)",
        result.regressions[0].detail,
    )


def test_a_ratio_against_a_near_exact_baseline_is_judged_by_its_share_of_the_tolerance(tmp_path):
    # Seen at JAX 0.4.38 -> 0.5.3 on pallas_gpu (float32, one query, 128 keys): dq's baseline
    # error is 1.5e-16, the subject's went from 1.5e-16 to 1.5e-7. The ratio moved 1 -> 1e9,
    # while the error uses 44% of its tolerance (k x baseline + a floor of 3.6e-7): no jump.
    def one_case(subject_error: float) -> list[CaseResult]:
        m = dataclasses.replace(
            metric("dq", 1.0, k=5.0, baseline=1.5e-16),
            max_abs=subject_error,
            ratio=subject_error / 1.5e-16,
            floor=3.55e-7,
            tolerance=3.55e-7,
        )
        return [
            CaseResult(
                case=case("flash", length=128),
                check="backward",
                verdict="pass",
                metrics=(m,),
                features=("backward", "float32"),
            )
        ]

    result = gate(
        write_run(tmp_path / "jax-0.4.38", one_case(1.5e-16), jax="0.4.38"),
        write_run(tmp_path / "jax-0.5.3", one_case(1.547e-7)),
    )
    assert result.passed, result.regressions
    nearly_failing = gate(
        write_run(tmp_path / "b" / "jax-0.4.38", one_case(1.5e-16), jax="0.4.38"),
        write_run(tmp_path / "b" / "jax-0.5.3", one_case(3.0e-7)),
    )
    assert [f.rule for f in nearly_failing.regressions] == ["ratio jump"]


def test_healthy_single_case_moves_seen_across_jax_releases_pass(tmp_path):
    # Real moves between consecutive releases that the old per-case rule (+50% and above 1)
    # failed, among stable cases: float32 dq and dk of tpu_flash, lse of xla with one query
    # row, dbias of xla.
    moves = {
        ("flash", "float32", "dq", 0): ((0.665, 1.0), (1.15, 1.0)),
        ("flash", "float32", "dk", 0): ((0.813, 1.0), (1.37, 1.0)),
        ("xla", "float32", "lse", 1): ((0.288, 0.288), (1.58, 1.58)),
        ("xla", "float32", "dq", 2): ((0.28, 1.0), (0.828, 1.0)),
    }
    base, cand = layout(), layout()
    for key, (before, after) in moves.items():
        base[key], cand[key] = before, after
    base_dir = write_run(tmp_path / "jax-0.9.2", records(base), jax="0.9.2")
    cand_dir = write_run(tmp_path / "jax-0.10.2", records(cand))
    result = gate(base_dir, cand_dir)
    assert result.passed, result.regressions
    legacy = [p for p in ratio_pairs(load_run(base_dir), load_run(cand_dir)) if legacy_drifted(p)]
    assert len(legacy) == 4  # the old rule failed this pair (lse counts twice: max and mean)


def test_non_finite_ratio_against_an_exact_baseline_is_not_a_jump(tmp_path):
    # A one-key case's dq is exactly zero; so is the baseline's error. The subject's error flips
    # between 0 and an ulp across releases, its ratio between 0 and inf (seen on pallas_gpu).
    base, cand = layout(), layout()
    key = ("flash", "float32", "dq", 0)
    base[key], cand[key] = (0.0, 0.0), (math.inf, math.inf)
    base_results, cand_results = records(base), records(cand)

    def exact(results: Iterable[CaseResult]) -> list[CaseResult]:
        out = []
        for r in results:
            if (r.case.subject, r.case.dtype, r.check, r.case.q_len) == ("flash", "float32", "backward", 128):
                r = dataclasses.replace(
                    r,
                    metrics=tuple(
                        dataclasses.replace(m, baseline_max_abs=0.0, baseline_mean_abs=0.0)
                        if m.tensor == "dq"
                        else m
                        for m in r.metrics
                    ),
                )
            out.append(r)
        return out

    base_dir = write_run(tmp_path / "jax-0.9.2", exact(base_results), jax="0.9.2")
    cand_dir = write_run(tmp_path / "jax-0.10.2", exact(cand_results))
    assert gate(base_dir, cand_dir).passed
    nan = [
        dataclasses.replace(r, metrics=tuple(dataclasses.replace(m, ratio=math.nan) for m in r.metrics))
        if r.case.q_len == 129 and r.check == "forward" and r.case.subject == "xla"
        else r
        for r in cand_results
    ]
    found = gate(base_dir, write_run(tmp_path / "nan" / "jax-0.10.2", nan)).regressions
    assert {(f.rule, f.detail) for f in found} == {("ratio jump", "new non-finite ratio")}


def test_median_lower_bound_is_the_sign_test_order_statistic():
    assert median_lower_bound([1.0] * 4, 0.95) is None  # 0.5**4 > 5%: no bound possible
    assert median_lower_bound([1, 2, 3, 4, 5], 0.95) == 1  # 0.5**5 = 3.1%: the minimum
    assert median_lower_bound(list(range(1, 17)), 0.95) == 5  # P(Bin(16, 1/2) <= 4) = 3.8%
    assert median_lower_bound(list(range(1, 17)), 0.5) == 8  # 50%: the (lower) sample median


def test_scaled_subject_stays_inside_tolerance(tmp_path):
    results = records(layout(1.0))
    out = scale_subject(results, "flash", 4.0)
    for old, new in zip(results, out, strict=True):
        for m_old, m_new in zip(old.metrics, new.metrics, strict=True):
            assert m_new.ratio <= m_new.k and m_new.mean_ratio <= m_new.k_mean
            if old.case.subject == "xla" or m_old.ratio * 4 > m_old.k:
                assert m_new == m_old  # other subjects, and checks x4 would fail, untouched
            else:
                assert m_new.ratio == 4 * m_old.ratio and m_new.max_abs == 4 * m_old.max_abs
    base_dir = write_run(tmp_path / "jax-0.9.2", results, jax="0.9.2")
    folder = write_like(load_run(base_dir), out, tmp_path / "scaled" / "jax-0.9.2")
    result = gate(base_dir, folder)
    assert not result.passed
    # dq/dk/dv (k = 5) moved x4, each case from 0.2 k to 0.8 k: both rules see it.
    assert {f.rule for f in result.regressions} == {"ratio drift", "ratio jump"}
    assert {f.subject for f in result.regressions} == {"flash"}


def test_calibration_script_on_three_noisy_runs(tmp_path):
    root = tmp_path / "runs"
    for n, version in enumerate(("0.8.3", "0.9.2", "0.10.2")):
        write_run(root / f"jax-{version}", records(noisy(layout(0.5), n)), jax=version)
    text, ok = calibrate(root, Thresholds(), tmp_path / "scratch", "flash", (2.0, 4.0))
    assert ok, text
    assert "Drift rules alone: the old rule fails" in text and "the new rules 0" in text
    assert "| 0.8.3 → 0.9.2 | pass | pass |" in text  # the real pair
    assert "| 0.9.2 | FAIL (" in text  # each run against itself ×4
