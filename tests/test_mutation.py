"""Proof that the suite catches bugs: every mutant in ``tests/mutants`` must be rejected by
the check meant to catch it, and the correct controls must pass.

The suite runs once, in a subprocess (as a user runs it: ``python -m conformance``), over
every mutant and control together, at the ``ci`` profile. To fit the CI budget it keeps,
for the per-case checks, a fixed smoke selection of the curated edge matrix (``SMOKE``:
one case per concern, the same for every subject, chosen by concern and not by mutant);
the sampled checks (determinism, batch_invariance, vmap, sharded, recompile, leak, races) keep the cases
the suite picks for them. A mutant runs only the checks meant to reject it (nothing is asserted about the
others); a control runs every check, since it must pass them all. Each check's verdicts
come from ``results.jsonl``. ``tests/conftest.py`` turns the recorded outcomes into the
``mutation score: X/Y`` line.

The run carries a decoy known-issue ledger (``decoy_ledger``): for every mutant, one entry
covering every check except those meant to catch it, one covering those checks but
outside the installed JAX's range, and, per numeric check among them, one in range whose
signature names a tensor that check never judges. No ledger entry may mask a failure it does not cover, so
every mutant must still *fail* its checks (a ``known`` verdict would not count) and the run
must exit 1.

A subject that cannot run on this machine (the race mutant and its control need a race
detector: TPU interpret mode, JAX >= 0.7) is skipped with its reason, not counted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.plan.subjects import resolve_subjects
from conformance.suite.check_registry import CHECKS, REGISTRY
from run_records.results_file import CaseResult, read_results
from tests.conftest import MUTANT_PROPERTY
from tests.mutants.catalogue import CONTROLS, MUTANTS, Control, Mutant, by_name
from tests.support.suite import run_suite

# A guard against a hung run, not a budget: about 400 s on an idle 2-core machine, twice that when
# it is shared; the budget is nox -s tests' own wall time.
RUN_TIMEOUT_S = 1800

# Semantic-id fragments of level-0 edge cases (any dtype): one per concern of the edge matrix.
SMOKE: tuple[str, ...] = (
    "causal_tl-B2-Hq2-Hkv2-Sq128-Sk256-D64",  # Sq != Sk, B > 1, several key blocks
    "causal_tl-B1-Hq1-Hkv1-Sq129-Sk129-D64",  # one key past a 128-key block
    "causal_tl-B1-Hq4-Hkv2-Sq128-Sk128-D64",  # GQA
    "causal_tl-B1-Hq1-Hkv1-Sq128-Sk128-D128",  # the head dim of production models: the largest tiles
    "full-B1-Hq1-Hkv1-Sq128-Sk128-D64-integers",  # exact products: the smallest baseline error
    "seg3-B2",  # segment ids
    "win1.1_tl",  # window edges
    "causal_tl-cap30",  # softcap far from the logits' scale
    "bias_bhqk",  # bias
    "fill_first",  # -inf in the bias over a whole first key block (its row sees later keys)
    "lenq256.100.0",  # padding and fully masked rows (normal and NaN-padded)
    "nan_padding",  # NaN written into padding
    "cfg",  # edge configs of a subject's tunables (block sizes other than the defaults)
    "sink",  # attention sinks: extreme values, causal, GQA, rows that see no key
    "lenkv37.48.128.1",  # decode: rows ending inside a page, on its edge, on a compute block's, at 1
    "lenq1.40.7",  # mixed prefill/decode pack, each row's diagonal at its valid lengths
    "-B3-Hq2-Hkv1-",  # ragged length patterns (empty, one-token, page-edge rows) at every row
    "chunk1-B1-Hq1-Hkv1-Sq128",  # chunked causal, chunks of one key: every chunk edge is a diagonal
    "_per_channel-B1-Hq4-Hkv2-Sq128-Sk128-D64",  # K/V stored with a scale per (head, channel), GQA
    "_per_head-B1-Hq4-Hkv2-Sq128-Sk128-D64",  # K/V stored with a scale per head, GQA
    "lead2x3",  # leading batch dims [2, 3], with per-request q and kv lengths shaped [2, 3]
)


def _split(checks: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``checks`` as ``test_`` names: (per-case checks, sampled checks). Per-case checks run on
    the smoke cases, sampled checks on every case (their sample is already a few cases, chosen
    by what the check needs, not by concern)."""
    sampled = {
        d.name
        for d in REGISTRY
        if d.sampling
        in (
            "runtime_sample",
            "batched_sample",
            "one_batched_case",
            "vmap_cases",
            "one_backward_case",
            "one_case",
            "race_sample",
        )
    }
    return [f"test_{c}" for c in checks if c not in sampled], [f"test_{c}" for c in checks if c in sampled]


