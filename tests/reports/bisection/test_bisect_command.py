"""`python -m reports bisect` and `nox -s bisect`: the real installer and runner's pieces, the
command line over fake ones, and (slow) a real bisection between two installed releases."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reports.__main__ import main
from reports.bisection import installs
from reports.bisection.installs import NoxInstaller, SuiteRunner, env_name, observe
from reports.bisection.search import Install, Observation
from reports.ledger.range_edit import entry_range, set_range
from tests.support import report_folders

ROOT = Path(__file__).resolve().parents[3]
CASE = "xla-float32-win1.1_tl-B1-Hq1-Hkv1-Sq128-Sk128-D64"
LEDGER = ROOT / "kernels" / "known_issues.toml"


def nox_path() -> str | None:
    local = Path(sys.executable).parent / "nox"
    return shutil.which("nox") or (str(local) if local.exists() else None)


def test_env_names_are_noxs_for_the_conformance_session():
    assert env_name("0.8.3") == "conformance-jax-0-8-3"
    assert env_name("0.9.0.1") == "conformance-jax-0-9-0-1"


def test_the_run_is_the_suites_own_narrowed_to_one_test_id(tmp_path):
    runner = SuiteRunner(tmp_path / "envs", "xla", CASE, "lse", tmp_path / "out", pytest_args=("-x",))
    command = runner.command("0.8.1")
    assert command[:4] == [
        str(tmp_path / "envs/conformance-jax-0-8-1/bin/python"),
        "-m",
        "pytest",
        runner.test_id(),
    ]
    assert runner.test_id() == f"conformance/test_checks.py::test_lse[{CASE}]"
    joined = " ".join(command)
    for part in (
        "--impl xla",
        f"--report-dir {tmp_path / 'out/jax-0.8.1'}",
        "--profile ci",
        "-n 1",
        "--no-shrink",
        "-x",
    ):
        assert part in joined
    assert "--timeout 600" in joined  # the matrix's isolation defaults (conformance.suite.launch)


def test_observe_reads_the_verdict_and_worst_ratio(tmp_path):
    records = [
        report_folders.result(
            "xla", "forward", "fail", ratio=7.5, case_id=CASE, reason="out: OUT OF TOLERANCE"
        ),
        report_folders.result("xla", "lse", "pass", ratio=1.1, case_id=CASE),
    ]
    report_folders.write_run(tmp_path, records)
    seen = observe(tmp_path, CASE, "forward", "", 3.0, "what")
    assert (seen.verdict, seen.ratio, seen.reason) == ("fail", 7.5, "out: OUT OF TOLERANCE")
    assert observe(tmp_path, CASE, "lse", "", 1.0, "what").verdict == "pass"


def test_observe_without_a_record_says_the_case_was_not_found(tmp_path):
    output = "ERROR: not found: conformance/test_checks.py::test_forward[nope]\nno tests ran"
    seen = observe(
        tmp_path / "missing", "nope", "forward", output, 1.0, "check forward of case nope at jax 0.8.1"
    )
    assert seen.verdict is None
    assert seen.reason.startswith(
        "no result for check forward of case nope at jax 0.8.1 (not found); copy the case id"
    )


FAKE_NOX = """\
import sys, pathlib
args = sys.argv[1:]
envdir = pathlib.Path(args[args.index("--envdir") + 1])
version = args[-1].split("'")[1]
if version == "0.8.0":
    print("nox > Session conformance(jax='0.8.0') aborted: jax 0.8.0 cannot be installed: no wheel. Fix: go")
    sys.exit(1)
