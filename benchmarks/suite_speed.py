"""The conformance suite's own speed: cold and warm runs, where the time goes, and the
reference's GFLOP/s ratio, as one Markdown table (``nox -s perf``).

    python -m benchmarks.suite_speed                       # --impl all, ci profile
    python -m benchmarks.suite_speed --impl xla -- -k float32

It starts the suite twice in subprocesses with one compilation-cache folder: *cold*
(the folder emptied first) and *warm* (the folder the cold run filled). Each run loads
``benchmarks.suite_probe``, which times subject calls, the float64 reference and the
baseline in every process; everything else a process did (start-up, collection, inputs,
judging, records, idle workers) is *harness*; the subject's lowering for its hardware is a
column of its own. Then ``python -m reference.bench`` gives
the reference's GFLOP/s ratio to float64 matmul. The goals of the table's last lines:
the ci run within 5 minutes cold, harness at most 10%, warm at least 2.5x faster than cold (#37).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.suite_probe import KINDS, PROBE_DIR_ENV
from conformance.suite.check_registry import declaration
from run_records.results_file import read_results

ROOT = Path(__file__).resolve().parents[1]
RAN = ("pass", "fail", "error")  # verdicts of checks that ran (not unsupported/unavailable)
REFERENCE_TARGET = "conformance.judge.artifacts.attention_forward"
GOAL_WALL_S = 300.0
GOAL_HARNESS_FRACTION = 0.10
GOAL_WARM_SPEEDUP = 2.5


@dataclasses.dataclass(frozen=True)
class ProcessTimes:
    """One process's probe file: seconds per kind (``KINDS``), tests run, lifetime."""

    seconds: dict[str, float]
    tests: int
    lifetime_s: float
    worker: str = ""
    target_calls: dict[str, int] = dataclasses.field(default_factory=dict)
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per PHASES entry


@dataclasses.dataclass(frozen=True)
class Split:
    """Seconds of subject calls, reference, baseline, lowering and harness over the processes that
    ran tests (with xdist: the workers; their seconds add up to about workers x wall time)."""

    subject: float
    reference: float
    baseline: float
    harness: float
    lowering: float = 0.0
    workers: int = 0  # processes that ran tests

    @property
    def total(self) -> float:
        return self.subject + self.reference + self.baseline + self.lowering + self.harness

    @property
    def floor_s(self) -> float:
        """The wall of this run with no harness and the workers evenly loaded: the subject's, the
        reference's, the baseline's and the lowering's seconds over the workers. No change to the
        suite's own code gets a run below it; only fewer or cheaper subject programs do."""
        work = self.subject + self.reference + self.baseline + self.lowering
        return work / self.workers if self.workers else 0.0

    def fraction(self, kind: str) -> float:
        return getattr(self, kind) / self.total if self.total > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class RunMeasurement:
    """One suite run: wall time from the parent, checks and cases that ran, the split.

    reference_calls: float64 forward passes computed for the run's cases; reference_cases:
    cases whose checks need one (every ran case but those only the ``raises`` check runs);
    shrink_reference_calls: passes for the smaller cases tried while shrinking failures."""

    label: str
    wall_s: float
    cases: int
    checks: int
    split: Split
    returncode: int = 0
    reference_calls: int = 0
    reference_cases: int = 0
    cpu_s: float = 0.0  # CPU seconds of all its processes: on a shared machine, what it would cost alone
    shrink_reference_calls: int = 0
    # Seconds per phase over all its processes, the controller's included (``phase_seconds``).
    phases: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def cases_per_s(self) -> float:
        return self.cases / self.wall_s if self.wall_s > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class ReferenceSpeed:
    """``reference.bench``'s last line: the float64 reference's GFLOP/s over matmul's."""

    reference_gflops: float
    matmul_gflops: float
    ratio: float