def selection(names: dict[str, str]) -> str:
    """The ``-k`` expression: each mutant's own checks, every check of each control.

    ``names``: ``--impl`` path -> subject name. A test id opens with ``[<subject name>-``, which
    no other subject's id contains (names differ, and the next character is always ``-``).

    Written as (smoke case and (subject and per-case check) or ...) or (sampled check and
    (subject and sampled check) or ...): pytest tests every one of ~45,000 collected items
    against it, and most are rejected on the smoke fragments or the sampled checks' names
    alone instead of on each subject's term in turn (a minute of the run's collection)."""
    per_case, sampled = [], []
    for mutant in MUTANTS:
        own_per_case, own_sampled = _split(mutant.checks)
        subject = f"[{names[mutant.path]}-"
        if own_per_case:
            per_case.append(f"({subject} and ({' or '.join(own_per_case)}))")
        if own_sampled:
            sampled.append(f"({subject} and ({' or '.join(own_sampled)}))")
    controls = " or ".join(f"[{names[c.path]}-" for c in CONTROLS)
    every_per_case, every_sampled = _split(CHECKS)
    # a control's per-case checks on its own smoke fragments where it names some (Control.smoke)
    everywhere = " or ".join(f"[{names[c.path]}-" for c in CONTROLS if not c.smoke)
    if everywhere:
        per_case.append(f"(({everywhere}) and ({' or '.join(every_per_case)}))")
    for control in (c for c in CONTROLS if c.smoke):
        subject = f"[{names[control.path]}-"
        per_case.append(f"(({' or '.join(control.smoke)}) and {subject} and ({' or '.join(every_per_case)}))")
    sampled.append(f"(({controls}) and ({' or '.join(every_sampled)}))")
    return (
        f"(({' or '.join(SMOKE)}) and ({' or '.join(per_case)}))"
        f" or (({' or '.join(every_sampled)}) and ({' or '.join(sampled)}))"
    )


def subject_names() -> dict[str, str]:
    """``--impl`` path -> subject name, for every mutant and control."""
    paths = (*(m.path for m in MUTANTS), *(c.path for c in CONTROLS))
    return {s.impl: s.name for s in resolve_subjects(",".join(paths))}


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """One suite run's records, by ``--impl`` path, and its output."""

    records: dict[str, tuple[CaseResult, ...]]
    seconds: float
    output: str
    returncode: int = 1
    ledger: tuple[dict, ...] = ()  # summary.json's known_issues

    def of(self, path: str) -> tuple[CaseResult, ...]:
        if path not in self.records:
            raise AssertionError(f"no records for {path}; suite output:\n{self.output[-3000:]}")
        return self.records[path]

    def verdicts(self, path: str) -> dict[str, frozenset[str]]:
        """check -> the verdicts it gave ``path`` over the selected cases."""
        by_check: dict[str, set[str]] = defaultdict(set)
        for record in self.of(path):
            by_check[record.check].add(record.verdict)
        return {check: frozenset(v) for check, v in by_check.items()}

    def unavailable(self, path: str) -> str | None:
        """Why ``path`` could not run here (every record ``unavailable``), or None when it ran."""
        records = self.of(path)
        if all(r.verdict == "unavailable" for r in records):
            return records[0].reason
        return None


