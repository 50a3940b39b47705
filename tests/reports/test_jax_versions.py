"""The version matrix's selection rules: what `nox -s ...` asks for, and what gets installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reports import jax_versions as jv

REQUIRED = ("0.4.35", "0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2", "0.11.2", "0.12.0.1")
ROOT = Path(__file__).resolve().parents[2]


def test_matrix_holds_the_required_versions_in_release_order():
    assert set(REQUIRED) <= set(jv.MATRIX)
    assert list(jv.MATRIX) == jv.sort_versions(list(jv.MATRIX))
    assert jv.NEWEST == jv.MATRIX[-1] == "0.12.0.1"


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["-s", "conformance"], {}, ("conformance",)),
        (["-e", "tests", "conformance", "-x"], {}, ("tests", "conformance")),
        (["--session=conformance"], {}, ("conformance",)),
        (["--sessions", "a", "b"], {}, ("a", "b")),
        (["-s", "a", "-s", "b"], {}, ("b",)),  # nox: the last use wins
        (["-sconformance"], {}, ("conformance",)),
        (["-s", "gate", "--", "-s", "conformance"], {}, ("gate",)),  # posargs are not selectors
        (["-l"], {"NOXSESSION": "tests,conformance"}, ("tests", "conformance")),
        (["-s", "tests"], {"NOXSESSION": "conformance"}, ("tests",)),  # the command line beats the variable
        (["-k", "conformance"], {}, ()),
        ([], {}, ()),
    ],
)
def test_requested_selectors_reads_argv_like_nox(argv, environ, expected):
    assert jv.requested_selectors(argv, environ) == expected


@pytest.mark.parametrize(
    ("selector", "version"),
    [
        ("conformance(jax='0.4.38')", "0.4.38"),
        ('conformance(jax="0.4.38")', "0.4.38"),
        ("conformance( jax = '0.6.0' )", "0.6.0"),
        ("conformance-3.11(jax='0.5.3')", "0.5.3"),
        ("conformance(jax='latest')", "latest"),
        ("conformance", None),
        ("tests", None),
        ("gate(jax='0.4.38')", None),
    ],
)
def test_selected_version(selector, version):
    assert jv.selected_version(selector) == version


def test_bare_conformance_means_the_newest_only():
    assert jv.session_versions(["-s", "conformance"], {}) == (jv.NEWEST,)
    assert jv.session_versions([], {"NOXSESSION": "conformance"}) == (jv.NEWEST,)


def test_a_named_version_is_added_to_the_matrix():
    assert jv.session_versions(["-s", "conformance(jax='0.4.36')"], {}) == (*jv.MATRIX, "0.4.36")
    assert jv.session_versions(["-s", "conformance(jax='0.5.3')"], {}) == jv.MATRIX  # already listed


def test_bare_and_named_together_run_both():
    versions = jv.session_versions(["-s", "conformance", "conformance(jax='0.4.35')"], {})
    assert versions == (jv.NEWEST, "0.4.35")


def test_no_conformance_selector_keeps_the_whole_matrix():
    for argv in ([], ["-l"], ["-k", "conformance"], ["-s", "tests"], ["-s", "gate", "--", "a", "b"]):
        assert jv.session_versions(argv, {}) == jv.MATRIX


def test_version_problems_name_the_fix():
    assert jv.version_problem("0.4.38") is None
    assert jv.version_problem("0.4.30") is None  # older, with its own pins
    latest = jv.version_problem("latest")
    assert "'latest' is not a release number" in latest and f"conformance(jax='{jv.NEWEST}')" in latest
    assert "older than any row" in jv.version_problem("0.3.25")
    assert all("\n" not in (jv.version_problem(v) or "") for v in ("latest", "0.3.25", "1.x"))


def test_requirements_pin_jax_not_jaxlib_and_always_absl():
    reqs = jv.requirements_for("0.4.37")  # 0.4.37 has no jaxlib of the same number
    assert reqs[0] == "jax==0.4.37"
    assert not any(r.startswith("jaxlib") for r in reqs)
    assert "absl-py>=1" in reqs
    assert "numpy>=1.24,<2" in jv.requirements_for("0.4.23")  # jax <= 0.4.23 breaks on numpy 2
    with pytest.raises(ValueError, match="older than any row"):
        jv.requirements_for("0.2.0")


UV_MISSING = """Using Python 3.11.7 environment at: .nox/conformance-jax-9-9-9
error: No solution found when resolving dependencies
  cause: Because there is no version of jax==9.9.9 and you require jax==9.9.9, we can conclude that \
your requirements are unsatisfiable.
"""
PIP_MISSING = "ERROR: No matching distribution found for jax==9.9.9\n"
UV_OTHER = """error: No solution found when resolving dependencies
  ╰─▶ Because jax==0.4.1 depends on numpy<1.23 and you require numpy>=1.26, we can conclude that ...
