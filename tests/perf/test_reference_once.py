"""Meta-test: a conformance run computes the float64 reference (and the baseline) once per
case, not once per check, and builds one adapter per subject for the whole session (its
compiled functions are cached on the instance, so cases of the same shapes reuse them).

The suite runs in this process (``pytest.main``) on a toy subject, with the functions the
suite calls (``conformance.judge.artifacts.attention_forward``, ``conformance.judge.baseline.forward``,
``conformance.plan.subjects.resolve``) wrapped to count calls.
"""

from __future__ import annotations

import collections
import hashlib
from pathlib import Path

import pytest

from conformance.judge import artifacts, baseline
from conformance.plan import subjects
from run_records.results_file import read_results

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.support.toy_subjects:exact"
# Four cases of six or seven checks each (forward, lse, shape_dtype, finite, no_mutation, ...).
SMALL = "float32 and (full-B1-Hq1-Hkv1-Sq128-Sk128-D64 or causal_tl-lenkv128.0)"


def _key(inputs, spec, *_) -> tuple:
    """One case's reference inputs: shapes, spec and the bytes of q, k, v."""
    digest = hashlib.sha1(b"".join(a.tobytes() for a in (inputs.q, inputs.k, inputs.v))).hexdigest()
    return inputs.q.shape, inputs.k.shape, repr(spec), digest


def _count_calls(monkeypatch, module, name: str, key) -> collections.Counter:
    calls: collections.Counter = collections.Counter()
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls[key(*args)] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_the_reference_is_computed_once_per_case(tmp_path, monkeypatch):
    calls = _count_calls(monkeypatch, artifacts, "attention_forward", _key)
    baselines = _count_calls(monkeypatch, baseline, "forward", _key)
    adapters = _count_calls(monkeypatch, subjects, "resolve", lambda name, *_: name)
    code = pytest.main(
        [
            str(ROOT / "conformance"),
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            "--impl",
            TOY,
            "--report-dir",
            str(tmp_path),
            "-k",
            SMALL,
        ]
    )
    assert code == 0
    ran = [r for r in read_results(tmp_path).results if r.verdict == "pass"]
    cases = {r.case.case_id for r in ran}
    assert len(ran) >= 3 * len(cases) > 0  # several checks per case, so "once per check" would show
    assert max(calls.values()) == 1, f"reference computed more than once for a case: {calls.most_common(3)}"
    assert len(calls) == len(cases)
    assert max(baselines.values()) == 1 and len(baselines) == len(cases)
    assert adapters == {TOY: 1}  # one adapter instance serves every case of the session


def test_shrinking_a_failure_does_not_evict_the_case_it_shrinks(tmp_path, monkeypatch):
    """forward and lse fail and are shrunk (dozens of smaller cases); the case's later checks
    must still find its reference, not compute it again."""
    calls = _count_calls(monkeypatch, artifacts, "attention_forward", _key)
    # A store of 2 entries: the toy's shrinks try ~5 cases, as a real one tries dozens.
    defaults = artifacts.ArtifactStore.__init__.__defaults__
    monkeypatch.setattr(artifacts.ArtifactStore.__init__, "__defaults__", (2, *defaults[1:]))
    wrong = TOY.replace(":exact", ":scaled_wrong")
    code = pytest.main(
        [
            str(ROOT / "conformance"),
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            "--impl",
            wrong,
            "--report-dir",
            str(tmp_path),
            "-k",
            "float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64 and not (large or integers or Dv)",
        ]
    )
    assert code == 1
    results = read_results(tmp_path).results
    assert {r.check for r in results if r.verdict == "fail"} >= {"forward", "lse"}
    assert any("Shrunk to a smaller failing case" in r.reason for r in results)
    assert len({r.case.case_id for r in results}) == 1
    first = next(iter(calls))  # the case itself: its first check runs before any shrinking
    assert calls[first] == 1 and len(calls) > 2, calls  # once, though shrinking tried more than 2 cases