# A tensor each numeric check never judges: a decoy whose signature names it selects the
# mutant's failures of that check, in range, and must explain none of them.
_UNJUDGED_TENSOR = {"forward": "dq", "lse": "dq", "backward": "out"}


def decoy_ledger(path: Path) -> Path:
    """Entries that name every mutant but never the failure its checks must find (see the module doc):
    its other checks; its checks outside the installed JAX's range; its numeric checks, in range,
    with a signature (``tensors``) its failure does not have."""
    names = subject_names()
    entries = []
    for mutant in MUTANTS:
        others = [c for c in CHECKS if c not in mutant.checks]
        signatures = [
            (f"signature-{check}", [check], f'reason = "OUT OF TOLERANCE"\ntensors = ["{tensor}"]\n')
            for check, tensor in _UNJUDGED_TENSOR.items()
            if check in mutant.checks
        ]
        for suffix, checks, extra in (
            ("other-checks", others or ["leak"], ""),
            ("out-of-range", list(mutant.checks), 'jax = "<0.0.1"\n'),
            *signatures,
        ):
            entries.append(
                f'[[issue]]\nid = "decoy-{mutant.name}-{suffix}"\n'
                f'subject = "{names[mutant.path]}"\nchecks = {json.dumps(checks)}\n{extra}'
                'link = "decoy: the mutation meta-test"\nsummary = "must not mask the mutant"\n'
            )
    path.write_text("\n".join(entries))
    return path


def run_mutants(impls: tuple[str, ...], report_dir: Path) -> SuiteRun:
    """``python -m conformance`` over ``impls`` with the smoke selection; verdicts by impl path."""
    report_dir.mkdir(parents=True, exist_ok=True)
    ledger = decoy_ledger(report_dir.parent / "decoy_ledger.toml")
    start = time.perf_counter()
    done = run_suite(
        report_dir,
        ",".join(impls),
        "--profile",
        "ci",
        "-k",
        selection(subject_names()),
        "--known-issues",
        str(ledger),
        timeout=RUN_TIMEOUT_S,
    )
    seconds = time.perf_counter() - start
    output = done.stdout + done.stderr
    if done.returncode not in (0, 1):  # 1: some checks failed, as mutants must
        raise AssertionError(f"suite run exited {done.returncode}:\n{output[-3000:]}")
    results = read_results(report_dir)
    assert results.complete, f"suite run did not finish:\n{output[-3000:]}"
    # The header lists subject names in --impl order: map them back to the paths.
    names = dict(zip(results.header["subjects"], impls, strict=True))
    records: dict[str, list[CaseResult]] = defaultdict(list)
    for record in results.results:
        records[names[record.case.subject]].append(record)
    summary = json.loads((report_dir / "summary.json").read_text())
    return SuiteRun(
        {path: tuple(r) for path, r in records.items()},
        seconds,
        output,
        done.returncode,
        tuple(summary.get("known_issues", ())),
    )


class LazySuite:
    """Runs the suite on first use, inside a test, so a broken run fails (and is counted
    against) each mutant instead of erroring in setup."""

    def __init__(self, report_dir: Path, runner: Callable[[tuple[str, ...], Path], SuiteRun] = run_mutants):
        self.report_dir = report_dir
        self.runner = runner

    @functools.cached_property
    def _outcome(self) -> SuiteRun | AssertionError:
        # A failed run is kept too: every mutant then fails on the one run, instead of each
        # test starting the whole suite again (up to RUN_TIMEOUT_S apiece).
        try:
            return self.runner((*(m.path for m in MUTANTS), *(c.path for c in CONTROLS)), self.report_dir)
        except (AssertionError, subprocess.SubprocessError, OSError) as error:
            return AssertionError(f"the mutation suite run failed once for every mutant: {error}")

    @property
    def run(self) -> SuiteRun:
        outcome = self._outcome
        if isinstance(outcome, AssertionError):
            raise outcome
        return outcome


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> LazySuite:
    return LazySuite(tmp_path_factory.mktemp("mutation"))


