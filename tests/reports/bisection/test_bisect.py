"""The bisection search (reports/bisection/search.py) against fake releases: every boundary, both
directions, skipped releases, and the inputs it must refuse in one line."""

from __future__ import annotations

import json
import math

import pytest

from reports.bisection.search import BisectError, Install, Observation, bisect, state_of, to_json

RELEASES = (
    "0.4.35",
    "0.4.38",
    "0.5.3",
    "0.6.0",
    "0.6.2",
    "0.7.0",
    "0.7.2",
    "0.8.0",
    "0.8.1",
    "0.9.0.1",
    "0.10.2",
)


class World:
    """Fake releases: the verdict at each one, and which cannot be installed or imported."""

    def __init__(self, verdicts: dict[str, str], broken: tuple[str, ...] = (), cached: tuple[str, ...] = ()):
        self.verdicts, self.broken, self.cached = verdicts, broken, cached
        self.installed: list[str] = []
        self.ran: list[str] = []

    def install(self, version: str) -> Install:
        self.installed.append(version)
        if version in self.broken:
            return Install(False, True, f"jax {version} does not import: ImportError: boom")
        return Install(True, version not in self.cached, "", 1.0)

    def run(self, version: str) -> Observation:
        self.ran.append(version)
        verdict = self.verdicts[version]
        return Observation(verdict, math.inf if verdict in ("fail", "known") else 1.0)


def flips_at(boundary: str, before: str, after: str) -> dict[str, str]:
    """Verdict `before` on releases older than `boundary`, `after` from it on."""
    at = RELEASES.index(boundary)
    return {v: before if i < at else after for i, v in enumerate(RELEASES)}


@pytest.mark.parametrize("boundary", RELEASES[1:])
def test_a_regression_is_found_at_every_position(boundary):
    world = World(flips_at(boundary, "pass", "fail"))
    result = bisect(RELEASES, RELEASES[0], RELEASES[-1], world.install, world.run)
    previous = RELEASES[RELEASES.index(boundary) - 1]
    assert result.direction == "regression"
    assert result.first == (boundary,) and result.last == previous
    assert result.headline() == f"first bad release: {boundary} (last good: {previous})"
    assert len(world.ran) <= 2 + math.ceil(math.log2(len(RELEASES)))  # a search, not a scan


@pytest.mark.parametrize("boundary", RELEASES[1:])
def test_a_fix_is_found_at_every_position_with_good_newer_than_bad(boundary):
    world = World(flips_at(boundary, "known", "pass"))  # a ledger-matched failure counts as failing
    result = bisect(RELEASES, good=RELEASES[-1], bad=RELEASES[0], install=world.install, run=world.run)
    previous = RELEASES[RELEASES.index(boundary) - 1]
    assert result.direction == "fix"
    assert result.first == (boundary,) and result.last == previous
    assert result.headline() == f"first fixed release: {boundary} (last bad: {previous})"


def test_only_the_releases_between_the_ends_are_tried_and_the_ends_first():
    world = World(flips_at("0.7.0", "pass", "error"))  # a crash counts as failing too
    shuffled = list(reversed(RELEASES))
    result = bisect(shuffled, "0.6.0", "0.8.0", world.install, world.run)
    assert world.ran[:2] == ["0.6.0", "0.8.0"]
    assert set(world.ran) <= {"0.6.0", "0.6.2", "0.7.0", "0.7.2", "0.8.0"}
    assert result.versions == ("0.6.0", "0.6.2", "0.7.0", "0.7.2", "0.8.0")
    assert result.first == ("0.7.0",) and result.last == "0.6.2"


def test_an_uninstallable_release_away_from_the_boundary_is_skipped_and_the_answer_stays_exact():
    world = World(flips_at("0.8.1", "pass", "fail"), broken=("0.6.2",))
    result = bisect(RELEASES, RELEASES[0], RELEASES[-1], world.install, world.run)
    assert result.first == ("0.8.1",) and result.exact
    assert "0.6.2" not in world.ran  # an install that failed is never run
    assert result.skipped in ((), ("0.6.2",))


def test_a_skipped_boundary_leaves_every_candidate_named():
    world = World(flips_at("0.7.0", "pass", "fail"), broken=("0.7.0",))
    result = bisect(RELEASES, RELEASES[0], RELEASES[-1], world.install, world.run)
    assert result.first == ("0.7.0", "0.7.2") and not result.exact
    assert result.last == "0.6.2"
    assert result.headline() == "first bad release: one of 0.7.0, 0.7.2 (untestable: 0.7.0; last good: 0.6.2)"


def test_adjacent_skips_in_a_fix_are_all_candidates_in_release_order():
    world = World(flips_at("0.7.2", "fail", "pass"), broken=("0.7.0", "0.7.2"))
    result = bisect(RELEASES, "0.10.2", "0.6.2", world.install, world.run)
    assert result.first == ("0.7.0", "0.7.2", "0.8.0")
    assert result.last == "0.6.2"
    assert result.headline().startswith(
        "first fixed release: one of 0.7.0, 0.7.2, 0.8.0 (untestable: 0.7.0, 0.7.2;"
    )


