"""Synthetic report folders, written through the real ResultsWriter, for the report tools' tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from run_records.results_file import (
    CaseDescription,
    CaseResult,
    ResultsWriter,
    TensorMetrics,
    write_json_atomic,
)

REPRO = """import numpy as np
from reference import attention_forward
rng = np.random.default_rng(7)
q = rng.standard_normal((1, 2, 129, 64)).astype(np.float32)
print("```not a fence end```")
"""


def environment(jax: str = "0.10.2", tokamax: str | None = None) -> dict:
    """A summary's environment block; with ``tokamax``, as the suite writes it now (the library and its
    explicit version), without, as a folder written before tokamax was recorded."""
    tokamax_keys = {} if tokamax is None else {"tokamax": tokamax}
    return {
        "python": "3.11.7",
        "platform": "Linux x86_64",
        "processor": "x86_64",
        "libraries": {"jax": jax, "jaxlib": jax, **tokamax_keys, "numpy": "2.4.6"},
        **tokamax_keys,
        "backend": "cpu",
        "device_kind": "cpu",
        "git_revision": "abc123def456",
    }


def case(
    subject: str = "flash",
    *,
    dtype: str = "float32",
    length: int = 128,
    causal: bool = False,
    masks: tuple[str, ...] = (),
    seed: int = 0,
    case_id: str | None = None,
    **extra,
) -> CaseDescription:
    masks_id = "-".join(masks) or "nomask"
    case_id = case_id or f"{dtype}-L{length}-{'causal' if causal else 'full'}-{masks_id}-s{seed}"
    sizes = {"batch": 2, "q_heads": 4, "kv_heads": 4, "q_len": length, "kv_len": length}
    fields = {**sizes, "head_dim": 64, "v_head_dim": 64, "causal": causal, **extra}
    words = ", ".join([*(["causal (top-left)"] if causal else []), *(m.replace("_", " ") for m in masks)])
    return CaseDescription(
        case_id=case_id, subject=subject, dtype=dtype, seed=seed, fields=fields, words=words
    )


def metric(
    tensor: str = "out",
    ratio: float = 1.2,
    *,
    k: float = 2.0,
    baseline: float = 1e-3,
    mean_ratio: float | None = None,
) -> TensorMetrics:
    floor = 1e-6
    max_abs = ratio * baseline
    tolerance = k * baseline + floor
    return TensorMetrics(
        tensor=tensor,
        max_abs=max_abs,
        mean_abs=max_abs / 10,
        baseline_max_abs=baseline,
        baseline_mean_abs=baseline / 10,
        ratio=ratio,
        mean_ratio=ratio if mean_ratio is None else mean_ratio,
        k=k,
        floor=floor,
        tolerance=tolerance,
        worst_index=(1, 0, 127, 5),
        worst_subject=0.5 + max_abs,
        worst_reference=0.5,
        fraction_out_of_tolerance=0.0 if max_abs <= tolerance else 0.0125,
        passed=max_abs <= tolerance,
    )


def result(
    subject: str = "flash",
    check: str = "forward",
    verdict: str = "pass",
    *,
    dtype: str = "float32",
    length: int = 128,
    ratio: float | None = 1.2,
    causal: bool = False,
    masks: tuple[str, ...] = (),
    reason: str = "",
    features: tuple[str, ...] | None = None,
    seed: int = 0,
    case_id: str | None = None,
) -> CaseResult:
    if ratio is not None and verdict in ("pass", "fail"):
        tensors = ("out",) if check == "forward" else ("dq", "dk", "dv")
        metrics = tuple(
            metric(t, ratio if verdict == "fail" or t != "dv" else ratio / 2, k=2.0 if t == "out" else 3.0)
            for t in tensors
        )
    else:
        metrics = ()
    if features is None:
        features = (check, *(("causal",) if causal else ()), *masks, dtype)
    return CaseResult(
        case=case(
            subject, dtype=dtype, length=length, causal=causal, masks=masks, seed=seed, case_id=case_id
        ),
        check=check,
        verdict=verdict,
        reason=reason,
        metrics=metrics,
        timings={"subject_s": 0.01},
        availability={"available": verdict != "unavailable"},
        features=features,
        repro=REPRO if verdict in ("fail", "error") else "",
    )


LENGTHS = (1, 7, 113, 128, 129, 1000)


def standard_results(*, drift: float = 1.0, extra: Iterable[CaseResult] = ()) -> list[CaseResult]:
    """A realistic passing run: two subjects that run, one unsupported combination,
    one unavailable subject."""
    results = []
    for subject in ("flash", "xla"):
        for dtype in ("float32", "bfloat16"):
            for length in LENGTHS:
                base_ratio = (1.0 if dtype == "float32" else 1.3) + length / 4000
                for check in ("forward", "backward"):
                    results.append(
                        result(
                            subject,
                            check,
                            dtype=dtype,
                            length=length,
                            ratio=base_ratio * drift,
                            causal=length % 2 == 1,
                        )
                    )
            results.append(
                result(subject, "forward", dtype=dtype, length=128, masks=("segment_ids",), ratio=1.1 * drift)
            )
    results.append(
        result(
            "flash",
            "forward",
            "unsupported",
            masks=("window",),
            ratio=None,
            reason="local window not supported",
        )
    )
    results.append(
        result(
            "gpu_triton",
            "forward",
            "unavailable",
            ratio=None,
            features=(),
            reason="needs a CUDA GPU; none here",
        )
    )
    by_key = {r.key: r for r in results}
    for r in extra:
        by_key[r.key] = r
    return list(by_key.values())


def write_run(
    folder: Path,
    results: Iterable[CaseResult],
    *,
    jax: str = "0.10.2",
    tokamax: str | None = None,
    complete: bool = True,
    summary: bool = True,
) -> Path:
    writer = ResultsWriter(folder, {"subjects": ["flash", "xla", "gpu_triton"], "profile": "ci", "seed": 0})
    for r in results:
        writer.append(r)
    if complete:
        writer.finish({"wall_s": 12.5})
    else:
        writer.close()
    if summary:
        write_json_atomic(
            Path(folder) / "summary.json",
            {"environment": environment(jax, tokamax), "profile": "ci", "seed": 0},
        )
    return Path(folder)


def with_verdict(r: CaseResult, verdict: str, ratio: float | None = None, reason: str = "") -> CaseResult:
    """The same check with another verdict (and, for fail/pass, metrics at ``ratio``)."""
    fresh = result(
        r.case.subject,
        r.check,
        verdict,
        dtype=r.case.dtype,
        length=r.case.q_len,
        ratio=ratio if ratio is not None else 9.0,
        reason=reason,
        features=r.features,
        case_id=r.case.case_id,
    )
    return dataclasses.replace(fresh, case=r.case)