def test_the_catalogue_is_complete():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) >= 15
    assert all(set(m.checks) <= set(CHECKS) for m in MUTANTS)


def test_the_selection_runs_a_mutant_on_its_own_checks_and_a_control_on_every_check():
    from _pytest.mark.expression import Expression

    names = subject_names()
    expression = Expression.compile(selection(names))

    def selected(check: str, path: str, case: str) -> bool:
        item = f"test_{check}[{names[path]}-{case}]".lower()
        return expression.evaluate(lambda ident, **_: ident.lower() in item)

    smoke, other = "float32-causal_tl-B2-Hq2-Hkv2-Sq128-Sk256-D64", "float32-full-B4-Hq1-Hkv1-Sq512-Sk512-D32"
    mutant, control = by_name("scale_inverse_d"), CONTROLS[0]
    assert selected("forward", mutant.path, smoke)
    assert not selected("forward", mutant.path, other)
    assert not selected("backward", mutant.path, smoke) and not selected("leak", mutant.path, smoke)
    assert selected("forward", control.path, smoke) and selected("leak", control.path, other)
    # A name that another name extends ("recompiles" and "recompiles_undeclared") selects only itself.
    recompiles = by_name("recompiles")
    assert selected("recompile", recompiles.path, other)
    assert not selected("shape_dtype", recompiles.path, smoke)
    assert all(selected(c, m.path, smoke) or selected(c, m.path, other) for m in MUTANTS for c in m.checks)
    # A control with its own smoke fragments (Control.smoke): its per-case checks there only, its
    # sampled checks anywhere; its fragments are SMOKE's.
    (narrow,) = [c for c in CONTROLS if c.path.endswith("tokamax_splash_wrappers:SplashWrapped")]
    assert narrow.smoke and set(narrow.smoke) <= set(SMOKE)
    sink = "float32-causal_tl-sink-B1-Hq4-Hkv2-Sq128-Sk128-D64"
    assert selected("forward", narrow.path, sink) and selected("backward", narrow.path, sink)
    assert not selected("forward", narrow.path, smoke) and selected("leak", narrow.path, other)
    assert selected("forward", CONTROLS[1].path, smoke)


def test_a_failed_suite_run_fails_every_mutant_without_running_again(tmp_path: Path):
    calls = []

    def timing_out(impls: tuple[str, ...], report_dir: Path) -> SuiteRun:
        calls.append(impls)
        raise subprocess.TimeoutExpired("python -m conformance", RUN_TIMEOUT_S)

    lazy = LazySuite(tmp_path, timing_out)
    for _ in range(3):
        with pytest.raises(AssertionError, match="failed once for every mutant"):
            lazy.run  # noqa: B018 - the property runs the suite
    assert len(calls) == 1


def test_a_subject_with_every_record_unavailable_is_skipped_with_its_reason():
    """What keeps the race mutant and control from failing the meta-test on JAX < 0.7."""
    from tests.support.report_folders import case

    def record(check: str, verdict: str, reason: str = "") -> CaseResult:
        return CaseResult(case("s"), check, verdict, reason)

    run = SuiteRun(
        {
            "gone": (record("forward", "unavailable", "no race detector"), record("races", "unavailable")),
            "ran": (record("forward", "pass"), record("races", "unsupported", "no race detector")),
        },
        0.0,
        "",
    )
    assert run.unavailable("gone") == "no race detector"
    assert run.unavailable("ran") is None


