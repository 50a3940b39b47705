"""A ledger entry's optional tokamax range: it applies only where its jax range and its tokamax
range both hold, and the release sweep holds it to a sweep of tokamax releases at a fixed jax."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.judge.known_issues import LedgerError, ledger_status
from reports.__main__ import main
from reports.ledger.release_sweep import range_problem, reproducing, suggested_range, table
from tests.support.ledgers import failing, load

ENTRY = """
[[issue]]
id = "tk"
subject = "tpu_flash"
checks = ["forward"]
jax = ">=0.9.2"
tokamax = ">=0.0.10,<0.0.12"
link = "https://github.com/openxla/tokamax/issues/1"
summary = "wrong rows"
"""


@pytest.mark.parametrize(
    ("jax", "tokamax", "applies"),
    [
        ("0.10.2", "0.0.11", True),
        ("0.10.2", "0.0.12", False),  # tokamax outside its range
        ("0.9.1", "0.0.11", False),  # jax outside its range
        ("0.10.2", None, False),  # no tokamax installed: a tokamax range never holds
        ("0.10.2", "0.0.9", False),
    ],
)
def test_an_entry_applies_only_where_both_ranges_hold(tmp_path, jax, tokamax, applies):
    ledger = load(tmp_path, ENTRY)
    record = ledger.apply(failing(), {"jax": jax, "tokamax": tokamax})
    assert (record.verdict == "known") is applies
    (status,) = ledger_status(ledger, [record], {"jax": jax, "tokamax": tokamax}, ["tpu_flash"])
    assert status["tokamax"] == ">=0.0.10,<0.0.12"
    assert status["status"] == ("reproduced" if applies else "out of range")
    if not applies:
        assert status["failing_outside_range"] == 1  # so the sweep sees where it reproduces


def test_an_entry_without_a_tokamax_range_holds_with_or_without_tokamax(tmp_path):
    ledger = load(tmp_path, ENTRY.replace('tokamax = ">=0.0.10,<0.0.12"\n', ""))
    assert ledger.issues[0].tokamax == ""
    for tokamax in (None, "0.0.12"):
        assert ledger.apply(failing(), {"jax": "0.10.2", "tokamax": tokamax}).verdict == "known"


def test_a_bad_tokamax_range_is_refused_in_one_line(tmp_path):
    with pytest.raises(LedgerError) as error:
        load(tmp_path, ENTRY.replace(">=0.0.10,<0.0.12", "0.0.11+"))
    message = str(error.value)
    assert "\n" not in message
    assert "tokamax = '0.0.11+' is not a PEP 440 specifier; write e.g." in message
    with pytest.raises(LedgerError, match="tokamax must be a non-empty string"):
        load(tmp_path, ENTRY.replace('">=0.0.10,<0.0.12"', "11"))


SWEEP = {
    "library": "tokamax",
    "jax": "0.10.2",
    "span": ["0.0.10", "0.0.12"],
    "reproduces": ["0.0.10", "0.0.11"],
    "clean": ["0.0.12"],
}


def test_a_tokamax_range_that_agrees_with_its_tokamax_sweep_passes():
    assert range_problem("tk", ">=0.9.2", SWEEP, "<0.0.12") is None
    assert range_problem("tk", ">=0.9.2", SWEEP, ">=0.0.10,<0.0.12") is None


@pytest.mark.parametrize(
    ("jax_range", "sweep", "tokamax_range", "problem"),
    [
        (
            ">=0.9.2",
            SWEEP,
            "==0.0.11",
            "tokamax = '==0.0.11' disagrees with its sweep: reproduces outside it at ['0.0.10']",
        ),
        (">=0.9.2", SWEEP, ">=0.0.10", "clean inside it at ['0.0.12']"),
        (">=0.9.2", SWEEP, "", "clean inside it at ['0.0.12']"),  # a tokamax sweep found a clean release
        (
            ">=0.9.2",
            {k: v for k, v in SWEEP.items() if k not in ("library", "jax")},
            "<0.0.12",
            "but its sweep walks jax releases",
        ),
        (">=0.9.2", {**SWEEP, "jax": ""}, "<0.0.12", "records the jax it held fixed"),
        (">=0.11", SWEEP, "<0.0.12", "swept at jax 0.10.2, outside its jax = '>=0.11'"),
        (">=0.9.2", {**SWEEP, "reproduces": ["0.0.13"]}, "<0.0.12", "not releases inside the span"),
        (">=0.9.2", {**SWEEP, "library": "numpy"}, "<0.0.12", "write jax or tokamax"),
    ],
    ids=[
        "leaves-out-a-reproducing",
        "holds-a-clean",
        "no-range",
        "jax-sweep",
        "no-jax",
        "jax-out",
        "stray",
        "library",
    ],
)
def test_a_tokamax_range_the_sweep_contradicts_is_flagged(jax_range, sweep, tokamax_range, problem):
    found = range_problem("tk", jax_range, sweep, tokamax_range)
    assert found is not None and problem in found, found


def _folder(root: Path, jax: str, tokamax: str | None, statuses: list[dict]) -> Path:
    folder = root / (f"jax-{jax}" + (f"-tokamax-{tokamax}" if tokamax else ""))
    folder.mkdir()
    libraries = {"jax": jax, **({"tokamax": tokamax} if tokamax else {})}
    summary = {"environment": {"libraries": libraries, "tokamax": tokamax}, "known_issues": statuses}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _sweep_folders(tmp_path: Path) -> list[Path]:
    tk = {"id": "tk", "jax": ">=0.9.2", "tokamax": "<0.0.12"}
    plain = {"id": "plain", "jax": ">=0.10.2", "tokamax": ""}
    return [
        _folder(
            tmp_path,
            "0.10.2",
            "0.0.12",
            [{**tk, "status": "no longer reproduces"}, {**plain, "status": "reproduced"}],
        ),
        _folder(
            tmp_path,
            "0.10.2",
            "0.0.10",
            [{**tk, "status": "reproduced"}, {**plain, "status": "no longer reproduces"}],
        ),
        _folder(
            tmp_path,
            "0.10.2",
            "0.0.11",
            [{**tk, "status": "reproduced"}, {**plain, "status": "not run here"}],
        ),
        # a jax-only folder (no tokamax): says nothing of the tokamax entry
        _folder(
            tmp_path, "0.9.2", None, [{**tk, "status": "out of range"}, {**plain, "status": "out of range"}]
        ),
    ]


def test_the_sweep_walks_tokamax_releases_at_a_fixed_jax_for_an_entry_with_a_tokamax_range(tmp_path):
    seen = reproducing(_sweep_folders(tmp_path))
    assert [(o.library, o.at, o.version, o.state) for o in seen["tk"]] == [
        ("tokamax", "0.10.2", "0.0.10", "reproduced"),
        ("tokamax", "0.10.2", "0.0.11", "reproduced"),
        ("tokamax", "0.10.2", "0.0.12", "clean"),
    ]
    assert suggested_range(seen["tk"]) == "<0.0.12"  # reproduces from the oldest release covered
    # an entry without a tokamax range: one observation per jax release (three tokamax runs at 0.10.2
    # merge) and, since the folders hold a tokamax sweep at 0.10.2, one per tokamax release there
    assert [(o.library, o.version, o.state) for o in seen["plain"] if o.library == "jax"] == [
        ("jax", "0.9.2", "unobserved"),
        ("jax", "0.10.2", "reproduced"),
    ]
    assert [(o.at, o.version, o.state) for o in seen["plain"] if o.library == "tokamax"] == [
        ("0.10.2", "0.0.10", "clean"),
        ("0.10.2", "0.0.11", "unobserved"),
        ("0.10.2", "0.0.12", "reproduced"),
    ]
    assert (
        "plain (tokamax releases at jax 0.10.2): reproduces ['0.0.12']; clean ['0.0.10']; "
        "tokamax range >=0.0.12"
    ) in table(seen).splitlines()  # it needs a tokamax range: the sweep says which
    assert (
        "tk (tokamax releases at jax 0.10.2): reproduces ['0.0.10', '0.0.11']; clean ['0.0.12']; "
        "tokamax range <0.0.12"
    ) in table(seen).splitlines()


def test_the_ledger_sweep_command_prints_the_tokamax_sweep(tmp_path, capsys):
    assert main(["ledger-sweep", *map(str, _sweep_folders(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "tk (tokamax releases at jax 0.10.2): reproduces ['0.0.10', '0.0.11']" in out
    assert "plain: reproduces ['0.10.2']; clean nowhere; range >=0.10.2" in out


def test_a_jax_sweep_with_one_tokamax_per_jax_adds_no_tokamax_lines(tmp_path):
    """A jax sweep installs the newest tokamax each jax takes: that is no tokamax sweep."""
    plain = {"id": "plain", "jax": "", "tokamax": ""}
    folders = [
        _folder(tmp_path, jax, tokamax, [{**plain, "status": state}])
        for jax, tokamax, state in (
            ("0.9.1", "0.0.11", "no longer reproduces"),
            ("0.9.2", "0.0.12", "reproduced"),
            ("0.10.2", "0.0.12", "reproduced"),
        )
    ]
    seen = reproducing(folders)["plain"]
    assert {o.library for o in seen} == {"jax"}
    assert table({"plain": seen}) == "plain: reproduces ['0.9.2', '0.10.2']; clean ['0.9.1']; range >=0.9.2"
