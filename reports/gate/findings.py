"""What the gate finds: one finding per regression (or fix), the rules that find them, the
verdict and its exit codes."""

from __future__ import annotations

import dataclasses

from reports.gate.thresholds import Thresholds
from run_records.results_file import CaseResult
from run_records.run_folder import Run

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: str  # one of RULES, or "fixed"
    subject: str
    what: str  # the check and case, the feature, or the benchmark
    base: str
    candidate: str
    detail: str = ""
    # The failing check behind a "newly failing" or "fixed" finding (the candidate's, the base's):
    # how render_gate groups such findings by cause (reports.run_report.grouping). Not part of equality.
    result: CaseResult | None = dataclasses.field(default=None, compare=False, repr=False)


RULES = {
    "incomplete": "Incomplete input",
    "newly failing": "Newly failing",
    "ratio drift": "Error-ratio drift (systematic)",
    "ratio jump": "Error ratio close to tolerance",
    "behaviour change": "Behaviour changes (where the semantics are open)",
    "lost subject": "Lost subjects (API break)",
    "lost capability": "Lost capabilities (API break)",
    "slower": "Slower",
    "more memory": "More memory",
}


# Rules whose findings are failing checks: listed and counted by cause, one row per finding
# (the same case template across checks and dtypes, as in report.md); each check still counts
# for the verdict.
GROUPED_RULES = ("newly failing", "fixed")


@dataclasses.dataclass(frozen=True)
class GateResult:
    base: Run
    candidate: Run
    thresholds: Thresholds
    regressions: tuple[Finding, ...]
    fixed: tuple[Finding, ...]
    notes: tuple[str, ...]
    compared: int  # checks present in both runs
    flaky: tuple[Finding, ...] = ()  # crashed once in the candidate, then ran normally: never a regression

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_REGRESSION