def test_the_race_subjects_say_why_they_cannot_run_without_a_detector(monkeypatch: pytest.MonkeyPatch):
    from tests.mutants import races

    missing = "this JAX's TPU interpret mode has no race detector (InterpretParams.detect_races)"
    monkeypatch.setattr(races, "race_detection_missing", lambda: missing)
    monkeypatch.setattr(races, "race_detection_declared", lambda execution: False)
    for subject in (races.RaceFreeCopy(), races.RacyCopy()):
        availability = subject.availability()
        assert not availability.available and availability.reason.endswith(missing)
        assert not subject.capabilities().race_detection


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_rejected_by_its_check(mutant: Mutant, suite: LazySuite, record_property):
    unavailable = suite.run.unavailable(mutant.path)
    if unavailable:
        pytest.skip(f"{mutant.name} cannot run here: {unavailable}")
    caught, verdicts = False, {}
    try:
        verdicts = suite.run.verdicts(mutant.path)
        caught = all("fail" in verdicts.get(check, ()) for check in mutant.checks)
    finally:
        record_property(MUTANT_PROPERTY, {"mutant": mutant.name, "caught": caught})
    assert caught, (
        f"{mutant.name} ({mutant.bug}) was not rejected by {mutant.checks}; "
        f"verdicts: { {c: sorted(v) for c, v in verdicts.items()} }"
    )


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.path)
def test_correct_subject_passes_every_check(control: Control, suite: LazySuite):
    unavailable = suite.run.unavailable(control.path)
    if unavailable:
        pytest.skip(f"{control.path} cannot run here: {unavailable}")
    verdicts = suite.run.verdicts(control.path)
    # ``known`` only where the control declares a ledger entry of its own (a built-in subject).
    allowed = {
        check: {"pass", "unsupported", *(("known",) if check in control.known else ())} for check in verdicts
    }
    bad = {check: sorted(v - allowed[check]) for check, v in verdicts.items() if v - allowed[check]}
    assert not bad, f"{control.path} is correct but got {bad}:\n{suite.run.output[-3000:]}"
    ran = {check for check, v in verdicts.items() if "pass" in v}
    assert set(control.checks) <= ran, f"{control.path}: {sorted(set(control.checks) - ran)} never ran"


def test_no_ledger_entry_masks_a_failure_it_does_not_cover(suite: LazySuite):
    """The decoy ledger named every mutant; their failures stayed ``fail`` and the run stayed red."""
    run = suite.run
    assert run.returncode == 1, run.output[-3000:]
    decoys = {s["id"]: s for s in run.ledger if s["id"].startswith("decoy-")}
    signed = sum(check in _UNJUDGED_TENSOR for m in MUTANTS for check in m.checks)
    assert len(decoys) == 2 * len(MUTANTS) + signed and signed
    for mutant in MUTANTS:
        if run.unavailable(mutant.path):
            continue  # no verdict to mask: every record is ``unavailable``
        records = [r for r in run.of(mutant.path) if r.check in mutant.checks]
        assert not [r for r in records if r.verdict == "known"], mutant.name
        out_of_range = decoys[f"decoy-{mutant.name}-out-of-range"]
        assert out_of_range["status"] == "out of range" and out_of_range["failing_outside_range"] > 0
        for check in set(mutant.checks) & set(_UNJUDGED_TENSOR):  # in range, in its selector
            assert decoys[f"decoy-{mutant.name}-signature-{check}"]["matched"] == [], (mutant.name, check)


def test_precision_loss_is_caught_by_the_baseline_ratio(suite: LazySuite):
    """bf16 accumulation is not garbage: its error is finite and of the order of plain bf16
    attention's own rounding error. It is rejected because it is more than k times that error,
    the baseline-relative rule, where a fixed bf16 tolerance loose enough for the plain
    implementation on every input kind could not tell the two apart."""
    failed = [
        r
        for r in suite.run.of(by_name("bf16_accumulator").path)
        if r.check == "forward" and r.verdict == "fail"
    ]
    assert failed
    for record in failed:
        (out,) = record.metrics
        assert math.isfinite(out.max_abs) and out.k < out.ratio < 20, out
