"""The probe plugin ``nox -s perf`` loads into each suite run: one file per process with the
seconds and calls of subject, reference and baseline, and the harness as the rest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks import suite_probe
from benchmarks.suite_speed import (
    REFERENCE_TARGET,
    count_ran,
    phase_seconds,
    read_probes,
    reference_calls,
    split_of,
)
from conformance.harness import plugin, recording
from conformance.judge import artifacts, baseline

ROOT = Path(__file__).resolve().parents[2]
TOYS = "tests.support.toy_subjects"
TOY = f"{TOYS}:exact"
SMALL = "float32 and full-B1-Hq1-Hkv1-Sq128-Sk128-D64"


def test_a_run_with_the_probe_writes_its_split_and_restores_the_suite(tmp_path, monkeypatch):
    originals = (
        artifacts.timed_call,
        artifacts.attention_forward,
        baseline.forward,
        recording.Recorder.on_report,
    )
    monkeypatch.setenv(suite_probe.PROBE_DIR_ENV, str(tmp_path / "probe"))
    code = pytest.main(
        [
            str(ROOT / "conformance"),
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            "-p",
            "benchmarks.suite_probe",
            "--impl",
            TOY,
            "--report-dir",
            str(tmp_path / "report"),
            "-k",
            SMALL,
        ]
    )
    assert code == 0
    (probe,) = read_probes(tmp_path / "probe")
    cases, checks, need_reference = count_ran(tmp_path / "report")
    assert probe.tests >= checks > cases > 0
    assert reference_calls([probe]) == need_reference == probe.target_calls[REFERENCE_TARGET]
    assert all(probe.seconds[kind] > 0 for kind in suite_probe.KINDS if kind != "lowering")
    assert probe.seconds["lowering"] == 0  # the toy lowers nothing: no lowering item runs
    split = split_of([probe])
    assert split.total == pytest.approx(probe.lifetime_s) and split.harness > 0
    # The other phases, for the phase table: this one process planned, recorded and rendered.
    assert all(probe.phases[phase] > 0 for phase in ("plan", "records", "report"))
    phases = phase_seconds([probe])
    assert sum(phases.values()) == pytest.approx(probe.lifetime_s) and phases["other"] > 0
    assert (
        artifacts.timed_call,
        artifacts.attention_forward,
        baseline.forward,
        recording.Recorder.on_report,
    ) == originals
    assert plugin.plan.__module__ == "conformance.plan.catalogue"


def test_reference_passes_while_shrinking_a_failure_are_counted_apart(tmp_path, monkeypatch):
    monkeypatch.setenv(suite_probe.PROBE_DIR_ENV, str(tmp_path / "probe"))
    code = pytest.main(
        [
            str(ROOT / "conformance"),
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            "-p",
            "benchmarks.suite_probe",
            "--impl",
            f"{TOYS}:scaled_wrong",
            "--report-dir",
            str(tmp_path / "report"),
            "-k",
            "test_forward and " + SMALL,
        ]
    )
    assert code == 1  # the forward check fails, and the failure is shrunk
    (probe,) = read_probes(tmp_path / "probe")
    assert reference_calls([probe]) == count_ran(tmp_path / "report")[2]  # the run's own cases, once each
    assert reference_calls([probe], shrinking=True) >= 1  # the smaller cases shrinking tried


def test_the_subjects_calls_under_vmap_and_sharding_count_as_subject_not_harness(tmp_path):
    """The vmap and sharded checks trace, compile and run the subject's own call outside
    ``timed_call``: that is work on the subject, and the split counts it so."""
    import contextlib
    import types

    from conformance.judge.checks import sharded, vmap

    probe = suite_probe.Probe(tmp_path)
    probe.install()
    try:
        call = types.SimpleNamespace(fn=lambda x: (x * 2,), context=contextlib.nullcontext)
        outputs, problem = vmap._run_vmapped(call, (np.ones((2, 3), np.float32),))
        assert problem is None and outputs[0].shape == (2, 3)
        assert callable(sharded._run_placed) and sharded._run_placed.__name__ == "wrapper"
    finally:
        probe.patch.undo()
    assert (
        probe.seconds["subject"] > 0 and probe.target_calls["conformance.judge.checks.vmap._run_vmapped"] == 1
    )
    assert vmap._run_vmapped.__name__ == "_run_vmapped"  # restored