def test_only_skipped_releases_between_the_ends():
    world = World(flips_at("0.6.2", "pass", "fail"), broken=("0.6.0", "0.6.2", "0.7.0"))
    result = bisect(RELEASES, "0.5.3", "0.7.2", world.install, world.run)
    assert result.first == ("0.6.0", "0.6.2", "0.7.0", "0.7.2") and result.last == "0.5.3"
    assert sorted(result.skipped) == ["0.6.0", "0.6.2", "0.7.0"]


def test_a_release_where_the_case_is_not_planned_or_unsupported_is_skipped():
    verdicts = flips_at("0.7.0", "pass", "fail") | {"0.6.2": "unsupported"}
    world = World(verdicts)
    world.verdicts["0.7.0"] = None  # nothing recorded there
    result = bisect(RELEASES, "0.6.0", "0.7.2", world.install, world.run)
    assert result.first == ("0.6.2", "0.7.0", "0.7.2") and result.last == "0.6.0"


def test_the_installs_made_are_the_fresh_ones():
    world = World(flips_at("0.7.0", "pass", "fail"), cached=("0.6.0",))
    result = bisect(RELEASES, "0.6.0", "0.7.2", world.install, world.run)
    assert "0.6.0" not in result.installs and "0.7.2" in result.installs
    assert set(result.installs) | {"0.6.0"} == set(world.installed)


@pytest.mark.parametrize(
    ("verdict", "state"),
    [("pass", "good"), ("flaky", "good"), ("fail", "bad"), ("known", "bad"), ("error", "bad")]
    + [("unsupported", "skip"), ("unavailable", "skip"), (None, "skip")],
)
def test_verdicts_map_to_good_bad_and_skip(verdict, state):
    assert state_of(Observation(verdict)) == state


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_good_end_that_fails_stops_in_one_line():
    world = World(flips_at("0.5.3", "pass", "fail"))
    with pytest.raises(BisectError) as exc:
        bisect(RELEASES, "0.6.0", "0.8.0", world.install, world.run)
    assert "fails at the --good end 0.6.0" in one_line(exc) and "fail, ratio inf" in one_line(exc)
    assert world.ran == ["0.6.0"]  # nothing more is tried


def test_a_bad_end_that_passes_stops_in_one_line():
    world = World(flips_at("0.9.0.1", "pass", "fail"))
    with pytest.raises(BisectError) as exc:
        bisect(RELEASES, "0.6.0", "0.8.0", world.install, world.run)
    assert "passes at the --bad end 0.8.0" in one_line(exc) and "pick a --bad release where it fails" in str(
        exc.value
    )


def test_an_end_that_cannot_be_installed_stops_in_one_line():
    world = World(flips_at("0.7.0", "pass", "fail"), broken=("0.8.0",))
    with pytest.raises(BisectError) as exc:
        bisect(RELEASES, "0.6.0", "0.8.0", world.install, world.run)
    assert one_line(exc) == (
        "cannot test the --bad end 0.8.0: jax 0.8.0 does not import: ImportError: boom; "
        "pick another --bad release"
    )


def test_an_unknown_case_id_stops_at_the_first_end_with_the_runners_reason():
    def run(version):
        return Observation(
            None, None, f"no result for check forward of case nope at jax {version} (not found)"
        )

    with pytest.raises(BisectError) as exc:
        bisect(RELEASES, "0.6.0", "0.8.0", World({}).install, run)
    assert one_line(exc).startswith(
        "cannot test the --good end 0.6.0: no result for check forward of case nope"
    )


@pytest.mark.parametrize(
    ("good", "bad", "expected"),
    [
        ("0.7.0", "0.7.0", "--good and --bad are both 0.7.0"),
        (
            "0.7.1",
            "0.8.0",
            "--good 0.7.1 is not a known jax release (releases near it: 0.6.2, 0.7.0, 0.7.2, 0.8.0)",
        ),
        ("0.6.0", "9.9.9", "--bad 9.9.9 is not a known jax release"),
    ],
)
def test_bad_input_is_refused_before_anything_is_installed(good, bad, expected):
    world = World({})
    with pytest.raises(BisectError) as exc:
        bisect(RELEASES, good, bad, world.install, world.run)
    assert expected in one_line(exc)
    assert world.installed == []


def test_the_json_body_is_strict_json_with_each_step():
    world = World(flips_at("0.7.0", "pass", "fail"), broken=("0.6.2",))
    body = to_json(bisect(RELEASES, "0.6.0", "0.7.2", world.install, world.run))
    text = json.dumps(body, allow_nan=False)  # inf ratios are written as strings
    steps = json.loads(text)["steps"]
    assert [s["version"] for s in steps] == world.installed
    assert {s["install"] for s in steps} == {"installed", "failed"}
    assert any(s["ratio"] == "inf" and s["state"] == "bad" for s in steps)
    assert body["headline"].startswith("first bad release:")