"""


@pytest.mark.parametrize("output", [UV_MISSING, PIP_MISSING])
def test_install_failure_for_a_missing_release(output):
    line = jv.install_failure("9.9.9", output)
    assert line.startswith("jax 9.9.9 cannot be installed: no such release on the package index. Fix:")
    assert "\n" not in line


def test_install_failure_quotes_the_resolver_otherwise():
    line = jv.install_failure("0.4.1", UV_OTHER)
    assert "Because jax==0.4.1 depends on numpy<1.23" in line and "Fix: adjust that version's row" in line
    assert "\n" not in line
    assert "the installer failed" in jv.install_failure("0.4.1", "")


def test_sort_versions_is_numeric():
    assert jv.sort_versions(["0.10.2", "0.4.38", "0.9.2", "weird", "0.4.5"]) == [
        "0.4.5",
        "0.4.38",
        "0.9.2",
        "0.10.2",
        "weird",
    ]


@pytest.mark.skipif(
    shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
    reason="nox is not installed in this environment",
)
def test_noxfile_lists_what_the_command_line_asks_for():
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")

    def listed(*args: str) -> list[str]:
        done = subprocess.run(
            [nox, "-l", "--json", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return [s["session"] for s in json.loads(done.stdout) if s["name"] == "conformance"]

    assert listed("-k", "conformance") == [f"conformance(jax='{v}')" for v in jv.MATRIX]
    assert listed("-s", "conformance") == [f"conformance(jax='{jv.NEWEST}')"]
    assert listed("-s", "conformance(jax='0.4.36')")[-1] == "conformance(jax='0.4.36')"


def test_the_same_rules_serve_another_versioned_session():
    assert jv.session_versions(["-s", "bench"], {}, session="bench") == (jv.NEWEST,)
    assert jv.session_versions(["-s", "bench(jax='0.4.36')"], {}, session="bench") == (*jv.MATRIX, "0.4.36")
    assert jv.session_versions(["-s", "bench"], {}) == jv.MATRIX  # conformance is not narrowed by `bench`
    assert jv.selected_version("bench(jax='0.5.3')", "bench") == "0.5.3"


@pytest.mark.skipif(
    shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
    reason="nox is not installed in this environment",
)
def test_nox_session_with_a_bad_version_fails_in_one_line(tmp_path):
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    done = subprocess.run(
        [nox, "--envdir", str(tmp_path), "-s", "conformance(jax='latest')"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    aborted = [line for line in done.stderr.splitlines() if "aborted" in line]
    assert len(aborted) == 1 and "jax 'latest' is not a release number" in aborted[0]
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(
    shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
    reason="nox is not installed in this environment",
)
def test_nox_refuses_a_pair_the_tokamax_table_forbids_in_one_line(tmp_path):
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    done = subprocess.run(
        [nox, "--envdir", str(tmp_path), "--no-venv", "-s", "conformance(jax='0.9.1', tokamax='0.0.12')"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    aborted = [line for line in done.stderr.splitlines() if "aborted" in line]
    assert len(aborted) == 1, done.stderr[-2000:]
    assert "tokamax 0.0.12 needs jax >= 0.9.2, not 0.9.1" in aborted[0]
    assert "conformance(jax='0.9.2', tokamax='0.0.12')" in aborted[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("text", "release"), [("0.4.35", (0, 4, 35)), ("0.10.2", (0, 10, 2)), ("0.7.0rc1", (0, 7, 0))]
)
def test_one_parser_reads_releases_and_prereleases(text, release):
    from kernels.runtime.jax_runtime import version_tuple

    assert jv.parse_version(text).release == release
    assert version_tuple(text) == release  # kernels read versions as PEP 440 too (packaging)


def test_parsed_versions_order_by_pep_440():
    assert jv.parse_version("0.4.35") < jv.parse_version("0.7.0rc1") < jv.parse_version("0.7.0")
    assert jv.parse_version("0.7.0") < jv.parse_version("0.10.2")  # numeric, not alphabetical
    assert jv.version_key("0.4.38") < jv.version_key("0.10.2")


def test_kernels_drop_local_labels_and_refuse_what_is_not_pep_440():
    from kernels.runtime.jax_runtime import version_tuple

    assert version_tuple("2.13.0+cpu") == (2, 13, 0)
    assert version_tuple("not a version") == ()


def test_the_gate_imports_without_site_packages():
    """`nox -s gate` runs with no installs: nothing `python -m reports gate` imports may need
    numpy, jax or packaging at import time (-S: no site-packages at all)."""
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import reports.__main__, reports.gate.comparison"
    subprocess.run([sys.executable, "-S", "-c", code], check=True, cwd=ROOT)


def test_tokamax_table_gives_the_newest_release_each_jax_takes_and_its_newest_is_the_pyproject_pin():
    import tomllib

    assert jv.tokamax_for("0.12.0.1") == "0.0.17"
    assert jv.tokamax_for("0.11.0") == "0.0.16"  # 0.0.17 needs jax >= 0.11.1
    # 0.0.15 installs with jax 0.10.2 but needs Python 3.12: 0.10.2's run stays on 3.11 with 0.0.12
    assert jv.tokamax_for("0.10.2") == "0.0.12"
    assert jv.tokamax_for("0.9.1") == "0.0.11"
    assert jv.tokamax_for("0.8.3") == "0.0.10"
    assert jv.tokamax_for("0.8.1") is None
    assert jv.tokamax_requirements("0.4.35") == ()
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    newest = jv.TOKAMAX_NEEDS_JAX[0][0]
    assert pyproject["dependency-groups"]["tokamax"] == [f"tokamax=={newest}"]


def test_a_tokamax_release_is_a_second_parameter_of_conformance_only_where_named():
    pair = "conformance(jax='0.9.2', tokamax='0.0.11')"
    assert jv.selected_pair(pair) == ("0.9.2", "0.0.11")
    assert jv.selected_version(pair) is None  # never read as a jax version "0.9.2', tokamax='0.0.11"
    assert jv.session_pairs(["-s", pair], {})[-1] == ("0.9.2", "0.0.11")
    assert jv.session_pairs(["-s", "conformance"], {}) == ((jv.NEWEST, None),)
    assert jv.session_id("0.10.2", None) == "jax='0.10.2'"  # the one-parameter name nox gave before
    assert jv.report_folder("0.9.2", "0.0.11") == "reports/jax-0.9.2-tokamax-0.0.11"
    assert jv.tokamax_problem("0.0.11", "0.9.2") is None
    assert "needs jax >= 0.9.1" in jv.tokamax_problem("0.0.11", "0.8.3")
    assert "not a release in versions/table.py" in jv.tokamax_problem("0.0.99", "0.10.2")
    assert "needs jax >= 0.11.0, not 0.10.2" in jv.tokamax_problem("0.0.13", "0.10.2")
    assert jv.tokamax_problem("0.0.3", "0.10.2") is None  # older than the matrix: runs when named


@pytest.mark.parametrize(
    ("tokamax", "needs", "older"),
    [("0.0.12", "0.9.2", "0.9.1"), ("0.0.11", "0.9.1", "0.9.0"), ("0.0.10", "0.8.2", "0.8.1")],
)
def test_a_pair_that_breaks_the_tokamax_table_is_refused_in_one_line_naming_the_fix(tokamax, needs, older):
    assert jv.tokamax_needs(tokamax) == needs
    assert jv.tokamax_problem(tokamax, needs) is None
    assert jv.tokamax_problem(tokamax, "0.10.2") is None
    problem = jv.tokamax_problem(tokamax, older)
    assert "\n" not in problem
    assert f"tokamax {tokamax} needs jax >= {needs}, not {older}" in problem
    assert f"conformance(jax='{needs}', tokamax='{tokamax}')" in problem  # the fix, as a command
    # the fix it names is a pair the table accepts
    fixed = jv.selected_pair(problem.split('"')[1])
    assert fixed == (needs, tokamax) and jv.tokamax_problem(*reversed(fixed)) is None


def test_the_tokamax_table_covers_every_release_and_the_matrix_is_every_one_from_0_0_10():
    releases = [r for r, _, _ in jv.TOKAMAX_RELEASES]
    assert releases == [f"0.0.{n}" for n in range(17, 0, -1)]  # every release the index offers
    assert jv.TOKAMAX_MATRIX == tuple(f"0.0.{n}" for n in range(10, 18))
    assert [r for r, _ in jv.TOKAMAX_NEEDS_JAX] == list(reversed(jv.TOKAMAX_MATRIX))
    # a newer release never needs an older jax than the one before it, but for 0.0.15 (its metadata
    # asks for jax >= 0.10.2 between two releases that ask for 0.11.0)
    needs = [jv.parse_version(n) for r, n, _ in jv.TOKAMAX_RELEASES if r != "0.0.15"]
    assert needs == sorted(needs, reverse=True)
    assert jv.tokamax_needs("0.0.15") == "0.10.2"
    # every release before 0.0.10 pulls tensorflow (named in its row, so a reader knows the cost)
    assert all("tensorflow" in note for r, _, note in jv.TOKAMAX_RELEASES if r not in jv.TOKAMAX_MATRIX)
    assert jv.tokamax_problem("0.0.9", "0.8.1") is not None and jv.tokamax_problem("0.0.9", "0.8.2") is None