@dataclasses.dataclass(frozen=True)
class PerfReport:
    """differing: checks whose verdict differs between the cold and warm run (the cache must
    change speed only); None when not compared."""

    cold: RunMeasurement
    warm: RunMeasurement
    reference: ReferenceSpeed | None
    command: str = ""
    differing: tuple[str, ...] | None = None

    @property
    def speedup(self) -> float:
        return self.cold.wall_s / self.warm.wall_s if self.warm.wall_s > 0 else 0.0


def split_of(processes: Iterable[ProcessTimes]) -> Split:
    """Subject, reference, baseline and lowering seconds summed over the processes that ran tests;
    harness is the rest of their lifetimes (never below zero)."""
    ran = [p for p in processes if p.tests > 0]
    parts = {kind: sum(p.seconds.get(kind, 0.0) for p in ran) for kind in KINDS}
    lifetime = sum(p.lifetime_s for p in ran)
    return Split(**parts, harness=max(0.0, lifetime - sum(parts.values())), workers=len(ran))


# The phase table's rows, in the order a run goes through them.
PHASE_ROWS = ("plan", "subject", "reference", "baseline", "lowering", "records", "report")


def phase_seconds(processes: Iterable[ProcessTimes]) -> dict[str, float]:
    """Seconds per phase (``PHASE_ROWS``) summed over every process, the xdist controller
    included (it plans, records and renders), then ``other``: the rest of the lifetimes."""
    processes = tuple(processes)
    seconds = {row: sum({**p.seconds, **p.phases}.get(row, 0.0) for p in processes) for row in PHASE_ROWS}
    lifetime = sum(p.lifetime_s for p in processes)
    return {**seconds, "other": max(0.0, lifetime - sum(seconds.values()))}


def read_probes(folder: Path) -> tuple[ProcessTimes, ...]:
    return tuple(
        ProcessTimes(
            seconds=data["seconds"],
            tests=int(data["tests"]),
            lifetime_s=float(data["lifetime_s"]),
            worker=data.get("worker", ""),
            target_calls=data.get("target_calls", {}),
            phases=data.get("phases", {}),
        )
        for data in (json.loads(p.read_text()) for p in sorted(folder.glob("probe-*.json")))
    )


def count_ran(report_dir: Path) -> tuple[int, int, int]:
    """(distinct cases, checks, cases that need the reference) among the records of checks that ran."""
    ran = [r for r in read_results(report_dir).results if r.verdict in RAN]
    # A check sampling ``raising_cases`` only calls the subject, which must raise: no answer to compare.
    need_reference = {r.case.case_id for r in ran if declaration(r.check).sampling != "raising_cases"}
    return len({r.case.case_id for r in ran}), len(ran), len(need_reference)


def reference_calls(processes: Iterable[ProcessTimes], shrinking: bool = False) -> int:
    """Float64 forward passes for the run's own cases (or, ``shrinking``, for the smaller
    cases tried while shrinking failures)."""
    target = REFERENCE_TARGET + ("@shrink" if shrinking else "")
    return sum(p.target_calls.get(target, 0) for p in processes)


def differing_verdicts(cold_dir: Path, warm_dir: Path) -> tuple[str, ...]:
    """``case_id check: cold -> warm`` for each check whose verdict differs (or is missing)."""
    cold = {r.key: r.verdict for r in read_results(cold_dir).results}
    warm = {r.key: r.verdict for r in read_results(warm_dir).results}
    return tuple(
        f"{case} {check}: {cold.get(k, 'missing')} -> {warm.get(k, 'missing')}"
        for k in sorted(cold.keys() | warm.keys())
        if cold.get(k) != warm.get(k)
        for _, case, check in (k,)
    )


