"""Cases and their errors in words, for people reading a review."""

from __future__ import annotations

import math

from reports.run_report.markdown import number, plural
from run_records.results_file import CaseDescription, CaseResult, TensorMetrics


def describe_case(case: CaseDescription) -> str:
    """E.g. 'bfloat16, batch 2, 8 query heads on 2 KV heads (GQA 4), q 129 x kv 128, head dim 64,
    causal (bottom-right), segment ids, scaled-normal inputs, seed 7': the shape in words, then
    the features' words as the record keeps them (``kernels/contract/features.py``)."""
    parts = [case.dtype, f"batch {case.batch}"]
    if case.q_heads == case.kv_heads:
        parts.append(plural(case.q_heads, "head"))
    elif case.kv_heads == 1:
        parts.append(f"{case.q_heads} query heads on 1 KV head (MQA)")
    else:
        parts.append(
            f"{case.q_heads} query heads on {case.kv_heads} KV heads "
            f"(GQA {case.q_heads // max(case.kv_heads, 1)})"
        )
    parts.append(f"q {case.q_len} × kv {case.kv_len}")
    parts.append(
        f"head dim {case.head_dim}"
        + (f", value dim {case.v_head_dim}" if case.v_head_dim != case.head_dim else "")
    )
    if case.words:
        parts.append(case.words)
    parts.append(f"{case.get('input_kind', 'normal').replace('_', ' ')} inputs")
    parts.append(f"seed {case.seed}")
    config = case.get("config", ())
    if config:
        parts.append("config " + " ".join(f"{name}={value}" for name, value in config))
    return ", ".join(parts)


def excess(metric: TensorMetrics) -> float:
    """How far a tensor's max-abs error is over its tolerance (error / tolerance; above 1 fails);
    inf for a non-finite error, or any error against a zero tolerance."""
    if metric.tolerance > 0 and math.isfinite(metric.max_abs):
        return metric.max_abs / metric.tolerance
    return math.inf if not math.isfinite(metric.max_abs) or metric.max_abs > 0 else 0.0


def worst_metric(result: CaseResult) -> TensorMetrics | None:
    """The tensor that failed worst (largest error over tolerance), else the largest ratio."""
    if not result.metrics:
        return None
    failing = [m for m in result.metrics if not m.passed]
    return max(failing or result.metrics, key=excess)


def worst_ratio(result: CaseResult) -> float | None:
    """The case's headline number: its largest finite error ratio over all tensors."""
    ratios = [m.ratio for m in result.metrics if math.isfinite(m.ratio)]
    return max(ratios) if ratios else None


def describe_worst_element(metric: TensorMetrics) -> str:
    index = ", ".join(str(i) for i in metric.worst_index)
    diff = metric.worst_subject - metric.worst_reference
    return (
        f"{metric.tensor}[{index}]: subject {metric.worst_subject:.7g}, "
        f"reference {metric.worst_reference:.7g} "
        f"(error {number(abs(diff))})"
    )


def describe_tolerance(metric: TensorMetrics) -> str:
    """'max-abs error 2.1e-03 is 3.6x the tolerance 5.9e-04 (= 2 x baseline 2.9e-04 + floor 1.2e-05);
    error ratio to the baseline 7.2 (allowed about 2)'."""
    over = metric.max_abs / metric.tolerance if metric.tolerance > 0 else math.inf
    return (
        f"max-abs error {number(metric.max_abs)} is {number(over)}× the tolerance {number(metric.tolerance)} "
        f"(= {metric.k:g} × baseline {number(metric.baseline_max_abs)} + floor {number(metric.floor)}); "
        f"error ratio to the baseline {number(metric.ratio)} (allowed about {metric.k:g}), "
        f"mean-abs ratio {number(metric.mean_ratio)}, "
        f"{metric.fraction_out_of_tolerance:.2%} of elements out of tolerance"
    )