python = envdir / ("conformance-jax-" + version.replace(".", "-")) / "bin" / "python"
python.parent.mkdir(parents=True, exist_ok=True)
shown = "0.7.9" if version == "0.8.2" else version
python.write_text("#!/bin/sh\\n" + ("exit 3\\n" if version == "0.8.1" else f"echo {shown}\\n"))
python.chmod(0o755)
"""


@pytest.fixture
def fake_nox(tmp_path) -> NoxInstaller:
    script = tmp_path / "fake_nox.py"
    script.write_text(FAKE_NOX)
    return NoxInstaller(nox=(sys.executable, str(script)), envdir=tmp_path / "envs", logs=tmp_path / "logs")


def test_the_installer_reports_fresh_then_cached(fake_nox):
    assert fake_nox("0.7.2").ok and fake_nox("0.7.2").fresh is False
    assert (fake_nox.logs / "jax-0.7.2-install.log").exists()


def test_the_installer_passes_on_noxs_one_line_reason(fake_nox):
    done = fake_nox("0.8.0")
    assert not done.ok and done.fresh
    assert done.reason.startswith("jax 0.8.0 cannot be installed: no wheel. Fix: go (log: ")


def test_the_installer_checks_that_jax_imports_at_that_version(fake_nox):
    assert fake_nox("0.8.1").reason.startswith("jax 0.8.1 does not import")
    assert (
        fake_nox("0.8.2").reason == "the environment holds jax 0.7.9, not 0.8.2; delete it to have it rebuilt"
    )


class FakeEnv:
    """Stands in for NoxInstaller and SuiteRunner in the command line: fixed in 0.8.2."""

    verdicts = {"0.7.2": "known", "0.8.0": "known", "0.8.1": "known", "0.8.2": "pass", "0.8.3": "pass"}

    @staticmethod
    def installer(**kwargs):
        return lambda version: Install(True, version != "0.8.3", "", 2.0)

    @staticmethod
    def runner(**kwargs):
        assert kwargs["case_id"] == CASE and kwargs["check"] == "forward" and kwargs["impl"] == "xla"
        return lambda version: Observation(FakeEnv.verdicts[version], 1.0, "", 1.0, f"jax-{version}")


@pytest.fixture
def fake_env(monkeypatch):
    monkeypatch.setattr(installs, "NoxInstaller", FakeEnv.installer)
    monkeypatch.setattr(installs, "SuiteRunner", FakeEnv.runner)


BASE = [
    "bisect",
    "--impl",
    "xla",
    "--case",
    CASE,
    "--versions",
    "0.7.2,0.8.0,0.8.1,0.8.2,0.8.3",
    "--nox",
    "nox",
]


def test_the_command_line_bisects_writes_bisect_json_and_edits_the_ledger(fake_env, tmp_path, capsys):
    issue = "xla-local-window-ignored-without-mask"
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(set_range(LEDGER.read_text(), issue, "<0.8.3"))  # as the matrix left it
    argv = [*BASE, "--good", "0.8.3", "--bad", "0.7.2", "--out", str(tmp_path / "out")]
    assert main([*argv, "--known-issue", issue, "--ledger", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "first fixed release: 0.8.2 (last bad: 0.8.1)" in out
    assert "installs made: 0.7.2 (2 s), 0.8.1 (2 s), 0.8.2 (2 s); environments reused: 0.8.3" in out
    assert '\n-jax = "<0.8.3"\n+jax = "<0.8.2"\n' in out  # the diff is printed
    assert entry_range(ledger.read_text(), issue) == "<0.8.2"
    body = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert body["first"] == ["0.8.2"] and body["direction"] == "fix" and body["impl"] == "xla"
    assert body["known_issue"]["jax_after"] == "<0.8.2"
    assert [s["version"] for s in body["steps"]] == ["0.8.3", "0.7.2", "0.8.1", "0.8.2"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--good", "0.8.3", "--bad", "0.8.3"], "error: --good and --bad are both 0.8.3"),
        (["--good", "0.8.4", "--bad", "0.7.2"], "error: --good 0.8.4 is not a known jax release"),
        (
            ["--good", "0.7.2", "--bad", "0.8.3"],
            "error: the check fails at the --good end 0.7.2 (known, ratio 1)",
        ),
        (
            ["--good", "0.8.3", "--bad", "0.7.2", "--known-issue", "nope"],
            "error: no ledger entry with id 'nope'",
        ),
        (
            ["--good", "0.8.3", "--bad", "0.7.2", "--versions", "0.7.2,x"],
            "error: --versions: 'x' is not a release",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fake_env, tmp_path, capsys, extra, expected):
    assert main([*BASE, "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1
    assert not (tmp_path / "bisect.json").exists()


def test_the_nox_session_documents_the_options():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    session = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "bisect")
    assert any("nox.session" in ast.unparse(d) for d in session.decorator_list)
    for option in (
        "--impl",
        "--case",
        "--check",
        "--good",
        "--bad",
        "--versions",
        "--known-issue",
        "--library",
        "--jax",
    ):
        assert option in ast.get_docstring(session)


@pytest.mark.skipif(nox_path() is None, reason="nox is not installed in this environment")
def test_the_nox_session_without_its_options_fails_in_one_line(tmp_path):
    listed = subprocess.run(
        [nox_path(), "-s", "bisect", "-l", "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert [s["name"] for s in json.loads(listed.stdout)] == ["bisect"]
    done = subprocess.run(
        [nox_path(), "--envdir", str(tmp_path), "-s", "bisect", "--", "--impl", "xla", "--good", "0.8.2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    aborted = [line for line in done.stderr.splitlines() if "aborted" in line]
    assert len(aborted) == 1 and "give --case, --bad: nox -s bisect -- --impl xla" in aborted[0]


def test_the_command_line_documents_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["bisect", "-h"])
    text = capsys.readouterr().out
    for option in (
        "--impl",
        "--case",
        "--check",
        "--good",
        "--bad",
        "--versions",
        "--known-issue",
        "--ledger",
        "--library",
        "--jax",
    ):
        assert option in text


@pytest.mark.slow
@pytest.mark.skipif(nox_path() is None, reason="nox is not installed in this environment")
def test_a_real_bisection_between_two_installed_releases(tmp_path):
    """jax 0.8.1 ignores local_window_size without a mask (jax#32300), 0.8.2 does not. Installs both
    into .nox/ (reused when there: about 10 s each from the installer's cache) and runs the case twice."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "reports", *BASE[:-4], "--versions", "0.8.1,0.8.2", "--nox", nox_path()]
        + ["--good", "0.8.2", "--bad", "0.8.1", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first fixed release: 0.8.2 (last bad: 0.8.1)" in done.stdout
    body = json.loads((tmp_path / "bisect.json").read_text())
    verdicts = {s["version"]: (s["verdict"], s["ratio"]) for s in body["steps"]}
    assert verdicts["0.8.1"][0] == "known" and verdicts["0.8.1"][1] > 1e3
    assert verdicts["0.8.2"] == ("pass", pytest.approx(1.0, abs=0.5))
    assert (tmp_path / "jax-0.8.2" / "results.jsonl").exists()