def parse_bench(stdout: str) -> ReferenceSpeed:
    """The JSON on ``python -m reference.bench``'s last line."""
    data = json.loads(stdout.strip().splitlines()[-1])
    return ReferenceSpeed(float(data["reference_gflops"]), float(data["matmul_gflops"]), float(data["ratio"]))


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def render(report: PerfReport) -> str:
    """The Markdown table and the goal lines ``nox -s perf`` prints."""
    lines = [
        "| run | wall | CPU | cases | checks | cases/s "
        "| subject | reference | baseline | lowering | harness |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in (report.cold, report.warm):
        s = run.split
        failed = "" if run.returncode in (0, 1) else f" (exit {run.returncode})"
        shares = " | ".join(f"{100 * s.fraction(k):.1f}%" for k in (*KINDS, "harness"))
        lines.append(
            f"| {run.label}{failed} | {_minutes(run.wall_s)} | {run.cpu_s:.0f} s | {run.cases} | "
            f"{run.checks} | {run.cases_per_s:.2f} | {shares} |"
        )
    lines += ["", *phase_table(report.cold, report.warm), ""]
    lines.append(
        "Split: shares of the seconds of the processes that ran tests (xdist workers add up); "
        "harness = everything outside subject calls, the float64 reference, the baseline and the "
        "subject's lowering for its hardware. "
        "CPU: user + system seconds of all the run's processes (wall >> CPU: a busy machine)."
    )
    for run in (report.cold, report.warm):
        if run.split.floor_s > 0:
            lines.append(
                f"Floor ({run.label}): {run.split.floor_s:.0f} s, the subject's, reference's, "
                f"baseline's and lowering's seconds over {run.split.workers} workers (the wall with "
                f"no harness); wall / floor {run.wall_s / run.split.floor_s:.2f}x."
            )
    for run in (report.cold, report.warm):
        if run.reference_cases:
            lines.append(
                f"Float64 reference ({run.label}): {run.reference_calls} forward passes for "
                f"{run.reference_cases} cases that need one, and {run.shrink_reference_calls} "
                "for smaller cases tried while shrinking failures."
            )
    if report.differing is not None:
        shown = "; ".join(report.differing[:3]) + (" ..." if len(report.differing) > 3 else "")
        lines.append(
            "Verdicts: the same in both runs."
            if not report.differing
            else f"Verdicts: {len(report.differing)} differ between the runs: {shown}"
        )
    if report.reference is not None:
        ref = report.reference
        lines.append(
            f"Reference: {ref.reference_gflops:.2f} GFLOP/s, {ref.ratio:.3f} x float64 matmul "
            f"({ref.matmul_gflops:.2f} GFLOP/s) [python -m reference.bench --quick]."
        )
    lines += ["", "| goal | measured | |", "|---|---:|---|"]
    met = report.cold.wall_s <= GOAL_WALL_S
    floor = report.cold.split.floor_s
    beyond = f" (its floor is {floor:.0f} s)" if not met and floor > GOAL_WALL_S else ""
    lines.append(
        f"| ci run <= {GOAL_WALL_S / 60:.0f} min (cold) | {_minutes(report.cold.wall_s)} | "
        f"{_verdict(met)}{beyond} |"
    )
    for run in (report.cold, report.warm):
        harness = run.split.fraction("harness")
        lines.append(
            f"| harness <= {100 * GOAL_HARNESS_FRACTION:.0f}% ({run.label}) | "
            f"{100 * harness:.1f}% | {_verdict(harness <= GOAL_HARNESS_FRACTION)} |"
        )
    lines.append(
        f"| warm >= {GOAL_WARM_SPEEDUP:g}x faster than cold | {report.speedup:.2f}x | "
        f"{_verdict(report.speedup >= GOAL_WARM_SPEEDUP)} |"
    )
    if report.command:
        lines += ["", f"Command: `{report.command}`"]
    return "\n".join(lines)


def phase_table(cold: RunMeasurement, warm: RunMeasurement) -> list[str]:
    """Seconds per phase, cold and warm, over all the run's processes: a regression names its
    phase. ``other``: process start-up, collection, inputs, judging, idle workers."""
    lines = ["| phase | cold | warm | warm / cold |", "|---|---:|---:|---:|"]
    for row in (*PHASE_ROWS, "other"):
        before, after = cold.phases.get(row, 0.0), warm.phases.get(row, 0.0)
        ratio = f"{after / before:.2f}" if before > 0 else "-"
        lines.append(f"| {row} | {before:.1f} s | {after:.1f} s | {ratio} |")
    return lines


def suite_command(
    impl: str, report_dir: Path, cache_dir: Path, workers: int | None, extra: Sequence[str] = ()
) -> list[str]:
    """The run ``nox -s conformance`` does (``python -m conformance``: the suite's own defaults,
    process isolation included), plus the probe plugin. ``workers``: xdist's ``-n``, if given."""
    command = [
        sys.executable,
        "-m",
        "conformance",
        "-p",
        "benchmarks.suite_probe",
        "--impl",
        impl,
        "--profile",
        "ci",
        "--report-dir",
        str(report_dir),
        "--jax-cache-dir",
        str(cache_dir),
        "-q",
    ]
    if workers is not None:
        command += ["-n", str(workers)]
    return [*command, *extra]


def measure_run(label: str, folder: Path, command: list[str]) -> RunMeasurement:
    """Run one suite subprocess; its probe files go to ``folder/probe``."""
    probe_dir = folder / "probe"
    shutil.rmtree(probe_dir, ignore_errors=True)
    env = {**os.environ, PROBE_DIR_ENV: str(probe_dir)}
    log = folder / f"{label.split()[0]}.log"
    cpu_before = _children_cpu_s()
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    cpu = _children_cpu_s() - cpu_before
    report_dir = Path(command[command.index("--report-dir") + 1])
    cases, checks, reference_cases = count_ran(report_dir)
    probes = read_probes(probe_dir)
    return RunMeasurement(
        label,
        wall,
        cases,
        checks,
        split_of(probes),
        done.returncode,
        reference_calls(probes),
        reference_cases,
        cpu,
        reference_calls(probes, True),
        phase_seconds(probes),
    )


def _children_cpu_s() -> float:
    """CPU seconds of every waited-for descendant (xdist workers roll up into their controller)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_reference(quick: bool = True) -> ReferenceSpeed | None:
    command = [sys.executable, "-m", "reference.bench", *(["--quick"] if quick else [])]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"reference.bench failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return parse_bench(done.stdout)


def main(argv: list[str] | None = None) -> PerfReport:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="all", help="subjects, as for the suite. Default: %(default)s")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="pytest-xdist workers (0: one process). Default: the suite's own",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="folder for the runs, cache, perf.md and perf.json. Default: a new temp folder",
    )
    parser.add_argument("--full-bench", action="store_true", help="reference.bench without --quick")
    parser.add_argument("extra", nargs="*", help="more pytest arguments for both runs (after --)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="suite-speed-"))
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "jax-cache"
    shutil.rmtree(cache, ignore_errors=True)  # cold means an empty compilation cache
    runs = []
    for label in ("cold (empty cache)", "warm (cache filled)"):
        folder = out / label.split()[0]
        shutil.rmtree(folder / "report", ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        command = suite_command(args.impl, folder / "report", cache, args.workers, args.extra)
        runs.append(measure_run(label, folder, command))
        print(f"{label}: {runs[-1].wall_s:.0f} s", file=sys.stderr, flush=True)
    shown = shlex.join(
        ["python", *suite_command(args.impl, Path("DIR"), Path("CACHE"), args.workers, args.extra)[1:]]
    )
    differing = differing_verdicts(out / "cold" / "report", out / "warm" / "report")
    report = PerfReport(runs[0], runs[1], measure_reference(quick=not args.full_bench), shown, differing)
    text = render(report)
    (out / "perf.md").write_text(text + "\n")
    (out / "perf.json").write_text(json.dumps(_as_json(report), indent=1))
    print(text)
    return report


def _as_json(report: PerfReport) -> dict[str, Any]:
    data = dataclasses.asdict(report)
    data["speedup"] = report.speedup
    for name in ("cold", "warm"):
        run = getattr(report, name)
        data[name]["cases_per_s"] = run.cases_per_s
        data[name]["fractions"] = {k: run.split.fraction(k) for k in (*KINDS, "harness")}
    return data


if __name__ == "__main__":
    main()
