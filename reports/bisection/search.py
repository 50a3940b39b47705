"""Bisection across releases of one library (JAX, or tokamax at a fixed JAX): the first release
at which one check of one case starts (or stops) failing.

Pure: what it means to install a version and to run the case there are callables passed
in (``reports.bisection.installs`` holds the real ones: nox's environments and the suite's own
run), so the search is tested with fakes.

Terms, as ``git bisect`` uses them: **good** is a release where the check passes, **bad** one
where it fails (verdict ``fail``, ``known`` or ``error``: a ledger-matched failure is still a
failure). Either may be the older one:

* good older than bad: a regression; the answer is the *first bad release* (and the last good);
* good newer than bad: a fix; the answer is the *first fixed release* (and the last bad).

A release that cannot be installed or imported, or where the case is not planned (its check
unsupported or unavailable there), is skipped, like ``git bisect skip``; when only skipped
releases separate a good from a bad one, the answer names every candidate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Literal

from reports import jax_versions

FAILING = ("fail", "known", "error")
# `flaky`: a crash once that a retry in a fresh process did not repeat; the suite does not count
# it as a failure, so neither does bisect.
PASSING = ("pass", "flaky")

State = Literal["good", "bad", "skip"]
Direction = Literal["regression", "fix"]


class BisectError(ValueError):
    """Bisection cannot start or cannot conclude; the message is one line naming the fix."""


@dataclasses.dataclass(frozen=True)
class Install:
    """The outcome of making one version's environment ready."""

    ok: bool
    fresh: bool = False  # created by this call (False: an environment that was already there)
    reason: str = ""  # why not, when not ok
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one run of the case said at one version.

    verdict: the record's verdict, or None when the run recorded nothing for the case
    (not planned there: an unknown case id, another profile's case, a check not declared).
    ratio: the worst error ratio among the record's tensors (None without metrics).
    """

    verdict: str | None
    ratio: float | None = None
    reason: str = ""
    seconds: float = 0.0
    report_dir: str = ""


@dataclasses.dataclass(frozen=True)
class Step:
    """One tested version, in the order tested."""

    version: str
    state: State
    install: Install
    observation: Observation | None  # None when the install failed

    @property
    def why(self) -> str:
        """The verdict and ratio, or why the version was skipped."""
        if self.observation is None:
            return self.install.reason
        obs = self.observation
        if obs.verdict is None:
            return obs.reason
        text = f"{obs.verdict}, ratio {format_ratio(obs.ratio)}"
        return f"{text}: {obs.reason}" if self.state == "skip" and obs.reason else text


@dataclasses.dataclass(frozen=True)
class BisectResult:
    """Where the check's outcome changes.

    versions: the releases from good to bad inclusive, in release order.
    first: the releases that may be the first bad (regression) or first fixed (fix) one, in
    release order; one unless skipped releases leave it open.
    last: the last good (regression) or last bad (fix) release next to them.
    """

    good: str
    bad: str
    direction: Direction
    versions: tuple[str, ...]
    steps: tuple[Step, ...]
    first: tuple[str, ...]
    last: str

    @property
    def exact(self) -> bool:
        return len(self.first) == 1

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(s.version for s in self.steps if s.state == "skip")

    @property
    def installs(self) -> tuple[str, ...]:
        """The versions whose environment this bisection created (not reused)."""
        return tuple(s.version for s in self.steps if s.install.fresh)

    def headline(self) -> str:
        """``first bad release: 0.8.0 (last good: 0.7.2)``; ``first fixed release: ...`` for a fix."""
        what = "first bad release" if self.direction == "regression" else "first fixed release"
        other = "last good" if self.direction == "regression" else "last bad"
        if self.exact:
            return f"{what}: {self.first[0]} ({other}: {self.last})"
        untested = ", ".join(v for v in self.first if v in self.skipped)
        return f"{what}: one of {', '.join(self.first)} (untestable: {untested}; {other}: {self.last})"


Installer = Callable[[str], Install]
Runner = Callable[[str], Observation]


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return "inf" if math.isinf(ratio) else f"{ratio:.3g}"


def state_of(observation: Observation) -> State:
    """good, bad, or skip (nothing recorded, or a verdict that tests nothing: unsupported, unavailable)."""
    if observation.verdict in FAILING:
        return "bad"
    if observation.verdict in PASSING:
        return "good"
    return "skip"


def input_problem(versions: Sequence[str], good: str, bad: str, library: str = "jax") -> str | None:
    """One line naming what is wrong with --good/--bad against the known releases of ``library``
    (``jax`` or ``tokamax``), or None."""
    if good == bad:
        return (
            f"--good and --bad are both {good}: give two different releases, "
            "one where the check passes and one where it fails"
        )
    for option, version in (("--good", good), ("--bad", bad)):
        if version not in versions:
            return (
                f"{option} {version} is not a known {library} release ({_near(versions, version)}); "
                f"pick a released version (`pip index versions {library}`, or list them with --versions)"
            )
    return None


def _near(versions: Sequence[str], version: str) -> str:
    """The releases around an unknown one, to name in its error."""
    ordered = jax_versions.sort_versions(list(dict.fromkeys([*versions, version])))
    at = ordered.index(version)
    near = [v for v in ordered[max(0, at - 2) : at + 3] if v != version]
    return f"releases near it: {', '.join(near)}" if near else "no releases listed"


def bisect(
    versions: Sequence[str], good: str, bad: str, install: Installer, run: Runner, library: str = "jax"
) -> BisectResult:
    """Binary-search ``versions`` (releases of ``library``, any order; only those from good to bad
    count) for the release where the check's outcome changes. Tests both ends first: the check must
    pass at ``good`` and fail at ``bad``, else BisectError. Raises BisectError on bad input too."""
    problem = input_problem(versions, good, bad, library)
    if problem:
        raise BisectError(problem)
    ordered = jax_versions.sort_versions(list(dict.fromkeys(versions)))
    low, high = sorted((ordered.index(good), ordered.index(bad)))
    span = ordered[low : high + 1]
    direction: Direction = "regression" if span[0] == good else "fix"
    path = span if direction == "regression" else span[::-1]  # from the good end to the bad end
    steps: list[Step] = []

    def test(version: str) -> Step:
        installed = install(version)
        observation = run(version) if installed.ok else None
        state = state_of(observation) if observation is not None else "skip"
        step = Step(version, state, installed, observation)
        steps.append(step)
        return step

    for end, option, want in ((good, "--good", "good"), (bad, "--bad", "bad")):
        step = test(end)
        if step.state == "skip":
            raise BisectError(
                f"cannot test the {option} end {end}: {step.why}; pick another {option} release"
            )
        if step.state != want:
            raise BisectError(_wrong_end(option, end, step))

    lo, hi = 0, len(path) - 1  # path[lo] is good, path[hi] bad, everything between untested or skipped
    skipped: set[int] = set()
    while inside := [i for i in range(lo + 1, hi) if i not in skipped]:
        middle = (lo + hi) / 2
        i = min(inside, key=lambda j: (abs(j - middle), j))  # nearest the middle, like git's skip
        state = test(path[i]).state
        if state == "good":
            lo = i
        elif state == "bad":
            hi = i
        else:
            skipped.add(i)

    if direction == "regression":
        first, last = path[lo + 1 : hi + 1], path[lo]
    else:
        first, last = path[lo:hi][::-1], path[hi]
    return BisectResult(good, bad, direction, tuple(span), tuple(steps), tuple(first), last)


def _wrong_end(option: str, version: str, step: Step) -> str:
    if option == "--good":
        return (
            f"the check fails at the --good end {version} ({step.why}): it must pass there; "
            "pick a --good release where it passes"
        )
    return (
        f"the check passes at the --bad end {version} ({step.why}): it must fail there (fail, known or "
        "error); pick a --bad release where it fails"
    )


def to_json(result: BisectResult) -> dict:
    """bisect.json's body (the CLI adds what was bisected: subject, case, check)."""
    return {
        "good": result.good,
        "bad": result.bad,
        "direction": result.direction,
        "headline": result.headline(),
        "first": list(result.first),
        "last": result.last,
        "exact": result.exact,
        "versions": list(result.versions),
        "installs": list(result.installs),
        "skipped": list(result.skipped),
        "steps": [
            {
                "version": s.version,
                "state": s.state,
                "verdict": s.observation.verdict if s.observation else None,
                "ratio": _json_ratio(s.observation.ratio if s.observation else None),
                "why": s.why,
                "install": _install_word(s.install),
                "install_s": round(s.install.seconds, 1),
                "run_s": round(s.observation.seconds, 1) if s.observation else None,
                "report_dir": s.observation.report_dir if s.observation else None,
            }
            for s in result.steps
        ],
    }


def _install_word(install: Install) -> str:
    if not install.ok:
        return "failed"
    return "installed" if install.fresh else "cached"


def _json_ratio(ratio: float | None) -> float | str | None:
    """Strict JSON has no inf or NaN: those become strings."""
    return ratio if ratio is None or math.isfinite(ratio) else str(ratio)
